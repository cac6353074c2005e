//! The batch writer: puts any number of items with `BatchWriteItem`, losing none.
//!
//! DynamoDB accepts at most 25 puts a call, rejects a call that names one key twice, and may
//! leave part of a call unprocessed (`UnprocessedItems`) without an error. The SDK retries
//! throttled *calls*, but never unprocessed *items*: that is this module's job. So:
//!
//! - duplicate keys in one submission are collapsed before anything is sent (the last item
//!   wins, the earliest tag is kept, so a failure is reported against the first input that
//!   needed the key) and counted;
//! - items go out 25 a call, several calls in flight (bounded);
//! - unprocessed items and retryable errors (throttling, 5xx, timeouts) are re-sent with
//!   exponential backoff and full jitter, for as long as the caller's deadline allows rather
//!   than a fixed number of times: a Lambda would rather use its time than give up early;
//! - whatever is still unwritten when time runs out, or fails permanently, comes back in
//!   [`WriteReport::failed_tags`] so the caller can tell exactly which inputs are durable.
//!
//! The writer is generic over [`BatchWriteApi`], one method, so tests can inject unprocessed
//! items, throttling and persistent failures; the DynamoDB client implements it.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use futures::StreamExt;
use rand::Rng;
use tidemark_schema::table::attr;
use tokio::time::Instant;

use crate::{Item, StoreError};

/// DynamoDB's limit of requests in one `BatchWriteItem`.
pub const MAX_BATCH_WRITE: usize = 25;

/// A failed `BatchWriteItem` call, and whether re-sending it may succeed.
#[derive(Debug)]
pub struct BatchCallError {
    /// Throttling, a 5xx, a timeout or a dropped connection: worth another try.
    pub retryable: bool,
    pub error: StoreError,
}

/// The one store operation the writer needs.
pub trait BatchWriteApi: Send + Sync {
    /// Puts at most [`MAX_BATCH_WRITE`] items (distinct keys) into `table` in one call and
    /// returns the items DynamoDB left unprocessed; every other item is durably written.
    fn put_batch(
        &self,
        table: &str,
        items: Vec<Item>,
    ) -> impl Future<Output = Result<Vec<Item>, BatchCallError>> + Send;
}

impl BatchWriteApi for Client {
    async fn put_batch(&self, table: &str, items: Vec<Item>) -> Result<Vec<Item>, BatchCallError> {
        let mut requests = Vec::with_capacity(items.len());
        for item in items {
            let put = PutRequest::builder()
                .set_item(Some(item))
                .build()
                .map_err(|e| BatchCallError {
                    retryable: false,
                    error: StoreError::Request {
                        operation: "BatchWriteItem",
                        message: e.to_string(),
                    },
                })?;
            requests.push(WriteRequest::builder().put_request(put).build());
        }
        let out = self
            .batch_write_item()
            .request_items(table, requests)
            .send()
            .await
            .map_err(|e| BatchCallError {
                retryable: is_retryable(&e),
                error: StoreError::sdk("BatchWriteItem")(e),
            })?;
        Ok(out
            .unprocessed_items
            .and_then(|mut m| m.remove(table))
            .unwrap_or_default()
            .into_iter()
            .filter_map(|w| w.put_request.map(|p| p.item))
            .collect())
    }
}

/// Throttling, server errors and transport trouble are transient; a request DynamoDB refuses
/// (validation, missing table, access denied) will be refused again.
pub fn is_retryable<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> bool {
    match e {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            true
        }
        SdkError::ServiceError(s) => matches!(
            s.err().code(),
            Some(
                "ProvisionedThroughputExceededException"
                    | "ThrottlingException"
                    | "RequestLimitExceeded"
                    | "InternalServerError"
                    | "InternalFailure"
                    | "ServiceUnavailable"
                    | "ReplicatedWriteConflictException"
                    | "TransactionInProgressException"
            )
        ),
        _ => false,
    }
}

/// Exponential backoff with full jitter: the n-th wait is uniform in
/// `[0, min(max_delay, base_delay * 2^(n-1))]`, which spreads competing writers best.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base_delay: Duration::from_millis(25),
            max_delay: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    /// The ceiling of the `attempt`-th wait (1-based).
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let factor = 1u32
            .checked_shl(attempt.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.base_delay
            .checked_mul(factor)
            .map_or(self.max_delay, |d| d.min(self.max_delay))
    }

    /// A random wait for the `attempt`-th retry.
    pub fn delay(&self, attempt: u32) -> Duration {
        let cap = self.ceiling(attempt).as_micros() as u64;
        Duration::from_micros(rand::rng().random_range(0..=cap))
    }
}

/// An item to put, tagged by the caller (e.g. with the index of the record it came from).
#[derive(Debug, Clone)]
pub struct PendingPut {
    pub tag: usize,
    pub item: Item,
}

