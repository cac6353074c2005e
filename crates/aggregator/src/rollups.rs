//! The rollups role: every reading change becomes exact hourly and daily aggregates, each
//! touched item written once per batch under its version (re-read, backed off and retried on
//! a lost race).

use std::collections::{HashMap, HashSet};

use futures::StreamExt;
use tidemark_schema::{AggregateItem, Key, Period, Timestamp};

use crate::AggregatorError;
use crate::combine::{self, AggregatePlan, BucketSummary};
use crate::handler::{Aggregator, read_skipping_unreadable};
use crate::records::StreamChange;
use crate::report::Counters;
use crate::store::{Store, Written};

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
                failed.extend(changes.iter().map(|c| c.index).min());
                return;
            }
        };
        let unreadable: &HashSet<Key> = &unreadable;
        let plans = &plans;
        // Indexes, not borrowed items, feed the stream: closures over `&T` would make the
        // handler future !Send (a rustc limitation with higher-ranked lifetimes).
        let results = futures::stream::iter(0..plans.len())
            .filter(|i| std::future::ready(!unreadable.contains(&plans[*i].key)))
            .map(|i| {
                let p = &plans[i];
                let current = aggs.get(&p.key).cloned();
                async move {
                    let r = counters
                        .until(stop, self.write_aggregate(p, current, counters))
                        .await;
                    (p.first_index(), p.key.to_string(), r)
                }
            })
            .buffer_unordered(self.config.write_concurrency.max(1))
            .collect::<Vec<_>>()
            .await;
        for (first, key, r) in results {
            if let Err(e) = r.or_else(|e| counters.skip_unreadable(e, "aggregate update")) {
                tracing::error!(item = %key, error = %e, "aggregate not written");
                failed.push(first);
            }
        }
    }

    async fn write_aggregate(
        &self,
        plan: &AggregatePlan,
        mut current: Option<AggregateItem>,
        counters: &Counters,
    ) -> Result<(), AggregatorError> {
        let mut summary: Option<BucketSummary> = None;
        for attempt in 1..=self.config.max_attempts {
            let applied = combine::apply(current.as_ref(), plan);
            if applied.applied == 0 {
                return Ok(());
            }
            let mut item = applied.item;
            if !applied.recompute.is_empty() {
                if summary.is_none() {
                    let last = plan.bucket.end_exclusive().pred().unwrap_or(Timestamp::MAX);
                    summary = Some(
                        self.store
                            .summarize(&plan.device, plan.bucket.start(), last)
                            .await?,
                    );
                }
                if let Some(s) = &summary {
                    combine::fix_extremes(&mut item, &applied.recompute, s);
                }
            }
            match self
                .store
                .put_aggregate(&item, current.as_ref().map(|c| c.version))
                .await?
            {
                Written::Ok { units } => {
                    counters.written(units);
                    if plan.bucket.period() == Period::Hourly {
                        Counters::add(&counters.readings_aggregated, applied.readings_added as u64);
                    }
                    return Ok(());
                }
                Written::Conflict => {
                    Counters::add(&counters.conflicts_retried, 1);
                    tokio::time::sleep(self.config.retry.delay(attempt)).await;
                    // The winner may have seen newer raw readings: ask the table again.
                    summary = None;
                    current = self
                        .store
                        .get_aggregates(std::slice::from_ref(&plan.key))
                        .await?
                        .remove(&plan.key);
                }
            }
        }
        Err(AggregatorError::Contended {
            key: plan.key.to_string(),
            attempts: self.config.max_attempts,
        })
    }
}
