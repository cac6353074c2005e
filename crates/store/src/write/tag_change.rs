//! Writing device tags (docs/design.md §2 "Tags and groups"): a device's tag history
//! replaced under an optimistic lock, and its entries in the tag index put and deleted. Only
//! `PUT /devices/{id}` writes them; the readers' side is [`crate::tags`].

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, TransactWriteItem, Update};
use futures::StreamExt;
use tidemark_schema::table::attr;
use tidemark_schema::{DeviceId, EntityKey, Key, TagCountItem, TagHistory, TagIndexItem, field};

use crate::batch_get::key_item;
use crate::retry::{RetryPolicy, TRANSACTION_CONFLICT_ATTEMPTS};
use crate::write::tag_counts::count_update;
use crate::{Item, StoreError, to_item};

/// Index writes in flight at once (a device has at most 16 tags, so at most 32 writes).
const IN_FLIGHT: usize = 16;

/// Sets `device`'s tag history to `history` if its version is still `version` (0: none
/// stored), and adds one to its count of tag changes ([`tidemark_schema::keys::tag_changes_of`])
/// in the same transaction, so the export sees every change. `Ok(false)`: another change
/// landed first; read it again and decide anew.
pub async fn replace_history(
    client: &Client,
    table: &str,
    device: &DeviceId,
    history: &TagHistory,
    version: u64,
) -> Result<bool, StoreError> {
    let key = crate::tags::history_key(device);
    let mut replace = Update::builder()
        .table_name(table)
        .set_key(Some(key_item(&key)))
        .update_expression("SET #e = :e, #v = :next")
        .expression_attribute_names("#e", field::EPOCHS)
        .expression_attribute_names("#v", field::VERSION)
        .expression_attribute_values(":e", serde_dynamo::to_attribute_value(history)?)
        .expression_attribute_values(":next", AttributeValue::N((version + 1).to_string()));
    replace = if version == 0 {
        replace.condition_expression("attribute_not_exists(#v)")
    } else {
        replace
            .condition_expression("#v = :old")
            .expression_attribute_values(":old", AttributeValue::N(version.to_string()))
    };
    let replace = replace.build().map_err(request)?;
    let counted = count_update(
        table,
        &tidemark_schema::keys::tag_changes_of(device).key(),
        field::CHANGES,
        1,
    )?;
    counted_write(
        client,
        TransactWriteItem::builder().update(replace).build(),
        counted,
    )
    .await
}

