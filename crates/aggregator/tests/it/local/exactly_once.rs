//! The property behind the aggregator: however the stream delivers the records — replayed,
//! bisected, regrouped, shards in parallel — every aggregate equals a recomputation from the
//! raw readings, stored one item per reading or packed into slot parts. Against DynamoDB
//! Local.
//!
//! Also when DynamoDB has split a partition key's item collection by sort key: the key's
//! records then flow through two stream shards at once, ordered per item only, and their
//! sequence numbers interleave across the two shards
//! (docs/decisions/0002-exactly-once-rollups.md).

use std::collections::{BTreeMap, BTreeSet};

use crate::common::slots::{SlotAt, SlotSim};
use crate::common::*;
use aws_lambda_events::event::dynamodb::EventRecord;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tidemark_schema::history::LayoutEpoch;
use tidemark_schema::packed::SlotReadings;
use tidemark_schema::{DeviceId, LayoutHistory, MetricName, ReadingItem, SlotLen, Timestamp};
use tidemark_testkit::TestTable;

/// One generated reading: device index, seconds after the base time, value in quarters
/// (sums of quarters are exact in f64 whatever the order, so equality can be exact).
#[derive(Debug, Clone)]
struct Gen {
    device: usize,
    second: i64,
    quarters: i32,
    /// Some(q): later corrected to q quarters; `delete`: later deleted by a user.
    correct: Option<i32>,
    delete: bool,
    /// Packed devices: Some(q) later adds metric `w` (a record with the same timestamp).
    extra: Option<i32>,
    /// Packed devices: ingest's batch ends after this reading (one slot write per batch).
    ends_batch: bool,
}

/// Devices 0–2 store single items (0 hot: two partitions); 3 and 4 pack into slots (4 in
/// two partitions). Packed readings fall in the 200 s around midnight, so slots fill up,
/// split into parts and hours and days still change under them.
const DEVICES: usize = 5;
const PACKED: usize = 3;
/// Readings a simulated slot part holds before it is sealed.
const PART_CAP: usize = 3;
/// Devices whose partition DynamoDB has split by sort key, each into two child shards: 1
/// (single items) at 23:30, inside the hour 23:00–24:00, and 3 (packed) at the slot of
/// 23:59, inside the same hour. Each gets a reading generated on either side of its split
/// point in that hour ([`anchors`]).
const SPLIT: [usize; 2] = [1, 3];
/// Seconds after the base time of the split points (packed: of the reading time, before
/// `at_of`'s squeeze; 2160 s squeeze to 23:59:00, the start of a slot).
const SPLIT_SECONDS: [i64; 2] = [3600, 2160];
/// Stream shards: two hashed, then two children per split key.
const SHARDS: usize = 2 + 2 * SPLIT.len();

#[derive(Debug, Clone)]
struct Case {
    readings: Vec<Gen>,
    /// Arrival order (a permutation): out of order and late readings.
    order: Vec<usize>,
    /// Per delivery: (which stream shard, how far back to replay, how many new records,
    /// run together with the next delivery).
    deliveries: Vec<(usize, usize, usize, bool)>,
    /// Per split key, delivered first and concurrently: (the upper child leads, records
    /// the leading child gets, records the lagging child gets), so one child shard runs far
    /// ahead of the other.
    leads: Vec<(bool, usize, usize)>,
}

fn reading_gen(
    device: impl Strategy<Value = usize>,
    second: impl Strategy<Value = i64>,
    delete: impl Strategy<Value = bool>,
) -> impl Strategy<Value = Gen> {
    (
        device,
        second,
        -200..200i32,
        prop::option::weighted(0.15, -200..200i32),
        delete,
        prop::option::weighted(0.15, -200..200i32),
        prop::bool::weighted(0.4),
    )
        .prop_map(
            |(device, second, quarters, correct, delete, extra, ends_batch)| Gen {
                device,
                second,
                quarters,
                correct,
                delete,
                extra,
                ends_batch,
            },
        )
}

/// A reading of each split device on either side of its split point, in the split point's
/// hour (never deleted, so the hour keeps readings on both sides).
fn anchors() -> impl Strategy<Value = Vec<Gen>> {
    let no = || Just(false);
    (
        reading_gen(Just(SPLIT[0]), 1800..SPLIT_SECONDS[0], no()),
        reading_gen(Just(SPLIT[0]), SPLIT_SECONDS[0]..5400, no()),
        reading_gen(Just(SPLIT[1]), 0..SPLIT_SECONDS[1], no()),
        reading_gen(Just(SPLIT[1]), SPLIT_SECONDS[1]..5400, no()),
    )
        .prop_map(|(a, b, c, d)| vec![a, b, c, d])
}

