//! How an hour is cut for its export (docs/decisions/0017-export-fans-out-over-sqs.md): a
//! slice is the devices of a run of the hour's activity partitions (GSI2 `ACTIVE#<hour>#<n>`,
//! decision 0016), so the slices split an hour without a listing of their own and a device is
//! in exactly one; how many partitions a slice covers follows the fleet's size
//! ([`width_for`]). Shapes only: exporting a slice is [`crate::slice`].

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use tidemark_schema::{DeviceId, Timestamp, keys};

/// Activity partitions an hour's devices are spread over: at most this many slices.
pub const PARTITIONS: u16 = keys::ACTIVE_PARTITIONS;

/// Devices one slice is sized for: about 80 s of strongly consistent queries at ~5 ms each,
/// well inside a worker's 900 s.
pub const DEVICES_PER_SLICE: usize = 16_384;

/// One slice of an hour: `width` consecutive activity partitions (a power of two dividing
/// [`PARTITIONS`]), the `index`-th run of them. Cannot hold another shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "SliceFields", into = "SliceFields")]
pub struct Slice {
    index: u16,
    width: u16,
}

#[derive(Serialize, Deserialize)]
struct SliceFields {
    index: u16,
    width: u16,
}

impl Slice {
    pub fn new(index: u16, width: u16) -> Option<Slice> {
        let ok = width.is_power_of_two() && width <= PARTITIONS && index < PARTITIONS / width;
        ok.then_some(Slice { index, width })
    }

    pub fn get(self) -> u16 {
        self.index
    }

    pub fn width(self) -> u16 {
        self.width
    }

    /// The activity partitions it covers.
    pub fn partitions(self) -> std::ops::Range<u16> {
        self.index * self.width..(self.index + 1) * self.width
    }

    /// Every slice of `width` partitions, in order.
    pub fn all(width: u16) -> impl Iterator<Item = Slice> {
        let n = if width.is_power_of_two() && width <= PARTITIONS {
            PARTITIONS / width
        } else {
            0
        };
        (0..n).map(move |index| Slice { index, width })
    }

    /// The slice of `width` partitions holding `device`.
    pub fn of(device: &DeviceId, width: u16) -> Option<Slice> {
        Slice::new(keys::active_partition_of(device) / width.max(1), width)
    }

    /// The whole hour in one slice (a backfill, exporting one hour after another in one
    /// process, has nothing to spread).
    pub fn whole() -> Slice {
        Slice {
            index: 0,
            width: PARTITIONS,
        }
    }
}

/// How many partitions a slice should cover for an hour of about `devices` devices (`None`:
/// not known, every partition a slice of its own): as few slices as keep each near
/// [`DEVICES_PER_SLICE`], so a small fleet's hour is one slice (two files and a summary, as
/// before slicing) and a million devices' is 64.
pub fn width_for(devices: Option<usize>) -> u16 {
    let Some(n) = devices else {
        return 1;
    };
    let slices = n
        .div_ceil(DEVICES_PER_SLICE)
        .clamp(1, usize::from(PARTITIONS));
    let slices = u16::try_from(slices.next_power_of_two()).unwrap_or(PARTITIONS);
    PARTITIONS / slices.min(PARTITIONS)
}

impl TryFrom<SliceFields> for Slice {
    type Error = String;
    fn try_from(f: SliceFields) -> Result<Self, Self::Error> {
        Slice::new(f.index, f.width).ok_or_else(|| {
            format!(
                "slice {} of {} partitions is not one of {PARTITIONS}'s",
                f.index, f.width
            )
        })
    }
}

impl From<Slice> for SliceFields {
    fn from(s: Slice) -> SliceFields {
        SliceFields {
            index: s.index,
            width: s.width,
        }
    }
}

/// A set of slice indices as the bits of a number (bit `n`: index `n`), as a job stores it.
pub fn to_bits(indices: &BTreeSet<u16>) -> u64 {
    indices
        .iter()
        .filter(|i| **i < 64)
        .fold(0, |bits, i| bits | (1 << i))
}

/// The indices `bits` holds ([`to_bits`]).
pub fn from_bits(bits: u64) -> BTreeSet<u16> {
    (0..64).filter(|i| bits & (1 << i) != 0).collect()
}

/// One slice of one export of an hour: the body of its queue message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SliceTask {
    pub hour: Timestamp,
    pub slice: Slice,
    /// The export of the hour it belongs to ([`tidemark_schema::ExportJobItem::generation`]).
    pub generation: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_schema::Period;

    #[test]
    fn a_slice_is_a_run_of_partitions_and_every_device_is_in_one() {
        assert!(Slice::new(63, 1).is_some());
        assert!(Slice::new(64, 1).is_none());
        assert!(Slice::new(1, 32).is_some());
        assert!(Slice::new(2, 32).is_none());
        assert!(Slice::new(0, 3).is_none());
        assert!(serde_json::from_str::<Slice>(r#"{"index":64,"width":1}"#).is_err());
        assert_eq!(Slice::all(1).count(), 64);
        assert_eq!(Slice::all(16).count(), 4);
        assert_eq!(Slice::new(2, 16).unwrap().partitions(), 32..48);
        let d = DeviceId::new("sensor-7").unwrap();
        let hour = Period::Hourly.bucket(Timestamp::parse_rfc3339("2026-04-20T07:00:00Z").unwrap());
        let p = Slice::of(&d, 1).unwrap().get();
        assert_eq!(
            keys::active_gsi2pk(hour, &d),
            keys::active_gsi2pk_of(hour, p)
        );
        assert!(Slice::of(&d, 8).unwrap().partitions().contains(&p));
        let some: BTreeSet<u16> = [0, 5, 63].into();
        assert_eq!(from_bits(to_bits(&some)), some);
    }

    #[test]
    fn a_small_fleets_hour_is_one_slice_and_a_millions_is_64() {
        assert_eq!(
            width_for(None),
            1,
            "not known: every partition its own slice"
        );
        assert_eq!(width_for(Some(0)), 64);
        assert_eq!(width_for(Some(1_000)), 64);
        assert_eq!(width_for(Some(16_384)), 64);
        assert_eq!(width_for(Some(16_385)), 32);
        assert_eq!(width_for(Some(100_000)), 8);
        assert_eq!(width_for(Some(1_000_000)), 1);
        assert_eq!(width_for(Some(10_000_000)), 1);
    }
}
