//! Stream records for tests and benches: what DynamoDB Streams would deliver.
//!
//! [`change_record`] is the one builder of a record (keys, images, sequence number, event
//! name); everything else here, the aggregator's integration tests, the never-stall property
//! and the bench's examples build their records through it.

use std::collections::BTreeMap;

use aws_lambda_events::event::dynamodb::{Event, EventRecord, StreamRecord};
use tidemark_schema::packed::{self, SlotReadings};
use tidemark_schema::{
    DeviceId, DeviceItem, EntityKey, MetricName, Reading, ReadingItem, SlotItem, Timestamp,
};

pub fn metric(m: &str) -> MetricName {
    MetricName::new(m).unwrap()
}

pub fn device(d: &str) -> DeviceId {
    DeviceId::new(d).unwrap()
}

/// An INSERT of a reading of `device` with one metric.
pub fn insert(seq: u64, device: &str, at: Timestamp, m: &str, v: f64) -> EventRecord {
    insert_reading(seq, device, None, at, BTreeMap::from([(metric(m), v)]))
}

/// An INSERT of a reading of `device` (in its partition `partition`) with `metrics`.
pub fn insert_reading(
    seq: u64,
    device: &str,
    partition: Option<u16>,
    at: Timestamp,
    metrics: BTreeMap<MetricName, f64>,
) -> EventRecord {
    let item = ReadingItem::new(
        &Reading {
            device_id: DeviceId::new(device).unwrap(),
            timestamp: at,
            metrics,
            metadata: None,
        },
        partition,
        30,
    );
    change_record(seq.into(), None, Some(image(&item)))
}

/// A MODIFY of a device item from `old` to `new`.
pub fn device_modify(seq: u64, old: &DeviceItem, new: &DeviceItem) -> EventRecord {
    change_record(seq.into(), Some(image(old)), Some(image(new)))
}

pub fn event(records: Vec<EventRecord>) -> Event {
    let mut e = Event::default();
    e.records = records;
    e
}

/// Part `part` of the slot of `device` starting at `start`, holding `readings` (one metric
/// `t` each: (seconds after the start, value)).
pub fn slot_item(device: &str, start: Timestamp, part: u16, readings: &[(i64, f64)]) -> SlotItem {
    let readings: SlotReadings = readings
        .iter()
        .map(|(s, v)| {
            (
                start.plus_millis(s * 1000).unwrap(),
                BTreeMap::from([(metric("t"), *v)]),
            )
        })
        .collect();
    let k = EntityKey::Slot {
        device: DeviceId::new(device).unwrap(),
        partition: None,
        start,
        part,
    }
    .key();
    SlotItem {
        pk: k.pk,
        sk: k.sk,
        packed: packed::encode(start, &readings).unwrap(),
        reading_count: readings.len() as u64,
        version: 1,
        ttl: 0,
        sealed: false,
        full: false,
        metadata: Default::default(),
        arrived_at: None,
    }
}

/// A record of a slot part going from `old` to `new` (`INSERT` without `old`, `REMOVE`
/// without `new`).
pub fn slot_record(seq: u64, old: Option<&SlotItem>, new: Option<&SlotItem>) -> EventRecord {
    change_record(seq.into(), old.map(image), new.map(image))
}

/// An open alert of `device`: a `temperature` maximum of 35 breached by 41.5 at `opened`.
pub fn open_alert(device: &str, opened: Timestamp) -> tidemark_schema::AlertItem {
    use tidemark_schema::{AlertId, AlertItem, AlertRule, AlertState, Severity};
    let device_id = DeviceId::new(device).unwrap();
    let metric = metric("temperature");
    let alert_id = AlertId::for_breach(opened, &metric, AlertRule::Max);
    let k = EntityKey::Alert {
        device: device_id.clone(),
        alert: alert_id.clone(),
    }
    .key();
    AlertItem {
        pk: k.pk,
        sk: k.sk,
        gsi1pk: None,
        gsi1sk: None,
        device_id,
        alert_id,
        metric: Some(metric),
        rule: AlertRule::Max,
        rule_spec: None,
        severity: Severity::Critical,
        state: AlertState::Open,
        message: "temperature 41.5 above 35".into(),
        value: 41.5,
        threshold: 35.0,
        breach_count: 1,
        opened_at: opened,
        last_breach_at: opened,
        acknowledged_at: None,
        resolved_at: None,
        snoozed_until: None,
        tags: Default::default(),
    }
}

