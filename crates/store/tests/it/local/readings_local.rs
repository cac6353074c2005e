//! The one reader of stored readings ([`tidemark_store::read`]) against DynamoDB Local, across
//! every layout a device can have had: single items in one partition, single items over
//! shards, packed slots in one partition and packed slots over shards, with layout changes
//! between them. What the API pages for clients and the aggregator and `tidemark-admin` walk
//! come through this code, so it is tested here once for every layout.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::packed::SlotReadings;
use tidemark_schema::{
    DeviceId, Layout, LayoutHistory, MetricName, ReadingItem, SlotLen, Timestamp, field, keys,
};
use tidemark_store::read::{
    Queries, QuerySpec, SkRange, interleaved_page, readings, walk_readings,
};
use tidemark_store::retry::RetryPolicy;
use tidemark_store::write::slots::{SlotKey, SlotWriter};
use tidemark_testkit::TestTable;

type Reading = (Timestamp, BTreeMap<MetricName, f64>);

fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

fn device() -> DeviceId {
    DeviceId::new("walker").unwrap()
}

fn m(k: &str) -> MetricName {
    MetricName::new(k).unwrap()
}

/// Single until 10:10, single over 4 shards until 10:20, packed:60 until 10:30, packed:300
/// over 3 shards from then on.
fn history() -> LayoutHistory {
    let sharded = Layout {
        partitions: 4,
        slot: None,
    };
    let packed_partitioned = Layout {
        partitions: 3,
        slot: Some(SlotLen::new(300).unwrap()),
    };
    LayoutHistory::EMPTY
        .with_layout(ts("2026-04-20T10:10:00Z"), sharded)
        .unwrap()
        .with_layout(
            ts("2026-04-20T10:20:00Z"),
            Layout::packed(SlotLen::new(60).unwrap()),
        )
        .unwrap()
        .with_layout(ts("2026-04-20T10:30:00Z"), packed_partitioned)
        .unwrap()
}

/// A reading every 7 s from 10:00 to 10:40, with one or two metrics (some timestamps carry
/// a second metric written by a later record, as a gateway's per-sensor records are).
fn fleet_readings() -> Vec<Reading> {
    let first = ts("2026-04-20T10:00:00Z");
    (0..(40 * 60 / 7))
        .map(|i| {
            let at = first.plus_micros(i * 7_000_000).unwrap();
            let mut metrics = BTreeMap::from([(m("t"), 20.0 + i as f64 / 8.0)]);
            if i % 3 == 0 {
                metrics.insert(m("h"), 40.0 + i as f64);
            }
            (at, metrics)
        })
        .collect()
}

/// Stores `all` where `history` puts them: single items put whole, packed ones through the
/// slot writer (each timestamp's second metric in a second write, to another part when the
/// first is sealed) as ingest writes them, in runs of two slots whose first part carries the
/// second's readings, but for the slots before 10:25, written one at a time as before
/// parts carried readings.
async fn store(t: &TestTable, history: &LayoutHistory, all: &[Reading]) {
    let writer = SlotWriter::new(t.client.clone(), &t.name, RetryPolicy::default());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut slots: BTreeMap<(String, Timestamp), (SlotReadings, SlotReadings)> = BTreeMap::new();
    for (at, metrics) in all {
        let layout = history.layout_at(*at);
        let pk = keys::reading_pk(&device(), layout.partition_of(*at));
        match layout.slot {
            None => {
                let item = ReadingItem {
                    pk,
                    sk: keys::reading_sk(*at),
                    metrics: metrics.clone(),
                    metadata: None,
                    ttl: i64::MAX / 2,
                    arrived_at: None,
                };
                t.put(&item).await;
            }
            Some(len) => {
                let (first, second) = slots.entry((pk, len.start_of(*at))).or_default();
                let mut metrics = metrics.clone();
                if let Some(h) = metrics.remove(&m("h")) {
                    second.insert(*at, BTreeMap::from([(m("h"), h)]));
                }
                first.insert(*at, metrics);
            }
        }
    }
    let mut runs: Vec<(SlotKey, SlotReadings, SlotReadings)> = Vec::new();
    let mut joined = false;
    for ((pk, start), (first, second)) in slots {
        let len = history.layout_at(start).slot.expect("a packed slot");
        if let Some((run, f, s)) = runs.last_mut()
            && !joined
            && run.pk == pk
            && run.len == len
            && len.next(run.start) == start
            && start >= ts("2026-04-20T10:25:00Z")
        {
            f.extend(first);
            s.extend(second);
            joined = true;
            continue;
        }
        joined = false;
        runs.push((SlotKey { pk, start, len }, first, second));
    }
    for (key, first, second) in runs {
        writer
            .write(&key, &first, i64::MAX / 2, deadline)
            .await
            .unwrap();
        writer
            .write(&key, &second, i64::MAX / 2, deadline)
            .await
            .unwrap();
    }
}

