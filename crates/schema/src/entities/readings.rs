//! Readings: the reading as devices send it and as the API returns it, its item, and which
//! metric values the table can store. Most of the writes, so kept small.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::epoch_millis;
use crate::ids::{DeviceId, MetricName};
use crate::keys::{self, EntityKey, KeyError};
use crate::time::Timestamp;

/// A reading as devices send it and the API returns it (after validation).
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    pub device_id: DeviceId,
    pub timestamp: Timestamp,
    pub metrics: BTreeMap<MetricName, f64>,
    pub metadata: Option<Map<String, Value>>,
}

impl Reading {
    /// The flat JSON shape of docs/design.md §6: `{"deviceId","timestamp",<metric>:n…,"metadata"?}`.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("deviceId".into(), Value::String(self.device_id.to_string()));
        m.insert(
            "timestamp".into(),
            Value::String(self.timestamp.to_string()),
        );
        for (k, v) in &self.metrics {
            m.insert(k.to_string(), number(*v));
        }
        if let Some(md) = &self.metadata {
            m.insert("metadata".into(), Value::Object(md.clone()));
        }
        Value::Object(m)
    }
}

/// A JSON number for a finite f64, integral values without a fraction (`45`, not `45.0`).
pub fn number(v: f64) -> Value {
    if v.fract() == 0.0 && v.abs() < 9.0e15 {
        Value::from(v as i64)
    } else {
        serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
    }
}

/// `DEVICE#<id>[#S<n>]` / `READING#<ts>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadingItem {
    pub pk: String,
    pub sk: String,
    pub metrics: BTreeMap<MetricName, f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// Epoch seconds after which DynamoDB may delete the item.
    pub ttl: i64,
    /// When the record that wrote it arrived ([`field::ARRIVED_AT`]; absent on items written
    /// before arrivals were kept).
    ///
    /// [`field::ARRIVED_AT`]: super::field::ARRIVED_AT
    #[serde(
        default,
        with = "epoch_millis",
        skip_serializing_if = "Option::is_none"
    )]
    pub arrived_at: Option<Timestamp>,
}

impl ReadingItem {
    pub fn new(r: &Reading, shard: Option<u16>, retention_days: u32) -> Self {
        ReadingItem {
            pk: keys::reading_pk(&r.device_id, shard),
            sk: keys::reading_sk(r.timestamp),
            metrics: r.metrics.clone(),
            metadata: r.metadata.clone(),
            ttl: r.timestamp.ttl_after_days(retention_days),
            arrived_at: None,
        }
    }

    /// The reading back, with its device, shard and time taken from the key.
    pub fn to_reading(&self) -> Result<(Reading, Option<u16>), KeyError> {
        match EntityKey::parse(&self.pk, &self.sk)? {
            EntityKey::Reading {
                device,
                partition: shard,
                at,
            } => Ok((
                Reading {
                    device_id: device,
                    timestamp: at,
                    metrics: self.metrics.clone(),
                    metadata: self.metadata.clone(),
                },
                shard,
            )),
            _ => Err(KeyError {
                pk: self.pk.clone(),
                sk: self.sk.clone(),
                reason: "not a reading key".into(),
            }),
        }
    }

    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.ttl < now.epoch_seconds()
    }
}

/// The largest magnitude a metric value (or a threshold) may have. DynamoDB numbers stop
/// below 1e126; an hour or a day of one device holds at most 8.64e10 readings (one per
/// microsecond), so sums of values up to 1e100 can never leave DynamoDB's range.
pub const MAX_METRIC_MAGNITUDE: f64 = 1e100;
/// The smallest non-zero magnitude (DynamoDB's own floor is 1e-130; f64 goes far lower).
pub const MIN_METRIC_MAGNITUDE: f64 = 1e-100;

/// True for a value Tidemark stores as a metric: finite, and zero or a magnitude within
/// [`MIN_METRIC_MAGNITUDE`]..=[`MAX_METRIC_MAGNITUDE`], so every rollup of it stays storable.
pub fn is_metric_value(v: f64) -> bool {
    let a = v.abs();
    v.is_finite() && (v == 0.0 || (MIN_METRIC_MAGNITUDE..=MAX_METRIC_MAGNITUDE).contains(&a))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    fn sample_reading() -> Reading {
        Reading {
            device_id: DeviceId::new("sensor_01").unwrap(),
            timestamp: ts("2026-04-20T14:00:00Z"),
            metrics: [("temperature", 22.4), ("humidity", 45.0), ("battery", 87.0)]
                .into_iter()
                .map(|(k, v)| (MetricName::new(k).unwrap(), v))
                .collect(),
            metadata: None,
        }
    }

    #[test]
    fn reading_item_matches_the_sample_row_of_design_9() {
        let item = ReadingItem::new(&sample_reading(), None, 30);
        assert_eq!(item.pk, "DEVICE#sensor_01");
        assert_eq!(item.sk, "READING#2026-04-20T14:00:00.000000Z");
        assert_eq!(
            item.ttl,
            ts("2026-04-20T14:00:00Z").epoch_seconds() + 30 * 86_400
        );
        let (back, shard) = item.to_reading().unwrap();
        assert_eq!(back, sample_reading());
        assert_eq!(shard, None);
    }

    #[test]
    fn reading_json_is_flat_with_normalised_time() {
        assert_eq!(
            sample_reading().to_json(),
            json!({"deviceId":"sensor_01","timestamp":"2026-04-20T14:00:00.000000Z",
                   "temperature":22.4,"humidity":45,"battery":87})
        );
    }
}
