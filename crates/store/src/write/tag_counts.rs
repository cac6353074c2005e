//! The tag index's counts ([`tidemark_schema::TagCountItem`]): a change of one as one action of
//! a transaction, so the count moves exactly when the write it counts happens, and never on a
//! retry of a write that already did.

use aws_sdk_dynamodb::types::{AttributeValue, Update};
use tidemark_schema::Key;

use crate::StoreError;
use crate::batch_get::key_item;
use crate::memory::{Items, MemTable};

/// `ADD <field> <delta>` on the count item at `key` (created at zero by the first one), as a
/// transaction's action.
pub fn count_update(
    table: &str,
    key: &Key,
    field: &'static str,
    delta: i64,
) -> Result<Update, StoreError> {
    Update::builder()
        .table_name(table)
        .set_key(Some(key_item(key)))
        .update_expression("ADD #n :d")
        .expression_attribute_names("#n", field)
        .expression_attribute_values(":d", AttributeValue::N(delta.to_string()))
        .build()
        .map_err(|e| StoreError::Request {
            operation: "TransactWriteItems",
            message: e.to_string(),
        })
}

/// [`count_update`] on the in-memory engine's items (already locked by the transaction it
/// belongs to).
pub fn add_in_memory(
    items: &mut Items,
    key: &Key,
    field: &'static str,
    delta: i64,
) -> Result<(), StoreError> {
    let mut item = items
        .get(&(key.pk.clone(), key.sk.clone()))
        .cloned()
        .unwrap_or_else(|| key_item(key));
    let now = item
        .get(field)
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse::<i64>().ok())
        .unwrap_or(0);
    item.insert(
        field.to_owned(),
        AttributeValue::N((now + delta).to_string()),
    );
    MemTable::insert(items, item)
}
