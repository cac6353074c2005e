//! How a device's readings are stored, over time (docs/design.md §2, docs/decisions/0001-packed-readings.md).
//!
//! A device's layout history is its shard history ([`crate::shard`]) with one more fact per
//! epoch: whether readings are single items (`READING#<ts>`) or packed into time-slot items
//! (`SLOT#<slot start>#<part>`, [`crate::packed`]) of a given length. The layout of a reading
//! is a pure function of (history, reading time), like its shard: a re-sent reading goes to
//! the same item, and a read of any range knows which partitions and which kind of key to
//! ask, epoch by epoch ([`ShardHistory::segments`]). Changing a layout migrates nothing.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

use crate::shard::{ShardEpoch, ShardHistory, ShardHistoryError, ShardLead};
use crate::time::Timestamp;

const US_PER_SECOND: i64 = 1_000_000;

/// The length of a packed slot, in whole seconds: a divisor of 3600 (1 s … 1 h), so slots
/// tile every hour exactly and never straddle one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlotLen(u32);

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "slot length {0} s is not a whole number of seconds dividing an hour (1, 2, … 60, … 600, … 3600)"
)]
pub struct SlotLenError(pub i64);

impl SlotLen {
    pub fn new(seconds: i64) -> Result<Self, SlotLenError> {
        if (1..=3600).contains(&seconds) && 3600 % seconds == 0 {
            Ok(SlotLen(seconds as u32))
        } else {
            Err(SlotLenError(seconds))
        }
    }

    pub fn seconds(self) -> u32 {
        self.0
    }

    fn micros(self) -> i64 {
        i64::from(self.0) * US_PER_SECOND
    }

    /// The start of the slot holding `at`.
    pub fn start_of(self, at: Timestamp) -> Timestamp {
        let us = at.epoch_micros();
        Timestamp::from_epoch_micros(us - us.rem_euclid(self.micros())).unwrap_or(Timestamp::MIN)
    }

    /// The last instant of the slot starting at `start`.
    pub fn last_of(self, start: Timestamp) -> Timestamp {
        start
            .plus_micros(self.micros() - 1)
            .unwrap_or(Timestamp::MAX)
    }
}

impl fmt::Display for SlotLen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} s", self.0)
    }
}

impl Serialize for SlotLen {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(self.0)
    }
}

impl<'de> Deserialize<'de> for SlotLen {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = i64::deserialize(d)?;
        SlotLen::new(n).map_err(serde::de::Error::custom)
    }
}

/// How readings are stored during one epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Layout {
    /// Partitions the readings are spread over (1: the device's own).
    pub shards: u16,
    /// `None`: one item per reading; `Some(len)`: packed into slots of `len`.
    pub slot: Option<SlotLen>,
}

impl Layout {
    /// Single items in the device's own partition: every device's layout before its first
    /// epoch, and all there was before packed layouts.
    pub const SINGLE: Layout = Layout {
        shards: 1,
        slot: None,
    };

    pub fn packed(slot: SlotLen) -> Layout {
        Layout {
            shards: 1,
            slot: Some(slot),
        }
    }
}

impl Default for Layout {
    fn default() -> Self {
        Layout::SINGLE
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.slot {
            None => write!(f, "single items")?,
            Some(len) => write!(f, "packed in {len} slots")?,
        }
        if self.shards > 1 {
            write!(f, " over {} shards", self.shards)?;
        }
        Ok(())
    }
}

/// Why a layout given as text (the template parameter) was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("layout {0:?} is neither \"single\" nor \"packed:<slot seconds>\" (e.g. packed:60)")]
pub struct LayoutParseError(pub String);

impl std::str::FromStr for Layout {
    type Err = LayoutParseError;

    /// `single` or `packed:<seconds>`: how the default layout is configured.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || LayoutParseError(s.to_owned());
        match s.trim() {
            "single" => Ok(Layout::SINGLE),
            other => {
                let secs = other.strip_prefix("packed:").ok_or_else(bad)?;
                let n: i64 = secs.parse().map_err(|_| bad())?;
                SlotLen::new(n).map(Layout::packed).map_err(|_| bad())
            }
        }
    }
}