/// An INSERT of [`open_alert`].
pub fn alert_record(seq: u64, device: &str, opened: Timestamp) -> EventRecord {
    written("INSERT", seq, image(&open_alert(device, opened)))
}

/// A heartbeat ingest stored for `shard` (sent at `sent`), not yet passed.
pub fn heartbeat_record(seq: u64, shard: &str, sent: Timestamp) -> EventRecord {
    let shard = tidemark_schema::keys::ShardName::new(shard).unwrap();
    let k = EntityKey::Heartbeat(shard).key();
    let item = tidemark_schema::HeartbeatItem {
        pk: k.pk,
        sk: k.sk,
        sent_at: sent,
        stored_at: Some(sent),
        passed_at: None,
        rollups_passed_at: None,
    };
    written("MODIFY", seq, serde_dynamo::to_item(&item).unwrap())
}

/// An item's image as a stream record carries it.
pub fn image<T: serde::Serialize>(item: &T) -> serde_dynamo::Item {
    serde_dynamo::to_item(item).expect("an item serialises")
}

/// The record DynamoDB Streams writes (NEW_AND_OLD_IMAGES) for an item going from `old` to
/// `new`: `INSERT` without `old`, `REMOVE` without `new`, `MODIFY` otherwise; the keys are the
/// image's `pk` and `sk`. `seq` is wide because DynamoDB's sequence numbers are (up to 40
/// digits).
pub fn change_record(
    seq: u128,
    old: Option<serde_dynamo::Item>,
    new: Option<serde_dynamo::Item>,
) -> EventRecord {
    let any = new.as_ref().or(old.as_ref()).expect("an image");
    let mut c = StreamRecord::default();
    c.keys = ["pk", "sk"]
        .into_iter()
        .filter_map(|k| Some((k.to_owned(), any.get(k)?.clone())))
        .collect::<std::collections::HashMap<_, _>>()
        .into();
    let name = match (&old, &new) {
        (None, _) => "INSERT",
        (_, None) => "REMOVE",
        _ => "MODIFY",
    };
    if let Some(o) = old {
        c.old_image = o;
    }
    if let Some(n) = new {
        c.new_image = n;
    }
    c.sequence_number = Some(format!("{seq:021}"));
    let mut r = EventRecord::default();
    r.event_name = name.into();
    r.change = c;
    r
}

/// `record` (a `REMOVE`) as DynamoDB's TTL writes it: by the service itself.
pub fn as_ttl_expiry(mut record: EventRecord) -> EventRecord {
    let mut u = aws_lambda_events::event::dynamodb::UserIdentity::default();
    u.type_ = "Service".into();
    u.principal_id = "dynamodb.amazonaws.com".into();
    record.user_identity = Some(u);
    record
}

/// A record of `event_name` whose new image is `image` (keys taken from it).
fn written(event_name: &str, seq: u64, image: serde_dynamo::Item) -> EventRecord {
    let mut r = change_record(seq.into(), None, Some(image));
    r.event_name = event_name.into();
    r
}

/// A DynamoDB service error with `code`, as the SDK returns it (`ValidationException`:
/// permanent; `InternalServerError`: transient).
pub fn dynamo_error(code: &str, message: &str) -> tidemark_store::StoreError {
    use aws_sdk_dynamodb::error::ErrorMetadata;
    use aws_sdk_dynamodb::operation::put_item::PutItemError;
    tidemark_store::StoreError::Dynamo {
        operation: "PutItem",
        source: Box::new(aws_sdk_dynamodb::Error::from(PutItemError::generic(
            ErrorMetadata::builder().code(code).message(message).build(),
        ))),
    }
}