/// Puts `puts` and deletes the entries at `deletes`: a device's index entries brought to its
/// latest declared tags. An entry created or deleted moves its partition's `members` count
/// in the same transaction, conditional on the entry being new (or there); an entry already
/// there is only overwritten (its status and tags). So every write is idempotent, counts
/// included, and a retried request repairs what a failed one left.
pub async fn write_index(
    client: &Client,
    table: &str,
    puts: &[TagIndexItem],
    deletes: &[Key],
) -> Result<(), StoreError> {
    enum Write {
        Put(Item, Key),
        Delete(Key),
    }
    let mut writes = Vec::with_capacity(puts.len() + deletes.len());
    for p in puts {
        writes.push(Write::Put(to_item(p)?, count_key(&p.pk, &p.sk)?));
    }
    writes.extend(deletes.iter().cloned().map(Write::Delete));
    let results: Vec<Result<(), StoreError>> = futures::stream::iter(writes)
        .map(|w| async move {
            match w {
                Write::Put(item, count) => {
                    let created = Put::builder()
                        .table_name(table)
                        .set_item(Some(item.clone()))
                        .condition_expression("attribute_not_exists(#pk)")
                        .expression_attribute_names("#pk", attr::PK)
                        .build()
                        .map_err(request)?;
                    let counted = count_update(table, &count, field::MEMBERS, 1)?;
                    if counted_write(
                        client,
                        TransactWriteItem::builder().put(created).build(),
                        counted,
                    )
                    .await?
                    {
                        return Ok(());
                    }
                    client
                        .put_item()
                        .table_name(table)
                        .set_item(Some(item))
                        .send()
                        .await
                        .map(|_| ())
                        .map_err(StoreError::sdk("PutItem"))
                }
                Write::Delete(k) => {
                    let count = count_key(&k.pk, &k.sk)?;
                    let gone = Delete::builder()
                        .table_name(table)
                        .set_key(Some(key_item(&k)))
                        .condition_expression("attribute_exists(#pk)")
                        .expression_attribute_names("#pk", attr::PK)
                        .build()
                        .map_err(request)?;
                    let counted = count_update(table, &count, field::MEMBERS, -1)?;
                    counted_write(
                        client,
                        TransactWriteItem::builder().delete(gone).build(),
                        counted,
                    )
                    .await
                    .map(|_| ())
                }
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    results.into_iter().collect()
}

fn request(e: impl std::fmt::Display) -> StoreError {
    StoreError::Request {
        operation: "TransactWriteItems",
        message: e.to_string(),
    }
}

/// The count item of the index partition holding the entry at `pk`/`sk`.
pub fn count_key(pk: &str, sk: &str) -> Result<Key, StoreError> {
    match EntityKey::parse(pk, sk) {
        Ok(EntityKey::TagIndex { tag, partition, .. }) => Ok(TagCountItem::key(&tag, partition)),
        _ => Err(request(format!("{pk} / {sk} is not a tag index entry"))),
    }
}

/// `write` and the count's move in one transaction; `false` when `write`'s condition failed
/// (the entry was already there, or already gone), which moves nothing. A transaction that
/// met another one on the count item (DynamoDB cancels one of them; registrations into one
/// group share its 16 count items) is tried again after a jittered wait, up to
/// [`TRANSACTION_CONFLICT_ATTEMPTS`] times in all.
async fn counted_write(
    client: &Client,
    write: TransactWriteItem,
    counted: Update,
) -> Result<bool, StoreError> {
    let policy = RetryPolicy::default();
    let mut attempt = 1;
    loop {
        let r = client
            .transact_write_items()
            .transact_items(write.clone())
            .transact_items(TransactWriteItem::builder().update(counted.clone()).build())
            .send()
            .await
            .map_err(StoreError::sdk("TransactWriteItems"));
        let e = match r {
            Ok(_) => return Ok(true),
            Err(e) => e,
        };
        match cancelled_by(&e) {
            Some(Cancelled::Condition) => return Ok(false),
            Some(Cancelled::Conflict) if attempt < TRANSACTION_CONFLICT_ATTEMPTS => {
                tokio::time::sleep(policy.delay(attempt)).await;
                attempt += 1;
            }
            _ => return Err(e),
        }
    }
}

/// Why DynamoDB cancelled a transaction, when it is one of the reasons the writer handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cancelled {
    /// The entry's own condition failed.
    Condition,
    /// Another transaction was writing one of its items.
    Conflict,
}

fn cancelled_by(e: &StoreError) -> Option<Cancelled> {
    if e.is_transaction_conflict() {
        return Some(Cancelled::Conflict);
    }
    match e.dynamo()? {
        aws_sdk_dynamodb::Error::TransactionCanceledException(c) => {
            (c.cancellation_reasons().first().and_then(|r| r.code())
                == Some("ConditionalCheckFailed"))
            .then_some(Cancelled::Condition)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::CancellationReason;
    use aws_sdk_dynamodb::types::error::TransactionCanceledException;

    fn cancelled(codes: &[&str]) -> StoreError {
        let mut e = TransactionCanceledException::builder();
        for c in codes {
            e = e.cancellation_reasons(CancellationReason::builder().code(*c).build());
        }
        StoreError::Dynamo {
            operation: "TransactWriteItems",
            source: Box::new(aws_sdk_dynamodb::Error::TransactionCanceledException(
                e.build(),
            )),
        }
    }

    #[test]
    fn a_failed_entry_condition_moves_nothing_a_conflict_on_the_count_is_tried_again() {
        // The entry is the transaction's first action, the count its second.
        assert_eq!(
            cancelled_by(&cancelled(&["ConditionalCheckFailed", "None"])),
            Some(Cancelled::Condition)
        );
        assert_eq!(
            cancelled_by(&cancelled(&["None", "TransactionConflict"])),
            Some(Cancelled::Conflict)
        );
        // Anything else is an error for the caller (a request DynamoDB refuses for good).
        assert_eq!(cancelled_by(&cancelled(&["None", "ValidationError"])), None);
        let throttled = StoreError::Request {
            operation: "TransactWriteItems",
            message: "throttled".into(),
        };
        assert_eq!(cancelled_by(&throttled), None);
    }
}
