//! The rollups role: every reading change becomes exact hourly aggregates, each touched
//! item written once per batch under its version (re-read, backed off and retried on a lost
//! race), and each touched day then follows its hours once it has closed, a placeholder
//! written once before that ([`crate::days`]). A bucket whose
//! rollup outgrows one item (thousands of metrics under one device ID) is split into pages
//! ([`crate::pages`]); an ordinary device still writes one item per hour per batch.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use futures::StreamExt;
use tidemark_schema::{AggregateItem, Bucket, DeviceId, Key, Period, Timestamp, day_is_open};

use crate::AggregatorError;
use crate::combine::{self, AggregatePlan};
use crate::days::{self, DayStep, HourChange};
use crate::handler::{Aggregator, read_skipping_unreadable};
use crate::pages::{self, Decision, PagePut, Pages, Recomputed};
use crate::records::StreamChange;
use crate::report::Counters;
use crate::store::{Store, Written};

/// The daily bucket holding an hourly one.
fn day_of(b: Bucket) -> Bucket {
    Period::Daily.bucket(b.start())
}

/// How much earlier than a day's close the batch writing its hours already folds it, so that
/// two invocations whose clocks differ by less than this never both leave it to the other.
const CLOSE_MARGIN_MS: i64 = 60_000;

/// The days before touched days that this container has seen closed (folded, or never a
/// placeholder), so its later batches do not read them again: a device's day is looked at
/// once per container, not once per batch. Forgotten whole past [`SETTLED_DAYS_MAX`]
/// entries; forgetting only costs a read.
#[derive(Debug, Default)]
pub struct SettledDays(std::sync::Mutex<HashSet<(DeviceId, Bucket)>>);

const SETTLED_DAYS_MAX: usize = 100_000;

impl SettledDays {
    fn contains(&self, day: &(DeviceId, Bucket)) -> bool {
        self.0.lock().is_ok_and(|s| s.contains(day))
    }

    fn insert(&self, day: (DeviceId, Bucket)) {
        if let Ok(mut s) = self.0.lock() {
            if s.len() >= SETTLED_DAYS_MAX {
                s.clear();
            }
            s.insert(day);
        }
    }
}

/// Whether the daily `bucket` is still open at `at` ([`day_is_open`]).
fn is_open(bucket: Bucket, at: Timestamp) -> bool {
    match bucket {
        Bucket::Daily(day) => day_is_open(day, at),
        Bucket::Hourly(_) => false,
    }
}

