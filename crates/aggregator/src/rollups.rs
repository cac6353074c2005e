//! The rollups role: every reading change becomes exact hourly and daily aggregates, each
//! touched item written once per batch under its version (re-read, backed off and retried on
//! a lost race). A bucket whose rollup outgrows one item (thousands of metrics under one
//! device ID) is split into pages ([`crate::pages`]); an ordinary device still writes one
//! item per bucket per batch.

use std::collections::{BTreeSet, HashMap, HashSet};

use futures::StreamExt;
use tidemark_schema::{AggregateItem, Bucket, DeviceId, Key, Period, Timestamp};

use crate::AggregatorError;
use crate::combine::{self, AggregatePlan, BucketSummary};
use crate::handler::{Aggregator, read_skipping_unreadable};
use crate::pages::{self, Decision, Pages};
use crate::records::StreamChange;
use crate::report::Counters;
use crate::store::{Store, Written};

/// The daily bucket holding an hourly one.
fn day_of(b: Bucket) -> Bucket {
    Period::Daily.bucket(b.start())
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
        let plans = combine::plan(changes, self.config.clock.now());
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
        // Hourly items first, then daily ones: a day's extremes are recomputed from its hourly
        // items ([`Self::summarize_day`]), which must already hold this batch.
        let (hourly, daily): (Vec<usize>, Vec<usize>) = (0..plans.len())
            .filter(|i| !unreadable.contains(&plans[*i].key))
            .partition(|i| plans[*i].bucket.period() == Period::Hourly);
        let mut behind: HashSet<(DeviceId, Bucket)> = HashSet::new();
        for (i, r) in self.write_plans(plans, hourly, aggs, counters, stop).await {
            let p = &plans[i];
            if let Err(e) = r.or_else(|e| counters.skip_unreadable(e, "aggregate update")) {
                tracing::error!(item = %p.key, error = %e, "aggregate not written");
                failed.push(p.first_index());
                behind.insert((p.device.clone(), day_of(p.bucket)));
            }
        }
        // A day whose hourly items this batch could not write waits for the retry.
        let (daily, waiting): (Vec<usize>, Vec<usize>) = daily
            .into_iter()
            .partition(|i| !behind.contains(&(plans[*i].device.clone(), plans[*i].bucket)));
        failed.extend(waiting.iter().map(|i| plans[*i].first_index()));
        for (i, r) in self.write_plans(plans, daily, aggs, counters, stop).await {
            let p = &plans[i];
            if let Err(e) = r.or_else(|e| counters.skip_unreadable(e, "aggregate update")) {
                tracing::error!(item = %p.key, error = %e, "aggregate not written");
                failed.push(p.first_index());
            }
        }
    }

    /// Writes the plans `which`, concurrently; each one's result by its index.
    async fn write_plans(
        &self,
        plans: &[AggregatePlan],
        which: Vec<usize>,
        aggs: &HashMap<Key, AggregateItem>,
        counters: &Counters,
        stop: tokio::time::Instant,
    ) -> Vec<(usize, Result<(), AggregatorError>)> {
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

    /// A day's extremes from its hourly rollups (24 items, and their overflow pages) and its
    /// first and last reading times from one stored reading each way: a correction of a
    /// day's extreme reads those, never the day's readings (170 million for a 2 kHz device).
    /// Exact because the hourly items of the correction were written first; an hourly item
    /// still behind on other records only lacks readings whose own records will still widen
    /// the day's extremes when they come.
    async fn summarize_day(
        &self,
        device: &DeviceId,
        day: Bucket,
    ) -> Result<BucketSummary, AggregatorError> {
        let hours: Vec<Bucket> = (0..24)
            .filter_map(|h| day.start().plus_millis(h * 3_600_000))
            .map(|t| Period::Hourly.bucket(t))
            .collect();
        let keys: Vec<Key> = hours
            .iter()
            .map(|h| AggregateItem::key_for(device, *h))
            .collect();
        let items = self.store.get_aggregates(&keys).await?;
        let mut summary = BucketSummary::default();
        for (hour, key) in hours.into_iter().zip(&keys) {
            let Some(item) = items.get(key) else {
                continue;
            };
            let mut pages = vec![item.clone()];
            if item.sealed {
                pages.extend(self.store.aggregate_pages(device, hour).await?);
            }
            if let Some(merged) = AggregateItem::merge_pages(pages) {
                summary.add_extremes(&merged);
            }
        }
        // The day's first and last readings: one reading each way, as stored (like the raw
        // extremes, they may be ahead of the stream; their own records widen nothing later).
        let last = day.end_exclusive().pred().unwrap_or(Timestamp::MAX);
        for newest_first in [false, true] {
            let edge = self
                .store
                .readings_page(device, day.start(), last, newest_first, 1)
                .await?;
            if let Some((at, _)) = edge.first() {
                summary.first = Some(summary.first.map_or(*at, |f| f.min(*at)));
                summary.last = Some(summary.last.map_or(*at, |l| l.max(*at)));
            }
        }
        Ok(summary)
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
    ) -> Result<(), AggregatorError> {
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
            // The bucket's raw readings are summarized only when a removed value was an
            // extreme, and again after a lost race (the winner may have seen newer ones).
            let mut decision = pages::decide(plan, &read, budget, None)?;
            if decision == Decision::NeedsSummary {
                // A day of one item from its hours; a paged day, whose pages keep per-metric
                // times, from its readings.
                let s: BucketSummary = if plan.bucket.period() == Period::Daily
                    && matches!(read.pages.as_slice(), [] | [(0, _)])
                {
                    self.summarize_day(&plan.device, plan.bucket).await?
                } else {
                    let last = plan.bucket.end_exclusive().pred().unwrap_or(Timestamp::MAX);
                    self.store
                        .summarize(&plan.device, plan.bucket.start(), last)
                        .await?
                };
                decision = pages::decide(plan, &read, budget, Some(&s))?;
            }
            let Decision::Puts(puts) = decision else {
                unreachable!("a decision with the bucket's summary needs nothing more")
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
                if plan.bucket.period() == Period::Hourly {
                    Counters::add(&counters.readings_aggregated, added.len() as u64);
                }
                return Ok(());
            }
            Counters::add(&counters.conflicts_retried, 1);
            tokio::time::sleep(self.config.retry.delay(attempt)).await;
            current = self
                .store
                .get_aggregates(std::slice::from_ref(&plan.key))
                .await?
                .remove(&plan.key);
        }
        Err(AggregatorError::Contended {
            key: plan.key.to_string(),
            attempts: self.config.max_attempts,
        })
    }
}
