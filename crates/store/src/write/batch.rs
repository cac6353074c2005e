//! The batch writer: writes any number of items, losing none.
//!
//! Two kinds of write ([`WriteMode`]): plain puts, 25 a `BatchWriteItem` call (quarantine
//! items: a resend rewrites the same item), and merges (readings: a second record with the same
//! key must add to the first, not erase it). A merge is first tried as a conditional insert,
//! 25 a `BatchExecuteStatement` call ([`crate::write::insert`]); an item whose key is taken is then
//! merged on its own ([`crate::write::map_merge`]).
//!
//! DynamoDB accepts at most 25 items a call, rejects a call that names one key twice, and may
//! leave part of a call unprocessed (`UnprocessedItems`, or a throttled statement) without an
//! error. The SDK retries throttled *calls*, but never unprocessed *items*: that is this
//! module's job. So:
//!
//! - items with the same key in one submission are combined before anything is sent (puts: the
//!   last wins; merges: merged in order), keeping the earliest tag, so a failure is reported
//!   against the first input that needed the key, and counted;
//! - puts and inserts go out 25 a call, several calls in flight; the one-item merges that
//!   follow a taken key run several at a time per call (both bounded);
//! - unprocessed items and retryable errors (throttling, 5xx, timeouts, a contended key) are
//!   re-sent with exponential backoff and full jitter ([`RetryPolicy`]), for as long as the
//!   caller's deadline allows rather than a fixed number of times: a Lambda would rather use
//!   its time than give up early;
//! - whatever is still unwritten when time runs out, or fails permanently, comes back in
//!   [`WriteReport::failed_tags`] so the caller can tell exactly which inputs are durable.
//!
//! The writer is generic over [`BatchWriteApi`], four methods, so tests can inject unprocessed
//! items, throttling and persistent failures; the DynamoDB client implements it.

use std::collections::{HashMap, HashSet};
use std::future::Future;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use futures::StreamExt;
use tidemark_schema::keys::FailedRecord;
use tidemark_schema::table::attr;
use tokio::time::Instant;

pub use crate::retry::{RetryPolicy, is_retryable};
pub use crate::write::insert::Inserted;
pub use crate::write::map_merge::Merged;
use crate::write::map_merge::merge_items;
use crate::{Item, StoreError};

/// DynamoDB's limit of requests in one `BatchWriteItem`.
pub use crate::limits::MAX_BATCH_WRITE;

/// Single-item merges in flight for each batch call the writer may have in flight: a merge
/// carries one item where a batch call carries 25.
pub const MERGES_PER_BATCH_SLOT: usize = 16;

pub use crate::error::BatchCallError;

/// The store operations the writer needs.
pub trait BatchWriteApi: Send + Sync {
    /// Puts at most [`MAX_BATCH_WRITE`] items (distinct keys) into `table` in one call and
    /// returns the items DynamoDB left unprocessed; every other item is durably written.
    fn put_batch(
        &self,
        table: &str,
        items: Vec<Item>,
    ) -> impl Future<Output = Result<Vec<Item>, BatchCallError>> + Send;

    /// Writes one item as a merge into whatever the table holds under its key: the entries
    /// of the map attribute `map_attr` merge key by key, other attributes are replaced
    /// ([`crate::write::map_merge::merge_item`]).
    fn merge_item(
        &self,
        table: &str,
        item: Item,
        map_attr: &'static str,
    ) -> impl Future<Output = Result<Merged, BatchCallError>> + Send;

    /// Inserts at most [`MAX_BATCH_WRITE`] items (distinct keys) into `table` in one call, each
    /// only if no item has its key; one answer per item, in order ([`crate::write::insert`]). The
    /// default inserts nothing and sends every item to [`Self::merge_item`]: right, only slower.
    fn insert_batch(
        &self,
        table: &str,
        items: Vec<Item>,
    ) -> impl Future<Output = Result<Vec<Inserted>, BatchCallError>> + Send {
        let _ = table;
        std::future::ready(Ok(vec![Inserted::Taken; items.len()]))
    }

