//! Hours of the rollups role: an hour is written twice in its life, a placeholder when its
//! first readings come (readers take an open hour from its readings) and its rollup once it
//! closes ([`super::settled::closed`]), recomputed from the stored readings read
//! strongly consistent. After that a record changing the hour (a late reading, a correction,
//! a delete) recomputes it again, written only when the content differs: a recompute never
//! adds, so replays, bisected batches and records still ahead in the stream change nothing
//! (docs/design.md §5, docs/decisions/0003-write-cost-floors.md).
//!
//! A device's batch closes its hours still placeholders once closed: those among its few
//! newest hours before the batch's first ([`PENDING_LOOKBACK`]), looked up once per device
//! and hour per container ([`SettledHours`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use futures::StreamExt;
use tidemark_schema::{AggregateItem, Bucket, DeviceId, Key, Period, Timestamp};

use crate::AggregatorError;
use crate::function::Aggregator;
use crate::report::Counters;
use crate::rollups::combine::{self, AggregatePlan};
use crate::rollups::days::{self, HourChange};
use crate::rollups::pages::{self, PagePut, Pages, Recomputed};
use crate::store::Store;

/// How many of a device's newest hourly items before a batch's first hour the batch looks
/// at for placeholders to close: the hour before, and two more in case a close failed.
pub const PENDING_LOOKBACK: usize = 3;

/// The placeholder an open hour's item becomes: no content (readers take the hour from its
/// readings), its pages kept linked so the close rebuilds them.
fn placeholder_puts(plan: &AggregatePlan, read: &Pages) -> Vec<PagePut> {
    let current = read.pages.first().map(|(_, p)| p);
    if current.is_some_and(|c| c.open) {
        return Vec::new();
    }
    let mut item = AggregateItem::empty(&plan.key);
    item.open = true;
    item.sealed = current.is_some_and(|c| c.sealed);
    item.version = current.map_or(0, |c| c.version) + 1;
    vec![PagePut {
        number: 0,
        expected: current.map(|c| c.version),
        item,
        added: BTreeSet::new(),
    }]
}

/// The readings a plan adds, each counted once (source item, record, time).
fn readings_added(plan: &AggregatePlan) -> u64 {
    plan.contributions
        .iter()
        .filter(|c| matches!(c.delta, combine::Delta::Add(_)))
        .map(|c| (&c.source_pk, &c.seq, c.at))
        .collect::<BTreeSet<_>>()
        .len() as u64
}

impl<S: Store> Aggregator<S> {
    /// Writes the hours `which` of `plans`, concurrently, each a placeholder while open at
    /// at `now` and its recomputed rollup once closed (`rollups::closed`); each one's
    /// result by its index.
    pub(crate) async fn write_hours(
        &self,
        plans: &[AggregatePlan],
        which: Vec<usize>,
        aggs: &HashMap<Key, AggregateItem>,
        now: Timestamp,
        counters: &Counters,
        stop: tokio::time::Instant,
    ) -> Vec<(usize, Result<HourChange, AggregatorError>)> {
        // Indexes, not borrowed items, feed the stream: closures over `&T` would make the
        // handler future !Send (a rustc limitation with higher-ranked lifetimes).
        futures::stream::iter(which)
            .map(|i| {
                let p = &plans[i];
                let current = aggs.get(&p.key).cloned();
                let open = !crate::rollups::settled::closed(p.bucket, now);
                async move {
                    let r = counters
                        .until(
                            stop,
                            crate::failed::guarded(self.write_hour(p, current, open, counters)),
                        )
                        .await;
                    (i, r)
                }
            })
            .buffer_unordered(self.config.write_concurrency.max(1))
            .collect::<Vec<_>>()
            .await
    }

