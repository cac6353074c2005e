//! Paged rollups: a bucket whose rollup would outgrow one item (a gateway with thousands of
//! tags under one device ID) continues in overflow pages, so no write is ever refused for
//! its size and no batch stalls on it.
//!
//! Page 0 is the aggregate item (`AGG#<period>#<bucket>`); pages 1, 2, … live under
//! `AGGPAGE#<period>#<bucket>#<n>` ([`tidemark_schema::keys::aggregate_page_sk`]), outside
//! the API's aggregate ranges. Every page has the item's shape, with its own metrics and
//! `version`, plus `sealed`. An ordinary device never gets a second page.
//!
//! A bucket is written whole from a recomputation (an hour from its readings, a day from its
//! hours), [`rebuild`] turning the recomputed metrics into page puts with the packed slots'
//! protocol ([`tidemark_store::write::slots`]):
//! - a metric lives in exactly one page and never moves (a metric no reading has any more
//!   stays in its page with count 0, which readers leave out);
//! - new metrics go only to the open page (the last, unsealed one) while it stays under the
//!   page budget ([`PAGE_BYTES`]); what does not fit is put in new pages, and the open page
//!   is first **sealed** (a conditional put bumping its version, `sealed = true`), and only
//!   then the next page created (conditional on `attribute_not_exists`);
//! - the puts run in order: the open page (all the new metrics, or only its seal), the new
//!   pages, then every other page.
//!
//! Each put is conditional on the page's version as read (or on its absence), so a writer
//! that missed a newer page always fails a condition: the open page it would fill or seal
//! was bumped by the seal, or the page it would create exists. It then reads the pages
//! again and recomputes. Two writers can never put one metric in two pages.
//!
//! Readers learn a bucket has overflow pages from page 0's `sealed` (page 0 is sealed
//! exactly when page 1 exists, or is about to), Query the page prefix, and merge
//! ([`AggregateItem::merge_pages`]).

use std::collections::{BTreeMap, BTreeSet};

use tidemark_schema::marks::{MARK_BYTES, MAX_MARKS};
use tidemark_schema::{AggregateItem, Bucket, DeviceId, EntityKey, Key, MetricName};
use tidemark_store::StoreError;
use tidemark_store::limits::{MAX_ITEM_BYTES, item_size};

use crate::rollups::combine;

/// The encoded size past which a page takes no new metrics. A write is billed by the whole
/// item, so this also bounds what one page write costs (64 WCU); about 800 metrics of a
/// gateway fit in one page.
pub const PAGE_BYTES: usize = 64 * 1024;
const _: () = assert!(
    PAGE_BYTES <= MAX_ITEM_BYTES / 4,
    "well under the item limit"
);
const _: () = assert!(
    PAGE_BYTES + MAX_MARKS * MARK_BYTES + 16 * 1024 <= MAX_ITEM_BYTES,
    "a full page with all its marks stays under the item limit"
);

/// The page number of an aggregate item (page 0 or an overflow page), from its key.
pub fn page_number(item: &AggregateItem) -> Option<u16> {
    match EntityKey::parse(&item.pk, &item.sk).ok()? {
        EntityKey::Aggregate { .. } => Some(0),
        EntityKey::AggregatePage { page, .. } => Some(page),
        _ => None,
    }
}

/// An item's size as DynamoDB counts it, less any marks an item written before hours were
/// recomputed still carries (they go at its next write), so a page's budget is spent on
/// metrics alone.
pub fn size(item: &AggregateItem) -> Result<usize, StoreError> {
    if item.marks.is_empty() {
        return Ok(item_size(&tidemark_store::aggregate_item(item)?));
    }
    let mut bare = item.clone();
    bare.marks = Default::default();
    Ok(item_size(&tidemark_store::aggregate_item(&bare)?))
}

/// A bucket's pages as read, in page order: page 0 first (absent: the bucket has no item
/// yet), then its overflow pages.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pages {
    pub pages: Vec<(u16, AggregateItem)>,
}

