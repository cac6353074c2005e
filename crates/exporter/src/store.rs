//! The exporter's store traits, what its logic runs over: what an export reads from the table
//! and the group rollups it writes there ([`ExportTable`]), and where the schedule stands
//! ([`State`]); and the reads the implementations share, over any [`QueryStore`]. On
//! DynamoDB in `dynamo.rs`, in memory (over the one in-memory test engine) in `memory.rs`.

use std::collections::{BTreeSet, HashMap};

use tidemark_schema::{
    Bucket, DeviceId, DeviceStatus, EntityKey, ExportDirtyItem, ExportJobItem, GroupBucketItem,
    Key, LayoutHistory, MetricName, Reading, Tag, TagHistory, TagKey, Timestamp, keys,
};
use tidemark_store::Item;
use tidemark_store::read::{QuerySpec, QueryStore, SkRange, query_all, walk_whole_readings_while};

use crate::ExportError;
use crate::slicing::Slice;

/// What an export (an hour, a day, the groups' buckets) reads from the table and writes there.
pub trait ExportTable {
    /// The devices of `slice` with readings in the hour `hour`, as the rollups role has
    /// recorded them: their hourly rollup items' entries in the hour's activity partition of
    /// GSI2 ([`list_active`]), registered or not.
    fn active_devices(
        &self,
        hour: Bucket,
        slice: Slice,
    ) -> impl Future<Output = Result<BTreeSet<DeviceId>, ExportError>> + Send;
    /// The activity partitions with devices in the hour `hour` ([`list_active_partitions`]).
    fn active_partitions(
        &self,
        hour: Bucket,
    ) -> impl Future<Output = Result<BTreeSet<u16>, ExportError>> + Send;
    /// Every registered device (each status, each status partition): the devices table.
    fn registered_devices(
        &self,
    ) -> impl Future<Output = Result<BTreeSet<DeviceId>, ExportError>> + Send;
    /// Hands `visit` the device's readings in `[from, to)`, whole (metadata included), in
    /// time order, one at a time (a day of a 2 kHz device is never held at once); answers how
    /// many stored items did not parse (left out, as every reader leaves them out).
    fn readings(
        &self,
        device: &DeviceId,
        from: Timestamp,
        to: Timestamp,
        visit: impl FnMut(Reading) + Send,
    ) -> impl Future<Output = Result<u64, ExportError>> + Send;
    /// `GROUP_TAGS`: the tag keys whose groups keep rollups.
    fn group_tags(&self) -> &[TagKey];
    /// How many tag history changes the table has seen
    /// ([`tidemark_store::tags::tag_changes`]): the devices table is remade when it moved.
    fn tag_changes(&self) -> impl Future<Output = Result<u64, ExportError>> + Send;
    /// The tag histories of `devices`, read consistent (a device without one is absent).
    fn tag_histories(
        &self,
        devices: &[DeviceId],
    ) -> impl Future<Output = Result<HashMap<DeviceId, TagHistory>, ExportError>> + Send;
    /// Puts group bucket items (each replacing what its key held).
    fn put_group_buckets(
        &self,
        items: &[GroupBucketItem],
    ) -> impl Future<Output = Result<(), ExportError>> + Send;
    /// Deletes group bucket items.
    fn delete_group_buckets(
        &self,
        keys: &[Key],
    ) -> impl Future<Output = Result<(), ExportError>> + Send;
    /// The hour items of `tag`'s `metric` in the day `day`, read consistent.
    fn group_hours(
        &self,
        tag: &Tag,
        metric: &MetricName,
        day: Bucket,
    ) -> impl Future<Output = Result<Vec<GroupBucketItem>, ExportError>> + Send;
}

