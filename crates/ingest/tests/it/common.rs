//! Shared helpers of the ingest tests: events, a fixed clock, table scans, and store fakes.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use aws_lambda_events::event::kinesis::KinesisEvent;
use aws_sdk_dynamodb::types::AttributeValue;
use base64::Engine;
use serde_json::json;
use tidemark_ingest::{DynamoLookups, Ingest, IngestConfig};
use tidemark_schema::LayoutHistory;
use tidemark_schema::packed::{self, SlotReadings};
use tidemark_schema::{Clock, DeviceId, LayoutHistoryItem, Timestamp};
use tidemark_store::limits::{MAX_ITEM_BYTES, item_size, item_too_large};
use tidemark_store::memory::MemTable;
use tidemark_store::retry::RetryPolicy;
use tidemark_store::write::batch::{BatchCallError, BatchWriteApi, Inserted, Merged};
use tidemark_store::write::map_merge::{merge_is_noop, merge_items};
use tidemark_store::write::slots::{Content, SlotKey, SlotStore, SlotWrite, Stamp};
use tidemark_store::{Item, StoreError};

/// The clock of every test: five minutes after the sample readings of docs/design.md §9.
pub fn now() -> Timestamp {
    ts("2026-04-20T14:05:00Z")
}

pub fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

pub fn dev(s: &str) -> DeviceId {
    DeviceId::new(s).unwrap()
}

/// A deadline that only matters when something is wrong: the shared DynamoDB Local can be
/// slow when other test suites hammer it, and a test must not fail for that.
pub fn soon() -> Instant {
    Instant::now() + Duration::from_secs(300)
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// An event file: `events/…` of the workspace or `tests/fixtures/…` of this crate.
pub fn load_event(relative: &str) -> KinesisEvent {
    let candidates = [root().join("../..").join(relative), root().join(relative)];
    for p in candidates {
        if let Ok(bytes) = std::fs::read(&p) {
            return serde_json::from_slice::<tidemark_ingest::KinesisBatch>(&bytes)
                .map(|b| b.0)
                .unwrap_or_else(|e| panic!("{} is not a Kinesis event: {e}", p.display()));
        }
    }
    panic!("no event file {relative}");
}

/// The sequence number of the `i`-th record of [`event_of`]: 56 digits, increasing.
pub fn seq(i: usize) -> String {
    format!("4959033827149025660855969253836157109592157598{i:010}")
}

/// A Kinesis event of raw payloads, arriving one millisecond apart from 14:04:00.
pub fn event_of<B: AsRef<[u8]>>(payloads: &[B]) -> KinesisEvent {
    let keyed: Vec<(String, &[u8])> = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| (format!("pk-{}", i % 7), p.as_ref()))
        .collect();
    keyed_event_of(&keyed)
}

/// [`event_of`] with each record's partition key.
pub fn keyed_event_of<K: AsRef<str>, B: AsRef<[u8]>>(records: &[(K, B)]) -> KinesisEvent {
    let b64 = base64::engine::general_purpose::STANDARD;
    let records: Vec<_> = records
        .iter()
        .enumerate()
        .map(|(i, (key, p))| {
            json!({
                "kinesis": {
                    "kinesisSchemaVersion": "1.0",
                    "partitionKey": key.as_ref(),
                    "sequenceNumber": seq(i),
                    "data": b64.encode(p.as_ref()),
                    "approximateArrivalTimestamp":
                        (ts("2026-04-20T14:04:00Z").epoch_millis() + i as i64) as f64 / 1000.0,
                },
                "eventSource": "aws:kinesis",
                "eventVersion": "1.0",
                "eventID": format!("shardId-000000000000:{}", seq(i)),
                "eventName": "aws:kinesis:record",
                "awsRegion": "us-east-1",
                "eventSourceARN": "arn:aws:kinesis:us-east-1:123456789012:stream/tidemark-readings",
            })
        })
        .collect();
    serde_json::from_value(json!({ "Records": records })).unwrap()
}

pub fn reading_json(device: &str, at: &str, temperature: f64) -> String {
    json!({"deviceId": device, "timestamp": at, "temperature": temperature}).to_string()
}

