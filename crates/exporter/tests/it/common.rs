//! What the export's tests share: times, a registered device, a stored reading.

#![allow(dead_code)]

use tidemark_schema::{
    DeviceId, DeviceItem, DeviceStatus, MetricName, Reading, ReadingItem, Timestamp,
};
use tidemark_testkit::TestTable;

pub fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

/// Registers `id` (in GSI1's status listing, where the export finds devices).
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