fn case() -> impl Strategy<Value = Case> {
    let reading = reading_gen(0..DEVICES, 0..(3 * 3600i64), prop::bool::weighted(0.08));
    (prop::collection::vec(reading, 5..40), anchors()).prop_flat_map(|(mut readings, a)| {
        readings.extend(a);
        let n = readings.len();
        (
            Just(readings),
            Just((0..n).collect::<Vec<_>>()).prop_shuffle(),
            prop::collection::vec((0..SHARDS, 0..6usize, 1..12usize, any::<bool>()), 32),
            prop::collection::vec((any::<bool>(), 4..20usize, 0..3usize), SPLIT.len()),
        )
            .prop_map(|(readings, order, deliveries, leads)| Case {
                readings,
                order,
                deliveries,
                leads,
            })
    })
}

/// 22:30 to 01:30 UTC: three hours and a day boundary.
fn base() -> Timestamp {
    ts("2026-04-20T22:30:00Z")
}

async fn run_case(t: &TestTable, case_no: u32, c: &Case) -> Result<(), TestCaseError> {
    // Every other case rewrites the device item on every batch that moves it; the others
    // defer it by the default 15 minutes.
    let mut config = tidemark_aggregator::AggregatorConfig::new(&t.name);
    if case_no % 2 == 0 {
        config.device_refresh = std::time::Duration::ZERO;
    }
    let refresh_ms = config.device_refresh.as_millis() as i64;
    let agg = tidemark_aggregator::BothRoles::new(t.client.clone(), config);
    // device 0 is hot: two partitions, so two stream shards feed its aggregates
    let devices: Vec<DeviceId> = (0..DEVICES)
        .map(|i| dev(&format!("c{case_no}_d{i}")))
        .collect();
    let hot = LayoutHistory::default()
        .with_change(ts("2026-01-01T00:00:00Z"), 2)
        .unwrap();
    put_layout_history(t, &devices[0], &hot).await;
    let packed_history = |count: u16, seconds: i64| {
        LayoutHistory::from_epochs(vec![LayoutEpoch {
            from: ts("2026-01-01T00:00:00Z"),
            count,
            slot: Some(SlotLen::new(seconds).unwrap()),
        }])
        .unwrap()
    };
    let histories = [hot.clone(), packed_history(1, 60), packed_history(2, 120)];
    put_layout_history(t, &devices[3], &histories[1]).await;
    put_layout_history(t, &devices[4], &histories[2]).await;
    let at_of = |g: &Gen| {
        let s = if g.device >= PACKED {
            5300 + g.second / 54
        } else {
            g.second
        };
        base().plus_millis(s * 1000).unwrap()
    };
    let item = |g: &Gen, q: i32| {
        let at = at_of(g);
        let shard = if g.device == 0 {
            hot.partition_at(at)
        } else {
            None
        };
        reading_at(
            &devices[g.device],
            at,
            metrics(&[("v", f64::from(q) / 4.0)]),
            shard,
        )
    };
    let slot_of = |g: &Gen| -> SlotAt {
        let h = &histories[g.device - PACKED + 1];
        let at = at_of(g);
        let len = h.layout_at(at).slot.unwrap();
        (
            devices[g.device].clone(),
            h.partition_at(at),
            len.start_of(at),
        )
    };
    let one = |g: &Gen, m: &str, q: i32| -> SlotReadings {
        BTreeMap::from([(
            at_of(g),
            BTreeMap::from([(MetricName::new(m).unwrap(), f64::from(q) / 4.0)]),
        )])
    };

    // Single items: one reading per (device, second); the stream sees INSERTs in arrival
    // order, each correction or delete some time after its INSERT. Packed: readings arrive
    // in ingest batches (a same-timestamp record merges into its reading, the later value
    // winning), each batch one write per slot; corrections, added metrics and deletes later.
    let mut seen = BTreeSet::new();
    let mut sim = StreamSim::new(2);
    // DynamoDB split these devices' partitions by sort key: records of items below the
    // split point go to one child shard, the others to the other.
    let split_sk = |d: usize, second: i64| -> (String, String) {
        let g = Gen {
            device: d,
            second,
            quarters: 0,
            correct: None,
            delete: false,
            extra: None,
            ends_batch: false,
        };
        if d >= PACKED {
            let (device, shard, start) = slot_of(&g);
            let k = tidemark_schema::EntityKey::Slot {
                device,
                partition: shard,
                start,
                part: 0,
            }
            .key();
            assert_eq!(start, at_of(&g), "the split point starts a slot");
            (k.pk, tidemark_schema::keys::slot_sk_prefix(start))
        } else {
            let r = item(&g, 0);
            (r.pk, r.sk)
        }
    };
    let children: Vec<[usize; 2]> = SPLIT
        .iter()
        .zip(SPLIT_SECONDS)
        .map(|(&d, second)| {
            let (pk, sk) = split_sk(d, second);
            sim.split(&pk, &sk)
        })
        .collect();
    assert_eq!(sim.shard_count(), SHARDS);
    let mut slots = SlotSim::new(PART_CAP);
    let mut per_shard: BTreeMap<usize, Vec<EventRecord>> = BTreeMap::new();
    let mut finals: Vec<ReadingItem> = Vec::new();
    let mut pending: Vec<EventRecord> = Vec::new();
    let mut later: Vec<(ReadingItem, ReadingItem, bool)> = Vec::new();
    let mut batch: BTreeMap<SlotAt, SlotReadings> = BTreeMap::new();
    let flush = |batch: &mut BTreeMap<SlotAt, SlotReadings>,
                 slots: &mut SlotSim,
                 sim: &mut StreamSim,
                 pending: &mut Vec<EventRecord>| {
        for (at, r) in std::mem::take(batch) {
            pending.extend(slots.write(sim, &at, &r));
        }
    };
    for &i in &c.order {
        let g = &c.readings[i];
        if g.device >= PACKED {
            let merged = batch.entry(slot_of(g)).or_default();
            for (at, m) in one(g, "v", g.quarters) {
                merged.entry(at).or_default().extend(m);
            }
            if g.ends_batch {
                flush(&mut batch, &mut slots, &mut sim, &mut pending);
            }
            continue;
        }
        if !seen.insert((g.device, g.second)) {
            continue;
        }
        let first = item(g, g.quarters);
        pending.push(sim.insert(&first));
        match (g.delete, g.correct) {
            (true, _) => later.push((first, first_clone_marker(), true)),
            (false, Some(q)) if q != g.quarters => {
                let fixed = item(g, q);
                later.push((first, fixed.clone(), false));
                finals.push(fixed);
            }
            _ => finals.push(first),
        }
    }
    flush(&mut batch, &mut slots, &mut sim, &mut pending);
    for (old, new, delete) in &later {
        pending.push(if *delete {
            sim.user_remove(old)
        } else {
            sim.modify(old, new)
        });
    }
    for g in c.readings.iter().filter(|g| g.device >= PACKED) {
        let at = slot_of(g);
        if let Some(q) = g.correct {
            pending.extend(slots.write(&mut sim, &at, &one(g, "v", q)));
        }
        if let Some(q) = g.extra {
            pending.extend(slots.write(&mut sim, &at, &one(g, "w", q)));
        }
        if g.delete {
            pending.extend(slots.delete(&mut sim, &at, at_of(g)));
        }
    }
    // The table holds the final state (what any recompute may read at any time).
    put_readings(t, &finals).await;
    put_items(t, &slots.items()).await;
    finals.extend(slots.final_readings());
    for r in pending {
        let shard = shard_of_record(&r);
        per_shard.entry(shard).or_default().push(r);
    }

    // Deliver like Lambda: per shard in order from the checkpoint, replaying up to `back`
    // records before it, sometimes two shards at once.
    let mut checkpoint: BTreeMap<usize, usize> = BTreeMap::new();
    // First the child shards of the split keys, concurrently, one of each pair far ahead.
    let mut lead = Vec::new();
    for (&[lower, upper], &(upper_leads, ahead, behind)) in children.iter().zip(&c.leads) {
        let (leader, lagger) = if upper_leads {
            (upper, lower)
        } else {
            (lower, upper)
        };
        for (shard, size) in [(leader, ahead), (lagger, behind)] {
            let recs = per_shard.get(&shard).map_or(&[][..], |v| &v[..]);
            let to = size.min(recs.len());
            if to > 0 {
                lead.push(event(recs[..to].to_vec()));
                checkpoint.insert(shard, to);
            }
        }
    }
    let results = futures::future::join_all(lead.iter().map(|e| agg.process(e))).await;
    for (resp, _) in results {
        prop_assert!(resp.batch_item_failures.is_empty());
    }
    let mut i = 0;
    while i < c.deliveries.len() {
        // Lambda runs one batch per shard at a time: only different shards go together
        // (a retried duplicate of one batch is the concurrency test's business).
        let mut batch = Vec::new();
        let mut used = BTreeSet::new();
        for (shard, back, size, together) in c.deliveries[i..].iter().take(2) {
            if !used.insert(*shard) {
                break;
            }
            let recs = per_shard.get(shard).map_or(&[][..], |v| &v[..]);
            let cp = *checkpoint.get(shard).unwrap_or(&0);
            if cp < recs.len() {
                let from = cp.saturating_sub(*back);
                let to = (cp + size).min(recs.len());
                batch.push(event(recs[from..to].to_vec()));
                checkpoint.insert(*shard, to);
            }
            if !together {
                break;
            }
        }
        i += batch.len().max(1);
        let results = futures::future::join_all(batch.iter().map(|e| agg.process(e))).await;
        for (resp, _) in results {
            prop_assert!(resp.batch_item_failures.is_empty());
        }
    }
    // Whatever is left, in one last batch per shard (and once more, as a replay).
    for (shard, recs) in &per_shard {
        let cp = *checkpoint.get(shard).unwrap_or(&0);
        for _ in 0..2 {
            let (resp, _) = agg
                .process(&event(recs[cp.saturating_sub(3)..].to_vec()))
                .await;
            prop_assert!(resp.batch_item_failures.is_empty());
        }
    }

    // Each device's lastSeenAt is its newest reading, whatever the order of arrival, or less
    // than the refresh interval behind it.
    for (i, d) in devices.iter().enumerate() {
        let newest = c.readings.iter().filter(|g| g.device == i).map(at_of).max();
        let k = tidemark_schema::EntityKey::Device(d.clone()).key();
        let item: Option<tidemark_schema::DeviceItem> = t
            .client
            .get_item()
            .table_name(&t.name)
            .key("pk", aws_sdk_dynamodb::types::AttributeValue::S(k.pk))
            .key("sk", aws_sdk_dynamodb::types::AttributeValue::S(k.sk))
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item
            .map(|i| tidemark_store::from_item(i).unwrap());
        let seen = item.and_then(|d| d.last_seen_at);
        match (seen, newest) {
            (Some(l), Some(n)) => prop_assert!(
                l == n || (l < n && n.epoch_millis() - l.epoch_millis() < refresh_ms),
                "lastSeenAt {l}, newest {n}, refresh {refresh_ms} ms"
            ),
            _ => prop_assert_eq!(seen, newest),
        }
        if refresh_ms == 0 {
            prop_assert_eq!(seen, newest);
        }
    }

    let want = recompute(&finals);
    let got: BTreeMap<_, _> = stored_aggregates(t, &devices)
        .await
        .into_iter()
        .filter(|(_, a)| !a.metrics.is_empty())
        .map(|(k, a)| {
            (
                k,
                Expected {
                    metrics: a.metrics,
                    first_at: a.first_at,
                    last_at: a.last_at,
                },
            )
        })
        .collect();
    // Only the aggregates that differ, each as (key, got, want).
    let keys: BTreeSet<_> = got.keys().chain(want.keys()).collect();
    let differ: Vec<String> = keys
        .into_iter()
        .filter(|k| got.get(*k) != want.get(*k))
        .map(|k| format!("{k:?}\n  got:  {:?}\n  want: {:?}", got.get(k), want.get(k)))
        .collect();
    prop_assert!(
        differ.is_empty(),
        "aggregates that differ from the recomputation:\n{}",
        differ.join("\n")
    );
    Ok(())
}