impl Pages {
    /// Page 0 as read and the overflow pages (read only when page 0 is sealed), sorted.
    pub fn of(page0: Option<AggregateItem>, overflow: Vec<AggregateItem>) -> Pages {
        let mut pages: Vec<(u16, AggregateItem)> = page0.into_iter().map(|p| (0, p)).collect();
        if pages.first().is_some_and(|(_, p)| p.sealed) {
            pages.extend(
                overflow
                    .into_iter()
                    .filter_map(|p| Some((page_number(&p).filter(|n| *n > 0)?, p))),
            );
        }
        pages.sort_by_key(|(n, _)| *n);
        Pages { pages }
    }

    fn holder(&self) -> BTreeMap<&MetricName, usize> {
        let mut out = BTreeMap::new();
        for (i, (_, p)) in self.pages.iter().enumerate() {
            for m in p.metrics.keys() {
                out.entry(m).or_insert(i);
            }
        }
        out
    }

    /// The whole bucket as a reader sees it.
    pub fn merged(&self) -> Option<AggregateItem> {
        AggregateItem::merge_pages(self.pages.iter().map(|(_, p)| p.clone()).collect())
    }
}

/// One conditional put of a page.
#[derive(Debug, Clone, PartialEq)]
pub struct PagePut {
    pub number: u16,
    pub item: AggregateItem,
    /// The version as read (`None`: a new page, written only if no item has its key).
    pub expected: Option<u64>,
    /// The readings this put adds (for counting readings once across pages).
    pub added: BTreeSet<(String, String, tidemark_schema::Timestamp)>,
}

/// What a page becomes, built by the caller for a page (as read, or new) and the new
/// metrics it is offered.
#[derive(Debug, Clone)]
pub struct Built {
    pub item: AggregateItem,
    /// False: nothing changed, nothing to write (unless the page must be sealed).
    pub changed: bool,
    pub added: BTreeSet<(String, String, tidemark_schema::Timestamp)>,
}

/// Places `fresh` metrics (held by no page, in order) and the updates `build` makes into
/// puts, in the order they must run (see the module docs):
/// 1. the open page with all the new metrics if it stays within `budget`; otherwise it is
///    sealed as it is (nothing else changes in that put) and
/// 2. the new metrics go to new pages, created in order, each sealed before the next;
/// 3. then the updates of every other page (the one just sealed included).
///
/// A decision cut short after any put leaves the pages a retry reads and recomputes.
/// `build(key, page, offered)` is what the page `key` (`None`: not written yet) becomes
/// with its own metrics updated and the metrics `offered` added.
pub fn place(
    device: &DeviceId,
    bucket: Bucket,
    pages: &Pages,
    fresh: &[MetricName],
    budget: usize,
    mut build: impl FnMut(Key, Option<&AggregateItem>, &[MetricName]) -> Built,
) -> Result<Vec<PagePut>, StoreError> {
    let mut puts = Vec::new();
    let last = pages.pages.len().checked_sub(1);
    let open = last.filter(|i| !pages.pages[*i].1.sealed);
    let mut sealed_now: Option<AggregateItem> = None;
    let mut placed = fresh.is_empty();
    if let Some(i) = open {
        let (n, p) = &pages.pages[i];
        let b = build(AggregateItem::page_key(device, bucket, *n), Some(p), fresh);
        if fresh.is_empty() || size(&b.item)? <= budget {
            placed = true;
            if b.changed {
                puts.push(PagePut {
                    number: *n,
                    item: b.item,
                    expected: Some(p.version),
                    added: b.added,
                });
            }
        } else {
            let mut sealed = p.clone();
            sealed.sealed = true;
            sealed.version = p.version + 1;
            puts.push(PagePut {
                number: *n,
                item: sealed.clone(),
                expected: Some(p.version),
                added: BTreeSet::new(),
            });
            sealed_now = Some(sealed);
        }
    }
    let mut number = match last {
        None => Some(0),
        Some(i) => pages.pages[i].0.checked_add(1),
    };
    let mut rest = if placed { &fresh[..0] } else { fresh };
    while !rest.is_empty() {
        let n = number.ok_or_else(|| StoreError::Request {
            operation: "PutItem",
            message: format!("{device} {} has too many aggregate pages", bucket.label()),
        })?;
        let key = AggregateItem::page_key(device, bucket, n);
        let (k, mut b) = fit(rest, budget, |offered| build(key.clone(), None, offered))?;
        rest = &rest[k..];
        b.item.sealed = !rest.is_empty();
        puts.push(PagePut {
            number: n,
            item: b.item,
            expected: None,
            added: b.added,
        });
        number = n.checked_add(1);
    }
    for (i, (n, p)) in pages.pages.iter().enumerate() {
        let current = match (Some(i) == open, &sealed_now) {
            (false, _) => p,
            (true, Some(s)) => s,
            (true, None) => continue,
        };
        let b = build(
            AggregateItem::page_key(device, bucket, *n),
            Some(current),
            &[],
        );
        if b.changed {
            puts.push(PagePut {
                number: *n,
                item: b.item,
                expected: Some(current.version),
                added: b.added,
            });
        }
    }
    Ok(puts)
}

