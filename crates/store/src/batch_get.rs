//! Reading any number of items by key with `BatchGetItem`, the one implementation every
//! function uses.
//!
//! DynamoDB takes at most 100 keys a call and may return part of them as `UnprocessedKeys`
//! without an error (under throttling, or past 16 MB); the SDK never re-asks for those. So:
//! keys are deduplicated, asked 100 a call with a few calls in flight, and unprocessed keys are
//! asked again after a [`RetryPolicy`] wait, up to [`MAX_ATTEMPTS`] calls per chunk; past that
//! the read fails (the caller's invocation is retried) rather than spinning until a timeout.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use futures::StreamExt;
use tidemark_schema::Key;
use tidemark_schema::table::attr;

use crate::retry::RetryPolicy;
use crate::{Item, StoreError};

/// DynamoDB's limit of keys in one `BatchGetItem`.
pub const MAX_KEYS: usize = crate::limits::MAX_BATCH_GET_KEYS;
/// Calls per chunk before unprocessed keys fail the read.
pub const MAX_ATTEMPTS: u32 = 8;
/// Chunks asked at once.
const IN_FLIGHT: usize = 8;

/// How to read.
#[derive(Debug, Clone, Copy, Default)]
pub struct GetOptions {
    /// Strongly consistent (twice the read units): for read-modify-write.
    pub consistent: bool,
    /// Only the key attributes (to learn which items exist).
    pub keys_only: bool,
}

/// The item's key, as the schema's [`Key`].
pub fn key_of(item: &Item) -> Option<Key> {
    match (item.get(attr::PK), item.get(attr::SK)) {
        (Some(AttributeValue::S(pk)), Some(AttributeValue::S(sk))) => Some(Key {
            pk: pk.clone(),
            sk: sk.clone(),
        }),
        _ => None,
    }
}

/// The key as a DynamoDB key map.
pub fn key_item(k: &Key) -> Item {
    Item::from([
        (attr::PK.to_owned(), AttributeValue::S(k.pk.clone())),
        (attr::SK.to_owned(), AttributeValue::S(k.sk.clone())),
    ])
}

/// The items of `keys` that exist, in no particular order.
pub async fn batch_get(
    client: &Client,
    table: &str,
    keys: &[Key],
    options: GetOptions,
) -> Result<Vec<Item>, StoreError> {
    let mut unique = keys.to_vec();
    unique.sort();
    unique.dedup();
    let chunks: Vec<Vec<Key>> = unique.chunks(MAX_KEYS).map(<[Key]>::to_vec).collect();
    let parts: Vec<Result<Vec<Item>, StoreError>> = futures::stream::iter(chunks)
        .map(|c| chunk(client, table, c, options))
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    let mut out = Vec::with_capacity(unique.len());
    for p in parts {
        out.extend(p?);
    }
    Ok(out)
}

fn request(keys: Vec<Item>, options: GetOptions) -> Result<KeysAndAttributes, StoreError> {
    let mut b = KeysAndAttributes::builder()
        .set_keys(Some(keys))
        .consistent_read(options.consistent);
    if options.keys_only {
        b = b
            .projection_expression("#pk, #sk")
            .expression_attribute_names("#pk", attr::PK)
            .expression_attribute_names("#sk", attr::SK);
    }
    b.build().map_err(|e| StoreError::Request {
        operation: "BatchGetItem",
        message: e.to_string(),
    })
}

async fn chunk(
    client: &Client,
    table: &str,
    keys: Vec<Key>,
    options: GetOptions,
) -> Result<Vec<Item>, StoreError> {
    let retry = RetryPolicy::default();
    let mut out = Vec::with_capacity(keys.len());
    let mut pending = request(keys.iter().map(key_item).collect(), options)?;
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let resp = client
            .batch_get_item()
            .request_items(table, pending)
            .send()
            .await
            .map_err(StoreError::sdk("BatchGetItem"))?;
        out.extend(
            resp.responses
                .and_then(|mut r| r.remove(table))
                .unwrap_or_default(),
        );
        let Some(rest) = resp
            .unprocessed_keys
            .and_then(|mut u| u.remove(table))
            .filter(|k| !k.keys().is_empty())
        else {
            return Ok(out);
        };
        if attempt >= MAX_ATTEMPTS {
            return Err(StoreError::Request {
                operation: "BatchGetItem",
                message: format!(
                    "{} keys still unprocessed after {attempt} attempts",
                    rest.keys().len()
                ),
            });
        }
        tokio::time::sleep(retry.delay(attempt)).await;
        pending = rest;
    }
}