/// What happened to one submission.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteReport {
    /// Items submitted, duplicates included.
    pub submitted: usize,
    /// Distinct items durably written.
    pub written: usize,
    /// Items that were superseded by a later item with the same key in the same submission.
    pub duplicates: usize,
    /// `BatchWriteItem` calls made.
    pub calls: u64,
    /// Calls that re-sent items (after unprocessed items or a retryable error).
    pub retries: u64,
    /// Items DynamoDB returned as unprocessed, summed over calls.
    pub unprocessed: u64,
    /// Calls that failed with a retryable error (throttling, 5xx, timeout).
    pub throttled: u64,
    /// Tags of the items not written (a collapsed item carries its earliest tag).
    pub failed_tags: Vec<usize>,
    /// The last error seen, for the log.
    pub last_error: Option<String>,
}

impl WriteReport {
    pub fn earliest_failed_tag(&self) -> Option<usize> {
        self.failed_tags.iter().copied().min()
    }

    fn absorb(&mut self, c: ChunkOutcome) {
        self.written += c.written;
        self.calls += c.calls;
        self.retries += c.retries;
        self.unprocessed += c.unprocessed;
        self.throttled += c.throttled;
        self.failed_tags.extend(c.failed_tags);
        if c.last_error.is_some() {
            self.last_error = c.last_error;
        }
    }
}

#[derive(Default)]
struct ChunkOutcome {
    written: usize,
    calls: u64,
    retries: u64,
    unprocessed: u64,
    throttled: u64,
    failed_tags: Vec<usize>,
    last_error: Option<String>,
}

/// Writes items to one table through a [`BatchWriteApi`].
#[derive(Debug, Clone)]
pub struct BatchWriter<A> {
    api: A,
    table: String,
    max_in_flight: usize,
    retry: RetryPolicy,
}

type KeyPair = (String, String);

fn key_of(item: &Item) -> Option<KeyPair> {
    let s = |name: &str| match item.get(name) {
        Some(AttributeValue::S(s)) => Some(s.clone()),
        _ => None,
    };
    Some((s(attr::PK)?, s(attr::SK)?))
}

/// Collapses items with the same key: the last item wins, the earliest tag is kept, the
/// position is the first occurrence's. Items without a key are kept as they are (DynamoDB
/// will refuse them, and the refusal is reported like any other failure).
pub fn collapse_duplicates(items: Vec<PendingPut>) -> (Vec<PendingPut>, usize) {
    let mut out: Vec<PendingPut> = Vec::with_capacity(items.len());
    let mut seen: HashMap<KeyPair, usize> = HashMap::with_capacity(items.len());
    let mut duplicates = 0;
    for p in items {
        match key_of(&p.item) {
            Some(k) => match seen.get(&k) {
                Some(&i) => {
                    duplicates += 1;
                    let tag = out[i].tag.min(p.tag);
                    out[i] = PendingPut { tag, item: p.item };
                }
                None => {
                    seen.insert(k, out.len());
                    out.push(p);
                }
            },
            None => out.push(p),
        }
    }
    (out, duplicates)
}

impl<A: BatchWriteApi> BatchWriter<A> {
    pub fn new(api: A, table: impl Into<String>, max_in_flight: usize, retry: RetryPolicy) -> Self {
        BatchWriter {
            api,
            table: table.into(),
            max_in_flight: max_in_flight.max(1),
            retry,
        }
    }

