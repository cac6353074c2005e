//! Stream records → what changed about which reading. Everything that is not an INSERT,
//! MODIFY or user REMOVE of a reading is ignored here, with the reason.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use aws_lambda_events::event::dynamodb::EventRecord;
use serde::Deserialize;
use tidemark_schema::{DeviceId, EntityKey, MetricName, ReadingItem, Timestamp, keys};

/// TTL deletions are made by this principal (with identity type `Service`).
pub const TTL_PRINCIPAL: &str = "dynamodb.amazonaws.com";

/// Compares two stream sequence numbers as the integers they are. Their length varies on AWS
/// (DynamoDB Local pads to 21 digits), so string order would be wrong; comparing digit
/// strings by significant length avoids any overflow whatever their length.
pub fn cmp_seq(a: &str, b: &str) -> Ordering {
    let a = a.trim_start_matches('0');
    let b = b.trim_start_matches('0');
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// A reading as one stream image shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Image {
    /// The partition key it was written to (`DEVICE#<id>` or a hot device's shard).
    pub pk: String,
    pub device: DeviceId,
    pub at: Timestamp,
    pub metrics: BTreeMap<MetricName, f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// A new reading.
    Insert(Image),
    /// A reading whose values were corrected (same key, other metrics).
    Correct { old: Image, new: Image },
    /// A reading deleted by a user (not by TTL).
    Delete(Image),
}

impl Change {
    pub fn image(&self) -> &Image {
        match self {
            Change::Insert(i) | Change::Delete(i) => i,
            Change::Correct { new, .. } => new,
        }
    }
}

/// One record that may change aggregates.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamChange {
    /// Position in the event (for partial batch failures).
    pub index: usize,
    pub seq: String,
    pub change: Change,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ignored {
    /// Not an item of our schema (another table, a foreign key shape).
    NotOurs,
    /// Our item but not a reading (device, alert, aggregate, quarantine, config).
    NotReading,
    /// Deleted by TTL: expiry never changes aggregates.
    TtlExpiry,
    /// A MODIFY that changed no metric value (metadata or ttl only).
    Unchanged,
    /// Looks like a reading but cannot be read; logged, never retried (it would never pass).
    Malformed(String),
}

#[derive(Deserialize)]
struct KeyAttrs {
    pk: String,
    sk: String,
}

fn image(item: &serde_dynamo::Item) -> Result<Image, Ignored> {
    let r: ReadingItem = serde_dynamo::from_item(item.clone())
        .map_err(|e| Ignored::Malformed(format!("reading image: {e}")))?;
    match EntityKey::parse(&r.pk, &r.sk) {
        Ok(EntityKey::Reading { device, at, .. }) => Ok(Image {
            pk: r.pk,
            device,
            at,
            metrics: r.metrics,
        }),
        _ => Err(Ignored::Malformed("image key is not a reading".into())),
    }
}

fn is_ttl(rec: &EventRecord) -> bool {
    rec.user_identity
        .as_ref()
        .is_some_and(|u| u.principal_id == TTL_PRINCIPAL && u.type_ == "Service")
}

#[derive(Deserialize)]
struct ThresholdAttrs {
    pk: String,
    sk: String,
    #[serde(default)]
    thresholds: Option<serde_json::Value>,
}

/// The device whose item this MODIFY gave other thresholds (the API's `PUT /devices/{id}`):
/// its alert states are checked against the new ones at once, not at its next reading.
pub fn thresholds_changed(rec: &EventRecord) -> Option<DeviceId> {
    if rec.event_name != "MODIFY" {
        return None;
    }
    let old: ThresholdAttrs = serde_dynamo::from_item(rec.change.old_image.clone()).ok()?;
    let new: ThresholdAttrs = serde_dynamo::from_item(rec.change.new_image.clone()).ok()?;
    match EntityKey::parse(&new.pk, &new.sk) {
        Ok(EntityKey::Device(id)) if old.thresholds != new.thresholds => Some(id),
        _ => None,
    }
}

/// What one stream record means for the aggregator.
pub fn classify(index: usize, rec: &EventRecord) -> Result<StreamChange, Ignored> {
    let c = &rec.change;
    let key_source = [&c.keys, &c.new_image, &c.old_image]
        .into_iter()
        .find(|i| !i.is_empty())
        .ok_or(Ignored::NotOurs)?;
    let k: KeyAttrs = serde_dynamo::from_item(key_source.clone()).map_err(|_| Ignored::NotOurs)?;
    match EntityKey::parse(&k.pk, &k.sk) {
        Ok(EntityKey::Reading { .. }) => {}
        Ok(_) => return Err(Ignored::NotReading),
        Err(_) => return Err(Ignored::NotOurs),
    }
    let seq = c
        .sequence_number
        .clone()
        .filter(|s| keys::valid_sequence(s))
        .ok_or_else(|| Ignored::Malformed("missing or non-decimal SequenceNumber".into()))?;
    let change = match rec.event_name.as_str() {
        "INSERT" => Change::Insert(image(&c.new_image)?),
        "MODIFY" => {
            if c.old_image.is_empty() {
                return Err(Ignored::Malformed(
                    "MODIFY without OldImage (stream view must be NEW_AND_OLD_IMAGES)".into(),
                ));
            }
            let old = image(&c.old_image)?;
            let new = image(&c.new_image)?;
            if old.metrics == new.metrics {
                return Err(Ignored::Unchanged);
            }
            Change::Correct { old, new }
        }
        "REMOVE" if is_ttl(rec) => return Err(Ignored::TtlExpiry),
        "REMOVE" => {
            if c.old_image.is_empty() {
                return Err(Ignored::Malformed("REMOVE without OldImage".into()));
            }
            Change::Delete(image(&c.old_image)?)
        }
        other => return Err(Ignored::Malformed(format!("unknown eventName {other:?}"))),
    };
    Ok(StreamChange { index, seq, change })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notification_markers_are_not_readings() {
        let k =
            EntityKey::NotifyMarker(tidemark_schema::EventId::new(&"0".repeat(32)).unwrap()).key();
        let mut rec = EventRecord::default();
        rec.event_name = "INSERT".into();
        rec.change.sequence_number = Some("1".into());
        rec.change.keys =
            serde_dynamo::to_item(serde_json::json!({"pk": k.pk, "sk": k.sk})).unwrap();
        assert_eq!(classify(0, &rec), Err(Ignored::NotReading));
    }

    #[test]
    fn sequence_numbers_compare_as_integers_whatever_their_length() {
        assert_eq!(cmp_seq("000000000000000000099", "100"), Ordering::Less);
        assert_eq!(cmp_seq("9", "10"), Ordering::Less);
        assert_eq!(cmp_seq("00010", "10"), Ordering::Equal);
        let long = "1".repeat(45);
        assert_eq!(cmp_seq(&long, "2"), Ordering::Greater);
        assert_eq!(cmp_seq("0", "000"), Ordering::Equal);
    }
}
