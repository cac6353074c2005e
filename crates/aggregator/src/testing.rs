//! Stream records for unit tests: what DynamoDB Streams would deliver.

use std::collections::BTreeMap;

use aws_lambda_events::event::dynamodb::{Event, EventRecord, StreamRecord};
use tidemark_schema::{DeviceId, DeviceItem, MetricName, Reading, ReadingItem, Timestamp};

pub fn metric(m: &str) -> MetricName {
    MetricName::new(m).unwrap()
}

pub fn device(d: &str) -> DeviceId {
    DeviceId::new(d).unwrap()
}

/// An INSERT of a reading of `device` with one metric.
pub fn insert(seq: u64, device: &str, at: Timestamp, m: &str, v: f64) -> EventRecord {
    let item = ReadingItem::new(
        &Reading {
            device_id: DeviceId::new(device).unwrap(),
            timestamp: at,
            metrics: BTreeMap::from([(metric(m), v)]),
            metadata: None,
        },
        None,
        30,
    );
    let mut c = StreamRecord::default();
    c.keys = serde_dynamo::to_item(serde_json::json!({"pk": item.pk, "sk": item.sk})).unwrap();
    c.new_image = serde_dynamo::to_item(&item).unwrap();
    c.sequence_number = Some(format!("{seq:021}"));
    let mut r = EventRecord::default();
    r.event_name = "INSERT".into();
    r.change = c;
    r
}

/// A MODIFY of a device item from `old` to `new`.
pub fn device_modify(seq: u64, old: &DeviceItem, new: &DeviceItem) -> EventRecord {
    let mut c = StreamRecord::default();
    c.keys = serde_dynamo::to_item(serde_json::json!({"pk": new.pk, "sk": new.sk})).unwrap();
    c.old_image = serde_dynamo::to_item(old).unwrap();
    c.new_image = serde_dynamo::to_item(new).unwrap();
    c.sequence_number = Some(format!("{seq:021}"));
    let mut r = EventRecord::default();
    r.event_name = "MODIFY".into();
    r.change = c;
    r
}

pub fn event(records: Vec<EventRecord>) -> Event {
    let mut e = Event::default();
    e.records = records;
    e
}