/// Placeholder new image of a delete (never used as an image).
fn first_clone_marker() -> ReadingItem {
    reading("x", "2026-04-20T00:00:00Z", &[])
}

fn shard_of_record(r: &EventRecord) -> usize {
    r.event_id
        .split('-')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[test]
fn any_delivery_of_the_stream_gives_the_aggregates_of_the_raw_readings() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let table = rt.block_on(TestTable::new("agg-prop"));
    let mut runner = TestRunner::new(Config {
        cases: 8,
        max_shrink_iters: 32,
        failure_persistence: None,
        ..Config::default()
    });
    let counter = std::sync::atomic::AtomicU32::new(0);
    let result = runner.run(&case(), |c| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        rt.block_on(run_case(&table, n, &c))
    });
    drop(table);
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// DynamoDB has split `split_01`'s partition by sort key at 14:30, so
/// its readings before 14:30 and from 14:30 on flow through two child shards at once, their
/// sequence numbers interleaved. The upper shard runs ahead: its record numbered above the
/// lower shard's second record is applied before that record arrives. Every reading must
/// still be counted, once.
#[tokio::test]
async fn records_of_one_key_through_two_shards_are_each_counted_once() {
    let t = TestTable::new("agg-split").await;
    deliver_through_two_shards(&t, &aggregator(&t), 1).await;
}

