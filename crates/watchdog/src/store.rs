//! The table operations a watchdog run needs ([`WatchStore`]): on DynamoDB in `dynamo.rs`,
//! in memory (for the run's unit tests) in `memory.rs`. One trait, so the run's logic is the
//! same over both.

use tidemark_schema::{
    AlertItem, DeviceId, DeviceItem, GroupPartialItem, GroupRuleSpec, GroupRuleStateItem,
    HeartbeatItem, LayoutHistory, Tag, Timestamp, field, keys,
};
use tidemark_store::{Item, StoreError};

use crate::groups::{GroupCounts, GroupStep};

/// The table operations of a run.
pub trait WatchStore: Sync {
    /// Every shard's heartbeat item, read strongly consistent.
    fn heartbeats(&self) -> impl Future<Output = Result<Vec<HeartbeatItem>, StoreError>> + Send;
    /// The devices of watch partition `partition` whose check time is at or before `until`,
    /// at most `limit`, earliest first.
    fn due(
        &self,
        partition: &str,
        until: Timestamp,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<DeviceId>, StoreError>> + Send;
    /// The device item, read strongly consistent.
    fn device(
        &self,
        id: &DeviceId,
    ) -> impl Future<Output = Result<Option<DeviceItem>, StoreError>> + Send;
    /// The latest arrival among the device's readings (single or packed, any layout epoch)
    /// stored at or after the reading time `since`.
    fn newest_arrival(
        &self,
        id: &DeviceId,
        since: Timestamp,
    ) -> impl Future<Output = Result<Option<Timestamp>, StoreError>> + Send;
    /// Sets its newest arrival and check time, if its `version` is still as read.
    fn postpone(
        &self,
        dev: &DeviceItem,
        arrived: Timestamp,
        check: Timestamp,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Takes it out of the watch (it has no window any more), same condition.
    fn unwatch(&self, dev: &DeviceItem) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Creates `alert` and marks the device offline since `since`, in one transaction: the
    /// alert only if new, the device only if its `version` is still as read.
    fn open(
        &self,
        dev: &DeviceItem,
        alert: &AlertItem,
        since: Timestamp,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// The sums of `tag`'s index partitions' counts (one batch read).
    fn group_counts(
        &self,
        tag: &Tag,
    ) -> impl Future<Output = Result<GroupCounts, StoreError>> + Send;
    /// The partials of `tag`'s hour starting at `hour`, read strongly consistent (the rollups
    /// role marks its heartbeat passed only after writing them).
    fn group_partials(
        &self,
        tag: &Tag,
        hour: Timestamp,
    ) -> impl Future<Output = Result<Vec<GroupPartialItem>, StoreError>> + Send;
    /// The group rule's state, read strongly consistent (`None`: never judged).
    fn group_rule_state(
        &self,
        rule: &GroupRuleSpec,
    ) -> impl Future<Output = Result<Option<GroupRuleStateItem>, StoreError>> + Send;
    /// Writes `step` in one transaction: the rule's state if its version is still
    /// `step.state.version` (bumped), the alert it opens only if new, the alert it resolves
    /// only if not resolved yet. `Ok(false)`: another run changed it first.
    fn commit_group(
        &self,
        rule: &GroupRuleSpec,
        step: &GroupStep,
        at: Timestamp,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Read and write units consumed so far (DynamoDB's own figures).
    fn units(&self) -> (f64, f64);
}

/// One partition's sort-key range holding a device's readings stored since some reading time:
/// what [`WatchStore::newest_arrival`] reads the arrivals of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrivalRange {
    /// The readings partition (`pk`).
    pub partition: String,
    /// Inclusive sort-key bounds.
    pub lo: String,
    pub hi: String,
}

/// The ranges holding `id`'s readings of reading time `since` or later under `history`, one
/// per layout segment and partition: both implementations read arrivals from exactly these,
/// so the in-memory one reads what the DynamoDB one does.
pub fn arrival_ranges(
    id: &DeviceId,
    history: &LayoutHistory,
    since: Timestamp,
) -> Vec<ArrivalRange> {
    let mut out = Vec::new();
    for seg in history.segments(since, Timestamp::MAX) {
        let (lo, hi) = match seg.layout.slot {
            // A part may carry its next slot's readings: from the slot before.
            Some(len) => keys::slot_sk_between(len.first_holder(seg.from), len.start_of(seg.to)),
            None => (keys::reading_sk(seg.from), keys::reading_sk(seg.to)),
        };
        for partition in seg.partitions() {
            out.push(ArrivalRange {
                partition: keys::reading_pk(id, partition),
                lo: lo.clone(),
                hi: hi.clone(),
            });
        }
    }
    out
}

/// The arrival a stored reading item (single or slot part) carries, if any.
pub fn arrived_at(item: &Item) -> Option<Timestamp> {
    let ms = item.get(field::ARRIVED_AT)?.as_n().ok()?;
    Timestamp::from_epoch_millis(ms.parse::<i64>().ok()?).ok()
}
