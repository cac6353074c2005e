//! The reads ingest needs, one small trait each, with their DynamoDB implementations. Writes go through [`tidemark_store::write::batch::BatchWriteApi`].

use std::collections::{BTreeSet, HashMap, HashSet};
use std::future::Future;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use tidemark_schema::keys::CONFIG_PK;
use tidemark_schema::table::attr;
use tidemark_schema::{
    Day, DeviceId, EntityKey, GatewayFor, LayoutHistory, LayoutHistoryItem, MAX_METRICS_PER_DAY,
    MetricName, MetricNamesItem, field,
};
use tidemark_store::batch_get::{GetOptions, batch_get, key_of};
use tidemark_store::{Item, StoreError, from_stored};

/// Layout histories: the whole `CONFIG` partition, the fleet's default layout and the
/// devices with a shard count or layout of their own. Only those devices have an item there,
/// so one cached query answers for the whole fleet and an ordinary device costs no read at
/// all. Each item comes back parsed or as [`StoreError::Unreadable`]: one bad item must not
/// stop ingest.
pub trait LayoutHistorySource: Send + Sync {
    fn load_layout_histories(
        &self,
    ) -> impl Future<Output = Result<Vec<Result<LayoutHistoryItem, StoreError>>, StoreError>> + Send;

    /// Replaces the fleet's default layout history if its version is still `version` (0: none
    /// stored); `Ok(false)` when another container changed it first.
    fn replace_default_layout(
        &self,
        history: &LayoutHistory,
        version: u64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// A day's metric names.
pub type Names = BTreeSet<MetricName>;

/// The condition a write of names is made under: the set is absent, or holds at most (or
/// exactly) this many names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Room {
    /// `attribute_not_exists(names) OR size(names) <= n`: every name added still fits.
    AtMost(usize),
    /// `attribute_not_exists(names) OR size(names) = n`: the set is the one just read.
    Exactly(usize),
}

impl Room {
    /// Whether a set of `held` names meets the condition (`None`: no set).
    pub fn holds(self, held: Option<usize>) -> bool {
        match (self, held) {
            (_, None) => true,
            (Room::AtMost(n), Some(h)) => h <= n,
            (Room::Exactly(n), Some(h)) => h == n,
        }
    }
}

/// Which devices are registered (only asked with `UNKNOWN_DEVICES=quarantine`), and which
/// devices a gateway speaks for (only asked with `DEVICE_IDENTITY=partition-key`, for a
/// record naming a device other than its partition key).
pub trait DeviceDirectory: Send + Sync {
    fn existing_devices(
        &self,
        ids: &[DeviceId],
    ) -> impl Future<Output = Result<HashSet<DeviceId>, StoreError>> + Send;

    /// The `gatewayFor` of each of `ids` that is registered with one (absent: none). The
    /// default knows of no gateway.
    fn gateway_lists(
        &self,
        ids: &[DeviceId],
    ) -> impl Future<Output = Result<HashMap<DeviceId, GatewayFor>, StoreError>> + Send {
        let _ = ids;
        async { Ok(HashMap::new()) }
    }

    /// The `maxMetricsPerDay` of each of `ids` that sets one (absent: the default cap). The
    /// default sets none.
    fn metric_caps(
        &self,
        ids: &[DeviceId],
    ) -> impl Future<Output = Result<HashMap<DeviceId, u32>, StoreError>> + Send {
        let _ = ids;
        async { Ok(HashMap::new()) }
    }

    /// Adds `new` to the device's metric names of `day` if the set meets `room`
    /// ([`crate::metric_cap`]); the whole set afterwards, or `None` when the condition failed.
    /// The default keeps no set: every write succeeds, holding what it adds.
    fn add_metric_names(
        &self,
        device: &DeviceId,
        day: Day,
        new: &Names,
        room: Room,
    ) -> impl Future<Output = Result<Option<Names>, StoreError>> + Send {
        let _ = (device, day, room);
        let all = new.clone();
        async { Ok(Some(all)) }
    }

    /// The device's metric names of `day`, read strongly consistent (empty: none).
    fn read_metric_names(
        &self,
        device: &DeviceId,
        day: Day,
    ) -> impl Future<Output = Result<Names, StoreError>> + Send {
        let _ = (device, day);
        async { Ok(Names::new()) }
    }
}

/// A device item's `maxMetricsPerDay`, when it is a number in 1..=[`MAX_METRICS_PER_DAY`]
/// (another value, written by another tool, counts as none).
pub fn metric_cap(item: &Item) -> Option<u32> {
    let n = item.get(field::MAX_METRICS_PER_DAY)?.as_n().ok()?;
    n.parse::<u32>()
        .ok()
        .filter(|n| (1..=MAX_METRICS_PER_DAY).contains(n))
}

/// A device item's `gatewayFor`, read leniently: ids that do not parse are skipped, and a
/// list past [`tidemark_schema::MAX_GATEWAY_FOR`] (written by another tool) counts as none.
pub fn gateway_list(item: &Item) -> GatewayFor {
    let Some(AttributeValue::L(ids)) = item.get(field::GATEWAY_FOR) else {
        return GatewayFor::default();
    };
    let ids = ids
        .iter()
        .filter_map(|v| v.as_s().ok())
        .filter_map(|s| DeviceId::new(s).ok());
    GatewayFor::new(ids).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "a device's gatewayFor is unreadable; it speaks for no other");
        GatewayFor::default()
    })
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

