//! The table operations a watchdog run needs ([`WatchStore`]): on DynamoDB in `dynamo.rs`,
//! in memory (for the run's unit tests) in `memory.rs`. One trait, so the run's logic is the
//! same over both.

use tidemark_schema::{AlertItem, DeviceId, DeviceItem, HeartbeatItem, Timestamp};
use tidemark_store::StoreError;

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
    /// Read and write units consumed so far (DynamoDB's own figures).
    fn units(&self) -> (f64, f64);
}
