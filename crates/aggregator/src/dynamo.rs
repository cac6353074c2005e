//! The DynamoDB implementation of the aggregator's store traits. Every write asks for
//! `ConsumedCapacity` (free) so the function can report what it costs.

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{
    AttributeValue, Put, ReturnConsumedCapacity, TransactWriteItem, Update,
};
use tidemark_schema::table::attr;
use tidemark_schema::{
    AggregateItem, AlertId, AlertItem, Bucket, DeviceId, DeviceItem, DeviceStatus, EntityKey, Key,
    LatestReading, LayoutHistory, TagCountItem, Timestamp, field, keys,
};
use tidemark_store::batch_get::{GetOptions, batch_get, key_item, key_of};
use tidemark_store::limits::{MAX_TRANSACT_ACTIONS, too_many_actions};
use tidemark_store::read::{Queries, Walked};
use tidemark_store::write::tag_counts::count_update;
use tidemark_store::{Item, StoreError, from_stored, to_item};

use crate::alerting::write::AlertWrite;
use crate::offline::upkeep::WatchKeys;
use crate::rollups::combine::{BucketReadings, BucketSummary};
use crate::store::{
    AggregateStore, AlertStore, DeviceStore, DeviceUpdate, HeartbeatStore, ReadingStore,
    SetAsideStore, Written,
};