/// The longest prefix of `offered` (at least one metric) whose new page stays within
/// `budget`, and that page. Binary search: a page only grows with the metrics it takes.
fn fit(
    offered: &[MetricName],
    budget: usize,
    mut build: impl FnMut(&[MetricName]) -> Built,
) -> Result<(usize, Built), StoreError> {
    let all = build(offered);
    if size(&all.item)? <= budget {
        return Ok((offered.len(), all));
    }
    let (mut lo, mut hi) = (1.min(offered.len()), offered.len());
    let mut best = build(&offered[..lo]);
    // Invariant: the prefix of `lo` is taken (fits, or is the minimum), `hi` does not fit.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let b = build(&offered[..mid]);
        if size(&b.item)? <= budget {
            lo = mid;
            best = b;
        } else {
            hi = mid;
        }
    }
    Ok((lo, best))
}

/// One metric of a rollup recomputed from raw readings: its stats and the first and last
/// time of a reading carrying it.
#[derive(Debug, Clone, PartialEq)]
pub struct Recomputed {
    pub stats: tidemark_schema::Stats,
    pub first: tidemark_schema::Timestamp,
    pub last: tidemark_schema::Timestamp,
}

/// Each metric of a bucket's readings as a page holds it.
pub fn recomputed(s: crate::rollups::combine::BucketSummary) -> BTreeMap<MetricName, Recomputed> {
    s.stats
        .into_iter()
        .filter_map(|(m, stats)| {
            let (first, last) = *s.times.get(&m)?;
            Some((m, Recomputed { stats, first, last }))
        })
        .collect()
}

/// The puts that make a paged bucket's pages hold exactly `target` (`tidemark-admin
/// rebuild`, and the fold of a paged day): every page keeps its metrics (with the recomputed stats, or emptied with
/// count 0 when no reading has them any more), the metrics no page holds are placed as the
/// aggregator places new ones ([`place`]), and every page written takes `marks` as its
/// floors of those source partitions (its others kept) and drops its per-item marks.
pub fn rebuild(
    device: &DeviceId,
    bucket: Bucket,
    pages: &Pages,
    target: &BTreeMap<MetricName, Recomputed>,
    marks: &BTreeMap<String, String>,
    budget: usize,
) -> Result<Vec<PagePut>, StoreError> {
    let holder = pages.holder();
    let fresh: Vec<MetricName> = target
        .keys()
        .filter(|m| !holder.contains_key(m))
        .cloned()
        .collect();
    place(
        device,
        bucket,
        pages,
        &fresh,
        budget,
        |key, page, offered| {
            let mut item = page.cloned().unwrap_or_else(|| AggregateItem {
                pk: key.pk.clone(),
                sk: key.sk.clone(),
                metrics: BTreeMap::new(),
                first_at: tidemark_schema::Timestamp::MIN,
                last_at: tidemark_schema::Timestamp::MIN,
                applied: BTreeMap::new(),
                marks: Default::default(),
                marked_at: 0,
                from_table: false,
                folded: Default::default(),
                version: 0,
                sealed: false,
                open: false,
            });
            // Recomputed content is a rollup, not a placeholder.
            item.open = false;
            for (m, s) in item.metrics.iter_mut() {
                *s = target.get(m).map_or(combine::EMPTIED, |r| r.stats.clone());
            }
            for m in offered {
                if let Some(r) = target.get(m) {
                    item.metrics.insert(m.clone(), r.stats.clone());
                }
            }
            let held = || item.metrics.keys().filter_map(|m| target.get(m));
            if let (Some(first), Some(last)) =
                (held().map(|r| r.first).min(), held().map(|r| r.last).max())
            {
                item.first_at = first;
                item.last_at = last;
            }
            // Floors are `tidemark-admin rebuild`'s; a recomputation without them (the
            // aggregator's) leaves none behind.
            if marks.is_empty() {
                item.applied.clear();
            }
            for (p, w) in marks {
                item.applied.insert(p.clone(), w.clone());
            }
            // The floors cover what was recomputed: no per-item mark may refuse a record above.
            item.marks = Default::default();
            item.marked_at = 0;
            item.version = page.map_or(0, |p| p.version) + 1;
            // A page already holding this content is not written again (a replay of a
            // recomputed hour writes nothing); rebuild's floors are always written.
            let changed = !marks.is_empty() || page.is_none_or(|p| differs(Some(p), &item));
            Built {
                item,
                changed,
                added: BTreeSet::new(),
            }
        },
    )
}

