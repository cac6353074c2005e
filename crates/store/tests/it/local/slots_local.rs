//! Packed slot writes against DynamoDB Local: concurrent writers, replays, corrections and
//! unreadable items.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::packed::{self, SlotReadings};
use tidemark_schema::{MetricName, SlotLen, Timestamp, field};
use tidemark_store::StoreError;
use tidemark_store::retry::RetryPolicy;
use tidemark_store::write::slots::{Content, SlotKey, SlotWrite, SlotWriter, read_part};
use tidemark_testkit::TestTable;

fn start() -> Timestamp {
    Timestamp::parse_rfc3339("2026-04-20T14:00:00Z").unwrap()
}

fn key() -> SlotKey {
    SlotKey {
        pk: "DEVICE#d".into(),
        start: start(),
        len: SlotLen::new(3600).unwrap(),
    }
}

fn readings(seconds: impl IntoIterator<Item = i64>, metric: &str, value: f64) -> SlotReadings {
    seconds
        .into_iter()
        .map(|s| {
            (
                start().plus_micros(s * 1_000_000).unwrap(),
                BTreeMap::from([(MetricName::new(metric).unwrap(), value)]),
            )
        })
        .collect()
}

fn deadline() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(60)
}

/// One slot write with the store's backoff and a minute to finish.
async fn write(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    batch: &SlotReadings,
) -> Result<SlotWrite, StoreError> {
    SlotWriter::new(client.clone(), table, RetryPolicy::default())
        .write(&key(), batch, 0, deadline())
        .await
}

async fn stored(t: &TestTable) -> (SlotReadings, u64) {
    let items = t.scan().await;
    assert_eq!(items.len(), 1);
    let AttributeValue::B(b) = &items[0][field::PACKED] else {
        panic!("packed readings are binary");
    };
    let AttributeValue::N(v) = &items[0][field::VERSION] else {
        panic!("a version");
    };
    (
        packed::decode(start(), b.as_ref()).unwrap(),
        v.parse().unwrap(),
    )
}

#[tokio::test]
async fn concurrent_writers_of_one_slot_lose_no_reading_and_no_metric() {
    let t = TestTable::new("slots-race").await;
    // GIVEN eight writers racing into one slot: each its own readings, and each one metric of
    // ten shared timestamps (a gateway's per-sensor records split over shards)
    let writes = (0..8i64).map(|w| {
        let mut mine = readings((100 + w * 10)..(110 + w * 10), "own", w as f64);
        mine.extend(readings(0..10, &format!("m{w}"), w as f64));
        let client = t.client.clone();
        let name = t.name.clone();
        tokio::spawn(async move { write(&client, &name, &mine).await.unwrap() })
    });
    let results = futures::future::join_all(writes).await;
    // THEN every write went through and the slot holds all 80 own readings and the ten shared
    // ones with all eight metrics
    assert!(results.iter().all(|r| r.as_ref().unwrap().written));
    let (slot, version) = stored(&t).await;
    assert_eq!(slot.len(), 90);
    assert!((0..10).all(|s| slot[&start().plus_micros(s * 1_000_000).unwrap()].len() == 8));
    assert_eq!(version, 8, "one version per successful write");
}

#[tokio::test]
async fn a_replayed_batch_writes_nothing_and_a_correction_wins() {
    let t = TestTable::new("slots-replay").await;
    let batch = readings(0..60, "temperature", 21.5);
    let first = write(&t.client, &t.name, &batch).await.unwrap();
    assert!(first.written);
    // WHEN the same batch comes again THEN nothing is written (the version stays)
    let again = write(&t.client, &t.name, &batch).await.unwrap();
    assert!(!again.written);
    assert_eq!(stored(&t).await.1, 1);
    // WHEN one reading is corrected THEN its value wins and the other 59 stay
    let fix = readings(7..8, "temperature", 22.0);
    write(&t.client, &t.name, &fix).await.unwrap();
    let (slot, version) = stored(&t).await;
    assert_eq!((slot.len(), version), (60, 2));
    let seventh = &slot[&start().plus_micros(7_000_000).unwrap()];
    assert_eq!(seventh[&MetricName::new("temperature").unwrap()], 22.0);
}