/// The DynamoDB implementation.
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    table: String,
    queries: Queries,
    /// The devices' tag histories this container read, each trusted for the layout cache's
    /// default time (group partials, [`crate::groups`]).
    pub(crate) tag_book: std::sync::Arc<std::sync::Mutex<tidemark_store::tags::TagBook>>,
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
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
        let table = table.into();
        DynamoStore {
            queries: Queries::new(client.clone(), table.clone()),
            client,
            table,
            tag_book: std::sync::Arc::new(std::sync::Mutex::new(
                tidemark_store::tags::TagBook::for_lead(tidemark_schema::LayoutLead::default()),
            )),
        }
    }

    /// The store of a deployment whose tag changes are announced `lead` ahead (its
    /// `LAYOUT_CACHE_SECONDS` and `MAX_FUTURE_SECONDS`): how long its tag cache serves.
    pub fn with_tag_lead(self, lead: tidemark_schema::LayoutLead) -> Self {
        DynamoStore {
            tag_book: std::sync::Arc::new(std::sync::Mutex::new(
                tidemark_store::tags::TagBook::for_lead(lead),
            )),
            ..self
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    /// Consistent BatchGetItem of any number of keys, by key.
    async fn batch_get(&self, keys: &[Key]) -> Result<HashMap<Key, Item>, StoreError> {
        let options = GetOptions {
            consistent: true,
            keys_only: false,
        };
        let items = batch_get(&self.client, &self.table, keys, options).await?;
        Ok(items
            .into_iter()
            .filter_map(|item| Some((key_of(&item)?, item)))
            .collect())
    }

    /// The device's layout over time: its own shard and layout epochs over the fleet's
    /// default (consistent read; none stored: single items in one partition).
    pub async fn layout_history(&self, device: &DeviceId) -> Result<LayoutHistory, StoreError> {
        let (h, _) =
            tidemark_store::layouts::device_history(&self.client, &self.table, device, true)
                .await?;
        Ok(h)
    }

    /// Hands the readings of `device` in `[from, to]` to `visit` in time order (newest first
    /// if asked), at most `limit` of them, through the one reader of stored readings
    /// ([`tidemark_store::read::walk_readings`]) over the device's layout history.
    pub async fn walk_readings(
        &self,
        device: &DeviceId,
        from: Timestamp,
        to: Timestamp,
        newest_first: bool,
        limit: Option<usize>,
        visit: impl FnMut(Timestamp, std::collections::BTreeMap<tidemark_schema::MetricName, f64>),
    ) -> Result<Walked, StoreError> {
        let history = self.layout_history(device).await?;
        tidemark_store::read::walk_readings(
            &self.queries,
            device,
            &history,
            from,
            to,
            newest_first,
            limit,
            visit,
        )
        .await
    }
}

impl AggregateStore for DynamoStore {
    async fn mark_export_dirty(
        &self,
        hours: &[Timestamp],
        now: Timestamp,
    ) -> Result<(), StoreError> {
        for hour in hours {
            let key = key_item(&EntityKey::ExportDirty(*hour).key());
            self.client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(key))
                .update_expression("SET #hour = :hour, #at = :now ADD #marks :one")
                .expression_attribute_names("#hour", field::HOUR)
                .expression_attribute_names("#at", field::MARKED_AT)
                .expression_attribute_names("#marks", field::MARKS)
                .expression_attribute_values(":hour", av(hour)?)
                .expression_attribute_values(":now", av(&now)?)
                .expression_attribute_values(":one", AttributeValue::N("1".into()))
                .send()
                .await
                .map_err(StoreError::sdk("UpdateItem"))?;
        }
        Ok(())
    }

    async fn get_aggregates(
        &self,
        keys: &[Key],
    ) -> Result<HashMap<Key, AggregateItem>, StoreError> {
        let items = self.batch_get(keys).await?;
        items
            .into_iter()
            .map(|(k, i)| Ok((k, from_stored(i)?)))
            .collect()
    }

    async fn aggregate_pages(
        &self,
        device: &DeviceId,
        bucket: Bucket,
    ) -> Result<Vec<AggregateItem>, StoreError> {
        let mut pages = self
            .client
            .query()
            .table_name(&self.table)
            .consistent_read(true)
            .key_condition_expression("#pk = :pk AND begins_with(#sk, :prefix)")
            .expression_attribute_names("#pk", attr::PK)
            .expression_attribute_names("#sk", attr::SK)
            .expression_attribute_values(":pk", s(keys::device_pk(device)))
            .expression_attribute_values(":prefix", s(keys::aggregate_page_sk_prefix(bucket)))
            .into_paginator()
            .items()
            .send();
        let mut out = Vec::new();
        while let Some(item) = pages.next().await {
            out.push(from_stored(item.map_err(StoreError::sdk("Query"))?)?);
        }
        Ok(out)
    }

    async fn hours_before(
        &self,
        device: &DeviceId,
        before: Bucket,
        n: usize,
    ) -> Result<Vec<AggregateItem>, StoreError> {
        crate::store::hours_before(&self.queries, device, before, n).await
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
            .set_item(Some(tidemark_store::aggregate_item(item)?))
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

/// One write's expressions, usable as a single request or as a transaction item.
#[derive(Default)]
struct Expr {
    update: String,
    condition: String,
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
}

impl Expr {
    fn name(mut self, k: &str, v: &str) -> Self {
        self.names.insert(k.to_owned(), v.to_owned());
        self
    }
    fn value(mut self, k: &str, v: AttributeValue) -> Self {
        self.values.insert(k.to_owned(), v);
        self
    }
}

fn device_expr(u: &DeviceUpdate) -> Result<Expr, StoreError> {
    let mut set = vec![
        "#seen = :seen",
        "#rule_states = :rule_states",
        "#ver = :ver",
        "#created = if_not_exists(#created, :now)",
        "#status = if_not_exists(#status, :status)",
        "#id = if_not_exists(#id, :id)",
        "#g1pk = if_not_exists(#g1pk, :g1pk)",
        "#g1sk = if_not_exists(#g1sk, :g1sk)",
    ];
    let next = u.expected_version.unwrap_or(0) + 1;
    let mut e = Expr::default()
        .name("#seen", field::LAST_SEEN_AT)
        .name("#rule_states", field::RULE_STATES)
        .name("#ver", field::VERSION)
        .name("#created", field::CREATED_AT)
        .name("#status", field::STATUS)
        .name("#id", field::DEVICE_ID)
        .name("#g1pk", attr::GSI1PK)
        .name("#g1sk", attr::GSI1SK)
        .value(":seen", av(&u.last_seen_at)?)
        .value(":rule_states", av(&u.rule_states)?)
        .value(":ver", AttributeValue::N(next.to_string()))
        .value(":now", av(&u.now)?)
        .value(":status", av(&DeviceStatus::Active)?)
        .value(":id", av(&u.device)?)
        .value(":g1pk", s(&u.status_gsi1pk))
        .value(":g1sk", s(keys::device_gsi1sk(&u.device)));
    if let Some(latest) = &u.latest {
        set.push("#latest = :latest");
        e = e
            .name("#latest", field::LATEST)
            .value(":latest", av(latest)?);
    }
    let mut remove: Vec<&str> = Vec::new();
    let o = &u.offline;
    if let Some(arrived) = &o.last_arrival_at {
        set.push("#arrived = :arrived");
        e = e
            .name("#arrived", field::LAST_ARRIVAL_AT)
            .value(":arrived", av(arrived)?);
    }
    match &o.watch {
        WatchKeys::Keep => {}
        WatchKeys::Set { pk, sk } => {
            set.push("#g2pk = :g2pk");
            set.push("#g2sk = :g2sk");
            e = e
                .name("#g2pk", attr::GSI2PK)
                .name("#g2sk", attr::GSI2SK)
                .value(":g2pk", s(pk))
                .value(":g2sk", s(sk));
        }
        WatchKeys::Remove => {
            remove.extend(["#g2pk", "#g2sk"]);
            e = e.name("#g2pk", attr::GSI2PK).name("#g2sk", attr::GSI2SK);
        }
    }
    if o.resolve.is_some() {
        remove.push("#offline");
        e = e.name("#offline", field::OFFLINE);
    }
    e.condition = match u.expected_version {
        None => "attribute_not_exists(#ver)".to_owned(),
        Some(v) => {
            e = e.value(":expected", AttributeValue::N(v.to_string()));
            "#ver = :expected".to_owned()
        }
    };
    e.update = format!("SET {}", set.join(", "));
    if !remove.is_empty() {
        e.update = format!("{} REMOVE {}", e.update, remove.join(", "));
    }
    Ok(e)
}

/// Only what the evaluator owns: an acknowledgement or snooze the API wrote meanwhile is
/// kept, and a resolved alert is never written again (save reopened: [`alert_reopen_expr`]).
fn alert_update_expr(after: &AlertItem) -> Result<Expr, StoreError> {
    let mut set = vec![
        "#value = :value",
        "#count = :count",
        "#last = :last",
        "#opened = :opened",
    ];
    let mut e = Expr::default()
        .name("#pk", attr::PK)
        .name("#opened", field::OPENED_AT)
        .value(":opened", av(&after.opened_at)?)
        .name("#value", field::VALUE)
        .name("#count", field::BREACH_COUNT)
        .name("#last", field::LAST_BREACH_AT)
        .name("#resolved", field::RESOLVED_AT)
        .value(":value", av(&after.value)?)
        .value(":count", av(&after.breach_count)?)
        .value(":last", av(&after.last_breach_at)?);
    e.condition = "attribute_exists(#pk) AND attribute_not_exists(#resolved)".to_owned();
    let mut remove = Vec::new();
    e = alert_tags(e, after, &mut set, &mut remove)?;
    if let Some(r) = after.resolved_at {
        set.push("#resolved = :resolved");
        set.push("#state = :state");
        e = e
            .name("#state", field::STATE)
            .name("#g1pk", attr::GSI1PK)
            .name("#g1sk", attr::GSI1SK)
            .value(":resolved", av(&r)?)
            .value(":state", av(&after.state)?);
        remove.extend(["#g1pk", "#g1sk"]);
    }
    e.update = format!("SET {}", set.join(", "));
    if !remove.is_empty() {
        e.update = format!("{} REMOVE {}", e.update, remove.join(", "));
    }
    Ok(e)
}

/// The device's tags the alert is written with ([`crate::alerting::plan::with_tags`]): set,
/// or removed when the device has none (as a new alert's item leaves them out).
fn alert_tags(
    e: Expr,
    after: &AlertItem,
    set: &mut Vec<&'static str>,
    remove: &mut Vec<&'static str>,
) -> Result<Expr, StoreError> {
    let e = e.name("#tags", field::TAGS);
    if after.tags.is_empty() {
        remove.push("#tags");
        return Ok(e);
    }
    set.push("#tags = :tags");
    Ok(e.value(":tags", av(&after.tags)?))
}

/// A resolved alert open again ([`AlertWrite::Reopen`]): the evaluator's attributes, its state,
/// its index keys back and its resolution removed, only while it is resolved as `before` was
/// (so an acknowledgement or snooze the API wrote meanwhile is a conflict, decided again).
fn alert_reopen_expr(before: &AlertItem, after: &AlertItem) -> Result<Expr, StoreError> {
    let mut set = vec![
        "#value = :value",
        "#count = :count",
        "#last = :last",
        "#opened = :opened",
        "#state = :state",
        "#g1pk = :g1pk",
        "#g1sk = :g1sk",
    ];
    let mut e = Expr::default()
        .name("#pk", attr::PK)
        .name("#opened", field::OPENED_AT)
        .name("#value", field::VALUE)
        .name("#count", field::BREACH_COUNT)
        .name("#last", field::LAST_BREACH_AT)
        .name("#resolved", field::RESOLVED_AT)
        .name("#state", field::STATE)
        .name("#g1pk", attr::GSI1PK)
        .name("#g1sk", attr::GSI1SK)
        .value(":opened", av(&after.opened_at)?)
        .value(":value", av(&after.value)?)
        .value(":count", av(&after.breach_count)?)
        .value(":last", av(&after.last_breach_at)?)
        .value(":state", av(&after.state)?)
        .value(":was_state", av(&before.state)?)
        .value(":was_resolved", av(&before.resolved_at)?)
        .value(":g1pk", s(keys::severity_gsi1pk(after.severity, &after.pk)))
        .value(":g1sk", s(keys::alert_gsi1sk(&after.alert_id)));
    e.condition =
        "attribute_exists(#pk) AND #resolved = :was_resolved AND #state = :was_state".to_owned();
    let mut remove = vec!["#resolved"];
    e = alert_tags(e, after, &mut set, &mut remove)?;
    e.update = format!("SET {} REMOVE {}", set.join(", "), remove.join(", "));
    Ok(e)
}

fn build<T, E: std::fmt::Display>(r: Result<T, E>, op: &'static str) -> Result<T, StoreError> {
    r.map_err(|e| request_err(op, e))
}

impl DynamoStore {
    fn transact_item(&self, w: &AlertWrite) -> Result<TransactWriteItem, StoreError> {
        const OP: &str = "TransactWriteItems";
        Ok(match w {
            AlertWrite::Create(a) => TransactWriteItem::builder()
                .put(build(
                    Put::builder()
                        .table_name(&self.table)
                        .set_item(Some(to_item(a)?))
                        .condition_expression("attribute_not_exists(#pk)")
                        .expression_attribute_names("#pk", attr::PK)
                        .build(),
                    OP,
                )?)
                .build(),
            AlertWrite::Update { after, .. } | AlertWrite::Reopen { after, .. } => {
                let e = match w {
                    AlertWrite::Reopen { before, .. } => alert_reopen_expr(before, after)?,
                    _ => alert_update_expr(after)?,
                };
                TransactWriteItem::builder()
                    .update(build(
                        Update::builder()
                            .table_name(&self.table)
                            .set_key(Some(key_item(&Key {
                                pk: after.pk.clone(),
                                sk: after.sk.clone(),
                            })))
                            .update_expression(e.update)
                            .condition_expression(e.condition)
                            .set_expression_attribute_names(Some(e.names))
                            .set_expression_attribute_values(Some(e.values))
                            .build(),
                        OP,
                    )?)
                    .build()
            }
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
            let d: DeviceItem = from_stored(i)?;
            out.insert(d.device_id.clone(), d);
        }
        Ok(out)
    }

    async fn keeps_sketches(&self, device: &DeviceId) -> Result<bool, StoreError> {
        let key = EntityKey::Device(device.clone()).key();
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key_item(&key)))
            .projection_expression("#p")
            .expression_attribute_names("#p", field::PERCENTILES)
            .send()
            .await;
        Ok(build(out, "GetItem")?
            .item
            .and_then(|i| i.get(field::PERCENTILES).cloned())
            .is_some_and(|v| v == AttributeValue::Bool(true)))
    }

    async fn commit_device(
        &self,
        u: &DeviceUpdate,
        alerts: &[AlertWrite],
    ) -> Result<Written, StoreError> {
        let key = key_item(&EntityKey::Device(u.device.clone()).key());
        let e = device_expr(u)?;
        if alerts.is_empty() && u.offline.uncount.is_empty() {
            let r = self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(key))
                .update_expression(e.update)
                .condition_expression(e.condition)
                .set_expression_attribute_names(Some(e.names))
                .set_expression_attribute_values(Some(e.values))
                .return_consumed_capacity(ReturnConsumedCapacity::Indexes)
                .send()
                .await
                .map_err(StoreError::sdk("UpdateItem"));
            return conditional(r, |o| units(o.consumed_capacity()));
        }
        let mut items = vec![
            TransactWriteItem::builder()
                .update(build(
                    Update::builder()
                        .table_name(&self.table)
                        .set_key(Some(key))
                        .update_expression(e.update)
                        .condition_expression(e.condition)
                        .set_expression_attribute_names(Some(e.names))
                        .set_expression_attribute_values(Some(e.values))
                        .build(),
                    "TransactWriteItems",
                )?)
                .build(),
        ];
        for w in alerts {
            items.push(self.transact_item(w)?);
        }
        // Back from a silence: out of the offline counts the watchdog put it in.
        for tag in &u.offline.uncount {
            let count = TagCountItem::key_of(tag, &u.device);
            items.push(
                TransactWriteItem::builder()
                    .update(count_update(
                        &self.table,
                        &count,
                        field::OFFLINE_MEMBERS,
                        -1,
                    )?)
                    .build(),
            );
        }
        self.transact(items).await
    }
}

