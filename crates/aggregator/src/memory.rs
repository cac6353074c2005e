//! The aggregator's store traits over the one in-memory test engine ([`MemTable`]): every
//! item (readings, rollups, devices, alerts) is stored as the DynamoDB store stores it and
//! read back as it reads it (readings through the one reader of stored readings), with the
//! DynamoDB implementation's conditions (the aggregates' and the device's `version`, the
//! alert transaction's), its limits (400 KB items, 100 actions a transaction), and injected
//! conflicts and failures, for handler unit tests.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tidemark_schema::{
    AggregateItem, AlertId, AlertItem, Bucket, DeviceId, DeviceItem, DeviceStatus, EntityKey, Key,
    LatestReading, LayoutHistory, MetricName, ReadingItem, TagCountItem, Timestamp, field, keys,
};
use tidemark_store::limits::{
    MAX_ITEM_BYTES, MAX_TRANSACT_ACTIONS, item_size, item_too_large, too_many_actions,
};
use tidemark_store::memory::{Items, MemTable};
use tidemark_store::read::walk_readings;
use tidemark_store::write::tag_counts::add_in_memory;
use tidemark_store::{StoreError, from_item, to_item};

use crate::alerting::write::AlertWrite;
use crate::offline::upkeep::WatchKeys;
use crate::rollups::combine::{BucketReadings, BucketSummary};
use crate::store::{AggregateStore, AlertStore, DeviceStore, DeviceUpdate, ReadingStore, Written};

/// A reading as the memory store keeps it.
type Reading = (Timestamp, std::collections::BTreeMap<MetricName, f64>);

#[derive(Default)]
pub struct MemoryStore {
    /// The table; a clone of the `Arc` shares it (a scale simulation runs the watchdog's
    /// memory store over the same one).
    pub table: std::sync::Arc<MemTable>,
    /// The next this many aggregate writes lose a race (another writer bumps the version).
    pub conflicts: AtomicU32,
    /// The most readings one `readings_page` call returned (bounded-memory checks).
    pub largest_read: std::sync::atomic::AtomicUsize,
    /// Readings all `summarize` calls folded (bounded-work checks).
    pub readings_summarized: std::sync::atomic::AtomicUsize,
    /// Readings all `readings_page` calls returned (bounded-work checks).
    pub readings_read: std::sync::atomic::AtomicUsize,
    /// Aggregate writes to a sort key containing this fail like an outage.
    pub failing: Mutex<Option<String>>,
    /// The next this many device commits fail like an outage (a crash before the write).
    pub failing_commits: AtomicU32,
    /// Aggregate writes and device commits of an item whose `pk#sk` contains this are
    /// refused as DynamoDB refuses an invalid request (`ValidationException`): for ever.
    pub refusing: Mutex<Option<String>>,
    /// Aggregate writes and device commits of an item whose `pk#sk` contains this panic (a
    /// bug of ours).
    pub panicking: Mutex<Option<String>>,
    /// The largest aggregate item a put was asked to store, in bytes as DynamoDB counts them.
    pub largest_item: std::sync::atomic::AtomicUsize,
    /// How long each aggregate write takes (a slow or throttled table).
    pub write_delay: Mutex<Option<std::time::Duration>>,
    /// Heartbeats marked passed: (shard, sentAt, the role that marked it).
    pub passed: Mutex<Vec<(String, Timestamp, crate::role::Role)>>,
    /// Every key `get_aggregates` was asked for, in order.
    pub aggregate_reads: Mutex<Vec<Key>>,
    /// Devices' layout histories (none: single items), what the DynamoDB store reads from
    /// the layout items.
    pub histories: Mutex<std::collections::HashMap<DeviceId, LayoutHistory>>,
    /// Per item, the newest stream record [`MemoryStore::apply_records`] stored.
    applied: Mutex<std::collections::HashMap<(String, String), u128>>,
}