    pub fn api(&self) -> &A {
        &self.api
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    /// Writes every item, retrying until done or until `deadline` (no wait or call is started
    /// that would end after it). Never fails as a whole: what was not written is in the report.
    pub async fn write_all(&self, items: Vec<PendingPut>, deadline: Instant) -> WriteReport {
        let submitted = items.len();
        let (items, duplicates) = collapse_duplicates(items);
        let mut chunks = Vec::with_capacity(items.len().div_ceil(MAX_BATCH_WRITE));
        let mut it = items.into_iter().peekable();
        while it.peek().is_some() {
            chunks.push(it.by_ref().take(MAX_BATCH_WRITE).collect::<Vec<_>>());
        }
        let mut report = WriteReport {
            submitted,
            duplicates,
            ..WriteReport::default()
        };
        let mut outcomes = futures::stream::iter(chunks)
            .map(|chunk| self.write_chunk(chunk, deadline))
            .buffer_unordered(self.max_in_flight);
        while let Some(c) = outcomes.next().await {
            report.absorb(c);
        }
        report.failed_tags.sort_unstable();
        report
    }

    async fn write_chunk(&self, mut pending: Vec<PendingPut>, deadline: Instant) -> ChunkOutcome {
        let mut out = ChunkOutcome::default();
        let mut attempt = 0u32;
        let give_up = |out: &mut ChunkOutcome, pending: Vec<PendingPut>, why: String| {
            out.failed_tags.extend(pending.iter().map(|p| p.tag));
            out.last_error = Some(why);
        };
        loop {
            if Instant::now() >= deadline {
                give_up(
                    &mut out,
                    pending,
                    "deadline reached before the write".into(),
                );
                return out;
            }
            out.calls += 1;
            let items: Vec<Item> = pending.iter().map(|p| p.item.clone()).collect();
            let call = self.api.put_batch(&self.table, items);
            match tokio::time::timeout_at(deadline, call).await {
                Err(_) => {
                    // The call may or may not have landed; puts are idempotent, so the caller
                    // replays these items rather than guess.
                    give_up(&mut out, pending, "deadline reached during a write".into());
                    return out;
                }
                Ok(Ok(unprocessed)) => {
                    if unprocessed.is_empty() {
                        out.written += pending.len();
                        return out;
                    }
                    let left: HashSet<KeyPair> = unprocessed.iter().filter_map(key_of).collect();
                    let before = pending.len();
                    pending.retain(|p| key_of(&p.item).is_none_or(|k| left.contains(&k)));
                    out.written += before - pending.len();
                    out.unprocessed += pending.len() as u64;
                    if pending.is_empty() {
                        return out;
                    }
                }
                Ok(Err(e)) if e.retryable => {
                    out.throttled += 1;
                    out.last_error = Some(e.error.to_string());
                }
                Ok(Err(e)) => {
                    give_up(&mut out, pending, e.error.to_string());
                    return out;
                }
            }
            attempt += 1;
            let wait = self.retry.delay(attempt);
            if Instant::now() + wait >= deadline {
                let why = out.last_error.take().map_or_else(
                    || format!("{} items still unprocessed at the deadline", pending.len()),
                    |e| format!("retries ran out of time; last error: {e}"),
                );
                give_up(&mut out, pending, why);
                return out;
            }
            out.retries += 1;
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn item(pk: &str, sk: &str, v: &str) -> Item {
        HashMap::from([
            ("pk".to_owned(), AttributeValue::S(pk.into())),
            ("sk".to_owned(), AttributeValue::S(sk.into())),
            ("v".to_owned(), AttributeValue::S(v.into())),
        ])
    }

    /// Leaves the first item of each call unprocessed for the first `n` calls.
    struct Stingy {
        n: Mutex<usize>,
        stored: Mutex<HashMap<KeyPair, Item>>,
    }

    impl BatchWriteApi for Stingy {
        async fn put_batch(&self, _: &str, items: Vec<Item>) -> Result<Vec<Item>, BatchCallError> {
            assert!(items.len() <= MAX_BATCH_WRITE);
            let mut n = self.n.lock().unwrap();
            let mut items = items.into_iter();
            let mut left = Vec::new();
            if *n > 0 {
                *n -= 1;
                left.extend(items.next());
            }
            let mut stored = self.stored.lock().unwrap();
            for i in items {
                stored.insert(key_of(&i).unwrap(), i);
            }
            Ok(left)
        }
    }

    fn fast() -> RetryPolicy {
        RetryPolicy {
            base_delay: Duration::from_micros(100),
            max_delay: Duration::from_millis(2),
        }
    }

    #[test]
    fn duplicates_collapse_last_wins_earliest_tag() {
        let (out, dups) = collapse_duplicates(vec![
            PendingPut {
                tag: 3,
                item: item("a", "1", "old"),
            },
            PendingPut {
                tag: 4,
                item: item("b", "1", "x"),
            },
            PendingPut {
                tag: 7,
                item: item("a", "1", "new"),
            },
        ]);
        assert_eq!(dups, 1);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].tag, 3);
        assert_eq!(out[0].item["v"], AttributeValue::S("new".into()));
    }

    #[test]
    fn backoff_ceiling_doubles_up_to_the_cap() {
        let p = RetryPolicy {
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(100),
        };
        let c: Vec<_> = (1..=6).map(|a| p.ceiling(a).as_millis()).collect();
        assert_eq!(c, [10, 20, 40, 80, 100, 100]);
        assert_eq!(p.ceiling(200), Duration::from_millis(100));
        assert!((0..100).all(|_| p.delay(3) <= Duration::from_millis(40)));
    }

    #[tokio::test]
    async fn unprocessed_items_are_resent_until_written() {
        let api = Stingy {
            n: Mutex::new(5),
            stored: Mutex::default(),
        };
        let w = BatchWriter::new(api, "t", 4, fast());
        let items = (0..60)
            .map(|i| PendingPut {
                tag: i,
                item: item("p", &i.to_string(), "v"),
            })
            .collect();
        let r = w
            .write_all(items, Instant::now() + Duration::from_secs(10))
            .await;
        assert_eq!(r.written, 60);
        assert_eq!(r.unprocessed, 5);
        assert!(r.retries >= 5);
        assert!(r.failed_tags.is_empty());
        assert_eq!(w.api().stored.lock().unwrap().len(), 60);
    }
}
