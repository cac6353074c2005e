//! The watchdog's decisions against DynamoDB Local, its heartbeats passed at once by a
//! stand-in for the pipeline (the whole pipeline is in `crates/devstack/tests/it/local/offline.rs`).

use std::time::Duration;

use tidemark_schema::keys::{self, ShardName};
use tidemark_schema::{
    Clock, DeviceId, DeviceItem, DeviceStatus, EntityKey, HeartbeatItem, Reading, ReadingItem,
    Timestamp,
};
use tidemark_testkit::TestTable;
use tidemark_watchdog::{DynamoWatch, Heartbeats, Report, Watchdog, WatchdogConfig};

const WINDOW: u32 = 300;

fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

async fn put<T: serde::Serialize>(client: &aws_sdk_dynamodb::Client, table: &str, v: &T) {
    client
        .put_item()
        .table_name(table)
        .set_item(Some(tidemark_store::to_item(v).unwrap()))
        .send()
        .await
        .unwrap();
}

/// Marks the shard's heartbeat passed the moment it is sent, as ingest and the alerts role
/// would once they have caught up.
struct CaughtUp(aws_sdk_dynamodb::Client, String);

impl Heartbeats for CaughtUp {
    async fn send(
        &self,
        at: Timestamp,
    ) -> Result<Vec<ShardName>, tidemark_watchdog::WatchdogError> {
        let shard = ShardName::new("shardId-000000000000").unwrap();
        let beat = HeartbeatItem::passed_at_once(&shard, at);
        put(&self.0, &self.1, &beat).await;
        Ok(vec![shard])
    }
}

async fn watchdog(now: Timestamp) -> (Watchdog<DynamoWatch, CaughtUp>, TestTable) {
    let t = TestTable::new("watchdog").await;
    let pipeline = CaughtUp(t.client.clone(), t.name.clone());
    let w = Watchdog::new(
        DynamoWatch::new(t.client.clone(), t.name.clone()),
        pipeline,
        WatchdogConfig {
            heartbeat_wait: Duration::from_secs(2),
            heartbeat_poll: Duration::from_millis(50),
            clock: Clock::fixed(now),
            ..WatchdogConfig::new(t.name.clone(), "readings")
        },
    );
    (w, t)
}

/// A device watched with `WINDOW`, its last arrival (and newest reading) at `arrived`.
fn watched(id: &str, arrived: Timestamp) -> DeviceItem {
    let mut d = DeviceItem::new(DeviceId::new(id).unwrap(), DeviceStatus::Active, arrived);
    d.offline_after_seconds = Some(WINDOW);
    d.last_arrival_at = Some(arrived);
    d.last_seen_at = Some(arrived);
    d.version = Some(3);
    d.gsi2pk = Some(keys::watch_gsi2pk(&d.device_id));
    d.gsi2sk = Some(keys::watch_gsi2sk(
        arrived.plus_millis(i64::from(WINDOW) * 1000).unwrap(),
    ));
    d
}

async fn run(w: &Watchdog<DynamoWatch, CaughtUp>) -> Report {
    w.run(tokio::time::Instant::now() + Duration::from_secs(30))
        .await
        .unwrap()
}

async fn device(t: &TestTable, id: &str) -> DeviceItem {
    let key = EntityKey::Device(DeviceId::new(id).unwrap()).key();
    let out = t
        .client
        .get_item()
        .table_name(&t.name)
        .set_key(Some(tidemark_store::batch_get::key_item(&key)))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    tidemark_store::from_item(out.item.expect("the device")).unwrap()
}

#[tokio::test]
async fn a_due_device_whose_readings_arrived_later_is_postponed_not_alerted() {
    // GIVEN a device whose stored check time (its last written-down arrival + 300 s) has
    // passed, but a reading of it arrived later than the device item says
    let now = ts("2026-04-20T14:10:00Z");
    let (w, t) = watchdog(now).await;
    let d = watched("lagging", ts("2026-04-20T14:00:00Z"));
    put(&t.client, &t.name, &d).await;
    let later = ts("2026-04-20T14:08:00Z");
    let mut r = ReadingItem::new(
        &Reading {
            device_id: d.device_id.clone(),
            timestamp: later,
            metrics: [(tidemark_schema::MetricName::new("t").unwrap(), 1.0)].into(),
            metadata: None,
        },
        None,
        30,
    );
    r.arrived_at = Some(later);
    put(&t.client, &t.name, &r).await;

    // WHEN the watchdog runs
    let report = run(&w).await;

    // THEN it moves the check time to that arrival + 300 s, and opens nothing
    assert_eq!(
        (report.due, report.postponed, report.opened, report.failed),
        (1, 1, 0, 0),
        "{report:?}"
    );
    let after = device(&t, "lagging").await;
    assert_eq!(
        after.gsi2sk,
        Some(keys::watch_gsi2sk(ts("2026-04-20T14:13:00Z")))
    );
    assert_eq!(after.last_arrival_at, Some(later));
    assert!(after.offline.is_none());
    // AND the next run finds nothing due
    assert_eq!(run(&w).await.due, 0);
}

