//! How an hour is cut for its export (docs/decisions/0017-export-fans-out-over-sqs.md): a
//! slice is the devices of a run of the hour's activity partitions (GSI2 `ACTIVE#<hour>#<n>`,
//! decision 0016), so the slices split an hour without a listing of their own and a device is
//! in exactly one; how many partitions a slice covers follows the fleet's size
//! ([`width_for`]). Shapes only: exporting a slice is [`crate::slice`].

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use tidemark_schema::{DeviceId, Timestamp, keys};

/// Activity partitions an hour's devices are spread over.
pub const PARTITIONS: u16 = keys::ACTIVE_PARTITIONS;

/// The most slices an hour is cut into: a job keeps its slices as the bits of a number, and
/// a slice's files are named by a two-digit index. So a slice covers at least
/// [`PARTITIONS`] / `MAX_SLICES` partitions.
pub const MAX_SLICES: u16 = 64;

/// The narrowest slice: [`PARTITIONS`] / [`MAX_SLICES`] partitions.
pub const MIN_WIDTH: u16 = PARTITIONS / MAX_SLICES;

fn a_width(width: u16) -> bool {
    width.is_power_of_two() && (MIN_WIDTH..=PARTITIONS).contains(&width)
}

/// Devices one slice is sized for: about 80 s of strongly consistent queries at ~5 ms each,
/// well inside a worker's 900 s.
pub const DEVICES_PER_SLICE: usize = 16_384;

/// One slice of an hour: `width` consecutive activity partitions (a power of two dividing
/// [`PARTITIONS`], at least [`MIN_WIDTH`]), the `index`-th run of them. Cannot hold another
/// shape.
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
        let ok = a_width(width) && index < PARTITIONS / width;
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
        let n = if a_width(width) {
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
/// not known, as many slices as there may be): as few slices as keep each near
/// [`DEVICES_PER_SLICE`], so a small fleet's hour is one slice (two files and a summary, as
/// before slicing) and a million devices' is 64.
pub fn width_for(devices: Option<usize>) -> u16 {
    let Some(n) = devices else {
        return MIN_WIDTH;
    };
    let slices = n
        .div_ceil(DEVICES_PER_SLICE)
        .clamp(1, usize::from(MAX_SLICES));
    let slices = u16::try_from(slices.next_power_of_two()).unwrap_or(MAX_SLICES);
    PARTITIONS / slices.min(MAX_SLICES)
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
        assert_eq!((PARTITIONS, MIN_WIDTH), (256, 4));
        assert!(Slice::new(63, 4).is_some());
        assert!(Slice::new(64, 4).is_none());
        assert!(
            Slice::new(0, 2).is_none(),
            "narrower than 256 / 64 partitions"
        );
        assert!(Slice::new(1, 128).is_some());
        assert!(Slice::new(2, 128).is_none());
        assert!(Slice::new(0, 12).is_none());
        assert!(serde_json::from_str::<Slice>(r#"{"index":64,"width":4}"#).is_err());
        assert!(serde_json::from_str::<Slice>(r#"{"index":0,"width":1}"#).is_err());
        assert_eq!(Slice::all(4).count(), 64);
        assert_eq!(Slice::all(1).count(), 0);
        assert_eq!(Slice::all(64).count(), 4);
        assert_eq!(Slice::new(2, 64).unwrap().partitions(), 128..192);
        let d = DeviceId::new("sensor-7").unwrap();
        let hour = Period::Hourly.bucket(Timestamp::parse_rfc3339("2026-04-20T07:00:00Z").unwrap());
        let p = keys::active_partition_of(&d);
        assert_eq!(
            keys::active_gsi2pk(hour, &d),
            keys::active_gsi2pk_of(hour, p)
        );
        for width in [4, 8, 256] {
            assert!(Slice::of(&d, width).unwrap().partitions().contains(&p));
        }
        let some: BTreeSet<u16> = [0, 5, 63].into();
        assert_eq!(from_bits(to_bits(&some)), some);
    }

    #[test]
    fn a_small_fleets_hour_is_one_slice_and_a_millions_is_64() {
        assert_eq!(
            width_for(None),
            MIN_WIDTH,
            "not known: as many slices as a job holds"
        );
        assert_eq!(width_for(Some(0)), 256);
        assert_eq!(width_for(Some(1_000)), 256);
        assert_eq!(width_for(Some(16_384)), 256);
        assert_eq!(width_for(Some(16_385)), 128);
        assert_eq!(width_for(Some(100_000)), 32);
        assert_eq!(width_for(Some(1_000_000)), 4);
        assert_eq!(width_for(Some(10_000_000)), 4);
        for n in [None, Some(1), Some(1_000_000), Some(10_000_000)] {
            assert_eq!(
                Slice::all(width_for(n)).count(),
                usize::from(PARTITIONS / width_for(n))
            );
            assert!(Slice::all(width_for(n)).count() <= usize::from(MAX_SLICES));
        }
    }
}
