//! Write sharding of hot devices (docs/design.md §4).
//!
//! A device whose shard count is N > 1 writes each reading to `DEVICE#<id>#S<hash(ts) % N>`.
//! The count keeps its history with effective-from times, so the shard of any reading is a
//! pure function of (history, reading time): a re-sent reading lands on the same key, and a
//! read of any range knows exactly which partitions to ask. Changing N migrates nothing.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::layout::{Layout, SlotLen};
use crate::time::Timestamp;

/// The most shards one device may have (each can take 1,000 writes/s).
pub const MAX_SHARDS: u16 = 64;

/// The shard a reading at `at` goes to when the count is `count`; `None` below 2 (the
/// device's own partition).
pub fn shard_for(at: Timestamp, count: u16) -> Option<u16> {
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

/// How long an ingest container trusts the shard counts it read (the same variable names
/// configure ingest and the API, which must agree on them).
pub const SHARD_CACHE_SECONDS_ENV: &str = "SHARD_CACHE_SECONDS";
pub const DEFAULT_SHARD_CACHE_SECONDS: u64 = 30;
/// How far ahead of the clock ingest accepts a reading.
pub const MAX_FUTURE_SECONDS_ENV: &str = "MAX_FUTURE_SECONDS";
pub const DEFAULT_MAX_FUTURE_SECONDS: u64 = 300;
/// Margin for clocks of different Lambda hosts disagreeing.
pub const CLOCK_SKEW: Duration = Duration::from_secs(5);

/// Which shard changes are already in use, given how ingest reads the counts.
///
/// An ingest container writes with a snapshot of the histories at most `shard_cache` old,
/// and accepts readings up to `max_future` ahead of its clock. So a snapshot taken at `now`
/// may be used for readings up to `now + shard_cache + max_future` (plus clock skew): every
/// epoch starting at or before that instant may already have readings written under it and
/// must never change; every later one is only announced, and may still be replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardLead {
    pub shard_cache: Duration,
    pub max_future: Duration,
}

impl Default for ShardLead {
    fn default() -> Self {
        ShardLead {
            shard_cache: Duration::from_secs(DEFAULT_SHARD_CACHE_SECONDS),
            max_future: Duration::from_secs(DEFAULT_MAX_FUTURE_SECONDS),
        }
    }
}

