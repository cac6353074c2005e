use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::StoreError;

/// A DynamoDB item as the SDK takes it.
pub type Item = HashMap<String, AttributeValue>;

pub fn to_item<T: Serialize>(value: &T) -> Result<Item, StoreError> {
    Ok(serde_dynamo::to_item(value)?)
}

/// A rollup item as every writer stores it: its attributes and, for an hourly rollup's first
/// page, its GSI2 keys in its hour's activity partition
/// ([`tidemark_schema::AggregateItem::activity_index`]), what the export finds an hour's
/// devices by.
pub fn aggregate_item(a: &tidemark_schema::AggregateItem) -> Result<Item, StoreError> {
    let mut item = to_item(a)?;
    if let Some((pk, sk)) = a.activity_index() {
        use tidemark_schema::table::attr;
        item.insert(attr::GSI2PK.to_owned(), AttributeValue::S(pk));
        item.insert(attr::GSI2SK.to_owned(), AttributeValue::S(sk));
    }
    Ok(item)
}

pub fn from_item<T: DeserializeOwned>(item: Item) -> Result<T, StoreError> {
    Ok(serde_dynamo::from_item(item)?)
}

/// [`from_item`] for an item read from the table: a failure is [`StoreError::Unreadable`],
/// naming the item's key, so the caller can skip that one item and go on.
pub fn from_stored<T: DeserializeOwned>(item: Item) -> Result<T, StoreError> {
    let key = |name: &str| match item.get(name) {
        Some(AttributeValue::S(s)) => s.clone(),
        _ => "?".to_owned(),
    };
    let key = format!(
        "{}/{}",
        key(tidemark_schema::table::attr::PK),
        key(tidemark_schema::table::attr::SK)
    );
    serde_dynamo::from_item(item).map_err(|e| StoreError::Unreadable {
        key,
        message: e.to_string(),
    })
}
