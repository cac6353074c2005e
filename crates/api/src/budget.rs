//! A per-request cost cap (docs/design.md §6 "A budget per request",
//! docs/decisions/0010-request-budget.md): every request gets a [`Budget`] of items read,
//! bytes read, response values (cells) and response bytes, and an answer that would pass one
//! is a 400 `too_much` naming the limit ([`crate::ApiError::TooMuch`]) instead.
//!
//! Reads are charged where every read passes: the store the handlers see is a [`Metered`]
//! view of the real one, so a Query page, a GetItem or a BatchGetItem counts its items and
//! their bytes whatever route, walk or helper made it (an open hour rebuilt from its
//! readings, a day summed from its hours, an edge looked up for `fill=linear`). A read that
//! would pass the budget is not made: the store answers an error, the handler stops, and
//! [`crate::App::handle`] answers the limit that was passed. Cells are charged before a
//! series is laid out (nothing of a too-wide answer is built), and response bytes on the
//! serialised body, before it leaves the function, so no answer passes API Gateway's and
//! Lambda's 6 MB ([`MAX_RESPONSE_BYTES`]).
//!
//! The budget lives in a task-local for the request's task (as the caller's
//! [`crate::access::Scope`] does); reads outside a request (none today) are not metered.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::{AlertId, DeviceId, Key, LayoutHistory, TagHistory, TagIndexItem, Timestamp};
use tidemark_store::{Item, StoreError};

use crate::store::{
    AlertOutcome, AlertOwner, AlertWriter, CallCounter, DeviceRegistration, DeviceWriter, GetStore,
    LayoutWriter, Page, PutDevice, QuerySpec, QueryStore, TagWriter,
};

/// Items one request reads at most: a page of series rows walks at most
/// 2 × [`crate::series::MAX_READINGS`] = 240,000 single reading items, plus at most
/// 2 × [`crate::series::EDGE_READINGS`] for its fill edges and a few device and layout
/// items; 300,000 leaves room for that and stops anything that reads more.
pub const MAX_ITEMS_READ: u64 = 300_000;
/// Bytes of items one request reads at most (DynamoDB's own item size: attribute names plus
/// values): 64 MiB is 16,384 blocks of 4 KB, 8,192 read capacity units eventually consistent
/// (the API reads eventually consistent but for a device's newest reading): about a tenth of
/// a US cent on demand, and what a 1 Hz device's day and a half of single reading items
/// (about 200 bytes each) or of packed slots weighs. It also bounds the memory a request
/// holds.
pub const MAX_READ_BYTES: u64 = 64 * 1024 * 1024;
/// Values (cells) one answer holds at most: a series' buckets × metrics × aggregates (a
/// wide answer counts every key it writes, `null` ones too). 120,000 is `maxPoints`' bound
/// (10,000 buckets) × all 12 aggregates of one metric, or 1,000 buckets × 4 aggregates × 30
/// metrics; a device with tens of thousands of metric names asked for all of them passes it,
/// and `metrics=` narrows it.
pub const MAX_CELLS: u64 = 120_000;
/// Bytes of a response body as Lambda returns it (the body is a JSON string inside the
/// invocation's response, so every `"` and `\` of it takes two bytes there): 5 MiB =
/// 5,242,880 bytes, which leaves 1,048,576 bytes of Lambda's 6 MB (6,291,456 bytes)
/// synchronous response limit for the status, the headers and the envelope (a few hundred
/// bytes). Checked on the serialised body itself, so it holds whatever a route returns.
pub const MAX_RESPONSE_BYTES: u64 = 5 * 1024 * 1024;

/// The limits a request is held to; [`Limits::default`] is what is deployed (smaller only in
/// tests of the bounds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub items: u64,
    pub read_bytes: u64,
    pub cells: u64,
    pub response_bytes: u64,
    /// Partitions one `GET /latest?ids=` reads at most ([`crate::validate::MAX_LATEST_QUERIES`]).
    pub latest_partitions: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            items: MAX_ITEMS_READ,
            read_bytes: MAX_READ_BYTES,
            cells: MAX_CELLS,
            response_bytes: MAX_RESPONSE_BYTES,
            latest_partitions: crate::validate::MAX_LATEST_QUERIES as u64,
        }
    }
}

/// Which limit an answer would pass: the `limit` field of a `too_much` error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Items,
    ReadBytes,
    Cells,
    ResponseBytes,
    Partitions,
}

