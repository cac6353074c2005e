//! Ingest's store traits ([`crate::store`], and the writes of [`BatchWriteApi`] and
//! [`SlotStore`]) in memory, so the handler runs without a table: in this crate's unit and
//! integration tests, and in benchmarks of the handler's own time. Items are kept in the one
//! in-memory test engine every function's test store uses, [`MemTable`], which refuses what
//! DynamoDB refuses (400 KB items, 25 items a batch); layout histories and packed slots are
//! kept beside it as the real writers place them. Every operation is counted, and failures
//! (an outage, a refused item, a panic) can be injected.
//!
//! Test support: a call DynamoDB would refuse as a caller's mistake (more than 25 items, or
//! two of one key, in one `BatchWriteItem`) panics, so the test that made it fails.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::packed::{self, SlotReadings};
use tidemark_schema::{Clock, DeviceId, EntityKey, LayoutHistory, LayoutHistoryItem, Timestamp};
use tidemark_store::limits::{MAX_ITEM_BYTES, item_size, item_too_large};
use tidemark_store::memory::MemTable;
use tidemark_store::retry::RetryPolicy;
use tidemark_store::write::batch::{BatchCallError, BatchWriteApi, Merged};
use tidemark_store::write::map_merge::{merge_is_noop, merge_items};
use tidemark_store::write::slots::{Content, SlotKey, SlotStore, SlotWrite, Stamp};
use tidemark_store::{Item, StoreError};

use crate::config::IngestConfig;
use crate::handler::Ingest;
use crate::store::{DeviceDirectory, LayoutHistorySource};

/// A string or number attribute as text (`""` when absent).
fn text(item: &Item, name: &str) -> String {
    match item.get(name) {
        Some(AttributeValue::S(v)) | Some(AttributeValue::N(v)) => v.clone(),
        _ => String::new(),
    }
}

/// A lock's guard even after a panic while it was held: an injected panic (`panic_pk`) must
/// not turn every later call into another one.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An item's table key.
fn key_of(item: &Item) -> (String, String) {
    (text(item, "pk"), text(item, "sk"))
}

/// Ingest's store traits over the one in-memory test engine ([`MemTable`], which refuses
/// what DynamoDB refuses), counting every operation.
#[derive(Default)]
pub struct MemoryStore {
    /// The table: readings, quarantine items, heartbeats, failure counts.
    pub items: MemTable,
    /// The `CONFIG` partition's layout histories ([`LayoutHistorySource`]).
    pub layout_histories: Mutex<Vec<LayoutHistoryItem>>,
    /// Packed slots by (partition, slot start): the placement and merge rules of the real
    /// slot writer, one part a slot.
    pub slots: Mutex<HashMap<(String, Timestamp), SlotReadings>>,
    /// Slot writes that changed a slot.
    pub slot_writes: AtomicUsize,
    /// The registered devices ([`DeviceDirectory::existing_devices`]).
    pub devices: Mutex<HashSet<DeviceId>>,
    /// Layout loads fail like an outage when set.
    pub fail_layout_loads: AtomicBool,
    /// Layout loads asked for.
    pub layout_loads: AtomicUsize,
    /// Device-existence calls made, and the devices they asked about.
    pub device_lookups: AtomicUsize,
    pub devices_asked: AtomicUsize,
    /// Batch writes and single-item merges made.
    pub write_calls: AtomicUsize,
    /// Writes fail with a permanent error when set.
    pub refuse_writes: AtomicBool,
    /// Writes of items under this partition key fail with a permanent error (DynamoDB
    /// refusing one item for good); other items are written.
    pub refuse_pk: Mutex<Option<String>>,
    /// Writing an item under this partition key panics (a bug of ours).
    pub panic_pk: Mutex<Option<String>>,
}