impl ShardLead {
    /// The last reading time any container may have written with a history read at `now`.
    pub fn settled_until(&self, now: Timestamp) -> Timestamp {
        let lead = self.shard_cache + self.max_future + CLOCK_SKEW;
        now.plus_millis(i64::try_from(lead.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(Timestamp::MAX)
    }

    /// The earliest instant a change made at `now` may take effect: the first whole second
    /// after [`ShardLead::settled_until`].
    pub fn earliest_change(&self, now: Timestamp) -> Timestamp {
        let settled = self.settled_until(now).epoch_millis();
        let next_second = (settled / 1000 + 1) * 1000;
        Timestamp::from_epoch_millis(next_second).unwrap_or(Timestamp::MAX)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ShardHistoryError {
    #[error("shard count {0} is outside 1..={MAX_SHARDS}")]
    Count(u16),
    #[error("a shard change must take effect after the last one ({last}); got {from}")]
    NotAfterLast { last: Timestamp, from: Timestamp },
    #[error(
        "a shard change must take effect at {earliest} or later (ingest containers may \
         already be writing readings up to then with the current count); got {from}"
    )]
    TooSoon {
        earliest: Timestamp,
        from: Timestamp,
    },
}

/// One period of a constant shard count, from `from` until the next epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardEpoch {
    pub from: Timestamp,
    pub count: u16,
    /// Packed into slots of this length from `from` on (absent: single items); see
    /// [`crate::layout`].
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "slotSeconds"
    )]
    pub slot: Option<SlotLen>,
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
            h = h.with_layout(e.from, e.layout())?;
        }
        Ok(h)
    }

    /// The history with the count becoming `count` at `from`. Changes only append, so the
    /// shard of an already-written reading never changes.
    pub fn with_change(&self, from: Timestamp, count: u16) -> Result<Self, ShardHistoryError> {
        let layout = Layout {
            shards: count,
            ..self.layout_at(from)
        };
        self.with_layout(from, layout)
    }

    /// The history with readings stored as `layout` from `from` on (appends, as
    /// [`ShardHistory::with_change`]).
    pub fn with_layout(&self, from: Timestamp, layout: Layout) -> Result<Self, ShardHistoryError> {
        let count = layout.shards;
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
        epochs.push(ShardEpoch {
            from,
            count,
            slot: layout.slot,
        });
        Ok(ShardHistory(epochs))
    }

    /// The history after "from `from` on, `count` shards" (keeping the packing in force at
    /// `from`), decided at `now`: epochs that have not begun to be used (see [`ShardLead`])
    /// are dropped in favour of the new plan, and nothing is appended when `count` is already
    /// the count in force at `from`. So a mistaken change can be taken back before it takes
    /// effect, and repeating a change changes nothing.
    pub fn planned(
        &self,
        from: Timestamp,
        count: u16,
        now: Timestamp,
        lead: ShardLead,
    ) -> Result<Self, ShardHistoryError> {
        let layout = Layout {
            shards: count,
            ..self.layout_at(from)
        };
        self.plan(from, layout, now, lead)
    }

    pub(crate) fn plan(
        &self,
        from: Timestamp,
        layout: Layout,
        now: Timestamp,
        lead: ShardLead,
    ) -> Result<Self, ShardHistoryError> {
        if !(1..=MAX_SHARDS).contains(&layout.shards) {
            return Err(ShardHistoryError::Count(layout.shards));
        }
        let earliest = lead.earliest_change(now);
        if from < earliest {
            return Err(ShardHistoryError::TooSoon { earliest, from });
        }
        let settled = lead.settled_until(now);
        let kept = ShardHistory(
            self.0
                .iter()
                .copied()
                .filter(|e| e.from <= settled)
                .collect(),
        );
        if kept.layout_at(from) == layout {
            Ok(kept)
        } else {
            kept.with_layout(from, layout)
        }
    }

    pub fn count_at(&self, at: Timestamp) -> u16 {
        self.layout_at(at).shards
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
    fn a_planned_change_starts_after_every_snapshot_in_use() {
        let now = ts("2026-04-20T14:00:00.250000Z");
        let lead = ShardLead::default();
        // 30 s cache + 300 s future + 5 s skew, rounded up to the next second.
        assert_eq!(lead.earliest_change(now), ts("2026-04-20T14:05:36Z"));
        let h = ShardHistory::default();
        assert!(matches!(
            h.planned(ts("2026-04-20T14:05:35Z"), 4, now, lead),
            Err(ShardHistoryError::TooSoon { .. })
        ));
        let h = h.planned(ts("2026-04-20T14:05:36Z"), 4, now, lead).unwrap();
        assert_eq!(h.count_at(ts("2026-04-20T14:05:36Z")), 4);
        assert_eq!(h.count_at(ts("2026-04-20T14:05:35.999000Z")), 1);
    }

    #[test]
    fn a_change_not_yet_in_use_is_replaced_and_one_in_use_is_kept() {
        let lead = ShardLead::default();
        let t0 = ts("2026-04-20T14:00:00Z");
        let h = ShardHistory::default()
            .planned(ts("2026-04-20T15:00:00Z"), 8, t0, lead)
            .unwrap();
        // Before 15:00 minus the lead, the announced epoch can be replaced.
        let replaced = h
            .planned(
                ts("2026-04-20T14:30:00Z"),
                4,
                ts("2026-04-20T14:10:00Z"),
                lead,
            )
            .unwrap();
        assert_eq!(replaced.epochs().len(), 1);
        assert_eq!(replaced.count_at(ts("2026-04-20T15:30:00Z")), 4);
        // Or withdrawn: back to 1 shard, nothing left to announce.
        let withdrawn = h
            .planned(
                ts("2026-04-20T14:30:00Z"),
                1,
                ts("2026-04-20T14:10:00Z"),
                lead,
            )
            .unwrap();
        assert_eq!(withdrawn, ShardHistory::default());
        // After it began to be used, it stays, and a new change follows it.
        let later = h
            .planned(
                ts("2026-04-20T16:00:00Z"),
                2,
                ts("2026-04-20T14:58:00Z"),
                lead,
            )
            .unwrap();
        assert_eq!(later.epochs().len(), 2);
        assert_eq!(later.count_at(ts("2026-04-20T15:30:00Z")), 8);
        assert_eq!(later.count_at(ts("2026-04-20T16:00:00Z")), 2);
    }

    #[test]
    fn repeating_a_change_changes_nothing() {
        let lead = ShardLead::default();
        let h = ShardHistory::default()
            .planned(
                ts("2026-04-20T15:00:00Z"),
                4,
                ts("2026-04-20T14:00:00Z"),
                lead,
            )
            .unwrap();
        let again = h
            .planned(
                ts("2026-04-20T15:20:00Z"),
                4,
                ts("2026-04-20T15:10:00Z"),
                lead,
            )
            .unwrap();
        assert_eq!(again, h);
        assert!(
            h.planned(
                ts("2026-04-20T16:00:00Z"),
                0,
                ts("2026-04-20T15:10:00Z"),
                lead
            )
            .is_err()
        );
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
