//! The handler over the in-memory store: caching, deadlines and failure reporting, where
//! counting store calls matters. The same behaviours run against DynamoDB Local in
//! `local/local_dynamodb.rs`.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::common::*;
use tidemark_ingest::UnknownDevices;
use tidemark_ingest::memory::{MemoryStore, memory_ingest};
use tidemark_schema::{LayoutHistory, LayoutHistoryItem, QuarantineReason};

#[tokio::test]
async fn shard_counts_are_read_once_per_refresh_interval_not_per_batch() {
    // GIVEN a container whose layout cache lasts 30 s
    let store = MemoryStore::default();
    let ingest = memory_ingest(&store, config("t"), clock());
    // WHEN three batches arrive within the interval
    for i in 0..3 {
        let e = event_of(&[reading_json("a", "2026-04-20T14:00:00Z", f64::from(i))]);
        ingest.process(&e, soon()).await.unwrap();
    }
    // THEN the CONFIG partition was read once
    assert_eq!(store.layout_loads.load(Ordering::SeqCst), 1);

    // GIVEN a cache that expires at once THEN every batch reads it
    let mut c = config("t");
    c.layout_cache_ttl = Duration::ZERO;
    let ingest = memory_ingest(&store, c, clock());
    for _ in 0..2 {
        let e = event_of(&[reading_json("a", "2026-04-20T14:00:00Z", 1.0)]);
        ingest.process(&e, soon()).await.unwrap();
    }
    assert_eq!(store.layout_loads.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_failed_shard_refresh_keeps_the_cached_counts_only_while_they_are_trusted() {
    // GIVEN a hot device and a container trusting partition counts for 60 s
    let store = MemoryStore::default();
    store
        .layout_histories
        .lock()
        .unwrap()
        .push(LayoutHistoryItem::new(
            &dev("hot"),
            LayoutHistory::default()
                .with_change(ts("2026-04-20T00:00:00Z"), 4)
                .unwrap(),
        ));
    let mut c = config("t");
    c.layout_cache_ttl = Duration::from_secs(60);
    let ingest = memory_ingest(&store, c.clone(), clock());
    let e = event_of(&[reading_json("hot", "2026-04-20T14:00:00Z", 1.0)]);
    ingest.process(&e, soon()).await.unwrap();
    let first = store.items.lock().clone();
    assert!(first.keys().all(|(pk, _)| pk.starts_with("DEVICE#hot#S")));
    assert_eq!(store.layout_loads.load(Ordering::SeqCst), 1);

    // WHEN a refresh is due (half the TTL) but fails THEN the cached counts are still
    // used, same partition
    store.fail_layout_loads.store(true, Ordering::SeqCst);
    store.items.lock().clear();
    ingest.clock().set(now().plus_millis(40_000).unwrap());
    let (resp, _) = ingest.process(&e, soon()).await.unwrap();
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(**store.items.lock(), first);
    assert_eq!(store.layout_loads.load(Ordering::SeqCst), 2);

    // WHEN the cached counts are older than the TTL THEN the batch fails as a whole (a
    // shard change announced since may already be in force), and nothing is written
    store.items.lock().clear();
    ingest.clock().set(now().plus_millis(60_000).unwrap());
    assert!(ingest.process(&e, soon()).await.is_err());
    assert!(store.items.lock().is_empty());

    // AND a fresh container with no cache cannot guess either
    let fresh = memory_ingest(&store, c, clock());
    assert!(fresh.process(&e, soon()).await.is_err());
}

#[tokio::test]
async fn unknown_devices_checks_are_cached_per_container() {
    let store = MemoryStore::default();
    store.devices.lock().unwrap().insert(dev("known"));
    let mut c = config("t");
    c.unknown_devices = UnknownDevices::Quarantine;
    let ingest = memory_ingest(&store, c, clock());
    let e = event_of(&[
        reading_json("known", "2026-04-20T14:00:00Z", 1.0),
        reading_json("ghost", "2026-04-20T14:00:00Z", 1.0),
        reading_json("known", "2026-04-20T14:01:00Z", 1.0),
    ]);
    let (_, stats) = ingest.process(&e, soon()).await.unwrap();
    assert_eq!(stats.readings, 2);
    assert_eq!(
        stats
            .quarantined_by_reason
            .get(&QuarantineReason::UnknownDevice),
        Some(&1)
    );
    // One lookup for the two distinct devices, none for the next batch.
    assert_eq!(store.device_lookups.load(Ordering::SeqCst), 1);
    assert_eq!(store.devices_asked.load(Ordering::SeqCst), 2);
    ingest.process(&e, soon()).await.unwrap();
    assert_eq!(store.device_lookups.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn register_mode_costs_no_device_reads() {
    let store = MemoryStore::default();
    let ingest = memory_ingest(&store, config("t"), clock());
    let e = event_of(&[reading_json("never_seen", "2026-04-20T14:00:00Z", 1.0)]);
    let (_, stats) = ingest.process(&e, soon()).await.unwrap();
    assert_eq!(stats.readings, 1);
    assert_eq!(store.device_lookups.load(Ordering::SeqCst), 0);
    // Registration rides on the aggregator's device update: ingest writes only the reading.
    assert_eq!(store.len(), 1);
}

#[tokio::test]
async fn writes_refused_for_good_report_the_first_record_of_the_batch() {
    let store = MemoryStore::default();
    store.refuse_writes.store(true, Ordering::SeqCst);
    let ingest = memory_ingest(&store, config("t"), clock());
    let e = event_of(&[
        reading_json("a", "2026-04-20T14:00:00Z", 1.0),
        reading_json("b", "2026-04-20T14:00:00Z", 1.0),
    ]);
    let (resp, stats) = ingest.process(&e, soon()).await.unwrap();
    let ids: Vec<_> = resp
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone().unwrap())
        .collect();
    assert_eq!(ids, [seq(0)]);
    assert_eq!(stats.failed_items, 2);
    // A refusal is not retried: nothing will change by asking again (one call per reading).
    assert_eq!(store.write_calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_deadline_already_past_writes_nothing_and_reports_the_first_record() {
    let store = MemoryStore::default();
    let ingest = memory_ingest(&store, config("t"), clock());
    let e = event_of(&[reading_json("a", "2026-04-20T14:00:00Z", 1.0)]);
    let (resp, _) = ingest.process(&e, Instant::now()).await.unwrap();
    assert_eq!(resp.batch_item_failures.len(), 1);
    assert_eq!(
        resp.batch_item_failures[0].item_identifier.as_deref(),
        Some(seq(0).as_str())
    );
    assert_eq!(store.len(), 0);
}

#[tokio::test]
async fn duplicates_in_a_batch_collapse_last_wins_and_are_counted() {
    let store = MemoryStore::default();
    let ingest = memory_ingest(&store, config("t"), clock());
    let e = event_of(&[
        reading_json("a", "2026-04-20T14:00:00Z", 1.0),
        reading_json("a", "2026-04-20T14:00:00.000000Z", 2.0),
        reading_json("a", "2026-04-20T16:00:00+02:00", 3.0),
    ]);
    let (resp, stats) = ingest.process(&e, soon()).await.unwrap();
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!((stats.readings, stats.duplicates, stats.written), (3, 2, 1));
    let items = store.items.lock();
    let item = items.values().next().unwrap();
    let aws_sdk_dynamodb::types::AttributeValue::M(m) = &item["metrics"] else {
        panic!("metrics is a map")
    };
    assert_eq!(m["temperature"].as_n().unwrap(), "3");
}

#[tokio::test]
async fn the_injected_clock_decides_the_time_bounds() {
    let store = MemoryStore::default();
    let ingest = memory_ingest(&store, config("t"), clock());
    let e = event_of(&[reading_json("a", "2026-04-20T14:10:00Z", 1.0)]);
    let (_, stats) = ingest.process(&e, soon()).await.unwrap();
    assert_eq!(stats.readings, 1, "exactly 5 min ahead is accepted");
    ingest.clock().set(ts("2026-04-20T14:04:59.999000Z"));
    assert_eq!(ingest.clock().now(), ts("2026-04-20T14:04:59.999000Z"));
    let (_, stats) = ingest.process(&e, soon()).await.unwrap();
    assert_eq!(
        stats
            .quarantined_by_reason
            .get(&QuarantineReason::TimestampInFuture),
        Some(&1)
    );
}

#[test]
fn batch_counts_become_emf_metrics_named_per_reason() {
    let mut stats = tidemark_ingest::Report {
        records: 3,
        readings: 2,
        quarantined: 1,
        ..Default::default()
    };
    stats
        .quarantined_by_reason
        .insert(QuarantineReason::NotJson, 1);
    let v = stats.metrics().to_json(0);
    assert_eq!(v["Function"], "ingest");
    assert_eq!(v["Records"], 3.0);
    assert_eq!(v["Quarantined.not_json"], 1.0);
    assert_eq!(v["FailedBatches"], 0.0);
}

#[test]
fn the_handler_can_be_shared_across_tasks() {
    // The local pipeline runs one handler per Kinesis shard on a multi-threaded runtime.
    fn send_sync<T: Send + Sync>(_: &T) {}
    fn send<T: Send>(_: T) {}
    let store = MemoryStore::default();
    let ingest = memory_ingest(&store, config("t"), clock());
    send_sync(&ingest);
    send(ingest.handle(event_of(&["{}"]), soon()));
    fn dynamo_handler_is_send_sync<T: Send + Sync>() {}
    dynamo_handler_is_send_sync::<tidemark_ingest::Ingest>();
}
