//! Stream records → what changed about which reading. A reading item's INSERT, MODIFY or
//! user REMOVE is one change; a packed slot part's record (docs/design.md §5) is one change per reading
//! its old and new images differ in ([`packed::diff`]), each the INSERT, correction or delete
//! that reading would have been as a single item. Everything else is ignored here, with the
//! reason.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use aws_lambda_events::event::dynamodb::EventRecord;
use serde::Deserialize;
use tidemark_schema::packed::{self, SlotReadings};
use tidemark_schema::{DeviceId, EntityKey, MetricName, ReadingItem, SlotItem, Timestamp, keys};

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
    /// The sort key of the item the record is about: the reading's own, or its slot part's
    /// (what per-item marks name, see [`tidemark_schema::marks`]).
    pub sk: String,
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
    /// A slot part whose image does not decode (corrupt, foreign, a reading past the hour
    /// after its slot's): skipped, logged with its key and counted as an unreadable item.
    Unreadable { key: String, reason: String },
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
            sk: r.sk,
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
#[serde(rename_all = "camelCase")]
struct ThresholdAttrs {
    pk: String,
    sk: String,
    #[serde(default)]
    thresholds: Option<serde_json::Value>,
    #[serde(default)]
    offline_after_seconds: Option<serde_json::Value>,
    #[serde(default)]
    offline_severity: Option<serde_json::Value>,
}

/// The device whose item this MODIFY gave other offline settings (`offlineAfterSeconds`,
/// `offlineSeverity`): its watch is set up again at once, and an offline alert of a device
/// no longer watched resolves.
pub fn offline_settings_changed(rec: &EventRecord) -> Option<DeviceId> {
    if rec.event_name != "MODIFY" {
        return None;
    }
    let old: ThresholdAttrs = serde_dynamo::from_item(rec.change.old_image.clone()).ok()?;
    let new: ThresholdAttrs = serde_dynamo::from_item(rec.change.new_image.clone()).ok()?;
    let changed = old.offline_after_seconds != new.offline_after_seconds
        || old.offline_severity != new.offline_severity;
    match EntityKey::parse(&new.pk, &new.sk) {
        Ok(EntityKey::Device(id)) if changed => Some(id),
        _ => None,
    }
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

/// One reading's change in a slot part's record: `before`/`after` absent for a reading the
/// record adds/drops.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotReadingChange {
    pub at: Timestamp,
    pub before: Option<BTreeMap<MetricName, f64>>,
    pub after: Option<BTreeMap<MetricName, f64>>,
}

/// What one record of a slot part changes, reading by reading.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotChanges {
    /// The part's partition key (its source partition, shared with single readings).
    pub pk: String,
    pub sk: String,
    pub device: DeviceId,
    /// In time order; empty when the images hold the same readings (a part being sealed).
    pub changes: Vec<SlotReadingChange>,
}

/// The record's key, if it is one of our items.
fn record_key(rec: &EventRecord) -> Option<(KeyAttrs, EntityKey)> {
    let c = &rec.change;
    let key_source = [&c.keys, &c.new_image, &c.old_image]
        .into_iter()
        .find(|i| !i.is_empty())?;
    let k: KeyAttrs = serde_dynamo::from_item(key_source.clone()).ok()?;
    let parsed = EntityKey::parse(&k.pk, &k.sk).ok()?;
    Some((k, parsed))
}

/// One image of a slot part: an absent image is a part without readings.
fn slot_image(k: &KeyAttrs, item: &serde_dynamo::Item) -> Result<SlotReadings, Ignored> {
    if item.is_empty() {
        return Ok(SlotReadings::new());
    }
    let unreadable = |reason: String| Ignored::Unreadable {
        key: format!("{}/{}", k.pk, k.sk),
        reason,
    };
    let slot: SlotItem =
        serde_dynamo::from_item(item.clone()).map_err(|e| unreadable(e.to_string()))?;
    if (slot.pk.as_str(), slot.sk.as_str()) != (k.pk.as_str(), k.sk.as_str()) {
        return Err(unreadable("image key differs from the record's key".into()));
    }
    // A timestamp without metrics only carries metadata for metrics held in other parts:
    // it is no reading of this part's.
    let mut readings = slot
        .decode()
        .map_err(|e| unreadable(e.to_string()))?
        .readings;
    readings.retain(|_, m| !m.is_empty());
    Ok(readings)
}