    /// Adds one permanent failure of `record` to its count ([`crate::failures`]) and returns
    /// the count so far. The default keeps none and answers with a retryable error, so a
    /// store without counts never sets anything aside: it retries, as before.
    fn count_failure(
        &self,
        table: &str,
        record: &FailedRecord,
        error: &str,
        ttl: i64,
    ) -> impl Future<Output = Result<u32, BatchCallError>> + Send {
        let _ = (table, record, error, ttl);
        std::future::ready(Err(BatchCallError::request(
            true,
            "UpdateItem",
            "this store keeps no failure counts",
        )))
    }
}

impl BatchWriteApi for Client {
    async fn put_batch(&self, table: &str, items: Vec<Item>) -> Result<Vec<Item>, BatchCallError> {
        let mut requests = Vec::with_capacity(items.len());
        for item in items {
            let put = PutRequest::builder()
                .set_item(Some(item))
                .build()
                .map_err(|e| BatchCallError::request(false, "BatchWriteItem", e.to_string()))?;
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

    async fn merge_item(
        &self,
        table: &str,
        item: Item,
        map_attr: &'static str,
    ) -> Result<Merged, BatchCallError> {
        crate::write::map_merge::merge_item(self, table, item, map_attr).await
    }

    async fn insert_batch(
        &self,
        table: &str,
        items: Vec<Item>,
    ) -> Result<Vec<Inserted>, BatchCallError> {
        crate::write::insert::insert_batch(self, table, items).await
    }

    async fn count_failure(
        &self,
        table: &str,
        record: &FailedRecord,
        error: &str,
        ttl: i64,
    ) -> Result<u32, BatchCallError> {
        crate::failures::count_in_dynamodb(self, table, record, error, ttl)
            .await
            .map_err(|e| BatchCallError {
                retryable: !e.is_permanent(),
                error: e,
            })
    }
}

/// How an item is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Replaces whatever has the key (`BatchWriteItem`).
    Put,
    /// Merges into whatever has the key: the named map attribute entry by entry, other
    /// attributes replaced.
    Merge { map_attr: &'static str },
}

/// An item to write, tagged by the caller (e.g. with the index of the record it came from).
#[derive(Debug, Clone)]
pub struct PendingWrite {
    pub tag: usize,
    pub item: Item,
    pub mode: WriteMode,
}

impl PendingWrite {
    pub fn put(tag: usize, item: Item) -> Self {
        PendingWrite {
            tag,
            item,
            mode: WriteMode::Put,
        }
    }

    pub fn merge(tag: usize, item: Item, map_attr: &'static str) -> Self {
        PendingWrite {
            tag,
            item,
            mode: WriteMode::Merge { map_attr },
        }
    }
}

/// What happened to one submission.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteReport {
    /// Items submitted, duplicates included.
    pub submitted: usize,
    /// Distinct items durably written (a merge that found everything already stored counts).
    pub written: usize,
    /// Items combined with an earlier item with the same key in the same submission.
    pub duplicates: usize,
    /// Merges whose key already held an item (a same-timestamp record, a correction, or a
    /// resend).
    pub merged: u64,
    /// Write calls made (`BatchWriteItem`, `BatchExecuteStatement` and single-item merges).
    pub calls: u64,
    /// Calls that re-sent items (after unprocessed items or a retryable error).
    pub retries: u64,
    /// Items DynamoDB returned as unprocessed (or throttled statements), summed over calls.
    pub unprocessed: u64,
    /// Calls that failed with a retryable error (throttling, 5xx, timeout).
    pub throttled: u64,
    /// Tags of the items not written (a combined item carries its earliest tag).
    pub failed_tags: Vec<usize>,
    /// Items DynamoDB refused for good (too large): not retried, not in `failed_tags`; the
    /// caller keeps what they came from elsewhere.
    pub refused: Vec<Refused>,
    /// The last error seen, for the log.
    pub last_error: Option<String>,
    /// Of `failed_tags`, the items refused with an error no retry cures
    /// ([`StoreError::is_permanent`]), narrowed to the one item at fault: what a caller may
    /// count and, past a few times, set aside (with every record the item merges).
    pub permanent: Vec<Refused>,
}

impl WriteReport {
    pub fn earliest_failed_tag(&self) -> Option<usize> {
        self.failed_tags.iter().copied().min()
    }
}

/// Items in calls of at most [`MAX_BATCH_WRITE`], each call of one mode.
fn chunked(items: Vec<PendingWrite>) -> Vec<Vec<PendingWrite>> {
    let mut chunks: Vec<Vec<PendingWrite>> = Vec::new();
    for p in items {
        match chunks.last_mut() {
            Some(c) if c.len() < MAX_BATCH_WRITE && c[0].mode == p.mode => c.push(p),
            _ => chunks.push(vec![p]),
        }
    }
    chunks
}

/// A write DynamoDB refused for good.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub tag: usize,
    pub pk: String,
    pub sk: String,
    pub why: String,
}

