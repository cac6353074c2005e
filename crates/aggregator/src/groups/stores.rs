//! [`GroupStore`] for DynamoDB ([`DynamoStore`]) and the in-memory store ([`crate::memory::MemoryStore`]).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::ReturnConsumedCapacity;
use tidemark_schema::keys::Key;
use tidemark_schema::{DeviceId, EntityKey, GroupBatchItem, GroupPartialItem, TagHistory};
use tidemark_store::batch_get::{GetOptions, batch_get, key_item};
use tidemark_store::limits::item_size;
use tidemark_store::write::batch::{BatchWriter, PendingWrite, RetryPolicy};
use tidemark_store::{StoreError, from_stored, to_item};

use super::GroupStore;
use crate::dynamo::DynamoStore;

/// Calls in flight when the batch writer puts a batch's partials.
const PARTIAL_WRITES_IN_FLIGHT: usize = 4;

/// How long the batch writer keeps re-sending unprocessed partials (the invocation's own
/// deadline cuts it shorter).
const PARTIAL_WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Write units of a put, from the item's size (a batch write reports none per item).
pub(crate) fn put_units(item: &tidemark_store::Item) -> f64 {
    item_size(item).div_ceil(1024).max(1) as f64
}

fn units(c: Option<&aws_sdk_dynamodb::types::ConsumedCapacity>) -> f64 {
    c.and_then(|c| c.capacity_units()).unwrap_or(0.0)
}

impl GroupStore for DynamoStore {
    async fn tag_histories(
        &self,
        devices: &[(DeviceId, tidemark_schema::Timestamp)],
        now: tidemark_schema::Timestamp,
    ) -> Result<HashMap<DeviceId, TagHistory>, StoreError> {
        let stale = match self.tag_book.lock() {
            Ok(book) => book.stale(devices.iter().map(|(d, t)| (d, *t))),
            Err(_) => devices.iter().map(|(d, _)| d.clone()).collect(),
        };
        if !stale.is_empty() {
            let keys: Vec<Key> = stale
                .iter()
                .map(tidemark_store::tags::history_key)
                .collect();
            let items =
                batch_get(self.client(), self.table(), &keys, GetOptions::default()).await?;
            if let Ok(mut book) = self.tag_book.lock() {
                book.record(&stale, items, now);
            }
        }
        let book = self.tag_book.lock().map_err(|_| StoreError::Request {
            operation: "BatchGetItem",
            message: "the tag book's lock is poisoned".into(),
        })?;
        Ok(devices
            .iter()
            .filter_map(|(d, _)| Some((d.clone(), book.history(d)?.clone())))
            .collect())
    }

    async fn group_manifest(&self, batch: &str) -> Result<Option<GroupBatchItem>, StoreError> {
        let key = EntityKey::GroupBatch(batch.to_owned()).key();
        let out = self
            .client()
            .get_item()
            .table_name(self.table())
            .set_key(Some(key_item(&key)))
            .consistent_read(true)
            .send()
            .await
            .map_err(StoreError::sdk("GetItem"))?;
        out.item.map(from_stored).transpose()
    }

    async fn put_group_manifest(&self, item: &GroupBatchItem) -> Result<f64, StoreError> {
        let out = self
            .client()
            .put_item()
            .table_name(self.table())
            .set_item(Some(to_item(item)?))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(StoreError::sdk("PutItem"))?;
        Ok(units(out.consumed_capacity()))
    }

    async fn put_group_partials(&self, items: &[GroupPartialItem]) -> Result<f64, StoreError> {
        let mut writes = Vec::with_capacity(items.len());
        let mut total = 0.0;
        for (i, p) in items.iter().enumerate() {
            let item = to_item(p)?;
            total += put_units(&item);
            writes.push(PendingWrite::put(i, item));
        }
        let writer = BatchWriter::new(
            self.client().clone(),
            self.table(),
            PARTIAL_WRITES_IN_FLIGHT,
            RetryPolicy::default(),
        );
        let report = writer
            .write_all(writes, tokio::time::Instant::now() + PARTIAL_WRITE_TIMEOUT)
            .await;
        if let Some(r) = report.permanent.first().or(report.refused.first()) {
            return Err(StoreError::Request {
                operation: "BatchWriteItem",
                message: format!("group partial {}/{} refused: {}", r.pk, r.sk, r.why),
            });
        }
        if !report.failed_tags.is_empty() {
            return Err(StoreError::Timeout {
                table: self.table().to_owned(),
                state: "done writing the group partials",
                seconds: PARTIAL_WRITE_TIMEOUT.as_secs(),
            });
        }
        Ok(total)
    }