impl MemoryStore {
    /// Refuses or panics, as set, on an item of the marked partitions.
    fn check(&self, item: &Item, operation: &'static str) -> Result<(), BatchCallError> {
        let pk = text(item, "pk");
        if lock(&self.panic_pk).as_deref() == Some(pk.as_str()) {
            panic!("injected bug: writing {pk}");
        }
        if lock(&self.refuse_pk).as_deref() == Some(pk.as_str()) {
            return Err(BatchCallError::request(
                false,
                operation,
                "ValidationException: One or more parameter values were invalid (injected)",
            ));
        }
        Ok(())
    }
}

impl MemoryStore {
    /// How many items the table holds.
    pub fn len(&self) -> usize {
        self.items.lock().len()
    }

    /// Whether the table holds no item.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl BatchWriteApi for &MemoryStore {
    async fn put_batch(&self, _: &str, items: Vec<Item>) -> Result<Vec<Item>, BatchCallError> {
        self.write_calls.fetch_add(1, Ordering::SeqCst);
        assert!(items.len() <= 25, "BatchWriteItem takes at most 25 items");
        let keys: HashSet<_> = items.iter().map(key_of).collect();
        assert_eq!(
            keys.len(),
            items.len(),
            "DynamoDB refuses duplicate keys in one call"
        );
        if self.refuse_writes.load(Ordering::SeqCst) {
            return Err(BatchCallError::request(
                false,
                "BatchWriteItem",
                "ValidationException (injected)",
            ));
        }
        for i in &items {
            self.check(i, "BatchWriteItem")?;
        }
        // DynamoDB validates the whole call before writing any of it.
        if let Some(bytes) = items.iter().map(item_size).find(|b| *b > MAX_ITEM_BYTES) {
            return Err(BatchCallError::request(
                false,
                "BatchWriteItem",
                item_too_large(bytes).to_string(),
            ));
        }
        for i in items {
            self.items
                .put(i)
                .map_err(|e| BatchCallError::request(false, "BatchWriteItem", e.to_string()))?;
        }
        Ok(Vec::new())
    }

    async fn merge_item(
        &self,
        _: &str,
        item: Item,
        map_attr: &'static str,
    ) -> Result<Merged, BatchCallError> {
        self.write_calls.fetch_add(1, Ordering::SeqCst);
        if self.refuse_writes.load(Ordering::SeqCst) {
            return Err(BatchCallError::request(
                false,
                "UpdateItem",
                "ValidationException (injected)",
            ));
        }
        self.check(&item, "UpdateItem")?;
        let mut t = self.items.lock();
        let k = key_of(&item);
        Ok(match t.get(&k) {
            Some(old) if merge_is_noop(old, &item, map_attr) => Merged::Unchanged,
            Some(old) => {
                let merged = merge_items(old, &item, map_attr);
                let bytes = item_size(&merged);
                if bytes > MAX_ITEM_BYTES {
                    return Err(BatchCallError::request(
                        false,
                        "UpdateItem",
                        item_too_large(bytes).to_string(),
                    ));
                }
                t.insert(k, merged);
                Merged::Merged
            }
            None => {
                t.insert(k, item);
                Merged::Inserted
            }
        })
    }

    async fn count_failure(
        &self,
        _: &str,
        record: &tidemark_schema::keys::FailedRecord,
        error: &str,
        ttl: i64,
    ) -> Result<u32, BatchCallError> {
        Ok(tidemark_store::failures::count_in_memory(
            &self.items,
            record,
            error,
            ttl,
        ))
    }
}

impl LayoutHistorySource for &MemoryStore {
    async fn load_layout_histories(
        &self,
    ) -> Result<Vec<Result<LayoutHistoryItem, StoreError>>, StoreError> {
        self.layout_loads.fetch_add(1, Ordering::SeqCst);
        if self.fail_layout_loads.load(Ordering::SeqCst) {
            return Err(StoreError::Request {
                operation: "Query",
                message: "injected outage".into(),
            });
        }
        Ok(lock(&self.layout_histories)
            .iter()
            .cloned()
            .map(Ok)
            .collect())
    }

