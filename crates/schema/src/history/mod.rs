//! A device's layout over time (docs/design.md §2): epochs, each with an effective-from
//! time, a partition count and a slot length (none: single items). The layout of a reading is a
//! pure function of (history, reading time), so a re-sent reading goes to the same item, and
//! a read of any range knows which partitions and which kind of key to ask, epoch by epoch
//! ([`LayoutHistory::segments`]). Changes only append, announced ahead of use
//! ([`LayoutLead`]), so changing a layout migrates nothing.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::layout::{Layout, SlotLen};
use crate::partition::MAX_PARTITIONS;
use crate::time::Timestamp;

/// How long an ingest container trusts the partition counts it read, unless `LAYOUT_CACHE_SECONDS`
/// says otherwise (ingest and the API must be given the same value).
pub const DEFAULT_LAYOUT_CACHE_SECONDS: u64 = 30;
/// How far ahead of the clock ingest accepts a reading, unless `MAX_FUTURE_SECONDS` says
/// otherwise (ingest and the API must be given the same value).
pub const DEFAULT_MAX_FUTURE_SECONDS: u64 = 300;
/// Margin for clocks of different Lambda hosts disagreeing.
pub const CLOCK_SKEW: Duration = Duration::from_secs(5);

/// Which shard changes are already in use, given how ingest reads the counts.
///
/// An ingest container writes with a snapshot of the histories at most `layout_cache` old,
/// and accepts readings up to `max_future` ahead of its clock. So a snapshot taken at `now`
/// may be used for readings up to `now + layout_cache + max_future` (plus clock skew): every
/// epoch starting at or before that instant may already have readings written under it and
/// must never change; every later one is only announced, and may still be replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayoutLead {
    pub layout_cache: Duration,
    pub max_future: Duration,
}

impl Default for LayoutLead {
    fn default() -> Self {
        LayoutLead {
            layout_cache: Duration::from_secs(DEFAULT_LAYOUT_CACHE_SECONDS),
            max_future: Duration::from_secs(DEFAULT_MAX_FUTURE_SECONDS),
        }
    }
}

