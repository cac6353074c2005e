//! The one in-memory test engine: a table with DynamoDB's semantics for what Tidemark asks
//! of it (items by `pk`/`sk`, Query with a key condition, order, `Limit`,
//! `ExclusiveStartKey`, a filter applied after the limit, the sparse GSIs; Get and
//! BatchGet; and, in `write/memory.rs`, ingest's batched puts, conditional inserts and
//! packed slot writes through the real slot writer). It refuses what DynamoDB refuses
//! ([`crate::limits`]): an item over 400 KB or holding a number outside DynamoDB's range,
//! more than 25 requests in one `BatchWriteItem` or `BatchExecuteStatement`, one key twice in
//! a batch; and a query page ends at 1 MB read. Each function's in-memory store (the API's,
//! the aggregator's, ingest's on `&MemTable`) keeps its items here and reads them back
//! through the same readers ([`crate::read`]) the DynamoDB stores use, so a handler's unit
//! tests exercise the real read path. It can also cut pages shorter, to exercise
//! resumption. Integration tests against DynamoDB Local remain the test of every store
//! operation; this is for handler logic.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Mutex, MutexGuard};

use tidemark_schema::Key;
use tidemark_schema::table::attr;

use crate::limits::{
    MAX_ITEM_BYTES, MAX_PAGE_BYTES, item_size, item_too_large, number_out_of_range,
};
use crate::read::{Page, QuerySpec, QueryStore, SkRange};
use crate::write_log::{KeyWrite, writes_of};
use crate::{Item, StoreError};

/// Items by table key, and, when the table keeps one, the log of its writes
/// ([`crate::write_log`]). Reads go straight to the map; writes that should be logged go
/// through [`MemTable::insert`] and [`MemTable::remove`].
#[derive(Debug, Default)]
pub struct Items {
    map: BTreeMap<(String, String), Item>,
    log: Option<Vec<KeyWrite>>,
}

impl std::ops::Deref for Items {
    type Target = BTreeMap<(String, String), Item>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl std::ops::DerefMut for Items {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.map
    }
}

impl Items {
    fn logged(&mut self, old: Option<&Item>, new: Option<&Item>) {
        if let Some(log) = &mut self.log {
            log.extend(writes_of(old, new));
        }
    }
}

#[derive(Debug, Default)]
pub struct MemTable {
    items: Mutex<Items>,
    /// When set, no query page holds more than this many evaluated items.
    page_cap: Option<usize>,
}

fn text(item: &Item, a: &str) -> Option<String> {
    item.get(a).and_then(|v| v.as_s().ok()).cloned()
}

/// The table key of an item, or why it has none.
pub(crate) fn key_of(item: &Item) -> Result<(String, String), StoreError> {
    match (text(item, attr::PK), text(item, attr::SK)) {
        (Some(pk), Some(sk)) => Ok((pk, sk)),
        _ => Err(StoreError::Request {
            operation: "PutItem",
            message: "ValidationException: the item lacks its string key attributes".into(),
        }),
    }
}

