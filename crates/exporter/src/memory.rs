//! The exporter's store traits ([`ExportTable`], [`State`]) over the one in-memory test
//! engine ([`MemTable`]), for the schedule's unit tests and benchmarks of the export's own
//! time: devices, readings (single or packed), layout and tag histories, group buckets and
//! the schedule's `EXPORT` items are stored as on DynamoDB and read back by the same reads
//! the DynamoDB implementation makes (`store.rs`: GSI1's status listing, the one reader of
//! stored readings; the layout book and the tag histories parsed by their store modules);
//! the schedule's writes check what its conditional writes check (the cursor only moves
//! forward, a mark is cleared only if not renewed since it was read).

use std::collections::{BTreeSet, HashMap};

use tidemark_schema::{
    Bucket, DeviceId, EntityKey, ExportCursorItem, ExportDirtyItem, ExportJobItem, GroupBucketItem,
    Key, MetricName, Reading, Tag, TagHistory, TagKey, Timestamp, field,
};
use tidemark_store::layouts::LayoutBook;
use tidemark_store::memory::MemTable;
use tidemark_store::{StoreError, from_stored};

use crate::ExportError;
use crate::slicing::Slice;
use crate::store::{
    ExportTable, State, list_active, list_active_partitions, list_devices, read_dirty,
    read_group_hours, read_jobs, walk_readings,
};

/// The table in memory, and the settings the DynamoDB implementation is built with.
#[derive(Debug)]
pub struct MemoryStore {
    table: MemTable,
    /// `STATUS_PARTITIONS`: the partitions the status listing is spread over.
    pub status_partitions: u16,
    /// `GROUP_TAGS`.
    pub group_tags: Vec<TagKey>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore {
            table: MemTable::new(),
            status_partitions: 1,
            group_tags: tidemark_store::settings::default_group_tags(),
        }
    }
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// The same, keeping rollups for the groups of `keys` (`GROUP_TAGS`).
    pub fn with_group_tags(mut self, keys: Vec<TagKey>) -> Self {
        self.group_tags = keys;
        self
    }

    /// The engine, for storing what a test starts from (packed slots, raw items).
    pub fn table(&self) -> &MemTable {
        &self.table
    }

    /// Stores an entity (a device, a reading, a mark, a history) as DynamoDB would.
    pub fn put_entity<T: serde::Serialize>(&self, v: &T) -> Result<(), StoreError> {
        self.table.put_entity(v)
    }

    /// The entity stored under `key`, if any.
    pub fn entity<T: serde::de::DeserializeOwned>(
        &self,
        key: &Key,
    ) -> Result<Option<T>, StoreError> {
        self.table.get(key).map(from_stored).transpose()
    }
}

impl ExportTable for MemoryStore {
    async fn active_devices(
        &self,
        hour: Bucket,
        slice: Slice,
    ) -> Result<BTreeSet<DeviceId>, ExportError> {
        list_active(&self.table, hour, slice).await
    }

    async fn active_partitions(&self, hour: Bucket) -> Result<BTreeSet<u16>, ExportError> {
        list_active_partitions(&self.table, hour).await
    }

    async fn tag_changes(&self) -> Result<u64, ExportError> {
        Ok(tidemark_store::tags::tag_changes(&self.table).await?)
    }

    async fn registered_devices(&self) -> Result<BTreeSet<DeviceId>, ExportError> {
        list_devices(&self.table, self.status_partitions).await
    }

    async fn readings(
        &self,
        device: &DeviceId,
        from: Timestamp,
        to: Timestamp,
        visit: impl FnMut(Reading) + Send,
    ) -> Result<u64, ExportError> {
        let stored = self
            .table
            .batch_get(&LayoutBook::keys(std::slice::from_ref(device)));
        let (book, _) = LayoutBook::from_raw(stored);
        walk_readings(&self.table, device, book.of(device), from, to, visit).await
    }

    fn group_tags(&self) -> &[TagKey] {
        &self.group_tags
    }

    async fn tag_histories(
        &self,
        devices: &[DeviceId],
    ) -> Result<HashMap<DeviceId, TagHistory>, ExportError> {
        let keys: Vec<Key> = devices
            .iter()
            .map(tidemark_store::tags::history_key)
            .collect();
        let (found, _unreadable) =
            tidemark_store::tags::histories_from_items(self.table.batch_get(&keys));
        Ok(found.into_iter().map(|(d, (h, _))| (d, h)).collect())
    }

