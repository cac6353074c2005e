//! Replacing a layout history (a device's shard and layout epochs, or the fleet's default
//! layout) under an optimistic lock, so two concurrent changes cannot both land.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::{DeviceId, EntityKey, Key, LayoutHistory, ShardConfigItem, field};

use crate::batch_get::{GetOptions, batch_get, key_item};
use crate::{StoreError, from_item};

/// Sets the history stored at `key` to `history` if its version is still `version` (0: no
/// item yet). `Ok(false)`: another change landed first; read it again and decide anew.
pub async fn replace_history(
    client: &Client,
    table: &str,
    key: &Key,
    history: &LayoutHistory,
    version: u64,
) -> Result<bool, StoreError> {
    let mut req = client
        .update_item()
        .table_name(table)
        .set_key(Some(key_item(key)))
        .update_expression("SET #e = :e, #v = :next")
        .expression_attribute_names("#e", field::EPOCHS)
        .expression_attribute_names("#v", field::VERSION)
        .expression_attribute_values(":e", serde_dynamo::to_attribute_value(history)?)
        .expression_attribute_values(":next", AttributeValue::N((version + 1).to_string()));
    req = if version == 0 {
        req.condition_expression("attribute_not_exists(#v)")
    } else {
        req.condition_expression("#v = :old")
            .expression_attribute_values(":old", AttributeValue::N(version.to_string()))
    };
    match req.send().await.map_err(StoreError::sdk("UpdateItem")) {
        Ok(_) => Ok(true),
        Err(e) if e.is_conditional_check_failed() => Ok(false),
        Err(e) => Err(e),
    }
}

/// A device's layout history as a reader must see it: its own epochs over the fleet's
/// default ([`LayoutHistory::under`]), and its own item's version (0: none) for replacing it.
/// One `BatchGetItem` of both items.
pub async fn device_history(
    client: &Client,
    table: &str,
    device: &DeviceId,
    consistent: bool,
) -> Result<(LayoutHistory, u64), StoreError> {
    let own_key = EntityKey::ShardConfig(device.clone()).key();
    let default_key = EntityKey::DefaultLayout.key();
    let options = GetOptions {
        consistent,
        keys_only: false,
    };
    let items = batch_get(client, table, &[own_key.clone(), default_key], options).await?;
    let (mut own, mut version, mut default) =
        (LayoutHistory::default(), 0, LayoutHistory::default());
    for item in items {
        let c: ShardConfigItem = from_item(item)?;
        if c.sk == own_key.sk {
            (own, version) = (c.epochs, c.version);
        } else {
            default = c.epochs;
        }
    }
    Ok((own.under(&default), version))
}
