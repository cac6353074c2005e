//! The exporter's store traits, what its logic runs over: what an export reads from the table
//! and the group rollups it writes there ([`ExportTable`]), and where the schedule stands
//! ([`State`]). On DynamoDB in `dynamo.rs`.

use std::collections::{BTreeSet, HashMap};

use tidemark_schema::{
    Bucket, DeviceId, ExportDirtyItem, GroupBucketItem, Key, MetricName, Reading, Tag, TagHistory,
    TagKey, Timestamp,
};

use crate::ExportError;

/// What an export (an hour, a day, the groups' buckets) reads from the table and writes there.
pub trait ExportTable {
    /// Every registered device (each status, each status partition).
    fn devices(&self) -> impl Future<Output = Result<BTreeSet<DeviceId>, ExportError>> + Send;
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
    /// Removes the mark if no marking came after `d` was read; whether it did.
    fn clear(&self, d: &ExportDirtyItem) -> impl Future<Output = Result<bool, ExportError>> + Send;
}
