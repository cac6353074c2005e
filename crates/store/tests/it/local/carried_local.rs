//! Parts that carry their next slot's readings (docs/design.md §4), against DynamoDB Local: a
//! batching window opens when records come, so it almost always spans two slots, and the
//! slot writer stores what it has of both in one part of the first. These tests follow one
//! device's windows through the writer and read them back through the one reader.

use std::collections::BTreeMap;
use std::time::Duration;

use tidemark_schema::packed::SlotReadings;
use tidemark_schema::{
    DeviceId, Layout, LayoutHistory, MetricName, SlotItem, SlotLen, Timestamp, keys,
    metadata_bitmaps, packed,
};
use tidemark_store::read::{Queries, walk_readings};
use tidemark_store::retry::RetryPolicy;
use tidemark_store::write::slots::{SlotKey, SlotWrite, SlotWriter, read_part};
use tidemark_testkit::TestTable;

fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

fn len() -> SlotLen {
    SlotLen::new(300).unwrap()
}

fn device() -> DeviceId {
    DeviceId::new("carrier").unwrap()
}

fn history() -> LayoutHistory {
    LayoutHistory::EMPTY
        .with_layout(ts("2026-04-20T00:00:00Z"), Layout::packed(len()))
        .unwrap()
}

/// The slot starting at `start` (`HH:MM:SS` on the test's day).
fn key(start: &str) -> SlotKey {
    SlotKey {
        pk: keys::reading_pk(&device(), None),
        start: ts(&format!("2026-04-20T{start}Z")),
        len: len(),
    }
}

/// Readings of metric `t` at `HH:MM:SS` times.
fn readings(at: &[(&str, f64)]) -> SlotReadings {
    at.iter()
        .map(|(t, v)| {
            (
                ts(&format!("2026-04-20T{t}Z")),
                BTreeMap::from([(MetricName::new("t").unwrap(), *v)]),
            )
        })
        .collect()
}

async fn write(t: &TestTable, start: &str, batch: &SlotReadings) -> SlotWrite {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    SlotWriter::new(t.client.clone(), &t.name, RetryPolicy::default())
        .write(&key(start), batch, i64::MAX / 2, deadline)
        .await
        .unwrap()
}

/// Each stored part, by (slot start, part number), with its readings and version.
async fn parts(t: &TestTable) -> BTreeMap<(Timestamp, u16), (SlotReadings, u64)> {
    t.scan()
        .await
        .iter()
        .map(|i| {
            let p = read_part(i).unwrap();
            ((p.start, p.part), (p.readings, p.version))
        })
        .collect()
}

/// The readings the reader gives in `[from, to]` (`HH:MM:SS`), in the walk's order.
async fn walk(t: &TestTable, from: &str, to: &str, newest_first: bool) -> Vec<(Timestamp, f64)> {
    let queries = Queries::new(t.client.clone(), &t.name);
    let mut out = Vec::new();
    walk_readings(
        &queries,
        &device(),
        &history(),
        ts(&format!("2026-04-20T{from}Z")),
        ts(&format!("2026-04-20T{to}Z")),
        newest_first,
        None,
        |at, m| out.push((at, m.values().copied().sum())),
    )
    .await
    .unwrap();
    out
}

/// Every reading the reader gives, checked to come once each, in order, both ways.
async fn read_back(t: &TestTable) -> SlotReadings {
    let forward = walk(t, "13:00:00", "16:00:00", false).await;
    let mut backward = walk(t, "13:00:00", "16:00:00", true).await;
    assert!(
        forward.windows(2).all(|w| w[0].0 < w[1].0),
        "oldest first, once each"
    );
    backward.reverse();
    assert_eq!(
        backward, forward,
        "newest first is the same readings reversed"
    );
    forward
        .into_iter()
        .map(|(at, v)| (at, BTreeMap::from([(MetricName::new("t").unwrap(), v)])))
        .collect()
}

