//! The DynamoDB implementation of ingest's reads ([`crate::store`]): one cached query of the
//! `CONFIG` partition for layout histories, `BatchGetItem` for devices, and the conditional
//! update of a device's metric names of a day.

use std::collections::{HashMap, HashSet};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use tidemark_schema::keys::CONFIG_PK;
use tidemark_schema::table::attr;
use tidemark_schema::{
    Day, DeviceId, EntityKey, GatewayFor, LayoutHistory, LayoutHistoryItem, MetricName,
    MetricNamesItem, field,
};
use tidemark_store::batch_get::{GetOptions, batch_get, key_of};
use tidemark_store::{Item, StoreError, from_stored};

use crate::store::{DeviceDirectory, LayoutHistorySource, Names, Room, gateway_list, metric_cap};

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
