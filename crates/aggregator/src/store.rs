//! The table operations the aggregator needs, one small trait each, and their DynamoDB
//! implementation. Every write asks for `ConsumedCapacity` (free) so the function can report
//! what it costs.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes, ReturnConsumedCapacity};
use tidemark_schema::table::attr;
use tidemark_schema::{
    AggregateItem, AlertId, AlertItem, DeviceId, DeviceItem, DeviceStatus, EntityKey, Key,
    LatestReading, MetricName, ReadingItem, ShardConfigItem, ShardHistory, Timestamp, field, keys,
};
use tidemark_store::{Item, StoreError, from_item, to_item};

use crate::alerts::AlertWrite;

/// How a conditional write ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Written {
    /// Done; the write request units it consumed (table and indexes).
    Ok { units: f64 },
    /// The condition failed: someone else changed the item since it was read.
    Conflict,
}

/// What the device item write changes.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceUpdate {
    pub device: DeviceId,
    /// `lastSeenAt` as read: the write's condition.
    pub expected_last_seen: Option<Timestamp>,
    pub last_seen_at: Timestamp,
    pub latest: LatestReading,
    /// `Some` when the set of open alerts changed.
    pub open_alerts: Option<BTreeMap<String, AlertId>>,
    /// `createdAt` of a device this write registers.
    pub now: Timestamp,
}

pub trait AggregateStore {
    /// Consistent reads; missing items are absent from the map.
    fn get_aggregates(
        &self,
        keys: &[Key],
    ) -> impl Future<Output = Result<HashMap<Key, AggregateItem>, StoreError>> + Send;
    /// Writes `item` if the stored version is still `expected` (`None`: no item yet).
    fn put_aggregate(
        &self,
        item: &AggregateItem,
        expected: Option<u64>,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send;
}

pub trait DeviceStore {
    fn get_devices(
        &self,
        ids: &[DeviceId],
    ) -> impl Future<Output = Result<HashMap<DeviceId, DeviceItem>, StoreError>> + Send;
    /// Sets `lastSeenAt`/`latest` (and `openAlerts`) if `lastSeenAt` is still as read,
    /// registering an unknown device on the way (`if_not_exists`, no extra write).
    fn update_device(
        &self,
        u: &DeviceUpdate,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send;
}

pub trait AlertStore {
    fn get_alerts(
        &self,
        device: &DeviceId,
        ids: &[AlertId],
    ) -> impl Future<Output = Result<HashMap<AlertId, AlertItem>, StoreError>> + Send;
    fn write_alert(
        &self,
        w: &AlertWrite,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send;
}

pub trait ReadingStore {
    /// Every reading of `device` in `[from, to]` across all its shard partitions, expired or
    /// not (aggregates keep what TTL later deletes).
    fn readings_between(
        &self,
        device: &DeviceId,
        from: Timestamp,
        to: Timestamp,
    ) -> impl Future<Output = Result<Vec<(Timestamp, BTreeMap<MetricName, f64>)>, StoreError>> + Send;
}

/// All four, for the handler.
pub trait Store: AggregateStore + DeviceStore + AlertStore + ReadingStore + Sync {}
impl<T: AggregateStore + DeviceStore + AlertStore + ReadingStore + Sync> Store for T {}

/// The DynamoDB implementation.
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    table: String,
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn key_item(k: &Key) -> Item {
    HashMap::from([
        (attr::PK.to_owned(), s(&k.pk)),
        (attr::SK.to_owned(), s(&k.sk)),
    ])
}

fn item_key(item: &Item) -> Option<Key> {
    match (item.get(attr::PK), item.get(attr::SK)) {
        (Some(AttributeValue::S(pk)), Some(AttributeValue::S(sk))) => Some(Key {
            pk: pk.clone(),
            sk: sk.clone(),
        }),
        _ => None,
    }
}

fn units(c: Option<&aws_sdk_dynamodb::types::ConsumedCapacity>) -> f64 {
    c.and_then(|c| c.capacity_units()).unwrap_or(0.0)
}

fn av<T: serde::Serialize>(v: &T) -> Result<AttributeValue, StoreError> {
    Ok(serde_dynamo::to_attribute_value(v)?)
}

fn request_err(operation: &'static str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Request {
        operation,
        message: e.to_string(),
    }
}

/// Maps a failed condition to [`Written::Conflict`], anything else to an error.
fn conditional<T>(
    r: Result<T, StoreError>,
    units_of: impl FnOnce(&T) -> f64,
) -> Result<Written, StoreError> {
    match r {
        Ok(out) => Ok(Written::Ok {
            units: units_of(&out),
        }),
        Err(e) if e.is_conditional_check_failed() => Ok(Written::Conflict),
        Err(e) => Err(e),
    }
}

impl DynamoStore {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoStore {
            client,
            table: table.into(),
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Consistent BatchGetItem of any number of keys, retrying unprocessed keys.
    async fn batch_get(&self, keys: &[Key]) -> Result<HashMap<Key, Item>, StoreError> {
        let mut out = HashMap::new();
        let mut unique: Vec<&Key> = keys.iter().collect();
        unique.sort();
        unique.dedup();
        for chunk in unique.chunks(100) {
            let mut pending = Some(
                KeysAndAttributes::builder()
                    .set_keys(Some(chunk.iter().map(|k| key_item(k)).collect()))
                    .consistent_read(true)
                    .build()
                    .map_err(|e| request_err("BatchGetItem", e))?,
            );
            let mut attempt = 0u32;
            while let Some(req) = pending.take() {
                let resp = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, req)
                    .send()
                    .await
                    .map_err(StoreError::sdk("BatchGetItem"))?;
                for item in resp
                    .responses
                    .and_then(|mut r| r.remove(&self.table))
                    .unwrap_or_default()
                {
                    if let Some(k) = item_key(&item) {
                        out.insert(k, item);
                    }
                }
                pending = resp
                    .unprocessed_keys
                    .and_then(|mut u| u.remove(&self.table))
                    .filter(|k| !k.keys().is_empty());
                if pending.is_some() {
                    attempt += 1;
                    let ms = 25u64 << attempt.min(8);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
            }
        }
        Ok(out)
    }

