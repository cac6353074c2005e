//! The property behind the aggregator: however the stream delivers the records — replayed,
//! bisected, regrouped, shards in parallel — every aggregate equals a recomputation from the
//! raw readings, stored one item per reading or packed into slot parts. Against DynamoDB
//! Local.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use aws_lambda_events::event::dynamodb::EventRecord;
use common::slots::{SlotAt, SlotSim};
use common::*;
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

#[derive(Debug, Clone)]
struct Case {
    readings: Vec<Gen>,
    /// Arrival order (a permutation): out of order and late readings.
    order: Vec<usize>,
    /// Per delivery: (which stream shard, how far back to replay, how many new records,
    /// run together with the next delivery).
    deliveries: Vec<(usize, usize, usize, bool)>,
}

fn case() -> impl Strategy<Value = Case> {
    let reading = (
        0..DEVICES,
        0..(3 * 3600i64),
        -200..200i32,
        prop::option::weighted(0.15, -200..200i32),
        prop::bool::weighted(0.08),
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
        );
    prop::collection::vec(reading, 5..40).prop_flat_map(|readings| {
        let n = readings.len();
        (
            Just(readings),
            Just((0..n).collect::<Vec<_>>()).prop_shuffle(),
            prop::collection::vec((0..2usize, 0..6usize, 1..12usize, any::<bool>()), 24),
        )
            .prop_map(|(readings, order, deliveries)| Case {
                readings,
                order,
                deliveries,
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
    // device 0 is hot: two shard partitions, so two stream shards feed its aggregates
    let devices: Vec<DeviceId> = (0..DEVICES)
        .map(|i| dev(&format!("c{case_no}_d{i}")))
        .collect();
    let hot = LayoutHistory::default()
        .with_change(ts("2026-01-01T00:00:00Z"), 2)
        .unwrap();
    put_shard_history(t, &devices[0], &hot).await;
    let packed_history = |count: u16, seconds: i64| {
        LayoutHistory::from_epochs(vec![LayoutEpoch {
            from: ts("2026-01-01T00:00:00Z"),
            count,
            slot: Some(SlotLen::new(seconds).unwrap()),
        }])
        .unwrap()
    };
    let histories = [hot.clone(), packed_history(1, 60), packed_history(2, 120)];
    put_shard_history(t, &devices[3], &histories[1]).await;
    put_shard_history(t, &devices[4], &histories[2]).await;
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
            hot.shard_at(at)
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
        (devices[g.device].clone(), h.shard_at(at), len.start_of(at))
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
    prop_assert_eq!(got, want);
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
