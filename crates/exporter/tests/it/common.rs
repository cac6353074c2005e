//! What the export's tests share: times, a registered device, a stored reading.

#![allow(dead_code)]

use tidemark_schema::{
    AggregateItem, DeviceId, DeviceItem, DeviceStatus, MetricName, Period, Reading, ReadingItem,
    Timestamp,
};
use tidemark_testkit::TestTable;

pub fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

/// Registers `id` (in GSI1's status listing, which the export's devices table lists).
pub async fn register(t: &TestTable, id: &str) {
    t.put(&DeviceItem::new(
        DeviceId::new(id).unwrap(),
        DeviceStatus::Active,
        ts("2026-04-01T00:00:00Z"),
    ))
    .await;
}

/// A single reading item of `device` at `at`, with `metadata` (JSON) if given.
pub fn reading(
    device: &str,
    at: Timestamp,
    metrics: &[(&str, f64)],
    metadata: Option<&str>,
) -> ReadingItem {
    ReadingItem::new(
        &Reading {
            device_id: DeviceId::new(device).unwrap(),
            timestamp: at,
            metrics: metrics
                .iter()
                .map(|(m, v)| (MetricName::new(m).unwrap(), *v))
                .collect(),
            metadata: metadata.map(|m| serde_json::from_str(m).unwrap()),
        },
        None,
        3650,
    )
}

/// Stores a reading as the pipeline leaves it for the export: the reading item (ingest's)
/// and its hour's rollup placeholder with its activity index entry (the rollups role's,
/// written when a device's first readings of an hour come), by which the export finds the
/// hour's devices.
pub async fn store(t: &TestTable, r: &ReadingItem) {
    t.put(r).await;
    let (reading, _) = r.to_reading().unwrap();
    seen_by_rollups(t, &reading.device_id, reading.timestamp).await;
}

/// The rollups role's hourly placeholder of `device`'s hour holding `at`, as it writes it.
pub async fn seen_by_rollups(t: &TestTable, device: &DeviceId, at: Timestamp) {
    let key = AggregateItem::key_for(device, Period::Hourly.bucket(at));
    let mut placeholder = AggregateItem::empty(&key);
    placeholder.open = true;
    placeholder.version = 1;
    t.client
        .put_item()
        .table_name(&t.name)
        .set_item(Some(tidemark_store::aggregate_item(&placeholder).unwrap()))
        .send()
        .await
        .unwrap();
}