/// Where the schedule stands, in the table's `EXPORT` partition.
pub trait State {
    /// The newest hour the schedule has exported (`None`: no run yet).
    fn cursor(&self) -> impl Future<Output = Result<Option<Timestamp>, ExportError>> + Send;
    /// Moves the cursor to `hour` unless it already stands there or later.
    fn advance(&self, hour: Timestamp) -> impl Future<Output = Result<(), ExportError>> + Send;
    /// The hours marked as changed after their close, with their mark counts.
    fn dirty(&self) -> impl Future<Output = Result<Vec<ExportDirtyItem>, ExportError>> + Send;
    /// Removes the hour's mark if it still counts `marks` markings (none came after the one
    /// the export answers); whether it did.
    fn clear(
        &self,
        hour: Timestamp,
        marks: u64,
    ) -> impl Future<Output = Result<bool, ExportError>> + Send;
    /// The hour's job, read consistent (`None`: the hour is not being exported).
    fn job(
        &self,
        hour: Timestamp,
    ) -> impl Future<Output = Result<Option<ExportJobItem>, ExportError>> + Send;
    /// The hours being exported in slices, oldest first.
    fn jobs(&self) -> impl Future<Output = Result<Vec<ExportJobItem>, ExportError>> + Send;
    /// Records `job` unless its hour already has one; whether it did (a run at the same
    /// time started the hour first otherwise, and its slices are the ones that count).
    fn start(&self, job: &ExportJobItem) -> impl Future<Output = Result<bool, ExportError>> + Send;
    /// Stores `job` (its new `sent_at`) if its hour's job is still of its generation.
    fn resent(&self, job: &ExportJobItem) -> impl Future<Output = Result<(), ExportError>> + Send;
    /// Removes `job` if its hour's job is still of its generation.
    fn finish(&self, job: &ExportJobItem) -> impl Future<Output = Result<(), ExportError>> + Send;
}

/// Devices listed per GSI1 query page.
const DEVICE_PAGE: i32 = 1000;

/// The entity an item (or an index's copy of its keys) is, from its key.
fn entity_of(item: &Item) -> Option<EntityKey> {
    let s = |a: &str| item.get(a).and_then(|v| v.as_s().ok()).cloned();
    EntityKey::parse(&s("pk")?, &s("sk")?).ok()
}

fn device_of(item: &Item) -> Option<DeviceId> {
    match entity_of(item)? {
        EntityKey::Device(d) => Some(d),
        _ => None,
    }
}

// The reads below are the implementations' own, shared: each runs over any [`QueryStore`]
// (DynamoDB's `Queries`, the in-memory `MemTable`), so the in-memory store reads the table
// exactly as the DynamoDB one does.

/// Every registered device from GSI1's status listing: each status, its unsharded partition
/// and, over `status_partitions` > 1, its sharded ones (a device is in exactly one).
pub async fn list_devices<Q: QueryStore + Sync>(
    q: &Q,
    status_partitions: u16,
) -> Result<BTreeSet<DeviceId>, ExportError> {
    let mut out = BTreeSet::new();
    for status in DeviceStatus::ALL.iter().copied() {
        let mut partitions = vec![keys::status_gsi1pk(status, None)];
        if status_partitions > 1 {
            partitions.extend(keys::status_gsi1pks(status, status_partitions));
        }
        for pk in partitions {
            let spec = QuerySpec::gsi1(
                pk,
                SkRange::BeginsWith(keys::DEVICE_PREFIX.to_owned()),
                true,
            );
            query_all(q, &spec, DEVICE_PAGE, |item| {
                out.extend(device_of(&item));
            })
            .await?;
        }
    }
    Ok(out)
}

/// Devices listed per GSI2 activity query page.
const ACTIVE_PAGE: i32 = 1000;

/// The device and bucket of an hourly rollup item's index entry.
fn active_of(item: &Item) -> Option<(DeviceId, Bucket)> {
    match entity_of(item)? {
        EntityKey::Aggregate { device, bucket } => Some((device, bucket)),
        _ => None,
    }
}

/// The devices with readings in the hour `hour`, from its activity partitions of GSI2
/// (`ACTIVE#<hour>#<n>`, keys only): each device's hourly rollup item is there from the
/// rollups role's first write of it. An index read is eventually consistent; the entries of
/// an hour are written while it is open, or, for readings the rollups role reaches after the
/// close, before the mark that has the hour exported again (which the schedule takes only
/// once it has settled, [`crate::schedule::Schedule::settle`]).
pub async fn list_active<Q: QueryStore + Sync>(
    q: &Q,
    hour: Bucket,
    slice: Slice,
) -> Result<BTreeSet<DeviceId>, ExportError> {
    let mut out = BTreeSet::new();
    for partition in slice.partitions() {
        let spec = QuerySpec::gsi2(keys::active_gsi2pk_of(hour, partition), SkRange::All, true);
        query_all(q, &spec, ACTIVE_PAGE, |item| {
            if let Some((device, b)) = active_of(&item)
                && b == hour
            {
                out.insert(device);
            }
        })
        .await?;
    }
    Ok(out)
}

