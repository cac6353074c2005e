//! Kinesis record bytes → validated readings (docs/design.md §3). Pure: no I/O, the clock is a
//! parameter, so every bound is testable to the microsecond.
//!
//! A record holds one reading (a JSON object) or several (an array of objects). A record
//! holding any invalid reading is rejected *whole*: the raw bytes are what is quarantined, and
//! they belong to the record, so keeping half of a record would store some readings twice
//! (once as items, once inside the quarantined bytes) and make a re-submission after a fix
//! ambiguous.
//!
//! Top-level fields other than `deviceId`, `timestamp` and `metadata` are metrics and must be
//! finite numbers: a device sending `"status":"ok"` learns about it from the quarantine
//! rather than losing the field silently; free-form data belongs under `metadata`.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{Map, Value};
use tidemark_schema::table::attr;
use tidemark_schema::{
    DeviceId, MAX_METRIC_MAGNITUDE, MIN_METRIC_MAGNITUDE, MetricName, QuarantineReason, Reading,
    Timestamp, field, is_metric_value, keys,
};
use tidemark_store::{Item, StoreError};

use crate::config::IngestConfig;

pub use crate::rejection::Rejection;

/// The field an AWS IoT Core topic rule adds (`timestamp() AS receivedAt`): not a metric.
pub const RECEIVED_AT: &str = "receivedAt";

/// DynamoDB allows 32 levels of nesting; the reading item puts metadata one level down.
const MAX_METADATA_DEPTH: usize = 16;

const US_PER_DAY: i64 = 86_400_000_000;

/// Decodes and validates one record's data at `now`.
pub fn decode_record(
    bytes: &[u8],
    now: Timestamp,
    config: &IngestConfig,
) -> Result<Vec<Reading>, Rejection> {
    decode_record_at(bytes, now, now, config)
}

/// [`decode_record`] for a record that arrived at `arrival`, which anchors SenML's relative
/// times ([`crate::senml`]).
pub fn decode_record_at(
    bytes: &[u8],
    now: Timestamp,
    arrival: Timestamp,
    config: &IngestConfig,
) -> Result<Vec<Reading>, Rejection> {
    decode_message(bytes, now, arrival, config).map(|m| m.readings)
}

/// The field the template's IoT rule puts the publishing thing's name in (`topic(2) AS
/// tidemarkThing`, [`tidemark_schema::DeviceIdentity::THING_FIELD`]).
pub const THING_FIELD: &str = tidemark_schema::DeviceIdentity::THING_FIELD;

/// The field the template's IoT rule puts the message in, base64 (`encode(*, 'base64') AS
/// tidemarkPayload`), which it can do whatever the message is: an object, an array or a
/// SenML pack.
pub const IOT_PAYLOAD: &str = "tidemarkPayload";

/// A record's readings, and the IoT thing that published it when the IoT rule put it on the
/// stream ([`crate::identity`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub readings: Vec<Reading>,
    /// The record's [`THING_FIELD`]: the thing name the IoT rule took from the topic.
    pub thing: Option<DeviceId>,
}

/// What the IoT rule adds to the readings of one message.
#[derive(Debug, Default)]
struct Origin {
    thing: Option<DeviceId>,
    /// The rule's `receivedAt` (epoch ms), when it wrapped the message.
    received_at: Option<Value>,
}