impl MemTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Pages end after `cap` evaluated items even below the limit (like the 1 MB cap).
    pub fn with_page_cap(mut self, cap: usize) -> Self {
        self.page_cap = Some(cap.max(1));
        self
    }

    /// Logs every write from now on ([`MemTable::take_writes`]).
    pub fn with_write_log(self) -> Self {
        self.lock().log = Some(Vec::new());
        self
    }

    /// The writes logged since the last call (none when the table keeps no log).
    pub fn take_writes(&self) -> Vec<KeyWrite> {
        self.lock()
            .log
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Stores `item` under its key, replacing what was there; refuses, as DynamoDB does, an
    /// item over 400 KB or without its key.
    pub fn put(&self, item: Item) -> Result<(), StoreError> {
        Self::insert(&mut self.lock(), item)
    }

    /// [`MemTable::put`] into items already locked (a conditional write's second half).
    pub fn insert(items: &mut Items, item: Item) -> Result<(), StoreError> {
        let k = key_of(&item)?;
        let bytes = item_size(&item);
        if bytes > MAX_ITEM_BYTES {
            return Err(item_too_large(bytes));
        }
        if let Some(e) = number_out_of_range(&item) {
            return Err(e);
        }
        if items.log.is_some() {
            let old = items.map.get(&k).cloned();
            items.logged(old.as_ref(), Some(&item));
        }
        items.map.insert(k, item);
        Ok(())
    }

    /// Deletes the item under `key` from items already locked, returning it.
    pub fn remove(items: &mut Items, key: &(String, String)) -> Option<Item> {
        let old = items.map.remove(key)?;
        items.logged(Some(&old), None);
        Some(old)
    }

    pub fn put_entity<T: serde::Serialize>(&self, v: &T) -> Result<(), StoreError> {
        self.put(crate::to_item(v)?)
    }

    pub fn get(&self, key: &Key) -> Option<Item> {
        self.lock().get(&(key.pk.clone(), key.sk.clone())).cloned()
    }

    /// The existing items of `keys`.
    pub fn batch_get(&self, keys: &[Key]) -> Vec<Item> {
        let items = self.lock();
        keys.iter()
            .filter_map(|k| items.get(&(k.pk.clone(), k.sk.clone())).cloned())
            .collect()
    }

    /// Every item, in key order.
    pub fn scan(&self) -> Vec<Item> {
        self.lock().values().cloned().collect()
    }

    /// The items, locked: for a store's conditional writes, which read and write as one
    /// step as DynamoDB's conditions do (writing through [`MemTable::insert`] keeps
    /// DynamoDB's checks).
    pub fn lock(&self) -> MutexGuard<'_, Items> {
        self.items.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether a range holds no key (`BTreeMap::range` panics on some of these).
fn empty<K: Ord>(lo: &Bound<K>, hi: &Bound<K>) -> bool {
    match (lo, hi) {
        (Bound::Excluded(a), Bound::Excluded(b)) => a >= b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => a > b,
        _ => false,
    }
}

impl QueryStore for MemTable {
    async fn query(
        &self,
        spec: &QuerySpec,
        start: Option<Item>,
        limit: i32,
    ) -> Result<Page, StoreError> {
        let pos_of = |it: &Item| -> Vec<String> {
            spec.position_attrs()
                .iter()
                .map(|a| text(it, a).unwrap_or_default())
                .collect()
        };
        let limit = usize::try_from(limit.max(1)).unwrap_or(1);
        let cap = self.page_cap.map_or(limit, |c| c.min(limit));
        let mut matching: Vec<Item> = {
            let items = self.lock();
            if spec.index.is_none() {
                // A sort key range of one partition is a range of the map: only the items a
                // page evaluates are touched, as in DynamoDB.
                let p = &spec.partition;
                let at = |sk: &str| (p.clone(), sk.to_owned());
                let (mut lo, mut hi) = match &spec.range {
                    SkRange::Between(a, b) => (Bound::Included(at(a)), Bound::Included(at(b))),
                    _ => (
                        Bound::Included(at("")),
                        Bound::Included(at(&char::MAX.to_string())),
                    ),
                };
                if let Some(sk) = start.as_ref().and_then(|s| text(s, attr::SK)) {
                    if spec.forward {
                        lo = Bound::Excluded(at(&sk));
                    } else {
                        hi = Bound::Excluded(at(&sk));
                    }
                }
                if empty(&lo, &hi) {
                    Vec::new()
                } else {
                    let range = items.range((lo, hi));
                    let inside = |(k, it): (&(String, String), &Item)| {
                        spec.in_range(&k.1).then(|| it.clone())
                    };
                    if spec.forward {
                        range.filter_map(inside).take(cap + 1).collect()
                    } else {
                        range.rev().filter_map(inside).take(cap + 1).collect()
                    }
                }
            } else {
                let mut m: Vec<Item> = items
                    .values()
                    .filter(|it| {
                        text(it, spec.partition_attr()).as_deref() == Some(&spec.partition)
                    })
                    .filter(|it| text(it, spec.sort_attr()).is_some_and(|s| spec.in_range(&s)))
                    .cloned()
                    .collect();
                m.sort_by_cached_key(|it| pos_of(it));
                if !spec.forward {
                    m.reverse();
                }
                if let Some(start) = start {
                    let sp = pos_of(&start);
                    m.retain(|it| {
                        let p = pos_of(it);
                        if spec.forward { p > sp } else { p < sp }
                    });
                }
                m
            }
        };
        let mut more = matching.len() > cap || (matching.len() == cap && cap == limit);
        // DynamoDB's 1 MB: the page ends with the item that brings what it read to 1 MB.
        let mut read = 0;
        if let Some(last) = matching.iter().position(|it| {
            read += item_size(it);
            read >= MAX_PAGE_BYTES
        }) && last + 1 < matching.len()
        {
            matching.truncate(last + 1);
            more = true;
        }
        matching.truncate(cap);
        // LastEvaluatedKey: the table key, plus the index key when querying the index.
        let index_key = [spec.partition_attr(), spec.sort_attr()];
        let key_attrs: &[&str] = if spec.index.is_some() {
            &[attr::PK, attr::SK, index_key[0], index_key[1]]
        } else {
            &[attr::PK, attr::SK]
        };
        let last_key = matching.last().filter(|_| more).map(|it| {
            key_attrs
                .iter()
                .filter_map(|a| it.get(*a).map(|v| (a.to_string(), v.clone())))
                .collect::<Item>()
        });
        if let Some((a, v)) = &spec.filter_eq {
            matching.retain(|it| text(it, a).as_deref() == Some(v.as_str()));
        }
        Ok(Page {
            items: matching,
            last_key,
        })
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::types::AttributeValue;

    use super::*;

    fn item(pk: &str, sk: &str) -> Item {
        Item::from([
            (attr::PK.to_owned(), AttributeValue::S(pk.into())),
            (attr::SK.to_owned(), AttributeValue::S(sk.into())),
        ])
    }

    fn sks(page: &Page) -> Vec<String> {
        page.items
            .iter()
            .map(|i| text(i, attr::SK).unwrap())
            .collect()
    }

    #[test]
    fn an_item_over_400_kb_or_without_its_key_is_refused_like_dynamodb() {
        let t = MemTable::new();
        let mut big = item("p", "a");
        big.insert("x".into(), AttributeValue::S("y".repeat(MAX_ITEM_BYTES)));
        assert!(t.put(big).is_err());
        assert!(
            t.put(Item::from([(
                attr::PK.to_owned(),
                AttributeValue::S("p".into())
            )]))
            .is_err()
        );
        assert!(t.scan().is_empty());
    }

    #[tokio::test]
    async fn a_query_page_ends_with_the_item_that_brings_it_to_1_mb() {
        let t = MemTable::new();
        for i in 0..5 {
            let mut it = item("p", &format!("{i}"));
            it.insert("d".into(), AttributeValue::S("x".repeat(300_000)));
            t.put(it).unwrap();
        }
        let spec = QuerySpec::table("p".into(), SkRange::All, true);
        let page = t.query(&spec, None, 100).await.unwrap();
        assert_eq!(sks(&page), ["0", "1", "2", "3"], "4 x 300 KB passes 1 MB");
        let rest = t.query(&spec, page.last_key, 100).await.unwrap();
        assert_eq!(sks(&rest), ["4"]);
        assert!(rest.last_key.is_none());
    }

    #[tokio::test]
    async fn a_table_query_pages_its_range_in_both_directions_from_the_last_key() {
        let t = MemTable::new().with_page_cap(2);
        for (pk, sk) in [
            ("p", "a"),
            ("p", "b"),
            ("p", "c"),
            ("p", "d"),
            ("q", "b"),
            ("o", "c"),
        ] {
            t.put(item(pk, sk)).unwrap();
        }
        let range = SkRange::Between("b".into(), "d".into());
        for (forward, want) in [(true, ["b", "c", "d"]), (false, ["d", "c", "b"])] {
            let spec = QuerySpec::table("p".into(), range.clone(), forward);
            let mut got = Vec::new();
            let mut start = None;
            loop {
                let page = t.query(&spec, start, 10).await.unwrap();
                got.extend(sks(&page));
                match page.last_key {
                    Some(k) => start = Some(k),
                    None => break,
                }
            }
            assert_eq!(got, want, "forward {forward}");
        }
        // A start key at the range's edge leaves nothing, without a panic.
        let spec = QuerySpec::table("p".into(), SkRange::Between("b".into(), "b".into()), true);
        let page = t.query(&spec, Some(item("p", "b")), 10).await.unwrap();
        assert!(page.items.is_empty() && page.last_key.is_none());
    }
}
