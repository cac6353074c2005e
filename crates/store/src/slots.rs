//! Writing readings into a packed slot item (issue 16) so that concurrent writers lose nothing.
//!
//! A slot item holds many readings of one device in one binary attribute
//! ([`tidemark_schema::packed`]), so DynamoDB cannot merge into it entry by entry as it does
//! into a single reading's metrics map. Instead each write is a read-merge-write under an
//! optimistic lock:
//! 1. read the item (eventually consistent is enough: a stale read only loses step 3);
//! 2. merge the batch's readings into its readings ([`packed::merge`]); if nothing changes
//!    (a replay, a resend) stop: nothing is written;
//! 3. put the merged item on the condition that its `version` is still the one read (or, for
//!    a new slot, that no item has the key), with `version` + 1.
//!
//! Two writers of one slot (two shards of the stream, a retry racing a late batch) both read
//! version *v*; one put succeeds, the other's condition fails, and it starts again from step 1
//! with the winner's readings in hand. So no write is ever based on readings it did not see,
//! and none is lost. A lost race is retried with the store's backoff until the deadline.
//!
//! Nothing calls this yet: layouts that store readings packed are still to come.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::packed::{self, SlotReadings};
use tidemark_schema::table::attr;
use tidemark_schema::{Timestamp, field};
use tokio::time::Instant;

use crate::retry::RetryPolicy;
use crate::{Item, StoreError};

/// Where a slot lives and when it starts (its readings are encoded relative to the start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotKey {
    pub pk: String,
    pub sk: String,
    pub start: Timestamp,
}

/// What a slot write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotWrite {
    /// False when the slot already held every reading as sent: nothing was written.
    pub written: bool,
    /// Races lost to another writer before this write went through.
    pub conflicts: u32,
    /// Readings in the slot after the write.
    pub readings: usize,
}

/// A slot as stored: its readings and the version they were read at (`None`: no item).
struct Stored {
    readings: SlotReadings,
    version: Option<u64>,
}

fn unreadable(key: &SlotKey, message: impl Into<String>) -> StoreError {
    StoreError::Unreadable {
        key: format!("{}/{}", key.pk, key.sk),
        message: message.into(),
    }
}

async fn read(client: &Client, table: &str, key: &SlotKey) -> Result<Stored, StoreError> {
    let out = client
        .get_item()
        .table_name(table)
        .key(attr::PK, AttributeValue::S(key.pk.clone()))
        .key(attr::SK, AttributeValue::S(key.sk.clone()))
        .send()
        .await
        .map_err(StoreError::sdk("GetItem"))?;
    let Some(item) = out.item else {
        return Ok(Stored {
            readings: SlotReadings::new(),
            version: None,
        });
    };
    let version = match item.get(field::VERSION) {
        Some(AttributeValue::N(n)) => n
            .parse::<u64>()
            .map_err(|e| unreadable(key, e.to_string()))?,
        _ => return Err(unreadable(key, "no version")),
    };
    let bytes = match item.get(field::PACKED) {
        Some(AttributeValue::B(b)) => b.as_ref(),
        _ => return Err(unreadable(key, "no packed readings")),
    };
    let readings = packed::decode(key.start, bytes).map_err(|e| unreadable(key, e.to_string()))?;
    Ok(Stored {
        readings,
        version: Some(version),
    })
}

fn item(
    key: &SlotKey,
    readings: &SlotReadings,
    version: u64,
    ttl: i64,
) -> Result<Item, StoreError> {
    let bytes = packed::encode(key.start, readings).map_err(|e| StoreError::Request {
        operation: "PutItem",
        message: e.to_string(),
    })?;
    Ok(Item::from([
        (attr::PK.to_owned(), AttributeValue::S(key.pk.clone())),
        (attr::SK.to_owned(), AttributeValue::S(key.sk.clone())),
        (
            field::PACKED.to_owned(),
            AttributeValue::B(Blob::new(bytes)),
        ),
        (
            field::READING_COUNT.to_owned(),
            AttributeValue::N(readings.len().to_string()),
        ),
        (
            field::VERSION.to_owned(),
            AttributeValue::N(version.to_string()),
        ),
        (attr::TTL.to_owned(), AttributeValue::N(ttl.to_string())),
    ]))
}

/// Merges `incoming` into the slot `key` (see the module docs). An unreadable slot item is
/// an error naming its key, never overwritten: its readings would be lost.
pub async fn write_slot(
    client: &Client,
    table: &str,
    key: &SlotKey,
    incoming: &SlotReadings,
    ttl: i64,
    retry: RetryPolicy,
    deadline: Instant,
) -> Result<SlotWrite, StoreError> {
    let mut conflicts = 0u32;
    loop {
        let stored = read(client, table, key).await?;
        let Some(merged) = packed::merge(&stored.readings, incoming) else {
            return Ok(SlotWrite {
                written: false,
                conflicts,
                readings: stored.readings.len(),
            });
        };
        let next = stored.version.map_or(1, |v| v + 1);
        let mut put = client
            .put_item()
            .table_name(table)
            .set_item(Some(item(key, &merged, next, ttl)?));
        put = match stored.version {
            None => put
                .condition_expression("attribute_not_exists(#pk)")
                .expression_attribute_names("#pk", attr::PK),
            Some(v) => put
                .condition_expression("#v = :v")
                .expression_attribute_names("#v", field::VERSION)
                .expression_attribute_values(":v", AttributeValue::N(v.to_string())),
        };
        match put.send().await.map_err(StoreError::sdk("PutItem")) {
            Ok(_) => {
                return Ok(SlotWrite {
                    written: true,
                    conflicts,
                    readings: merged.len(),
                });
            }
            Err(e) if e.is_conditional_check_failed() => {
                conflicts += 1;
                let wait = retry.delay(conflicts);
                if Instant::now() + wait >= deadline {
                    return Err(StoreError::Request {
                        operation: "PutItem",
                        message: format!(
                            "slot {}/{} still contended after {conflicts} tries",
                            key.pk, key.sk
                        ),
                    });
                }
                tokio::time::sleep(wait).await;
            }
            Err(e) => return Err(e),
        }
    }
}
