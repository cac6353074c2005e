//! What one layout is (docs/design.md §2, docs/decisions/0001-packed-readings.md): how many
//! partitions a device's readings are spread over, and whether they are single items
//! (`READING#<ts>`) or packed into time-slot items (`SLOT#<slot start>#<part>`,
//! [`crate::packed`]) of a given length. Which layout a reading has comes from the device's
//! layout history ([`crate::history`]).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

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

    /// The start of the earliest slot whose parts may hold a reading at `at`: the slot before
    /// its own, since a part may also hold its next slot's readings (docs/design.md §4).
    pub fn first_holder(self, at: Timestamp) -> Timestamp {
        self.start_of(at)
            .plus_micros(-self.micros())
            .unwrap_or(Timestamp::MIN)
    }

    /// The start of the slot after the one starting at `start`.
    pub fn next(self, start: Timestamp) -> Timestamp {
        start.plus_micros(self.micros()).unwrap_or(Timestamp::MAX)
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
    #[serde(rename = "shards")]
    pub partitions: u16,
    /// `None`: one item per reading; `Some(len)`: packed into slots of `len`.
    pub slot: Option<SlotLen>,
}

impl Layout {
    /// Single items in the device's own partition: every device's layout before its first
    /// epoch, and all there was before packed layouts.
    pub const SINGLE: Layout = Layout {
        partitions: 1,
        slot: None,
    };

    pub fn packed(slot: SlotLen) -> Layout {
        Layout {
            partitions: 1,
            slot: Some(slot),
        }
    }

    /// The partition (shard) a reading at `at` goes to under this layout.
    pub fn partition_of(&self, at: Timestamp) -> Option<u16> {
        crate::partition::partition_for(at, self.partitions)
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
        if self.partitions > 1 {
            write!(f, " over {} partitions", self.partitions)?;
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
}
