//! Stream records, decoded once ([`decode`]) into what each is ([`Decoded`]): reading
//! changes, a device's changed settings, an alert's images, a heartbeat to pass, a TTL expiry,
//! or nothing of ours (with the reason). Every consumer reads the decoded record: the rollups
//! role, the alerts role (its devices' batches, arrivals, heartbeats, notifications) and the
//! admin's rebuild. One place here says what a TTL expiry is ([`is_ttl_expiry`]).
//!
//! A reading item's INSERT, MODIFY or user REMOVE is one change; a packed slot part's record
//! (docs/design.md §5) is one change per reading its old and new images differ in
//! ([`packed::diff`]), each the INSERT, correction or delete that reading would have been as a
//! single item.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use aws_lambda_events::event::dynamodb::EventRecord;
use serde::Deserialize;
use tidemark_schema::entities::epoch_millis;
use tidemark_schema::keys::ShardName;
use tidemark_schema::packed::{self, SlotReadings};
use tidemark_schema::{
    AlertItem, DeviceId, EntityKey, GroupAlertItem, HeartbeatItem, MetricName, ReadingItem,
    SlotItem, Timestamp, keys,
};

/// TTL deletions are made by this principal (with identity type `Service`).
pub const TTL_PRINCIPAL: &str = "dynamodb.amazonaws.com";

/// Whether `rec` is a TTL expiry: a REMOVE made by DynamoDB itself (the service principal
/// [`TTL_PRINCIPAL`], identity type `Service`), not by a user. The one definition: every
/// consumer asks [`decode`].
pub fn is_ttl_expiry(rec: &EventRecord) -> bool {
    rec.event_name == "REMOVE"
        && rec
            .user_identity
            .as_ref()
            .is_some_and(|u| u.principal_id == TTL_PRINCIPAL && u.type_ == "Service")
}

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
    /// The partition key it was written to (`DEVICE#<id>` or a hot device's partition).
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
    /// Our item but nothing the aggregator acts on here: not a reading (an aggregate, a
    /// quarantine, a config item, a device item's other writes, an alert's REMOVE, a
    /// heartbeat already passed).
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

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ThresholdAttrs {
    pk: String,
    sk: String,
    #[serde(default)]
    thresholds: Option<serde_json::Value>,
    #[serde(default)]
    rules: Option<serde_json::Value>,
    #[serde(default)]
    percentiles: Option<serde_json::Value>,
    #[serde(default)]
    offline_after_seconds: Option<serde_json::Value>,
    #[serde(default)]
    offline_severity: Option<serde_json::Value>,
}