impl LayoutHistorySource for DynamoLookups {
    async fn load_layout_histories(
        &self,
    ) -> Result<Vec<Result<LayoutHistoryItem, StoreError>>, StoreError> {
        let mut out = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("#pk = :pk")
                .expression_attribute_names("#pk", attr::PK)
                .expression_attribute_values(":pk", AttributeValue::S(CONFIG_PK.to_owned()))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(StoreError::sdk("Query"))?;
            out.extend(page.items.unwrap_or_default().into_iter().map(from_stored));
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => return Ok(out),
            }
        }
    }

    async fn replace_default_layout(
        &self,
        history: &LayoutHistory,
        version: u64,
    ) -> Result<bool, StoreError> {
        tidemark_store::write::layout_change::replace_history(
            &self.client,
            &self.table,
            &EntityKey::DefaultLayout.key(),
            history,
            version,
        )
        .await
    }
}

impl DynamoLookups {
    /// The registered devices' items among `ids` (eventually consistent: gateway lists and
    /// caps are trusted for the device cache's lifetime anyway).
    async fn device_items(&self, ids: &[DeviceId]) -> Result<Vec<(DeviceId, Item)>, StoreError> {
        let keys: Vec<_> = ids
            .iter()
            .map(|id| EntityKey::Device(id.clone()).key())
            .collect();
        let options = GetOptions {
            consistent: false,
            keys_only: false,
        };
        let items = batch_get(&self.client, &self.table, &keys, options).await?;
        Ok(items
            .into_iter()
            .filter_map(|item| {
                let k = key_of(&item)?;
                match EntityKey::parse(&k.pk, &k.sk) {
                    Ok(EntityKey::Device(id)) => Some((id, item)),
                    _ => None,
                }
            })
            .collect())
    }
}

impl DeviceDirectory for DynamoLookups {
    async fn existing_devices(&self, ids: &[DeviceId]) -> Result<HashSet<DeviceId>, StoreError> {
        let keys: Vec<_> = ids
            .iter()
            .map(|id| EntityKey::Device(id.clone()).key())
            .collect();
        let options = GetOptions {
            consistent: false,
            keys_only: true,
        };
        let items = batch_get(&self.client, &self.table, &keys, options).await?;
        Ok(items
            .iter()
            .filter_map(key_of)
            .filter_map(|k| match EntityKey::parse(&k.pk, &k.sk) {
                Ok(EntityKey::Device(id)) => Some(id),
                _ => None,
            })
            .collect())
    }
    async fn gateway_lists(
        &self,
        ids: &[DeviceId],
    ) -> Result<HashMap<DeviceId, GatewayFor>, StoreError> {
        Ok(self
            .device_items(ids)
            .await?
            .iter()
            .map(|(id, item)| (id.clone(), gateway_list(item)))
            .filter(|(_, g)| !g.is_empty())
            .collect())
    }

    async fn metric_caps(&self, ids: &[DeviceId]) -> Result<HashMap<DeviceId, u32>, StoreError> {
        Ok(self
            .device_items(ids)
            .await?
            .iter()
            .filter_map(|(id, item)| Some((id.clone(), metric_cap(item)?)))
            .collect())
    }

    async fn add_metric_names(
        &self,
        device: &DeviceId,
        day: Day,
        new: &Names,
        room: Room,
    ) -> Result<Option<Names>, StoreError> {
        if new.is_empty() {
            return self.read_metric_names(device, day).await.map(Some);
        }
        let item = MetricNamesItem::new(device, day);
        let (condition, n) = match room {
            Room::AtMost(n) => ("attribute_not_exists(#names) OR size(#names) <= :n", n),
            Room::Exactly(n) => ("attribute_not_exists(#names) OR size(#names) = :n", n),
        };
        let out = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(attr::PK, AttributeValue::S(item.pk))
            .key(attr::SK, AttributeValue::S(item.sk))
            .update_expression("ADD #names :new SET #ttl = :ttl")
            .condition_expression(condition)
            .expression_attribute_names("#names", field::NAMES)
            .expression_attribute_names("#ttl", attr::TTL)
            .expression_attribute_values(
                ":new",
                AttributeValue::Ss(new.iter().map(|m| m.as_str().to_owned()).collect()),
            )
            .expression_attribute_values(":n", AttributeValue::N(n.to_string()))
            .expression_attribute_values(":ttl", AttributeValue::N(item.ttl.to_string()))
            .return_values(ReturnValue::UpdatedNew)
            .send()
            .await
            .map_err(StoreError::sdk("UpdateItem"));
        match out {
            Ok(out) => Ok(Some(names_of(out.attributes.as_ref()))),
            Err(e) if e.is_conditional_check_failed() => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn read_metric_names(&self, device: &DeviceId, day: Day) -> Result<Names, StoreError> {
        let key = EntityKey::MetricNames {
            device: device.clone(),
            day,
        }
        .key();
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(attr::PK, AttributeValue::S(key.pk))
            .key(attr::SK, AttributeValue::S(key.sk))
            .consistent_read(true)
            .projection_expression("#names")
            .expression_attribute_names("#names", field::NAMES)
            .send()
            .await
            .map_err(StoreError::sdk("GetItem"))?;
        Ok(names_of(out.item.as_ref()))
    }
}

/// The `names` string set of an item (names that do not parse are left out: they were
/// written by another tool, and no reading can carry them).
fn names_of(item: Option<&Item>) -> Names {
    match item.and_then(|i| i.get(field::NAMES)) {
        Some(AttributeValue::Ss(ns)) => ns.iter().filter_map(|n| MetricName::new(n).ok()).collect(),
        _ => Names::new(),
    }
}