    async fn put_group_buckets(&self, items: &[GroupBucketItem]) -> Result<(), ExportError> {
        for item in items {
            self.table.put_entity(item)?;
        }
        Ok(())
    }

    async fn delete_group_buckets(&self, keys: &[Key]) -> Result<(), ExportError> {
        let mut items = self.table.lock();
        for k in keys {
            MemTable::remove(&mut items, &(k.pk.clone(), k.sk.clone()));
        }
        Ok(())
    }

    async fn group_hours(
        &self,
        tag: &Tag,
        metric: &MetricName,
        day: Bucket,
    ) -> Result<Vec<GroupBucketItem>, ExportError> {
        read_group_hours(&self.table, tag, metric, day).await
    }
}

impl State for MemoryStore {
    async fn cursor(&self) -> Result<Option<Timestamp>, ExportError> {
        let cursor: Option<ExportCursorItem> = self.entity(&EntityKey::ExportCursor.key())?;
        Ok(cursor.map(|c| c.hour))
    }

    async fn advance(&self, hour: Timestamp) -> Result<(), ExportError> {
        let k = EntityKey::ExportCursor.key();
        let mut items = self.table.lock();
        let stored = items
            .get(&(k.pk, k.sk))
            .cloned()
            .map(from_stored::<ExportCursorItem>)
            .transpose()?;
        // `attribute_not_exists(pk) OR hour < :hour`; else another run got there first.
        if stored.is_none_or(|c| c.hour < hour) {
            MemTable::insert(
                &mut items,
                tidemark_store::to_item(&ExportCursorItem::new(hour))?,
            )?;
        }
        Ok(())
    }

    async fn dirty(&self) -> Result<Vec<ExportDirtyItem>, ExportError> {
        read_dirty(&self.table).await
    }

    async fn clear(&self, hour: Timestamp, marks: u64) -> Result<bool, ExportError> {
        let k = EntityKey::ExportDirty(hour).key();
        let k = (k.pk, k.sk);
        let mut items = self.table.lock();
        // `marks = :marks`: a mark renewed since it was read (or gone) stays as it is.
        let same = items
            .get(&k)
            .and_then(|i| i.get(field::MARKS))
            .and_then(|v| v.as_n().ok())
            .is_some_and(|n| *n == marks.to_string());
        if same {
            MemTable::remove(&mut items, &k);
        }
        Ok(same)
    }

    async fn job(&self, hour: Timestamp) -> Result<Option<ExportJobItem>, ExportError> {
        Ok(self.entity(&EntityKey::ExportJob(hour).key())?)
    }

    async fn jobs(&self) -> Result<Vec<ExportJobItem>, ExportError> {
        read_jobs(&self.table).await
    }

    async fn start(&self, job: &ExportJobItem) -> Result<bool, ExportError> {
        let mut items = self.table.lock();
        // `attribute_not_exists(pk)`
        if items.contains_key(&(job.pk.clone(), job.sk.clone())) {
            return Ok(false);
        }
        MemTable::insert(&mut items, tidemark_store::to_item(job)?)?;
        Ok(true)
    }

    async fn resent(&self, job: &ExportJobItem) -> Result<(), ExportError> {
        let mut items = self.table.lock();
        if same_generation(&items, job) {
            MemTable::insert(&mut items, tidemark_store::to_item(job)?)?;
        }
        Ok(())
    }

    async fn finish(&self, job: &ExportJobItem) -> Result<(), ExportError> {
        let mut items = self.table.lock();
        if same_generation(&items, job) {
            MemTable::remove(&mut items, &(job.pk.clone(), job.sk.clone()));
        }
        Ok(())
    }
}

/// `#generation = :generation` on `job`'s key.
fn same_generation(
    items: &std::collections::BTreeMap<(String, String), tidemark_store::Item>,
    job: &ExportJobItem,
) -> bool {
    items
        .get(&(job.pk.clone(), job.sk.clone()))
        .and_then(|i| i.get(field::GENERATION))
        .and_then(|v| v.as_n().ok())
        .is_some_and(|n| *n == job.generation.to_string())
}
