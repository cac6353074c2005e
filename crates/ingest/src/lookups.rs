//! The reads ingest needs, one small trait each, with their DynamoDB implementations, and the
//! injected clock. Writes go through [`tidemark_store::batch::BatchWriteApi`].

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use tidemark_schema::keys::{CONFIG_PK, SHARDS_PREFIX};
use tidemark_schema::table::attr;
use tidemark_schema::{DeviceId, EntityKey, ShardConfigItem, Timestamp};
use tidemark_store::{Item, StoreError, from_item};

/// The time readings are validated against. Injected so tests of the bounds are exact.
pub trait Clock: Send + Sync {
    fn now(&self) -> Timestamp;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that says what it is told (tests, replays of recorded traffic).
#[derive(Debug)]
pub struct FixedClock(AtomicI64);

impl FixedClock {
    pub fn new(at: Timestamp) -> Self {
        FixedClock(AtomicI64::new(at.epoch_micros()))
    }

    pub fn set(&self, at: Timestamp) {
        self.0.store(at.epoch_micros(), Ordering::Relaxed);
    }
}

impl Clock for FixedClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_epoch_micros(self.0.load(Ordering::Relaxed)).unwrap_or(Timestamp::MIN)
    }
}

/// Hot devices' shard counts: the whole `CONFIG` partition. Only hot devices have an item
/// there, so one cached query answers for the whole fleet and an ordinary device costs no
/// read at all.
pub trait ShardConfigSource: Send + Sync {
    fn load_shard_configs(
        &self,
    ) -> impl Future<Output = Result<Vec<ShardConfigItem>, StoreError>> + Send;
}

/// Which devices are registered (only asked with `UNKNOWN_DEVICES=quarantine`).
pub trait DeviceDirectory: Send + Sync {
    fn existing_devices(
        &self,
        ids: &[DeviceId],
    ) -> impl Future<Output = Result<HashSet<DeviceId>, StoreError>> + Send;
}

/// Both reads against the table.
#[derive(Debug, Clone)]
pub struct DynamoLookups {
    client: Client,
    table: String,
}

impl DynamoLookups {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoLookups {
            client,
            table: table.into(),
        }
    }
}

impl ShardConfigSource for DynamoLookups {
    async fn load_shard_configs(&self) -> Result<Vec<ShardConfigItem>, StoreError> {
        let mut out = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("#pk = :pk AND begins_with(#sk, :prefix)")
                .expression_attribute_names("#pk", attr::PK)
                .expression_attribute_names("#sk", attr::SK)
                .expression_attribute_values(":pk", AttributeValue::S(CONFIG_PK.to_owned()))
                .expression_attribute_values(":prefix", AttributeValue::S(SHARDS_PREFIX.to_owned()))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(StoreError::sdk("Query"))?;
            for item in page.items.unwrap_or_default() {
                out.push(from_item(item)?);
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => return Ok(out),
            }
        }
    }
}

impl DeviceDirectory for DynamoLookups {
    async fn existing_devices(&self, ids: &[DeviceId]) -> Result<HashSet<DeviceId>, StoreError> {
        const MAX_KEYS: usize = 100;
        const MAX_ROUNDS: u32 = 8;
        let mut found = HashSet::new();
        for chunk in ids.chunks(MAX_KEYS) {
            let mut keys: Vec<Item> = chunk
                .iter()
                .map(|id| {
                    let k = EntityKey::Device(id.clone()).key();
                    HashMap::from([
                        (attr::PK.to_owned(), AttributeValue::S(k.pk)),
                        (attr::SK.to_owned(), AttributeValue::S(k.sk)),
                    ])
                })
                .collect();
            let mut round = 0;
            while !keys.is_empty() {
                round += 1;
                if round > MAX_ROUNDS {
                    return Err(StoreError::Request {
                        operation: "BatchGetItem",
                        message: format!("{} keys still unprocessed", keys.len()),
                    });
                }
                let request = KeysAndAttributes::builder()
                    .set_keys(Some(std::mem::take(&mut keys)))
                    .projection_expression("#pk, #sk")
                    .expression_attribute_names("#pk", attr::PK)
                    .expression_attribute_names("#sk", attr::SK)
                    .build()
                    .map_err(|e| StoreError::Request {
                        operation: "BatchGetItem",
                        message: e.to_string(),
                    })?;
                let out = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, request)
                    .send()
                    .await
                    .map_err(StoreError::sdk("BatchGetItem"))?;
                for item in out
                    .responses
                    .and_then(|mut r| r.remove(&self.table))
                    .unwrap_or_default()
                {
                    if let (Some(AttributeValue::S(pk)), Some(AttributeValue::S(sk))) =
                        (item.get(attr::PK), item.get(attr::SK))
                        && let Ok(EntityKey::Device(id)) = EntityKey::parse(pk, sk)
                    {
                        found.insert(id);
                    }
                }
                keys = out
                    .unprocessed_keys
                    .and_then(|mut u| u.remove(&self.table))
                    .map(|k| k.keys)
                    .unwrap_or_default();
                if !keys.is_empty() {
                    tokio::time::sleep(Duration::from_millis(10 << round.min(6))).await;
                }
            }
        }
        Ok(found)
    }
}