impl Limit {
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Items => "items",
            Limit::ReadBytes => "read_bytes",
            Limit::Cells => "cells",
            Limit::ResponseBytes => "response_bytes",
            Limit::Partitions => "partitions",
        }
    }
}

/// What a request has used so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub items: u64,
    pub read_bytes: u64,
    pub cells: u64,
}

/// One request's budget: its limits and what it has used.
#[derive(Debug, Default)]
pub struct Budget {
    limits: Limits,
    items: AtomicU64,
    read_bytes: AtomicU64,
    cells: AtomicU64,
    /// The limit a charge would have passed (0: none; else `1 + Limit as u8`).
    passed: AtomicU64,
}

tokio::task_local! {
    static BUDGET: Arc<Budget>;
}

const LIMITS: [Limit; 5] = [
    Limit::Items,
    Limit::ReadBytes,
    Limit::Cells,
    Limit::ResponseBytes,
    Limit::Partitions,
];

impl Budget {
    pub fn new(limits: Limits) -> Arc<Budget> {
        Arc::new(Budget {
            limits,
            ..Budget::default()
        })
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Runs `f` (one request) with this budget.
    pub async fn serve<F: Future>(self: &Arc<Self>, f: F) -> F::Output {
        BUDGET.scope(self.clone(), f).await
    }

    /// What the request used.
    pub fn usage(&self) -> Usage {
        Usage {
            items: self.items.load(Ordering::Relaxed),
            read_bytes: self.read_bytes.load(Ordering::Relaxed),
            cells: self.cells.load(Ordering::Relaxed),
        }
    }

    /// The limit a charge would have passed, if any.
    pub fn passed(&self) -> Option<Limit> {
        let n = self.passed.load(Ordering::Relaxed) as usize;
        n.checked_sub(1).and_then(|i| LIMITS.get(i)).copied()
    }

    fn pass(&self, limit: Limit) -> Limit {
        let i = LIMITS.iter().position(|l| *l == limit).unwrap_or(0) as u64;
        let _ = self
            .passed
            .compare_exchange(0, i + 1, Ordering::Relaxed, Ordering::Relaxed);
        limit
    }

    /// Counts `items` read, of `bytes` in all; `Err` (and nothing counted) when that would
    /// pass a limit.
    pub fn charge_read(&self, items: u64, bytes: u64) -> Result<(), Limit> {
        let add = |a: &AtomicU64, n: u64, max: u64| {
            a.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(n).filter(|t| *t <= max)
            })
            .is_ok()
        };
        if !add(&self.items, items, self.limits.items) {
            return Err(self.pass(Limit::Items));
        }
        if !add(&self.read_bytes, bytes, self.limits.read_bytes) {
            self.items.fetch_sub(items, Ordering::Relaxed);
            return Err(self.pass(Limit::ReadBytes));
        }
        Ok(())
    }

    /// Counts `n` values of the answer being built.
    pub fn charge_cells(&self, n: u64) -> Result<(), Limit> {
        self.cells
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(n).filter(|t| *t <= self.limits.cells)
            })
            .map(|_| ())
            .map_err(|_| self.pass(Limit::Cells))
    }

    /// The budget of the request being answered (`None` outside one).
    pub fn current() -> Option<Arc<Budget>> {
        BUDGET.try_with(Arc::clone).ok()
    }

    /// The limits of the request being answered (the defaults outside one).
    pub fn current_limits() -> Limits {
        Budget::current().map_or_else(Limits::default, |b| b.limits)
    }
}

/// Charges `n` cells to the current request, as a `too_much` error when they pass its limit.
pub fn charge_cells(n: u64, narrow: &str) -> Result<(), crate::ApiError> {
    let Some(b) = Budget::current() else {
        return Ok(());
    };
    b.charge_cells(n).map_err(|limit| crate::ApiError::TooMuch {
        limit,
        message: format!(
            "this answer would hold {n} values; at most {} fit in one response: {narrow}",
            b.limits.cells
        ),
    })
}

/// The error of a read the budget refused (the store's error a handler passes up; the
/// response says which limit it passed).
const BUDGET_OPERATION: &str = "request budget";

fn refused(limit: Limit) -> StoreError {
    StoreError::Request {
        operation: BUDGET_OPERATION,
        message: format!("the request's {} budget is spent", limit.as_str()),
    }
}

