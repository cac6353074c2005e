//! Write sharding of hot devices (DESIGN §4).
//!
//! A device whose shard count is N > 1 writes each reading to `DEVICE#<id>#S<hash(ts) % N>`.
//! The count keeps its history with effective-from times, so the shard of any reading is a
//! pure function of (history, reading time): a re-sent reading lands on the same key, and a
//! read of any range knows exactly which partitions to ask. Changing N migrates nothing.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::time::Timestamp;

/// The most shards one device may have (each can take 1,000 writes/s).
pub const MAX_SHARDS: u16 = 64;

/// The shard a reading at `at` goes to when the count is `count`; `None` below 2 (the
/// device's own partition).
pub fn shard_for(at: Timestamp, count: u16) -> Option<u16> {
    (count > 1).then(|| (mix(at.epoch_millis() as u64) % u64::from(count)) as u16)
}

/// SplitMix64's finaliser: stable across platforms and releases (unlike `DefaultHasher`),
/// and consecutive milliseconds spread evenly.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ShardHistoryError {
    #[error("shard count {0} is outside 1..={MAX_SHARDS}")]
    Count(u16),
    #[error("a shard change must take effect after the last one ({last}); got {from}")]
    NotAfterLast { last: Timestamp, from: Timestamp },
}

/// One period of a constant shard count, from `from` until the next epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardEpoch {
    pub from: Timestamp,
    pub count: u16,
}

/// A device's shard counts over time. Before the first epoch the count is 1.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ShardHistory(Vec<ShardEpoch>);

impl ShardHistory {
    pub fn epochs(&self) -> &[ShardEpoch] {
        &self.0
    }

    /// Builds a history from stored epochs, checking they are ordered and in range.
    pub fn from_epochs(epochs: Vec<ShardEpoch>) -> Result<Self, ShardHistoryError> {
        let mut h = ShardHistory::default();
        for e in epochs {
            h = h.with_change(e.from, e.count)?;
        }
        Ok(h)
    }

    /// The history with the count becoming `count` at `from`. Changes only append, so the
    /// shard of an already-written reading never changes.
    pub fn with_change(&self, from: Timestamp, count: u16) -> Result<Self, ShardHistoryError> {
        if !(1..=MAX_SHARDS).contains(&count) {
            return Err(ShardHistoryError::Count(count));
        }
        if let Some(last) = self.0.last()
            && from <= last.from
        {
            return Err(ShardHistoryError::NotAfterLast {
                last: last.from,
                from,
            });
        }
        let mut epochs = self.0.clone();
        epochs.push(ShardEpoch { from, count });
        Ok(ShardHistory(epochs))
    }

    pub fn count_at(&self, at: Timestamp) -> u16 {
        self.0
            .iter()
            .rev()
            .find(|e| e.from <= at)
            .map_or(1, |e| e.count)
    }

    /// The partition (shard) a reading at `at` is written to.
    pub fn shard_at(&self, at: Timestamp) -> Option<u16> {
        shard_for(at, self.count_at(at))
    }

    /// Every shard a reading in `[from, to]` may be in, in a stable order.
    pub fn shards_over(&self, from: Timestamp, to: Timestamp) -> BTreeSet<Option<u16>> {
        let mut counts = BTreeSet::from([self.count_at(from)]);
        counts.extend(
            self.0
                .iter()
                .filter(|e| e.from > from && e.from <= to)
                .map(|e| e.count),
        );
        let mut out = BTreeSet::new();
        for c in counts {
            if c <= 1 {
                out.insert(None);
            } else {
                out.extend((0..c).map(Some));
            }
        }
        out
    }
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
        assert_eq!(shard_for(t, 0), None);
        assert_eq!(shard_for(t, 1), None);
        for n in 2..20 {
            assert!(shard_for(t, n).unwrap() < n);
        }
    }

    #[test]
    fn consecutive_milliseconds_spread_over_all_shards() {
        let t = ts("2026-04-20T14:00:00Z");
        let mut hits = [0u32; 8];
        for i in 0..8000 {
            hits[shard_for(t.plus_millis(i).unwrap(), 8).unwrap() as usize] += 1;
        }
        assert!(hits.iter().all(|&h| (800..1200).contains(&h)), "{hits:?}");
    }

    #[test]
    fn history_answers_count_and_shards_over_a_range() {
        let h = ShardHistory::default()
            .with_change(ts("2026-04-20T12:00:00Z"), 4)
            .unwrap()
            .with_change(ts("2026-04-20T13:00:00Z"), 2)
            .unwrap();
        assert_eq!(h.count_at(ts("2026-04-20T11:59:59Z")), 1);
        assert_eq!(h.count_at(ts("2026-04-20T12:30:00Z")), 4);
        assert_eq!(h.count_at(ts("2026-04-20T14:00:00Z")), 2);
        let all = h.shards_over(ts("2026-04-20T11:00:00Z"), ts("2026-04-20T14:00:00Z"));
        assert_eq!(
            all.into_iter().collect::<Vec<_>>(),
            vec![None, Some(0), Some(1), Some(2), Some(3)]
        );
        let late = h.shards_over(ts("2026-04-20T13:30:00Z"), ts("2026-04-20T14:00:00Z"));
        assert_eq!(late.into_iter().collect::<Vec<_>>(), vec![Some(0), Some(1)]);
    }

    #[test]
    fn history_only_appends() {
        let h = ShardHistory::default()
            .with_change(ts("2026-04-20T12:00:00Z"), 4)
            .unwrap();
        assert!(h.with_change(ts("2026-04-20T11:00:00Z"), 2).is_err());
        assert!(h.with_change(ts("2026-04-20T13:00:00Z"), 0).is_err());
        assert!(
            h.with_change(ts("2026-04-20T13:00:00Z"), MAX_SHARDS + 1)
                .is_err()
        );
    }
}