/// The reading changes of a slot part's record (whatever its event name: what a REMOVE by
/// TTL means is the caller's business); `None` when the record is not a slot part's. Each
/// event needs the images it changes between (an INSERT its new one, a REMOVE its old one, a
/// MODIFY both), which the table's `NEW_AND_OLD_IMAGES` stream view gives: a record without
/// them is unreadable, never an empty slot.
pub fn slot_changes(rec: &EventRecord) -> Option<Result<SlotChanges, Ignored>> {
    let (k, EntityKey::Slot { device, .. }) = record_key(rec)? else {
        return None;
    };
    let c = &rec.change;
    Some((|| {
        let (need_old, need_new) = match rec.event_name.as_str() {
            "INSERT" => (false, true),
            "REMOVE" => (true, false),
            _ => (true, true),
        };
        if (need_old && c.old_image.is_empty()) || (need_new && c.new_image.is_empty()) {
            return Err(Ignored::Unreadable {
                key: format!("{}/{}", k.pk, k.sk),
                reason: format!(
                    "slot {} without the images it needs (stream view must be \
                     NEW_AND_OLD_IMAGES)",
                    rec.event_name
                ),
            });
        }
        let old = slot_image(&k, &c.old_image)?;
        let new = slot_image(&k, &c.new_image)?;
        let changes = packed::diff(&old, &new)
            .into_iter()
            .map(|d| SlotReadingChange {
                at: d.at,
                before: d.before.cloned(),
                after: d.after.cloned(),
            })
            .collect();
        Ok(SlotChanges {
            pk: k.pk.clone(),
            sk: k.sk.clone(),
            device,
            changes,
        })
    })())
}

fn valid_seq(rec: &EventRecord) -> Result<String, Ignored> {
    rec.change
        .sequence_number
        .clone()
        .filter(|s| keys::valid_sequence(s))
        .ok_or_else(|| Ignored::Malformed("missing or non-decimal SequenceNumber".into()))
}

/// A slot part's record as the reading changes it makes, each as the same change of a single
/// reading item would be (a TTL expiry of the part, like a reading's, changes nothing).
fn classify_slot(index: usize, rec: &EventRecord) -> Result<Vec<StreamChange>, Ignored> {
    if rec.event_name == "REMOVE" && is_ttl(rec) {
        return Err(Ignored::TtlExpiry);
    }
    if !matches!(rec.event_name.as_str(), "INSERT" | "MODIFY" | "REMOVE") {
        return Err(Ignored::Malformed(format!(
            "unknown eventName {:?}",
            rec.event_name
        )));
    }
    let seq = valid_seq(rec)?;
    let slot = slot_changes(rec).ok_or(Ignored::NotReading)??;
    if slot.changes.is_empty() {
        return Err(Ignored::Unchanged);
    }
    let image = |at, metrics| Image {
        pk: slot.pk.clone(),
        sk: slot.sk.clone(),
        device: slot.device.clone(),
        at,
        metrics,
    };
    Ok(slot
        .changes
        .into_iter()
        .filter_map(|ch| {
            let change = match (ch.before, ch.after) {
                (None, Some(new)) => Change::Insert(image(ch.at, new)),
                (Some(old), None) => Change::Delete(image(ch.at, old)),
                (Some(old), Some(new)) => Change::Correct {
                    old: image(ch.at, old),
                    new: image(ch.at, new),
                },
                (None, None) => return None,
            };
            Some(StreamChange {
                index,
                seq: seq.clone(),
                change,
            })
        })
        .collect())
}

/// What one stream record means for the aggregator: the reading changes it makes, in time
/// order (one for a reading item, one per changed reading for a slot part).
pub fn classify(index: usize, rec: &EventRecord) -> Result<Vec<StreamChange>, Ignored> {
    match record_key(rec) {
        Some((_, EntityKey::Reading { .. })) => classify_reading(index, rec).map(|c| vec![c]),
        Some((_, EntityKey::Slot { .. })) => classify_slot(index, rec),
        Some(_) => Err(Ignored::NotReading),
        None => Err(Ignored::NotOurs),
    }
}

