//! Delivering records to ingest and the alerts role as their event-source mappings would:
//! ingest invoked with a Kinesis event, and the alerts mapping's filter and batches of
//! stream records.

use std::time::{Duration, Instant};

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::kinesis::KinesisEvent;
use tidemark_bench::BenchError;
use tidemark_bench::scenario::TEMPLATE_ALERTS_BATCH;
use tidemark_ingest::Ingest;
use tidemark_schema::keys;

pub async fn ingest(ingest: &Ingest, event: &KinesisEvent) -> Result<u64, BenchError> {
    let (resp, stats) = ingest
        .process(event, Instant::now() + Duration::from_secs(120))
        .await
        .map_err(|e| BenchError::Function(e.to_string()))?;
    if !resp.batch_item_failures.is_empty() {
        return Err(BenchError::Function("ingest failed a batch".into()));
    }
    Ok(stats.readings)
}

pub fn key_attr<'a>(r: &'a EventRecord, name: &str) -> Option<&'a str> {
    match r.change.keys.get(name) {
        Some(serde_dynamo::AttributeValue::S(s)) => Some(s.as_str()),
        _ => None,
    }
}

/// template.yaml's FilterCriteria of the alerts mapping: readings, slot parts, alert items,
/// device items and heartbeats, TTL deletions excluded.
pub fn alerts_filter(r: &EventRecord) -> bool {
    let ttl = r
        .user_identity
        .as_ref()
        .is_some_and(|u| !u.principal_id.is_empty());
    let wanted = key_attr(r, "sk").is_some_and(|sk| {
        sk.starts_with(keys::READING_PREFIX)
            || sk.starts_with(keys::SLOT_PREFIX)
            || sk.starts_with(keys::ALERT_PREFIX)
            || sk == keys::DEVICE_METADATA_SK
            || sk.starts_with(keys::HEARTBEAT_PREFIX)
    });
    wanted && !ttl
}

pub fn is_reading(r: &EventRecord) -> bool {
    key_attr(r, "sk")
        .is_some_and(|sk| sk.starts_with(keys::READING_PREFIX) || sk.starts_with(keys::SLOT_PREFIX))
}

pub fn event_of(records: Vec<EventRecord>) -> Vec<Event> {
    tidemark_bench::stream::batches(records, TEMPLATE_ALERTS_BATCH)
}