#[tokio::test]
async fn a_silent_device_is_alerted_once_and_healthy_ones_are_never_read() {
    let now = ts("2026-04-20T14:10:00Z");
    let (w, t) = watchdog(now).await;
    put(
        &t.client,
        &t.name,
        &watched("silent", ts("2026-04-20T14:00:00Z")),
    )
    .await;
    put(
        &t.client,
        &t.name,
        &watched("healthy", ts("2026-04-20T14:09:00Z")),
    )
    .await;
    let first = run(&w).await;
    assert_eq!((first.due, first.opened), (1, 1), "{first:?}");
    let d = device(&t, "silent").await;
    let state = d.offline.expect("offline");
    assert_eq!(state.alert.as_str(), "20260420T140500000000Z-offline");
    assert_eq!(d.gsi2pk, Some(keys::offline_gsi2pk(&d.device_id)));
    assert!(device(&t, "healthy").await.offline.is_none());
    // Offline devices leave the watch: the next run reads nothing.
    let second = run(&w).await;
    assert_eq!((second.due, second.opened), (0, 0), "{second:?}");
}

#[tokio::test]
async fn a_due_device_without_a_window_any_more_leaves_the_watch() {
    let now = ts("2026-04-20T14:10:00Z");
    let (w, t) = watchdog(now).await;
    let mut d = watched("unwatched", ts("2026-04-20T14:00:00Z"));
    d.offline_after_seconds = Some(0);
    put(&t.client, &t.name, &d).await;
    let r = run(&w).await;
    assert_eq!(
        (r.due, r.unwatched, r.opened, r.failed),
        (1, 1, 0, 0),
        "{r:?}"
    );
    let after = device(&t, "unwatched").await;
    assert_eq!((after.gsi2pk, after.gsi2sk), (None, None));
    assert_eq!(run(&w).await.due, 0);
}

#[tokio::test]
async fn a_keep_alive_or_an_exact_resend_keeps_a_device_online_whatever_its_layout() {
    use tidemark_schema::{Layout, LayoutHistory, LayoutHistoryItem, MetricName, SlotLen, field};
    use tidemark_store::write::slots::{SlotKey, SlotWriter};
    let now = ts("2026-04-20T14:10:00Z");
    let (w, t) = watchdog(now).await;
    let len = SlotLen::new(60).unwrap();
    let packed = LayoutHistory::default()
        .with_layout(ts("2026-04-20T00:00:00Z"), Layout::packed(len))
        .unwrap();
    let (newest, later) = (ts("2026-04-20T14:00:00Z"), ts("2026-04-20T14:08:00Z"));
    let reading = |id: &str, at: Timestamp, metrics: &[(&str, f64)]| Reading {
        device_id: DeviceId::new(id).unwrap(),
        timestamp: at,
        metrics: metrics
            .iter()
            .map(|(k, v)| (MetricName::new(k).unwrap(), *v))
            .collect(),
        metadata: None,
    };
    // Writes a reading as ingest does in each layout, stamped with its arrival.
    let write = async |r: &Reading, is_packed: bool, arrived: Timestamp| {
        if is_packed {
            let key = SlotKey {
                pk: keys::reading_pk(&r.device_id, None),
                start: len.start_of(r.timestamp),
                len,
            };
            let readings = [(r.timestamp, r.metrics.clone())].into();
            SlotWriter::new(t.client.clone(), &t.name, Default::default())
                .arrived(Some(arrived))
                .write(
                    &key,
                    &readings,
                    i64::MAX,
                    tokio::time::Instant::now() + Duration::from_secs(30),
                )
                .await
                .unwrap();
        } else {
            let mut item = ReadingItem::new(r, None, 30);
            item.arrived_at = Some(arrived);
            tidemark_store::write::map_merge::merge_item(
                &t.client,
                &t.name,
                tidemark_store::to_item(&item).unwrap(),
                field::METRICS,
            )
            .await
            .unwrap();
        }
    };
    // GIVEN three devices last seen arriving at 14:00 (due at 14:05), their newest reading
    // of then stored: one in single items, two packed in 60 s slots
    let devices = [
        ("resend_single", false),
        ("resend_packed", true),
        ("alive_packed", true),
    ];
    for (id, is_packed) in devices {
        put(&t.client, &t.name, &watched(id, newest)).await;
        if is_packed {
            let d = DeviceId::new(id).unwrap();
            put(
                &t.client,
                &t.name,
                &LayoutHistoryItem::new(&d, packed.clone()),
            )
            .await;
        }
        write(&reading(id, newest, &[("t", 1.0)]), is_packed, newest).await;
    }
    // WHEN at 14:08 two of them send that reading again, exactly, and the third sends a
    // keep-alive (a reading without metrics)
    write(
        &reading("resend_single", newest, &[("t", 1.0)]),
        false,
        later,
    )
    .await;
    write(
        &reading("resend_packed", newest, &[("t", 1.0)]),
        true,
        later,
    )
    .await;
    write(&reading("alive_packed", later, &[]), true, later).await;

    // THEN the watchdog finds all three due, and postpones each to 14:13: none is offline
    let report = run(&w).await;
    assert_eq!(
        (report.due, report.postponed, report.opened, report.failed),
        (3, 3, 0, 0),
        "{report:?}"
    );
    for (id, _) in devices {
        let d = device(&t, id).await;
        assert_eq!(d.last_arrival_at, Some(later), "{id}");
        assert!(d.offline.is_none(), "{id}");
    }
}
