//! What a run left stored: the bytes of its reading and slot items, by DynamoDB's item-size
//! rules (attribute names and values; numbers about one byte per two digits), which is what
//! storage is billed by (plus 100 bytes of per-item overhead, counted too).

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use serde::Serialize;
use tidemark_schema::EntityKey;
use tidemark_schema::table::attr;

use crate::BenchError;

/// DynamoDB's per-item storage overhead (its index and metadata), billed on every item.
const ITEM_OVERHEAD: u64 = 100;

#[derive(Debug, Clone, Copy, Default, Serialize, serde::Deserialize)]
pub struct Storage {
    /// Reading items and slot parts.
    pub items: u64,
    pub bytes: u64,
}

fn value_size(v: &AttributeValue) -> u64 {
    match v {
        AttributeValue::S(s) => s.len() as u64,
        AttributeValue::N(n) => {
            let digits = n.bytes().filter(u8::is_ascii_digit).count() as u64;
            digits.div_ceil(2) + 1
        }
        AttributeValue::B(b) => b.as_ref().len() as u64,
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::M(m) => {
            3 + m
                .iter()
                .map(|(k, v)| k.len() as u64 + value_size(v) + 1)
                .sum::<u64>()
        }
        AttributeValue::L(l) => 3 + l.iter().map(|v| value_size(v) + 1).sum::<u64>(),
        AttributeValue::Ss(l) => l.iter().map(|s| s.len() as u64).sum(),
        AttributeValue::Ns(l) => l.iter().map(|n| n.len() as u64 / 2 + 1).sum(),
        AttributeValue::Bs(l) => l.iter().map(|b| b.as_ref().len() as u64).sum(),
        _ => 0,
    }
}

/// An item's size as DynamoDB counts it for storage.
pub fn item_size(item: &std::collections::HashMap<String, AttributeValue>) -> u64 {
    ITEM_OVERHEAD
        + item
            .iter()
            .map(|(k, v)| k.len() as u64 + value_size(v))
            .sum::<u64>()
}

/// The reading and slot items of `table`.
pub async fn readings_stored(client: &Client, table: &str) -> Result<Storage, BenchError> {
    let mut pages = client
        .scan()
        .table_name(table)
        .into_paginator()
        .items()
        .send();
    let mut out = Storage::default();
    while let Some(item) = pages.next().await {
        let item = item.map_err(|e| {
            BenchError::Setup(aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string())
        })?;
        let key = |n: &str| item.get(n).and_then(|v| v.as_s().ok()).map(String::as_str);
        let (Some(pk), Some(sk)) = (key(attr::PK), key(attr::SK)) else {
            continue;
        };
        if matches!(
            EntityKey::parse(pk, sk),
            Ok(EntityKey::Reading { .. } | EntityKey::Slot { .. })
        ) {
            out.items += 1;
            out.bytes += item_size(&item);
        }
    }
    Ok(out)
}