/// The entity stored under `key`, if any (an item that does not parse as one is a bug in
/// the memory store's own writes: it reads as absent).
fn entity<T: DeserializeOwned>(items: &Items, key: &Key) -> Option<T> {
    let item = items.get(&(key.pk.clone(), key.sk.clone()))?;
    from_item(item.clone()).ok()
}

/// The entities of partition `pk` whose sort keys start with `prefix`, in key order.
fn entities<T: DeserializeOwned>(items: &Items, pk: &str, prefix: &str) -> Vec<T> {
    items
        .range((pk.to_owned(), prefix.to_owned())..)
        .take_while(|((p, sk), _)| p == pk && sk.starts_with(prefix))
        .filter_map(|(_, item)| from_item(item.clone()).ok())
        .collect()
}

fn store<T: Serialize>(items: &mut Items, v: &T) -> Result<(), StoreError> {
    MemTable::insert(items, to_item(v)?)
}

fn device_key(d: &DeviceId) -> Key {
    EntityKey::Device(d.clone()).key()
}

fn alert_key(device: &DeviceId, alert: &AlertId) -> Key {
    EntityKey::Alert {
        device: device.clone(),
        alert: alert.clone(),
    }
    .key()
}

impl MemoryStore {
    /// The rollup item stored under `key`.
    pub fn aggregate(&self, key: &Key) -> Option<AggregateItem> {
        entity(&self.table.lock(), key)
    }

    /// The rollup items of `pk` whose sort keys start with `prefix`.
    pub fn aggregates_with_prefix(&self, pk: &str, prefix: &str) -> Vec<AggregateItem> {
        entities(&self.table.lock(), pk, prefix)
    }

    pub fn device(&self, id: &DeviceId) -> Option<DeviceItem> {
        entity(&self.table.lock(), &device_key(id))
    }

    /// Stores a device item as `PUT /devices/{id}` would.
    pub fn put_device(&self, d: &DeviceItem) {
        store(&mut self.table.lock(), d).expect("a device item fits in DynamoDB's item limit");
    }

    /// Every alert of every device.
    pub fn alerts(&self) -> Vec<AlertItem> {
        self.table
            .scan()
            .into_iter()
            .filter(|i| {
                i.get("sk")
                    .and_then(|v| v.as_s().ok())
                    .is_some_and(|sk| sk.starts_with(keys::ALERT_PREFIX))
            })
            .filter_map(|i| from_item::<AlertItem>(i).ok())
            .collect()
    }

    /// Stores an alert item as an operator's action would.
    pub fn put_alert(&self, a: &AlertItem) {
        store(&mut self.table.lock(), a).expect("an alert item fits in DynamoDB's item limit");
    }
}

impl crate::store::HeartbeatStore for MemoryStore {
    async fn pass_heartbeat(
        &self,
        shard: &tidemark_schema::keys::ShardName,
        sent_at: Timestamp,
        role: crate::role::Role,
    ) -> Result<f64, StoreError> {
        let mut p = self.passed.lock().unwrap_or_else(|e| e.into_inner());
        p.push((shard.to_string(), sent_at, role));
        Ok(1.0)
    }
}

/// A server error: transient.
fn outage() -> StoreError {
    dynamo_error("InternalServerError", "injected outage")
}

use crate::testing::dynamo_error;

impl MemoryStore {
    /// The injected permanent failure or panic of a write of the item `key`, if any.
    fn refuse(&self, key: &Key) -> Result<(), StoreError> {
        let name = format!("{}#{}", key.pk, key.sk);
        let matches = |m: &Mutex<Option<String>>| {
            m.lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .is_some_and(|f| name.contains(f.as_str()))
        };
        if matches(&self.panicking) {
            panic!("injected panic writing {name}");
        }
        if matches(&self.refusing) {
            return Err(dynamo_error(
                "ValidationException",
                "injected: the item is invalid",
            ));
        }
        Ok(())
    }
}

impl crate::store::SetAsideStore for MemoryStore {
    async fn count_failure(
        &self,
        record: &tidemark_schema::keys::FailedRecord,
        error: &str,
        ttl: i64,
    ) -> Result<u32, StoreError> {
        Ok(tidemark_store::failures::count_in_memory(
            &self.table,
            record,
            error,
            ttl,
        ))
    }

