//! [`WatchStore`] on DynamoDB, counting the capacity every request reports (the bench's
//! figures are DynamoDB's own).

use std::sync::Mutex;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::transact_write_items::builders::TransactWriteItemsFluentBuilder;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConsumedCapacity, Put, ReturnConsumedCapacity, TransactWriteItem, Update,
};
use tidemark_schema::table::{GSI2, attr};
use tidemark_schema::{
    AlertItem, AlertState, DeviceId, DeviceItem, EntityKey, GroupPartialItem, GroupRuleSpec,
    GroupRuleStateItem, HeartbeatItem, OfflineState, Tag, TagCountItem, Timestamp, field, keys,
};
use tidemark_store::batch_get::{GetOptions, batch_get, key_item};
use tidemark_store::retry::{RetryPolicy, TRANSACTION_CONFLICT_ATTEMPTS};
use tidemark_store::write::tag_counts::count_update;
use tidemark_store::{Item, StoreError, from_stored, to_item};

use crate::WatchStore;
use crate::groups::{GroupCounts, GroupStep};
use crate::store::{arrival_ranges, arrived_at};

/// The table, and the units spent on it so far: (read, write).
#[derive(Debug)]
pub struct DynamoWatch {
    client: Client,
    table: String,
    units: Mutex<(f64, f64)>,
}