    async fn shard_history(&self, device: &DeviceId) -> Result<ShardHistory, StoreError> {
        let k = EntityKey::ShardConfig(device.clone()).key();
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key_item(&k)))
            .consistent_read(true)
            .send()
            .await
            .map_err(StoreError::sdk("GetItem"))?;
        match out.item {
            Some(i) => Ok(from_item::<ShardConfigItem>(i)?.epochs),
            None => Ok(ShardHistory::default()),
        }
    }
}

impl AggregateStore for DynamoStore {
    async fn get_aggregates(
        &self,
        keys: &[Key],
    ) -> Result<HashMap<Key, AggregateItem>, StoreError> {
        let items = self.batch_get(keys).await?;
        items
            .into_iter()
            .map(|(k, i)| Ok((k, from_item(i)?)))
            .collect()
    }

    async fn put_aggregate(
        &self,
        item: &AggregateItem,
        expected: Option<u64>,
    ) -> Result<Written, StoreError> {
        let req = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(to_item(item)?))
            .return_consumed_capacity(ReturnConsumedCapacity::Indexes);
        let req = match expected {
            None => req
                .condition_expression("attribute_not_exists(#pk)")
                .expression_attribute_names("#pk", attr::PK),
            Some(v) => req
                .condition_expression("#v = :v")
                .expression_attribute_names("#v", field::VERSION)
                .expression_attribute_values(":v", AttributeValue::N(v.to_string())),
        };
        conditional(req.send().await.map_err(StoreError::sdk("PutItem")), |o| {
            units(o.consumed_capacity())
        })
    }
}