    async fn put_repair(&self, item: &tidemark_schema::RepairItem) -> Result<(), StoreError> {
        store(&mut self.table.lock(), item)
    }

    async fn open_repairs(
        &self,
        role: &str,
        limit: usize,
    ) -> Result<Vec<tidemark_schema::RepairItem>, StoreError> {
        crate::store::open_repairs(&*self.table, role, limit).await
    }

    async fn delete_repair(&self, key: &Key) -> Result<(), StoreError> {
        MemTable::remove(&mut self.table.lock(), &(key.pk.clone(), key.sk.clone()));
        Ok(())
    }
}

impl AggregateStore for MemoryStore {
    async fn mark_export_dirty(
        &self,
        hours: &[Timestamp],
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let mut items = self.table.lock();
        for hour in hours {
            let key = EntityKey::ExportDirty(*hour).key();
            let marks =
                entity::<tidemark_schema::ExportDirtyItem>(&items, &key).map_or(0, |d| d.marks);
            store(
                &mut items,
                &tidemark_schema::ExportDirtyItem {
                    pk: key.pk,
                    sk: key.sk,
                    hour: *hour,
                    marked_at: now,
                    marks: marks + 1,
                },
            )?;
        }
        Ok(())
    }

    async fn get_aggregates(
        &self,
        keys: &[Key],
    ) -> Result<HashMap<Key, AggregateItem>, StoreError> {
        self.aggregate_reads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(keys.iter().cloned());
        let items = self.table.lock();
        Ok(keys
            .iter()
            .filter_map(|k| entity(&items, k).map(|v| (k.clone(), v)))
            .collect())
    }

    async fn aggregate_pages(
        &self,
        device: &DeviceId,
        bucket: Bucket,
    ) -> Result<Vec<AggregateItem>, StoreError> {
        let pk = keys::device_pk(device);
        let prefix = keys::aggregate_page_sk_prefix(bucket);
        Ok(self.aggregates_with_prefix(&pk, &prefix))
    }

    async fn hours_before(
        &self,
        device: &DeviceId,
        before: Bucket,
        n: usize,
    ) -> Result<Vec<AggregateItem>, StoreError> {
        crate::store::hours_before(&*self.table, device, before, n).await
    }

    /// Refuses an item over DynamoDB's 400 KB (sized as DynamoDB counts it, from the item
    /// the DynamoDB store would send) like DynamoDB: an error, for ever.
    async fn put_aggregate(
        &self,
        item: &AggregateItem,
        expected: Option<u64>,
    ) -> Result<Written, StoreError> {
        self.refuse(&Key {
            pk: item.pk.clone(),
            sk: item.sk.clone(),
        })?;
        let bytes = item_size(&tidemark_store::aggregate_item(item)?);
        self.largest_item.fetch_max(bytes, Ordering::SeqCst);
        if bytes > MAX_ITEM_BYTES {
            return Err(item_too_large(bytes));
        }
        let delay = *self.write_delay.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
        }
        if self
            .failing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|f| item.sk.contains(f.as_str()))
        {
            return Err(outage());
        }
        let key = Key {
            pk: item.pk.clone(),
            sk: item.sk.clone(),
        };
        let mut items = self.table.lock();
        let current: Option<AggregateItem> = entity(&items, &key);
        if self
            .conflicts
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            // Someone else wrote the same item (an overlapping replay): bump its version.
            if let Some(mut cur) = current {
                cur.version += 1;
                MemTable::insert(&mut items, tidemark_store::aggregate_item(&cur)?)?;
            }
            return Ok(Written::Conflict);
        }
        if current.map(|c| c.version) != expected {
            return Ok(Written::Conflict);
        }
        MemTable::insert(&mut items, tidemark_store::aggregate_item(item)?)?;
        Ok(Written::Ok { units: 1.0 })
    }
}

