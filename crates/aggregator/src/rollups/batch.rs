//! The rollups role over one batch: its reading changes planned per bucket
//! ([`super::combine`]), each touched hour written ([`super::hours`]), then each touched day
//! ([`super::days`]), the days before them closed once, and the late hours marked for the
//! export.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use futures::StreamExt;
use tidemark_schema::{AggregateItem, Bucket, DeviceId, Key, Period, Timestamp};

use crate::AggregatorError;
use crate::failed::{Failed, guarded};
use crate::function::Aggregator;
use crate::records::StreamChange;
use crate::report::Counters;
use crate::rollups::combine::{self, AggregatePlan};
use crate::rollups::days::{self, DayStep, HourChange};
use crate::rollups::pages::{self, PagePut, Pages};
use crate::rollups::settled::closed;
use crate::store::read_skipping_unreadable;
use crate::store::{Store, Written};

/// Why a day's hours were not all written: it waits (skipped with an unreadable hour, part
/// of an hour's permanent failure, or retried with a transient one, the strongest winning).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Behind {
    Skipped,
    Permanent,
    Retry,
}

/// The daily bucket holding an hourly one.
fn day_of(b: Bucket) -> Bucket {
    Period::Daily.bucket(b.start())
}

impl<S: Store> Aggregator<S> {
    /// Writes the aggregates of `changes`; the first records behind items that could not be
    /// written go to `failed`, with why ([`crate::setaside`]).
    pub(crate) async fn rollups(
        &self,
        changes: &[StreamChange],
        counters: &Counters,
        stop: tokio::time::Instant,
        failed: &mut Failed,
    ) {
        let plans = combine::plan(changes);
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
                if let Some(first) = changes.iter().map(|c| c.index).min() {
                    failed.fail(first, &AggregatorError::Store(e), None, []);
                }
                return;
            }
        };
        let unreadable: &HashSet<Key> = &unreadable;
        let plans = &plans;
        let aggs = &aggs;
        // A bucket within CLOSE_MARGIN of its close is treated as closed ([`closed`]): a batch
        // whose clock says it is open writes only a placeholder, and the batch that closes it
        // later, whose clock says so, then reads what this one saw in the table
        // (docs/design.md §5).
        let now = self.config.clock.now();
        // Hourly items first, then the days, which follow their hours.
        let (hourly, daily): (Vec<usize>, Vec<usize>) = (0..plans.len())
            .filter(|i| !unreadable.contains(&plans[*i].key))
            .partition(|i| plans[*i].bucket.period() == Period::Hourly);
        // Days whose hours this batch could not write, and why.
        let mut behind: HashMap<(DeviceId, Bucket), Behind> = HashMap::new();
        let mut hours: HashMap<(DeviceId, Bucket), Vec<HourChange>> = HashMap::new();
        // Boxed, as the fold below: one future holding every step of a batch is too deep a
        // type for the compiler's layout queries.
        // The hours done (written, or skipped as unreadable): a late one is marked for the
        // export after its item is written, never before, since the export finds an hour's
        // devices by their hourly items (`AggregateItem::activity_index`): a mark before the
        // item could be taken, and cleared, by an export that does not see the device yet.
        let mut done = Vec::new();
        for (i, r) in Box::pin(self.write_hours(plans, hourly, aggs, now, counters, stop)).await {
            let p = &plans[i];
            match r {
                Ok(h) => {
                    done.push(i);
                    hours
                        .entry((p.device.clone(), day_of(p.bucket)))
                        .or_default()
                        .push(h)
                }
                Err(e) => {
                    let why = match counters.skip_unreadable(e, "aggregate update") {
                        Ok(()) => {
                            done.push(i);
                            Behind::Skipped
                        }
                        Err(e) => {
                            tracing::error!(item = %p.key, error = %e, "aggregate not written");
                            failed.fail(p.first_index(), &e, Some(&p.device), [p.bucket]);
                            if e.is_permanent() {
                                Behind::Permanent
                            } else {
                                Behind::Retry
                            }
                        }
                    };
                    let b = behind
                        .entry((p.device.clone(), day_of(p.bucket)))
                        .or_insert(why);
                    *b = (*b).max(why);
                }
            }
        }
        self.mark_late_hours(plans, &done, now, failed).await;
        for (device, h) in Box::pin(self.close_pending_hours(plans, now, counters, stop)).await {
            hours.entry((device, day_of(h.hour))).or_default().push(h);
        }
        // A day whose hourly items this batch could not write waits for the retry; behind an
        // hour that failed for good it is part of that failure (its repair folds the day), and
        // behind an unreadable one it is skipped with it.
        let (daily, waiting): (Vec<usize>, Vec<usize>) = daily
            .into_iter()
            .partition(|i| !behind.contains_key(&(plans[*i].device.clone(), plans[*i].bucket)));
        failed.extend(
            waiting
                .iter()
                .filter(|i| {
                    behind.get(&(plans[**i].device.clone(), plans[**i].bucket))
                        == Some(&Behind::Retry)
                })
                .map(|i| plans[*i].first_index()),
        );
        let hours = &hours;
        let touched: BTreeSet<(DeviceId, Bucket)> = daily
            .iter()
            .map(|i| (plans[*i].device.clone(), plans[*i].bucket))
            .collect();
        let written: Vec<(usize, Result<(), AggregatorError>)> = futures::stream::iter(daily)
            .map(|i| {
                let p = &plans[i];
                let current = aggs.get(&p.key).cloned();
                let open = !closed(p.bucket, now);
                async move {
                    let changed = hours
                        .get(&(p.device.clone(), p.bucket))
                        .map_or(&[][..], Vec::as_slice);
                    let r = counters
                        .until(
                            stop,
                            guarded(self.write_day(p, current, changed, open, counters)),
                        )
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
                failed.fail(p.first_index(), &e, Some(&p.device), [p.bucket]);
            }
        }
        self.close_previous_days(&touched, now, counters, stop)
            .await;
    }

    /// Marks for the Parquet export the hours whose readings this batch changed after they
    /// closed (`hourly`: those whose items are written): the export, written after the close,
    /// no longer holds them. Normal traffic reaches its hours while they are open, so this
    /// writes only for late changes. A mark not written fails the records behind it, which
    /// come again (their hour's item then changes nothing, and the mark is written).
    async fn mark_late_hours(
        &self,
        plans: &[AggregatePlan],
        hourly: &[usize],
        now: Timestamp,
        failed: &mut Failed,
    ) {
        let late: Vec<&AggregatePlan> = hourly
            .iter()
            .map(|i| &plans[*i])
            .filter(|p| !p.contributions.is_empty() && closed(p.bucket, now))
            .collect();
        let hours: BTreeSet<Timestamp> = late.iter().map(|p| p.bucket.start()).collect();
        if hours.is_empty() {
            return;
        }
        let hours: Vec<Timestamp> = hours.into_iter().collect();
        if let Err(e) = self.store.mark_export_dirty(&hours, now).await {
            tracing::error!(error = %e, "marking late hours for the export failed");
            let e = AggregatorError::Store(e);
            for p in late {
                failed.fail(p.first_index(), &e, Some(&p.device), [p.bucket]);
            }
        }
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
                (!touched.contains(&key) && closed(prev, now) && !self.settled_days.contains(&key))
                    .then(|| AggregatePlan::bare(device, prev))
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
                        .until(stop, guarded(self.write_day(p, day, &[], false, counters)))
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

    /// Brings the day `plan` names up to the hours this batch changed ([`crate::rollups::days`]): a
    /// merge of their differences, or a fold of its hourly items, written on the day's
    /// version as read; a lost race reads the day again and decides again.
    pub(crate) async fn write_day(
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
                DayStep::Refold => self.refold_day(plan, current.take(), counters).await?,
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
    pub(crate) async fn refold_day(
        &self,
        plan: &AggregatePlan,
        current: Option<AggregateItem>,
        counters: &Counters,
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
        // A closed day folds closed hours: a placeholder left (its device fell silent, or
        // its close failed) is closed first, and read again.
        let now = self.config.clock.now();
        for (hour, key) in hours.iter().zip(&keys) {
            if let Some(page0) = items.get(key).filter(|p| p.open && closed(*hour, now)) {
                let plan = AggregatePlan::bare(device, *hour);
                // Boxed: a future holding every step of a fold inside a batch's is too deep.
                Box::pin(self.write_hour(&plan, Some(page0.clone()), false, counters)).await?;
                match self
                    .store
                    .get_aggregates(std::slice::from_ref(key))
                    .await?
                    .remove(key)
                {
                    Some(p) => items.insert(key.clone(), p),
                    None => items.remove(key),
                };
            }
        }
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

    /// After a lost race on `plan`'s bucket: counts it, backs off, reads page 0 again.
    pub(crate) async fn reread_after_lost_race(
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
    pub(crate) async fn put_pages(
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
}

#[cfg(test)]
mod tests {
    use tidemark_schema::{AggregateItem, Clock, ExportDirtyItem, Period, Timestamp};

    use crate::memory::MemoryStore;
    use crate::testing::{device, event, insert};
    use crate::{Aggregator, AggregatorConfig};

    fn t(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    #[tokio::test]
    async fn a_late_hours_export_mark_comes_after_its_hourly_item_never_before() {
        // GIVEN the clock at 12:00 (hour 10 has closed) and hour 10's item not writable
        let mut config = AggregatorConfig::new("t");
        config.clock = Clock::fixed(t("2026-04-20T12:00:00Z"));
        let agg = Aggregator::with_store(MemoryStore::default(), config);
        *agg.store().failing.lock().unwrap() = Some("AGG#hourly#2026-04-20T10".into());
        let late = event(vec![insert(1, "d", t("2026-04-20T10:59:00Z"), "t", 1.0)]);
        let marked = |agg: &Aggregator<MemoryStore>| {
            agg.store()
                .table
                .scan()
                .into_iter()
                .filter_map(|i| tidemark_store::from_item::<ExportDirtyItem>(i).ok())
                .count()
        };
        // WHEN a batch brings a late reading of it
        let (resp, _) = agg.process_written(&late).await;
        // THEN it is retried, and the hour is not marked: an export taking the mark now would
        // not find the device among the hour's (its hourly item is not there)
        assert_eq!(resp.batch_item_failures.len(), 1);
        assert_eq!(marked(&agg), 0);
        // WHEN the retry writes the item
        *agg.store().failing.lock().unwrap() = None;
        let (resp, _) = agg.process_written(&late).await;
        assert!(resp.batch_item_failures.is_empty());
        // THEN the item is there with its activity index entry, and the hour is marked
        let key = AggregateItem::key_for(
            &device("d"),
            Period::Hourly.bucket(t("2026-04-20T10:00:00Z")),
        );
        let stored = agg.store().table.get(&key).unwrap();
        assert_eq!(
            stored
                .get("gsi2pk")
                .and_then(|v| v.as_s().ok())
                .map(String::as_str),
            Some(
                tidemark_schema::keys::active_gsi2pk(
                    Period::Hourly.bucket(t("2026-04-20T10:00:00Z")),
                    &device("d")
                )
                .as_str()
            )
        );
        assert_eq!(marked(&agg), 1);
    }

    #[tokio::test]
    async fn a_container_looks_at_the_day_before_once_not_in_every_batch() {
        // GIVEN an aggregator whose clock is past the close of 2026-04-20, that day an open
        // placeholder (its device's last batch came before the close)
        let mut config = AggregatorConfig::new("t");
        config.clock = Clock::fixed(t("2026-04-21T01:00:00Z"));
        let agg = Aggregator::with_store(MemoryStore::default(), config);
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
                .process_written(&event(vec![insert(seq, "d", at, "t", 1.0)]))
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

    #[tokio::test]
    async fn a_day_folded_in_the_last_minute_before_its_close_holds_its_last_hour() {
        // GIVEN a device's evening: readings at 23:10 and 23:20 rolled up at 23:30, leaving
        // its hour 23:00 and its day placeholders
        let clock = Clock::fixed(t("2026-04-20T23:30:00Z"));
        let mut config = AggregatorConfig::new("t");
        config.clock = clock.clone();
        let agg = Aggregator::with_store(MemoryStore::default(), config);
        let evening = event(vec![
            insert(1, "d", t("2026-04-20T23:10:00Z"), "t", 1.0),
            insert(2, "d", t("2026-04-20T23:20:00Z"), "t", 2.0),
        ]);
        let (resp, _) = agg.process_written(&evening).await;
        assert!(resp.batch_item_failures.is_empty());
        // WHEN, in the last minute before the day closes (00:15), a late reading of an
        // earlier hour of that day arrives, and then the device's next morning batch
        clock.set(t("2026-04-21T00:14:30Z"));
        let late = event(vec![insert(3, "d", t("2026-04-20T22:30:00Z"), "t", 4.0)]);
        let (resp, _) = agg.process_written(&late).await;
        assert!(resp.batch_item_failures.is_empty());
        clock.set(t("2026-04-21T00:40:00Z"));
        let morning = event(vec![insert(4, "d", t("2026-04-21T00:35:00Z"), "t", 8.0)]);
        let (resp, _) = agg.process_written(&morning).await;
        assert!(resp.batch_item_failures.is_empty());
        // THEN the closed day holds all three of its readings, 23:00's among them
        let day = AggregateItem::key_for(
            &device("d"),
            Period::Daily.bucket(t("2026-04-20T00:00:00Z")),
        );
        let day = agg.store().aggregate(&day).unwrap();
        assert!(!day.open, "{day:?}");
        let s = &day.metrics[&crate::testing::metric("t")];
        assert_eq!(
            (s.count, s.sum, s.min, s.max),
            (3, 7.0, 1.0, 4.0),
            "{day:?}"
        );
    }
}
