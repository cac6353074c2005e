//! An in-memory store with the DynamoDB implementation's semantics (conditional writes on
//! the aggregates' and the device's `version`), plus injected conflicts and failures, for handler unit tests.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use tidemark_schema::{
    AggregateItem, AlertId, AlertItem, Bucket, DeviceId, DeviceItem, DeviceStatus, Key,
    LatestReading, Timestamp,
};
use tidemark_store::StoreError;
use tidemark_store::limits::{
    MAX_ITEM_BYTES, MAX_TRANSACT_ACTIONS, item_size, item_too_large, too_many_actions,
};

use crate::alerting::plan::AlertWrite;
use crate::combine::{BucketReadings, BucketSummary};
use crate::offline::upkeep::WatchKeys;
use crate::store::{AggregateStore, AlertStore, DeviceStore, DeviceUpdate, ReadingStore, Written};

#[derive(Default)]
pub struct FakeStore {
    pub aggregates: Mutex<HashMap<Key, AggregateItem>>,
    pub devices: Mutex<HashMap<DeviceId, DeviceItem>>,
    pub alerts: Mutex<HashMap<(DeviceId, AlertId), AlertItem>>,
    /// Raw readings, per device.
    pub readings: Mutex<Vec<(DeviceId, BucketReadings)>>,
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
    /// The largest aggregate item a put was asked to store, in bytes as DynamoDB counts them.
    pub largest_item: std::sync::atomic::AtomicUsize,
    /// How long each aggregate write takes (a slow or throttled table).
    pub write_delay: Mutex<Option<std::time::Duration>>,
    /// Heartbeats marked passed: (shard, sentAt).
    pub passed: Mutex<Vec<(String, Timestamp)>>,
    /// Every key `get_aggregates` was asked for, in order.
    pub aggregate_reads: Mutex<Vec<Key>>,
}

impl crate::store::HeartbeatStore for FakeStore {
    async fn pass_heartbeat(
        &self,
        shard: &tidemark_schema::keys::ShardName,
        sent_at: Timestamp,
    ) -> Result<f64, StoreError> {
        let mut p = self.passed.lock().unwrap_or_else(|e| e.into_inner());
        p.push((shard.to_string(), sent_at));
        Ok(1.0)
    }
}

fn outage() -> StoreError {
    StoreError::Request {
        operation: "PutItem",
        message: "injected outage".into(),
    }
}

impl AggregateStore for FakeStore {
    async fn get_aggregates(
        &self,
        keys: &[Key],
    ) -> Result<HashMap<Key, AggregateItem>, StoreError> {
        self.aggregate_reads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(keys.iter().cloned());
        let m = self.aggregates.lock().unwrap_or_else(|e| e.into_inner());
        Ok(keys
            .iter()
            .filter_map(|k| m.get(k).map(|v| (k.clone(), v.clone())))
            .collect())
    }

    async fn aggregate_pages(
        &self,
        device: &DeviceId,
        bucket: Bucket,
    ) -> Result<Vec<AggregateItem>, StoreError> {
        let pk = tidemark_schema::keys::device_pk(device);
        let prefix = tidemark_schema::keys::aggregate_page_sk_prefix(bucket);
        let m = self.aggregates.lock().unwrap_or_else(|e| e.into_inner());
        Ok(m.iter()
            .filter(|(k, _)| k.pk == pk && k.sk.starts_with(&prefix))
            .map(|(_, v)| v.clone())
            .collect())
    }

    /// Refuses an item over DynamoDB's 400 KB (sized as DynamoDB counts it, from the item
    /// the DynamoDB store would send) like DynamoDB: an error, for ever.
    async fn put_aggregate(
        &self,
        item: &AggregateItem,
        expected: Option<u64>,
    ) -> Result<Written, StoreError> {
        let bytes = item_size(&tidemark_store::to_item(item)?);
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
        let mut m = self.aggregates.lock().unwrap_or_else(|e| e.into_inner());
        if self
            .conflicts
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            // Someone else wrote the same item (an overlapping replay): bump its version.
            if let Some(cur) = m.get_mut(&key) {
                cur.version += 1;
            }
            return Ok(Written::Conflict);
        }
        let stored = m.get(&key).map(|c| c.version);
        if stored != expected {
            return Ok(Written::Conflict);
        }
        m.insert(key, item.clone());
        Ok(Written::Ok { units: 1.0 })
    }
}

impl DeviceStore for FakeStore {
    async fn get_devices(
        &self,
        ids: &[DeviceId],
    ) -> Result<HashMap<DeviceId, DeviceItem>, StoreError> {
        let m = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        Ok(ids
            .iter()
            .filter_map(|k| m.get(k).map(|v| (k.clone(), v.clone())))
            .collect())
    }

    async fn commit_device(
        &self,
        u: &DeviceUpdate,
        alerts: &[AlertWrite],
    ) -> Result<Written, StoreError> {
        if alerts.len() + 1 > MAX_TRANSACT_ACTIONS {
            return Err(too_many_actions(alerts.len() + 1));
        }
        if self
            .failing_commits
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(outage());
        }
        let mut m = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        let d = m
            .entry(u.device.clone())
            .or_insert_with(|| DeviceItem::new(u.device.clone(), DeviceStatus::Active, u.now));
        if d.version != u.expected_version {
            return Ok(Written::Conflict);
        }
        let mut a = self.alerts.lock().unwrap_or_else(|e| e.into_inner());
        if !alerts_admitted(&a, &u.device, alerts) {
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
        apply_alerts(&mut a, &u.device, alerts);
        Ok(Written::Ok {
            units: 1.0 + alerts.len() as f64,
        })
    }
}

