//! Packed slot parts written by the store's `SlotWriter` into DynamoDB Local, read back from
//! the table's real stream and aggregated: the rollups are exactly those of the same
//! readings stored one item per reading.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::*;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::history::LayoutEpoch;
use tidemark_schema::packed::SlotReadings;
use tidemark_schema::table::attr;
use tidemark_schema::{
    AggregateItem, DeviceId, EntityKey, LayoutHistory, MetricName, ReadingItem, Severity, SlotLen,
    Threshold, Timestamp, field, keys,
};
use tidemark_store::retry::RetryPolicy;
use tidemark_store::write::slots::{SlotKey, SlotWriter};
use tidemark_testkit::TestTable;

/// Readings with one or two metrics, at seconds after 14:00.
fn rs(pairs: &[(i64, &[(&str, f64)])]) -> SlotReadings {
    pairs
        .iter()
        .map(|(s, m)| {
            (
                ts("2026-04-20T14:00:00Z").plus_millis(s * 1000).unwrap(),
                metrics(m),
            )
        })
        .collect()
}

/// The same writes for a device storing single items: each reading merged into its item
/// (a new metric added, a value corrected), written only when it changes.
struct Singles {
    device: DeviceId,
    stored: BTreeMap<Timestamp, BTreeMap<MetricName, f64>>,
}

impl Singles {
    async fn write(&mut self, t: &TestTable, incoming: &SlotReadings) {
        let mut items = Vec::new();
        for (at, m) in incoming {
            let row = self.stored.entry(*at).or_default();
            let before = row.clone();
            row.extend(m.clone());
            if *row != before {
                items.push(reading_at(&self.device, *at, row.clone(), None));
            }
        }
        put_readings(t, &items).await;
    }

    fn items(&self) -> Vec<ReadingItem> {
        self.stored
            .iter()
            .map(|(at, m)| reading_at(&self.device, *at, m.clone(), None))
            .collect()
    }
}

/// The rollups of `device` by bucket label.
async fn rollups_of(t: &TestTable, device: &DeviceId) -> BTreeMap<String, Expected> {
    stored_aggregates(t, std::slice::from_ref(device))
        .await
        .into_values()
        .map(|a: AggregateItem| {
            let label = match EntityKey::parse(&a.pk, &a.sk) {
                Ok(EntityKey::Aggregate { bucket, .. }) => bucket.label(),
                other => panic!("{other:?}"),
            };
            (
                label,
                Expected {
                    metrics: a.metrics,
                    first_at: a.first_at,
                    last_at: a.last_at,
                },
            )
        })
        .collect()
}

/// Added to packed test values so that none is `k / 10^d` for d ≤ 6: such values keep the
/// XOR encoding (several bytes each), which the part-splitting tests rely on. A power of
/// two, so sums of them stay exact.
const ODD: f64 = 1.0 / 1024.0;

