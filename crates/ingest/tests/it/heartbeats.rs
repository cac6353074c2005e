//! Only the watchdog's own heartbeats move a shard's heartbeat item (docs/design.md §5,
//! "Heartbeats"): a record shaped like one from any other producer, or dated ahead of its
//! own arrival in Kinesis, is an ordinary bad record, quarantined, and proves nothing.

use crate::common::*;
use tidemark_ingest::memory::{MemoryStore, memory_ingest};
use tidemark_schema::heartbeat::{self, PARTITION_KEY};
use tidemark_schema::keys::ShardName;
use tidemark_schema::{EntityKey, QuarantineReason};

/// The heartbeat item ingest keeps for the shard of [`event_of`]'s records.
fn heartbeat_item(store: &MemoryStore) -> Option<tidemark_store::Item> {
    let shard = ShardName::new("shardId-000000000000").unwrap();
    store.items.get(&EntityKey::Heartbeat(shard).key())
}

/// A one-record batch of `data` under `partition_key`, arriving at 14:04:00 (see
/// [`event_of`]), followed by an ordinary reading.
fn batch(data: &[u8], partition_key: &str) -> aws_lambda_events::event::kinesis::KinesisEvent {
    let reading = reading_json("sensor_01", "2026-04-20T14:03:00Z", 20.0);
    let mut ev = event_of(&[data, reading.as_bytes()]);
    ev.records[0].kinesis.partition_key = partition_key.to_string();
    ev
}

async fn run(
    store: &MemoryStore,
    ev: aws_lambda_events::event::kinesis::KinesisEvent,
) -> tidemark_ingest::Report {
    let ingest = memory_ingest(store, config("t"), clock());
    let (response, stats) = ingest.process(&ev, soon()).await.unwrap();
    assert!(failures(&response).is_empty(), "the batch must move on");
    stats
}

#[tokio::test]
async fn the_watchdogs_heartbeat_moves_the_shards_heartbeat_item() {
    let store = MemoryStore::default();
    let sent = ts("2026-04-20T14:03:59Z");
    let stats = run(&store, batch(&heartbeat::record(sent), PARTITION_KEY)).await;
    assert_eq!(stats.heartbeats, 1);
    assert_eq!(stats.quarantined, 0);
    assert!(heartbeat_item(&store).is_some());
}

#[tokio::test]
async fn a_heartbeat_shaped_record_under_another_partition_key_is_quarantined_not_passed() {
    let store = MemoryStore::default();
    let forged = heartbeat::record(ts("2026-04-20T14:03:59Z"));
    let stats = run(&store, batch(&forged, "sensor_01")).await;
    assert_eq!(stats.heartbeats, 0);
    assert!(
        heartbeat_item(&store).is_none(),
        "a forged heartbeat proves nothing"
    );
    assert_eq!(stats.quarantined, 1);
    assert_eq!(stats.readings, 1, "the reading behind it is stored");
    assert!(
        !stats
            .quarantined_by_reason
            .contains_key(&QuarantineReason::Unprocessable),
        "quarantined as the bad reading it is: {:?}",
        stats.quarantined_by_reason
    );
}

#[tokio::test]
async fn a_heartbeat_dated_after_its_own_arrival_is_quarantined_not_passed() {
    let store = MemoryStore::default();
    // The forgery: a heartbeat from 2099 would hold the watermark far in the future.
    let future = heartbeat::record(ts("2099-01-01T00:00:00Z"));
    let stats = run(&store, batch(&future, PARTITION_KEY)).await;
    assert_eq!(stats.heartbeats, 0);
    assert!(heartbeat_item(&store).is_none());
    assert_eq!(stats.quarantined, 1);

    // Just past the allowed clock skew of its arrival (14:04:00.000): not one either.
    let store = MemoryStore::default();
    let late = ts("2026-04-20T14:04:00Z")
        .plus_millis(heartbeat::MAX_SKEW_MILLIS + 1)
        .unwrap();
    let stats = run(&store, batch(&heartbeat::record(late), PARTITION_KEY)).await;
    assert_eq!(stats.heartbeats, 0);

    // Within it: the watchdog's clock may run a little ahead of Kinesis's.
    let store = MemoryStore::default();
    let ahead = ts("2026-04-20T14:04:00Z")
        .plus_millis(heartbeat::MAX_SKEW_MILLIS)
        .unwrap();
    let stats = run(&store, batch(&heartbeat::record(ahead), PARTITION_KEY)).await;
    assert_eq!(stats.heartbeats, 1);
}
