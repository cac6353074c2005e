//! The rollups role: every reading change becomes exact hourly and daily aggregates, each
//! touched item written once per batch under its version (re-read, backed off and retried on
//! a lost race). A bucket whose rollup outgrows one item (thousands of metrics under one
//! device ID) is split into pages ([`crate::pages`]); an ordinary device still writes one
//! item per bucket per batch.

use std::collections::{BTreeSet, HashMap, HashSet};

use futures::StreamExt;
use tidemark_schema::{AggregateItem, Key, Period, Timestamp};

use crate::AggregatorError;
use crate::combine::{self, AggregatePlan, BucketSummary};
use crate::handler::{Aggregator, read_skipping_unreadable};
use crate::pages::{self, Decision, Pages};
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
                let last = plan.bucket.end_exclusive().pred().unwrap_or(Timestamp::MAX);
                let s: BucketSummary = self
                    .store
                    .summarize(&plan.device, plan.bucket.start(), last)
                    .await?;
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