/// [`decode_record_at`], keeping the thing that published the record. A record the IoT rule
/// wrapped (`{"tidemarkPayload": <the message, base64>, "tidemarkThing", "receivedAt"}`) is
/// its message's readings, each without a `deviceId` taking the thing's and each without a
/// time `receivedAt`; an object carrying [`THING_FIELD`] beside its own fields (a rule
/// `SELECT *, topic(2) AS tidemarkThing`) is read the same way.
pub fn decode_message(
    bytes: &[u8],
    now: Timestamp,
    arrival: Timestamp,
    config: &IngestConfig,
) -> Result<Message, Rejection> {
    if bytes.len() > config.max_payload_bytes {
        return Err(Rejection::new(
            QuarantineReason::PayloadTooLarge,
            format!(
                "record is {} bytes; the limit is {}",
                bytes.len(),
                config.max_payload_bytes
            ),
        ));
    }
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| Rejection::new(QuarantineReason::NotJson, format!("not JSON: {e}")))?;
    let (value, origin) = match value {
        Value::Object(mut obj) if obj.contains_key(THING_FIELD) => {
            let thing = match obj.remove(THING_FIELD) {
                Some(Value::String(s)) => DeviceId::new(&s).map_err(|e| {
                    Rejection::new(
                        QuarantineReason::InvalidDeviceId,
                        clip(&format!("{THING_FIELD}: {e}")),
                    )
                })?,
                v => {
                    return Err(Rejection::new(
                        QuarantineReason::InvalidDeviceId,
                        format!(
                            "{THING_FIELD} is {}, not a string",
                            v.as_ref().map_or("missing", kind)
                        ),
                    ));
                }
            };
            match obj.remove(IOT_PAYLOAD) {
                None => (
                    Value::Object(obj),
                    Origin {
                        thing: Some(thing),
                        received_at: None,
                    },
                ),
                Some(wrapped) => {
                    let message = unwrap_message(&wrapped)?;
                    let value: Value = serde_json::from_slice(&message).map_err(|e| {
                        Rejection::new(
                            QuarantineReason::NotJson,
                            format!("the message {thing} published is not JSON: {e}"),
                        )
                    })?;
                    let origin = Origin {
                        thing: Some(thing),
                        received_at: obj.remove(RECEIVED_AT),
                    };
                    (value, origin)
                }
            }
        }
        v => (v, Origin::default()),
    };
    // SenML's relative times count from when IoT Core received the message, when known.
    let anchor = match &origin.received_at {
        Some(Value::Number(n)) => n
            .as_i64()
            .and_then(|ms| Timestamp::from_epoch_millis(ms).ok())
            .unwrap_or(arrival),
        _ => arrival,
    };
    let readings = decode_value(value, now, anchor, config, &origin)?;
    Ok(Message {
        readings,
        thing: origin.thing,
    })
}

fn unwrap_message(v: &Value) -> Result<Vec<u8>, Rejection> {
    use base64::Engine as _;
    let Value::String(text) = v else {
        return Err(Rejection::new(
            QuarantineReason::NotObjectOrArray,
            format!("{IOT_PAYLOAD} is {}, not base64 text", kind(v)),
        ));
    };
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| {
            Rejection::new(
                QuarantineReason::NotObjectOrArray,
                format!("{IOT_PAYLOAD} is not base64: {e}"),
            )
        })
}

/// A record's JSON as readings.
fn decode_value(
    value: Value,
    now: Timestamp,
    arrival: Timestamp,
    config: &IngestConfig,
    origin: &Origin,
) -> Result<Vec<Reading>, Rejection> {
    let bounds = Bounds::new(now, config);
    match value {
        Value::Object(obj) => Ok(vec![reading(obj, &bounds, config, origin)?]),

        Value::Array(items) if crate::senml::is_pack(&items) => {
            if items.len() > config.max_array_len {
                return Err(Rejection::new(
                    QuarantineReason::ArrayTooLong,
                    format!(
                        "SenML pack of {} records; the limit is {}",
                        items.len(),
                        config.max_array_len
                    ),
                ));
            }
            let thing = origin.thing.as_ref().map(DeviceId::as_str);
            crate::senml::readings_of(items, arrival, thing)?
                .into_iter()
                .map(|obj| reading(obj, &bounds, config, origin))
                .collect()
        }
        Value::Array(items) => {
            if items.is_empty() {
                return Err(Rejection::new(
                    QuarantineReason::NotObjectOrArray,
                    "an empty array holds no reading",
                ));
            }
            if items.len() > config.max_array_len {
                return Err(Rejection::new(
                    QuarantineReason::ArrayTooLong,
                    format!(
                        "array of {} readings; the limit is {}",
                        items.len(),
                        config.max_array_len
                    ),
                ));
            }
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                match item {
                    Value::Object(obj) => {
                        out.push(reading(obj, &bounds, config, origin).map_err(|r| {
                            Rejection::new(r.reason, format!("reading {i}: {}", r.message))
                        })?)
                    }
                    other => {
                        return Err(Rejection::new(
                            QuarantineReason::NotObjectOrArray,
                            format!("reading {i} is {}, not an object", kind(&other)),
                        ));
                    }
                }
            }
            Ok(out)
        }
        other => Err(Rejection::new(
            QuarantineReason::NotObjectOrArray,
            format!(
                "a record is a reading object or an array of them, not {}",
                kind(&other)
            ),
        )),
    }
}