/// Charges items just read to the current request.
fn charge(items: &[Item]) -> Result<(), StoreError> {
    let Some(b) = Budget::current() else {
        return Ok(());
    };
    let bytes: u64 = items.iter().map(item_bytes).sum();
    b.charge_read(items.len() as u64, bytes).map_err(refused)
}

/// An item's size as DynamoDB counts it: each attribute's name plus its value (strings and
/// binaries their length, numbers about one byte per two digits plus one, booleans and nulls
/// one byte, lists and maps three bytes plus one per element and their elements).
pub fn item_bytes(item: &Item) -> u64 {
    item.iter()
        .map(|(k, v)| k.len() as u64 + value_bytes(v))
        .sum()
}

fn value_bytes(v: &AttributeValue) -> u64 {
    match v {
        AttributeValue::S(s) => s.len() as u64,
        AttributeValue::N(n) => (n.len() as u64).div_ceil(2) + 1,
        AttributeValue::B(b) => b.as_ref().len() as u64,
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::Ss(ss) => ss.iter().map(|s| s.len() as u64).sum(),
        AttributeValue::Ns(ns) => ns.iter().map(|n| (n.len() as u64).div_ceil(2) + 1).sum(),
        AttributeValue::Bs(bs) => bs.iter().map(|b| b.as_ref().len() as u64).sum(),
        AttributeValue::L(l) => 3 + l.iter().map(|v| 1 + value_bytes(v)).sum::<u64>(),
        AttributeValue::M(m) => {
            3 + m
                .iter()
                .map(|(k, v)| 1 + k.len() as u64 + value_bytes(v))
                .sum::<u64>()
        }
        _ => 0,
    }
}

/// Bytes `body` takes inside Lambda's response: a JSON string, quotes, backslashes and
/// control characters escaped, as `serde_json` writes it.
pub fn escaped_len(body: &str) -> u64 {
    2 + body
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..0x20 => 6,
            _ => 1,
        })
        .sum::<u64>()
}

/// The store handlers read through: every read is charged to the request's [`Budget`]
/// before its items are handed on; writes pass through unmetered (each route writes at most
/// a few items).
#[derive(Debug, Clone)]
pub struct Metered<S>(pub S);

impl<S: QueryStore + Sync> QueryStore for Metered<S> {
    async fn query(
        &self,
        spec: &QuerySpec,
        start: Option<Item>,
        limit: i32,
    ) -> Result<Page, StoreError> {
        let page = self.0.query(spec, start, limit).await?;
        charge(&page.items)?;
        Ok(page)
    }
}

impl<S: GetStore + Sync> GetStore for Metered<S> {
    async fn get(&self, key: Key, consistent: bool) -> Result<Option<Item>, StoreError> {
        let item = self.0.get(key, consistent).await?;
        charge(item.as_slice())?;
        Ok(item)
    }

    async fn batch_get(&self, keys: Vec<Key>) -> Result<Vec<Item>, StoreError> {
        let items = self.0.batch_get(keys).await?;
        charge(&items)?;
        Ok(items)
    }
}

impl<S: DeviceWriter + Sync> DeviceWriter for Metered<S> {
    async fn put_device(
        &self,
        reg: &DeviceRegistration,
        now: Timestamp,
    ) -> Result<PutDevice, StoreError> {
        self.0.put_device(reg, now).await
    }
}

impl<S: AlertWriter + Sync> AlertWriter for Metered<S> {
    async fn acknowledge(
        &self,
        owner: &AlertOwner,
        alert: &AlertId,
        now: Timestamp,
    ) -> Result<AlertOutcome, StoreError> {
        self.0.acknowledge(owner, alert, now).await
    }

    async fn snooze(
        &self,
        owner: &AlertOwner,
        alert: &AlertId,
        until: Timestamp,
    ) -> Result<AlertOutcome, StoreError> {
        self.0.snooze(owner, alert, until).await
    }

    async fn unsnooze(
        &self,
        owner: &AlertOwner,
        alert: &AlertId,
    ) -> Result<AlertOutcome, StoreError> {
        self.0.unsnooze(owner, alert).await
    }
}

/// A caller's count is a write, not charged to the request's reads.
impl<S: CallCounter + Sync> CallCounter for Metered<S> {
    async fn count_call(
        &self,
        count: &tidemark_schema::CallerRateItem,
        limit: u32,
    ) -> Result<bool, StoreError> {
        self.0.count_call(count, limit).await
    }
}

