//! An alert write ([`AlertWrite`]): what a plan asks the store to write, in terms the store
//! traits take without knowing how plans are made.

use tidemark_schema::{AlertItem, Tags};

/// A write the plan needs.
#[derive(Debug, Clone, PartialEq)]
pub enum AlertWrite {
    /// A new alert (already resolved when the readings that opened it also ended it).
    Create(Box<AlertItem>),
    /// An unresolved alert moved on: its breach statistics, and its resolution. Only the
    /// evaluator's attributes are written, so an acknowledgement or snooze the API wrote
    /// meanwhile stays.
    Update {
        before: Box<AlertItem>,
        after: Box<AlertItem>,
    },
    /// A resolved alert whose episode the readings show still open (a correction or a late
    /// reading removed its end): open again, its resolution removed, its index keys back, and
    /// its breach statistics; written only while it is still resolved as `before` was, so an
    /// acknowledgement or snooze stays.
    Reopen {
        before: Box<AlertItem>,
        after: Box<AlertItem>,
    },
}

impl AlertWrite {
    pub fn after(&self) -> &AlertItem {
        match self {
            AlertWrite::Create(a) => a,
            AlertWrite::Update { after, .. } | AlertWrite::Reopen { after, .. } => after,
        }
    }

    /// The alert as written carries the device's tags of now ([`with_tags`]).
    fn after_mut(&mut self) -> &mut AlertItem {
        match self {
            AlertWrite::Create(a) => a,
            AlertWrite::Update { after, .. } | AlertWrite::Reopen { after, .. } => after,
        }
    }
}

/// Every alert a write opens or changes carries the device's tags as its item holds them
/// now, so the event of the change can be routed by tag. Stamped on writes already planned:
/// a tag change alone writes no alert.
pub fn with_tags(writes: &mut [AlertWrite], tags: &Tags) {
    for w in writes {
        w.after_mut().tags = tags.clone();
    }
}