impl DeviceStore for DynamoStore {
    async fn get_devices(
        &self,
        ids: &[DeviceId],
    ) -> Result<HashMap<DeviceId, DeviceItem>, StoreError> {
        let keys: Vec<Key> = ids
            .iter()
            .map(|d| EntityKey::Device(d.clone()).key())
            .collect();
        let items = self.batch_get(&keys).await?;
        let mut out = HashMap::new();
        for (_, i) in items {
            let d: DeviceItem = from_item(i)?;
            out.insert(d.device_id.clone(), d);
        }
        Ok(out)
    }

    async fn update_device(&self, u: &DeviceUpdate) -> Result<Written, StoreError> {
        let key = EntityKey::Device(u.device.clone()).key();
        let mut set = vec![
            "#seen = :seen",
            "#latest = :latest",
            "#created = if_not_exists(#created, :now)",
            "#status = if_not_exists(#status, :status)",
            "#id = if_not_exists(#id, :id)",
            "#g1pk = if_not_exists(#g1pk, :g1pk)",
            "#g1sk = if_not_exists(#g1sk, :g1sk)",
        ];
        let mut req = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key_item(&key)))
            .return_consumed_capacity(ReturnConsumedCapacity::Indexes)
            .expression_attribute_names("#seen", field::LAST_SEEN_AT)
            .expression_attribute_names("#latest", field::LATEST)
            .expression_attribute_names("#created", field::CREATED_AT)
            .expression_attribute_names("#status", field::STATUS)
            .expression_attribute_names("#id", field::DEVICE_ID)
            .expression_attribute_names("#g1pk", attr::GSI1PK)
            .expression_attribute_names("#g1sk", attr::GSI1SK)
            .expression_attribute_values(":seen", av(&u.last_seen_at)?)
            .expression_attribute_values(":latest", av(&u.latest)?)
            .expression_attribute_values(":now", av(&u.now)?)
            .expression_attribute_values(":status", av(&DeviceStatus::Active)?)
            .expression_attribute_values(":id", av(&u.device)?)
            .expression_attribute_values(
                ":g1pk",
                s(keys::status_gsi1pk(DeviceStatus::Active, None)),
            )
            .expression_attribute_values(":g1sk", s(keys::device_gsi1sk(&u.device)));
        if let Some(open) = &u.open_alerts {
            set.push("#open = :open");
            req = req
                .expression_attribute_names("#open", field::OPEN_ALERTS)
                .expression_attribute_values(":open", av(open)?);
        }
        req = match u.expected_last_seen {
            None => req.condition_expression("attribute_not_exists(#seen)"),
            Some(t) => req
                .condition_expression("#seen = :expected")
                .expression_attribute_values(":expected", av(&t)?),
        };
        let req = req.update_expression(format!("SET {}", set.join(", ")));
        conditional(
            req.send().await.map_err(StoreError::sdk("UpdateItem")),
            |o| units(o.consumed_capacity()),
        )
    }
}

impl AlertStore for DynamoStore {
    async fn get_alerts(
        &self,
        device: &DeviceId,
        ids: &[AlertId],
    ) -> Result<HashMap<AlertId, AlertItem>, StoreError> {
        let keys: Vec<Key> = ids
            .iter()
            .map(|a| {
                EntityKey::Alert {
                    device: device.clone(),
                    alert: a.clone(),
                }
                .key()
            })
            .collect();
        let items = self.batch_get(&keys).await?;
        let mut out = HashMap::new();
        for (_, i) in items {
            let a: AlertItem = from_item(i)?;
            out.insert(a.alert_id.clone(), a);
        }
        Ok(out)
    }

