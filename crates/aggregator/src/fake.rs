//! An in-memory store with the DynamoDB implementation's semantics (conditional writes on
//! `version` and `lastSeenAt`), plus injected conflicts and failures, for handler unit tests.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use tidemark_schema::{
    AggregateItem, AlertId, AlertItem, DeviceId, DeviceItem, DeviceStatus, Key, Timestamp,
};
use tidemark_store::StoreError;

use crate::alerts::AlertWrite;
use crate::combine::BucketReadings;
use crate::store::{AggregateStore, AlertStore, DeviceStore, DeviceUpdate, ReadingStore, Written};

#[derive(Default)]
pub struct FakeStore {
    pub aggregates: Mutex<HashMap<Key, AggregateItem>>,
    pub devices: Mutex<HashMap<DeviceId, DeviceItem>>,
    pub alerts: Mutex<HashMap<AlertId, AlertItem>>,
    /// Raw readings, per device.
    pub readings: Mutex<Vec<(DeviceId, BucketReadings)>>,
    /// The next this many aggregate writes lose a race (another writer bumps the version).
    pub conflicts: AtomicU32,
    /// Aggregate writes to a sort key containing this fail like an outage.
    pub failing: Mutex<Option<String>>,
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
        let m = self.aggregates.lock().unwrap_or_else(|e| e.into_inner());
        Ok(keys
            .iter()
            .filter_map(|k| m.get(k).map(|v| (k.clone(), v.clone())))
            .collect())
    }

    async fn put_aggregate(
        &self,
        item: &AggregateItem,
        expected: Option<u64>,
    ) -> Result<Written, StoreError> {
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
        let mut m = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        let d = m
            .entry(u.device.clone())
            .or_insert_with(|| DeviceItem::new(u.device.clone(), DeviceStatus::Active, u.now));
        if d.last_seen_at != u.expected_last_seen {
            return Ok(Written::Conflict);
        }
        d.last_seen_at = Some(u.last_seen_at);
        d.latest = Some(u.latest.clone());
        if let Some(o) = &u.open_alerts {
            d.open_alerts = o.clone();
        }
        let mut a = self.alerts.lock().unwrap_or_else(|e| e.into_inner());
        for w in alerts {
            let item = match w {
                AlertWrite::Create(x) | AlertWrite::Update { after: x, .. } => x,
            };
            a.insert(item.alert_id.clone(), (**item).clone());
        }
        Ok(Written::Ok {
            units: 1.0 + alerts.len() as f64,
        })
    }
}

impl AlertStore for FakeStore {
    async fn get_alerts(
        &self,
        _device: &DeviceId,
        ids: &[AlertId],
    ) -> Result<HashMap<AlertId, AlertItem>, StoreError> {
        let m = self.alerts.lock().unwrap_or_else(|e| e.into_inner());
        Ok(ids
            .iter()
            .filter_map(|k| m.get(k).map(|v| (k.clone(), v.clone())))
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
        Ok(m.iter()
            .filter(|(d, _)| d == device)
            .flat_map(|(_, r)| r.iter())
            .filter(|(t, _)| *t >= from && *t <= to)
            .cloned()
            .collect())
    }
}