impl Refused {
    fn of(p: &PendingWrite, error: &StoreError) -> Self {
        let attr = |n: &str| {
            p.item
                .get(n)
                .and_then(|v| v.as_s().ok())
                .cloned()
                .unwrap_or_default()
        };
        Refused {
            tag: p.tag,
            pk: attr(attr::PK),
            sk: attr(attr::SK),
            why: error.to_string(),
        }
    }
}

#[derive(Default)]
struct ChunkOutcome {
    refused: Vec<Refused>,
    written: usize,
    merged: u64,
    calls: u64,
    retries: u64,
    unprocessed: u64,
    throttled: u64,
    failed_tags: Vec<usize>,
    last_error: Option<String>,
    permanent: Vec<Refused>,
}

impl ChunkOutcome {
    fn absorb(&mut self, c: ChunkOutcome) {
        self.written += c.written;
        self.merged += c.merged;
        self.calls += c.calls;
        self.retries += c.retries;
        self.unprocessed += c.unprocessed;
        self.throttled += c.throttled;
        self.failed_tags.extend(c.failed_tags);
        self.refused.extend(c.refused);
        self.permanent.extend(c.permanent);
        if c.last_error.is_some() {
            self.last_error = c.last_error;
        }
    }
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

/// Combines items with the same key: a put replaces, a merge merges into what came before
/// (the mode of the later item decides); the earliest tag is kept, the position is the first
/// occurrence's. Items without a key are kept as they are (DynamoDB will refuse them, and the
/// refusal is reported like any other failure).
pub fn collapse_duplicates(items: Vec<PendingWrite>) -> (Vec<PendingWrite>, usize) {
    let mut out: Vec<PendingWrite> = Vec::with_capacity(items.len());
    let mut seen: HashMap<KeyPair, usize> = HashMap::with_capacity(items.len());
    let mut duplicates = 0;
    for p in items {
        match key_of(&p.item) {
            Some(k) => match seen.get(&k) {
                Some(&i) => {
                    duplicates += 1;
                    let tag = out[i].tag.min(p.tag);
                    let item = match p.mode {
                        WriteMode::Put => p.item,
                        WriteMode::Merge { map_attr } => {
                            merge_items(&out[i].item, &p.item, map_attr)
                        }
                    };
                    out[i] = PendingWrite {
                        tag,
                        item,
                        mode: p.mode,
                    };
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
    pub async fn write_all(&self, items: Vec<PendingWrite>, deadline: Instant) -> WriteReport {
        let submitted = items.len();
        let (items, duplicates) = collapse_duplicates(items);
        let (puts, merges): (Vec<_>, Vec<_>) =
            items.into_iter().partition(|p| p.mode == WriteMode::Put);
        let chunks = chunked(puts)
            .into_iter()
            .map(|c| (WriteMode::Put, c))
            .chain(chunked(merges).into_iter().map(|c| {
                let mode = c[0].mode;
                (mode, c)
            }));
        let mut total = ChunkOutcome::default();
        let mut outcomes = futures::stream::iter(chunks)
            .map(|(mode, chunk)| async move {
                match mode {
                    WriteMode::Put => self.write_chunk(chunk, deadline).await,
                    WriteMode::Merge { .. } => self.insert_chunk(chunk, deadline).await,
                }
            })
            .buffer_unordered(self.max_in_flight);
        while let Some(c) = outcomes.next().await {
            total.absorb(c);
        }
        total.failed_tags.sort_unstable();
        WriteReport {
            submitted,
            duplicates,
            written: total.written,
            merged: total.merged,
            calls: total.calls,
            retries: total.retries,
            unprocessed: total.unprocessed,
            throttled: total.throttled,
            failed_tags: total.failed_tags,
            refused: total.refused,
            last_error: total.last_error,
            permanent: total.permanent,
        }
    }

    /// Waits before the next attempt, or gives up if the wait would end after `deadline`.
    async fn backoff(
        &self,
        attempt: u32,
        deadline: Instant,
        out: &mut ChunkOutcome,
        left: usize,
    ) -> Result<(), String> {
        let wait = self.retry.delay(attempt);
        if Instant::now() + wait >= deadline {
            return Err(out.last_error.take().map_or_else(
                || format!("{left} items still unprocessed at the deadline"),
                |e| format!("retries ran out of time; last error: {e}"),
            ));
        }
        out.retries += 1;
        tokio::time::sleep(wait).await;
        Ok(())
    }

    /// Inserts a chunk of merges 25 a call; what finds its key taken, or is refused, is merged
    /// one item at a time.
    async fn insert_chunk(
        &self,
        mut pending: Vec<PendingWrite>,
        deadline: Instant,
    ) -> ChunkOutcome {
        let mut out = ChunkOutcome::default();
        let mut one_by_one = Vec::new();
        let mut attempt = 0u32;
        while !pending.is_empty() {
            if Instant::now() >= deadline {
                out.failed_tags.extend(pending.iter().map(|p| p.tag));
                out.last_error = Some("deadline reached before the write".into());
                break;
            }
            out.calls += 1;
            let items: Vec<Item> = pending.iter().map(|p| p.item.clone()).collect();
            let call = self.api.insert_batch(&self.table, items);
            match tokio::time::timeout_at(deadline, call).await {
                Err(_) => {
                    // Landed or not, a replay is safe: an insert that landed is found taken and
                    // its merge changes nothing.
                    out.failed_tags.extend(pending.iter().map(|p| p.tag));
                    out.last_error = Some("deadline reached during a write".into());
                    break;
                }
                Ok(Ok(answers)) => {
                    let mut again = Vec::new();
                    for (p, a) in pending.into_iter().zip(answers) {
                        match a {
                            Inserted::Yes => out.written += 1,
                            Inserted::Taken => one_by_one.push(p),
                            Inserted::Refused(why) => {
                                out.last_error = Some(why);
                                one_by_one.push(p);
                            }
                            Inserted::Retry(why) => {
                                out.last_error = Some(why);
                                again.push(p);
                            }
                        }
                    }
                    out.unprocessed += again.len() as u64;
                    pending = again;
                    if pending.is_empty() {
                        break;
                    }
                }
                Ok(Err(e)) if e.retryable => {
                    out.throttled += 1;
                    out.last_error = Some(e.error.to_string());
                }
                Ok(Err(e)) => {
                    // Refused as a whole: one item at a time finds the item to blame.
                    out.last_error = Some(e.error.to_string());
                    one_by_one.append(&mut pending);
                    break;
                }
            }
            attempt += 1;
            if let Err(why) = self
                .backoff(attempt, deadline, &mut out, pending.len())
                .await
            {
                out.failed_tags.extend(pending.iter().map(|p| p.tag));
                out.last_error = Some(why);
                pending.clear();
            }
        }
        let mut merges = futures::stream::iter(one_by_one)
            .map(|p| self.write_merge(p, deadline))
            .buffer_unordered(MERGES_PER_BATCH_SLOT);
        while let Some(c) = merges.next().await {
            out.absorb(c);
        }
        out
    }

    async fn write_merge(&self, p: PendingWrite, deadline: Instant) -> ChunkOutcome {
        let mut out = ChunkOutcome::default();
        let WriteMode::Merge { map_attr } = p.mode else {
            return out;
        };
        let mut attempt = 0u32;
        let give_up = |out: &mut ChunkOutcome, why: String| {
            out.failed_tags.push(p.tag);
            out.last_error = Some(why);
        };
        loop {
            if Instant::now() >= deadline {
                give_up(&mut out, "deadline reached before the write".into());
                return out;
            }
            out.calls += 1;
            let call = self.api.merge_item(&self.table, p.item.clone(), map_attr);
            match tokio::time::timeout_at(deadline, call).await {
                Err(_) => {
                    // It may or may not have landed; a merge is idempotent, so the caller
                    // replays it rather than guess.
                    give_up(&mut out, "deadline reached during a write".into());
                    return out;
                }
                Ok(Ok(m)) => {
                    out.written += 1;
                    if m != Merged::Inserted {
                        out.merged += 1;
                    }
                    return out;
                }
                Ok(Err(e)) if e.error.is_too_large() => {
                    out.refused.push(Refused::of(&p, &e.error));
                    return out;
                }
                Ok(Err(e)) if e.retryable => {
                    out.throttled += 1;
                    out.last_error = Some(e.error.to_string());
                }
                Ok(Err(e)) => {
                    if e.error.is_permanent() {
                        out.permanent.push(Refused::of(&p, &e.error));
                    }
                    give_up(&mut out, e.error.to_string());
                    return out;
                }
            }
            attempt += 1;
            if let Err(why) = self.backoff(attempt, deadline, &mut out, 1).await {
                give_up(&mut out, why);
                return out;
            }
        }
    }

    async fn write_chunk(&self, mut pending: Vec<PendingWrite>, deadline: Instant) -> ChunkOutcome {
        let mut out = ChunkOutcome::default();
        let mut attempt = 0u32;
        let give_up = |out: &mut ChunkOutcome, pending: Vec<PendingWrite>, why: String| {
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
                Ok(Err(e)) if pending.len() > 1 => {
                    // DynamoDB refuses a whole call for one bad item: one item a call finds
                    // which, and writes the rest.
                    out.last_error = Some(e.error.to_string());
                    for p in pending {
                        out.absorb(Box::pin(self.write_chunk(vec![p], deadline)).await);
                    }
                    return out;
                }
                Ok(Err(e)) => {
                    if e.error.is_permanent() {
                        out.permanent
                            .extend(pending.iter().map(|p| Refused::of(p, &e.error)));
                    }
                    give_up(&mut out, pending, e.error.to_string());
                    return out;
                }
            }
            attempt += 1;
            if let Err(why) = self
                .backoff(attempt, deadline, &mut out, pending.len())
                .await
            {
                give_up(&mut out, pending, why);
                return out;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Duration;

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

        async fn merge_item(
            &self,
            _: &str,
            item: Item,
            map_attr: &'static str,
        ) -> Result<Merged, BatchCallError> {
            let mut n = self.n.lock().unwrap();
            if *n > 0 {
                *n -= 1;
                return Err(BatchCallError::request(
                    true,
                    "UpdateItem",
                    "ThrottlingException (injected)",
                ));
            }
            let mut stored = self.stored.lock().unwrap();
            let k = key_of(&item).unwrap();
            let merged = match stored.get(&k) {
                Some(old) => merge_items(old, &item, map_attr),
                None => item,
            };
            stored.insert(k, merged);
            Ok(Merged::Merged)
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
            PendingWrite::put(3, item("a", "1", "old")),
            PendingWrite::put(4, item("b", "1", "x")),
            PendingWrite::put(7, item("a", "1", "new")),
        ]);
        assert_eq!(dups, 1);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].tag, 3);
        assert_eq!(out[0].item["v"], AttributeValue::S("new".into()));
    }

    fn reading(sk: &str, metrics: &[(&str, &str)]) -> Item {
        HashMap::from([
            ("pk".to_owned(), AttributeValue::S("p".into())),
            ("sk".to_owned(), AttributeValue::S(sk.into())),
            (
                "m".to_owned(),
                AttributeValue::M(
                    metrics
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), AttributeValue::N((*v).into())))
                        .collect(),
                ),
            ),
        ])
    }