/// A stretch of a read range stored under one layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub from: Timestamp,
    pub to: Timestamp,
    pub layout: Layout,
}

impl Segment {
    /// The partitions (shards) this segment's readings are in.
    pub fn shards(&self) -> Vec<Option<u16>> {
        if self.layout.shards <= 1 {
            vec![None]
        } else {
            (0..self.layout.shards).map(Some).collect()
        }
    }
}

impl ShardEpoch {
    pub fn layout(&self) -> Layout {
        Layout {
            shards: self.count,
            slot: self.slot,
        }
    }
}

impl ShardHistory {
    pub fn layout_at(&self, at: Timestamp) -> Layout {
        self.epochs()
            .iter()
            .rev()
            .find(|e| e.from <= at)
            .map_or(Layout::SINGLE, ShardEpoch::layout)
    }

    /// The history a device follows: its own from its first epoch on, and before that the
    /// fleet's `default`. (An empty own history follows the default throughout; a device given
    /// a layout or shard count of its own keeps it through later changes of the default.)
    pub fn under(&self, default: &ShardHistory) -> ShardHistory {
        let first = self.epochs().first().map_or(Timestamp::MAX, |e| e.from);
        let mut out = ShardHistory::default();
        for e in default
            .epochs()
            .iter()
            .filter(|e| e.from < first)
            .chain(self.epochs())
        {
            out = out.with_layout(e.from, e.layout()).unwrap_or(out);
        }
        out
    }

    /// `[from, to]` cut where the layout changes, in time order, each piece with its layout.
    pub fn segments(&self, from: Timestamp, to: Timestamp) -> Vec<Segment> {
        if from > to {
            return Vec::new();
        }
        let mut out = vec![Segment {
            from,
            to,
            layout: self.layout_at(from),
        }];
        for e in self
            .epochs()
            .iter()
            .filter(|e| e.from > from && e.from <= to)
        {
            let last = out.last_mut().expect("starts with one segment");
            last.to = e.from.pred().unwrap_or(Timestamp::MIN);
            if last.layout == e.layout() {
                last.to = to;
                continue;
            }
            out.push(Segment {
                from: e.from,
                to,
                layout: e.layout(),
            });
        }
        out
    }