/// Readings stored in a part of the slot before their own.
async fn carried(t: &TestTable, history: &LayoutHistory) -> usize {
    let mut n = 0;
    for item in t.scan().await {
        let Ok(part) = tidemark_store::write::slots::read_part(&item) else {
            continue;
        };
        let len = history.layout_at(part.start).slot.expect("a packed slot");
        n += part
            .readings
            .keys()
            .filter(|at| len.start_of(**at) != part.start)
            .count();
    }
    n
}

async fn walk(
    t: &TestTable,
    history: &LayoutHistory,
    from: &str,
    to: &str,
    newest_first: bool,
    limit: Option<usize>,
) -> (Vec<Reading>, tidemark_store::read::Walked) {
    let queries = Queries::new(t.client.clone(), &t.name);
    let mut out = Vec::new();
    let walked = walk_readings(
        &queries,
        &device(),
        history,
        ts(from),
        ts(to),
        newest_first,
        limit,
        |at, metrics| out.push((at, metrics)),
    )
    .await
    .unwrap();
    (out, walked)
}

fn between(all: &[Reading], from: &str, to: &str) -> Vec<Reading> {
    all.iter()
        .filter(|(at, _)| ts(from) <= *at && *at <= ts(to))
        .cloned()
        .collect()
}

#[tokio::test]
async fn a_walk_reads_every_reading_once_in_time_order_across_every_layout() {
    let t = TestTable::new("walk-layouts").await;
    let (history, all) = (history(), fleet_readings());
    // GIVEN 40 minutes of readings stored single, partitioned, packed and packed over partitions,
    // some of them in the part of the slot before their own
    store(&t, &history, &all).await;
    assert!(carried(&t, &history).await > 20);

    // WHEN the whole range is walked, oldest first and newest first
    let (forward, walked) = walk(
        &t,
        &history,
        "2026-04-20T09:00:00Z",
        "2026-04-20T11:00:00Z",
        false,
        None,
    )
    .await;
    let (backward, _) = walk(
        &t,
        &history,
        "2026-04-20T09:00:00Z",
        "2026-04-20T11:00:00Z",
        true,
        None,
    )
    .await;

    // THEN every reading comes once, with both its metrics, in time order
    assert_eq!(forward.len(), all.len());
    assert_eq!(forward, all);
    assert_eq!((walked.readings, walked.unreadable), (all.len(), 0));
    let mut reversed = all.clone();
    reversed.reverse();
    assert_eq!(backward, reversed);

    // AND a range inside one epoch, or cutting through slots and epochs, holds exactly its own
    for (from, to) in [
        ("2026-04-20T10:03:00Z", "2026-04-20T10:05:00Z"),
        ("2026-04-20T10:08:31Z", "2026-04-20T10:22:29Z"),
        ("2026-04-20T10:24:59Z", "2026-04-20T10:33:01Z"),
    ] {
        let (got, _) = walk(&t, &history, from, to, false, None).await;
        assert_eq!(got, between(&all, from, to), "{from}..{to}");
    }
}

#[tokio::test]
async fn a_limited_walk_gives_the_first_readings_in_its_direction_across_partitions_and_epochs() {
    let t = TestTable::new("walk-limit").await;
    let (history, all) = (history(), fleet_readings());
    store(&t, &history, &all).await;
    // The 50 newest up to 10:31 come from packed:300 over shards and packed:60 before it; the
    // 70 oldest from 10:08 cross from one partition into four.
    let (newest, _) = walk(
        &t,
        &history,
        "2026-04-20T09:00:00Z",
        "2026-04-20T10:31:00Z",
        true,
        Some(50),
    )
    .await;
    let mut want = between(&all, "2026-04-20T09:00:00Z", "2026-04-20T10:31:00Z");
    want.reverse();
    want.truncate(50);
    assert_eq!(newest, want);

    let (oldest, walked) = walk(
        &t,
        &history,
        "2026-04-20T10:08:00Z",
        "2026-04-20T11:00:00Z",
        false,
        Some(70),
    )
    .await;
    let mut want = between(&all, "2026-04-20T10:08:00Z", "2026-04-20T11:00:00Z");
    want.truncate(70);
    assert_eq!((oldest, walked.readings), (want, 70));

    // One reading: the newest of the device.
    let (one, _) = walk(
        &t,
        &history,
        "2026-04-20T09:00:00Z",
        "2026-04-20T11:00:00Z",
        true,
        Some(1),
    )
    .await;
    assert_eq!(one, vec![all.last().unwrap().clone()]);
}