#[tokio::test]
async fn an_unreadable_part_is_left_as_it_is_and_the_slot_goes_on_past_it() {
    let t = TestTable::new("slots-corrupt").await;
    t.client
        .put_item()
        .table_name(&t.name)
        .item("pk", AttributeValue::S(key().pk))
        .item(
            "sk",
            AttributeValue::S(tidemark_schema::keys::slot_sk(start(), 0)),
        )
        .item(field::PACKED, AttributeValue::B(Blob::new(vec![9, 9, 9])))
        .item(field::VERSION, AttributeValue::N("3".into()))
        .send()
        .await
        .unwrap();
    // WHEN readings are written into the slot whose part 0 does not decode
    let batch = readings(0..3, "temperature", 21.5);
    let w = write(&t.client, &t.name, &batch).await.unwrap();
    // THEN part 0 is untouched, counted, and the readings are in part 1
    assert_eq!((w.written, w.unreadable_parts, w.parts), (true, 1, 2));
    let items = t.scan().await;
    assert_eq!(items.len(), 2);
    assert_eq!(
        items[0][field::PACKED],
        AttributeValue::B(Blob::new(vec![9, 9, 9]))
    );
    let AttributeValue::B(b) = &items[1][field::PACKED] else {
        panic!("packed readings are binary");
    };
    assert_eq!(packed::decode(start(), b.as_ref()).unwrap(), batch);
    // AND a replay finds them there: nothing written
    assert!(!write(&t.client, &t.name, &batch).await.unwrap().written);
}