pub fn config(table: &str) -> IngestConfig {
    let mut c = IngestConfig::new(table);
    c.deadline_margin = Duration::ZERO;
    c.retry.base_delay = Duration::from_millis(1);
    c.retry.max_delay = Duration::from_millis(20);
    c
}

pub type LocalIngest<W = aws_sdk_dynamodb::Client> = Ingest<W, DynamoLookups, DynamoLookups>;

/// The handler against a DynamoDB Local table, writing through `writes`.
pub fn local_ingest<W: BatchWriteApi + SlotStore>(
    client: &aws_sdk_dynamodb::Client,
    config: IngestConfig,
    writes: W,
) -> LocalIngest<W> {
    let lookups = DynamoLookups::new(client.clone(), config.table_name.clone());
    Ingest::from_parts(
        config,
        writes,
        lookups.clone(),
        lookups,
        Clock::fixed(now()),
    )
}

/// Every item of the table, in key order.
pub async fn scan(client: &aws_sdk_dynamodb::Client, table: &str) -> Vec<Item> {
    tidemark_testkit::scan_table(client, table).await
}

pub fn s(item: &Item, name: &str) -> String {
    match item.get(name) {
        Some(AttributeValue::S(v)) => v.clone(),
        Some(AttributeValue::N(v)) => v.clone(),
        other => format!("{other:?}"),
    }
}

pub async fn get(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    pk: &str,
    sk: &str,
) -> Option<Item> {
    client
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(pk.into()))
        .key("sk", AttributeValue::S(sk.into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
}

fn key_of(item: &Item) -> (String, String) {
    (s(item, "pk"), s(item, "sk"))
}

/// Wraps a real writer and misbehaves the way DynamoDB does under load: the first
/// `throttle_calls` calls fail with a throttling error, the next `stingy_calls` calls write
/// only half of their items and return the rest as unprocessed (a single-item merge call,
/// which has no unprocessed items, is throttled instead), and items of partition `poison_pk`
/// are never written (always returned unprocessed, or failed with a server error).
pub struct Flaky<A> {
    pub inner: A,
    pub throttle_calls: AtomicUsize,
    pub stingy_calls: AtomicUsize,
    pub poison_pk: Option<String>,
    pub calls: AtomicUsize,
}

impl<A> Flaky<A> {
    pub fn new(inner: A) -> Self {
        Flaky {
            inner,
            throttle_calls: AtomicUsize::new(0),
            stingy_calls: AtomicUsize::new(0),
            poison_pk: None,
            calls: AtomicUsize::new(0),
        }
    }
}

impl<A: SlotStore> SlotStore for Flaky<A> {
    async fn write_slot(
        &self,
        table: &str,
        retry: RetryPolicy,
        key: &SlotKey,
        incoming: &Content,
        stamp: Stamp,
        deadline: tokio::time::Instant,
    ) -> Result<SlotWrite, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner
            .write_slot(table, retry, key, incoming, stamp, deadline)
            .await
    }
}

fn take_one(n: &AtomicUsize) -> bool {
    n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1))
        .is_ok()
}