    /// The history after "from `from` on, store readings as `layout`", decided at `now`, with
    /// the rules of [`ShardHistory::planned`] (the lead time, replacing an epoch not yet in
    /// use, a repeat changing nothing).
    pub fn planned_layout(
        &self,
        from: Timestamp,
        layout: Layout,
        now: Timestamp,
        lead: ShardLead,
    ) -> Result<Self, ShardHistoryError> {
        self.plan(from, layout, now, lead)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    fn len(s: i64) -> SlotLen {
        SlotLen::new(s).unwrap()
    }

    #[test]
    fn slot_lengths_divide_an_hour() {
        for ok in [1, 2, 10, 60, 600, 900, 3600] {
            assert!(SlotLen::new(ok).is_ok(), "{ok}");
        }
        for bad in [0, -60, 7, 3601, 7200, 86400] {
            assert!(SlotLen::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_slot_holds_its_whole_seconds() {
        let s = len(60);
        assert_eq!(
            s.start_of(ts("2026-04-20T14:03:59.999999Z")),
            ts("2026-04-20T14:03:00Z")
        );
        assert_eq!(
            s.start_of(ts("2026-04-20T14:04:00Z")),
            ts("2026-04-20T14:04:00Z")
        );
        assert_eq!(
            s.last_of(ts("2026-04-20T14:04:00Z")),
            ts("2026-04-20T14:04:59.999999Z")
        );
    }

    #[test]
    fn layouts_parse_from_their_configured_text() {
        assert_eq!("single".parse::<Layout>().unwrap(), Layout::SINGLE);
        assert_eq!(
            "packed:60".parse::<Layout>().unwrap(),
            Layout::packed(len(60))
        );
        for bad in ["", "packed", "packed:7", "packed:x", "pack:60"] {
            assert!(bad.parse::<Layout>().is_err(), "{bad}");
        }
    }

    #[test]
    fn segments_cut_a_range_where_the_layout_changes() {
        let h = ShardHistory::default()
            .with_layout(ts("2026-04-20T12:00:00Z"), Layout::packed(len(60)))
            .unwrap()
            .with_change(ts("2026-04-20T13:00:00Z"), 4)
            .unwrap();
        assert_eq!(
            h.layout_at(ts("2026-04-20T13:30:00Z")),
            Layout {
                shards: 4,
                slot: Some(len(60))
            }
        );
        let s = h.segments(ts("2026-04-20T11:00:00Z"), ts("2026-04-20T14:00:00Z"));
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].layout, Layout::SINGLE);
        assert_eq!(s[0].to, ts("2026-04-20T11:59:59.999999Z"));
        assert_eq!(s[1].from, ts("2026-04-20T12:00:00Z"));
        assert_eq!(s[1].layout, Layout::packed(len(60)));
        assert_eq!(s[2].from, ts("2026-04-20T13:00:00Z"));
        assert_eq!(s[2].to, ts("2026-04-20T14:00:00Z"));
        assert_eq!(s[2].shards().len(), 4);
        let inside = h.segments(ts("2026-04-20T12:10:00Z"), ts("2026-04-20T12:20:00Z"));
        assert_eq!(inside.len(), 1);
        assert_eq!(inside[0].layout, Layout::packed(len(60)));
    }

    #[test]
    fn a_shard_change_keeps_the_packing_and_a_layout_change_keeps_nothing_else() {
        let lead = ShardLead::default();
        let now = ts("2026-04-20T10:00:00Z");
        let packed = ShardHistory::default()
            .planned_layout(
                ts("2026-04-20T12:00:00Z"),
                Layout::packed(len(10)),
                now,
                lead,
            )
            .unwrap();
        let later = ts("2026-04-20T12:10:00Z");
        let again = packed
            .planned_layout(
                ts("2026-04-20T12:30:00Z"),
                Layout::packed(len(10)),
                later,
                lead,
            )
            .unwrap();
        assert_eq!(again, packed, "repeating a layout changes nothing");
        let sharded = packed
            .planned(ts("2026-04-20T12:30:00Z"), 2, later, lead)
            .unwrap();
        assert_eq!(
            sharded.layout_at(ts("2026-04-20T12:30:00Z")),
            Layout {
                shards: 2,
                slot: Some(len(10))
            }
        );
        let back = packed
            .planned_layout(ts("2026-04-20T13:00:00Z"), Layout::SINGLE, later, lead)
            .unwrap();
        assert_eq!(back.layout_at(ts("2026-04-20T13:00:00Z")), Layout::SINGLE);
        assert_eq!(
            back.layout_at(ts("2026-04-20T12:59:59Z")),
            Layout::packed(len(10))
        );
    }

    #[test]
    fn a_device_follows_the_default_until_its_own_history_begins() {
        let default = ShardHistory::default()
            .with_layout(ts("2026-04-20T12:00:00Z"), Layout::packed(len(60)))
            .unwrap()
            .with_layout(ts("2026-04-20T15:00:00Z"), Layout::packed(len(600)))
            .unwrap();
        assert_eq!(ShardHistory::default().under(&default), default);
        let own = ShardHistory::default()
            .with_layout(ts("2026-04-20T13:00:00Z"), Layout::SINGLE)
            .unwrap();
        let h = own.under(&default);
        assert_eq!(h.layout_at(ts("2026-04-20T11:00:00Z")), Layout::SINGLE);
        assert_eq!(
            h.layout_at(ts("2026-04-20T12:30:00Z")),
            Layout::packed(len(60))
        );
        assert_eq!(h.layout_at(ts("2026-04-20T16:00:00Z")), Layout::SINGLE);
    }

    #[test]
    fn epochs_without_a_slot_read_as_before() {
        let old: ShardHistory =
            serde_json::from_str(r#"[{"from":"2026-04-20T12:00:00.000000Z","count":4}]"#).unwrap();
        assert_eq!(
            old.layout_at(ts("2026-04-20T12:00:00Z")),
            Layout {
                shards: 4,
                slot: None
            }
        );
        let json = serde_json::to_string(&old).unwrap();
        assert!(!json.contains("slot"), "{json}");
    }
}
