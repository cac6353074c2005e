//! The in-memory engine ([`MemTable`]) as ingest writes to it: batched puts, conditional
//! inserts and merges ([`BatchWriteApi`]), and packed slot writes through the real
//! [`SlotWriter`] ([`PartTable`], [`SlotStore`]), each refusing what DynamoDB refuses
//! ([`crate::limits`]). Apart from `memory.rs` so that code reading through the engine (the
//! API's in-memory store) does not link the write paths it never takes.

use crate::limits::{
    MAX_BATCH_WRITE, MAX_ITEM_BYTES, item_size, item_too_large, too_many_requests,
};
use crate::memory::{MemTable, key_of};
use crate::retry::RetryPolicy;
use crate::write::batch::{BatchCallError, BatchWriteApi, Inserted, Merged};
use crate::write::map_merge::{merge_is_noop, merge_items};
use crate::write::slots::{Content, PartTable, SlotKey, SlotStore, SlotWrite, SlotWriter, Stamp};
use crate::{Item, StoreError};

/// A batch call's requests, checked as DynamoDB checks them before writing any: at most
/// [`MAX_BATCH_WRITE`], no key twice.
fn check_batch(operation: &'static str, items: &[Item]) -> Result<(), BatchCallError> {
    let refused = |e: StoreError| BatchCallError {
        retryable: false,
        error: e,
    };
    if items.len() > MAX_BATCH_WRITE {
        return Err(refused(too_many_requests(operation, items.len())));
    }
    let mut keys = std::collections::HashSet::new();
    for item in items {
        if !keys.insert(key_of(item).map_err(refused)?) {
            return Err(BatchCallError::request(
                false,
                operation,
                "ValidationException: Provided list of item keys contains duplicates",
            ));
        }
    }
    Ok(())
}

/// Ingest's batched writes, as DynamoDB answers them: never unprocessed, never throttled.
impl BatchWriteApi for &MemTable {
    async fn put_batch(&self, _: &str, items: Vec<Item>) -> Result<Vec<Item>, BatchCallError> {
        check_batch("BatchWriteItem", &items)?;
        // The whole call is validated before any of it is written.
        if let Some(bytes) = items.iter().map(item_size).find(|b| *b > MAX_ITEM_BYTES) {
            return Err(BatchCallError::request(
                false,
                "BatchWriteItem",
                item_too_large(bytes).to_string(),
            ));
        }
        let mut t = self.lock();
        for i in items {
            MemTable::insert(&mut t, i).map_err(|e| BatchCallError {
                retryable: false,
                error: e,
            })?;
        }
        Ok(Vec::new())
    }

    async fn merge_item(
        &self,
        _: &str,
        item: Item,
        map_attr: &'static str,
    ) -> Result<Merged, BatchCallError> {
        let refused = |e: StoreError| BatchCallError {
            retryable: false,
            error: e,
        };
        let k = key_of(&item).map_err(refused)?;
        let mut t = self.lock();
        let (merged, outcome) = match t.get(&k) {
            Some(old) if merge_is_noop(old, &item, map_attr) => return Ok(Merged::Unchanged),
            Some(old) => (merge_items(old, &item, map_attr), Merged::Merged),
            None => (item, Merged::Inserted),
        };
        MemTable::insert(&mut t, merged).map_err(refused)?;
        Ok(outcome)
    }

    async fn insert_batch(
        &self,
        _: &str,
        items: Vec<Item>,
    ) -> Result<Vec<Inserted>, BatchCallError> {
        check_batch("BatchExecuteStatement", &items)?;
        let mut t = self.lock();
        Ok(items
            .into_iter()
            .map(|item| {
                let bytes = item_size(&item);
                if bytes > MAX_ITEM_BYTES {
                    return Inserted::Refused(item_too_large(bytes).to_string());
                }
                match key_of(&item) {
                    Ok(k) if t.contains_key(&k) => Inserted::Taken,
                    Ok(_) => match MemTable::insert(&mut t, item) {
                        Ok(()) => Inserted::Yes,
                        Err(e) => Inserted::Refused(e.to_string()),
                    },
                    Err(e) => Inserted::Refused(e.to_string()),
                }
            })
            .collect())
    }

