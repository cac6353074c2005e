//! Shared helpers of the ingest tests: events, a fixed clock, table scans, and a writer that
//! misbehaves as DynamoDB does under load ([`Flaky`]). The in-memory store is the crate's own,
//! `tidemark_ingest::memory::MemoryStore`.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use aws_lambda_events::event::kinesis::KinesisEvent;
use aws_sdk_dynamodb::types::AttributeValue;
use base64::Engine;
use serde_json::json;
use tidemark_ingest::{DynamoLookups, Ingest, IngestConfig};
use tidemark_schema::{Clock, DeviceId, Timestamp};
use tidemark_store::retry::RetryPolicy;
use tidemark_store::write::batch::{BatchCallError, BatchWriteApi, Inserted, Merged};
use tidemark_store::write::slots::{Content, SlotKey, SlotStore, SlotWrite, Stamp};
use tidemark_store::{Item, StoreError};

/// The clock of every test: five minutes after the sample readings of docs/design.md §9.
pub fn now() -> Timestamp {
    ts("2026-04-20T14:05:00Z")
}

/// The clock of every test, fixed at [`now`].
pub fn clock() -> Clock {
    Clock::fixed(now())
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
