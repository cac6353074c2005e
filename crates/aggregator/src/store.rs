//! The table operations the aggregator needs, one small trait each; implemented for DynamoDB
//! in [`crate::dynamo`] and in memory for unit tests.

use std::collections::{BTreeMap, HashMap, HashSet};

use tidemark_schema::keys::FailedRecord;
use tidemark_schema::{
    AggregateItem, AlertId, AlertItem, Bucket, DeviceId, DeviceItem, Key, LatestReading,
    RepairItem, RuleState, Timestamp,
};
use tidemark_store::StoreError;

use crate::alerting::write::AlertWrite;
use crate::rollups::combine::{BucketReadings, BucketSummary};

/// How a conditional write ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Written {
    /// Done; the write request units it consumed (table and indexes).
    Ok { units: f64 },
    /// The condition failed: someone else changed the item since it was read.
    Conflict,
}

/// What the device item write changes.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceUpdate {
    pub device: DeviceId,
    /// `version` as read (`None`: never written by the evaluator): the write's condition.
    pub expected_version: Option<u64>,
    pub last_seen_at: Timestamp,
    /// `None` leaves `latest` as it is (the newest stored reading is older than it).
    pub latest: Option<LatestReading>,
    pub rule_states: BTreeMap<String, RuleState>,
    /// `createdAt` of a device this write registers.
    pub now: Timestamp,
    /// GSI1 status key of a device this write registers (active, in its status partition).
    pub status_gsi1pk: String,
    /// Its newest arrival, GSI2 watch key and offline state
    /// ([`crate::offline::upkeep`]).
    pub offline: crate::offline::upkeep::Upkeep,
}

