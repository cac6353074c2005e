//! One aggregator store shared by both roles and ingest: the template runs them as three
//! functions over one table, so the test's two [`Aggregator`]s hold a reference to one
//! [`MemoryStore`] (whose table ingest writes).
//!
//! [`Aggregator`]: tidemark_aggregator::Aggregator

use std::collections::HashMap;

use tidemark_aggregator::alerting::plan::AlertWrite;
use tidemark_aggregator::combine::{BucketReadings, BucketSummary};
use tidemark_aggregator::memory::MemoryStore;
use tidemark_aggregator::store::{
    AggregateStore, AlertStore, DeviceStore, DeviceUpdate, HeartbeatStore, ReadingStore,
    SetAsideStore, Written,
};
use tidemark_schema::keys::FailedRecord;
use tidemark_schema::{
    AggregateItem, AlertId, AlertItem, Bucket, DeviceId, DeviceItem, Key, LatestReading,
    RepairItem, Timestamp,
};
use tidemark_store::StoreError;

#[derive(Clone, Copy)]
pub struct Shared<'a>(pub &'a MemoryStore);

impl AggregateStore for Shared<'_> {
    fn get_aggregates(
        &self,
        keys: &[Key],
    ) -> impl Future<Output = Result<HashMap<Key, AggregateItem>, StoreError>> + Send {
        self.0.get_aggregates(keys)
    }
    fn aggregate_pages(
        &self,
        device: &DeviceId,
        bucket: Bucket,
    ) -> impl Future<Output = Result<Vec<AggregateItem>, StoreError>> + Send {
        self.0.aggregate_pages(device, bucket)
    }
    fn hours_before(
        &self,
        device: &DeviceId,
        before: Bucket,
        n: usize,
    ) -> impl Future<Output = Result<Vec<AggregateItem>, StoreError>> + Send {
        self.0.hours_before(device, before, n)
    }
    fn mark_export_dirty(
        &self,
        hours: &[Timestamp],
        now: Timestamp,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.0.mark_export_dirty(hours, now)
    }
    fn put_aggregate(
        &self,
        item: &AggregateItem,
        expected: Option<u64>,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send {
        self.0.put_aggregate(item, expected)
    }
}

impl DeviceStore for Shared<'_> {
    fn get_devices(
        &self,
        ids: &[DeviceId],
    ) -> impl Future<Output = Result<HashMap<DeviceId, DeviceItem>, StoreError>> + Send {
        self.0.get_devices(ids)
    }
    fn keeps_sketches(
        &self,
        device: &DeviceId,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.0.keeps_sketches(device)
    }
    fn commit_device(
        &self,
        u: &DeviceUpdate,
        alerts: &[AlertWrite],
    ) -> impl Future<Output = Result<Written, StoreError>> + Send {
        self.0.commit_device(u, alerts)
    }
}

impl AlertStore for Shared<'_> {
    fn put_alerts(
        &self,
        device: &DeviceId,
        alerts: &[AlertWrite],
    ) -> impl Future<Output = Result<Written, StoreError>> + Send {
        self.0.put_alerts(device, alerts)
    }
    fn get_alerts(
        &self,
        device: &DeviceId,
        ids: &[AlertId],
    ) -> impl Future<Output = Result<HashMap<AlertId, AlertItem>, StoreError>> + Send {
        self.0.get_alerts(device, ids)
    }
    fn alerts_since(
        &self,
        device: &DeviceId,
        from: Timestamp,
    ) -> impl Future<Output = Result<HashMap<AlertId, AlertItem>, StoreError>> + Send {
        self.0.alerts_since(device, from)
    }
}

impl ReadingStore for Shared<'_> {
    fn readings_between(
        &self,
        device: &DeviceId,
        from: Timestamp,
        to: Timestamp,
    ) -> impl Future<Output = Result<BucketReadings, StoreError>> + Send {
        self.0.readings_between(device, from, to)
    }
    fn readings_page(
        &self,
        device: &DeviceId,
        from: Timestamp,
        to: Timestamp,
        newest_first: bool,
        limit: usize,
    ) -> impl Future<Output = Result<BucketReadings, StoreError>> + Send {
        self.0.readings_page(device, from, to, newest_first, limit)
    }
    fn summarize(
        &self,
        device: &DeviceId,
        from: Timestamp,
        to: Timestamp,
        sketched: bool,
    ) -> impl Future<Output = Result<BucketSummary, StoreError>> + Send {
        self.0.summarize(device, from, to, sketched)
    }
    fn newest_reading(
        &self,
        device: &DeviceId,
        since: Timestamp,
    ) -> impl Future<Output = Result<Option<LatestReading>, StoreError>> + Send {
        self.0.newest_reading(device, since)
    }
}

impl HeartbeatStore for Shared<'_> {
    fn pass_heartbeat(
        &self,
        shard: &tidemark_schema::keys::ShardName,
        sent_at: Timestamp,
        role: tidemark_aggregator::Role,
    ) -> impl Future<Output = Result<f64, StoreError>> + Send {
        self.0.pass_heartbeat(shard, sent_at, role)
    }
}

impl SetAsideStore for Shared<'_> {
    fn count_failure(
        &self,
        record: &FailedRecord,
        error: &str,
        ttl: i64,
    ) -> impl Future<Output = Result<u32, StoreError>> + Send {
        self.0.count_failure(record, error, ttl)
    }
    fn put_repair(&self, item: &RepairItem) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.0.put_repair(item)
    }
    fn open_repairs(
        &self,
        role: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<RepairItem>, StoreError>> + Send {
        self.0.open_repairs(role, limit)
    }
    fn delete_repair(&self, key: &Key) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.0.delete_repair(key)
    }
}

impl tidemark_aggregator::store::GroupStore for Shared<'_> {
    fn tag_histories(
        &self,
        devices: &[(DeviceId, tidemark_schema::Timestamp)],
        now: tidemark_schema::Timestamp,
    ) -> impl Future<Output = Result<HashMap<DeviceId, tidemark_schema::TagHistory>, StoreError>> + Send
    {
        self.0.tag_histories(devices, now)
    }
    fn group_manifest(
        &self,
        batch: &str,
    ) -> impl Future<Output = Result<Option<tidemark_schema::GroupBatchItem>, StoreError>> + Send
    {
        self.0.group_manifest(batch)
    }
    fn put_group_manifest(
        &self,
        item: &tidemark_schema::GroupBatchItem,
    ) -> impl Future<Output = Result<f64, StoreError>> + Send {
        self.0.put_group_manifest(item)
    }
    fn put_group_partials(
        &self,
        items: &[tidemark_schema::GroupPartialItem],
    ) -> impl Future<Output = Result<f64, StoreError>> + Send {
        self.0.put_group_partials(items)
    }
    fn delete_group_items(
        &self,
        keys: &[Key],
    ) -> impl Future<Output = Result<f64, StoreError>> + Send {
        self.0.delete_group_items(keys)
    }
}