impl DeviceStore for MemoryStore {
    async fn get_devices(
        &self,
        ids: &[DeviceId],
    ) -> Result<HashMap<DeviceId, DeviceItem>, StoreError> {
        let items = self.table.lock();
        Ok(ids
            .iter()
            .filter_map(|k| entity(&items, &device_key(k)).map(|v| (k.clone(), v)))
            .collect())
    }

    async fn keeps_sketches(&self, device: &DeviceId) -> Result<bool, StoreError> {
        let items = self.table.lock();
        let key = device_key(device);
        Ok(items
            .get(&(key.pk, key.sk))
            .and_then(|i| i.get(tidemark_schema::field::PERCENTILES))
            .and_then(|v| v.as_bool().ok())
            .is_some_and(|b| *b))
    }

    async fn commit_device(
        &self,
        u: &DeviceUpdate,
        alerts: &[AlertWrite],
    ) -> Result<Written, StoreError> {
        let actions = alerts.len() + 1 + u.offline.uncount.len();
        if actions > MAX_TRANSACT_ACTIONS {
            return Err(too_many_actions(actions));
        }
        self.refuse(&device_key(&u.device))?;
        if self
            .failing_commits
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(outage());
        }
        let mut items = self.table.lock();
        let mut d: DeviceItem = entity(&items, &device_key(&u.device))
            .unwrap_or_else(|| DeviceItem::new(u.device.clone(), DeviceStatus::Active, u.now));
        if d.version != u.expected_version {
            return Ok(Written::Conflict);
        }
        if !alerts_admitted(&items, &u.device, alerts) {
            return Ok(Written::Conflict);
        }
        d.version = Some(u.expected_version.unwrap_or(0) + 1);
        d.last_seen_at = Some(u.last_seen_at);
        if let Some(l) = &u.latest {
            d.latest = Some(l.clone());
        }
        d.rule_states = u.rule_states.clone();
        let o = &u.offline;
        if let Some(at) = o.last_arrival_at {
            d.last_arrival_at = Some(at);
        }
        match &o.watch {
            WatchKeys::Keep => {}
            WatchKeys::Set { pk, sk } => {
                d.gsi2pk = Some(pk.clone());
                d.gsi2sk = Some(sk.clone());
            }
            WatchKeys::Remove => {
                d.gsi2pk = None;
                d.gsi2sk = None;
            }
        }
        if o.resolve.is_some() {
            d.offline = None;
        }
        let mut writes = vec![to_item(&d)?];
        writes.extend(alert_writes(&items, &u.device, alerts)?);
        transact(&mut items, writes)?;
        for tag in &o.uncount {
            let count = TagCountItem::key_of(tag, &u.device);
            add_in_memory(&mut items, &count, field::OFFLINE_MEMBERS, -1)?;
        }
        Ok(Written::Ok {
            units: 1.0 + alerts.len() as f64,
        })
    }
}

/// The transaction's conditions: creates are new, updates find an unresolved alert, reopens
/// the resolved alert as it was read.
fn alerts_admitted(items: &Items, device: &DeviceId, alerts: &[AlertWrite]) -> bool {
    alerts.iter().all(|w| {
        let stored: Option<AlertItem> = entity(items, &alert_key(device, &w.after().alert_id));
        match w {
            AlertWrite::Create(_) => stored.is_none(),
            AlertWrite::Update { .. } => stored.is_some_and(|x| x.resolved_at.is_none()),
            AlertWrite::Reopen { before, .. } => stored.is_some_and(|x| {
                x.resolved_at.is_some()
                    && x.resolved_at == before.resolved_at
                    && x.state == before.state
            }),
        }
    })
}

