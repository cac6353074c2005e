//! The API's store traits over the one in-memory test engine ([`MemTable`]), for handler
//! unit tests and for benchmarking the handler's own time: queries and reads are the
//! engine's, the writes below do what the DynamoDB store's conditional updates do.

use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::table::attr;
use tidemark_schema::{
    AlertId, DeviceId, EntityKey, Key, LayoutHistory, LayoutHistoryItem, TagHistory,
    TagHistoryItem, TagIndexItem, Timestamp, field,
};
use tidemark_store::memory::{Items, MemTable};
use tidemark_store::{Item, StoreError};

use crate::store::{
    AlertOutcome, AlertOwner, AlertWriter, CallCounter, DeviceRegistration, DeviceWriter, GetStore,
    LayoutWriter, Page, PutDevice, QuerySpec, QueryStore, TagWriter, Update, ack_update,
    alert_state, device_update, snooze_update, unsnooze_update,
};

#[derive(Debug, Default)]
pub struct MemoryStore {
    table: MemTable,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Pages end after `cap` evaluated items even below the limit (like the 1 MB cap).
    pub fn with_page_cap(self, cap: usize) -> Self {
        MemoryStore {
            table: self.table.with_page_cap(cap),
        }
    }

    /// Stores an item as DynamoDB would (refusing one over 400 KB).
    pub fn put(&self, item: Item) -> Result<(), StoreError> {
        self.table.put(item)
    }

    pub fn put_entity<T: serde::Serialize>(&self, v: &T) -> Result<(), StoreError> {
        self.table.put_entity(v)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Items> {
        self.table.lock()
    }
}

impl QueryStore for MemoryStore {
    async fn query(
        &self,
        spec: &QuerySpec,
        start: Option<Item>,
        limit: i32,
    ) -> Result<Page, StoreError> {
        self.table.query(spec, start, limit).await
    }
}

impl GetStore for MemoryStore {
    async fn get(&self, key: Key, _consistent: bool) -> Result<Option<Item>, StoreError> {
        Ok(self.table.get(&key))
    }

    async fn batch_get(&self, keys: Vec<Key>) -> Result<Vec<Item>, StoreError> {
        Ok(self.table.batch_get(&keys))
    }
}

impl DeviceWriter for MemoryStore {
    async fn put_device(
        &self,
        reg: &DeviceRegistration,
        now: Timestamp,
    ) -> Result<PutDevice, StoreError> {
        let u = device_update(reg, now)?;
        let key = EntityKey::Device(reg.device_id.clone()).key();
        let mut items = self.lock();
        let k = (key.pk.clone(), key.sk.clone());
        let created = !items.contains_key(&k);
        let item = items.entry(k).or_insert_with(|| {
            Item::from([
                (attr::PK.to_owned(), AttributeValue::S(key.pk)),
                (attr::SK.to_owned(), AttributeValue::S(key.sk)),
            ])
        });
        u.apply(item);
        Ok(PutDevice {
            device: tidemark_store::from_item(item.clone())?,
            created,
        })
    }
}

impl MemoryStore {
    /// Applies `update` to the alert as the DynamoDB store's condition allows: only to an
    /// unresolved alert, unless `any_state`.
    fn update_alert(
        &self,
        owner: &AlertOwner,
        alert: &AlertId,
        update: Update,
        any_state: bool,
    ) -> AlertOutcome {
        let k = owner.alert_key(alert);
        let mut items = self.lock();
        let Some(item) = items.get_mut(&(k.pk, k.sk)) else {
            return AlertOutcome::Missing;
        };
        if !any_state && alert_state(item) == Some(tidemark_schema::AlertState::Resolved) {
            return AlertOutcome::Resolved;
        }
        update.apply(item);
        AlertOutcome::Updated(item.clone())
    }
}

impl AlertWriter for MemoryStore {
    async fn acknowledge(
        &self,
        owner: &AlertOwner,
        alert: &AlertId,
        now: Timestamp,
    ) -> Result<AlertOutcome, StoreError> {
        Ok(self.update_alert(owner, alert, ack_update(now), false))
    }