/// The activity partitions of the hour holding an entry: a query of one item for each
/// (about 128 read units an hour, whatever the fleet), [`PARTITION_QUERIES`] at a time.
pub async fn list_active_partitions<Q: QueryStore + Sync>(
    q: &Q,
    hour: Bucket,
) -> Result<BTreeSet<u16>, ExportError> {
    use futures::{StreamExt, TryStreamExt};
    let found: Vec<Option<u16>> = futures::stream::iter(0..keys::ACTIVE_PARTITIONS)
        .map(|partition| async move {
            let spec = QuerySpec::gsi2(keys::active_gsi2pk_of(hour, partition), SkRange::All, true);
            let page = q.query(&spec, None, 1).await?;
            Ok::<_, ExportError>((!page.items.is_empty()).then_some(partition))
        })
        .buffer_unordered(PARTITION_QUERIES)
        .try_collect()
        .await?;
    Ok(found.into_iter().flatten().collect())
}

/// Queries of the activity partitions in flight at once: 256 one after another would take
/// a second and more of a run for every hour it starts.
const PARTITION_QUERIES: usize = 32;

/// [`ExportTable::readings`] of `device` under its layout `history`: the one reader of stored
/// readings, strongly consistent, whole readings in time order.
pub async fn walk_readings<Q: QueryStore + Sync>(
    q: &Q,
    device: &DeviceId,
    history: &LayoutHistory,
    from: Timestamp,
    to: Timestamp,
    mut visit: impl FnMut(Reading) + Send,
) -> Result<u64, ExportError> {
    let Some(last) = to.pred() else {
        return Ok(0);
    };
    let walked =
        walk_whole_readings_while(q, device, history, from, last, false, None, true, |r| {
            visit(r);
            true
        })
        .await?;
    Ok(walked.unreadable)
}

/// [`ExportTable::group_hours`]: one consistent query of the group's partition.
pub async fn read_group_hours<Q: QueryStore + Sync>(
    q: &Q,
    tag: &Tag,
    metric: &MetricName,
    day: Bucket,
) -> Result<Vec<GroupBucketItem>, ExportError> {
    let (first, last) = crate::groups::hours_of_day(day);
    let mut spec = QuerySpec::table(
        keys::group_pk(tag),
        SkRange::Between(
            keys::group_bucket_sk(metric, first),
            keys::group_bucket_sk(metric, last),
        ),
        true,
    );
    spec.consistent = true;
    let mut out = Vec::new();
    let mut bad = None;
    query_all(q, &spec, 100, |item| {
        match tidemark_store::from_item::<GroupBucketItem>(item) {
            Ok(g) => out.push(g),
            Err(e) => {
                bad.get_or_insert(e);
            }
        }
    })
    .await?;
    if let Some(e) = bad {
        return Err(ExportError::Store(e));
    }
    Ok(out)
}

/// [`State::dirty`]: the `EXPORT` partition's marks, read consistent (an unreadable one is
/// skipped and logged).
pub async fn read_dirty<Q: QueryStore + Sync>(q: &Q) -> Result<Vec<ExportDirtyItem>, ExportError> {
    read_state(q, keys::EXPORT_DIRTY_PREFIX, "export mark").await
}

/// The hours being exported in slices ([`State::jobs`]), read consistent, oldest first.
pub async fn read_jobs<Q: QueryStore + Sync>(q: &Q) -> Result<Vec<ExportJobItem>, ExportError> {
    read_state(q, keys::EXPORT_JOB_PREFIX, "export job").await
}

/// The `EXPORT` items whose sort key starts with `prefix`, read consistent; one that does not
/// parse as `T` is logged and skipped.
async fn read_state<Q: QueryStore + Sync, T: serde::de::DeserializeOwned>(
    q: &Q,
    prefix: &str,
    what: &str,
) -> Result<Vec<T>, ExportError> {
    let spec = QuerySpec {
        consistent: true,
        ..QuerySpec::table(
            keys::EXPORT_PK.to_owned(),
            SkRange::BeginsWith(prefix.to_owned()),
            true,
        )
    };
    let mut items = Vec::new();
    query_all(q, &spec, 1000, |i| items.push(i)).await?;
    let mut out = Vec::new();
    for i in items {
        match tidemark_store::from_item::<T>(i) {
            Ok(d) => out.push(d),
            Err(e) => tracing::warn!(error = %e, "unreadable {what} skipped"),
        }
    }
    Ok(out)
}