fn av<T: serde::Serialize>(v: &T) -> Result<AttributeValue, StoreError> {
    Ok(serde_dynamo::to_attribute_value(v)?)
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn capacity(c: &[ConsumedCapacity]) -> f64 {
    c.iter().map(|c| c.capacity_units().unwrap_or(0.0)).sum()
}

/// A conditional write lost to another writer: not an error, the device is looked at again.
fn lost(e: &StoreError) -> bool {
    e.is_conditional_check_failed()
        || matches!(
            e.dynamo(),
            Some(
                aws_sdk_dynamodb::Error::TransactionCanceledException(_)
                    | aws_sdk_dynamodb::Error::TransactionConflictException(_)
            )
        )
}

impl DynamoWatch {
    /// The entity at `key`, read strongly consistent, its units counted.
    async fn get_consistent<T: serde::de::DeserializeOwned>(
        &self,
        key: &tidemark_schema::Key,
    ) -> Result<Option<T>, StoreError> {
        let o = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key_item(key)))
            .consistent_read(true)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(StoreError::sdk("GetItem"))?;
        self.spent(
            o.consumed_capacity()
                .and_then(|c| c.capacity_units())
                .unwrap_or(0.0),
            0.0,
        );
        o.item.map(from_stored).transpose()
    }

    /// Sends a transaction: `Ok(false)` when a condition failed (another writer decided
    /// first); one that met another on an item (offline counts are shared by a group's
    /// devices) is tried again, a jittered wait apart.
    async fn transact(&self, request: TransactWriteItemsFluentBuilder) -> Result<bool, StoreError> {
        let policy = RetryPolicy::default();
        let mut attempt = 1;
        loop {
            let r = request
                .clone()
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await
                .map_err(StoreError::sdk("TransactWriteItems"));
            match r {
                Ok(o) => {
                    self.spent(0.0, capacity(o.consumed_capacity()));
                    return Ok(true);
                }
                Err(e)
                    if e.is_transaction_conflict() && attempt < TRANSACTION_CONFLICT_ATTEMPTS =>
                {
                    tokio::time::sleep(policy.delay(attempt)).await;
                    attempt += 1;
                }
                Err(e) if lost(&e) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
    }

    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoWatch {
            client,
            table: table.into(),
            units: Mutex::new((0.0, 0.0)),
        }
    }

    fn spent(&self, read: f64, write: f64) {
        let mut u = self.units.lock().unwrap_or_else(|p| p.into_inner());
        u.0 += read;
        u.1 += write;
    }

    /// The device item's condition: its `version` as read (absent when never written by the
    /// alerts role).
    fn version_condition(dev: &DeviceItem) -> (String, Vec<(&'static str, AttributeValue)>) {
        match dev.version {
            Some(v) => (
                "#ver = :ver".into(),
                vec![(":ver", AttributeValue::N(v.to_string()))],
            ),
            None => ("attribute_not_exists(#ver)".into(), Vec::new()),
        }
    }

    /// One conditional UpdateItem of the device item: `set` (with `values`), `remove`, the
    /// version bumped; `names` are the placeholders the two use (DynamoDB refuses a request
    /// naming one it does not use). `Ok(false)` when the condition failed.
    async fn update_device(
        &self,
        dev: &DeviceItem,
        set: &str,
        remove: Option<&str>,
        names: &[(&'static str, &'static str)],
        values: Vec<(&'static str, AttributeValue)>,
    ) -> Result<bool, StoreError> {
        let (condition, mut cond_values) = Self::version_condition(dev);
        cond_values.extend(values);
        let next = dev.version.unwrap_or(0) + 1;
        let mut expr = format!("SET {set}, #ver = :next");
        if let Some(r) = remove {
            expr = format!("{expr} REMOVE {r}");
        }
        let mut req = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key_item(
                &EntityKey::Device(dev.device_id.clone()).key(),
            )))
            .update_expression(expr)
            .condition_expression(condition)
            .expression_attribute_names("#ver", field::VERSION)
            .expression_attribute_values(":next", AttributeValue::N(next.to_string()))
            .return_consumed_capacity(ReturnConsumedCapacity::Total);
        for (k, v) in names {
            req = req.expression_attribute_names(*k, *v);
        }
        for (k, v) in cond_values {
            req = req.expression_attribute_values(k, v);
        }
        match req.send().await.map_err(StoreError::sdk("UpdateItem")) {
            Ok(o) => {
                let units = o.consumed_capacity().and_then(|c| c.capacity_units());
                self.spent(0.0, units.unwrap_or(0.0));
                Ok(true)
            }
            Err(e) if lost(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl WatchStore for DynamoWatch {
    async fn heartbeats(&self) -> Result<Vec<HeartbeatItem>, StoreError> {
        let mut out = Vec::new();
        let req = self
            .client
            .query()
            .table_name(&self.table)
            .consistent_read(true)
            .key_condition_expression("#pk = :pk AND begins_with(#sk, :hb)")
            .expression_attribute_names("#pk", attr::PK)
            .expression_attribute_names("#sk", attr::SK)
            .expression_attribute_values(":pk", s(keys::PIPELINE_PK))
            .expression_attribute_values(":hb", s(keys::HEARTBEAT_PREFIX))
            .return_consumed_capacity(ReturnConsumedCapacity::Total);
        let mut bad = 0u32;
        let units = tidemark_store::query::each(req, |i: Item| {
            match from_stored::<HeartbeatItem>(i) {
                Ok(h) => out.push(h),
                Err(_) => bad += 1,
            }
            true
        })
        .await?;
        if bad > 0 {
            tracing::warn!(items = bad, "unreadable heartbeat items skipped");
        }
        self.spent(units, 0.0);
        Ok(out)
    }

    async fn due(
        &self,
        partition: &str,
        until: Timestamp,
        limit: usize,
    ) -> Result<Vec<DeviceId>, StoreError> {
        let mut out = Vec::new();
        let req = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(GSI2)
            .key_condition_expression("#g2pk = :p AND #g2sk <= :w")
            .expression_attribute_names("#g2pk", attr::GSI2PK)
            .expression_attribute_names("#g2sk", attr::GSI2SK)
            .expression_attribute_values(":p", s(partition))
            .expression_attribute_values(":w", s(keys::watch_gsi2sk(until)))
            .limit(i32::try_from(limit.clamp(1, 1000)).unwrap_or(1000))
            .return_consumed_capacity(ReturnConsumedCapacity::Total);
        let units = tidemark_store::query::each(req, |i: Item| {
            if let (Some(AttributeValue::S(pk)), Some(AttributeValue::S(sk))) =
                (i.get(attr::PK), i.get(attr::SK))
                && let Ok(EntityKey::Device(d)) = EntityKey::parse(pk, sk)
            {
                out.push(d);
            }
            out.len() < limit
        })
        .await?;
        self.spent(units, 0.0);
        Ok(out)
    }

    async fn device(&self, id: &DeviceId) -> Result<Option<DeviceItem>, StoreError> {
        self.get_consistent(&EntityKey::Device(id.clone()).key())
            .await
    }

    async fn newest_arrival(
        &self,
        id: &DeviceId,
        since: Timestamp,
    ) -> Result<Option<Timestamp>, StoreError> {
        let (history, _) =
            tidemark_store::layouts::device_history(&self.client, &self.table, id, true).await?;
        let mut newest: Option<Timestamp> = None;
        for range in arrival_ranges(id, &history, since) {
            let req = self
                .client
                .query()
                .table_name(&self.table)
                .consistent_read(true)
                .key_condition_expression("#pk = :pk AND #sk BETWEEN :lo AND :hi")
                .projection_expression("#a")
                .expression_attribute_names("#pk", attr::PK)
                .expression_attribute_names("#sk", attr::SK)
                .expression_attribute_names("#a", field::ARRIVED_AT)
                .expression_attribute_values(":pk", s(range.partition))
                .expression_attribute_values(":lo", s(range.lo))
                .expression_attribute_values(":hi", s(range.hi))
                .return_consumed_capacity(ReturnConsumedCapacity::Total);
            let units = tidemark_store::query::each(req, |i: Item| {
                if let Some(at) = arrived_at(&i) {
                    newest = Some(newest.map_or(at, |n| n.max(at)));
                }
                true
            })
            .await?;
            self.spent(units, 0.0);
        }
        Ok(newest)
    }

    async fn postpone(
        &self,
        dev: &DeviceItem,
        arrived: Timestamp,
        check: Timestamp,
    ) -> Result<bool, StoreError> {
        self.update_device(
            dev,
            "#arr = :arr, #g2sk = :check",
            None,
            &[("#arr", field::LAST_ARRIVAL_AT), ("#g2sk", attr::GSI2SK)],
            vec![
                (":arr", av(&arrived)?),
                (":check", s(keys::watch_gsi2sk(check))),
            ],
        )
        .await
    }

    async fn unwatch(&self, dev: &DeviceItem) -> Result<bool, StoreError> {
        // `SET` needs something: the arrival as it is.
        let arrived = dev.last_arrival_at.unwrap_or(Timestamp::MIN);
        self.update_device(
            dev,
            "#arr = :arr",
            Some("#g2pk, #g2sk"),
            &[
                ("#arr", field::LAST_ARRIVAL_AT),
                ("#g2pk", attr::GSI2PK),
                ("#g2sk", attr::GSI2SK),
            ],
            vec![(":arr", av(&arrived)?)],
        )
        .await
    }

    async fn group_counts(&self, tag: &Tag) -> Result<GroupCounts, StoreError> {
        let keys = TagCountItem::keys(tag);
        let items = batch_get(&self.client, &self.table, &keys, GetOptions::default()).await?;
        // Eventually consistent: half a unit per item up to 4 KB (BatchGetItem reports no
        // capacity here; the items are a few dozen bytes).
        self.spent(0.5 * keys.len() as f64, 0.0);
        GroupCounts::of(items)
    }

    async fn group_partials(
        &self,
        tag: &Tag,
        hour: Timestamp,
    ) -> Result<Vec<GroupPartialItem>, StoreError> {
        let req = self
            .client
            .query()
            .table_name(&self.table)
            .consistent_read(true)
            .key_condition_expression("#pk = :pk")
            .expression_attribute_names("#pk", attr::PK)
            .expression_attribute_values(":pk", s(keys::group_partial_pk(tag, hour)))
            .return_consumed_capacity(ReturnConsumedCapacity::Total);
        let mut out = Vec::new();
        let mut bad = None;
        let units = tidemark_store::query::each(req, |i: Item| {
            match from_stored::<GroupPartialItem>(i) {
                Ok(p) => out.push(p),
                Err(e) => bad = Some(e),
            }
            bad.is_none()
        })
        .await?;
        self.spent(units, 0.0);
        match bad {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    async fn group_rule_state(
        &self,
        rule: &GroupRuleSpec,
    ) -> Result<Option<GroupRuleStateItem>, StoreError> {
        self.get_consistent(&GroupRuleStateItem::key(rule)).await
    }

    async fn commit_group(
        &self,
        rule: &GroupRuleSpec,
        step: &GroupStep,
        at: Timestamp,
    ) -> Result<bool, StoreError> {
        let req = |e: aws_sdk_dynamodb::error::BuildError| StoreError::Request {
            operation: "TransactWriteItems",
            message: e.to_string(),
        };
        let was = step.state.version;
        let mut state = step.state.clone();
        state.version = was + 1;
        let state_put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(to_item(&state)?))
            .condition_expression("attribute_not_exists(#pk) OR #ver = :ver")
            .expression_attribute_names("#pk", attr::PK)
            .expression_attribute_names("#ver", field::VERSION)
            .expression_attribute_values(":ver", AttributeValue::N(was.to_string()))
            .build()
            .map_err(req)?;
        let mut request = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().put(state_put).build());
        if let Some(alert) = &step.open {
            let put = Put::builder()
                .table_name(&self.table)
                .set_item(Some(to_item(alert)?))
                .condition_expression("attribute_not_exists(#pk)")
                .expression_attribute_names("#pk", attr::PK)
                .build()
                .map_err(req)?;
            request = request.transact_items(TransactWriteItem::builder().put(put).build());
        }
        if let Some(alert) = &step.resolve {
            let key = EntityKey::GroupAlert {
                tag: rule.group.clone(),
                alert: alert.clone(),
            }
            .key();
            let update = Update::builder()
                .table_name(&self.table)
                .set_key(Some(key_item(&key)))
                .update_expression("SET #state = :resolved, #at = :at REMOVE #g1pk, #g1sk")
                .condition_expression("attribute_exists(#pk) AND attribute_not_exists(#at)")
                .expression_attribute_names("#pk", attr::PK)
                .expression_attribute_names("#state", field::STATE)
                .expression_attribute_names("#at", field::RESOLVED_AT)
                .expression_attribute_names("#g1pk", attr::GSI1PK)
                .expression_attribute_names("#g1sk", attr::GSI1SK)
                .expression_attribute_values(":resolved", av(&AlertState::Resolved)?)
                .expression_attribute_values(":at", av(&at)?)
                .build()
                .map_err(req)?;
            request = request.transact_items(TransactWriteItem::builder().update(update).build());
        }
        self.transact(request).await
    }

    async fn open(
        &self,
        dev: &DeviceItem,
        alert: &AlertItem,
        since: Timestamp,
    ) -> Result<bool, StoreError> {
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(to_item(alert)?))
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", attr::PK)
            .build()
            .map_err(|e| StoreError::Request {
                operation: "TransactWriteItems",
                message: e.to_string(),
            })?;
        let (condition, cond_values) = Self::version_condition(dev);
        let state = OfflineState {
            alert: alert.alert_id.clone(),
            since,
            counted: dev.tags.iter().collect(),
        };
        let next = dev.version.unwrap_or(0) + 1;
        let mut update = Update::builder()
            .table_name(&self.table)
            .set_key(Some(key_item(
                &EntityKey::Device(dev.device_id.clone()).key(),
            )))
            .update_expression(
                "SET #off = :off, #g2pk = :g2pk, #g2sk = :g2sk, #arr = :arr, #ver = :next",
            )
            .condition_expression(condition)
            .expression_attribute_names("#off", field::OFFLINE)
            .expression_attribute_names("#g2pk", attr::GSI2PK)
            .expression_attribute_names("#g2sk", attr::GSI2SK)
            .expression_attribute_names("#arr", field::LAST_ARRIVAL_AT)
            .expression_attribute_names("#ver", field::VERSION)
            .expression_attribute_values(":off", av(&state)?)
            .expression_attribute_values(":g2pk", s(keys::offline_gsi2pk(&dev.device_id)))
            .expression_attribute_values(":g2sk", s(keys::offline_gsi2sk(&dev.device_id)))
            .expression_attribute_values(":arr", av(&since)?)
            .expression_attribute_values(":next", AttributeValue::N(next.to_string()));
        for (k, v) in cond_values {
            update = update.expression_attribute_values(k, v);
        }
        let update = update.build().map_err(|e| StoreError::Request {
            operation: "TransactWriteItems",
            message: e.to_string(),
        })?;
        // The device counts as offline in each of its tags' groups, in the same transaction
        // (at most 2 + 16 actions): the alerts role takes it out of the same ones.
        let mut counts = Vec::with_capacity(state.counted.len());
        for tag in &state.counted {
            let key = TagCountItem::key_of(tag, &dev.device_id);
            counts.push(
                TransactWriteItem::builder()
                    .update(count_update(&self.table, &key, field::OFFLINE_MEMBERS, 1)?)
                    .build(),
            );
        }
        let mut request = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().put(put).build())
            .transact_items(TransactWriteItem::builder().update(update).build());
        for c in counts {
            request = request.transact_items(c);
        }
        self.transact(request).await
    }

    fn units(&self) -> (f64, f64) {
        *self.units.lock().unwrap_or_else(|p| p.into_inner())
    }
}