impl<S: Store> Aggregator<S> {
    /// Writes the aggregates of `changes`; the indexes of the first records behind items
    /// that could not be written go to `failed`.
    pub(crate) async fn rollups(
        &self,
        changes: &[StreamChange],
        counters: &Counters,
        stop: tokio::time::Instant,
        failed: &mut Vec<usize>,
    ) {
        let mut plans = combine::plan(changes, self.config.clock.now());
        for p in &mut plans {
            p.max_marks = self.config.max_marks;
            p.max_single_marks = self.config.max_single_marks;
        }
        let keys: Vec<Key> = plans.iter().map(|p| p.key.clone()).collect();
        let store = &self.store;
        let (aggs, unreadable) =
            read_skipping_unreadable(&keys, |ks| async move { store.get_aggregates(&ks).await })
                .await;
        Counters::add(&counters.unreadable_items, unreadable.len() as u64);
        let aggs: HashMap<Key, AggregateItem> = match aggs {
            Ok(a) => a,
            Err(e) => {
                tracing::error!(error = %e, "reading the batch's aggregates failed");
                failed.extend(changes.iter().map(|c| c.index).min());
                return;
            }
        };
        let unreadable: &HashSet<Key> = &unreadable;
        let plans = &plans;
        let aggs = &aggs;
        // Hourly items first, then the days, which follow their hours.
        let (hourly, daily): (Vec<usize>, Vec<usize>) = (0..plans.len())
            .filter(|i| !unreadable.contains(&plans[*i].key))
            .partition(|i| plans[*i].bucket.period() == Period::Hourly);
        let mut behind: HashSet<(DeviceId, Bucket)> = HashSet::new();
        let mut hours: HashMap<(DeviceId, Bucket), Vec<HourChange>> = HashMap::new();
        for (i, r) in self.write_plans(plans, hourly, aggs, counters, stop).await {
            let p = &plans[i];
            match r {
                Ok(h) => hours
                    .entry((p.device.clone(), day_of(p.bucket)))
                    .or_default()
                    .push(h),
                Err(e) => {
                    if let Err(e) = counters.skip_unreadable(e, "aggregate update") {
                        tracing::error!(item = %p.key, error = %e, "aggregate not written");
                        failed.push(p.first_index());
                    }
                    behind.insert((p.device.clone(), day_of(p.bucket)));
                }
            }
        }
        // A day whose hourly items this batch could not write waits for the retry.
        let (daily, waiting): (Vec<usize>, Vec<usize>) = daily
            .into_iter()
            .partition(|i| !behind.contains(&(plans[*i].device.clone(), plans[*i].bucket)));
        failed.extend(waiting.iter().map(|i| plans[*i].first_index()));
        let hours = &hours;
        // Read after the hours were written: a day this batch sees open is closed later by a
        // batch whose clock says so, whose fold then reads these hours. CLOSE_MARGIN covers
        // the clocks of two invocations disagreeing (docs/design.md §5).
        let now = self.config.clock.now();
        let soon = now.plus_millis(CLOSE_MARGIN_MS).unwrap_or(now);
        let touched: BTreeSet<(DeviceId, Bucket)> = daily
            .iter()
            .map(|i| (plans[*i].device.clone(), plans[*i].bucket))
            .collect();
        let written: Vec<(usize, Result<(), AggregatorError>)> = futures::stream::iter(daily)
            .map(|i| {
                let p = &plans[i];
                let current = aggs.get(&p.key).cloned();
                let open = is_open(p.bucket, soon);
                async move {
                    let changed = hours
                        .get(&(p.device.clone(), p.bucket))
                        .map_or(&[][..], Vec::as_slice);
                    let r = counters
                        .until(stop, self.write_day(p, current, changed, open, counters))
                        .await;
                    (i, r)
                }
            })
            .buffer_unordered(self.config.write_concurrency.max(1))
            .collect()
            .await;
        for (i, r) in written {
            let p = &plans[i];
            if let Err(e) = r.or_else(|e| counters.skip_unreadable(e, "aggregate update")) {
                tracing::error!(item = %p.key, error = %e, "aggregate not written");
                failed.push(p.first_index());
            }
        }
        self.close_previous_days(&touched, now, counters, stop)
            .await;
    }