    /// Writes one hour ([`crate::rollups::pages`] when it is paged): its placeholder if `open`,
    /// otherwise its rollup from the table. A lost race on any page: read the pages again
    /// and decide again.
    pub(crate) async fn write_hour(
        &self,
        plan: &AggregatePlan,
        mut current: Option<AggregateItem>,
        open: bool,
        counters: &Counters,
    ) -> Result<HourChange, AggregatorError> {
        for attempt in 1..=self.config.max_attempts {
            let overflow = if current.as_ref().is_some_and(|c| c.sealed) {
                self.store
                    .aggregate_pages(&plan.device, plan.bucket)
                    .await?
            } else {
                Vec::new()
            };
            let read = Pages::of(current.take(), overflow);
            let puts = if open {
                placeholder_puts(plan, &read)
            } else {
                self.hour_from_table(plan, &read).await?
            };
            if self.put_pages(&puts, counters).await? {
                Counters::add(&counters.readings_aggregated, readings_added(plan));
                return Ok(hour_change(plan.bucket, &read, &puts));
            }
            current = self.reread_after_lost_race(plan, attempt, counters).await?;
        }
        Err(AggregatorError::Contended {
            key: plan.key.to_string(),
            attempts: self.config.max_attempts,
        })
    }

    /// Closes, for each device `plans` touch, the placeholders among its newest hourly items
    /// before the first hour the batch touches that have closed at `now`: a device that
    /// goes on sending closes its previous hour this way. (One that falls silent leaves its
    /// last hour a placeholder; readers take it from its readings, and its next batch
    /// closes it.) Not part of the batch's success: a close not done now is looked for again
    /// by the device's next batch, and readers are exact meanwhile. The hours changed, by
    /// device, for the days that follow them.
    pub(crate) async fn close_pending_hours(
        &self,
        plans: &[AggregatePlan],
        now: Timestamp,
        counters: &Counters,
        stop: tokio::time::Instant,
    ) -> Vec<(DeviceId, HourChange)> {
        let mut first: BTreeMap<&DeviceId, Bucket> = BTreeMap::new();
        for p in plans.iter().filter(|p| p.bucket.period() == Period::Hourly) {
            first
                .entry(&p.device)
                .and_modify(|b| {
                    if p.bucket.start() < b.start() {
                        *b = p.bucket;
                    }
                })
                .or_insert(p.bucket);
        }
        // Devices at once, as the batch's writes go; each device's work ends at the
        // invocation's deadline with the rest (what is not closed now is looked for again).
        let todo: Vec<(DeviceId, Bucket)> = first
            .into_iter()
            .filter(|(d, h)| !self.settled_hours.covers(d, *h))
            .map(|(d, h)| (d.clone(), h))
            .collect();
        let done: Vec<_> = futures::stream::iter(todo)
            .map(|(device, hour)| async move {
                let r = counters
                    .until(
                        stop,
                        crate::failed::guarded(
                            self.close_hours_before(&device, hour, now, counters),
                        ),
                    )
                    .await;
                (device, hour, r)
            })
            .buffer_unordered(self.config.write_concurrency.max(1))
            .collect()
            .await;
        let mut changed = Vec::new();
        for (device, hour, r) in done {
            match r {
                Ok((closed, settled)) => {
                    if settled {
                        self.settled_hours.insert(device.clone(), hour);
                    }
                    changed.extend(closed.into_iter().map(|c| (device.clone(), c)));
                }
                Err(e) => {
                    tracing::warn!(device = %device, error = %e, "closing hours failed; the next batch tries again")
                }
            }
        }
        changed
    }

    /// Closes the closed placeholders among `device`'s newest hours before `hour`; whether
    /// none is left (a placeholder still open must be looked at again). The caller bounds it
    /// by the deadline.
    async fn close_hours_before(
        &self,
        device: &DeviceId,
        hour: Bucket,
        now: Timestamp,
        counters: &Counters,
    ) -> Result<(Vec<HourChange>, bool), AggregatorError> {
        let recent = self
            .store
            .hours_before(device, hour, PENDING_LOOKBACK)
            .await?;
        let mut settled = true;
        let mut closed = Vec::new();
        for item in recent.into_iter().filter(|h| h.open) {
            let Some(b) = hourly_bucket(&item) else {
                continue;
            };
            if !crate::rollups::settled::closed(b, now) {
                settled = false;
                continue;
            }
            let plan = AggregatePlan::bare(device, b);
            closed.push(self.write_hour(&plan, Some(item), false, counters).await?);
        }
        Ok((closed, settled))
    }