/// The items the alert writes leave, as DynamoDB's transaction would write them.
fn alert_writes(
    items: &Items,
    device: &DeviceId,
    alerts: &[AlertWrite],
) -> Result<Vec<tidemark_store::Item>, StoreError> {
    let mut out = Vec::with_capacity(alerts.len());
    for w in alerts {
        let after = w.after();
        let stored: Option<AlertItem> = entity(items, &alert_key(device, &after.alert_id));
        let written = match (w, stored) {
            (AlertWrite::Update { .. }, Some(mut x)) => {
                // Only the evaluator's attributes, as the DynamoDB update does.
                x.value = after.value;
                x.breach_count = after.breach_count;
                x.last_breach_at = after.last_breach_at;
                x.opened_at = after.opened_at;
                x.tags = after.tags.clone();
                if after.resolved_at.is_some() {
                    x.resolved_at = after.resolved_at;
                    x.state = after.state;
                    x.gsi1pk = None;
                    x.gsi1sk = None;
                }
                to_item(&x)?
            }
            (AlertWrite::Reopen { .. }, Some(mut x)) => {
                // The evaluator's attributes and the reopening, as the DynamoDB update does.
                x.value = after.value;
                x.breach_count = after.breach_count;
                x.last_breach_at = after.last_breach_at;
                x.opened_at = after.opened_at;
                x.tags = after.tags.clone();
                x.state = after.state;
                x.resolved_at = None;
                x.gsi1pk = after.gsi1pk.clone();
                x.gsi1sk = after.gsi1sk.clone();
                to_item(&x)?
            }
            _ => to_item(after)?,
        };
        out.push(written);
    }
    Ok(out)
}

/// Writes all of `writes` or, like a transaction, none (when one is too large).
fn transact(items: &mut Items, writes: Vec<tidemark_store::Item>) -> Result<(), StoreError> {
    if let Some(bytes) = writes.iter().map(item_size).find(|b| *b > MAX_ITEM_BYTES) {
        return Err(item_too_large(bytes));
    }
    for item in writes {
        MemTable::insert(items, item)?;
    }
    Ok(())
}

impl AlertStore for MemoryStore {
    async fn alerts_since(
        &self,
        device: &DeviceId,
        from: Timestamp,
    ) -> Result<HashMap<AlertId, AlertItem>, StoreError> {
        let items = self.table.lock();
        Ok(
            entities::<AlertItem>(&items, &keys::device_pk(device), keys::ALERT_PREFIX)
                .into_iter()
                .filter(|a| a.alert_id.opened_at() >= from)
                .map(|a| (a.alert_id.clone(), a))
                .collect(),
        )
    }

    async fn put_alerts(
        &self,
        device: &DeviceId,
        alerts: &[AlertWrite],
    ) -> Result<Written, StoreError> {
        if alerts.len() > MAX_TRANSACT_ACTIONS {
            return Err(too_many_actions(alerts.len()));
        }
        let mut items = self.table.lock();
        if !alerts_admitted(&items, device, alerts) {
            return Ok(Written::Conflict);
        }
        let writes = alert_writes(&items, device, alerts)?;
        transact(&mut items, writes)?;
        Ok(Written::Ok {
            units: alerts.len() as f64,
        })
    }

    async fn get_alerts(
        &self,
        device: &DeviceId,
        ids: &[AlertId],
    ) -> Result<HashMap<AlertId, AlertItem>, StoreError> {
        let items = self.table.lock();
        Ok(ids
            .iter()
            .filter_map(|k| entity(&items, &alert_key(device, k)).map(|v| (k.clone(), v)))
            .collect())
    }
}

impl MemoryStore {
    /// Readings of `device` in `[from, to]` in time order (newest first if asked), at most
    /// `limit`, through the one reader of stored readings.
    async fn walk(
        &self,
        device: &DeviceId,
        from: Timestamp,
        to: Timestamp,
        newest_first: bool,
        limit: Option<usize>,
    ) -> Result<BucketReadings, StoreError> {
        let mut out = Vec::new();
        let history = self
            .histories
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(device)
            .cloned()
            .unwrap_or(LayoutHistory::EMPTY);
        walk_readings(
            &*self.table,
            device,
            &history,
            from,
            to,
            newest_first,
            limit,
            |at, m| out.push((at, m)),
        )
        .await?;
        Ok(out)
    }
}