impl<A: BatchWriteApi> BatchWriteApi for Flaky<A> {
    async fn put_batch(&self, table: &str, items: Vec<Item>) -> Result<Vec<Item>, BatchCallError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if take_one(&self.throttle_calls) {
            return Err(BatchCallError::request(
                true,
                "BatchWriteItem",
                "ProvisionedThroughputExceededException (injected)",
            ));
        }
        let (poisoned, mut items): (Vec<Item>, Vec<Item>) = items
            .into_iter()
            .partition(|i| self.poison_pk.as_deref() == Some(s(i, "pk").as_str()));
        let mut left = poisoned;
        if take_one(&self.stingy_calls) {
            let keep = items.len() / 2;
            left.extend(items.split_off(keep));
        }
        if !items.is_empty() {
            left.extend(self.inner.put_batch(table, items).await?);
        }
        Ok(left)
    }

    async fn merge_item(
        &self,
        table: &str,
        item: Item,
        map_attr: &'static str,
    ) -> Result<Merged, BatchCallError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if take_one(&self.throttle_calls) || take_one(&self.stingy_calls) {
            return Err(BatchCallError::request(
                true,
                "UpdateItem",
                "ProvisionedThroughputExceededException (injected)",
            ));
        }
        if self.poison_pk.as_deref() == Some(s(&item, "pk").as_str()) {
            return Err(BatchCallError::request(
                true,
                "UpdateItem",
                "InternalServerError (injected, always)",
            ));
        }
        self.inner.merge_item(table, item, map_attr).await
    }

    async fn count_failure(
        &self,
        table: &str,
        record: &tidemark_schema::keys::FailedRecord,
        error: &str,
        ttl: i64,
    ) -> Result<u32, BatchCallError> {
        self.inner.count_failure(table, record, error, ttl).await
    }

    async fn insert_batch(
        &self,
        table: &str,
        items: Vec<Item>,
    ) -> Result<Vec<Inserted>, BatchCallError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if take_one(&self.throttle_calls) {
            return Err(BatchCallError::request(
                true,
                "BatchExecuteStatement",
                "ProvisionedThroughputExceededException (injected)",
            ));
        }
        // Poisoned items and, on a stingy call, the second half are throttled statements.
        let stingy = take_one(&self.stingy_calls);
        let keep = items.len() / 2;
        let mut answers = vec![None; items.len()];
        let mut sent = Vec::new();
        for (i, item) in items.into_iter().enumerate() {
            if self.poison_pk.as_deref() == Some(s(&item, "pk").as_str()) || (stingy && i >= keep) {
                answers[i] = Some(Inserted::Retry("ThrottlingError (injected)".into()));
            } else {
                sent.push((i, item));
            }
        }
        let (at, items): (Vec<usize>, Vec<Item>) = sent.into_iter().unzip();
        if !items.is_empty() {
            for (i, a) in at
                .into_iter()
                .zip(self.inner.insert_batch(table, items).await?)
            {
                answers[i] = Some(a);
            }
        }
        Ok(answers
            .into_iter()
            .map(|a| a.unwrap_or(Inserted::Taken))
            .collect())
    }
}

/// Ingest's store traits over the one in-memory test engine ([`MemTable`], which refuses
/// what DynamoDB refuses), counting every operation.
#[derive(Default)]
pub struct MemoryStore {
    pub items: MemTable,
    pub layout_histories: Mutex<Vec<LayoutHistoryItem>>,
    /// Packed slots by (partition, slot start): the placement and merge rules of the real
    /// slot writer, one part a slot.
    pub slots: Mutex<HashMap<(String, Timestamp), SlotReadings>>,
    pub slot_writes: AtomicUsize,
    pub devices: Mutex<HashSet<DeviceId>>,
    pub fail_layout_loads: std::sync::atomic::AtomicBool,
    pub layout_loads: AtomicUsize,
    pub device_lookups: AtomicUsize,
    pub devices_asked: AtomicUsize,
    pub write_calls: AtomicUsize,
    /// Writes fail with a permanent error when set.
    pub refuse_writes: std::sync::atomic::AtomicBool,
    /// Writes of items under this partition key fail with a permanent error (DynamoDB
    /// refusing one item for good); other items are written.
    pub refuse_pk: Mutex<Option<String>>,
    /// Writing an item under this partition key panics (a bug of ours).
    pub panic_pk: Mutex<Option<String>>,
}

impl MemoryStore {
    /// Refuses or panics, as set, on an item of the marked partitions.
    fn check(&self, item: &Item, operation: &'static str) -> Result<(), BatchCallError> {
        let pk = s(item, "pk");
        if self.panic_pk.lock().unwrap().as_deref() == Some(pk.as_str()) {
            panic!("injected bug: writing {pk}");
        }
        if self.refuse_pk.lock().unwrap().as_deref() == Some(pk.as_str()) {
            return Err(BatchCallError::request(
                false,
                operation,
                "ValidationException: One or more parameter values were invalid (injected)",
            ));
        }
        Ok(())
    }
}

