//! Writing device tags (docs/design.md §2 "Tags and groups"): a device's tag history
//! replaced under an optimistic lock, and its entries in the tag index put and deleted. Only
//! `PUT /devices/{id}` writes them; the readers' side is [`crate::tags`].

use aws_sdk_dynamodb::Client;
use futures::StreamExt;
use tidemark_schema::{DeviceId, Key, TagHistory, TagIndexItem};

use crate::batch_get::key_item;
use crate::{Item, StoreError, to_item};

/// Index writes in flight at once (a device has at most 16 tags, so at most 32 writes).
const IN_FLIGHT: usize = 16;

/// Sets `device`'s tag history to `history` if its version is still `version` (0: none
/// stored). `Ok(false)`: another change landed first; read it again and decide anew.
pub async fn replace_history(
    client: &Client,
    table: &str,
    device: &DeviceId,
    history: &TagHistory,
    version: u64,
) -> Result<bool, StoreError> {
    let key = crate::tags::history_key(device);
    crate::write::layout_change::replace_epochs(client, table, &key, history, version).await
}

/// Puts `puts` and deletes the entries at `deletes`: a device's index entries brought to its
/// latest declared tags. Each write is idempotent, so a retried request repairs what a
/// failed one left.
pub async fn write_index(
    client: &Client,
    table: &str,
    puts: &[TagIndexItem],
    deletes: &[Key],
) -> Result<(), StoreError> {
    enum Write {
        Put(Item),
        Delete(Key),
    }
    let mut writes = Vec::with_capacity(puts.len() + deletes.len());
    for p in puts {
        writes.push(Write::Put(to_item(p)?));
    }
    writes.extend(deletes.iter().cloned().map(Write::Delete));
    let results: Vec<Result<(), StoreError>> = futures::stream::iter(writes)
        .map(|w| async move {
            match w {
                Write::Put(item) => client
                    .put_item()
                    .table_name(table)
                    .set_item(Some(item))
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(StoreError::sdk("PutItem")),
                Write::Delete(k) => client
                    .delete_item()
                    .table_name(table)
                    .set_key(Some(key_item(&k)))
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(StoreError::sdk("DeleteItem")),
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    results.into_iter().collect()
}
