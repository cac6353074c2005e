//! Paged rollups: a bucket whose rollup would outgrow one item (a gateway with thousands of
//! tags under one device ID) continues in overflow pages, so no write is ever refused for
//! its size and no batch stalls on it.
//!
//! Page 0 is the aggregate item (`AGG#<period>#<bucket>`); pages 1, 2, … live under
//! `AGGPAGE#<period>#<bucket>#<n>` ([`tidemark_schema::keys::aggregate_page_sk`]), outside
//! the API's aggregate ranges. Every page has the item's shape, with its own metrics,
//! watermarks (`applied`) and `version`, plus `sealed`. An ordinary device never gets a
//! second page: its bucket is one item written once per batch, exactly as before.
//!
//! The protocol is the packed slots' ([`tidemark_store::slots`]):
//! - a metric lives in exactly one page and never moves; a batch's contribution to it is
//!   applied to that page under that page's watermarks ([`crate::combine::apply`]), so
//!   exactly-once holds page by page;
//! - new metrics go only to the open page (the last, unsealed one) while it stays under the
//!   page budget ([`PAGE_BYTES`]); what does not fit is put in new pages, and the open page
//!   is first **sealed** (a conditional put bumping its version, `sealed = true`), and only
//!   then the next page created (conditional on `attribute_not_exists`);
//! - sealed pages keep taking updates of the metrics they hold.
//!
//! Each put is conditional on the page's version as read (or on its absence), so a writer
//! that missed a newer page always fails a condition: the open page it would fill or seal
//! was bumped by the seal, or the page it would create exists. It then reads the pages
//! again and decides again; pages it already wrote have advanced their watermarks, so
//! applying the batch again changes nothing there. Two writers can never put one metric in
//! two pages.
//!
//! Readers learn a bucket has overflow pages from page 0's `sealed` (page 0 is sealed
//! exactly when page 1 exists, or is about to), Query the page prefix, and merge
//! ([`AggregateItem::merge_pages`]).

use std::collections::{BTreeMap, BTreeSet};

use tidemark_schema::{AggregateItem, Bucket, DeviceId, EntityKey, Key, MetricName};
use tidemark_store::limits::{MAX_ITEM_BYTES, item_size};
use tidemark_store::{StoreError, to_item};

use crate::combine::{self, AggregatePlan, BucketSummary};
use crate::records::cmp_seq;

/// The encoded size past which a page takes no new metrics. A write is billed by the whole
/// item, so this also bounds what one page write costs (64 WCU); about 800 metrics of a
/// gateway fit in one page.
pub const PAGE_BYTES: usize = 64 * 1024;
const _: () = assert!(
    PAGE_BYTES <= MAX_ITEM_BYTES / 4,
    "well under the item limit"
);

/// The page number of an aggregate item (page 0 or an overflow page), from its key.
pub fn page_number(item: &AggregateItem) -> Option<u16> {
    match EntityKey::parse(&item.pk, &item.sk).ok()? {
        EntityKey::Aggregate { .. } => Some(0),
        EntityKey::AggregatePage { page, .. } => Some(page),
        _ => None,
    }
}

/// An item's size as DynamoDB counts it.
pub fn size(item: &AggregateItem) -> Result<usize, StoreError> {
    Ok(item_size(&to_item(item)?))
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
    /// The extremes of a removed value must be taken from the raw readings first.
    pub needs_summary: bool,
    pub added: BTreeSet<(String, String, tidemark_schema::Timestamp)>,
}

/// The puts of one decision, or the news that raw readings must be summarized first.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Puts(Vec<PagePut>),
    NeedsSummary,
}