#[tokio::test]
async fn packed_slots_roll_up_exactly_as_the_same_readings_stored_singly() {
    // GIVEN a device packing its readings into 60 s slots, and one storing them singly
    let t = TestTable::new("agg-packed").await;
    let packed = dev("packed-1");
    let mut singles = Singles {
        device: dev("single-1"),
        stored: BTreeMap::new(),
    };
    let history = LayoutHistory::from_epochs(vec![LayoutEpoch {
        from: ts("2026-01-01T00:00:00Z"),
        count: 1,
        slot: Some(SlotLen::new(60).unwrap()),
    }])
    .unwrap();
    put_layout_history(&t, &packed, &history).await;
    let writer = SlotWriter {
        part_bytes: 120,
        ..SlotWriter::new(t.client.clone(), &t.name, RetryPolicy::default())
    };
    let slot = |start_s: i64| SlotKey {
        pk: keys::reading_pk(&packed, None),
        start: ts("2026-04-20T14:00:00Z")
            .plus_millis(start_s * 1000)
            .unwrap(),
        len: SlotLen::new(60).unwrap(),
    };
    let deadline = || tokio::time::Instant::now() + Duration::from_secs(10);
    let writes: Vec<(i64, SlotReadings)> = vec![
        // a new slot, and the next one
        (
            0,
            rs(&[
                (1, &[("t", 20.0)]),
                (5, &[("t", 21.0)]),
                (9, &[("t", 30.0)]),
            ]),
        ),
        (60, rs(&[(61, &[("t", 19.0)])])),
        // more readings (one above the alert threshold), a late one, and a second metric
        // for a stored reading
        (
            0,
            rs(&[
                (3, &[("t", 22.0)]),
                (12, &[("t", 26.5)]),
                (5, &[("h", 40.0)]),
            ]),
        ),
        // a correction lowering the maximum of the hour (its extremes come from the table)
        // and taking back the breach at 9 s
        (0, rs(&[(9, &[("t", 24.0)])])),
        // enough readings to split the slot into parts (each plus 2^-10: no value of six
        // decimals or fewer, so they take the XOR encoding's bytes, and sums stay exact)
        (
            0,
            (20..40)
                .map(|s| (s, metrics(&[("t", s as f64 / 4.0 + ODD), ("h", 50.0)])))
                .map(|(s, m)| (ts("2026-04-20T14:00:00Z").plus_millis(s * 1000).unwrap(), m))
                .collect(),
        ),
    ];
    for (start_s, readings) in &writes {
        let w = writer
            .write(&slot(*start_s), readings, 4_000_000_000, deadline())
            .await
            .unwrap();
        assert!(w.written);
        singles.write(&t, readings).await;
    }
    // AND exact replays of two writes (one into the split parts), which write nothing
    for i in [2, 4] {
        let replay = writer
            .write(&slot(0), &writes[i].1, 4_000_000_000, deadline())
            .await
            .unwrap();
        assert!(!replay.written);
        assert!(replay.parts > 1, "the slot split into parts: {replay:?}");
    }
    // AND a corrupt part in another slot of the same hour
    t.client
        .put_item()
        .table_name(&t.name)
        .item("pk", AttributeValue::S(keys::reading_pk(&packed, None)))
        .item(
            "sk",
            AttributeValue::S(keys::slot_sk(ts("2026-04-20T14:30:00Z"), 0)),
        )
        .item(field::PACKED, AttributeValue::B(Blob::new(vec![1, 5, 200])))
        .item(field::READING_COUNT, AttributeValue::N("5".into()))
        .item(field::VERSION, AttributeValue::N("1".into()))
        .item(attr::TTL, AttributeValue::N("4000000000".into()))
        .send()
        .await
        .unwrap();

    // WHEN the table's stream is delivered to the aggregator in small batches, each batch
    // after the first replaying the one before it, then all of it once more
    let records = stream_records(&t, "the writes' records on the stream", |r| r.len() >= 20).await;
    let agg = tidemark_aggregator::BothRoles::new(
        t.client.clone(),
        tidemark_aggregator::AggregatorConfig::new(&t.name).with_default_thresholds(
            BTreeMap::from([(
                MetricName::new("t").unwrap(),
                Threshold::new(None, Some(25.0), Severity::Critical),
            )]),
        ),
    );
    let mut unreadable = 0;
    for i in 0..records.len().div_ceil(3) {
        let from = (i * 3).saturating_sub(3);
        let to = (i * 3 + 3).min(records.len());
        let (resp, report) = agg.process(&event(records[from..to].to_vec())).await;
        assert!(resp.batch_item_failures.is_empty());
        unreadable += report.unreadable_items;
    }
    let (resp, _) = agg.process(&event(records.clone())).await;
    assert!(resp.batch_item_failures.is_empty());

    // THEN the corrupt part was skipped and counted, and both devices have the same rollups,
    // those of their readings
    assert!(unreadable >= 1, "the corrupt part's record is counted");
    let got = rollups_of(&t, &packed).await;
    assert_eq!(got, rollups_of(&t, &singles.device).await);
    assert_eq!(got.len(), 2, "one hour, one day: {got:#?}");
    for rollup in got.values() {
        let temp = &rollup.metrics[&MetricName::new("t").unwrap()];
        assert_eq!((temp.count, temp.max), (6 + 20, 26.5));
    }
    let as_single: Vec<ReadingItem> = singles
        .items()
        .into_iter()
        .map(|mut r| {
            r.pk = keys::reading_pk(&packed, None);
            r
        })
        .collect();
    assert_exact(&t, std::slice::from_ref(&packed), &as_single).await;
    // AND the alerts (a breach at 12 s, resolved by the readings after it) went the same way
    let alerts = |id: &str| {
        let t = &t;
        let id = id.to_owned();
        async move {
            let mut a: Vec<_> = alerts_of(t, &id)
                .await
                .into_iter()
                .map(|a| {
                    (
                        a.opened_at,
                        a.metric,
                        a.state,
                        a.value,
                        a.breach_count,
                        a.last_breach_at,
                        a.resolved_at,
                    )
                })
                .collect();
            a.sort_by_key(|x| x.0);
            a
        }
    };
    let packed_alerts = alerts("packed-1").await;
    assert_eq!(packed_alerts, alerts(singles.device.as_str()).await);
    assert!(!packed_alerts.is_empty(), "the breach made an alert");
    // AND the device item follows the packed device's newest reading as it does the other's
    let latest = |d: Option<tidemark_schema::DeviceItem>| d.and_then(|d| d.latest);
    assert_eq!(
        latest(device_item(&t, "packed-1").await),
        latest(device_item(&t, singles.device.as_str()).await)
    );
}