/// The same, delivered twice over (a full replay): the closed hour is taken from the table,
/// content-idempotent and without marks, so neither the split nor the replay changes it.
#[tokio::test]
async fn a_closed_hour_through_two_shards_and_replayed_is_taken_from_the_table() {
    let t = TestTable::new("agg-split-replay").await;
    let agg = aggregator(&t);
    deliver_through_two_shards(&t, &agg, 2).await;
    let hour = bucket_key(
        "split_01",
        tidemark_schema::Period::Hourly.bucket(ts("2026-04-20T14:00:00Z")),
    );
    let got = stored_aggregates(&t, &[dev("split_01")]).await;
    assert!(got[&hour].from_table, "{:?}", got[&hour]);
    assert!(got[&hour].marks.is_empty());
}

/// Four readings of `split_01`, two on each side of a split at 14:30, delivered lower,
/// upper (ahead), lower; `rounds` times over (the later rounds are replays). Both rollups
/// must equal the readings'.
async fn deliver_through_two_shards(
    t: &TestTable,
    agg: &tidemark_aggregator::BothRoles,
    rounds: usize,
) {
    let d = dev("split_01");
    let mut s = StreamSim::new(1);
    let [lower, upper] = s.split(
        &tidemark_schema::keys::device_pk(&d),
        &tidemark_schema::keys::reading_sk(ts("2026-04-20T14:30:00Z")),
    );
    // written in this order: lower, upper, lower, upper
    let rs = vec![
        reading("split_01", "2026-04-20T14:10:00Z", &[("t", 1.0)]),
        reading("split_01", "2026-04-20T14:40:00Z", &[("t", 2.0)]),
        reading("split_01", "2026-04-20T14:20:00Z", &[("t", 4.0)]),
        reading("split_01", "2026-04-20T14:50:00Z", &[("t", 8.0)]),
    ];
    put_readings(t, &rs).await;
    let records: Vec<_> = rs.iter().map(|r| s.insert(r)).collect();
    let on = |shard: usize| -> Vec<EventRecord> {
        records
            .iter()
            .filter(|r| shard_of_record(r) == shard)
            .cloned()
            .collect()
    };
    let (low, up) = (on(lower), on(upper));
    assert_eq!((low.len(), up.len()), (2, 2));
    let seq = |r: &EventRecord| r.change.sequence_number.clone().unwrap();
    assert!(
        tidemark_aggregator::records::cmp_seq(&seq(&low[1]), &seq(&up[1])).is_lt(),
        "the two shards' numbers interleave"
    );
    // the lower shard delivers its first record; the upper shard, ahead, both of its own;
    // then the lower shard its second (numbered below the upper shard's last)
    for round in 0..rounds {
        let mut aggregated = 0;
        for batch in [&low[..1], &up[..], &low[1..]] {
            let (resp, report) = agg.process(&event(batch.to_vec())).await;
            assert!(resp.batch_item_failures.is_empty(), "{report:?}");
            aggregated += report.readings_aggregated;
        }
        if round == 0 {
            assert_eq!(aggregated, 4, "each reading counted once as aggregated");
        }
    }
    let want = recompute(&rs);
    let got = stored_aggregates(t, std::slice::from_ref(&d)).await;
    for period in [
        tidemark_schema::Period::Hourly,
        tidemark_schema::Period::Daily,
    ] {
        let k = bucket_key("split_01", period.bucket(ts("2026-04-20T14:00:00Z")));
        let a = &got[&k];
        let view = Expected {
            metrics: a.metrics.clone(),
            first_at: a.first_at,
            last_at: a.last_at,
        };
        assert_eq!(view, want[&k], "{period:?} rollup of {}", k.1);
    }
}