    async fn delete_group_items(&self, keys: &[Key]) -> Result<f64, StoreError> {
        let mut total = 0.0;
        for key in keys {
            let out = self
                .client()
                .delete_item()
                .table_name(self.table())
                .set_key(Some(key_item(key)))
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await
                .map_err(StoreError::sdk("DeleteItem"))?;
            total += units(out.consumed_capacity());
        }
        Ok(total)
    }
}

#[cfg(any(test, feature = "testing"))]
mod memory {
    use super::*;
    use crate::memory::MemoryStore;
    use tidemark_schema::TagHistoryItem;

    impl MemoryStore {
        /// An injected failure of a group write to `key`: `failing` (an outage), `refusing`
        /// (a refusal) when the key holds their text.
        fn group_fault(&self, key: &Key) -> Result<(), StoreError> {
            let id = format!("{}#{}", key.pk, key.sk);
            let holds = |m: &std::sync::Mutex<Option<String>>| {
                m.lock()
                    .ok()
                    .and_then(|f| f.clone())
                    .is_some_and(|f| id.contains(&f))
            };
            if holds(&self.refusing) {
                return Err(StoreError::Request {
                    operation: "BatchWriteItem",
                    message: format!("{id} refused (injected)"),
                });
            }
            if holds(&self.failing) {
                return Err(StoreError::Timeout {
                    table: "memory".into(),
                    state: "reachable (injected outage)",
                    seconds: 0,
                });
            }
            Ok(())
        }

        fn put_group_item<T: serde::Serialize>(&self, key: Key, v: &T) -> Result<f64, StoreError> {
            self.group_fault(&key)?;
            let item = to_item(v)?;
            let units = put_units(&item);
            self.table.put(item)?;
            Ok(units)
        }
    }

    impl GroupStore for MemoryStore {
        async fn tag_histories(
            &self,
            devices: &[(DeviceId, tidemark_schema::Timestamp)],
            _now: tidemark_schema::Timestamp,
        ) -> Result<HashMap<DeviceId, TagHistory>, StoreError> {
            Ok(devices
                .iter()
                .filter_map(|(d, _)| {
                    let item = self.table.get(&TagHistoryItem::key(d))?;
                    let h: TagHistoryItem = from_stored(item).ok()?;
                    Some((d.clone(), h.epochs))
                })
                .collect())
        }

        async fn group_manifest(&self, batch: &str) -> Result<Option<GroupBatchItem>, StoreError> {
            let key = EntityKey::GroupBatch(batch.to_owned()).key();
            self.table.get(&key).map(from_stored).transpose()
        }

        async fn put_group_manifest(&self, item: &GroupBatchItem) -> Result<f64, StoreError> {
            self.put_group_item(
                Key {
                    pk: item.pk.clone(),
                    sk: item.sk.clone(),
                },
                item,
            )
        }

        async fn put_group_partials(&self, items: &[GroupPartialItem]) -> Result<f64, StoreError> {
            let mut total = 0.0;
            for p in items {
                total += self.put_group_item(
                    Key {
                        pk: p.pk.clone(),
                        sk: p.sk.clone(),
                    },
                    p,
                )?;
            }
            Ok(total)
        }

        async fn delete_group_items(&self, keys: &[Key]) -> Result<f64, StoreError> {
            for k in keys {
                self.group_fault(k)?;
                self.table.lock().remove(&(k.pk.clone(), k.sk.clone()));
            }
            Ok(keys.len() as f64)
        }
    }
}