#[tokio::test]
async fn reading_walks_stitch_single_and_packed_epochs_and_keep_time_order_across_parts() {
    use tidemark_aggregator::DynamoStore;
    use tidemark_aggregator::store::ReadingStore;
    // GIVEN a device storing single items until 14:00:30, then 60 s slots
    let t = TestTable::new("agg-walk").await;
    let d = dev("walk-1");
    let at = |s: i64| ts("2026-04-20T14:00:00Z").plus_millis(s * 1000).unwrap();
    let history = LayoutHistory::from_epochs(vec![LayoutEpoch {
        from: at(30),
        count: 1,
        slot: Some(SlotLen::new(60).unwrap()),
    }])
    .unwrap();
    put_layout_history(&t, &d, &history).await;
    let singles: Vec<ReadingItem> = [5, 10, 20]
        .iter()
        .map(|s| reading_at(&d, at(*s), metrics(&[("t", *s as f64)]), None))
        .collect();
    put_readings(&t, &singles).await;
    // AND packed readings 40..59 s split into parts, then a late 35 s one in the last part
    // (so parts are not in time order), and one in the next slot
    let writer = SlotWriter {
        part_bytes: 40,
        ..SlotWriter::new(t.client.clone(), &t.name, RetryPolicy::default())
    };
    let write = |start: i64, secs: Vec<i64>| {
        let writer = writer.clone();
        let key = SlotKey {
            pk: keys::reading_pk(&d, None),
            start: at(start),
            len: SlotLen::new(60).unwrap(),
        };
        async move {
            // Values of no six decimals take the XOR encoding's bytes: 40-byte parts split often.
            let r: SlotReadings = secs
                .iter()
                .map(|s| (at(*s), metrics(&[("t", *s as f64 + ODD)])))
                .collect();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            writer
                .write(&key, &r, 4_000_000_000, deadline)
                .await
                .unwrap()
        }
    };
    assert!(write(0, (40..60).collect()).await.parts > 2);
    write(0, vec![35]).await;
    write(60, vec![65]).await;
    let store = DynamoStore::new(t.client.clone(), &t.name);
    let secs = |r: Vec<(Timestamp, BTreeMap<MetricName, f64>)>| -> Vec<i64> {
        r.iter()
            .map(|(a, _)| (a.epoch_millis() - at(0).epoch_millis()) / 1000)
            .collect()
    };

    // WHEN walked THEN every reading once, whichever epoch holds it
    let mut all = secs(store.readings_between(&d, at(0), at(119)).await.unwrap());
    all.sort();
    let want: Vec<i64> = [5, 10, 20, 35]
        .into_iter()
        .chain(40..60)
        .chain([65])
        .collect();
    assert_eq!(all, want);
    // AND pages are the first readings in time order, either way
    let page = |from, to, newest_first, limit| {
        let store = store.clone();
        let d = d.clone();
        async move {
            secs(
                store
                    .readings_page(&d, at(from), at(to), newest_first, limit)
                    .await
                    .unwrap(),
            )
        }
    };
    assert_eq!(page(0, 119, false, 5).await, [5, 10, 20, 35, 40]);
    assert_eq!(page(0, 59, true, 2).await, [59, 58]);
    assert_eq!(page(0, 40, true, 2).await, [40, 35]);
    assert_eq!(page(36, 119, false, 1).await, [40]);
    assert_eq!(page(0, 119, true, 1).await, [65]);
    let newest = store.newest_reading(&d, at(0)).await.unwrap().unwrap();
    assert_eq!(newest.timestamp, at(65));
    let sum = store.summarize(&d, at(0), at(59), false).await.unwrap();
    let t = MetricName::new("t").unwrap();
    assert_eq!(sum.times[&t], (at(5), at(59)));
    assert_eq!((sum.stats[&t].min, sum.stats[&t].max), (5.0, 59.0 + ODD));
}