/// Places `fresh` metrics (held by no page, in order) and the updates `build` makes into
/// puts, in the order they must run (see the module docs):
/// 1. the open page with all the new metrics if it stays within `budget`; otherwise it is
///    sealed as it is (nothing else changes in that put) and
/// 2. the new metrics go to new pages, created in order, each sealed before the next;
/// 3. then the updates of every other page (the one just sealed included).
///
/// A page's watermarks only advance once the new metrics of the records they cover have a
/// page: a decision cut short after any put leaves nothing a retry would skip.
/// `build(key, page, offered)` is what the page `key` (`None`: not written yet) becomes
/// with its own metrics updated and the metrics `offered` added.
pub fn place(
    device: &DeviceId,
    bucket: Bucket,
    pages: &Pages,
    fresh: &[MetricName],
    budget: usize,
    mut build: impl FnMut(Key, Option<&AggregateItem>, &[MetricName]) -> Built,
) -> Result<Decision, StoreError> {
    let mut puts = Vec::new();
    let mut needs_summary = false;
    let last = pages.pages.len().checked_sub(1);
    let open = last.filter(|i| !pages.pages[*i].1.sealed);
    let mut sealed_now: Option<AggregateItem> = None;
    let mut placed = fresh.is_empty();
    if let Some(i) = open {
        let (n, p) = &pages.pages[i];
        let b = build(AggregateItem::page_key(device, bucket, *n), Some(p), fresh);
        needs_summary |= b.needs_summary;
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
        needs_summary |= b.needs_summary;
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
        needs_summary |= b.needs_summary;
        if b.changed {
            puts.push(PagePut {
                number: *n,
                item: b.item,
                expected: Some(current.version),
                added: b.added,
            });
        }
    }
    Ok(if needs_summary {
        Decision::NeedsSummary
    } else {
        Decision::Puts(puts)
    })
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

/// The aggregator's decision for one batch's `plan` over the bucket's `pages`: each page
/// gets the contributions to the metrics it holds, applied under its own watermarks; the
/// metrics no page holds are placed by [`place`]. An ordinary bucket (one open page that
/// stays within `budget`) gets exactly the single write it always had.
pub fn decide(
    plan: &AggregatePlan,
    pages: &Pages,
    budget: usize,
    summary: Option<&BucketSummary>,
) -> Result<Decision, StoreError> {
    let single = match pages.pages.as_slice() {
        [] => Some(None),
        [(0, p)] if !p.sealed => Some(Some(p)),
        _ => None,
    };
    if let Some(current) = single {
        let a = combine::apply(current, plan);
        if a.applied == 0 {
            return Ok(Decision::Puts(Vec::new()));
        }
        let mut item = a.item;
        if !a.recompute.is_empty() {
            let Some(s) = summary else {
                return Ok(Decision::NeedsSummary);
            };
            combine::fix_extremes(&mut item, &a.recompute, s);
        }
        if size(&item)? <= budget {
            return Ok(Decision::Puts(vec![PagePut {
                number: 0,
                item,
                expected: current.map(|c| c.version),
                added: a.added,
            }]));
        }
    }
    let holder = pages.holder();
    let mut fresh: BTreeSet<&MetricName> = BTreeSet::new();
    for c in &plan.contributions {
        fresh.extend(c.delta.brings().filter(|m| !holder.contains_key(m)));
    }
    let fresh: Vec<MetricName> = fresh.into_iter().cloned().collect();
    let page0 = pages.pages.first().filter(|(n, _)| *n == 0).map(|(_, p)| p);
    place(
        &plan.device,
        plan.bucket,
        pages,
        &fresh,
        budget,
        |key, page, offered| {
            let offered: BTreeSet<&MetricName> = offered.iter().collect();
            let own = |m: &MetricName| page.is_some_and(|p| p.metrics.contains_key(m));
            // A record may start a metric only if page 0 has not applied it: page 0's
            // watermarks advance after the record's new metrics have their page (so this
            // refuses only what was applied before, e.g. a metric a delete emptied from an
            // item that was not paged yet, replayed).
            let newer = |c: &combine::Contribution| {
                page0.is_none_or(|p| {
                    p.applied
                        .get(&c.source_pk)
                        .is_none_or(|w| cmp_seq(&c.seq, w).is_gt())
                })
            };
            let sub = combine::restrict(plan, key, |c, m| {
                own(m) || (offered.contains(m) && newer(c))
            });
            let a = combine::apply_with(page, &sub, true);
            let mut item = a.item;
            let mut needs_summary = false;
            if !a.recompute.is_empty() {
                match summary {
                    Some(s) => combine::fix_page_extremes(&mut item, &a.recompute, s),
                    None => needs_summary = true,
                }
            }
            Built {
                item,
                changed: a.applied > 0,
                needs_summary,
                added: a.added,
            }
        },
    )
}