    #[test]
    fn same_key_merges_combine_their_maps_in_order_keeping_the_earliest_tag() {
        let (out, dups) = collapse_duplicates(vec![
            PendingWrite::merge(
                2,
                reading("t", &[("temperature", "22.4"), ("battery", "87")]),
                "m",
            ),
            PendingWrite::merge(
                5,
                reading("t", &[("humidity", "45"), ("battery", "86")]),
                "m",
            ),
        ]);
        assert_eq!((out.len(), dups, out[0].tag), (1, 1, 2));
        assert_eq!(
            out[0].item["m"],
            reading(
                "t",
                &[
                    ("temperature", "22.4"),
                    ("humidity", "45"),
                    ("battery", "86")
                ]
            )["m"]
        );
    }

    #[tokio::test]
    async fn throttled_merges_are_retried_until_written() {
        let api = Stingy {
            n: Mutex::new(3),
            stored: Mutex::default(),
        };
        let w = BatchWriter::new(api, "t", 1, fast());
        let items = vec![
            PendingWrite::merge(0, reading("t", &[("temperature", "22.4")]), "m"),
            PendingWrite::put(1, item("q", "1", "v")),
        ];
        let r = w
            .write_all(items, Instant::now() + Duration::from_secs(10))
            .await;
        assert_eq!((r.written, r.failed_tags.len()), (2, 0));
        assert!(r.throttled + r.unprocessed >= 3);
        assert_eq!(w.api().stored.lock().unwrap().len(), 2);
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
            .map(|i| PendingWrite::put(i, item("p", &i.to_string(), "v")))
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

    /// Inserts what is new, says "taken" for keys it holds, throttles the first statement of
    /// the first `throttle` calls and refuses every item whose `v` is "bad" (as PartiQL does an
    /// item too large) while the one-item merge takes it.
    #[derive(Default)]
    struct Inserter {
        throttle: Mutex<usize>,
        refuse_calls: Mutex<usize>,
        stored: Mutex<HashMap<KeyPair, Item>>,
        insert_calls: Mutex<usize>,
    }

    impl BatchWriteApi for Inserter {
        async fn put_batch(&self, _: &str, _: Vec<Item>) -> Result<Vec<Item>, BatchCallError> {
            unreachable!("readings are never blind puts")
        }

        async fn merge_item(
            &self,
            _: &str,
            item: Item,
            map_attr: &'static str,
        ) -> Result<Merged, BatchCallError> {
            let mut stored = self.stored.lock().unwrap();
            let k = key_of(&item).unwrap();
            Ok(match stored.get(&k) {
                Some(old) => {
                    let m = merge_items(old, &item, map_attr);
                    stored.insert(k, m);
                    Merged::Merged
                }
                None => {
                    stored.insert(k, item);
                    Merged::Inserted
                }
            })
        }

        async fn insert_batch(
            &self,
            _: &str,
            items: Vec<Item>,
        ) -> Result<Vec<Inserted>, BatchCallError> {
            assert!(items.len() <= MAX_BATCH_WRITE);
            *self.insert_calls.lock().unwrap() += 1;
            {
                let mut r = self.refuse_calls.lock().unwrap();
                if *r > 0 {
                    *r -= 1;
                    return Err(BatchCallError::request(
                        false,
                        "BatchExecuteStatement",
                        "ValidationException (injected)",
                    ));
                }
            }
            let mut throttle = self.throttle.lock().unwrap();
            let mut stored = self.stored.lock().unwrap();
            Ok(items
                .into_iter()
                .enumerate()
                .map(|(i, item)| {
                    let k = key_of(&item).unwrap();
                    if i == 0 && *throttle > 0 {
                        *throttle -= 1;
                        Inserted::Retry("ThrottlingError (injected)".into())
                    } else if item.get("v") == Some(&AttributeValue::S("bad".into())) {
                        Inserted::Refused("ValidationError (injected)".into())
                    } else {
                        match stored.entry(k) {
                            std::collections::hash_map::Entry::Occupied(_) => Inserted::Taken,
                            std::collections::hash_map::Entry::Vacant(v) => {
                                v.insert(item);
                                Inserted::Yes
                            }
                        }
                    }
                })
                .collect())
        }
    }

    #[tokio::test]
    async fn merges_go_out_25_a_call_and_taken_throttled_or_refused_items_still_land_once() {
        // GIVEN two stored readings, and an API that throttles a statement in each of its
        // first two calls
        let api = Inserter {
            throttle: Mutex::new(2),
            ..Inserter::default()
        };
        for sk in ["3", "40"] {
            let r = reading(sk, &[("temperature", "1")]);
            api.stored.lock().unwrap().insert(key_of(&r).unwrap(), r);
        }
        // WHEN 60 merges are written, two of them into the stored keys and one refused
        let mut items: Vec<_> = (0..60)
            .map(|i| PendingWrite::merge(i, reading(&i.to_string(), &[("humidity", "2")]), "m"))
            .collect();
        items[7]
            .item
            .insert("v".into(), AttributeValue::S("bad".into()));
        let w = BatchWriter::new(api, "t", 2, fast());
        let r = w
            .write_all(items, Instant::now() + Duration::from_secs(10))
            .await;
        // THEN all 60 are written, the stored two hold both metrics, in 3 calls plus retries
        assert_eq!((r.written, r.failed_tags.len()), (60, 0), "{r:?}");
        assert_eq!(
            r.merged, 2,
            "the two taken keys were merged, the refused one inserted"
        );
        assert_eq!(r.unprocessed, 2);
        let api = w.api();
        assert_eq!(*api.insert_calls.lock().unwrap(), 3 + 2);
        let stored = api.stored.lock().unwrap();
        assert_eq!(stored.len(), 60);
        let both = stored
            .values()
            .filter(|i| matches!(&i["m"], AttributeValue::M(m) if m.len() == 2))
            .count();
        assert_eq!(both, 2);
    }

    #[tokio::test]
    async fn a_batch_refused_whole_is_written_one_item_at_a_time() {
        let api = Inserter {
            refuse_calls: Mutex::new(usize::MAX),
            ..Inserter::default()
        };
        let items = (0..30)
            .map(|i| PendingWrite::merge(i, reading(&i.to_string(), &[("humidity", "2")]), "m"))
            .collect();
        let w = BatchWriter::new(api, "t", 2, fast());
        let r = w
            .write_all(items, Instant::now() + Duration::from_secs(10))
            .await;
        assert_eq!((r.written, r.failed_tags.len()), (30, 0), "{r:?}");
        assert_eq!(w.api().stored.lock().unwrap().len(), 30);
    }

    /// Refuses, for good, every `BatchWriteItem` call holding an item whose `v` is "bad", as
    /// DynamoDB refuses a whole call for one invalid item.
    #[derive(Default)]
    struct Picky {
        stored: Mutex<HashMap<KeyPair, Item>>,
    }

    impl BatchWriteApi for Picky {
        async fn put_batch(&self, _: &str, items: Vec<Item>) -> Result<Vec<Item>, BatchCallError> {
            if items.iter().any(|i| i["v"].as_s().unwrap() == "bad") {
                return Err(BatchCallError::request(
                    false,
                    "BatchWriteItem",
                    "ValidationException: One or more parameter values were invalid",
                ));
            }
            let mut stored = self.stored.lock().unwrap();
            for i in items {
                stored.insert(key_of(&i).unwrap(), i);
            }
            Ok(Vec::new())
        }

        async fn merge_item(
            &self,
            _: &str,
            _: Item,
            _: &'static str,
        ) -> Result<Merged, BatchCallError> {
            unreachable!("puts only")
        }
    }

    #[tokio::test]
    async fn a_call_refused_for_one_bad_item_writes_the_rest_and_names_that_item_as_permanent() {
        let items = (0..30)
            .map(|i| {
                let v = if i == 7 { "bad" } else { "ok" };
                PendingWrite::put(i, item("p", &i.to_string(), v))
            })
            .collect();
        let w = BatchWriter::new(Picky::default(), "t", 2, fast());
        let r = w
            .write_all(items, Instant::now() + Duration::from_secs(10))
            .await;
        assert_eq!(r.written, 29, "{r:?}");
        assert_eq!(r.failed_tags, vec![7]);
        assert_eq!(r.permanent.len(), 1);
        assert_eq!((r.permanent[0].tag, r.permanent[0].sk.as_str()), (7, "7"));
        assert!(r.permanent[0].why.contains("ValidationException"));
        assert_eq!(w.api().stored.lock().unwrap().len(), 29);
    }
}