    async fn snooze(
        &self,
        owner: &AlertOwner,
        alert: &AlertId,
        until: Timestamp,
    ) -> Result<AlertOutcome, StoreError> {
        Ok(self.update_alert(owner, alert, snooze_update(until), false))
    }

    async fn unsnooze(
        &self,
        owner: &AlertOwner,
        alert: &AlertId,
    ) -> Result<AlertOutcome, StoreError> {
        Ok(self.update_alert(owner, alert, unsnooze_update(), true))
    }
}

/// The `version` of the item at `k` (0: none), as the optimistic locks read it.
fn stored_version(items: &Items, k: &Key) -> u64 {
    items
        .get(&(k.pk.clone(), k.sk.clone()))
        .and_then(|it| it.get(field::VERSION))
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0)
}

impl TagWriter for MemoryStore {
    async fn replace_tags(
        &self,
        device: &DeviceId,
        history: &TagHistory,
        version: u64,
    ) -> Result<bool, StoreError> {
        let k = TagHistoryItem::key(device);
        let mut items = self.lock();
        if stored_version(&items, &k) != version {
            return Ok(false);
        }
        let item = tidemark_store::to_item(&TagHistoryItem {
            pk: k.pk,
            sk: k.sk,
            epochs: history.clone(),
            version: version + 1,
        })?;
        MemTable::insert(&mut items, item)?;
        // The change's count moves in the same transaction, as on DynamoDB.
        tidemark_store::write::tag_counts::add_in_memory(
            &mut items,
            &tidemark_schema::keys::tag_changes_of(device).key(),
            field::CHANGES,
            1,
        )?;
        Ok(true)
    }

    async fn write_tag_index(
        &self,
        puts: &[TagIndexItem],
        deletes: &[Key],
    ) -> Result<(), StoreError> {
        use tidemark_store::write::tag_counts::add_in_memory;
        let mut items = self.lock();
        for p in puts {
            if !items.contains_key(&(p.pk.clone(), p.sk.clone())) {
                let count = tidemark_store::write::tag_change::count_key(&p.pk, &p.sk)?;
                add_in_memory(&mut items, &count, field::MEMBERS, 1)?;
            }
            MemTable::insert(&mut items, tidemark_store::to_item(p)?)?;
        }
        for k in deletes {
            if MemTable::remove(&mut items, &(k.pk.clone(), k.sk.clone())).is_some() {
                let count = tidemark_store::write::tag_change::count_key(&k.pk, &k.sk)?;
                add_in_memory(&mut items, &count, field::MEMBERS, -1)?;
            }
        }
        Ok(())
    }
}

impl LayoutWriter for MemoryStore {
    async fn replace_layouts(
        &self,
        device: &DeviceId,
        history: &LayoutHistory,
        version: u64,
    ) -> Result<bool, StoreError> {
        let k = EntityKey::DeviceLayout(device.clone()).key();
        let mut items = self.lock();
        let stored = items
            .get(&(k.pk.clone(), k.sk.clone()))
            .and_then(|it| it.get(field::VERSION))
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        if stored != version {
            return Ok(false);
        }
        let item = tidemark_store::to_item(&LayoutHistoryItem {
            version: version + 1,
            ..LayoutHistoryItem::new(device, history.clone())
        })?;
        items.insert((k.pk, k.sk), item);
        Ok(true)
    }
}

impl CallCounter for MemoryStore {
    async fn count_call(
        &self,
        count: &tidemark_schema::CallerRateItem,
        limit: u32,
    ) -> Result<bool, StoreError> {
        let mut items = self.lock();
        let k = (count.pk.clone(), count.sk.clone());
        let counted = items
            .get(&k)
            .and_then(|it| it.get(field::REQUESTS))
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse::<u32>().ok());
        if counted.is_some_and(|n| n >= limit) {
            return Ok(false);
        }
        let item = tidemark_store::to_item(&tidemark_schema::CallerRateItem {
            requests: counted.unwrap_or(0) + 1,
            ..count.clone()
        })?;
        items.insert(k, item);
        Ok(true)
    }
}
