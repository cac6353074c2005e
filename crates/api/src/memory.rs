//! An in-memory store with DynamoDB's query semantics (key condition, order, `Limit`,
//! `ExclusiveStartKey`, filter after limit, GSI1 with sparse keys), for handler unit tests and
//! for benchmarking the handler's own time. It can also cut pages short, like DynamoDB's
//! 1 MB limit does, to exercise resumption.

use std::collections::BTreeMap;
use std::sync::Mutex;

use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::table::attr;
use tidemark_schema::{
    AlertId, DeviceId, EntityKey, Key, LayoutHistory, ShardConfigItem, Timestamp, field,
};
use tidemark_store::{Item, StoreError};

use crate::store::{
    AlertOutcome, AlertWriter, DeviceRegistration, DeviceWriter, GetStore, Page, PutDevice,
    QuerySpec, QueryStore, ShardWriter, Update, ack_update, alert_state, device_update,
    snooze_update, unsnooze_update,
};

#[derive(Debug, Default)]
pub struct MemoryStore {
    items: Mutex<BTreeMap<(String, String), Item>>,
    /// When set, no query page holds more than this many evaluated items.
    page_cap: Option<usize>,
}

fn text(item: &Item, a: &str) -> Option<String> {
    item.get(a).and_then(|v| v.as_s().ok()).cloned()
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Pages end after `cap` evaluated items even below the limit (like the 1 MB cap).
    pub fn with_page_cap(mut self, cap: usize) -> Self {
        self.page_cap = Some(cap.max(1));
        self
    }

    pub fn put(&self, item: Item) {
        let k = (
            text(&item, attr::PK).unwrap_or_default(),
            text(&item, attr::SK).unwrap_or_default(),
        );
        self.lock().insert(k, item);
    }

    pub fn put_entity<T: serde::Serialize>(&self, v: &T) -> Result<(), StoreError> {
        self.put(tidemark_store::to_item(v)?);
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), Item>> {
        self.items.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl QueryStore for MemoryStore {
    async fn query(
        &self,
        spec: &QuerySpec,
        start: Option<Item>,
        limit: i32,
    ) -> Result<Page, StoreError> {
        let pos_of = |it: &Item| -> Vec<String> {
            spec.position_attrs()
                .iter()
                .map(|a| text(it, a).unwrap_or_default())
                .collect()
        };
        let mut matching: Vec<Item> = self
            .lock()
            .values()
            .filter(|it| text(it, spec.partition_attr()).as_deref() == Some(&spec.partition))
            .filter(|it| text(it, spec.sort_attr()).is_some_and(|s| spec.in_range(&s)))
            .cloned()
            .collect();
        matching.sort_by_key(|it| pos_of(it));
        if !spec.forward {
            matching.reverse();
        }
        if let Some(start) = start {
            let sp = pos_of(&start);
            matching.retain(|it| {
                let p = pos_of(it);
                if spec.forward { p > sp } else { p < sp }
            });
        }
        let limit = usize::try_from(limit.max(1)).unwrap_or(1);
        let cap = self.page_cap.map_or(limit, |c| c.min(limit));
        let more = matching.len() > cap || (matching.len() == cap && cap == limit);
        matching.truncate(cap);
        // LastEvaluatedKey: the table key, plus the index key when querying the index.
        let index_key = [spec.partition_attr(), spec.sort_attr()];
        let key_attrs: &[&str] = if spec.index.is_some() {
            &[attr::PK, attr::SK, index_key[0], index_key[1]]
        } else {
            &[attr::PK, attr::SK]
        };
        let last_key = matching.last().filter(|_| more).map(|it| {
            key_attrs
                .iter()
                .filter_map(|a| it.get(*a).map(|v| (a.to_string(), v.clone())))
                .collect::<Item>()
        });
        if let Some((a, v)) = &spec.filter_eq {
            matching.retain(|it| text(it, a).as_deref() == Some(v.as_str()));
        }
        Ok(Page {
            items: matching,
            last_key,
        })
    }
}

impl GetStore for MemoryStore {
    async fn get(&self, key: Key, _consistent: bool) -> Result<Option<Item>, StoreError> {
        Ok(self.lock().get(&(key.pk, key.sk)).cloned())
    }

    async fn batch_get(&self, keys: Vec<Key>) -> Result<Vec<Item>, StoreError> {
        let items = self.lock();
        Ok(keys
            .into_iter()
            .filter_map(|k| items.get(&(k.pk, k.sk)).cloned())
            .collect())
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
        device: &DeviceId,
        alert: &AlertId,
        update: Update,
        any_state: bool,
    ) -> AlertOutcome {
        let k = EntityKey::Alert {
            device: device.clone(),
            alert: alert.clone(),
        }
        .key();
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
        device: &DeviceId,
        alert: &AlertId,
        now: Timestamp,
    ) -> Result<AlertOutcome, StoreError> {
        Ok(self.update_alert(device, alert, ack_update(now), false))
    }

    async fn snooze(
        &self,
        device: &DeviceId,
        alert: &AlertId,
        until: Timestamp,
    ) -> Result<AlertOutcome, StoreError> {
        Ok(self.update_alert(device, alert, snooze_update(until), false))
    }

    async fn unsnooze(
        &self,
        device: &DeviceId,
        alert: &AlertId,
    ) -> Result<AlertOutcome, StoreError> {
        Ok(self.update_alert(device, alert, unsnooze_update(), true))
    }
}

impl ShardWriter for MemoryStore {
    async fn replace_shards(
        &self,
        device: &DeviceId,
        history: &LayoutHistory,
        version: u64,
    ) -> Result<bool, StoreError> {
        let k = EntityKey::ShardConfig(device.clone()).key();
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
        let item = tidemark_store::to_item(&ShardConfigItem {
            version: version + 1,
            ..ShardConfigItem::new(device, history.clone())
        })?;
        items.insert((k.pk, k.sk), item);
        Ok(true)
    }
}
