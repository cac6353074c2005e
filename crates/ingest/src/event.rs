//! The Kinesis event as Lambda delivers it, and the arrival stamp ingest keys on.
//!
//! Lambda writes each record's `approximateArrivalTimestamp` as epoch seconds with a
//! millisecond fraction (`1795824020.31` for 310 ms). `aws_lambda_events` 1.2 reads the
//! fraction's digits as a count of milliseconds, so `.31` becomes 31 ms and `.5` 5 ms: about
//! one record in ten gets an arrival up to 0.9 s early, and a record put back into an event
//! with its true arrival (a set-aside re-drive) no longer finds its own quarantine item, whose
//! key holds the arrival. [`KinesisBatch`] decodes the event with the library and then sets
//! each record's arrival from the number as written, to the millisecond.

use aws_lambda_events::encodings::SecondTimestamp;
use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use chrono::{DateTime, Utc};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use tidemark_schema::Timestamp;

/// A Kinesis event whose records' arrivals are exact to the millisecond: what the
/// `tidemark-ingest` binary receives.
#[derive(Debug, Clone, Default)]
pub struct KinesisBatch(pub KinesisEvent);

impl<'de> Deserialize<'de> for KinesisBatch {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        let arrivals: Vec<Option<i64>> = value
            .get("Records")
            .and_then(Value::as_array)
            .map(|records| {
                records
                    .iter()
                    .map(|r| arrival_millis(r.pointer("/kinesis/approximateArrivalTimestamp")?))
                    .collect()
            })
            .unwrap_or_default();
        let mut event: KinesisEvent = serde_json::from_value(value).map_err(D::Error::custom)?;
        for (record, millis) in event.records.iter_mut().zip(arrivals) {
            if let Some(millis) = millis {
                set_arrival(record, millis);
            }
        }
        Ok(KinesisBatch(event))
    }
}

/// Epoch milliseconds of an arrival written as epoch seconds, a number or a string of one
/// (as `aws_lambda_events` writes it back).
fn arrival_millis(v: &Value) -> Option<i64> {
    let seconds = match v {
        Value::Number(n) => n.as_f64()?,
        Value::String(s) => s.parse::<f64>().ok()?,
        _ => return None,
    };
    let millis = (seconds * 1000.0).round();
    // Inside chrono's range, so the stamp below cannot fail.
    (millis.abs() < 8.0e15).then_some(millis as i64)
}

/// Sets `record`'s arrival to `millis` after the epoch.
pub fn set_arrival(record: &mut KinesisEventRecord, millis: i64) {
    if let Some(at) = DateTime::<Utc>::from_timestamp_millis(millis) {
        record.kinesis.approximate_arrival_timestamp = SecondTimestamp(at);
    }
}

/// The arrival time Kinesis stamped on the record: the same on every delivery, so a replayed
/// batch rewrites the very same quarantine item.
pub fn arrival_time(record: &KinesisEventRecord) -> Timestamp {
    Timestamp::from_epoch_millis(
        record
            .kinesis
            .approximate_arrival_timestamp
            .timestamp_millis(),
    )
    .unwrap_or(Timestamp::MIN)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(arrivals: &[Value]) -> Value {
        let records: Vec<Value> = arrivals
            .iter()
            .enumerate()
            .map(|(i, at)| {
                json!({
                    "kinesis": {
                        "kinesisSchemaVersion": "1.0",
                        "partitionKey": "sensor_01",
                        "sequenceNumber": format!("4959{i}"),
                        "data": "e30=",
                        "approximateArrivalTimestamp": at,
                    },
                    "eventSource": "aws:kinesis",
                    "eventID": format!("shardId-000000000000:4959{i}"),
                    "eventSourceARN": "arn:aws:kinesis:us-east-1:000000000000:stream/readings",
                })
            })
            .collect();
        json!({ "Records": records })
    }

    #[test]
    fn an_arrival_keeps_its_milliseconds_whatever_zeros_end_them() {
        let written = [
            json!(1795824020.31),
            json!(1795824020.5),
            json!(1795824020.05),
            json!(1795824020.999),
            json!(1795824020.001),
            json!(1795824020),
            json!("1795824020.310"),
        ];
        let batch: KinesisBatch = serde_json::from_value(event(&written)).unwrap();
        let millis: Vec<i64> = batch
            .0
            .records
            .iter()
            .map(|r| arrival_time(r).epoch_millis() - 1_795_824_020_000)
            .collect();
        assert_eq!(millis, [310, 500, 50, 999, 1, 0, 310]);
    }

    #[test]
    fn an_event_written_back_by_the_library_reads_the_same_arrivals() {
        let batch: KinesisBatch =
            serde_json::from_value(event(&[json!(1795824020.5), json!(1795824020.123)])).unwrap();
        let again: KinesisBatch =
            serde_json::from_value(serde_json::to_value(&batch.0).unwrap()).unwrap();
        let arrivals = |b: &KinesisBatch| b.0.records.iter().map(arrival_time).collect::<Vec<_>>();
        assert_eq!(arrivals(&again), arrivals(&batch));
    }

    #[test]
    fn an_event_without_records_or_arrivals_still_decodes() {
        let empty: KinesisBatch = serde_json::from_value(json!({"Records": []})).unwrap();
        assert!(empty.0.records.is_empty());
        assert!(serde_json::from_value::<KinesisBatch>(json!({"Records": 3})).is_err());
    }
}