/// The accepted time window, computed once per record.
struct Bounds {
    now: Timestamp,
    latest_us: i64,
    earliest_us: i64,
}

impl Bounds {
    fn new(now: Timestamp, c: &IngestConfig) -> Self {
        let now_us = now.epoch_micros();
        Bounds {
            now,
            latest_us: now_us.saturating_add(c.max_future.as_micros().min(i64::MAX as u128) as i64),
            earliest_us: now_us.saturating_sub(i64::from(c.retention_days) * US_PER_DAY),
        }
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Keeps messages short even when the offending value is huge.
fn clip(s: &str) -> String {
    const MAX: usize = 80;
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

fn reading(
    mut obj: Map<String, Value>,
    bounds: &Bounds,
    config: &IngestConfig,
    origin: &Origin,
) -> Result<Reading, Rejection> {
    // A reading the IoT rule forwarded names its thing when it names no device.
    if let Some(thing) = &origin.thing
        && !obj.contains_key("deviceId")
    {
        obj.insert("deviceId".into(), Value::String(thing.to_string()));
    }
    let device_id = match obj.get("deviceId") {
        Some(Value::String(s)) => DeviceId::new(s).map_err(|e| {
            Rejection::new(
                QuarantineReason::InvalidDeviceId,
                clip(&e.to_string()).to_string(),
            )
        })?,
        Some(v) => {
            return Err(Rejection::new(
                QuarantineReason::InvalidDeviceId,
                format!("deviceId is {}, not a string", kind(v)),
            ));
        }
        None => {
            return Err(Rejection::new(
                QuarantineReason::InvalidDeviceId,
                "deviceId is missing",
            ));
        }
    };
    // `receivedAt` is when AWS IoT Core received the message (its topic rule adds it as
    // `timestamp()`, epoch ms): the reading's time when the device sent none, else ignored.
    let received_at = obj
        .remove(RECEIVED_AT)
        .or_else(|| origin.received_at.clone());
    let timestamp = match obj.get("timestamp").or(received_at.as_ref()) {
        Some(Value::String(s)) => Timestamp::parse_flexible(s).map_err(|e| {
            Rejection::new(QuarantineReason::InvalidTimestamp, clip(&e.to_string()))
        })?,
        Some(Value::Number(n)) => n
            .as_i64()
            .and_then(|ms| Timestamp::from_epoch_millis(ms).ok())
            .ok_or_else(|| {
                Rejection::new(
                    QuarantineReason::InvalidTimestamp,
                    format!("timestamp {n} is not whole epoch milliseconds in 1970..=9999"),
                )
            })?,
        Some(v) => {
            return Err(Rejection::new(
                QuarantineReason::InvalidTimestamp,
                format!(
                    "timestamp is {}, not an RFC 3339 string or epoch milliseconds",
                    kind(v)
                ),
            ));
        }
        None => {
            return Err(Rejection::new(
                QuarantineReason::InvalidTimestamp,
                "timestamp is missing (and no receivedAt from an IoT Core rule)",
            ));
        }
    };
    let us = timestamp.epoch_micros();
    if us > bounds.latest_us {
        return Err(Rejection::new(
            QuarantineReason::TimestampInFuture,
            format!(
                "timestamp {timestamp} is more than {} s after the ingest clock ({})",
                config.max_future.as_secs(),
                bounds.now
            ),
        ));
    }
    if us < bounds.earliest_us {
        return Err(Rejection::new(
            QuarantineReason::TimestampTooOld,
            format!(
                "timestamp {timestamp} is older than the {}-day retention (ingest clock {})",
                config.retention_days, bounds.now
            ),
        ));
    }
    let metadata = match obj.remove("metadata") {
        None => None,
        Some(Value::Object(m)) => {
            check_metadata(&m, config)?;
            Some(m)
        }
        Some(v) => {
            return Err(Rejection::new(
                QuarantineReason::InvalidMetadata,
                format!("metadata is {}, not an object", kind(&v)),
            ));
        }
    };
    let metric_count = obj
        .keys()
        .filter(|k| *k != "deviceId" && *k != "timestamp")
        .count();
    if metric_count > config.max_metrics {
        return Err(Rejection::new(
            QuarantineReason::TooManyMetrics,
            format!(
                "{metric_count} metrics; the limit is {}",
                config.max_metrics
            ),
        ));
    }
    let mut metrics = BTreeMap::new();
    for (name, v) in &obj {
        if name == "deviceId" || name == "timestamp" {
            continue;
        }
        let value = match v {
            Value::Number(n) => n.as_f64().filter(|f| is_metric_value(*f)).ok_or_else(|| {
                Rejection::new(
                    QuarantineReason::InvalidMetric,
                    format!(
                        "metric {:?} is {n}, outside the accepted range (0, or a magnitude from \
                         {MIN_METRIC_MAGNITUDE:e} to {MAX_METRIC_MAGNITUDE:e}, so that an hour's \
                         or a day's sum stays within DynamoDB's numbers)",
                        clip(name)
                    ),
                )
            })?,
            other => {
                return Err(Rejection::new(
                    QuarantineReason::InvalidMetric,
                    format!(
                        "metric {:?} is {}; metrics are finite numbers (other data goes under metadata)",
                        clip(name),
                        kind(other)
                    ),
                ));
            }
        };
        let name = MetricName::new(name)
            .map_err(|e| Rejection::new(QuarantineReason::InvalidMetric, clip(&e.to_string())))?;
        metrics.insert(name, value);
    }
    Ok(Reading {
        device_id,
        timestamp,
        metrics,
        metadata,
    })
}

/// A number DynamoDB can hold (metadata is stored, never summed): 0, or a magnitude in
/// 1e-130..1e126; anything else fails the write with a `ValidationException`.
fn dynamo_number(v: f64) -> bool {
    v.is_finite() && (v == 0.0 || (1e-130..1e126).contains(&v.abs()))
}

fn check_metadata(m: &Map<String, Value>, config: &IngestConfig) -> Result<(), Rejection> {
    fn walk(v: &Value, depth: usize, size: &mut usize) -> Result<(), String> {
        if depth > MAX_METADATA_DEPTH {
            return Err(format!("nested deeper than {MAX_METADATA_DEPTH} levels"));
        }
        match v {
            Value::Null | Value::Bool(_) => *size += 1,
            Value::Number(n) => {
                *size += 8;
                if !n.as_f64().is_some_and(dynamo_number) {
                    return Err(format!("number {n} is outside DynamoDB's range"));
                }
            }
            Value::String(s) => *size += s.len(),
            Value::Array(a) => {
                *size += 3;
                for x in a {
                    walk(x, depth + 1, size)?;
                }
            }
            Value::Object(o) => {
                *size += 3;
                for (k, x) in o {
                    *size += k.len();
                    walk(x, depth + 1, size)?;
                }
            }
        }
        Ok(())
    }
    let mut size = 0;
    let mut r = Ok(());
    for (k, v) in m {
        size += k.len();
        r = walk(v, 1, &mut size);
        if r.is_err() {
            break;
        }
    }
    r.and_then(|()| {
        if size > config.max_metadata_bytes {
            Err(format!(
                "about {size} bytes; the limit is {}",
                config.max_metadata_bytes
            ))
        } else {
            Ok(())
        }
    })
    .map_err(|e| Rejection::new(QuarantineReason::InvalidMetadata, format!("metadata: {e}")))
}

/// The DynamoDB item of a reading written to `shard` (`None`: the device's own partition),
/// from a record that arrived at `arrived`.
///
/// Exactly the item `to_item(&ReadingItem::new(..))` gives (a test holds them equal), built
/// by hand because this runs once per reading and serde's detour through `ReadingItem`
/// (cloning the metrics, then serialising them) costs more than the decoding itself.
pub fn reading_item(
    reading: &Reading,
    shard: Option<u16>,
    retention_days: u32,
    arrived: Timestamp,
) -> Result<Item, StoreError> {
    let mut item = Item::with_capacity(6);
    item.insert(
        attr::PK.to_owned(),
        AttributeValue::S(keys::reading_pk(&reading.device_id, shard)),
    );
    item.insert(
        attr::SK.to_owned(),
        AttributeValue::S(keys::reading_sk(reading.timestamp)),
    );
    let metrics: Item = reading
        .metrics
        .iter()
        .map(|(name, v)| (name.to_string(), AttributeValue::N(v.to_string())))
        .collect();
    item.insert(field::METRICS.to_owned(), AttributeValue::M(metrics));
    if let Some(metadata) = &reading.metadata {
        item.insert(
            field::METADATA.to_owned(),
            AttributeValue::M(tidemark_store::to_item(metadata)?),
        );
    }
    item.insert(
        attr::TTL.to_owned(),
        AttributeValue::N(reading.timestamp.ttl_after_days(retention_days).to_string()),
    );
    item.insert(
        field::ARRIVED_AT.to_owned(),
        AttributeValue::N(arrived.epoch_millis().to_string()),
    );
    Ok(item)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn now() -> Timestamp {
        Timestamp::parse_rfc3339("2026-04-20T14:05:00Z").unwrap()
    }

    fn cfg() -> IngestConfig {
        IngestConfig::new("t")
    }

    fn decode(s: &str) -> Result<Vec<Reading>, Rejection> {
        decode_record(s.as_bytes(), now(), &cfg())
    }

    #[test]
    fn the_design_sample_decodes_to_one_normalised_reading() {
        let r = decode(
            r#"{"deviceId":"sensor_01","timestamp":"2026-04-20T19:30:00+05:30",
                "temperature":22.4,"humidity":45,"pressure":1013.2,"battery":87,
                "metadata":{"fw":"2.1.0"}}"#,
        )
        .unwrap();
        assert_eq!(r.len(), 1);
        let r = &r[0];
        assert_eq!(r.device_id.as_str(), "sensor_01");
        assert_eq!(r.timestamp.to_string(), "2026-04-20T14:00:00.000000Z");
        assert_eq!(r.metrics.len(), 4);
        assert_eq!(r.metrics[&MetricName::new("humidity").unwrap()], 45.0);
        assert_eq!(r.metadata.as_ref().unwrap()["fw"], "2.1.0");
    }

    #[test]
    fn received_at_is_the_time_of_a_reading_without_one_and_never_a_metric() {
        // An IoT Core rule output: the device sent no timestamp.
        let r = decode(r#"{"t":1,"deviceId":"a","receivedAt":1776693630123}"#).unwrap();
        assert_eq!(r[0].timestamp.to_string(), "2026-04-20T14:00:30.123000Z");
        assert_eq!(r[0].metrics.len(), 1);
        // The device's own time wins; receivedAt is dropped.
        let r = decode(
            r#"{"t":1,"deviceId":"a","timestamp":"2026-04-20T14:00:00Z","receivedAt":1776693630123}"#,
        )
        .unwrap();
        assert_eq!(r[0].timestamp.to_string(), "2026-04-20T14:00:00.000000Z");
        assert_eq!(r[0].metrics.len(), 1);
        // Neither: still a clear rejection.
        let e = decode(r#"{"t":1,"deviceId":"a"}"#).unwrap_err();
        assert_eq!(e.reason, QuarantineReason::InvalidTimestamp);
    }

    fn wrapped(message: &str, thing: &str) -> String {
        use base64::Engine as _;
        serde_json::json!({
            IOT_PAYLOAD: base64::engine::general_purpose::STANDARD.encode(message),
            THING_FIELD: thing,
            RECEIVED_AT: 1776693630123_i64,
        })
        .to_string()
    }

    fn message(s: &str) -> Result<Message, Rejection> {
        decode_message(s.as_bytes(), now(), now(), &cfg())
    }

    #[test]
    fn a_message_the_iot_rule_wrapped_is_its_things_readings_at_received_at() {
        // An object naming no device and no time: the thing's, when IoT Core received it.
        let m = message(&wrapped(r#"{"t":1}"#, "sensor_07")).unwrap();
        assert_eq!(m.thing.as_ref().map(DeviceId::as_str), Some("sensor_07"));
        assert_eq!(m.readings[0].device_id.as_str(), "sensor_07");
        assert_eq!(
            m.readings[0].timestamp.to_string(),
            "2026-04-20T14:00:30.123000Z"
        );
        assert_eq!(m.readings[0].metrics.len(), 1, "neither field is a metric");
        // An array: each reading naming no device is the thing's; one naming another keeps
        // its name (the identity check decides about it).
        let m = message(&wrapped(
            r#"[{"t":1,"timestamp":"2026-04-20T14:00:00Z"},{"deviceId":"other","t":2}]"#,
            "gw",
        ))
        .unwrap();
        let ids: Vec<&str> = m.readings.iter().map(|r| r.device_id.as_str()).collect();
        assert_eq!(ids, ["gw", "other"]);
        // A SenML pack: a name with no device part is a metric of the thing.
        let m = message(&wrapped(
            r#"[{"bt":1776693600,"n":"temperature","v":21.5},{"n":"dev_b:t","v":1}]"#,
            "meter",
        ))
        .unwrap();
        let ids: Vec<&str> = m.readings.iter().map(|r| r.device_id.as_str()).collect();
        assert_eq!(ids, ["dev_b", "meter"]);
        // The same object with the thing beside its fields (`SELECT *, topic(2) AS ...`).
        let m =
            message(r#"{"t":1,"tidemarkThing":"sensor_07","receivedAt":1776693630123}"#).unwrap();
        assert_eq!(m.readings[0].device_id.as_str(), "sensor_07");
        assert_eq!(m.readings[0].metrics.len(), 1);
        // A record from a direct producer has no thing.
        assert_eq!(
            message(r#"{"deviceId":"a","t":1,"timestamp":1776693600000}"#)
                .unwrap()
                .thing,
            None
        );
    }

    #[test]
    fn a_malformed_wrapper_is_rejected_with_its_reason() {
        use QuarantineReason::*;
        for (input, want) in [
            (
                r#"{"tidemarkThing":"a#b","t":1}"#.to_owned(),
                InvalidDeviceId,
            ),
            (r#"{"tidemarkThing":7,"t":1}"#.to_owned(), InvalidDeviceId),
            (
                r#"{"tidemarkThing":"a","tidemarkPayload":"%%%"}"#.to_owned(),
                NotObjectOrArray,
            ),
            (
                r#"{"tidemarkThing":"a","tidemarkPayload":5}"#.to_owned(),
                NotObjectOrArray,
            ),
            (wrapped("not json", "a"), NotJson),
        ] {
            assert_eq!(message(&input).map_err(|r| r.reason), Err(want), "{input}");
        }
    }

    #[test]
    fn arrays_and_epoch_milliseconds_are_accepted() {
        let r = decode(
            r#"[{"deviceId":"a","timestamp":1776693600000,"t":1},
                {"deviceId":"b","timestamp":"1776693660000","t":2}]"#,
        )
        .unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].timestamp.to_string(), "2026-04-20T14:00:00.000000Z");
        assert_eq!(r[1].timestamp.to_string(), "2026-04-20T14:01:00.000000Z");
    }

    #[test]
    fn a_reading_without_metrics_is_still_a_reading() {
        // A heartbeat: the device is alive even with nothing to report.
        let r = decode(r#"{"deviceId":"a","timestamp":"2026-04-20T14:00:00Z"}"#).unwrap();
        assert!(r[0].metrics.is_empty());
    }

    #[test]
    fn every_quarantine_reason_of_decoding() {
        use QuarantineReason::*;
        let many: String = (0..33).map(|i| format!(r#","m{i}":1"#)).collect();
        let too_many = format!(r#"{{"deviceId":"a","timestamp":"2026-04-20T14:00:00Z"{many}}}"#);
        let long_array = format!(
            "[{}]",
            vec![r#"{"deviceId":"a","timestamp":"2026-04-20T14:00:00Z"}"#; 1001].join(",")
        );
        let ok_ts = r#""timestamp":"2026-04-20T14:00:00Z""#;
        let cases: Vec<(String, QuarantineReason)> = vec![
            ("Hello World".into(), NotJson),
            (r#"{"deviceId":"a""#.into(), NotJson),
            ("".into(), NotJson),
            ("42".into(), NotObjectOrArray),
            (r#""text""#.into(), NotObjectOrArray),
            ("[]".into(), NotObjectOrArray),
            (
                format!(r#"[{{"deviceId":"a",{ok_ts}}}, 5]"#),
                NotObjectOrArray,
            ),
            (format!(r#"{{{ok_ts}}}"#), InvalidDeviceId),
            (format!(r#"{{"deviceId":7,{ok_ts}}}"#), InvalidDeviceId),
            (format!(r#"{{"deviceId":"a#b",{ok_ts}}}"#), InvalidDeviceId),
            (format!(r#"{{"deviceId":"",{ok_ts}}}"#), InvalidDeviceId),
            (
                format!(r#"{{"deviceId":"{}",{ok_ts}}}"#, "x".repeat(129)),
                InvalidDeviceId,
            ),
            (r#"{"deviceId":"a"}"#.into(), InvalidTimestamp),
            (
                r#"{"deviceId":"a","timestamp":"yesterday"}"#.into(),
                InvalidTimestamp,
            ),
            (
                r#"{"deviceId":"a","timestamp":"2026-04-20T14:00:00"}"#.into(),
                InvalidTimestamp,
            ),
            (
                r#"{"deviceId":"a","timestamp":-5}"#.into(),
                InvalidTimestamp,
            ),
            (
                r#"{"deviceId":"a","timestamp":1.5}"#.into(),
                InvalidTimestamp,
            ),
            (
                r#"{"deviceId":"a","timestamp":true}"#.into(),
                InvalidTimestamp,
            ),
            (
                r#"{"deviceId":"a","timestamp":"2026-04-20T14:10:00.001000Z"}"#.into(),
                TimestampInFuture,
            ),
            (
                r#"{"deviceId":"a","timestamp":"2026-03-21T14:04:59.999000Z"}"#.into(),
                TimestampTooOld,
            ),
            (
                format!(r#"{{"deviceId":"a",{ok_ts},"t":"hot"}}"#),
                InvalidMetric,
            ),
            (
                format!(r#"{{"deviceId":"a",{ok_ts},"t":null}}"#),
                InvalidMetric,
            ),
            (
                format!(r#"{{"deviceId":"a",{ok_ts},"t":{{"v":1}}}}"#),
                InvalidMetric,
            ),
            (
                format!(r#"{{"deviceId":"a",{ok_ts},"t":1e200}}"#),
                InvalidMetric,
            ),
            (
                format!(r#"{{"deviceId":"a",{ok_ts},"t":1e-200}}"#),
                InvalidMetric,
            ),
            (
                format!(r#"{{"deviceId":"a",{ok_ts},"bad-name":1}}"#),
                InvalidMetric,
            ),
            (
                format!(r#"{{"deviceId":"a",{ok_ts},"9lives":1}}"#),
                InvalidMetric,
            ),
            (too_many, TooManyMetrics),
            (long_array, ArrayTooLong),
            (
                format!(r#"{{"deviceId":"a",{ok_ts},"metadata":"fw 2"}}"#),
                InvalidMetadata,
            ),
            (
                format!(
                    r#"{{"deviceId":"a",{ok_ts},"metadata":{{"x":"{}"}}}}"#,
                    "y".repeat(2000)
                ),
                InvalidMetadata,
            ),
            (
                format!(
                    r#"{{"deviceId":"a",{ok_ts},"metadata":{{"x":{}1{}}}}}"#,
                    "[".repeat(20),
                    "]".repeat(20)
                ),
                InvalidMetadata,
            ),
        ];
        for (input, want) in cases {
            let got = decode(&input);
            assert_eq!(
                got.as_ref().map_err(|r| r.reason),
                Err(want),
                "input {}",
                clip(&input)
            );
            assert!(!got.unwrap_err().message.is_empty());
        }
        let mut small = cfg();
        small.max_payload_bytes = 10;
        assert_eq!(
            decode_record(br#"{"deviceId":"a"}"#, now(), &small)
                .unwrap_err()
                .reason,
            PayloadTooLarge
        );
    }

    #[test]
    fn time_bounds_are_inclusive_and_configurable() {
        // GIVEN the clock at 14:05:00 and the default 5 min / 30 days
        let at = |ts: &str| format!(r#"{{"deviceId":"a","timestamp":"{ts}"}}"#);
        assert!(decode(&at("2026-04-20T14:10:00.000000Z")).is_ok());
        assert!(decode(&at("2026-03-21T14:05:00.000000Z")).is_ok());
        // WHEN the bounds are tightened THEN the same readings fall outside
        let mut c = cfg();
        c.max_future = Duration::from_secs(0);
        c.retention_days = 1;
        let r = |s: String| decode_record(s.as_bytes(), now(), &c).map_err(|r| r.reason);
        assert_eq!(
            r(at("2026-04-20T14:05:00.001000Z")),
            Err(QuarantineReason::TimestampInFuture)
        );
        assert_eq!(
            r(at("2026-04-19T14:04:59.999000Z")),
            Err(QuarantineReason::TimestampTooOld)
        );
    }

    #[test]
    fn one_bad_reading_rejects_the_whole_record_and_says_which() {
        let r = decode(
            r#"[{"deviceId":"a","timestamp":"2026-04-20T14:00:00Z","t":1},
                {"deviceId":"a","timestamp":"2026-04-20T14:00:01Z","t":"x"}]"#,
        )
        .unwrap_err();
        assert_eq!(r.reason, QuarantineReason::InvalidMetric);
        assert!(r.message.starts_with("reading 1:"), "{}", r.message);
    }

    #[test]
    fn messages_stay_short_for_huge_values() {
        let r = decode(&format!(
            r#"{{"deviceId":"{}#","timestamp":"2026-04-20T14:00:00Z"}}"#,
            "x".repeat(100_000)
        ))
        .unwrap_err();
        assert!(r.message.chars().count() < 200, "{}", r.message.len());
    }

    #[test]
    fn reading_item_is_exactly_the_serde_item_of_the_schema_type() {
        for (input, shard) in [
            (
                r#"{"deviceId":"a","timestamp":"2026-04-20T14:00:00Z","t":1.5,"h":45,"z":0,
                "n":-0.000123,"big":1e100,"metadata":{"fw":"2.1","tags":["x",1,null,true],
                "loc":{"lat":1.25}}}"#,
                None,
            ),
            (
                r#"{"deviceId":"b.c:d-e","timestamp":"2026-04-20T13:59:59.999000Z"}"#,
                Some(7),
            ),
        ] {
            let r = &decode(input).unwrap()[0];
            let mut typed = tidemark_schema::ReadingItem::new(r, shard, 30);
            typed.arrived_at = Some(now());
            assert_eq!(
                reading_item(r, shard, 30, now()).unwrap(),
                tidemark_store::to_item(&typed).unwrap()
            );
        }
    }

    #[test]
    fn reading_item_has_keys_ttl_and_metrics() {
        let r = &decode(r#"{"deviceId":"sensor_01","timestamp":"2026-04-20T14:00:00Z","t":1.5}"#)
            .unwrap()[0];
        let item = reading_item(r, Some(3), 30, now()).unwrap();
        use aws_sdk_dynamodb::types::AttributeValue as A;
        assert_eq!(item["pk"], A::S("DEVICE#sensor_01#S3".into()));
        assert_eq!(
            item["sk"],
            A::S("READING#2026-04-20T14:00:00.000000Z".into())
        );
        assert_eq!(
            item["ttl"],
            A::N((r.timestamp.epoch_seconds() + 30 * 86_400).to_string())
        );
        assert!(matches!(&item["metrics"], A::M(m) if m["t"] == A::N("1.5".into())));
    }
}