pub trait AggregateStore {
    /// Consistent reads; missing items are absent from the map.
    fn get_aggregates(
        &self,
        keys: &[Key],
    ) -> impl Future<Output = Result<HashMap<Key, AggregateItem>, StoreError>> + Send;
    /// The overflow pages of the bucket's rollup ([`crate::rollups::pages`]; page 0 is the item
    /// [`AggregateStore::get_aggregates`] reads), consistent, in any order.
    fn aggregate_pages(
        &self,
        device: &DeviceId,
        bucket: Bucket,
    ) -> impl Future<Output = Result<Vec<AggregateItem>, StoreError>> + Send;
    /// At most `n` of `device`'s hourly items (page 0) before the hour `before`, newest
    /// first, consistent: where a batch looks for placeholders left to close.
    fn hours_before(
        &self,
        device: &DeviceId,
        before: Bucket,
        n: usize,
    ) -> impl Future<Output = Result<Vec<AggregateItem>, StoreError>> + Send;
    /// Marks each hour (its start) for the Parquet export to write again: a reading of it
    /// changed after it closed ([`tidemark_schema::ExportDirtyItem`]).
    fn mark_export_dirty(
        &self,
        hours: &[Timestamp],
        now: Timestamp,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Writes `item` (any page) if the stored version is still `expected` (`None`: no
    /// item yet).
    fn put_aggregate(
        &self,
        item: &AggregateItem,
        expected: Option<u64>,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send;
}

pub trait DeviceStore {
    fn get_devices(
        &self,
        ids: &[DeviceId],
    ) -> impl Future<Output = Result<HashMap<DeviceId, DeviceItem>, StoreError>> + Send;
    /// Whether the device has `percentiles: true` (its rollups keep quantile sketches): that
    /// attribute only, so a device item that does not parse never stops its rollups.
    fn keeps_sketches(
        &self,
        device: &DeviceId,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Sets `lastSeenAt`, `latest` and the rule states if `version` is still as read (bumping
    /// it), registering an unknown device on the way (`if_not_exists`, no extra write),
    /// together with the alert writes it decided, atomically: the rule states say which
    /// alerts are open, so they must never move without them (or they without the rule
    /// states). Without alert writes this is one plain UpdateItem. One transaction: at most
    /// `MAX_TRANSACT_ACTIONS - 1` alert writes ([`crate::alerting::commit`] chunks them).
    fn commit_device(
        &self,
        u: &DeviceUpdate,
        alerts: &[AlertWrite],
    ) -> impl Future<Output = Result<Written, StoreError>> + Send;
}

pub trait AlertStore {
    /// Writes `alerts` (at most `MAX_TRANSACT_ACTIONS`) in one transaction, each on the
    /// condition [`DeviceStore::commit_device`] puts on it; [`Written::Conflict`] when one
    /// fails. The alerts a device commit would not fit, written ahead of it.
    fn put_alerts(
        &self,
        device: &DeviceId,
        alerts: &[AlertWrite],
    ) -> impl Future<Output = Result<Written, StoreError>> + Send;
    fn get_alerts(
        &self,
        device: &DeviceId,
        ids: &[AlertId],
    ) -> impl Future<Output = Result<HashMap<AlertId, AlertItem>, StoreError>> + Send;
    /// The device's alerts whose IDs were made at or after `from` (consistent): every alert
    /// that opened at or after it, whatever its ID says, since an alert's opening only ever
    /// moves earlier than its ID's time. How a derivation finds the alerts its episodes
    /// already have.
    fn alerts_since(
        &self,
        device: &DeviceId,
        from: Timestamp,
    ) -> impl Future<Output = Result<HashMap<AlertId, AlertItem>, StoreError>> + Send;
}

pub trait ReadingStore {
    /// Every reading of `device` in `[from, to]` across all its partitions, stored
    /// singly or packed, expired or not (aggregates keep what TTL later deletes), in no
    /// particular order. Callers keep the range small (a window of a derivation).
    fn readings_between(
        &self,
        device: &DeviceId,
        from: Timestamp,
        to: Timestamp,
    ) -> impl Future<Output = Result<BucketReadings, StoreError>> + Send;
    /// At most `limit` readings of `device` in `[from, to]`, in time order (newest first
    /// when asked), merged across its partitions: a page of a walk through its history.
    fn readings_page(
        &self,
        device: &DeviceId,
        from: Timestamp,
        to: Timestamp,
        newest_first: bool,
        limit: usize,
    ) -> impl Future<Output = Result<BucketReadings, StoreError>> + Send;
    /// Extremes and first/last times of the readings in `[from, to]`, folded page by page
    /// (a hot device's day never sits in memory), with quantile sketches if `sketched`.
    fn summarize(
        &self,
        device: &DeviceId,
        from: Timestamp,
        to: Timestamp,
        sketched: bool,
    ) -> impl Future<Output = Result<BucketSummary, StoreError>> + Send;
    /// The newest reading of `device` at or after `since`, if any.
    fn newest_reading(
        &self,
        device: &DeviceId,
        since: Timestamp,
    ) -> impl Future<Output = Result<Option<LatestReading>, StoreError>> + Send;
}

pub trait HeartbeatStore {
    /// Copies `sentAt` to the role's mark (`passedAt`, `rollupsPassedAt`) on the shard's
    /// heartbeat item if it still holds the heartbeat sent at `sent_at` (a newer one is marked
    /// when its own record comes); the write units it consumed.
    fn pass_heartbeat(
        &self,
        shard: &tidemark_schema::keys::ShardName,
        sent_at: Timestamp,
        role: crate::role::Role,
    ) -> impl Future<Output = Result<f64, StoreError>> + Send;
}

/// What setting a record aside needs ([`crate::setaside`]): the failure counts and the
/// repair items.
pub trait SetAsideStore {
    /// Adds one permanent failure of `record` to its count item (`PIPELINE` /
    /// `FAILURES#<role>#<record>`, [`tidemark_store::failures`]) and returns the count so far.
    fn count_failure(
        &self,
        record: &FailedRecord,
        error: &str,
        ttl: i64,
    ) -> impl Future<Output = Result<u32, StoreError>> + Send;
    /// Writes a repair item ([`RepairItem`]).
    fn put_repair(&self, item: &RepairItem) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// At most `limit` of `role`'s repairs still to do, oldest first.
    fn open_repairs(
        &self,
        role: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<RepairItem>, StoreError>> + Send;
    /// Deletes a repair done.
    fn delete_repair(&self, key: &Key) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// All seven, for the handler.
pub trait Store:
    AggregateStore
    + DeviceStore
    + AlertStore
    + ReadingStore
    + HeartbeatStore
    + SetAsideStore
    + GroupStore
    + Sync
{
}
impl<
    T: AggregateStore
        + DeviceStore
        + AlertStore
        + ReadingStore
        + HeartbeatStore
        + SetAsideStore
        + GroupStore
        + Sync,
> Store for T
{
}

/// Reads `keys` with `get`; when an item among them does not parse, reads them one by one so
/// that only the unreadable ones are left out (and returned apart, to be skipped and counted).
pub(crate) async fn read_skipping_unreadable<K, T, F, Fut>(
    keys: &[K],
    get: F,
) -> (Result<HashMap<K, T>, StoreError>, HashSet<K>)
where
    K: Clone + Eq + std::hash::Hash + std::fmt::Debug,
    F: Fn(Vec<K>) -> Fut,
    Fut: std::future::Future<Output = Result<HashMap<K, T>, StoreError>>,
{
    if keys.is_empty() {
        return (Ok(HashMap::new()), HashSet::new());
    }
    match get(keys.to_vec()).await {
        Err(e) if e.is_unreadable() => {}
        other => return (other, HashSet::new()),
    }
    let mut found = HashMap::new();
    let mut unreadable = HashSet::new();
    for k in keys {
        match get(vec![k.clone()]).await {
            Ok(m) => found.extend(m),
            Err(e) if e.is_unreadable() => {
                tracing::warn!(key = ?k, error = %e, "unreadable item: this batch leaves it as it is");
                unreadable.insert(k.clone());
            }
            Err(e) => return (Err(e), unreadable),
        }
    }
    (Ok(found), unreadable)
}

pub use crate::groups::GroupStore;

/// [`SetAsideStore::open_repairs`] over any table a query runs on: one page of the role's
/// repair partition, oldest first; an item that does not parse is skipped (logged).
pub(crate) async fn open_repairs<Q: tidemark_store::read::QueryStore + Sync>(
    q: &Q,
    role: &str,
    limit: usize,
) -> Result<Vec<RepairItem>, StoreError> {
    use tidemark_store::read::{QuerySpec, SkRange};
    let spec = QuerySpec::table(tidemark_schema::keys::repair_pk(role), SkRange::All, true);
    let page = q
        .query(&spec, None, i32::try_from(limit).unwrap_or(i32::MAX))
        .await?;
    Ok(page
        .items
        .into_iter()
        .filter_map(|i| match tidemark_store::from_item::<RepairItem>(i) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!(error = %e, "an unreadable repair item is left as it is");
                None
            }
        })
        .collect())
}

pub use crate::dynamo::DynamoStore;

/// [`AggregateStore::hours_before`] over any table a query runs on.
pub(crate) async fn hours_before<Q: tidemark_store::read::QueryStore + Sync>(
    q: &Q,
    device: &DeviceId,
    before: Bucket,
    n: usize,
) -> Result<Vec<AggregateItem>, StoreError> {
    use tidemark_schema::{Period, keys};
    use tidemark_store::read::{QuerySpec, SkRange};
    let Some(last) = before.start().pred() else {
        return Ok(Vec::new());
    };
    let mut spec = QuerySpec::table(
        keys::device_pk(device),
        SkRange::Between(
            keys::aggregate_sk(Period::Hourly.bucket(Timestamp::MIN)),
            keys::aggregate_sk(Period::Hourly.bucket(last)),
        ),
        false,
    );
    spec.consistent = true;
    let page = q
        .query(&spec, None, i32::try_from(n).unwrap_or(i32::MAX))
        .await?;
    page.items
        .into_iter()
        .map(tidemark_store::from_item)
        .collect()
}
