//! The store operations the API needs, one small trait each, and the data they take and
//! give. Handlers see only these traits, so they run the same against DynamoDB Local or AWS
//! ([`crate::dynamo::DynamoStore`]) and against the in-memory store of [`crate::memory`].

use std::collections::HashMap;
use std::future::Future;

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::Value;
use tidemark_schema::table::attr;
use tidemark_schema::{
    CallerRateItem, DeviceId, DeviceItem, DeviceStatus, DeviceType, GatewayFor, Key, LayoutHistory,
    MetricName, Severity, TagHistory, TagIndexItem, Tags, Threshold, Timestamp, field, keys,
};
use tidemark_store::{Item, StoreError};

mod alerts;
pub use alerts::{
    AlertOutcome, AlertOwner, AlertWriter, ack_update, alert_state, snooze_update, unsnooze_update,
};

pub use tidemark_store::read::{Page, Place, QuerySpec, QueryStore, SkRange};

/// Every store trait's methods, for code holding a concrete store such as the metered one
/// handlers read through ([`crate::budget::Metered`]).
pub mod traits {
    pub use super::{
        AlertWriter as _, CallCounter as _, DeviceWriter as _, GetStore as _, LayoutWriter as _,
        QueryStore as _, TagWriter as _,
    };
}

pub trait GetStore {
    fn get(
        &self,
        key: Key,
        consistent: bool,
    ) -> impl Future<Output = Result<Option<Item>, StoreError>> + Send;

    /// Every existing item of `keys` (any order), however many calls that takes; keys the
    /// service leaves unprocessed are retried.
    fn batch_get(
        &self,
        keys: Vec<Key>,
    ) -> impl Future<Output = Result<Vec<Item>, StoreError>> + Send;
}

/// The user-settable part of a device (the body of `PUT /devices/{id}`).
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceRegistration {
    pub device_id: DeviceId,
    pub name: Option<String>,
    pub device_type: Option<DeviceType>,
    pub status: DeviceStatus,
    pub location: Option<Value>,
    pub firmware: Option<String>,
    pub thresholds: std::collections::BTreeMap<MetricName, Threshold>,
    /// Its alert rules over time (`None`: the fleet's `DEFAULT_RULES`; empty: none).
    pub rules: Option<Vec<tidemark_schema::RuleSpec>>,
    /// GSI1 status partition for the device (`DEVICE_STATUS#<status>[#<n>]`).
    pub status_shard: Option<u16>,
    /// Its offline window (absent: the fleet's; 0: never offline).
    pub offline_after_seconds: Option<u32>,
    pub offline_severity: Option<Severity>,
    /// Keep quantile sketches in its rollups.
    pub percentiles: bool,
    /// What the request asks of its tags (the handler applies it to the tag history).
    pub tag_request: crate::validate::TagRequest,
    /// The latest declared tags and when they take effect, as the tag history holds them
    /// once the request's change is applied: the device item's `tags` and `tagsFrom`.
    pub tags: Tags,
    pub tags_from: Option<Timestamp>,
    /// The devices it may send readings for (`DEVICE_IDENTITY=partition-key`).
    pub gateway_for: GatewayFor,
    /// Its cap on distinct metric names per UTC day (absent: the default).
    pub max_metrics_per_day: Option<u32>,
}

/// A device as written, and whether the write created it.
#[derive(Debug, Clone, PartialEq)]
pub struct PutDevice {
    pub device: DeviceItem,
    pub created: bool,
}

pub trait DeviceWriter {
    /// Creates or replaces the registration, keeping `createdAt` (set once) and what the
    /// pipeline maintains (`lastSeenAt`, `latest`); returns the item as written.
    fn put_device(
        &self,
        reg: &DeviceRegistration,
        now: Timestamp,
    ) -> impl Future<Output = Result<PutDevice, StoreError>> + Send;
}