    async fn write_alert(&self, w: &AlertWrite) -> Result<Written, StoreError> {
        match w {
            AlertWrite::Create(a) => {
                let req = self
                    .client
                    .put_item()
                    .table_name(&self.table)
                    .set_item(Some(to_item(a)?))
                    .return_consumed_capacity(ReturnConsumedCapacity::Indexes)
                    .condition_expression("attribute_not_exists(#pk)")
                    .expression_attribute_names("#pk", attr::PK);
                conditional(req.send().await.map_err(StoreError::sdk("PutItem")), |o| {
                    units(o.consumed_capacity())
                })
            }
            AlertWrite::Update { before, after } => {
                // Only what the aggregator owns: an acknowledgement the API wrote meanwhile
                // is kept, and the condition on the state time rejects a racing evaluator.
                let mut set = vec!["#value = :value", "#count = :count", "#last = :last"];
                let mut req = self
                    .client
                    .update_item()
                    .table_name(&self.table)
                    .set_key(Some(key_item(&Key {
                        pk: after.pk.clone(),
                        sk: after.sk.clone(),
                    })))
                    .return_consumed_capacity(ReturnConsumedCapacity::Indexes)
                    .expression_attribute_names("#value", field::VALUE)
                    .expression_attribute_names("#count", field::BREACH_COUNT)
                    .expression_attribute_names("#last", field::LAST_BREACH_AT)
                    .expression_attribute_names("#resolved", field::RESOLVED_AT)
                    .expression_attribute_values(":value", av(&after.value)?)
                    .expression_attribute_values(":count", av(&after.breach_count)?)
                    .expression_attribute_values(":last", av(&after.last_breach_at)?)
                    .expression_attribute_values(":before", av(&before.last_breach_at)?)
                    .condition_expression("#last = :before AND attribute_not_exists(#resolved)");
                let mut expr = String::new();
                if let Some(r) = after.resolved_at {
                    set.push("#resolved = :resolved");
                    set.push("#state = :state");
                    req = req
                        .expression_attribute_names("#state", field::STATE)
                        .expression_attribute_names("#g1pk", attr::GSI1PK)
                        .expression_attribute_names("#g1sk", attr::GSI1SK)
                        .expression_attribute_values(":resolved", av(&r)?)
                        .expression_attribute_values(":state", av(&after.state)?);
                    expr = " REMOVE #g1pk, #g1sk".to_owned();
                }
                let req = req.update_expression(format!("SET {}{expr}", set.join(", ")));
                conditional(
                    req.send().await.map_err(StoreError::sdk("UpdateItem")),
                    |o| units(o.consumed_capacity()),
                )
            }
        }
    }
}

impl ReadingStore for DynamoStore {
    async fn readings_between(
        &self,
        device: &DeviceId,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<Vec<(Timestamp, BTreeMap<MetricName, f64>)>, StoreError> {
        let shards = self.shard_history(device).await?.shards_over(from, to);
        let mut out = Vec::new();
        for shard in shards {
            let mut start: Option<Item> = None;
            loop {
                let resp = self
                    .client
                    .query()
                    .table_name(&self.table)
                    .consistent_read(true)
                    .key_condition_expression("#pk = :pk AND #sk BETWEEN :from AND :to")
                    .expression_attribute_names("#pk", attr::PK)
                    .expression_attribute_names("#sk", attr::SK)
                    .expression_attribute_values(":pk", s(keys::reading_pk(device, shard)))
                    .expression_attribute_values(":from", s(keys::reading_sk(from)))
                    .expression_attribute_values(":to", s(keys::reading_sk(to)))
                    .set_exclusive_start_key(start.take())
                    .send()
                    .await
                    .map_err(StoreError::sdk("Query"))?;
                for i in resp.items.unwrap_or_default() {
                    let r: ReadingItem = from_item(i)?;
                    if let Ok((reading, _)) = r.to_reading() {
                        out.push((reading.timestamp, reading.metrics));
                    }
                }
                match resp.last_evaluated_key {
                    Some(k) if !k.is_empty() => start = Some(k),
                    _ => break,
                }
            }
        }
        Ok(out)
    }
}