fn classify_reading(index: usize, rec: &EventRecord) -> Result<StreamChange, Ignored> {
    let c = &rec.change;
    let seq = valid_seq(rec)?;
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
    use crate::testing::{metric, slot_item, slot_record};

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
    fn the_aggregators_own_rollup_pages_are_not_readings() {
        let k = tidemark_schema::AggregateItem::page_key(
            &DeviceId::new("gw").unwrap(),
            tidemark_schema::Period::Hourly.bucket(start()),
            2,
        );
        let mut rec = EventRecord::default();
        rec.event_name = "INSERT".into();
        rec.change.sequence_number = Some("1".into());
        rec.change.keys =
            serde_dynamo::to_item(serde_json::json!({"pk": k.pk, "sk": k.sk})).unwrap();
        assert_eq!(classify(0, &rec), Err(Ignored::NotReading));
    }

    fn start() -> Timestamp {
        Timestamp::parse_rfc3339("2026-04-20T14:00:00Z").unwrap()
    }

    /// (kind, seconds after the slot start, value) of each change.
    fn summary(changes: &[StreamChange]) -> Vec<(&'static str, i64, f64)> {
        let t = metric("t");
        changes
            .iter()
            .map(|c| {
                let i = c.change.image();
                let kind = match &c.change {
                    Change::Insert(_) => "insert",
                    Change::Correct { .. } => "correct",
                    Change::Delete(_) => "delete",
                };
                let secs = (i.at.epoch_millis() - start().epoch_millis()) / 1000;
                (kind, secs, i.metrics[&t])
            })
            .collect()
    }

    #[test]
    fn a_slot_record_is_one_change_per_reading_its_images_differ_in() {
        let v1 = slot_item("d", start(), 0, &[(1, 1.0), (2, 2.0)]);
        let v2 = slot_item("d", start(), 0, &[(1, 1.0), (2, 2.5), (3, 3.0)]);
        // INSERT: each reading new, all under the record's sequence number
        let ins = classify(4, &slot_record(7, None, Some(&v1))).unwrap();
        assert_eq!(summary(&ins), [("insert", 1, 1.0), ("insert", 2, 2.0)]);
        assert!(
            ins.iter()
                .all(|c| c.index == 4 && c.seq == format!("{:021}", 7))
        );
        assert_eq!(ins[0].change.image().pk, "DEVICE#d");
        // MODIFY: the corrected reading and the added one; the unchanged one is not there
        let m = classify(0, &slot_record(8, Some(&v1), Some(&v2))).unwrap();
        assert_eq!(summary(&m), [("correct", 2, 2.5), ("insert", 3, 3.0)]);
        // user REMOVE: each reading deleted
        let del = classify(0, &slot_record(9, Some(&v2), None)).unwrap();
        assert_eq!(del.len(), 3);
        assert!(del.iter().all(|c| matches!(c.change, Change::Delete(_))));
    }

    #[test]
    fn sealing_a_part_or_expiring_it_changes_no_reading() {
        let open = slot_item("d", start(), 0, &[(1, 1.0)]);
        let mut sealed = open.clone();
        sealed.sealed = true;
        sealed.version = 2;
        assert_eq!(
            classify(0, &slot_record(2, Some(&open), Some(&sealed))),
            Err(Ignored::Unchanged)
        );
        let mut ttl = slot_record(3, Some(&sealed), None);
        let mut u = aws_lambda_events::event::dynamodb::UserIdentity::default();
        u.type_ = "Service".into();
        u.principal_id = TTL_PRINCIPAL.into();
        ttl.user_identity = Some(u);
        assert_eq!(classify(0, &ttl), Err(Ignored::TtlExpiry));
    }

    #[test]
    fn a_corrupt_or_foreign_slot_image_is_unreadable_with_its_key() {
        let good = slot_item("d", start(), 0, &[(1, 1.0)]);
        let key = format!("{}/{}", good.pk, good.sk);
        let mut garbage = good.clone();
        garbage.packed = vec![1, 200];
        let mut late = slot_item("d", start(), 0, &[(7200, 1.0)]);
        late.sk = good.sk.clone();
        let mut wrong_type = slot_record(1, None, Some(&good));
        wrong_type.change.new_image.insert(
            "packed".into(),
            serde_dynamo::AttributeValue::S("not bytes".into()),
        );
        let mut no_count = slot_record(1, None, Some(&good));
        no_count.change.new_image.remove("readingCount");
        let mut no_old = slot_record(1, Some(&good), Some(&good));
        no_old.change.old_image.clear();
        let mut keys_only = slot_record(1, None, Some(&good));
        keys_only.change.new_image.clear();
        for rec in [
            slot_record(1, None, Some(&garbage)),
            slot_record(1, None, Some(&late)),
            slot_record(1, Some(&garbage), Some(&good)),
            wrong_type,
            no_count,
            no_old,
            keys_only,
        ] {
            match classify(0, &rec) {
                Err(Ignored::Unreadable { key: k, .. }) => assert_eq!(k, key),
                other => panic!("{other:?}"),
            }
        }
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
