//! [`WatchStore`] over the one in-memory test engine ([`MemTable`]), for the run's unit tests
//! and benchmarks of its own time: heartbeat items, the watch partitions of GSI2, device
//! items and readings are stored as on DynamoDB and read back as `dynamo.rs` reads them (the
//! engine's queries, the same arrival ranges, the same layout book); the writes check what
//! its conditional writes check (the device item's `version`; a new alert only if new, in
//! one transaction with the device) and refuse what DynamoDB refuses (`MemTable::insert`).

use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::table::attr;
use tidemark_schema::{
    AlertItem, AlertState, DeviceId, DeviceItem, EntityKey, GroupAlertItem, GroupPartialItem,
    GroupRuleSpec, GroupRuleStateItem, HeartbeatItem, OfflineState, Tag, TagCountItem, Timestamp,
    field, keys,
};
use tidemark_store::layouts::LayoutBook;
use tidemark_store::memory::{Items, MemTable};
use tidemark_store::read::{QuerySpec, QueryStore, SkRange, query_all};
use tidemark_store::write::tag_counts::add_in_memory;
use tidemark_store::{Item, StoreError, from_stored};

use crate::WatchStore;
use crate::groups::{GroupCounts, GroupStep};
use crate::store::{arrival_ranges, arrived_at};

/// The table in memory; clones share it (a test's stand-in for the pipeline writes the
/// heartbeat items the run reads).
#[derive(Debug, Default, Clone)]
pub struct MemoryStore {
    table: Arc<MemTable>,
}