/// The cancellation reasons of a cancelled transaction that no retry cures (DynamoDB's
/// `ValidationError`, `ItemCollectionSizeLimitExceeded`), as `code: message`.
fn refused_actions(e: &StoreError) -> Vec<String> {
    let Some(aws_sdk_dynamodb::Error::TransactionCanceledException(c)) = e.dynamo() else {
        return Vec::new();
    };
    c.cancellation_reasons()
        .iter()
        .filter_map(|r| {
            let code = r.code()?;
            matches!(code, "ValidationError" | "ItemCollectionSizeLimitExceeded")
                .then(|| format!("{code}: {}", r.message().unwrap_or_default()))
        })
        .collect()
}

impl DynamoStore {
    /// One `TransactWriteItems`, refused here past DynamoDB's limit (a request DynamoDB would
    /// refuse for ever must not be sent, or retried).
    async fn transact(&self, items: Vec<TransactWriteItem>) -> Result<Written, StoreError> {
        if items.len() > MAX_TRANSACT_ACTIONS {
            return Err(too_many_actions(items.len()));
        }
        let r = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .return_consumed_capacity(ReturnConsumedCapacity::Indexes)
            .send()
            .await
            .map_err(StoreError::sdk("TransactWriteItems"));
        match r {
            Ok(o) => Ok(Written::Ok {
                units: o
                    .consumed_capacity()
                    .iter()
                    .map(|c| c.capacity_units().unwrap_or(0.0))
                    .sum(),
            }),
            // An action DynamoDB refuses (an item the update would take past 400 KB, an item
            // collection past its limit) cancels the transaction the same way every time: a
            // permanent failure, not a race.
            Err(e) if !refused_actions(&e).is_empty() => Err(StoreError::Request {
                operation: "TransactWriteItems",
                message: refused_actions(&e).join("; "),
            }),
            // A failed condition or a concurrent transaction on one of the items: re-read
            // and decide again.
            Err(e)
                if matches!(
                    e.dynamo(),
                    Some(
                        aws_sdk_dynamodb::Error::TransactionCanceledException(_)
                            | aws_sdk_dynamodb::Error::TransactionConflictException(_)
                    )
                ) =>
            {
                Ok(Written::Conflict)
            }
            Err(e) => Err(e),
        }
    }
}