#[tokio::test]
async fn metrics_added_in_a_later_part_roll_up_once_and_walks_merge_them_per_timestamp() {
    use tidemark_aggregator::DynamoStore;
    use tidemark_aggregator::store::ReadingStore;
    // GIVEN a packed device and a single-item one, and a slot writer whose cap lets a part
    // take two metrics over its readings, not four
    let t = TestTable::new("agg-spread").await;
    let packed = dev("spread-1");
    let mut singles = Singles {
        device: dev("spread-single"),
        stored: BTreeMap::new(),
    };
    let history = LayoutHistory::from_epochs(vec![LayoutEpoch {
        from: ts("2026-01-01T00:00:00Z"),
        count: 1,
        slot: Some(SlotLen::new(60).unwrap()),
    }])
    .unwrap();
    put_layout_history(&t, &packed, &history).await;
    let writer = SlotWriter {
        part_bytes: 400,
        item_bytes: tidemark_schema::ITEM_OVERHEAD_BYTES + 600,
        ..SlotWriter::new(t.client.clone(), &t.name, RetryPolicy::default())
    };
    let key = SlotKey {
        pk: keys::reading_pk(&packed, None),
        start: ts("2026-04-20T14:00:00Z"),
        len: SlotLen::new(60).unwrap(),
    };
    let deadline = || tokio::time::Instant::now() + Duration::from_secs(10);
    let batch = |name: &str, k: f64| -> SlotReadings {
        (0..30)
            .map(|s| {
                let at = ts("2026-04-20T14:00:00Z").plus_millis(s * 1000).unwrap();
                (at, metrics(&[(name, (s as f64 + 0.3) * k)]))
            })
            .collect()
    };
    // WHEN metric after metric arrives for the same 30 timestamps, and a correction of the
    // first one rides with the last
    let mut writes = vec![
        batch("t", 1.37),
        batch("h", 2.11),
        batch("p", 3.7),
        batch("co2", 5.3),
    ];
    writes[3].extend(rs(&[(4, &[("t", -1.0), ("co2", 99.0)])]));
    for w in &writes {
        assert!(
            writer
                .write(&key, w, 4_000_000_000, deadline())
                .await
                .unwrap()
                .written
        );
        singles.write(&t, w).await;
    }
    // THEN some timestamp's metrics are spread over parts
    let parts: Vec<_> = t
        .scan()
        .await
        .iter()
        .filter_map(|i| tidemark_store::write::slots::read_part(i).ok())
        .collect();
    let at4 = ts("2026-04-20T14:00:04Z");
    let holding = parts
        .iter()
        .filter(|p| p.readings.contains_key(&at4))
        .count();
    assert!(holding > 1, "the metrics of 4 s are in {holding} parts");

    // WHEN the stream is delivered in small overlapping batches, then all of it again
    let records = stream_records(&t, "a record per part on the stream", |r| {
        r.len() >= parts.len()
    })
    .await;
    let agg = tidemark_aggregator::BothRoles::new(
        t.client.clone(),
        tidemark_aggregator::AggregatorConfig::new(&t.name),
    );
    for i in 0..records.len().div_ceil(2) {
        let (from, to) = ((i * 2).saturating_sub(1), (i * 2 + 2).min(records.len()));
        let (resp, _) = agg.process(&event(records[from..to].to_vec())).await;
        assert!(resp.batch_item_failures.is_empty());
    }
    let (resp, _) = agg.process(&event(records.clone())).await;
    assert!(resp.batch_item_failures.is_empty());
    // THEN every metric is counted once, as for the single items
    let got = rollups_of(&t, &packed).await;
    assert_eq!(got, rollups_of(&t, &singles.device).await);
    for rollup in got.values() {
        for m in ["t", "h", "p", "co2"] {
            assert_eq!(
                rollup.metrics[&MetricName::new(m).unwrap()].count,
                30,
                "{m}"
            );
        }
    }
    let as_single: Vec<ReadingItem> = singles
        .items()
        .into_iter()
        .map(|mut r| {
            r.pk = keys::reading_pk(&packed, None);
            r
        })
        .collect();
    assert_exact(&t, std::slice::from_ref(&packed), &as_single).await;
    // AND a walk gives each timestamp once with all its metrics
    let store = DynamoStore::new(t.client.clone(), &t.name);
    let walked = store
        .readings_between(
            &packed,
            ts("2026-04-20T14:00:00Z"),
            ts("2026-04-20T14:00:59Z"),
        )
        .await
        .unwrap();
    assert_eq!(walked.len(), 30);
    assert!(walked.iter().all(|(_, m)| m.len() == 4), "{walked:?}");
    let four = &walked.iter().find(|(at, _)| *at == at4).unwrap().1;
    assert_eq!(
        four,
        &metrics(&[
            ("t", -1.0),
            ("h", 4.3 * 2.11),
            ("p", 4.3 * 3.7),
            ("co2", 99.0)
        ])
    );
}
