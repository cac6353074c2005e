//! Write partitioning of hot devices (docs/design.md §4): a device whose partition count is N > 1
//! writes each reading to `DEVICE#<id>#S<hash(ts) % N>`. The count in force at a reading's
//! time comes from the device's layout history ([`crate::history`]).

use crate::time::Timestamp;

/// The most shards one device may have (each can take 1,000 writes/s).
pub const MAX_PARTITIONS: u16 = 64;

/// The shard a reading at `at` goes to when the count is `count`; `None` below 2 (the
/// device's own partition).
pub fn partition_for(at: Timestamp, count: u16) -> Option<u16> {
    (count > 1).then(|| (mix(at.epoch_micros() as u64) % u64::from(count)) as u16)
}

/// SplitMix64's finaliser: stable across platforms and releases (unlike `DefaultHasher`),
/// and consecutive milliseconds spread evenly.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    #[test]
    fn shard_is_none_below_two_and_in_range_above() {
        let t = ts("2026-04-20T14:00:00Z");
        assert_eq!(partition_for(t, 0), None);
        assert_eq!(partition_for(t, 1), None);
        for n in 2..20 {
            assert!(partition_for(t, n).unwrap() < n);
        }
    }

    #[test]
    fn consecutive_milliseconds_spread_over_all_shards() {
        let t = ts("2026-04-20T14:00:00Z");
        let mut hits = [0u32; 8];
        for i in 0..8000 {
            hits[partition_for(t.plus_millis(i).unwrap(), 8).unwrap() as usize] += 1;
        }
        assert!(hits.iter().all(|&h| (800..1200).contains(&h)), "{hits:?}");
    }
}
