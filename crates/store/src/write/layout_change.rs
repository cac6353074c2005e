//! A layout history replaced under an optimistic lock, so that two concurrent changes cannot
//! both land (the readers' side is [`crate::layouts`]).

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::{Key, LayoutHistory, field};

use crate::StoreError;
use crate::batch_get::key_item;

/// Sets the history stored at `key` to `history` if its version is still `version` (0: no
/// item yet). `Ok(false)`: another change landed first; read it again and decide anew.
pub async fn replace_history(
    client: &Client,
    table: &str,
    key: &Key,
    history: &LayoutHistory,
    version: u64,
) -> Result<bool, StoreError> {
    replace_epochs(client, table, key, history, version).await
}

/// [`replace_history`] of any history stored as `epochs` and `version` (a tag history is
/// replaced with its change counted, `write::tag_change::replace_history`).
pub async fn replace_epochs<H: serde::Serialize + Sync>(
    client: &Client,
    table: &str,
    key: &Key,
    history: &H,
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