/// A bucket recomputed whole (a day folded from its hours, an hour taken from the table) as
/// one item holding `target`, over `current` as read; the caller pages it when it does not
/// fit in one ([`rebuild`]).
pub fn one_item(
    key: &Key,
    current: Option<&AggregateItem>,
    target: &BTreeMap<MetricName, Recomputed>,
) -> AggregateItem {
    let mut item = AggregateItem::empty(key);
    item.metrics = target
        .iter()
        .map(|(n, r)| (n.clone(), r.stats.clone()))
        .collect();
    let times = || target.values();
    item.first_at = times()
        .map(|r| r.first)
        .min()
        .unwrap_or(tidemark_schema::Timestamp::MAX);
    item.last_at = times()
        .map(|r| r.last)
        .max()
        .unwrap_or(tidemark_schema::Timestamp::MIN);
    settle(&mut item, current);
    item
}

/// What every write of a recomputed bucket does: no marks or floors (its content does not
/// come from applying records), times kept meaningful, the version bumped from the one read.
pub fn settle(item: &mut AggregateItem, current: Option<&AggregateItem>) {
    item.applied.clear();
    item.marks = Default::default();
    item.marked_at = 0;
    if item.first_at > item.last_at {
        let at = current.map_or(tidemark_schema::Timestamp::MIN, |c| c.first_at);
        item.first_at = at;
        item.last_at = at;
    }
    item.version = current.map_or(0, |c| c.version) + 1;
}

