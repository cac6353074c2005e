//! What an hourly rollup has applied, per source item (docs/decisions/0002-exactly-once-rollups.md).
//!
//! DynamoDB Streams orders records per item, not per partition key: once a key's item
//! collection is split by sort key, two child shards deliver its records with interleaved
//! sequence numbers. A watermark per partition key would then skip the slower child's
//! records. So an hourly item remembers, for every source item (a reading or a slot part)
//! that contributed to it, the sequence number of the newest record it applied from that
//! item: a record applies iff it is newer than its own item's mark, which holds however the
//! partitions split.
//!
//! Marks are only needed while a record can still be delivered again: the stream keeps
//! records 24 hours, so marks last written more than [`KEEP_SECONDS`] ago are dropped at
//! the item's next write ([`ItemMarks::expire`]). An item holds at most [`MAX_MARKS`] marks
//! (at most [`MARK_BYTES`] each), so the size bound of every write holds by construction:
//! past it, and past [`MAX_SINGLE_MARKS`] single reading items (whose marks would cost more
//! to rewrite than the readings cost to read back), the hour keeps no marks and is
//! recomputed from the stored readings instead (the item's `fromTable`).
//!
//! Stored compactly: per source partition key one string of `<item>=<seq>` pairs, the item
//! named by its sort key's offset from the bucket's start (`r<µs>` a reading, `s<µs>.<part>`
//! a slot part), so an entry costs about 30 bytes, not the 60 of a full key.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::keys::EntityKey;
use crate::time::Timestamp;

/// Marks older than this are dropped: the stream's 24 h retention plus an hour's margin. No
/// record a dropped mark covered can be delivered any more, and any newer one is unapplied.
pub const KEEP_SECONDS: i64 = 25 * 3600;

/// The most marks one aggregate item keeps (about 120 KB, at most 256 KB): every packed
/// layout fits (at most 3,600 slots an hour), as does a single-item device reading once a
/// second.
pub const MAX_MARKS: usize = 4_000;

/// The most marks of single reading items an aggregate item keeps. A single reading is
/// small, so reading the hour back (strongly consistent, a quarter of a unit per 4 KB, billed
/// at a fifth of a write) costs less than rewriting a mark for every reading in every batch:
/// past this the hour is taken from the table (measured in `bench/PACKING.md`).
pub const MAX_SINGLE_MARKS: usize = 16;

/// What one mark costs in the stored item, at most: a 17-character item name and a
/// sequence number of up to 40 digits (for size bounds).
pub const MARK_BYTES: usize = 64;

/// Per source partition key, per source item, the newest sequence number applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ItemMarks(BTreeMap<String, BTreeMap<String, String>>);

impl ItemMarks {
    pub fn is_empty(&self) -> bool {
        self.0.values().all(BTreeMap::is_empty)
    }

    pub fn len(&self) -> usize {
        self.0.values().map(BTreeMap::len).sum()
    }

    /// How many marks name single reading items ([`item_name`]'s `r…`).
    pub fn singles(&self) -> usize {
        self.0
            .values()
            .flat_map(BTreeMap::keys)
            .filter(|k| k.starts_with('r'))
            .count()
    }

    /// The mark of one source item (`item` from [`item_name`]).
    pub fn get(&self, pk: &str, item: &str) -> Option<&str> {
        self.0.get(pk)?.get(item).map(String::as_str)
    }

    /// Every sequence number marked for the source partition `pk`.
    pub fn seqs(&self, pk: &str) -> impl Iterator<Item = &str> {
        self.0
            .get(pk)
            .into_iter()
            .flat_map(|m| m.values().map(String::as_str))
    }

    pub fn set(&mut self, pk: &str, item: String, seq: String) {
        self.0.entry(pk.to_owned()).or_default().insert(item, seq);
    }

    /// Drops every mark when the item's marks were last written before `now - KEEP_SECONDS`.
    pub fn expire(&mut self, marked_at: i64, now: i64) {
        if now.saturating_sub(marked_at) > KEEP_SECONDS {
            self.0.clear();
        }
    }
}

/// A source item's name in the marks of the aggregate bucket starting at `base`: its sort
/// key's time as an offset from `base`, short and unique within the bucket.
pub fn item_name(pk: &str, sk: &str, base: Timestamp) -> String {
    let off = |at: Timestamp| at.epoch_micros() - base.epoch_micros();
    match EntityKey::parse(pk, sk) {
        Ok(EntityKey::Reading { at, .. }) => format!("r{}", off(at)),
        Ok(EntityKey::Slot { start, part, .. }) => format!("s{}.{part}", off(start)),
        _ => sk.to_owned(),
    }
}

impl Serialize for ItemMarks {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let flat: BTreeMap<&String, String> = self
            .0
            .iter()
            .filter(|(_, m)| !m.is_empty())
            .map(|(pk, m)| {
                let pairs: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
                (pk, pairs.join(" "))
            })
            .collect();
        flat.serialize(s)
    }
}

impl<'de> Deserialize<'de> for ItemMarks {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let flat = BTreeMap::<String, String>::deserialize(d)?;
        let mut out = BTreeMap::new();
        for (pk, pairs) in flat {
            let mut m = BTreeMap::new();
            for pair in pairs.split(' ').filter(|p| !p.is_empty()) {
                let (k, v) = pair
                    .split_once('=')
                    .ok_or_else(|| serde::de::Error::custom(format!("mark {pair:?} has no '='")))?;
                m.insert(k.to_owned(), v.to_owned());
            }
            out.insert(pk, m);
        }
        Ok(ItemMarks(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    #[test]
    fn items_are_named_by_their_offset_in_the_bucket() {
        let base = t("2026-04-20T14:00:00Z");
        assert_eq!(
            item_name("DEVICE#d", "READING#2026-04-20T14:00:01.000000Z", base),
            "r1000000"
        );
        assert_eq!(
            item_name("DEVICE#d#S2", "SLOT#2026-04-20T14:05:00.000000Z#3", base),
            "s300000000.3"
        );
        assert_eq!(item_name("DEVICE#d", "ODD", base), "ODD");
    }

    #[test]
    fn marks_round_trip_through_their_compact_form() {
        let mut m = ItemMarks::default();
        m.set("DEVICE#d", "r0".into(), "000000000000000000017".into());
        m.set("DEVICE#d", "r60000000".into(), "18".into());
        m.set("DEVICE#d#S1", "s0.0".into(), "9".into());
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v["DEVICE#d"], "r0=000000000000000000017 r60000000=18");
        let back: ItemMarks = serde_json::from_value(v).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.get("DEVICE#d#S1", "s0.0"), Some("9"));
        assert!(serde_json::from_value::<ItemMarks>(serde_json::json!({"p": "x"})).is_err());
    }

    #[test]
    fn marks_expire_a_day_after_they_were_last_written() {
        let mut m = ItemMarks::default();
        m.set("p", "r0".into(), "1".into());
        m.expire(1_000, 1_000 + KEEP_SECONDS);
        assert_eq!(m.len(), 1, "a replay may still come");
        m.expire(1_000, 1_001 + KEEP_SECONDS);
        assert!(m.is_empty());
    }
}