    async fn count_failure(
        &self,
        _: &str,
        record: &tidemark_schema::keys::FailedRecord,
        error: &str,
        ttl: i64,
    ) -> Result<u32, BatchCallError> {
        Ok(crate::failures::count_in_memory(self, record, error, ttl))
    }
}

/// The slot writer's reads and conditional puts.
impl PartTable for &MemTable {
    async fn slot_items(
        &self,
        _: &str,
        pk: &str,
        lo: &str,
        hi: &str,
    ) -> Result<Vec<Item>, StoreError> {
        if lo > hi {
            return Ok(Vec::new());
        }
        let at = |sk: &str| (pk.to_owned(), sk.to_owned());
        Ok(self
            .lock()
            .range(at(lo)..=at(hi))
            .map(|(_, i)| i.clone())
            .collect())
    }

    async fn put_part(
        &self,
        _: &str,
        item: Item,
        expected: Option<u64>,
    ) -> Result<bool, StoreError> {
        let k = key_of(&item)?;
        let mut t = self.lock();
        let version = |i: &Item| {
            i.get(tidemark_schema::field::VERSION)
                .and_then(|v| v.as_n().ok())
                .and_then(|n| n.parse::<u64>().ok())
        };
        let holds = match (t.get(&k), expected) {
            (None, None) => true,
            (Some(old), Some(v)) => version(old) == Some(v),
            _ => false,
        };
        if !holds {
            return Ok(false);
        }
        MemTable::insert(&mut t, item)?;
        Ok(true)
    }
}

/// Packed slots, written by the real slot writer.
impl SlotStore for &MemTable {
    async fn write_slot(
        &self,
        table: &str,
        retry: RetryPolicy,
        key: &SlotKey,
        incoming: &Content,
        stamp: Stamp,
        deadline: tokio::time::Instant,
    ) -> Result<SlotWrite, StoreError> {
        SlotWriter::new(*self, table, retry)
            .arrived(stamp.arrived)
            .write_content(key, incoming, stamp.ttl, deadline)
            .await
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::types::AttributeValue;

    use tidemark_schema::table::attr;

    use super::*;

    fn item(pk: &str, sk: &str) -> Item {
        [
            (attr::PK.to_owned(), AttributeValue::S(pk.into())),
            (attr::SK.to_owned(), AttributeValue::S(sk.into())),
        ]
        .into_iter()
        .collect()
    }

    #[tokio::test]
    async fn a_batch_of_more_than_25_requests_or_naming_a_key_twice_is_refused_like_dynamodb() {
        let t = MemTable::new();
        let items = |n: usize| {
            (0..n)
                .map(|i| item("p", &format!("{i:02}")))
                .collect::<Vec<_>>()
        };
        let e = (&t).put_batch("t", items(26)).await.unwrap_err();
        assert!(!e.retryable && e.error.to_string().contains("ValidationException"));
        let e = (&t).insert_batch("t", items(26)).await.unwrap_err();
        assert!(!e.retryable, "{}", e.error);
        let twice = vec![item("p", "a"), item("p", "a")];
        assert!((&t).put_batch("t", twice.clone()).await.is_err());
        assert!((&t).insert_batch("t", twice).await.is_err());
        assert!(t.scan().is_empty(), "nothing of a refused call is written");
        assert!((&t).put_batch("t", items(25)).await.unwrap().is_empty());
        let answers = (&t).insert_batch("t", items(3)).await.unwrap();
        assert_eq!(answers, vec![Inserted::Taken; 3]);
        assert_eq!(t.scan().len(), 25);
    }
}
