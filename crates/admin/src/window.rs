//! The window fold of a rebuild: a device's raw readings, read between two stream positions,
//! turned into the readings as of an exact position of each source partition's stream.
//!
//! For a source partition `P` the read happened after position `s0` (its first fence) and
//! before `s1` (its second fence): every record of `P` at or before `s0` is reflected in the
//! read, none after `s1` is, and the ones in between may or may not be. Replacing each
//! reading that has records in `(s0, s1]` by the old image of its first such record (or
//! dropping it, if that record is an INSERT) gives the readings exactly as of `s0`, whatever
//! the read saw. Applying the records in `(s0, t]` then gives them as of any `t >= s0`.
//!
//! What the readings "are" follows the aggregator's rules: TTL deletions never remove a
//! reading from a rollup, so they do not remove one here either (only a user delete does).

use std::collections::{BTreeMap, HashSet};

use aws_lambda_events::event::dynamodb::EventRecord;
use tidemark_aggregator::records::{Change, Decoded, Ignored, StreamChange, cmp_seq, decode};
use tidemark_schema::{DeviceId, EntityKey, MetricName, Timestamp};

/// A reading's metrics.
pub type Metrics = BTreeMap<MetricName, f64>;
/// A device's readings by time (a reading's identity within its device).
pub type Readings = BTreeMap<Timestamp, Metrics>;

/// What one stream record did to one reading (a slot part's record is one per reading its
/// images differ in).
#[derive(Debug, Clone, PartialEq)]
pub struct ReadingRecord {
    /// The reading's partition key (its source partition).
    pub pk: String,
    pub device: DeviceId,
    pub seq: String,
    pub at: Timestamp,
    /// The reading before the change (`None` for an INSERT).
    pub old: Option<Metrics>,
    /// The reading after it (`None` for a REMOVE).
    pub new: Option<Metrics>,
    /// A deletion by TTL, which rollups ignore.
    pub ttl_expiry: bool,
}

/// A slot part's record whose images do not decode: what it was about, for the log, the
/// counts and a redrive's choice of days.
#[derive(Debug, Clone, PartialEq)]
pub struct UnreadableSlot {
    pub key: String,
    pub device: DeviceId,
    pub start: Timestamp,
    pub reason: String,
}

/// The record as changes of readings, as the aggregator decodes it
/// ([`tidemark_aggregator::records::decode`]): one for a reading item, one per changed
/// reading for a slot part, none for anything else (nor for a write that changes no value, or
/// a record that cannot be read). A TTL expiry's are its readings' deletes, marked as such.
pub fn reading_records(rec: &EventRecord) -> Result<Vec<ReadingRecord>, UnreadableSlot> {
    let (key, changes, ttl_expiry) = match decode(0, rec) {
        Decoded::Readings(r) => (r.key, r.changes, false),
        Decoded::TtlExpiry(e) => {
            let changes = e.readings(rec);
            (e.key, changes, true)
        }
        _ => return Ok(Vec::new()),
    };
    match changes {
        Ok(changes) => Ok(changes
            .into_iter()
            .map(|c| reading_record(c, ttl_expiry))
            .collect()),
        Err(Ignored::Unreadable { key: k, reason }) => match key {
            EntityKey::Slot { device, start, .. } => Err(UnreadableSlot {
                key: k,
                device,
                start,
                reason,
            }),
            _ => Ok(Vec::new()),
        },
        Err(_) => Ok(Vec::new()),
    }
}

fn reading_record(c: StreamChange, ttl_expiry: bool) -> ReadingRecord {
    let (image, old, new) = match c.change {
        Change::Insert(i) => {
            let new = Some(i.metrics.clone());
            (i, None, new)
        }
        Change::Correct { old, new } => (new.clone(), Some(old.metrics), Some(new.metrics)),
        Change::Delete(i) => {
            let old = Some(i.metrics.clone());
            (i, old, None)
        }
    };
    ReadingRecord {
        pk: image.pk,
        device: image.device,
        seq: c.seq,
        at: image.at,
        old,
        new,
        ttl_expiry,
    }
}

/// Where the fold stands for one source partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marks {
    /// The first fence: the result is exact as of this position, before rolling forward.
    pub s0: String,
    /// The second fence: the read reflects nothing after it.
    pub s1: String,
    /// Roll forward to here (`>= s0`; records in `(s0, upto]` are applied).
    pub upto: String,
}