impl AlertStore for DynamoStore {
    async fn alerts_since(
        &self,
        device: &DeviceId,
        from: Timestamp,
    ) -> Result<HashMap<AlertId, AlertItem>, StoreError> {
        let (lo, hi) = keys::alert_sk_range_from(from);
        let mut pages = self
            .client
            .query()
            .table_name(&self.table)
            .consistent_read(true)
            .key_condition_expression("#pk = :pk AND #sk BETWEEN :lo AND :hi")
            .expression_attribute_names("#pk", attr::PK)
            .expression_attribute_names("#sk", attr::SK)
            .expression_attribute_values(":pk", s(keys::device_pk(device)))
            .expression_attribute_values(":lo", s(lo))
            .expression_attribute_values(":hi", s(hi))
            .into_paginator()
            .items()
            .send();
        let mut out = HashMap::new();
        while let Some(item) = pages.next().await {
            let a: AlertItem = from_stored(item.map_err(StoreError::sdk("Query"))?)?;
            out.insert(a.alert_id.clone(), a);
        }
        Ok(out)
    }

    async fn put_alerts(
        &self,
        _device: &DeviceId,
        alerts: &[AlertWrite],
    ) -> Result<Written, StoreError> {
        if alerts.is_empty() {
            return Ok(Written::Ok { units: 0.0 });
        }
        let items = alerts
            .iter()
            .map(|w| self.transact_item(w))
            .collect::<Result<Vec<_>, _>>()?;
        self.transact(items).await
    }

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
            let a: AlertItem = from_stored(i)?;
            out.insert(a.alert_id.clone(), a);
        }
        Ok(out)
    }
}