/// Whether writing the recomputed `new` over `current` changes anything stored.
pub fn differs(current: Option<&AggregateItem>, new: &AggregateItem) -> bool {
    current.is_none_or(|c| {
        c.metrics != new.metrics
            || c.first_at != new.first_at
            || c.last_at != new.last_at
            || c.folded != new.folded
            || c.from_table != new.from_table
            || c.open != new.open
            || !c.applied.is_empty()
            || !c.marks.is_empty()
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::atomic::Ordering;

    use aws_lambda_events::event::dynamodb::{Event, EventRecord};
    use tidemark_schema::{AggregateItem, DeviceId, MetricName, Period, Stats, Timestamp};
    use tidemark_store::limits::MAX_ITEM_BYTES;

    use super::*;
    use crate::memory::MemoryStore;
    use crate::testing::insert_reading;
    use crate::{Aggregator, AggregatorConfig};

    const HOUR: &str = "2026-04-20T14:00:00Z";

    fn t0() -> Timestamp {
        Timestamp::parse_rfc3339(HOUR).unwrap()
    }

    fn tag(i: usize) -> MetricName {
        MetricName::new(&format!("plc1_line{}_tag{i:05}", i % 7)).unwrap()
    }

    fn event(records: &[EventRecord]) -> Event {
        let mut e = Event::default();
        e.records = records.to_vec();
        e
    }

    /// Every page of the bucket as stored, and their merge.
    fn bucket(
        store: &MemoryStore,
        device: &str,
        period: Period,
    ) -> (Vec<AggregateItem>, AggregateItem) {
        let d = DeviceId::new(device).unwrap();
        let b = period.bucket(t0());
        let page0 = store.aggregate(&AggregateItem::key_for(&d, b));
        let prefix = tidemark_schema::keys::aggregate_page_sk_prefix(b);
        let overflow = store.aggregates_with_prefix(&tidemark_schema::keys::device_pk(&d), &prefix);
        let pages = Pages::of(page0, overflow);
        let merged = pages.merged().expect("the bucket has a rollup");
        (pages.pages.into_iter().map(|(_, p)| p).collect(), merged)
    }

    /// A gateway's hour: `tags` metrics, 32 to a record, each read twice.
    fn gateway_hour(tags: usize) -> (Vec<EventRecord>, BTreeMap<MetricName, Stats>) {
        let mut records = Vec::new();
        let mut want: BTreeMap<MetricName, Stats> = BTreeMap::new();
        let mut seq = 100;
        for round in 0..2u32 {
            for (j, chunk) in (0..tags).collect::<Vec<_>>().chunks(32).enumerate() {
                let at = t0()
                    .plus_millis(i64::from(round) * 1_800_000 + j as i64 * 1_000)
                    .unwrap();
                let metrics: BTreeMap<MetricName, f64> = chunk
                    .iter()
                    .map(|i| (tag(*i), *i as f64 * 0.25 + f64::from(round) * 10.5))
                    .collect();
                for (m, v) in &metrics {
                    want.entry(m.clone())
                        .and_modify(|s| s.merge(&Stats::at(at, *v)))
                        .or_insert_with(|| Stats::at(at, *v));
                }
                records.push(insert_reading(seq, "gw", None, at, metrics));
                seq += 1;
            }
        }
        (records, want)
    }

    #[tokio::test]
    async fn an_8000_tag_gateway_gets_every_hourly_and_daily_rollup_exactly_in_pages_under_400_kb()
    {
        // GIVEN a gateway with 8,000 tags under one device ID, 32 metrics a record, read
        // twice in one hour (500 records)
        let (records, want) = gateway_hour(8_000);
        let agg = Aggregator::with_store(MemoryStore::default(), AggregatorConfig::new("t"));
        // WHEN delivered in batches, then replayed regrouped, then bisected and replayed
        let mut deliveries: Vec<&[EventRecord]> = records.chunks(100).collect();
        deliveries.extend(records.chunks(37));
        deliveries.push(&records[..250]);
        deliveries.push(&records);
        for batch in deliveries {
            let (resp, _) = agg.process_written(&event(batch)).await;
            // THEN no batch ever fails
            assert!(resp.batch_item_failures.is_empty(), "a batch failed");
        }
        // AND one more replay of a batch writes no page: the recomputed hour is as stored
        let (_, replay) = agg.process_written(&event(&records[..100])).await;
        assert_eq!(replay.items_written, 0, "{replay:?}");
        // THEN every metric's hourly and daily rollup is exact, in pages under 400 KB
        for period in [Period::Hourly, Period::Daily] {
            let (pages, merged) = bucket(agg.store(), "gw", period);
            assert_eq!(merged.metrics, want, "{period:?}");
            assert_eq!(merged.first_at, t0());
            assert_eq!(
                merged.last_at,
                t0().plus_millis(1_800_000 + 249 * 1_000).unwrap()
            );
            assert!(pages.len() > 1, "{period:?} is paged");
            for (i, p) in pages.iter().enumerate() {
                assert_eq!(p.sealed, i + 1 < pages.len(), "only the last page is open");
                // A page takes new metrics only under the budget; updates of its metrics
                // (more digits in a sum or a spread) may grow it a little past it.
                let bytes = size(p).unwrap();
                assert!(
                    bytes <= PAGE_BYTES + PAGE_BYTES / 8,
                    "page {i}: {bytes} bytes"
                );
            }
            let held: usize = pages.iter().map(|p| p.metrics.len()).sum();
            assert_eq!(held, want.len(), "each metric in exactly one page");
            eprintln!("{period:?}: {} pages", pages.len());
        }
        // Nor did any put come near the item limit.
        let largest = agg.store().largest_item.load(Ordering::SeqCst);
        eprintln!("largest item put: {largest} bytes");
        assert!(largest <= PAGE_BYTES + PAGE_BYTES / 8, "{largest}");
        assert!(largest < MAX_ITEM_BYTES);
    }

    #[tokio::test]
    async fn an_ordinary_device_still_writes_one_item_per_bucket_per_batch() {
        let agg = Aggregator::with_store(MemoryStore::default(), AggregatorConfig::new("t"));
        let (records, want) = gateway_hour(40);
        let (_, report) = agg.process_written(&event(&records)).await;
        assert_eq!(report.items_written, 2, "one hourly and one daily item");
        let (pages, merged) = bucket(agg.store(), "gw", Period::Hourly);
        assert_eq!(pages.len(), 1);
        assert!(!pages[0].sealed);
        assert_eq!(merged.metrics, want);
        let item = tidemark_store::to_item(&pages[0]).unwrap();
        assert!(
            !item.contains_key("sealed"),
            "ordinary items are stored as before"
        );
    }

    #[tokio::test]
    async fn concurrent_writers_adding_new_metrics_to_a_full_page_never_put_a_metric_in_two_pages()
    {
        // GIVEN a small page budget and an hour whose open page is already full
        let mut config = AggregatorConfig::new("t");
        config.page_bytes = 4 * 1024;
        let store = MemoryStore::default();
        *store.write_delay.lock().unwrap() = Some(std::time::Duration::from_millis(5));
        // (its readings in two partitions from a minute into the hour)
        let sharded = tidemark_schema::LayoutHistory::EMPTY
            .with_change(t0().plus_millis(30_000).unwrap(), 4)
            .unwrap();
        store
            .histories
            .lock()
            .unwrap()
            .insert(DeviceId::new("gw").unwrap(), sharded);
        let agg = Aggregator::with_store(store, config);
        let (first, _) = gateway_hour(64);
        let (resp, _) = agg.process_written(&event(&first[..2])).await;
        assert!(resp.batch_item_failures.is_empty());
        // WHEN two invocations (two partitions of a hot gateway) add new metrics at
        // once, some of them the same
        let batch = |shard: u16, name: &str| {
            let metrics: BTreeMap<MetricName, f64> = (0..40)
                .map(|i| (MetricName::new(&format!("{name}{i:03}")).unwrap(), 1.0))
                .chain((0..20).map(|i| (MetricName::new(&format!("shared{i:03}")).unwrap(), 2.0)))
                .collect();
            let at = t0().plus_millis(i64::from(shard) * 60_000).unwrap();
            vec![insert_reading(500, "gw", Some(shard), at, metrics)]
        };
        let (a, b) = (batch(1, "a"), batch(2, "b"));
        let (ea, eb) = (event(&a), event(&b));
        let (ra, rb) = tokio::join!(agg.process_written(&ea), agg.process_written(&eb));
        assert!(ra.0.batch_item_failures.is_empty() && rb.0.batch_item_failures.is_empty());
        assert!(
            ra.1.conflicts_retried + rb.1.conflicts_retried > 0,
            "they raced"
        );
        // THEN every metric is in exactly one page, counted once per reading
        for period in [Period::Hourly, Period::Daily] {
            let (pages, merged) = bucket(agg.store(), "gw", period);
            assert!(pages.len() >= 2, "{period:?}: {} pages", pages.len());
            let mut seen: BTreeMap<&MetricName, usize> = BTreeMap::new();
            for p in &pages {
                for m in p.metrics.keys() {
                    *seen.entry(m).or_default() += 1;
                }
            }
            assert!(seen.values().all(|n| *n == 1), "a metric in two pages");
            let shared = &merged.metrics[&MetricName::new("shared000").unwrap()];
            assert_eq!((shared.count, shared.sum), (2, 4.0));
            assert_eq!(merged.metrics[&MetricName::new("a000").unwrap()].count, 1);
            assert_eq!(merged.metrics[&MetricName::new("b039").unwrap()].count, 1);
            assert_eq!(merged.metrics.len(), 64 + 40 + 40 + 20);
        }
    }
}