/// What a device item's MODIFY changed of what the alerts role follows: other thresholds or
/// rules (or `percentiles`, which a p95 window rule needs) (the API's `PUT /devices/{id}`: its alert states are checked against the new ones at once,
/// not at its next reading) or other offline settings (`offlineAfterSeconds`,
/// `offlineSeverity`: its watch is set up again at once, and an offline alert of a device no
/// longer watched resolves). `None` for any other record or images that do not decode.
fn device_change(rec: &EventRecord) -> Option<DeviceChange> {
    if rec.event_name != "MODIFY" {
        return None;
    }
    let old: ThresholdAttrs = serde_dynamo::from_item(rec.change.old_image.clone()).ok()?;
    let new: ThresholdAttrs = serde_dynamo::from_item(rec.change.new_image.clone()).ok()?;
    match EntityKey::parse(&new.pk, &new.sk) {
        Ok(EntityKey::Device(device)) => Some(DeviceChange {
            device,
            thresholds: old.thresholds != new.thresholds
                || old.rules != new.rules
                || old.percentiles != new.percentiles,
            offline_settings: old.offline_after_seconds != new.offline_after_seconds
                || old.offline_severity != new.offline_severity,
        }),
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
fn slot_changes(rec: &EventRecord) -> Option<Result<SlotChanges, Ignored>> {
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
/// reading item would be (a REMOVE as the deletes of its readings).
fn classify_slot(index: usize, rec: &EventRecord) -> Result<Vec<StreamChange>, Ignored> {
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

/// The reading changes of a reading item's or slot part's record, in time order (one for a
/// reading item, one per changed reading for a slot part); a REMOVE's are deletes (whoever
/// made it: [`decode`] has told a TTL expiry apart before).
fn reading_changes(
    index: usize,
    rec: &EventRecord,
    key: &EntityKey,
) -> Result<Vec<StreamChange>, Ignored> {
    match key {
        EntityKey::Reading { .. } => classify_reading(index, rec).map(|c| vec![c]),
        EntityKey::Slot { .. } => classify_slot(index, rec),
        _ => Err(Ignored::NotReading),
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

/// One stream record, decoded once: what it is to the aggregator.
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    /// A reading item's or slot part's write or user delete.
    Readings(Readings),
    /// A device item's MODIFY (its thresholds or offline settings may have changed).
    Device(DeviceChange),
    /// An alert item's INSERT or MODIFY (its state changes are what [`crate::notify`]
    /// publishes).
    Alert(Box<AlertRecord>),
    /// A group rule's alert item's INSERT or MODIFY (published the same way).
    GroupAlert(Box<GroupAlertRecord>),
    /// A heartbeat ingest stored that the alerts role has not marked passed yet.
    Heartbeat(Heartbeat),
    /// An item deleted by TTL ([`is_ttl_expiry`]): expiry never changes a rollup or an alert.
    TtlExpiry(Expiry),
    /// Nothing the aggregator acts on, and why.
    Ignored(Ignored),
}

impl Decoded {
    /// The reading changes the record makes, or why it makes none (what the rollups role and
    /// the alerts role's readings take).
    pub fn reading_changes(&self) -> Result<&[StreamChange], Ignored> {
        match self {
            Decoded::Readings(r) => r.changes.as_deref().map_err(Clone::clone),
            Decoded::Device(_)
            | Decoded::Alert(_)
            | Decoded::GroupAlert(_)
            | Decoded::Heartbeat(_) => Err(Ignored::NotReading),
            Decoded::TtlExpiry(_) => Err(Ignored::TtlExpiry),
            Decoded::Ignored(why) => Err(why.clone()),
        }
    }
}

/// A reading item's or slot part's record, other than a TTL expiry.
#[derive(Debug, Clone, PartialEq)]
pub struct Readings {
    /// The item's key: [`EntityKey::Reading`] or [`EntityKey::Slot`].
    pub key: EntityKey,
    /// The reading changes (in time order), or why the record makes none: it changes no
    /// value ([`Ignored::Unchanged`]), it cannot be read ([`Ignored::Malformed`], logged), a
    /// slot part's image does not decode ([`Ignored::Unreadable`], skipped and counted).
    pub changes: Result<Vec<StreamChange>, Ignored>,
    /// When the write arrived, for a write (not a delete): the item's `arrivedAt`, or the
    /// record's creation for items written before arrivals were kept. A write that changed
    /// nothing but its arrival (an exact resend, whose part is put back with it) is one too.
    pub arrival: Option<Timestamp>,
}

impl Readings {
    /// The device whose readings these are.
    pub fn device(&self) -> Option<&DeviceId> {
        match &self.key {
            EntityKey::Reading { device, .. } | EntityKey::Slot { device, .. } => Some(device),
            _ => None,
        }
    }
}

/// What a device item's MODIFY changed of what the alerts role follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceChange {
    pub device: DeviceId,
    /// Other thresholds: every rule state is checked against them at once.
    pub thresholds: bool,
    /// Other `offlineAfterSeconds` or `offlineSeverity`: the watch is set up again at once.
    pub offline_settings: bool,
}

/// A device's alert item's INSERT or MODIFY, its images decoded.
pub type AlertRecord = AlertRecordOf<AlertItem>;
/// A group rule's alert item's INSERT or MODIFY, its images decoded.
pub type GroupAlertRecord = AlertRecordOf<GroupAlertItem>;

/// An alert item's INSERT or MODIFY, its images decoded as `T`.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertRecordOf<T> {
    /// Position of its record in the event.
    pub index: usize,
    /// An INSERT (else a MODIFY).
    pub inserted: bool,
    /// The record's sequence number (valid decimal).
    pub seq: String,
    /// The old image (a MODIFY's, when it decodes).
    pub old: Option<T>,
    pub new: T,
    /// When the record was made (`None` when the record does not say).
    pub recorded_at: Option<Timestamp>,
}

/// A stored heartbeat a role has still to mark as passed ([`HeartbeatItem`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    /// Position of its record in the event.
    pub index: usize,
    pub shard: ShardName,
    pub sent_at: Timestamp,
    /// Which roles have not marked it yet (as the record's image shows).
    pub alerts_to_mark: bool,
    pub rollups_to_mark: bool,
}

/// An item deleted by TTL. Its image is not decoded (the roles never need it):
/// [`Expiry::readings`] reads the readings it took from the table, for the admin's rebuild.
#[derive(Debug, Clone, PartialEq)]
pub struct Expiry {
    /// Position of its record in the event.
    pub index: usize,
    /// The expired item's key.
    pub key: EntityKey,
}

impl Expiry {
    /// The readings the expiry removed from the table, as deletes (none when the item held
    /// no readings); `rec` is the record this was decoded from.
    pub fn readings(&self, rec: &EventRecord) -> Result<Vec<StreamChange>, Ignored> {
        reading_changes(self.index, rec, &self.key)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Written {
    #[serde(default, with = "epoch_millis")]
    arrived_at: Option<Timestamp>,
}

/// The arrival a reading item's or slot part's write shows (deletes show none).
fn arrival(rec: &EventRecord) -> Option<Timestamp> {
    if rec.event_name == "REMOVE" || rec.change.new_image.is_empty() {
        return None;
    }
    let w: Written = serde_dynamo::from_item(rec.change.new_image.clone()).ok()?;
    match w.arrived_at {
        Some(at) => Some(at),
        None => Timestamp::from_epoch_millis(
            rec.change.approximate_creation_date_time.timestamp_millis(),
        )
        .ok(),
    }
}

fn record_time(rec: &EventRecord) -> Option<Timestamp> {
    let t = rec.change.approximate_creation_date_time;
    // Absent in the record: the field defaults to the epoch, which is no time at all.
    (t.timestamp() > 0)
        .then(|| Timestamp::from_epoch_micros(t.timestamp_micros()).ok())
        .flatten()
}

fn alert_record<T: serde::de::DeserializeOwned>(
    index: usize,
    rec: &EventRecord,
) -> Result<AlertRecordOf<T>, Ignored> {
    let inserted = match rec.event_name.as_str() {
        "INSERT" => true,
        "MODIFY" => false,
        _ => return Err(Ignored::NotReading),
    };
    let seq = rec
        .change
        .sequence_number
        .clone()
        .filter(|s| keys::valid_sequence(s))
        .ok_or_else(|| Ignored::Malformed("alert record without a SequenceNumber".into()))?;
    let new: T = serde_dynamo::from_item(rec.change.new_image.clone())
        .map_err(|_| Ignored::Malformed("alert record with an unreadable NewImage".into()))?;
    let old = serde_dynamo::from_item(rec.change.old_image.clone()).ok();
    Ok(AlertRecordOf {
        index,
        inserted,
        seq,
        old,
        new,
        recorded_at: record_time(rec),
    })
}

/// The heartbeat a heartbeat item's write shows, unless both roles have marked it passed
/// already (each mark is a write too, and is not one for the role that made it).
fn heartbeat(index: usize, rec: &EventRecord) -> Option<Heartbeat> {
    if rec.change.new_image.is_empty() {
        return None;
    }
    let h: HeartbeatItem = serde_dynamo::from_item(rec.change.new_image.clone()).ok()?;
    let Ok(EntityKey::Heartbeat(shard)) = EntityKey::parse(&h.pk, &h.sk) else {
        return None;
    };
    let alerts_to_mark = h.passed_at != Some(h.sent_at);
    let rollups_to_mark = h.rollups_passed_at != Some(h.sent_at);
    (h.stored_at.is_some() && (alerts_to_mark || rollups_to_mark)).then_some(Heartbeat {
        index,
        shard,
        sent_at: h.sent_at,
        alerts_to_mark,
        rollups_to_mark,
    })
}

/// What the record at `index` of an event is: the one decoding of a stream record.
pub fn decode(index: usize, rec: &EventRecord) -> Decoded {
    let Some((_, key)) = record_key(rec) else {
        return Decoded::Ignored(Ignored::NotOurs);
    };
    if is_ttl_expiry(rec) {
        return Decoded::TtlExpiry(Expiry { index, key });
    }
    match key {
        EntityKey::Reading { .. } | EntityKey::Slot { .. } => Decoded::Readings(Readings {
            changes: reading_changes(index, rec, &key),
            arrival: arrival(rec),
            key,
        }),
        EntityKey::Device(_) => device_change(rec)
            .map(Decoded::Device)
            .unwrap_or(Decoded::Ignored(Ignored::NotReading)),
        EntityKey::Alert { .. } => match alert_record(index, rec) {
            Ok(a) => Decoded::Alert(Box::new(a)),
            Err(why) => Decoded::Ignored(why),
        },
        EntityKey::GroupAlert { .. } => match alert_record(index, rec) {
            Ok(a) => Decoded::GroupAlert(Box::new(a)),
            Err(why) => Decoded::Ignored(why),
        },
        EntityKey::Heartbeat(_) => heartbeat(index, rec)
            .map(Decoded::Heartbeat)
            .unwrap_or(Decoded::Ignored(Ignored::NotReading)),
        _ => Decoded::Ignored(Ignored::NotReading),
    }
}

/// Every record of `event`, decoded.
pub fn decode_all(event: &aws_lambda_events::event::dynamodb::Event) -> Vec<Decoded> {
    event
        .records
        .iter()
        .enumerate()
        .map(|(i, r)| decode(i, r))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{device_modify, insert, metric, slot_item, slot_record};

    /// The reading changes of one record, as both roles take them.
    fn classify(index: usize, rec: &EventRecord) -> Result<Vec<StreamChange>, Ignored> {
        decode(index, rec).reading_changes().map(<[_]>::to_vec)
    }

    fn removed_by(mut rec: EventRecord, principal: &str, type_: &str) -> EventRecord {
        rec.event_name = "REMOVE".into();
        rec.change.old_image = std::mem::take(&mut rec.change.new_image);
        let mut u = aws_lambda_events::event::dynamodb::UserIdentity::default();
        u.type_ = type_.into();
        u.principal_id = principal.into();
        rec.user_identity = Some(u);
        rec
    }

    #[test]
    fn each_kind_of_record_decodes_to_its_variant_and_only_dynamodbs_own_removes_are_ttl_expiries()
    {
        let reading = insert(1, "d", start(), "t", 1.0);
        assert!(matches!(decode(0, &reading), Decoded::Readings(r) if r.changes.is_ok()));
        // a TTL expiry: a REMOVE by the DynamoDB service principal, of type Service
        let ttl = removed_by(reading.clone(), TTL_PRINCIPAL, "Service");
        assert!(matches!(decode(3, &ttl), Decoded::TtlExpiry(e) if e.index == 3));
        // a user's delete (or a user who names the principal without being the service) is
        // a reading's delete, never an expiry
        for user in [
            removed_by(reading.clone(), "AIDAEXAMPLE", "IAMUser"),
            removed_by(reading.clone(), TTL_PRINCIPAL, "IAMUser"),
        ] {
            match decode(0, &user) {
                Decoded::Readings(r) => {
                    assert!(
                        matches!(r.changes.as_deref(), Ok([c]) if matches!(c.change, Change::Delete(_)))
                    )
                }
                other => panic!("{other:?}"),
            }
        }
        // a device's MODIFY
        let old = tidemark_schema::DeviceItem::new(
            DeviceId::new("d").unwrap(),
            tidemark_schema::DeviceStatus::Active,
            start(),
        );
        let mut new = old.clone();
        new.offline_after_seconds = Some(600);
        assert_eq!(
            decode(0, &device_modify(2, &old, &new)),
            Decoded::Device(DeviceChange {
                device: DeviceId::new("d").unwrap(),
                thresholds: false,
                offline_settings: true,
            })
        );
        // an alert's INSERT
        let alert = crate::testing::alert_record(4, "d", start());
        assert!(matches!(decode(0, &alert), Decoded::Alert(a) if a.inserted && a.old.is_none()));
        // a heartbeat stored and not yet passed
        let beat = crate::testing::heartbeat_record(5, "shardId-000000000000", start());
        assert!(
            matches!(decode(1, &beat), Decoded::Heartbeat(h) if h.index == 1 && h.sent_at == start())
        );
        // anything else, with the reason
        let mut foreign = reading.clone();
        foreign.change.keys = serde_dynamo::to_item(serde_json::json!({"id": "x"})).unwrap();
        foreign.change.new_image = foreign.change.keys.clone();
        assert_eq!(decode(0, &foreign), Decoded::Ignored(Ignored::NotOurs));
    }

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