pub trait LayoutWriter {
    /// Stores `history` as the layout (shard and packing) history of `device` if the stored
    /// one is still at `version` (0: never written), bumping the version; `false` when
    /// another change landed first.
    fn replace_layouts(
        &self,
        device: &DeviceId,
        history: &LayoutHistory,
        version: u64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

pub trait TagWriter {
    /// Stores `history` as the tag history of `device` if the stored one is still at
    /// `version` (0: never written), bumping the version; `false` when another change landed
    /// first.
    fn replace_tags(
        &self,
        device: &DeviceId,
        history: &TagHistory,
        version: u64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Puts the index entries `puts` and deletes those at `deletes`.
    fn write_tag_index(
        &self,
        puts: &[TagIndexItem],
        deletes: &[Key],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// Per-caller rate limits ([`crate::rate`]).
pub trait CallCounter {
    /// Counts one request in the caller's minute `count` (its key and TTL; `requests` is
    /// ignored) unless `limit` requests are counted there already: `false`, and nothing
    /// written, when they are. One conditional write, whatever the answer.
    fn count_call(
        &self,
        count: &CallerRateItem,
        limit: u32,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// Everything the handlers use.
pub trait Store:
    QueryStore
    + GetStore
    + DeviceWriter
    + AlertWriter
    + LayoutWriter
    + TagWriter
    + CallCounter
    + Send
    + Sync
{
}
impl<
    T: QueryStore
        + GetStore
        + DeviceWriter
        + AlertWriter
        + LayoutWriter
        + TagWriter
        + CallCounter
        + Send
        + Sync,
> Store for T
{
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

/// The attribute changes of a device registration, as data (the DynamoDB store renders
/// them as one UpdateItem expression; the in-memory store applies them directly).
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    pub set: Vec<(&'static str, AttributeValue)>,
    /// Set only when the attribute is absent (`if_not_exists`).
    pub set_if_absent: Vec<(&'static str, AttributeValue)>,
    pub remove: Vec<&'static str>,
}

impl Update {
    /// `(UpdateExpression, names, values)` with a placeholder for every name and value.
    pub fn expression(
        &self,
    ) -> (
        String,
        HashMap<String, String>,
        HashMap<String, AttributeValue>,
    ) {
        let mut names = HashMap::new();
        let mut values = HashMap::new();
        let mut set = Vec::new();
        for (i, (a, v)) in self.set.iter().enumerate() {
            names.insert(format!("#s{i}"), (*a).to_owned());
            values.insert(format!(":s{i}"), v.clone());
            set.push(format!("#s{i} = :s{i}"));
        }
        for (i, (a, v)) in self.set_if_absent.iter().enumerate() {
            names.insert(format!("#n{i}"), (*a).to_owned());
            values.insert(format!(":n{i}"), v.clone());
            set.push(format!("#n{i} = if_not_exists(#n{i}, :n{i})"));
        }
        let mut clauses = Vec::new();
        if !set.is_empty() {
            clauses.push(format!("SET {}", set.join(", ")));
        }
        if !self.remove.is_empty() {
            let mut rm = Vec::new();
            for (i, a) in self.remove.iter().enumerate() {
                names.insert(format!("#r{i}"), (*a).to_owned());
                rm.push(format!("#r{i}"));
            }
            clauses.push(format!("REMOVE {}", rm.join(", ")));
        }
        (clauses.join(" "), names, values)
    }

    /// What DynamoDB does with this update to `item`.
    pub fn apply(&self, item: &mut Item) {
        for (a, v) in &self.set {
            item.insert((*a).to_owned(), v.clone());
        }
        for (a, v) in &self.set_if_absent {
            item.entry((*a).to_owned()).or_insert_with(|| v.clone());
        }
        for a in &self.remove {
            item.remove(*a);
        }
    }
}

/// `SET` the registration, keys and `updatedAt`; `createdAt` only if absent; `REMOVE`
/// optional fields the registration leaves out (PUT replaces the registration, never
/// what the pipeline maintains).
pub fn device_update(reg: &DeviceRegistration, now: Timestamp) -> Result<Update, StoreError> {
    let mut u = Update {
        set: Vec::new(),
        set_if_absent: vec![(field::CREATED_AT, s(now.to_string()))],
        remove: Vec::new(),
    };
    let mut put = |name: &'static str, v: Option<AttributeValue>| match v {
        Some(v) => u.set.push((name, v)),
        None => u.remove.push(name),
    };
    put(
        attr::GSI1PK,
        Some(s(keys::status_gsi1pk(reg.status, reg.status_shard))),
    );
    put(attr::GSI1SK, Some(s(keys::device_gsi1sk(&reg.device_id))));
    put(field::DEVICE_ID, Some(s(reg.device_id.to_string())));
    put(field::STATUS, Some(s(reg.status.as_str())));
    put(field::NAME, reg.name.clone().map(s));
    put(field::TYPE, reg.device_type.map(|t| av(&t)).transpose()?);
    put(field::LOCATION, reg.location.as_ref().map(av).transpose()?);
    put(field::FIRMWARE, reg.firmware.clone().map(s));
    put(
        field::THRESHOLDS,
        if reg.thresholds.is_empty() {
            None
        } else {
            Some(av(&reg.thresholds)?)
        },
    );
    // An empty list is stored as one, "no rules", apart from an absent attribute, "the
    // fleet's".
    put(field::RULES, reg.rules.as_ref().map(av).transpose()?);
    put(
        field::OFFLINE_AFTER_SECONDS,
        reg.offline_after_seconds
            .map(|n| AttributeValue::N(n.to_string())),
    );
    put(
        field::OFFLINE_SEVERITY,
        reg.offline_severity.map(|v| s(v.as_str())),
    );
    put(
        field::PERCENTILES,
        reg.percentiles.then_some(AttributeValue::Bool(true)),
    );
    put(
        field::TAGS,
        if reg.tags.is_empty() {
            None
        } else {
            Some(av(&reg.tags)?)
        },
    );
    put(field::TAGS_FROM, reg.tags_from.map(|t| s(t.to_string())));
    put(
        field::GATEWAY_FOR,
        if reg.gateway_for.is_empty() {
            None
        } else {
            Some(av(&reg.gateway_for)?)
        },
    );
    put(
        field::MAX_METRICS_PER_DAY,
        reg.max_metrics_per_day
            .map(|n| AttributeValue::N(n.to_string())),
    );
    put(field::UPDATED_AT, Some(s(now.to_string())));
    Ok(u)
}

/// Any serde value as an attribute value.
fn av<T: serde::Serialize + ?Sized>(v: &T) -> Result<AttributeValue, StoreError> {
    Ok(serde_dynamo::to_attribute_value(v)?)
}