    /// Folds the day before each day this batch touched, if it has closed and is still a
    /// placeholder: the close of a day whose device goes on sending. (A device that falls
    /// silent leaves its last day open; readers sum its hours, and the first batch that
    /// touches it once closed folds it.) Not part of the batch's success: a fold not done
    /// now is done by the device's next batch, and readers are exact meanwhile.
    async fn close_previous_days(
        &self,
        touched: &BTreeSet<(DeviceId, Bucket)>,
        now: Timestamp,
        counters: &Counters,
        stop: tokio::time::Instant,
    ) {
        let previous: Vec<AggregatePlan> = touched
            .iter()
            .filter_map(|(device, bucket)| {
                let Bucket::Daily(day) = bucket else {
                    return None;
                };
                let prev = Bucket::Daily(day.prev()?);
                let key = (device.clone(), prev);
                (!touched.contains(&key)
                    && !is_open(prev, now)
                    && !self.settled_days.contains(&key))
                .then(|| AggregatePlan {
                    key: AggregateItem::key_for(device, prev),
                    device: device.clone(),
                    bucket: prev,
                    contributions: Vec::new(),
                    now: now.epoch_seconds(),
                    max_marks: self.config.max_marks,
                    max_single_marks: self.config.max_single_marks,
                })
            })
            .collect();
        if previous.is_empty() {
            return;
        }
        let keys: Vec<Key> = previous.iter().map(|p| p.key.clone()).collect();
        let current = match self.store.get_aggregates(&keys).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "reading the days to close failed; the next batch tries again");
                return;
            }
        };
        // Indexes, not borrowed plans, feed the stream (see `write_plans`).
        let (open, settled): (Vec<usize>, Vec<usize>) = (0..previous.len())
            .partition(|i| current.get(&previous[*i].key).is_some_and(|c| c.open));
        for i in settled {
            self.settled_days
                .insert((previous[i].device.clone(), previous[i].bucket));
        }
        let previous = &previous;
        let results: Vec<(usize, Result<(), AggregatorError>)> = futures::stream::iter(open)
            .map(|i| {
                let p = &previous[i];
                let day = current.get(&p.key).cloned();
                async move {
                    let r = counters
                        .until(stop, self.write_day(p, day, &[], false, counters))
                        .await;
                    (i, r)
                }
            })
            .buffer_unordered(self.config.write_concurrency.max(1))
            .collect()
            .await;
        for (i, r) in results {
            match r {
                Ok(()) => self
                    .settled_days
                    .insert((previous[i].device.clone(), previous[i].bucket)),
                Err(e) => {
                    tracing::warn!(error = %e, "closing a day failed; the next batch tries again")
                }
            }
        }
    }

    /// Brings the day `plan` names up to the hours this batch changed ([`crate::days`]): a
    /// merge of their differences, or a fold of its hourly items, written on the day's
    /// version as read; a lost race reads the day again and decides again.
    async fn write_day(
        &self,
        plan: &AggregatePlan,
        mut current: Option<AggregateItem>,
        hours: &[HourChange],
        open: bool,
        counters: &Counters,
    ) -> Result<(), AggregatorError> {
        for attempt in 1..=self.config.max_attempts {
            let puts = match days::step(&plan.key, current.as_ref(), hours, open) {
                DayStep::Nothing => return Ok(()),
                DayStep::Write(item) => vec![PagePut {
                    number: 0,
                    expected: current.as_ref().map(|c| c.version),
                    item,
                    added: BTreeSet::new(),
                }],
                DayStep::Refold => self.refold_day(plan, current.take()).await?,
            };
            if self.put_pages(&puts, counters).await? {
                return Ok(());
            }
            current = self.reread_after_lost_race(plan, attempt, counters).await?;
        }
        Err(AggregatorError::Contended {
            key: plan.key.to_string(),
            attempts: self.config.max_attempts,
        })
    }

    /// The puts that make the day the fold of its 24 hourly items (and their pages), read
    /// after the day itself; none when it already is.
    async fn refold_day(
        &self,
        plan: &AggregatePlan,
        current: Option<AggregateItem>,
    ) -> Result<Vec<PagePut>, AggregatorError> {
        let (device, day) = (&plan.device, plan.bucket);
        let overflow = if current.as_ref().is_some_and(|c| c.sealed) {
            self.store.aggregate_pages(device, day).await?
        } else {
            Vec::new()
        };
        let hours: Vec<Bucket> = (0..24)
            .filter_map(|h| day.start().plus_millis(h * 3_600_000))
            .map(|t| Period::Hourly.bucket(t))
            .collect();
        let keys: Vec<Key> = hours
            .iter()
            .map(|h| AggregateItem::key_for(device, *h))
            .collect();
        let mut items = self.store.get_aggregates(&keys).await?;
        let mut read = Vec::new();
        for (hour, key) in hours.into_iter().zip(&keys) {
            let mut pages: Vec<AggregateItem> = items.remove(key).into_iter().collect();
            if pages.first().is_some_and(|p| p.sealed) {
                pages.extend(self.store.aggregate_pages(device, hour).await?);
            }
            read.push((hour, pages));
        }
        let (target, folded) = days::fold(&read);
        if overflow.is_empty() && !current.as_ref().is_some_and(|c| c.sealed) {
            let mut item = pages::one_item(&plan.key, current.as_ref(), &target);
            item.folded = folded.clone();
            if pages::size(&item)? <= self.config.page_bytes {
                if !pages::differs(current.as_ref(), &item) {
                    return Ok(Vec::new());
                }
                return Ok(vec![PagePut {
                    number: 0,
                    expected: current.as_ref().map(|c| c.version),
                    item,
                    added: BTreeSet::new(),
                }]);
            }
        }
        let pages = Pages::of(current, overflow);
        let mut puts = pages::rebuild(
            device,
            day,
            &pages,
            &target,
            &BTreeMap::new(),
            self.config.page_bytes,
        )?;
        for p in puts.iter_mut().filter(|p| p.number == 0) {
            p.item.folded = folded.clone();
        }
        Ok(puts)
    }

    /// The puts that make an hour past its marks' cap what its stored readings say, read
    /// strongly consistent after its pages (`read`), on their versions: content-idempotent,
    /// so replays and records still ahead in the stream only write the same content again
    /// (docs/design.md §5). Bounded by the hour: at most 3,600 s of one device's readings.
    async fn hour_from_table(
        &self,
        plan: &AggregatePlan,
        read: &Pages,
    ) -> Result<Vec<PagePut>, AggregatorError> {
        let last = plan.bucket.end_exclusive().pred().unwrap_or(Timestamp::MAX);
        let s = self
            .store
            .summarize(&plan.device, plan.bucket.start(), last)
            .await?;
        let target: BTreeMap<_, Recomputed> = s
            .stats
            .iter()
            .filter_map(|(m, st)| {
                let (first, last) = s.times.get(m)?;
                Some((
                    m.clone(),
                    Recomputed {
                        stats: *st,
                        first: *first,
                        last: *last,
                    },
                ))
            })
            .collect();
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

    /// After a lost race on `plan`'s bucket: counts it, backs off, reads page 0 again.
    async fn reread_after_lost_race(
        &self,
        plan: &AggregatePlan,
        attempt: u32,
        counters: &Counters,
    ) -> Result<Option<AggregateItem>, AggregatorError> {
        Counters::add(&counters.conflicts_retried, 1);
        tokio::time::sleep(self.config.retry.delay(attempt)).await;
        Ok(self
            .store
            .get_aggregates(std::slice::from_ref(&plan.key))
            .await?
            .remove(&plan.key))
    }

    /// Runs `puts` in order; false when one lost its race (the rest are not tried).
    async fn put_pages(
        &self,
        puts: &[PagePut],
        counters: &Counters,
    ) -> Result<bool, AggregatorError> {
        for put in puts {
            match self.store.put_aggregate(&put.item, put.expected).await? {
                Written::Ok { units } => counters.written(units),
                Written::Conflict => return Ok(false),
            }
        }
        Ok(true)
    }

    /// Writes the plans `which`, concurrently; each one's result by its index.
    async fn write_plans(
        &self,
        plans: &[AggregatePlan],
        which: Vec<usize>,
        aggs: &HashMap<Key, AggregateItem>,
        counters: &Counters,
        stop: tokio::time::Instant,
    ) -> Vec<(usize, Result<HourChange, AggregatorError>)> {
        // Indexes, not borrowed items, feed the stream: closures over `&T` would make the
        // handler future !Send (a rustc limitation with higher-ranked lifetimes).
        futures::stream::iter(which)
            .map(|i| {
                let p = &plans[i];
                let current = aggs.get(&p.key).cloned();
                async move {
                    let r = counters
                        .until(stop, self.write_aggregate(p, current, counters))
                        .await;
                    (i, r)
                }
            })
            .buffer_unordered(self.config.write_concurrency.max(1))
            .collect::<Vec<_>>()
            .await
    }

    /// Writes one bucket's share of the batch into its pages ([`crate::pages`]): one put
    /// for an ordinary bucket, one per changed page (plus a seal and new pages when new
    /// metrics overflow the open page) for a paged one. A lost race on any page: read the
    /// pages again and decide again (pages already written skip what they applied).
    async fn write_aggregate(
        &self,
        plan: &AggregatePlan,
        mut current: Option<AggregateItem>,
        counters: &Counters,
    ) -> Result<HourChange, AggregatorError> {
        let mut added = BTreeSet::new();
        for attempt in 1..=self.config.max_attempts {
            let overflow = if current.as_ref().is_some_and(|c| c.sealed) {
                self.store
                    .aggregate_pages(&plan.device, plan.bucket)
                    .await?
            } else {
                Vec::new()
            };
            let read = Pages::of(current.take(), overflow);
            let budget = self.config.page_bytes;
            let mut from_table = read.pages.first().is_some_and(|(_, p)| p.from_table);
            let puts = if from_table {
                self.hour_from_table(plan, &read).await?
            } else {
                // The bucket's raw readings are summarized only when a removed value was an
                // extreme, and again after a lost race (the winner may have seen newer ones).
                let mut decision = pages::decide(plan, &read, budget, None)?;
                if decision == Decision::NeedsSummary {
                    let last = plan.bucket.end_exclusive().pred().unwrap_or(Timestamp::MAX);
                    let s = self
                        .store
                        .summarize(&plan.device, plan.bucket.start(), last)
                        .await?;
                    decision = pages::decide(plan, &read, budget, Some(&s))?;
                }
                let Decision::Puts(puts) = decision else {
                    unreachable!("a decision with the bucket's summary needs nothing more")
                };
                from_table = puts.iter().any(|p| p.item.from_table);
                if from_table {
                    self.hour_from_table(plan, &read).await?
                } else {
                    puts
                }
            };
            let mut lost = false;
            for put in &puts {
                match self.store.put_aggregate(&put.item, put.expected).await? {
                    Written::Ok { units } => {
                        counters.written(units);
                        added.extend(put.added.iter().cloned());
                    }
                    Written::Conflict => {
                        lost = true;
                        break;
                    }
                }
            }
            if !lost {
                if from_table {
                    // Every reading the batch adds, whether or not the table already showed
                    // it (a replay of such an hour counts again here; its content does not).
                    added.extend(
                        plan.contributions
                            .iter()
                            .filter(|c| matches!(c.delta, combine::Delta::Add(_)))
                            .map(|c| (c.source_pk.clone(), c.seq.clone(), c.at)),
                    );
                }
                Counters::add(&counters.readings_aggregated, added.len() as u64);
                return Ok(hour_change(plan.bucket, &read, &puts));
            }
            current = self.reread_after_lost_race(plan, attempt, counters).await?;
        }
        Err(AggregatorError::Contended {
            key: plan.key.to_string(),
            attempts: self.config.max_attempts,
        })
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

#[cfg(test)]
mod tests {
    use tidemark_schema::{AggregateItem, Clock, Period, Timestamp};

    use crate::fake::FakeStore;
    use crate::testing::{device, event, insert};
    use crate::{Aggregator, AggregatorConfig};

    fn t(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    #[tokio::test]
    async fn a_container_looks_at_the_day_before_once_not_in_every_batch() {
        // GIVEN an aggregator whose clock is past the close of 2026-04-20, that day an open
        // placeholder (its device's last batch came before the close)
        let mut config = AggregatorConfig::new("t");
        config.clock = Clock::fixed(t("2026-04-21T01:00:00Z"));
        let agg = Aggregator::with_store(FakeStore::default(), config);
        let yesterday = AggregateItem::key_for(
            &device("d"),
            Period::Daily.bucket(t("2026-04-20T00:00:00Z")),
        );
        let mut placeholder = AggregateItem::empty(&yesterday);
        placeholder.open = true;
        placeholder.version = 1;
        agg.store().table.put_entity(&placeholder).unwrap();
        // WHEN three batches of the device's new day arrive
        for (seq, minute) in [(1, "00:40"), (2, "00:45"), (3, "00:50")] {
            let at = t(&format!("2026-04-21T{minute}:00Z"));
            let (resp, _) = agg
                .process(&event(vec![insert(seq, "d", at, "t", 1.0)]))
                .await;
            assert!(resp.batch_item_failures.is_empty());
        }
        // THEN the first folded yesterday (no hours: nothing in it) and the others did not
        // read it again
        let reads = agg.store().aggregate_reads.lock().unwrap().clone();
        let yesterday_reads = reads.iter().filter(|k| **k == yesterday).count();
        let folded = agg.store().aggregate(&yesterday).unwrap();
        assert!(!folded.open, "{folded:?}");
        assert_eq!(yesterday_reads, 1, "reads of the day before");
    }
}