fn av<T: serde::Serialize>(v: &T) -> Result<AttributeValue, StoreError> {
    Ok(serde_dynamo::to_attribute_value(v)?)
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

/// Whether the stored item's `version` is the one `dev` was read with (absent when `None`):
/// the condition of every device write of `dynamo.rs`.
fn version_holds(stored: Option<&Item>, dev: &DeviceItem) -> bool {
    let stored = stored
        .and_then(|i| i.get(field::VERSION))
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse::<u64>().ok());
    stored == dev.version
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Over a table another store writes too (the aggregator's, in a simulation of both).
    pub fn over(table: Arc<MemTable>) -> Self {
        MemoryStore { table }
    }

    /// The engine, for storing what a test starts from (readings, slots, layout items).
    pub fn table(&self) -> &MemTable {
        &self.table
    }

    /// Stores an entity (a device, a heartbeat, a reading) as DynamoDB would.
    pub fn put_entity<T: serde::Serialize>(&self, v: &T) -> Result<(), StoreError> {
        self.table.put_entity(v)
    }

    /// The device item as stored now.
    pub fn stored_device(&self, id: &DeviceId) -> Result<Option<DeviceItem>, StoreError> {
        self.table
            .get(&EntityKey::Device(id.clone()).key())
            .map(from_stored)
            .transpose()
    }

    /// The alert items of `id`, in key order.
    pub async fn alerts(&self, id: &DeviceId) -> Result<Vec<AlertItem>, StoreError> {
        let spec = QuerySpec::table(
            EntityKey::Device(id.clone()).key().pk,
            SkRange::BeginsWith(keys::ALERT_PREFIX.to_owned()),
            true,
        );
        let mut items = Vec::new();
        query_all(self.table.as_ref(), &spec, 100, |i| items.push(i)).await?;
        items.into_iter().map(from_stored).collect()
    }

    /// The device item's update as one conditional `UpdateItem`: `set` applied and the
    /// version bumped if the version is still as read; `false` when it is not.
    fn update_device(
        items: &mut Items,
        dev: &DeviceItem,
        set: Vec<(&'static str, AttributeValue)>,
        remove: &[&'static str],
    ) -> Result<bool, StoreError> {
        let key = EntityKey::Device(dev.device_id.clone()).key();
        let stored = items.get(&(key.pk.clone(), key.sk.clone()));
        if !version_holds(stored, dev) {
            return Ok(false);
        }
        // As UpdateItem, a missing item (the condition on an absent version holds) is created.
        let mut item = stored.cloned().unwrap_or_else(|| {
            Item::from([
                (attr::PK.to_owned(), s(key.pk)),
                (attr::SK.to_owned(), s(key.sk)),
            ])
        });
        for (a, v) in set {
            item.insert(a.to_owned(), v);
        }
        for a in remove {
            item.remove(*a);
        }
        let next = dev.version.unwrap_or(0) + 1;
        item.insert(
            field::VERSION.to_owned(),
            AttributeValue::N(next.to_string()),
        );
        MemTable::insert(items, item)?;
        Ok(true)
    }
}

impl WatchStore for MemoryStore {
    async fn heartbeats(&self) -> Result<Vec<HeartbeatItem>, StoreError> {
        let spec = QuerySpec {
            consistent: true,
            ..QuerySpec::table(
                keys::PIPELINE_PK.to_owned(),
                SkRange::BeginsWith(keys::HEARTBEAT_PREFIX.to_owned()),
                true,
            )
        };
        let mut out = Vec::new();
        query_all(self.table.as_ref(), &spec, 1000, |i| {
            // Unreadable ones are skipped, as on DynamoDB.
            if let Ok(h) = from_stored::<HeartbeatItem>(i) {
                out.push(h);
            }
        })
        .await?;
        Ok(out)
    }

    async fn due(
        &self,
        partition: &str,
        until: Timestamp,
        limit: usize,
    ) -> Result<Vec<DeviceId>, StoreError> {
        // `gsi2sk <= :w`: from the partition's first sort key.
        let spec = QuerySpec::gsi2(
            partition.to_owned(),
            SkRange::Between(String::new(), keys::watch_gsi2sk(until)),
            true,
        );
        let page = i32::try_from(limit.clamp(1, 1000)).unwrap_or(1000);
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let p = self.table.query(&spec, start, page).await?;
            for i in p.items {
                let text = |a: &str| i.get(a).and_then(|v| v.as_s().ok()).cloned();
                if let (Some(pk), Some(sk)) = (text(attr::PK), text(attr::SK))
                    && let Ok(EntityKey::Device(d)) = EntityKey::parse(&pk, &sk)
                {
                    out.push(d);
                }
                if out.len() >= limit {
                    return Ok(out);
                }
            }
            match p.last_key {
                Some(k) => start = Some(k),
                None => return Ok(out),
            }
        }
    }

    async fn device(&self, id: &DeviceId) -> Result<Option<DeviceItem>, StoreError> {
        self.stored_device(id)
    }

    async fn newest_arrival(
        &self,
        id: &DeviceId,
        since: Timestamp,
    ) -> Result<Option<Timestamp>, StoreError> {
        let layouts = self
            .table
            .batch_get(&LayoutBook::keys(std::slice::from_ref(id)));
        let (book, _) = LayoutBook::from_raw(layouts);
        let mut newest: Option<Timestamp> = None;
        for range in arrival_ranges(id, book.of(id), since) {
            let spec = QuerySpec {
                consistent: true,
                ..QuerySpec::table(range.partition, SkRange::Between(range.lo, range.hi), true)
            };
            query_all(self.table.as_ref(), &spec, 1000, |i| {
                if let Some(at) = arrived_at(&i) {
                    newest = Some(newest.map_or(at, |n| n.max(at)));
                }
            })
            .await?;
        }
        Ok(newest)
    }

    async fn postpone(
        &self,
        dev: &DeviceItem,
        arrived: Timestamp,
        check: Timestamp,
    ) -> Result<bool, StoreError> {
        let set = vec![
            (field::LAST_ARRIVAL_AT, av(&arrived)?),
            (attr::GSI2SK, s(keys::watch_gsi2sk(check))),
        ];
        Self::update_device(&mut self.table.lock(), dev, set, &[])
    }

    async fn unwatch(&self, dev: &DeviceItem) -> Result<bool, StoreError> {
        let arrived = dev.last_arrival_at.unwrap_or(Timestamp::MIN);
        let set = vec![(field::LAST_ARRIVAL_AT, av(&arrived)?)];
        Self::update_device(
            &mut self.table.lock(),
            dev,
            set,
            &[attr::GSI2PK, attr::GSI2SK],
        )
    }

    async fn open(
        &self,
        dev: &DeviceItem,
        alert: &AlertItem,
        since: Timestamp,
    ) -> Result<bool, StoreError> {
        let alert_item = tidemark_store::to_item(alert)?;
        let state = OfflineState {
            alert: alert.alert_id.clone(),
            since,
            counted: dev.tags.iter().collect(),
        };
        let set = vec![
            (field::OFFLINE, av(&state)?),
            (attr::GSI2PK, s(keys::offline_gsi2pk(&dev.device_id))),
            (attr::GSI2SK, s(keys::offline_gsi2sk(&dev.device_id))),
            (field::LAST_ARRIVAL_AT, av(&since)?),
        ];
        // One transaction: both conditions hold or nothing is written.
        let mut items = self.table.lock();
        if items.contains_key(&(alert.pk.clone(), alert.sk.clone())) {
            return Ok(false);
        }
        let key = EntityKey::Device(dev.device_id.clone()).key();
        let k = (key.pk, key.sk);
        let device_before = items.get(&k).cloned();
        if !Self::update_device(&mut items, dev, set, &[])? {
            return Ok(false);
        }
        if let Err(e) = MemTable::insert(&mut items, alert_item) {
            // The alert refused: the device's update is undone with it.
            match device_before {
                Some(d) => items.insert(k, d),
                None => items.remove(&k),
            };
            return Err(e);
        }
        for tag in &state.counted {
            let count = TagCountItem::key_of(tag, &dev.device_id);
            add_in_memory(&mut items, &count, field::OFFLINE_MEMBERS, 1)?;
        }
        Ok(true)
    }

    async fn group_counts(&self, tag: &Tag) -> Result<GroupCounts, StoreError> {
        GroupCounts::of(self.table.batch_get(&TagCountItem::keys(tag)))
    }

    async fn group_partials(
        &self,
        tag: &Tag,
        hour: Timestamp,
    ) -> Result<Vec<GroupPartialItem>, StoreError> {
        let spec = QuerySpec {
            consistent: true,
            ..QuerySpec::table(keys::group_partial_pk(tag, hour), SkRange::All, true)
        };
        let mut items = Vec::new();
        query_all(self.table.as_ref(), &spec, 1000, |i| items.push(i)).await?;
        items.into_iter().map(from_stored).collect()
    }

    async fn group_rule_state(
        &self,
        rule: &GroupRuleSpec,
    ) -> Result<Option<GroupRuleStateItem>, StoreError> {
        self.table
            .get(&GroupRuleStateItem::key(rule))
            .map(from_stored)
            .transpose()
    }

    async fn commit_group(
        &self,
        rule: &GroupRuleSpec,
        step: &GroupStep,
        at: Timestamp,
    ) -> Result<bool, StoreError> {
        let mut items = self.table.lock();
        let key = GroupRuleStateItem::key(rule);
        let stored = items
            .get(&(key.pk.clone(), key.sk.clone()))
            .cloned()
            .map(from_stored::<GroupRuleStateItem>)
            .transpose()?;
        if stored.map_or(0, |s| s.version) != step.state.version {
            return Ok(false);
        }
        if let Some(a) = &step.open {
            if items.contains_key(&(a.pk.clone(), a.sk.clone())) {
                return Ok(false);
            }
        }
        let mut resolved = None;
        if let Some(id) = &step.resolve {
            let k = EntityKey::GroupAlert {
                tag: rule.group.clone(),
                alert: id.clone(),
            }
            .key();
            let Some(item) = items.get(&(k.pk.clone(), k.sk.clone())).cloned() else {
                return Ok(false);
            };
            let mut alert: GroupAlertItem = from_stored(item)?;
            if alert.resolved_at.is_some() {
                return Ok(false);
            }
            alert.state = AlertState::Resolved;
            alert.resolved_at = Some(at);
            alert.gsi1pk = None;
            alert.gsi1sk = None;
            resolved = Some(alert);
        }
        let mut state = step.state.clone();
        state.version += 1;
        MemTable::insert(&mut items, tidemark_store::to_item(&state)?)?;
        if let Some(a) = &step.open {
            MemTable::insert(&mut items, tidemark_store::to_item(a)?)?;
        }
        if let Some(a) = resolved {
            MemTable::insert(&mut items, tidemark_store::to_item(&a)?)?;
        }
        Ok(true)
    }

    /// Nothing is metered in memory.
    fn units(&self) -> (f64, f64) {
        (0.0, 0.0)
    }
}