#[tokio::test]
async fn metadata_is_kept_per_reading_and_a_later_record_replaces_it() {
    let t = TestTable::new("slots-metadata").await;
    let writer = SlotWriter::new(t.client.clone(), &t.name, RetryPolicy::default());
    let at = |s: i64| start().plus_micros(s * 1_000_000).unwrap();
    let content = |secs: &[i64], meta: &[(i64, &str)]| Content {
        readings: readings(secs.iter().copied(), "t", 1.0),
        metadata: meta.iter().map(|(s, m)| (at(*s), m.to_string())).collect(),
    };
    let first = content(&[0, 1], &[(0, r#"{"fw":"1"}"#), (1, r#"{"fw":"1"}"#)]);
    writer
        .write_content(&key(), &first, 0, deadline())
        .await
        .unwrap();
    // WHEN reading 0 comes again with other metadata and reading 1 without any
    let later = content(&[0, 1], &[(0, r#"{"fw":"2"}"#)]);
    let w = writer
        .write_content(&key(), &later, 0, deadline())
        .await
        .unwrap();
    assert!(w.written);
    // THEN 0 has the new metadata and 1 keeps its own; an exact resend writes nothing
    let items = t.scan().await;
    let c = read_part(&items[0]).unwrap();
    assert_eq!(c.metadata[&at(0)], r#"{"fw":"2"}"#);
    assert_eq!(c.metadata[&at(1)], r#"{"fw":"1"}"#);
    let again = writer
        .write_content(&key(), &later, 0, deadline())
        .await
        .unwrap();
    assert!(!again.written);
}

/// Every part of the slot: (part number, readings, sealed).
async fn parts(t: &TestTable) -> Vec<(u16, SlotReadings, bool)> {
    let mut out: Vec<_> = t
        .scan()
        .await
        .into_iter()
        .map(|item| {
            let AttributeValue::S(sk) = &item["sk"] else {
                panic!("a string sort key")
            };
            let AttributeValue::B(b) = &item[field::PACKED] else {
                panic!("packed readings are binary");
            };
            (
                sk.rsplit('#').next().unwrap().parse().unwrap(),
                packed::decode(start(), b.as_ref()).unwrap(),
                item.get(field::SEALED) == Some(&AttributeValue::Bool(true)),
            )
        })
        .collect();
    out.sort_by_key(|p| p.0);
    out
}

#[tokio::test]
async fn a_slot_that_outgrows_its_part_continues_in_a_sealed_chain_holding_each_reading_once() {
    let t = TestTable::new("slots-split").await;
    let writer = SlotWriter {
        part_bytes: 300,
        ..SlotWriter::new(t.client.clone(), &t.name, RetryPolicy::default())
    };
    // GIVEN batches of 40 readings with values that do not compress, written one after another
    let batch = |from: i64| -> SlotReadings {
        (from..from + 40)
            .map(|s| {
                (
                    start().plus_micros(s * 1_000_000).unwrap(),
                    BTreeMap::from([(MetricName::new("t").unwrap(), s as f64 * 1.37)]),
                )
            })
            .collect()
    };
    for from in [0, 40, 80, 120] {
        writer
            .write(&key(), &batch(from), 0, deadline())
            .await
            .unwrap();
    }
    // THEN the slot is several parts, all under the limit, every one but the last sealed,
    // and together they hold each of the 160 readings exactly once
    let ps = parts(&t).await;
    assert!(ps.len() > 2, "{} parts", ps.len());
    for (n, r, sealed) in &ps {
        assert!(packed::encode(start(), r).unwrap().len() <= 300, "part {n}");
        assert_eq!(*sealed, *n != ps.last().unwrap().0, "part {n}");
    }
    let total: usize = ps.iter().map(|p| p.1.len()).sum();
    assert_eq!(total, 160);
    // WHEN the first batch is replayed THEN nothing is written; WHEN one of its readings is
    // corrected THEN the sealed part holding it takes the correction, and no part is added
    let again = writer
        .write(&key(), &batch(0), 0, deadline())
        .await
        .unwrap();
    assert!(!again.written);
    let fix = readings(3..4, "t", -1.0);
    let fixed = writer.write(&key(), &fix, 0, deadline()).await.unwrap();
    assert_eq!((fixed.readings, fixed.parts), (160, ps.len()));
    let after = parts(&t).await;
    let holder = after
        .iter()
        .find(|p| p.1.contains_key(&start().plus_micros(3_000_000).unwrap()))
        .unwrap();
    assert!(holder.2, "the reading was in a sealed part");
    assert_eq!(
        holder.1[&start().plus_micros(3_000_000).unwrap()][&MetricName::new("t").unwrap()],
        -1.0
    );
    assert_eq!(after.iter().map(|p| p.1.len()).sum::<usize>(), 160);
}

#[tokio::test]
async fn racing_writers_past_the_part_limit_still_hold_every_reading_once() {
    let t = TestTable::new("slots-split-race").await;
    let writes = (0..6i64).map(|w| {
        let writer = SlotWriter {
            part_bytes: 200,
            ..SlotWriter::new(t.client.clone(), &t.name, RetryPolicy::default())
        };
        // Each writer its own 20 readings, plus 5 every writer sends (a replay racing).
        let mut mine: SlotReadings = (0..20)
            .map(|i| {
                (
                    start().plus_micros((100 + w * 20 + i) * 1_000_000).unwrap(),
                    BTreeMap::from([(MetricName::new("t").unwrap(), (w * 20 + i) as f64 * 0.7)]),
                )
            })
            .collect();
        mine.extend(readings(0..5, "shared", 1.5));
        tokio::spawn(async move { writer.write(&key(), &mine, 0, deadline()).await.unwrap() })
    });
    futures::future::join_all(writes).await;
    let ps = parts(&t).await;
    let mut seen = std::collections::BTreeSet::new();
    for (_, r, _) in &ps {
        for at in r.keys() {
            assert!(seen.insert(*at), "{at} is in two parts");
        }
    }
    assert_eq!(seen.len(), 6 * 20 + 5);
    assert!(
        ps.iter().rev().skip(1).all(|p| p.2),
        "all but the last sealed"
    );
}

/// The bytes DynamoDB counts for an item: names and strings by their bytes, binaries by their
/// length, numbers by their digits (about one byte per two, plus one), booleans one, and a
/// map three plus one per entry.
fn item_size(item: &tidemark_store::Item) -> usize {
    fn value(v: &AttributeValue) -> usize {
        match v {
            AttributeValue::S(s) => s.len(),
            AttributeValue::B(b) => b.as_ref().len(),
            AttributeValue::N(n) => n.len().div_ceil(2) + 1,
            AttributeValue::Bool(_) => 1,
            AttributeValue::M(m) => {
                3 + m.iter().map(|(k, v)| k.len() + value(v) + 1).sum::<usize>()
            }
            other => panic!("unexpected attribute {other:?}"),
        }
    }
    item.iter().map(|(k, v)| k.len() + value(v)).sum()
}

/// The slot as a reader joins its parts: every (timestamp, metric) value with the number of
/// parts holding it, and each timestamp's metadata from the highest part carrying it. Checks
/// on the way that every part, as stored, is under `cap` and so is its worst case.
async fn joined(
    t: &TestTable,
    cap: usize,
) -> (
    BTreeMap<(Timestamp, MetricName), (f64, usize)>,
    BTreeMap<Timestamp, String>,
    usize,
) {
    let mut items = t.scan().await;
    items.sort_by_key(|i| {
        let AttributeValue::S(sk) = &i["sk"] else {
            panic!("a string sort key")
        };
        sk.rsplit('#').next().unwrap().parse::<u16>().unwrap()
    });
    let mut values = BTreeMap::new();
    let mut metadata = BTreeMap::new();
    for item in &items {
        let size = item_size(item);
        assert!(size <= cap, "a part of {size} bytes (cap {cap})");
        let part = read_part(item).unwrap();
        let bound = tidemark_schema::item_bound(start(), &part.readings, &part.metadata).unwrap();
        assert!(
            bound <= cap,
            "part {} has a worst case of {bound} bytes",
            part.part
        );
        assert!(
            size <= bound,
            "part {}: {size} bytes past its bound {bound}",
            part.part
        );
        for (at, ms) in part.readings {
            for (m, v) in ms {
                let e = values.entry((at, m)).or_insert((v, 0));
                *e = (v, e.1 + 1);
            }
        }
        metadata.extend(part.metadata);
    }
    (values, metadata, items.len())
}

#[tokio::test]
async fn metrics_and_metadata_added_to_sealed_readings_never_grow_a_part_past_the_cap() {
    let t = TestTable::new("slots-bounded").await;
    let cap = tidemark_schema::ITEM_OVERHEAD_BYTES + 2_000;
    let writer = SlotWriter {
        part_bytes: 300,
        item_bytes: cap,
        ..SlotWriter::new(t.client.clone(), &t.name, RetryPolicy::default())
    };
    let at = |s: i64| start().plus_micros(s * 1_000_000).unwrap();
    let value = |k: usize, s: i64| (s as f64 + 0.1) * 1.37f64.powi(k as i32 + 1);
    // GIVEN 120 readings of one metric with values that do not compress, sealed into parts
    for from in [0, 40, 80] {
        let batch: SlotReadings = (from..from + 40)
            .map(|s| {
                (
                    at(s),
                    BTreeMap::from([(MetricName::new("m0").unwrap(), value(0, s))]),
                )
            })
            .collect();
        writer.write(&key(), &batch, 0, deadline()).await.unwrap();
    }
    let sealed = parts(&t).await.len();
    assert!(sealed > 1, "{sealed} parts");
    // WHEN later batches add metric after metric for the same timestamps, each with longer
    // metadata, and a correction of the first metric rides along
    let metrics = 8;
    for k in 1..metrics {
        let content = Content {
            readings: (0..120)
                .map(|s| {
                    let mut ms =
                        BTreeMap::from([(MetricName::new(&format!("m{k}")).unwrap(), value(k, s))]);
                    if s % 7 == k as i64 {
                        ms.insert(MetricName::new("m0").unwrap(), -value(k, s));
                    }
                    (at(s), ms)
                })
                .collect(),
            metadata: (0..120)
                .map(|s| {
                    (
                        at(s),
                        format!(r#"{{"k":{k},"s":{s},"pad":"{}"}}"#, "x".repeat(4 * k)),
                    )
                })
                .collect(),
        };
        let w = writer
            .write_content(&key(), &content, 0, deadline())
            .await
            .unwrap();
        assert!(w.written);
        assert_eq!(w.readings, 120, "the slot holds 120 timestamps");
        // AND the same batch again changes nothing
        let again = writer
            .write_content(&key(), &content, 0, deadline())
            .await
            .unwrap();
        assert!(!again.written, "a replay after metric {k} wrote");
    }
    // THEN every part is under the cap, and the joined slot holds each (timestamp, metric)
    // value exactly once, with its latest value and the latest metadata
    let (values, metadata, count) = joined(&t, cap).await;
    assert!(count > sealed, "added metrics went to new parts ({count})");
    assert_eq!(values.len(), 120 * metrics);
    for s in 0..120i64 {
        for k in 0..metrics {
            let (v, holders) = values[&(at(s), MetricName::new(&format!("m{k}")).unwrap())];
            assert_eq!(holders, 1, "m{k} at {s}s is in {holders} parts");
            let fixed = (1..metrics).rev().find(|j| k == 0 && s % 7 == *j as i64);
            let want = fixed.map_or(value(k, s), |j| -value(j, s));
            assert_eq!(v, want, "m{k} at {s}s");
        }
        let last = metrics - 1;
        assert_eq!(
            metadata[&at(s)],
            format!(r#"{{"k":{last},"s":{s},"pad":"{}"}}"#, "x".repeat(4 * last))
        );
    }
}

#[tokio::test]
async fn a_kilohertz_gateway_adding_metric_after_metric_keeps_every_part_under_the_cap() {
    let t = TestTable::new("slots-khz").await;
    let writer = SlotWriter::new(t.client.clone(), &t.name, RetryPolicy::default());
    let cap = tidemark_schema::MAX_PART_ITEM_BYTES;
    // GIVEN a 1 kHz gateway's minute: 60 000 timestamps, its first metric almost constant
    // (two bytes a reading: parts of ~30 000 readings)
    let at = |i: i64| start().plus_micros(i * 1_000).unwrap();
    let n = 60_000i64;
    let names = ["temperature", "humidity", "pressure", "co2", "voc"];
    for (k, name) in names.iter().enumerate() {
        let metric = MetricName::new(name).unwrap();
        // WHEN each later batch brings one more metric for the same timestamps, with values
        // that do not compress (nine bytes each): in place, the first part would pass 400 KB
        // at the third metric
        let readings: SlotReadings = (0..n)
            .map(|i| {
                let v = if k == 0 {
                    21.5
                } else {
                    f64::from_bits(
                        0x4035_0000_0000_0000
                            ^ ((i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 12),
                    )
                };
                (at(i), BTreeMap::from([(metric.clone(), v)]))
            })
            .collect();
        let w = writer.write(&key(), &readings, 0, deadline()).await;
        let w = w.unwrap_or_else(|e| panic!("writing {name}: {e}"));
        assert!(w.written);
    }
    // THEN every part is under the cap and every value is in exactly one part
    let (values, _, count) = joined(&t, cap).await;
    assert_eq!(values.len(), n as usize * names.len());
    assert!(values.values().all(|(_, holders)| *holders == 1));
    assert!(count >= 3, "{count} parts");
}

#[tokio::test]
async fn an_exact_resend_stamps_its_arrival_on_the_smallest_part_holding_it_and_a_replay_nothing() {
    let t = TestTable::new("slots-resend").await;
    let at = |s: &str| Timestamp::parse_rfc3339(s).unwrap();
    let writer = |arrived: &str| SlotWriter {
        part_bytes: 300,
        ..SlotWriter::new(t.client.clone(), &t.name, RetryPolicy::default())
            .arrived(Some(at(arrived)))
    };
    // GIVEN a slot of several parts (sealed at 300 bytes) holding 42 readings and a
    // keep-alive (a reading without metrics), each batch stamped with its arrival
    let batch = |secs: std::ops::Range<i64>| -> SlotReadings {
        secs.map(|s| {
            (
                start().plus_micros(s * 1_000_000).unwrap(),
                BTreeMap::from([(MetricName::new("t").unwrap(), s as f64 * 1.37)]),
            )
        })
        .collect()
    };
    let mut last = batch(40..42);
    last.insert(start().plus_micros(50_000_000).unwrap(), BTreeMap::new());
    let w = writer("2026-04-20T14:01:00Z");
    w.write(&key(), &batch(0..40), 0, deadline()).await.unwrap();
    w.write(&key(), &last, 0, deadline()).await.unwrap();
    // (part, version, arrival, packed bytes) of each part.
    let arrivals = async || -> Vec<(u16, u64, String, usize)> {
        let mut out: Vec<_> = t
            .scan()
            .await
            .iter()
            .map(|i| {
                let p = read_part(i).unwrap();
                let n = |a: &str| match &i[a] {
                    AttributeValue::N(v) => v.clone(),
                    other => panic!("{other:?}"),
                };
                let AttributeValue::B(b) = &i[field::PACKED] else {
                    panic!("packed readings are binary");
                };
                let version = n(field::VERSION).parse().unwrap();
                (p.part, version, n(field::ARRIVED_AT), b.as_ref().len())
            })
            .collect();
        out.sort();
        out
    };
    let before = arrivals().await;
    assert!(before.len() >= 2, "{before:?}");
    // WHEN a reading of every part and the keep-alive are sent again, exactly, arriving later
    let mut resend = SlotReadings::new();
    for i in t.scan().await {
        let p = read_part(&i).unwrap();
        let (at, m) = p.readings.iter().next().unwrap();
        resend.insert(*at, m.clone());
    }
    resend.extend(last.clone());
    let stamped = writer("2026-04-20T14:09:00Z")
        .write(&key(), &resend, 0, deadline())
        .await
        .unwrap();
    // THEN no reading changes, and only the smallest part is put back, with the resend's
    // arrival and its version bumped
    assert!(stamped.written);
    let after = arrivals().await;
    let smallest = before.iter().min_by_key(|p| p.3).unwrap().0;
    let later = at("2026-04-20T14:09:00Z").epoch_millis().to_string();
    for (b, a) in before.iter().zip(&after) {
        if b.0 == smallest {
            assert_eq!((a.1, &a.2, a.3), (b.1 + 1, &later, b.3), "part {}", b.0);
        } else {
            assert_eq!(a, b, "part {}", b.0);
        }
    }
    let mut joined = SlotReadings::new();
    for i in t.scan().await {
        joined.extend(read_part(&i).unwrap().readings);
    }
    assert_eq!(joined.len(), 43);
    // AND the same write again (a replay), or one that arrived earlier, writes nothing
    for arrived in ["2026-04-20T14:09:00Z", "2026-04-20T14:05:00Z"] {
        let again = writer(arrived)
            .write(&key(), &resend, 0, deadline())
            .await
            .unwrap();
        assert!(!again.written, "{arrived}");
        assert_eq!(arrivals().await, after);
    }
}

#[tokio::test]
async fn a_write_of_records_that_arrived_earlier_never_lowers_a_parts_arrival() {
    let t = TestTable::new("slots-arrival-order").await;
    let at = |s: &str| Timestamp::parse_rfc3339(s).unwrap();
    let writer = |arrived: &str| {
        SlotWriter::new(t.client.clone(), &t.name, RetryPolicy::default())
            .arrived(Some(at(arrived)))
    };
    // GIVEN a part stamped with the arrival of the latest records it holds
    writer("2026-04-20T14:09:00Z")
        .write(&key(), &readings(0..2, "a", 1.0), 0, deadline())
        .await
        .unwrap();
    // WHEN a batch of records that arrived earlier (another stream shard, or another slot
    // length starting at the same instant in the same batch) adds a new reading to it
    let w = writer("2026-04-20T14:05:00Z")
        .write(&key(), &readings(5..6, "b", 2.0), 0, deadline())
        .await
        .unwrap();
    // THEN the reading is stored and the part keeps the later arrival, so the first batch
    // replayed is still a replay that writes nothing
    assert!(w.written);
    let items = t.scan().await;
    assert_eq!(items.len(), 1);
    let later = at("2026-04-20T14:09:00Z").epoch_millis().to_string();
    assert_eq!(items[0][field::ARRIVED_AT], AttributeValue::N(later));
    let again = writer("2026-04-20T14:09:00Z")
        .write(&key(), &readings(0..2, "a", 1.0), 0, deadline())
        .await
        .unwrap();
    assert!(!again.written);
}