    async fn replace_default_layout(
        &self,
        history: &LayoutHistory,
        version: u64,
    ) -> Result<bool, StoreError> {
        let mut configs = lock(&self.layout_histories);
        let key = EntityKey::DefaultLayout.key();
        let stored = configs.iter().position(|c| c.sk == key.sk);
        if stored.map_or(0, |i| configs[i].version) != version {
            return Ok(false);
        }
        let mut item = LayoutHistoryItem::default_layout(history.clone());
        item.version = version + 1;
        match stored {
            Some(i) => configs[i] = item,
            None => configs.push(item),
        }
        Ok(true)
    }
}

impl SlotStore for &MemoryStore {
    async fn write_slot(
        &self,
        _: &str,
        _: RetryPolicy,
        key: &SlotKey,
        incoming: &Content,
        _: Stamp,
        _: tokio::time::Instant,
    ) -> Result<SlotWrite, StoreError> {
        if self.refuse_writes.load(Ordering::SeqCst) {
            return Err(StoreError::Request {
                operation: "PutItem",
                message: "ValidationException (injected)".into(),
            });
        }
        if lock(&self.refuse_pk).as_deref() == Some(key.pk.as_str()) {
            return Err(StoreError::Request {
                operation: "PutItem",
                message: "ValidationException: a slot part DynamoDB refuses (injected)".into(),
            });
        }
        // As the slot writer places values (docs/design.md §4): a value stays in every slot
        // holding it (its own, or the one before, which carries it); a new one goes to the
        // next slot if the write reaches into it and it holds something, else to this slot.
        let mut slots = lock(&self.slots);
        let next = key.len.next(key.start);
        let next_has_parts = slots
            .get(&(key.pk.clone(), next))
            .is_some_and(|r| !r.is_empty());
        let mut by_slot: BTreeMap<Timestamp, SlotReadings> = BTreeMap::new();
        for (at, metrics) in &incoming.readings {
            let own = key.len.start_of(*at);
            for (name, v) in metrics {
                let holders: Vec<Timestamp> = [key.len.first_holder(*at), own]
                    .into_iter()
                    .filter(|s| {
                        slots
                            .get(&(key.pk.clone(), *s))
                            .and_then(|r| r.get(at))
                            .is_some_and(|m| m.contains_key(name))
                    })
                    .collect();
                let into = if !holders.is_empty() {
                    holders
                } else if own == next && next_has_parts {
                    vec![next]
                } else {
                    vec![key.start]
                };
                for slot in into {
                    let row = by_slot.entry(slot).or_default().entry(*at).or_default();
                    row.insert(name.clone(), *v);
                }
            }
        }
        let mut written = false;
        for (slot, readings) in by_slot {
            let stored = slots.entry((key.pk.clone(), slot)).or_default();
            if let Some(m) = packed::merge(stored, &readings) {
                written = true;
                *stored = m;
            }
        }
        if written {
            self.slot_writes.fetch_add(1, Ordering::SeqCst);
        }
        Ok(SlotWrite {
            written,
            conflicts: 0,
            readings: slots
                .get(&(key.pk.clone(), key.start))
                .map_or(0, |r| r.len()),
            parts: 1,
            unreadable_parts: 0,
        })
    }
}

impl DeviceDirectory for &MemoryStore {
    async fn existing_devices(&self, ids: &[DeviceId]) -> Result<HashSet<DeviceId>, StoreError> {
        self.device_lookups.fetch_add(1, Ordering::SeqCst);
        self.devices_asked.fetch_add(ids.len(), Ordering::SeqCst);
        let d = lock(&self.devices);
        Ok(ids.iter().filter(|i| d.contains(i)).cloned().collect())
    }
}

/// The handler with every store operation on one [`MemoryStore`].
pub type MemoryIngest<'a> = Ingest<&'a MemoryStore, &'a MemoryStore, &'a MemoryStore>;

/// The handler over `store` alone, on `clock`.
pub fn memory_ingest(store: &MemoryStore, config: IngestConfig, clock: Clock) -> MemoryIngest<'_> {
    Ingest::from_parts(config, store, store, store, clock)
}
