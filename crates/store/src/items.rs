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

pub fn from_item<T: DeserializeOwned>(item: Item) -> Result<T, StoreError> {
    Ok(serde_dynamo::from_item(item)?)
}