    /// The puts that make a closed hour what its stored readings say, read strongly
    /// consistent after its pages (`read`), on their versions; none when they already hold
    /// it, so replays and records still ahead in the stream write nothing
    /// (docs/design.md §5). Sketched when the device has `percentiles: true`. Bounded by the hour: at most 3,600 s of one device's readings.
    async fn hour_from_table(
        &self,
        plan: &AggregatePlan,
        read: &Pages,
    ) -> Result<Vec<PagePut>, AggregatorError> {
        let last = plan.bucket.end_exclusive().pred().unwrap_or(Timestamp::MAX);
        // A flag that cannot be read leaves this recompute unsketched rather than failing the
        // hour: readers take percentiles of an unsketched hour from its readings, exact.
        let sketched = match self.store.keeps_sketches(&plan.device).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(device = %plan.device, error = %e, "reading the percentiles flag failed; the hour is written without sketches");
                false
            }
        };
        let s = self
            .store
            .summarize(&plan.device, plan.bucket.start(), last, sketched)
            .await?;
        let target: BTreeMap<_, Recomputed> = pages::recomputed(s);
        let mut puts = match read.pages.as_slice() {
            [] | [(0, _)] if !read.pages.first().is_some_and(|(_, p)| p.sealed) => {
                let current = read.pages.first().map(|(_, p)| p);
                let mut item = pages::one_item(&plan.key, current, &target);
                item.from_table = true;
                if pages::size(&item)? > self.config.page_bytes {
                    None
                } else if pages::differs(current, &item) {
                    Some(vec![PagePut {
                        number: 0,
                        expected: current.map(|c| c.version),
                        item,
                        added: BTreeSet::new(),
                    }])
                } else {
                    Some(Vec::new())
                }
            }
            _ => None,
        };
        if puts.is_none() {
            let mut all = pages::rebuild(
                &plan.device,
                plan.bucket,
                read,
                &target,
                &BTreeMap::new(),
                self.config.page_bytes,
            )?;
            for p in &mut all {
                p.item.from_table = true;
            }
            puts = Some(all);
        }
        Ok(puts.unwrap_or_default())
    }
}

/// The hour an hourly aggregate item is the rollup of.
pub(crate) fn hourly_bucket(item: &AggregateItem) -> Option<Bucket> {
    match tidemark_schema::EntityKey::parse(&item.pk, &item.sk) {
        Ok(tidemark_schema::EntityKey::Aggregate { bucket, .. })
            if bucket.period() == Period::Hourly =>
        {
            Some(bucket)
        }
        _ => None,
    }
}

/// What the puts of one decision did to the hour read as `read`.
fn hour_change(hour: Bucket, read: &Pages, puts: &[PagePut]) -> HourChange {
    let old: Vec<AggregateItem> = read.pages.iter().map(|(_, p)| p.clone()).collect();
    let mut new: BTreeMap<u16, AggregateItem> = read.pages.iter().cloned().collect();
    for put in puts {
        new.insert(put.number, put.item.clone());
    }
    let new: Vec<AggregateItem> = new.into_values().collect();
    let paged = |pages: &[AggregateItem]| pages.len() > 1 || pages.iter().any(|p| p.sealed);
    HourChange {
        hour,
        paged: paged(&old) || paged(&new),
        old_version: days::hour_version(&old),
        new_version: days::hour_version(&new),
        old: AggregateItem::merge_pages(old),
        new: AggregateItem::merge_pages(new),
    }
}