#[tokio::test]
async fn an_unreadable_item_is_skipped_and_counted_and_the_rest_is_read() {
    let t = TestTable::new("walk-unreadable").await;
    let (history, all) = (history(), fleet_readings());
    store(&t, &history, &all).await;
    // GIVEN a single reading item without metrics and a slot part whose bytes do not decode
    let single_at = ts("2026-04-20T10:02:30Z");
    let slot_start = ts("2026-04-20T10:25:00Z");
    for (pk, sk, extra) in [
        (
            keys::reading_pk(&device(), None),
            keys::reading_sk(single_at),
            None,
        ),
        (
            keys::reading_pk(&device(), None),
            keys::slot_sk(slot_start, 7),
            Some((field::PACKED, AttributeValue::B(Blob::new(vec![9, 9, 9])))),
        ),
    ] {
        let mut item = tidemark_store::Item::from([
            ("pk".to_owned(), AttributeValue::S(pk)),
            ("sk".to_owned(), AttributeValue::S(sk)),
        ]);
        if let Some((k, v)) = extra {
            item.insert(k.to_owned(), v);
        }
        t.put_item(item).await;
    }
    let (got, walked) = walk(
        &t,
        &history,
        "2026-04-20T09:00:00Z",
        "2026-04-20T11:00:00Z",
        false,
        None,
    )
    .await;
    // THEN both are counted, every stored reading still comes (a bad part hides none of its
    // slot's good parts)
    assert_eq!(walked.unreadable, 2);
    assert_eq!(got, all);
}

#[tokio::test]
async fn a_page_of_the_merged_sources_ends_inside_a_slot_and_the_next_resumes_there() {
    let t = TestTable::new("walk-pages").await;
    let (history, all) = (history(), fleet_readings());
    store(&t, &history, &all).await;
    // The API's way: sources of one packed epoch over three shards, paged through their
    // positions one reading and 11 readings at a time, both ways (a page may end on a
    // reading carried in the slot before its own).
    let queries = Queries::new(t.client.clone(), &t.name);
    let seg = history.segments(ts("2026-04-20T10:30:00Z"), ts("2026-04-20T11:00:00Z"))[0];
    for (limit, forward) in [(11, true), (11, false), (1, true), (1, false)] {
        let mut parts: Vec<(String, Option<Vec<String>>)> = seg
            .partitions()
            .into_iter()
            .map(|s| (format!("{s:?}"), None))
            .collect();
        let mut got = Vec::new();
        loop {
            let sources = parts
                .into_iter()
                .filter_map(|(label, after)| {
                    let shard = seg
                        .partitions()
                        .into_iter()
                        .find(|s| format!("{s:?}") == label)?;
                    let spec: QuerySpec =
                        readings::partition_query(&device(), &seg, shard, forward, true);
                    assert!(matches!(spec.range, SkRange::Between(..)));
                    let after = spec.resume(after).unwrap()?;
                    Some(readings::source(&seg, label, spec, after).unwrap())
                })
                .collect();
            let page = interleaved_page(&queries, sources, limit, |_| true)
                .await
                .unwrap();
            assert!(page.items.len() <= limit);
            got.extend(page.items.into_iter().map(|i| {
                let r: ReadingItem = tidemark_store::from_item(i).unwrap();
                (
                    Timestamp::parse_canonical(&r.sk[keys::READING_PREFIX.len()..]).unwrap(),
                    r.metrics,
                )
            }));
            if page.rest.is_empty() {
                break;
            }
            assert!(
                got.len() <= all.len(),
                "pages never end ({limit}, {forward})"
            );
            parts = page.rest;
        }
        let mut want = between(&all, "2026-04-20T10:30:00Z", "2026-04-20T11:00:00Z");
        if !forward {
            want.reverse();
        }
        assert_eq!(got, want, "{limit} a page, forward: {forward}");
    }
}
