//! The property behind the aggregator: however the stream delivers the records — replayed,
//! bisected, regrouped, shards in parallel — every aggregate equals a recomputation from the
//! raw readings. Against DynamoDB Local.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use aws_lambda_events::event::dynamodb::EventRecord;
use common::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tidemark_schema::{DeviceId, ReadingItem, ShardHistory, Timestamp};
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
}

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
        0..3usize,
        0..(3 * 3600i64),
        -200..200i32,
        prop::option::weighted(0.15, -200..200i32),
        prop::bool::weighted(0.08),
    )
        .prop_map(|(device, second, quarters, correct, delete)| Gen {
            device,
            second,
            quarters,
            correct,
            delete,
        });
    prop::collection::vec(reading, 5..30).prop_flat_map(|readings| {
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
    let devices: Vec<DeviceId> = (0..3).map(|i| dev(&format!("c{case_no}_d{i}"))).collect();
    let hot = ShardHistory::default()
        .with_change(ts("2026-01-01T00:00:00Z"), 2)
        .unwrap();
    put_shard_history(t, &devices[0], &hot).await;
    let item = |g: &Gen, q: i32| {
        let at = base().plus_millis(g.second * 1000).unwrap();
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

    // One reading per (device, second); the stream sees INSERTs in arrival order, each
    // correction or delete some time after its INSERT.
    let mut seen = BTreeSet::new();
    let mut sim = StreamSim::new(2);
    let mut per_shard: BTreeMap<usize, Vec<EventRecord>> = BTreeMap::new();
    let mut finals: Vec<ReadingItem> = Vec::new();
    let mut pending: Vec<EventRecord> = Vec::new();
    let mut later: Vec<(ReadingItem, ReadingItem, bool)> = Vec::new();
    for &i in &c.order {
        let g = &c.readings[i];
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
    for (old, new, delete) in &later {
        pending.push(if *delete {
            sim.user_remove(old)
        } else {
            sim.modify(old, new)
        });
    }
    // The table holds the final state (what any recompute may read at any time).
    put_readings(t, &finals).await;
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
        let newest = c
            .readings
            .iter()
            .filter(|g| g.device == i)
            .map(|g| base().plus_millis(g.second * 1000).unwrap())
            .max();
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