impl ReadingStore for MemoryStore {
    async fn readings_between(
        &self,
        device: &DeviceId,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<BucketReadings, StoreError> {
        self.walk(device, from, to, false, None).await
    }

    async fn readings_page(
        &self,
        device: &DeviceId,
        from: Timestamp,
        to: Timestamp,
        newest_first: bool,
        limit: usize,
    ) -> Result<BucketReadings, StoreError> {
        let page = self
            .walk(device, from, to, newest_first, Some(limit))
            .await?;
        self.largest_read.fetch_max(page.len(), Ordering::SeqCst);
        self.readings_read.fetch_add(page.len(), Ordering::SeqCst);
        Ok(page)
    }

    async fn summarize(
        &self,
        device: &DeviceId,
        from: Timestamp,
        to: Timestamp,
        sketched: bool,
    ) -> Result<BucketSummary, StoreError> {
        let readings = self.readings_between(device, from, to).await?;
        self.readings_summarized
            .fetch_add(readings.len(), Ordering::SeqCst);
        Ok(BucketSummary::of(&readings, sketched))
    }

    async fn newest_reading(
        &self,
        device: &DeviceId,
        since: Timestamp,
    ) -> Result<Option<LatestReading>, StoreError> {
        let newest = self
            .walk(device, since, Timestamp::MAX, true, Some(1))
            .await?;
        Ok(newest
            .into_iter()
            .next()
            .map(|(timestamp, metrics)| LatestReading { timestamp, metrics }))
    }
}

impl MemoryStore {
    /// Stores a reading (as ingest would, before its stream record exists), replacing the
    /// timestamp's metrics.
    pub fn put_reading(
        &self,
        device: &DeviceId,
        at: Timestamp,
        metrics: std::collections::BTreeMap<tidemark_schema::MetricName, f64>,
    ) {
        self.put_readings(device, [(at, metrics)]);
    }

    /// Stores many readings of one device at once (a history too long to send).
    /// Leaves the table as the writes behind `event`'s records did: each record's new image
    /// stored (a REMOVE deletes the item), unless a newer record of the item was applied
    /// before (a replay finds the table ahead of it, as on DynamoDB). The stream only tells
    /// of writes already made, so a test applies a batch's records before processing it.
    pub fn apply_records(&self, event: &aws_lambda_events::event::dynamodb::Event) {
        for r in &event.records {
            let c = &r.change;
            let key = |k: &str| match c.keys.get(k) {
                Some(serde_dynamo::AttributeValue::S(s)) => s.clone(),
                _ => String::new(),
            };
            let id = (key("pk"), key("sk"));
            let seq: u128 = c
                .sequence_number
                .as_deref()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            let mut applied = self.applied.lock().unwrap_or_else(|e| e.into_inner());
            if applied.get(&id).is_some_and(|s| *s >= seq) {
                continue;
            }
            applied.insert(id.clone(), seq);
            if c.new_image.is_empty() {
                MemTable::remove(&mut self.table.lock(), &id);
            } else {
                let item: tidemark_store::Item = c.new_image.clone().into();
                self.table.put(item).expect("a stream image fits the table");
            }
        }
    }

    pub fn put_readings(&self, device: &DeviceId, readings: impl IntoIterator<Item = Reading>) {
        for (at, metrics) in readings {
            let item = ReadingItem {
                pk: keys::reading_pk(device, None),
                sk: keys::reading_sk(at),
                metrics,
                metadata: None,
                ttl: i64::MAX,
                arrived_at: None,
            };
            self.table
                .put_entity(&item)
                .expect("a reading item fits in DynamoDB's item limit");
        }
    }
}

impl crate::Aggregator<MemoryStore> {
    /// Processes `event` after applying its records to the table
    /// ([`MemoryStore::apply_records`]): a batch as Streams delivers it, of writes made.
    pub async fn process_written(
        &self,
        event: &aws_lambda_events::event::dynamodb::Event,
    ) -> (
        aws_lambda_events::event::streams::DynamoDbEventResponse,
        crate::Report,
    ) {
        self.store().apply_records(event);
        self.process(event).await
    }
}