impl SetAsideStore for DynamoStore {
    async fn count_failure(
        &self,
        record: &tidemark_schema::keys::FailedRecord,
        error: &str,
        ttl: i64,
    ) -> Result<u32, StoreError> {
        tidemark_store::failures::count_in_dynamodb(&self.client, &self.table, record, error, ttl)
            .await
    }

    async fn put_repair(&self, item: &tidemark_schema::RepairItem) -> Result<(), StoreError> {
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(to_item(item)?))
            .send()
            .await
            .map_err(StoreError::sdk("PutItem"))?;
        Ok(())
    }

    async fn open_repairs(
        &self,
        role: &str,
        limit: usize,
    ) -> Result<Vec<tidemark_schema::RepairItem>, StoreError> {
        crate::store::open_repairs(&self.queries, role, limit).await
    }

    async fn delete_repair(&self, key: &Key) -> Result<(), StoreError> {
        self.client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(key_item(key)))
            .send()
            .await
            .map_err(StoreError::sdk("DeleteItem"))?;
        Ok(())
    }
}

impl HeartbeatStore for DynamoStore {
    async fn pass_heartbeat(
        &self,
        shard: &tidemark_schema::keys::ShardName,
        sent_at: Timestamp,
        role: crate::role::Role,
    ) -> Result<f64, StoreError> {
        let key = key_item(&EntityKey::Heartbeat(shard.clone()).key());
        let mark = match role {
            crate::role::Role::Alerts => field::PASSED_AT,
            crate::role::Role::Rollups => field::ROLLUPS_PASSED_AT,
        };
        let r = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key))
            .update_expression("SET #passed = :sent")
            .condition_expression("#sent = :sent")
            .expression_attribute_names("#passed", mark)
            .expression_attribute_names("#sent", field::SENT_AT)
            .expression_attribute_values(":sent", av(&sent_at)?)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(StoreError::sdk("UpdateItem"));
        match r {
            Ok(o) => Ok(units(o.consumed_capacity())),
            // A newer heartbeat is there: its own record marks it.
            Err(e) if e.is_conditional_check_failed() => Ok(0.0),
            Err(e) => Err(e),
        }
    }
}