impl<S: LayoutWriter + Sync> LayoutWriter for Metered<S> {
    async fn replace_layouts(
        &self,
        device: &DeviceId,
        history: &LayoutHistory,
        version: u64,
    ) -> Result<bool, StoreError> {
        self.0.replace_layouts(device, history, version).await
    }
}

impl<S: TagWriter + Sync> TagWriter for Metered<S> {
    async fn replace_tags(
        &self,
        device: &DeviceId,
        history: &TagHistory,
        version: u64,
    ) -> Result<bool, StoreError> {
        self.0.replace_tags(device, history, version).await
    }

    async fn write_tag_index(
        &self,
        puts: &[TagIndexItem],
        deletes: &[Key],
    ) -> Result<(), StoreError> {
        self.0.write_tag_index(puts, deletes).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(items: u64, read_bytes: u64, cells: u64) -> Limits {
        Limits {
            items,
            read_bytes,
            cells,
            ..Limits::default()
        }
    }

    #[test]
    fn reads_up_to_the_item_limit_pass_and_the_one_past_it_is_refused() {
        let b = Budget::new(limits(10, 1_000, 10));
        assert_eq!(b.charge_read(6, 10), Ok(()));
        assert_eq!(b.charge_read(4, 10), Ok(()));
        assert_eq!(b.charge_read(1, 0), Err(Limit::Items));
        assert_eq!(b.usage().items, 10);
        assert_eq!(b.passed(), Some(Limit::Items));
    }

    #[test]
    fn a_read_past_the_byte_limit_is_refused_and_not_counted() {
        let b = Budget::new(limits(100, 1_000, 10));
        assert_eq!(b.charge_read(1, 1_000), Ok(()));
        assert_eq!(b.charge_read(1, 1), Err(Limit::ReadBytes));
        assert_eq!(
            b.usage(),
            Usage {
                items: 1,
                read_bytes: 1_000,
                cells: 0
            }
        );
        assert_eq!(b.passed(), Some(Limit::ReadBytes));
    }

    #[test]
    fn cells_up_to_the_limit_pass_and_the_first_limit_passed_is_the_one_named() {
        let b = Budget::new(limits(1, 1, 120));
        assert_eq!(b.charge_cells(120), Ok(()));
        assert_eq!(b.passed(), None);
        assert_eq!(b.charge_cells(1), Err(Limit::Cells));
        assert_eq!(b.charge_read(2, 0), Err(Limit::Items));
        assert_eq!(b.passed(), Some(Limit::Cells));
    }

    #[test]
    fn the_deployed_limits_are_the_documented_constants() {
        let l = Limits::default();
        assert_eq!(l.items, 300_000);
        assert_eq!(l.read_bytes, 67_108_864);
        assert_eq!(l.cells, 120_000);
        // 5 MiB of body leaves 1 MiB of Lambda's 6 MB response for the envelope.
        assert_eq!(l.response_bytes, 5_242_880);
        assert!(l.response_bytes + 1_048_576 <= 6 * 1024 * 1024);
        // maxPoints' bound × every aggregate of one metric fits.
        assert!(
            (crate::series::MAX_MAX_POINTS * 12) as u64 <= l.cells,
            "a whole wide answer of one metric"
        );
    }

    #[test]
    fn item_bytes_count_names_and_values_as_dynamodb_does() {
        let item = Item::from([
            ("pk".to_owned(), AttributeValue::S("DEVICE#a".into())),
            ("n".to_owned(), AttributeValue::N("12345".into())),
            ("ok".to_owned(), AttributeValue::Bool(true)),
            (
                "m".to_owned(),
                AttributeValue::M([("t".to_owned(), AttributeValue::N("1".into()))].into()),
            ),
        ]);
        // 2+8, 1+(3+1), 2+1, 1+(3 + 1+1+(1+1))
        assert_eq!(item_bytes(&item), 10 + 5 + 3 + 8);
    }

    #[test]
    fn escaped_length_is_what_serde_json_writes() {
        for s in ["", "plain", "{\"a\":\"b\\c\"}", "line\nbreak\t\u{1}", "é"] {
            let written = serde_json::to_string(s).unwrap();
            assert_eq!(escaped_len(s), written.len() as u64, "{s:?}");
        }
    }
}