impl MemoryStore {
    pub fn len(&self) -> usize {
        self.items.lock().len()
    }
}

impl BatchWriteApi for &MemoryStore {
    async fn put_batch(&self, _: &str, items: Vec<Item>) -> Result<Vec<Item>, BatchCallError> {
        self.write_calls.fetch_add(1, Ordering::SeqCst);
        assert!(items.len() <= 25, "BatchWriteItem takes at most 25 items");
        let keys: HashSet<_> = items.iter().map(key_of).collect();
        assert_eq!(
            keys.len(),
            items.len(),
            "DynamoDB refuses duplicate keys in one call"
        );
        if self.refuse_writes.load(Ordering::SeqCst) {
            return Err(BatchCallError::request(
                false,
                "BatchWriteItem",
                "ValidationException (injected)",
            ));
        }
        for i in &items {
            self.check(i, "BatchWriteItem")?;
        }
        // DynamoDB validates the whole call before writing any of it.
        if let Some(bytes) = items.iter().map(item_size).find(|b| *b > MAX_ITEM_BYTES) {
            return Err(BatchCallError::request(
                false,
                "BatchWriteItem",
                item_too_large(bytes).to_string(),
            ));
        }
        for i in items {
            self.items
                .put(i)
                .map_err(|e| BatchCallError::request(false, "BatchWriteItem", e.to_string()))?;
        }
        Ok(Vec::new())
    }

    async fn merge_item(
        &self,
        _: &str,
        item: Item,
        map_attr: &'static str,
    ) -> Result<Merged, BatchCallError> {
        self.write_calls.fetch_add(1, Ordering::SeqCst);
        if self.refuse_writes.load(Ordering::SeqCst) {
            return Err(BatchCallError::request(
                false,
                "UpdateItem",
                "ValidationException (injected)",
            ));
        }
        self.check(&item, "UpdateItem")?;
        let mut t = self.items.lock();
        let k = key_of(&item);
        Ok(match t.get(&k) {
            Some(old) if merge_is_noop(old, &item, map_attr) => Merged::Unchanged,
            Some(old) => {
                let merged = merge_items(old, &item, map_attr);
                let bytes = item_size(&merged);
                if bytes > MAX_ITEM_BYTES {
                    return Err(BatchCallError::request(
                        false,
                        "UpdateItem",
                        item_too_large(bytes).to_string(),
                    ));
                }
                t.insert(k, merged);
                Merged::Merged
            }
            None => {
                t.insert(k, item);
                Merged::Inserted
            }
        })
    }

    async fn count_failure(
        &self,
        _: &str,
        record: &tidemark_schema::keys::FailedRecord,
        error: &str,
        ttl: i64,
    ) -> Result<u32, BatchCallError> {
        Ok(tidemark_store::failures::count_in_memory(
            &self.items,
            record,
            error,
            ttl,
        ))
    }
}

impl tidemark_ingest::LayoutHistorySource for &MemoryStore {
    async fn load_layout_histories(
        &self,
    ) -> Result<Vec<Result<LayoutHistoryItem, StoreError>>, StoreError> {
        self.layout_loads.fetch_add(1, Ordering::SeqCst);
        if self.fail_layout_loads.load(Ordering::SeqCst) {
            return Err(StoreError::Request {
                operation: "Query",
                message: "injected outage".into(),
            });
        }
        Ok(self
            .layout_histories
            .lock()
            .unwrap()
            .iter()
            .cloned()
            .map(Ok)
            .collect())
    }

    async fn replace_default_layout(
        &self,
        history: &LayoutHistory,
        version: u64,
    ) -> Result<bool, StoreError> {
        let mut configs = self.layout_histories.lock().unwrap();
        let key = tidemark_schema::EntityKey::DefaultLayout.key();
        let stored = configs.iter().position(|c| c.sk == key.sk);
        if stored.map_or(0, |i| configs[i].version) != version {
            return Ok(false);
        }
        let mut item = LayoutHistoryItem::default_layout(history.clone());
        item.version = version + 1;
        match stored {
            Some(i) => configs[i] = item,
            None => configs.push(item),
        }
        Ok(true)
    }
}