impl ReadingStore for DynamoStore {
    async fn readings_between(
        &self,
        device: &DeviceId,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<BucketReadings, StoreError> {
        let mut out = Vec::new();
        self.walk_readings(device, from, to, false, None, |at, m| out.push((at, m)))
            .await?;
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
        let mut out = Vec::new();
        self.walk_readings(device, from, to, newest_first, Some(limit), |at, m| {
            out.push((at, m))
        })
        .await?;
        Ok(out)
    }

    async fn summarize(
        &self,
        device: &DeviceId,
        from: Timestamp,
        to: Timestamp,
        sketched: bool,
    ) -> Result<BucketSummary, StoreError> {
        let mut sum = BucketSummary::new(sketched);
        self.walk_readings(device, from, to, false, None, |at, m| sum.add(at, &m))
            .await?;
        Ok(sum)
    }

    async fn newest_reading(
        &self,
        device: &DeviceId,
        since: Timestamp,
    ) -> Result<Option<LatestReading>, StoreError> {
        let mut newest: Option<LatestReading> = None;
        self.walk_readings(
            device,
            since,
            Timestamp::MAX,
            true,
            Some(1),
            |at, metrics| {
                if newest.as_ref().is_none_or(|n| at > n.timestamp) {
                    newest = Some(LatestReading {
                        timestamp: at,
                        metrics,
                    });
                }
            },
        )
        .await?;
        Ok(newest)
    }
}