/// The transaction's conditions: creates are new, updates find an unresolved alert.
fn alerts_admitted(
    a: &HashMap<(DeviceId, AlertId), AlertItem>,
    device: &DeviceId,
    alerts: &[AlertWrite],
) -> bool {
    alerts.iter().all(|w| {
        let k = (device.clone(), w.after().alert_id.clone());
        match w {
            AlertWrite::Create(_) => !a.contains_key(&k),
            AlertWrite::Update { .. } => a.get(&k).is_some_and(|x| x.resolved_at.is_none()),
        }
    })
}

fn apply_alerts(
    a: &mut HashMap<(DeviceId, AlertId), AlertItem>,
    device: &DeviceId,
    alerts: &[AlertWrite],
) {
    for w in alerts {
        let after = w.after();
        let k = (device.clone(), after.alert_id.clone());
        match (w, a.get_mut(&k)) {
            (AlertWrite::Update { .. }, Some(x)) => {
                // Only the evaluator's attributes, as the DynamoDB update does.
                x.value = after.value;
                x.breach_count = after.breach_count;
                x.last_breach_at = after.last_breach_at;
                x.opened_at = after.opened_at;
                if after.resolved_at.is_some() {
                    x.resolved_at = after.resolved_at;
                    x.state = after.state;
                    x.gsi1pk = None;
                    x.gsi1sk = None;
                }
            }
            _ => {
                a.insert(k, after.clone());
            }
        }
    }
}

impl AlertStore for FakeStore {
    async fn alerts_since(
        &self,
        device: &DeviceId,
        from: Timestamp,
    ) -> Result<HashMap<AlertId, AlertItem>, StoreError> {
        let m = self.alerts.lock().unwrap_or_else(|e| e.into_inner());
        Ok(m.iter()
            .filter(|((d, id), _)| d == device && id.opened_at() >= from)
            .map(|((_, id), a)| (id.clone(), a.clone()))
            .collect())
    }

    async fn put_alerts(
        &self,
        device: &DeviceId,
        alerts: &[AlertWrite],
    ) -> Result<Written, StoreError> {
        if alerts.len() > MAX_TRANSACT_ACTIONS {
            return Err(too_many_actions(alerts.len()));
        }
        let mut a = self.alerts.lock().unwrap_or_else(|e| e.into_inner());
        if !alerts_admitted(&a, device, alerts) {
            return Ok(Written::Conflict);
        }
        apply_alerts(&mut a, device, alerts);
        Ok(Written::Ok {
            units: alerts.len() as f64,
        })
    }

    async fn get_alerts(
        &self,
        device: &DeviceId,
        ids: &[AlertId],
    ) -> Result<HashMap<AlertId, AlertItem>, StoreError> {
        let m = self.alerts.lock().unwrap_or_else(|e| e.into_inner());
        Ok(ids
            .iter()
            .filter_map(|k| {
                m.get(&(device.clone(), k.clone()))
                    .map(|v| (k.clone(), v.clone()))
            })
            .collect())
    }
}

impl ReadingStore for FakeStore {
    async fn readings_between(
        &self,
        device: &DeviceId,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<BucketReadings, StoreError> {
        let m = self.readings.lock().unwrap_or_else(|e| e.into_inner());
        let out: BucketReadings = m
            .iter()
            .filter(|(d, _)| d == device)
            .flat_map(|(_, r)| r.iter())
            .filter(|(t, _)| *t >= from && *t <= to)
            .cloned()
            .collect();
        Ok(out)
    }

    async fn readings_page(
        &self,
        device: &DeviceId,
        from: Timestamp,
        to: Timestamp,
        newest_first: bool,
        limit: usize,
    ) -> Result<BucketReadings, StoreError> {
        let all = {
            let m = self.readings.lock().unwrap_or_else(|e| e.into_inner());
            m.iter()
                .filter(|(d, _)| d == device)
                .flat_map(|(_, r)| r.iter())
                .filter(|(t, _)| *t >= from && *t <= to)
                .cloned()
                .collect::<BucketReadings>()
        };
        let all = crate::store::first_in_order(all, newest_first, limit);
        self.largest_read.fetch_max(all.len(), Ordering::SeqCst);
        self.readings_read.fetch_add(all.len(), Ordering::SeqCst);
        Ok(all)
    }

    async fn summarize(
        &self,
        device: &DeviceId,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<BucketSummary, StoreError> {
        let readings = self.readings_between(device, from, to).await?;
        self.readings_summarized
            .fetch_add(readings.len(), Ordering::SeqCst);
        Ok(BucketSummary::of(&readings))
    }

    async fn newest_reading(
        &self,
        device: &DeviceId,
        since: Timestamp,
    ) -> Result<Option<LatestReading>, StoreError> {
        let all = self.readings_between(device, since, Timestamp::MAX).await?;
        Ok(all
            .into_iter()
            .max_by_key(|(t, _)| *t)
            .map(|(timestamp, metrics)| LatestReading { timestamp, metrics }))
    }
}

impl FakeStore {
    /// Stores a reading (as ingest would, before its stream record exists).
    pub fn put_reading(
        &self,
        device: &DeviceId,
        at: Timestamp,
        metrics: std::collections::BTreeMap<tidemark_schema::MetricName, f64>,
    ) {
        let mut m = self.readings.lock().unwrap_or_else(|e| e.into_inner());
        match m.iter_mut().find(|(d, _)| d == device) {
            Some((_, r)) => {
                r.retain(|(t, _)| *t != at);
                r.push((at, metrics));
            }
            None => m.push((device.clone(), vec![(at, metrics)])),
        }
    }
}