impl SlotStore for &MemoryStore {
    async fn write_slot(
        &self,
        _: &str,
        _: RetryPolicy,
        key: &SlotKey,
        incoming: &Content,
        _: Stamp,
        _: tokio::time::Instant,
    ) -> Result<SlotWrite, StoreError> {
        if self.refuse_writes.load(Ordering::SeqCst) {
            return Err(StoreError::Request {
                operation: "PutItem",
                message: "ValidationException (injected)".into(),
            });
        }
        if self.refuse_pk.lock().unwrap().as_deref() == Some(key.pk.as_str()) {
            return Err(StoreError::Request {
                operation: "PutItem",
                message: "ValidationException: a slot part DynamoDB refuses (injected)".into(),
            });
        }
        // As the slot writer places values (docs/design.md §4): a value stays in every slot
        // holding it (its own, or the one before, which carries it); a new one goes to the
        // next slot if the write reaches into it and it holds something, else to this slot.
        let mut slots = self.slots.lock().unwrap();
        let next = key.len.next(key.start);
        let next_has_parts = slots
            .get(&(key.pk.clone(), next))
            .is_some_and(|r| !r.is_empty());
        let mut by_slot: BTreeMap<Timestamp, SlotReadings> = BTreeMap::new();
        for (at, metrics) in &incoming.readings {
            let own = key.len.start_of(*at);
            for (name, v) in metrics {
                let holders: Vec<Timestamp> = [key.len.first_holder(*at), own]
                    .into_iter()
                    .filter(|s| {
                        slots
                            .get(&(key.pk.clone(), *s))
                            .and_then(|r| r.get(at))
                            .is_some_and(|m| m.contains_key(name))
                    })
                    .collect();
                let into = if !holders.is_empty() {
                    holders
                } else if own == next && next_has_parts {
                    vec![next]
                } else {
                    vec![key.start]
                };
                for slot in into {
                    let row = by_slot.entry(slot).or_default().entry(*at).or_default();
                    row.insert(name.clone(), *v);
                }
            }
        }
        let mut written = false;
        for (slot, readings) in by_slot {
            let stored = slots.entry((key.pk.clone(), slot)).or_default();
            if let Some(m) = packed::merge(stored, &readings) {
                written = true;
                *stored = m;
            }
        }
        if written {
            self.slot_writes.fetch_add(1, Ordering::SeqCst);
        }
        Ok(SlotWrite {
            written,
            conflicts: 0,
            readings: slots
                .get(&(key.pk.clone(), key.start))
                .map_or(0, |r| r.len()),
            parts: 1,
            unreadable_parts: 0,
        })
    }
}

impl tidemark_ingest::DeviceDirectory for &MemoryStore {
    async fn existing_devices(&self, ids: &[DeviceId]) -> Result<HashSet<DeviceId>, StoreError> {
        self.device_lookups.fetch_add(1, Ordering::SeqCst);
        self.devices_asked.fetch_add(ids.len(), Ordering::SeqCst);
        let d = self.devices.lock().unwrap();
        Ok(ids.iter().filter(|i| d.contains(i)).cloned().collect())
    }
}

pub type MemoryIngest<'a> = Ingest<&'a MemoryStore, &'a MemoryStore, &'a MemoryStore>;

pub fn memory_ingest(store: &MemoryStore, config: IngestConfig) -> MemoryIngest<'_> {
    Ingest::from_parts(config, store, store, store, Clock::fixed(now()))
}

/// The sequence numbers a partial-batch response reports.
pub fn failures(r: &aws_lambda_events::event::streams::KinesisEventResponse) -> Vec<String> {
    r.batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone().unwrap_or_default())
        .collect()
}

/// The reading items of a scan.
pub fn readings(items: &[Item]) -> Vec<tidemark_schema::ReadingItem> {
    items
        .iter()
        .filter(|i| s(i, "sk").starts_with("READING#"))
        .map(|i| tidemark_store::from_item(i.clone()).unwrap())
        .collect()
}
