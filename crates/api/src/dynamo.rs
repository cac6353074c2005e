//! The DynamoDB implementation of every store trait of [`crate::store`]: reads through the
//! one reader of stored readings ([`Queries`]) and `GetItem`/`BatchGetItem`, and each write
//! as one conditional `UpdateItem` of only the attributes it owns (alerts:
//! `crates/api/src/dynamo/alerts.rs`).

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use tidemark_schema::table::attr;
use tidemark_schema::{
    CallerRateItem, DeviceId, EntityKey, Key, LayoutHistory, TagHistory, TagIndexItem, Timestamp,
    field,
};
use tidemark_store::batch_get::{GetOptions, batch_get, key_item};
use tidemark_store::read::Queries;
use tidemark_store::{Item, StoreError};

use crate::store::{
    CallCounter, DeviceRegistration, DeviceWriter, GetStore, LayoutWriter, Page, PutDevice,
    QuerySpec, QueryStore, TagWriter, device_update,
};

mod alerts;

/// The DynamoDB implementation of every store trait.
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    table: String,
    queries: Queries,
}

impl DynamoStore {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        let table = table.into();
        DynamoStore {
            queries: Queries::new(client.clone(), table.clone()),
            client,
            table,
        }
    }
}

impl QueryStore for DynamoStore {
    async fn query(
        &self,
        spec: &QuerySpec,
        start: Option<Item>,
        limit: i32,
    ) -> Result<Page, StoreError> {
        self.queries.query(spec, start, limit).await
    }
}

impl GetStore for DynamoStore {
    async fn get(&self, key: Key, consistent: bool) -> Result<Option<Item>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key_item(&key)))
            .consistent_read(consistent)
            .send()
            .await
            .map_err(StoreError::sdk("GetItem"))?;
        Ok(out.item)
    }

    async fn batch_get(&self, keys: Vec<Key>) -> Result<Vec<Item>, StoreError> {
        batch_get(&self.client, &self.table, &keys, GetOptions::default()).await
    }
}

impl DeviceWriter for DynamoStore {
    async fn put_device(
        &self,
        reg: &DeviceRegistration,
        now: Timestamp,
    ) -> Result<PutDevice, StoreError> {
        let update = device_update(reg, now)?;
        let (expression, names, values) = update.expression();
        let out = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key_item(
                &EntityKey::Device(reg.device_id.clone()).key(),
            )))
            .update_expression(expression)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            // The old image tells a new device from an update; the new one is the old one
            // with the update applied, exactly as DynamoDB applied it.
            .return_values(ReturnValue::AllOld)
            .send()
            .await
            .map_err(StoreError::sdk("UpdateItem"))?;
        let created = out.attributes.as_ref().is_none_or(|a| a.is_empty());
        let mut item = out.attributes.unwrap_or_default();
        let key = EntityKey::Device(reg.device_id.clone()).key();
        item.extend(key_item(&key));
        update.apply(&mut item);
        Ok(PutDevice {
            device: tidemark_store::from_item(item)?,
            created,
        })
    }
}

impl LayoutWriter for DynamoStore {
    async fn replace_layouts(
        &self,
        device: &DeviceId,
        history: &LayoutHistory,
        version: u64,
    ) -> Result<bool, StoreError> {
        let key = EntityKey::DeviceLayout(device.clone()).key();
        tidemark_store::write::layout_change::replace_history(
            &self.client,
            &self.table,
            &key,
            history,
            version,
        )
        .await
    }
}

impl TagWriter for DynamoStore {
    async fn replace_tags(
        &self,
        device: &DeviceId,
        history: &TagHistory,
        version: u64,
    ) -> Result<bool, StoreError> {
        tidemark_store::write::tag_change::replace_history(
            &self.client,
            &self.table,
            device,
            history,
            version,
        )
        .await
    }

    async fn write_tag_index(
        &self,
        puts: &[TagIndexItem],
        deletes: &[Key],
    ) -> Result<(), StoreError> {
        tidemark_store::write::tag_change::write_index(&self.client, &self.table, puts, deletes)
            .await
    }
}

impl CallCounter for DynamoStore {
    async fn count_call(&self, count: &CallerRateItem, limit: u32) -> Result<bool, StoreError> {
        let key = Key {
            pk: count.pk.clone(),
            sk: count.sk.clone(),
        };
        let n = |v: i64| AttributeValue::N(v.to_string());
        let out = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key_item(&key)))
            .update_expression("ADD #n :one SET #ttl = :ttl")
            .condition_expression("attribute_not_exists(#n) OR #n < :limit")
            .expression_attribute_names("#n", field::REQUESTS)
            .expression_attribute_names("#ttl", attr::TTL)
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":ttl", n(count.ttl))
            .expression_attribute_values(":limit", n(i64::from(limit)))
            .send()
            .await
            .map_err(StoreError::sdk("UpdateItem"));
        match out {
            Ok(_) => Ok(true),
            Err(e) if e.is_conditional_check_failed() => Ok(false),
            Err(e) => Err(e),
        }
    }
}