impl LayoutLead {
    /// The last reading time any container may have written with a history read at `now`.
    pub fn settled_until(&self, now: Timestamp) -> Timestamp {
        let lead = self.layout_cache + self.max_future + CLOCK_SKEW;
        now.plus_millis(i64::try_from(lead.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(Timestamp::MAX)
    }

    /// The earliest instant a change made at `now` may take effect: the first whole second
    /// after [`LayoutLead::settled_until`].
    pub fn earliest_change(&self, now: Timestamp) -> Timestamp {
        let settled = self.settled_until(now).epoch_millis();
        let next_second = (settled / 1000 + 1) * 1000;
        Timestamp::from_epoch_millis(next_second).unwrap_or(Timestamp::MAX)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LayoutHistoryError {
    #[error("partition count {0} is outside 1..={MAX_PARTITIONS}")]
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

/// One period of a constant partition count, from `from` until the next epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LayoutEpoch {
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

/// A device's partition counts over time. Before the first epoch the count is 1.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LayoutHistory(Vec<LayoutEpoch>);

impl LayoutHistory {
    /// No epoch: single items in the device's own partition throughout.
    pub const EMPTY: LayoutHistory = LayoutHistory(Vec::new());

    pub fn epochs(&self) -> &[LayoutEpoch] {
        &self.0
    }

    /// Builds a history from stored epochs, checking they are ordered and in range.
    pub fn from_epochs(epochs: Vec<LayoutEpoch>) -> Result<Self, LayoutHistoryError> {
        let mut h = LayoutHistory::default();
        for e in epochs {
            h = h.with_layout(e.from, e.layout())?;
        }
        Ok(h)
    }

    /// The history with the count becoming `count` at `from`. Changes only append, so the
    /// shard of an already-written reading never changes.
    pub fn with_change(&self, from: Timestamp, count: u16) -> Result<Self, LayoutHistoryError> {
        let layout = Layout {
            partitions: count,
            ..self.layout_at(from)
        };
        self.with_layout(from, layout)
    }

    /// The history with readings stored as `layout` from `from` on (appends, as
    /// [`LayoutHistory::with_change`]).
    pub fn with_layout(&self, from: Timestamp, layout: Layout) -> Result<Self, LayoutHistoryError> {
        let count = layout.partitions;
        if !(1..=MAX_PARTITIONS).contains(&count) {
            return Err(LayoutHistoryError::Count(count));
        }
        if let Some(last) = self.0.last()
            && from <= last.from
        {
            return Err(LayoutHistoryError::NotAfterLast {
                last: last.from,
                from,
            });
        }
        let mut epochs = self.0.clone();
        epochs.push(LayoutEpoch {
            from,
            count,
            slot: layout.slot,
        });
        Ok(LayoutHistory(epochs))
    }

    /// The history after "from `from` on, `count` shards" (keeping the packing in force at
    /// `from`), decided at `now`: epochs that have not begun to be used (see [`LayoutLead`])
    /// are dropped in favour of the new plan, and nothing is appended when `count` is already
    /// the count in force at `from`. So a mistaken change can be taken back before it takes
    /// effect, and repeating a change changes nothing.
    pub fn planned(
        &self,
        from: Timestamp,
        count: u16,
        now: Timestamp,
        lead: LayoutLead,
    ) -> Result<Self, LayoutHistoryError> {
        let layout = Layout {
            partitions: count,
            ..self.layout_at(from)
        };
        self.planned_layout(from, layout, now, lead)
    }

    /// The history after "from `from` on, store readings as `layout`", decided at `now`, with
    /// the rules of [`LayoutHistory::planned`] (the lead time, replacing an epoch not yet in
    /// use, a repeat changing nothing).
    pub fn planned_layout(
        &self,
        from: Timestamp,
        layout: Layout,
        now: Timestamp,
        lead: LayoutLead,
    ) -> Result<Self, LayoutHistoryError> {
        if !(1..=MAX_PARTITIONS).contains(&layout.partitions) {
            return Err(LayoutHistoryError::Count(layout.partitions));
        }
        let earliest = lead.earliest_change(now);
        if from < earliest {
            return Err(LayoutHistoryError::TooSoon { earliest, from });
        }
        let settled = lead.settled_until(now);
        let kept = LayoutHistory(
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
        self.layout_at(at).partitions
    }

    /// The partition (shard) a reading at `at` is written to.
    pub fn partition_at(&self, at: Timestamp) -> Option<u16> {
        self.layout_at(at).partition_of(at)
    }

    /// Every shard a reading in `[from, to]` may be in, in a stable order.
    pub fn partitions_over(&self, from: Timestamp, to: Timestamp) -> BTreeSet<Option<u16>> {
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

/// A stretch of a read range stored under one layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub from: Timestamp,
    pub to: Timestamp,
    pub layout: Layout,
}

impl Segment {
    /// The partitions (shards) this segment's readings are in.
    pub fn partitions(&self) -> Vec<Option<u16>> {
        if self.layout.partitions <= 1 {
            vec![None]
        } else {
            (0..self.layout.partitions).map(Some).collect()
        }
    }
}

impl LayoutEpoch {
    pub fn layout(&self) -> Layout {
        Layout {
            partitions: self.count,
            slot: self.slot,
        }
    }
}

impl LayoutHistory {
    pub fn layout_at(&self, at: Timestamp) -> Layout {
        self.epochs()
            .iter()
            .rev()
            .find(|e| e.from <= at)
            .map_or(Layout::SINGLE, LayoutEpoch::layout)
    }

    /// The history a device follows: its own from its first epoch on, and before that the
    /// fleet's `default`. (An empty own history follows the default throughout; a device given
    /// a layout or partition count of its own keeps it through later changes of the default.)
    pub fn under(&self, default: &LayoutHistory) -> LayoutHistory {
        let first = self.epochs().first().map_or(Timestamp::MAX, |e| e.from);
        let mut out = LayoutHistory::default();
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
}

#[cfg(test)]
mod tests;