#[tokio::test]
async fn a_window_across_a_slot_boundary_is_one_part_and_the_next_window_corrects_it_in_place() {
    let t = TestTable::new("carry-window").await;
    // GIVEN a window from 14:03 to 14:08 (slots 14:00 and 14:05): one write, one part
    let first = readings(&[
        ("14:03:00", 1.0),
        ("14:04:00", 2.0),
        ("14:05:00", 3.0),
        ("14:06:00", 4.0),
    ]);
    assert!(write(&t, "14:00:00", &first).await.written);
    let stored = parts(&t).await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(stored[&(ts("2026-04-20T14:00:00Z"), 0)].0, first);

    // WHEN the next window (14:08 to 14:13) resends 14:06 with a new value and brings 14:07
    // and 14:11, and is then replayed
    let second = readings(&[("14:06:00", 40.0), ("14:07:00", 5.0), ("14:11:00", 6.0)]);
    assert!(write(&t, "14:05:00", &second).await.written);
    let replay = write(&t, "14:05:00", &second).await;

    // THEN 14:06 is corrected where it was, the new readings start the 14:05 slot's part,
    // the replay writes nothing, and every reading reads back once, in order, both ways
    assert!(!replay.written);
    let stored = parts(&t).await;
    assert_eq!(stored.len(), 2);
    let (carrier, version) = &stored[&(ts("2026-04-20T14:00:00Z"), 0)];
    assert_eq!(
        (carrier, *version),
        (
            &readings(&[
                ("14:03:00", 1.0),
                ("14:04:00", 2.0),
                ("14:05:00", 3.0),
                ("14:06:00", 40.0),
            ]),
            2
        )
    );
    assert_eq!(
        stored[&(ts("2026-04-20T14:05:00Z"), 0)].0,
        readings(&[("14:07:00", 5.0), ("14:11:00", 6.0)])
    );
    let all = read_back(&t).await;
    assert_eq!(
        all,
        readings(&[
            ("14:03:00", 1.0),
            ("14:04:00", 2.0),
            ("14:05:00", 3.0),
            ("14:06:00", 40.0),
            ("14:07:00", 5.0),
            ("14:11:00", 6.0),
        ])
    );
}

#[tokio::test]
async fn readings_of_a_slot_that_has_parts_go_to_them_not_to_the_part_before() {
    let t = TestTable::new("carry-late").await;
    // GIVEN the 14:05 slot has a part already
    write(&t, "14:05:00", &readings(&[("14:07:00", 1.0)])).await;
    // WHEN a late window brings readings of 14:04 and 14:06
    write(
        &t,
        "14:00:00",
        &readings(&[("14:04:00", 2.0), ("14:06:00", 3.0)]),
    )
    .await;
    // THEN each is in its own slot's part, where the next write of that slot looks first
    let stored = parts(&t).await;
    assert_eq!(
        stored[&(ts("2026-04-20T14:00:00Z"), 0)].0,
        readings(&[("14:04:00", 2.0)])
    );
    assert_eq!(
        stored[&(ts("2026-04-20T14:05:00Z"), 0)].0,
        readings(&[("14:06:00", 3.0), ("14:07:00", 1.0)])
    );
}

#[tokio::test]
async fn a_window_crossing_the_hour_is_one_part_and_its_readings_read_back_in_their_hours() {
    let t = TestTable::new("carry-hour").await;
    // GIVEN a window from 14:57 to 15:02
    let w = readings(&[("14:57:00", 1.0), ("14:59:59", 2.0), ("15:00:00", 3.0)]);
    write(&t, "14:55:00", &w).await;
    // THEN one part holds it, and a read of 15:00 onwards finds 15:00 in it
    assert_eq!(parts(&t).await.len(), 1);
    let got = walk(&t, "15:00:00", "15:59:59", false).await;
    assert_eq!(got, [(ts("2026-04-20T15:00:00Z"), 3.0)]);
}

#[tokio::test]
async fn a_value_two_racing_writers_put_in_two_parts_reads_as_the_later_parts_and_a_correction_rewrites_both()
 {
    let t = TestTable::new("carry-race").await;
    // GIVEN 14:06 carried in the 14:00 slot's part, and (as a writer of the 14:05 slot that
    // read before that part was written would leave it) in the 14:05 slot's part too
    write(
        &t,
        "14:00:00",
        &readings(&[("14:04:00", 1.0), ("14:06:00", 2.0)]),
    )
    .await;
    let start = ts("2026-04-20T14:05:00Z");
    let racer = readings(&[("14:06:00", 20.0), ("14:07:00", 3.0)]);
    t.put(&SlotItem {
        pk: keys::reading_pk(&device(), None),
        sk: keys::slot_sk(start, 0),
        packed: packed::encode(start, &racer).unwrap(),
        reading_count: 2,
        version: 1,
        ttl: i64::MAX / 2,
        sealed: false,
        full: false,
        metadata: metadata_bitmaps(&racer, &Default::default()),
        arrived_at: None,
    })
    .await;
    // THEN readers take the later part's value, once
    let all = read_back(&t).await;
    assert_eq!(
        all,
        readings(&[("14:04:00", 1.0), ("14:06:00", 20.0), ("14:07:00", 3.0)])
    );
    // WHEN 14:06 is corrected
    write(&t, "14:00:00", &readings(&[("14:06:00", 7.0)])).await;
    // THEN both copies hold the correction
    let stored = parts(&t).await;
    for slot in ["2026-04-20T14:00:00Z", "2026-04-20T14:05:00Z"] {
        assert_eq!(
            stored[&(ts(slot), 0)].0[&ts("2026-04-20T14:06:00Z")],
            BTreeMap::from([(MetricName::new("t").unwrap(), 7.0)]),
            "{slot}"
        );
    }
    let all = read_back(&t).await;
    assert_eq!(all[&ts("2026-04-20T14:06:00Z")].values().next(), Some(&7.0));
}