/// `read` (readings seen between the fences) turned into the readings as of each partition's
/// `upto`. `records` are the reading records of the partitions in `marks`, in stream order
/// per partition; records of partitions not in `marks` are ignored.
pub fn readings_as_of(
    mut read: Readings,
    records: &[ReadingRecord],
    marks: &BTreeMap<String, Marks>,
) -> Readings {
    let after = |r: &ReadingRecord, lo: &str| cmp_seq(&r.seq, lo).is_gt();
    let within = |r: &ReadingRecord, hi: &str| cmp_seq(&r.seq, hi).is_le();
    // Back to s0: the first record of each reading inside (s0, s1] says what it was at s0.
    let mut rewound: HashSet<(&str, Timestamp)> = HashSet::new();
    for r in records {
        let Some(m) = marks.get(&r.pk) else { continue };
        if !(after(r, &m.s0) && within(r, &m.s1) && rewound.insert((&r.pk, r.at))) {
            continue;
        }
        match &r.old {
            Some(old) => {
                read.insert(r.at, old.clone());
            }
            None => {
                read.remove(&r.at);
            }
        }
    }
    // Forward to `upto`, record by record.
    for r in records {
        let Some(m) = marks.get(&r.pk) else { continue };
        if !(after(r, &m.s0) && within(r, &m.upto)) || r.ttl_expiry {
            continue;
        }
        match &r.new {
            Some(new) => {
                read.insert(r.at, new.clone());
            }
            None => {
                read.remove(&r.at);
            }
        }
    }
    read
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "DEVICE#d";

    fn t(s: u32) -> Timestamp {
        Timestamp::from_epoch_millis(1_776_693_600_000 + i64::from(s) * 1_000).unwrap()
    }
    fn m(v: f64) -> Metrics {
        BTreeMap::from([(MetricName::new("temperature").unwrap(), v)])
    }
    fn rec(seq: u64, at: u32, old: Option<f64>, new: Option<f64>) -> ReadingRecord {
        ReadingRecord {
            pk: P.into(),
            device: DeviceId::new("d").unwrap(),
            seq: format!("{seq:021}"),
            at: t(at),
            old: old.map(m),
            new: new.map(m),
            ttl_expiry: false,
        }
    }
    fn marks(s0: u64, s1: u64, upto: u64) -> BTreeMap<String, Marks> {
        BTreeMap::from([(
            P.to_owned(),
            Marks {
                s0: s0.to_string(),
                s1: s1.to_string(),
                upto: upto.to_string(),
            },
        )])
    }

    /// The history: reading 1 inserted (seq 5), reading 2 inserted (12), reading 1 corrected
    /// (13), reading 3 inserted (14), reading 2 deleted by a user (25), reading 4 inserted (30).
    /// Fences at 10 and 20.
    fn history() -> Vec<ReadingRecord> {
        vec![
            rec(5, 1, None, Some(1.0)),
            rec(12, 2, None, Some(2.0)),
            rec(13, 1, Some(1.0), Some(1.5)),
            rec(14, 3, None, Some(3.0)),
            rec(25, 2, Some(2.0), None),
            rec(30, 4, None, Some(4.0)),
        ]
    }

    /// A stream record of part 0 of the slot at `t(0)` going from `old` to `new`.
    fn slot_record(
        seq: u64,
        old: &[(u32, f64)],
        new: &[(u32, f64)],
    ) -> aws_lambda_events::event::dynamodb::EventRecord {
        use tidemark_schema::{SlotItem, keys, packed};
        let image = |r: &[(u32, f64)]| {
            let readings: Readings = r.iter().map(|(s, v)| (t(*s), m(*v))).collect();
            let item = SlotItem {
                pk: P.into(),
                sk: keys::slot_sk(t(0), 0),
                packed: packed::encode(t(0), &readings).unwrap(),
                reading_count: readings.len() as u64,
                version: 1,
                ttl: 0,
                sealed: false,
                full: false,
                metadata: Default::default(),
                arrived_at: None,
            };
            serde_dynamo::to_item(&item).unwrap()
        };
        let mut rec = aws_lambda_events::event::dynamodb::EventRecord::default();
        rec.event_name = if old.is_empty() { "INSERT" } else { "MODIFY" }.into();
        rec.change.keys =
            serde_dynamo::to_item(serde_json::json!({"pk": P, "sk": keys::slot_sk(t(0), 0)}))
                .unwrap();
        if !old.is_empty() {
            rec.change.old_image = image(old);
        }
        rec.change.new_image = image(new);
        rec.change.sequence_number = Some(format!("{seq:021}"));
        rec
    }

    #[test]
    fn slot_records_rewind_and_roll_forward_reading_by_reading() {
        // Slot created at 12 with readings 1 and 2; at 13 reading 1 corrected and 3 added.
        let mut records = reading_records(&slot_record(12, &[], &[(1, 1.0), (2, 2.0)])).unwrap();
        records.extend(
            reading_records(&slot_record(
                13,
                &[(1, 1.0), (2, 2.0)],
                &[(1, 1.5), (2, 2.0), (3, 3.0)],
            ))
            .unwrap(),
        );
        assert_eq!(records.len(), 4);
        let read = Readings::from([(t(1), m(1.5)), (t(2), m(2.0)), (t(3), m(3.0))]);
        assert_eq!(
            readings_as_of(read.clone(), &records, &marks(10, 20, 10)),
            Readings::new()
        );
        assert_eq!(
            readings_as_of(read.clone(), &records, &marks(10, 20, 12)),
            Readings::from([(t(1), m(1.0)), (t(2), m(2.0))])
        );
        assert_eq!(
            readings_as_of(read.clone(), &records, &marks(10, 20, 13)),
            read
        );
        let mut corrupt = slot_record(14, &[], &[(4, 4.0)]);
        corrupt
            .change
            .new_image
            .insert("packed".into(), serde_dynamo::AttributeValue::B(vec![1, 9]));
        let u = reading_records(&corrupt).unwrap_err();
        assert_eq!((u.device.as_str(), u.start), ("d", t(0)));
    }

    #[test]
    fn a_read_that_saw_every_window_change_is_rewound_to_the_first_fence() {
        // The read saw everything up to 14 (reading 1 corrected, 2 and 3 new).
        let read = Readings::from([(t(1), m(1.5)), (t(2), m(2.0)), (t(3), m(3.0))]);
        let got = readings_as_of(read, &history(), &marks(10, 20, 10));
        assert_eq!(got, Readings::from([(t(1), m(1.0))]));
    }

    #[test]
    fn a_read_that_saw_part_of_the_window_gives_the_same_answer() {
        // The read happened between 12 and 13: reading 2 there, reading 1 not yet corrected.
        let read = Readings::from([(t(1), m(1.0)), (t(2), m(2.0))]);
        let got = readings_as_of(read, &history(), &marks(10, 20, 10));
        assert_eq!(got, Readings::from([(t(1), m(1.0))]));
    }

    #[test]
    fn rolling_forward_past_the_second_fence_applies_inserts_corrections_and_deletes() {
        let read = Readings::from([(t(1), m(1.5)), (t(2), m(2.0))]);
        let got = readings_as_of(read, &history(), &marks(10, 20, 30));
        assert_eq!(
            got,
            Readings::from([(t(1), m(1.5)), (t(3), m(3.0)), (t(4), m(4.0))])
        );
        let partway = readings_as_of(
            Readings::from([(t(1), m(1.0))]),
            &history(),
            &marks(10, 20, 13),
        );
        assert_eq!(partway, Readings::from([(t(1), m(1.5)), (t(2), m(2.0))]));
    }

    #[test]
    fn a_ttl_expiry_never_removes_a_reading_and_other_partitions_are_left_alone() {
        let mut expiry = rec(15, 1, Some(1.5), None);
        expiry.ttl_expiry = true;
        let mut other = rec(16, 9, None, Some(9.0));
        other.pk = "DEVICE#d#S1".into();
        let mut records = history();
        records.insert(4, expiry);
        records.push(other);
        // The read happened after the expiry: reading 1 is gone from the table.
        let read = Readings::from([(t(2), m(2.0)), (t(3), m(3.0))]);
        let got = readings_as_of(read, &records, &marks(10, 20, 20));
        assert_eq!(
            got,
            Readings::from([(t(1), m(1.5)), (t(2), m(2.0)), (t(3), m(3.0))])
        );
    }
}
