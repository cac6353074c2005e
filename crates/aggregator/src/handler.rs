//! One invocation: classify the records, combine them per item, read every item once, write
//! each changed item once (conditionally, re-reading and retrying on conflict), and report
//! the first record behind any item that could not be written as the batch item failure.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

use aws_lambda_events::event::dynamodb::Event;
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use futures::StreamExt;
use tidemark_schema::{
    AggregateItem, AlertId, AlertItem, AlertState, DeviceId, DeviceItem, DeviceStatus,
    LatestReading, MetricName, Timestamp, keys,
};
use tidemark_store::StoreError;
use tidemark_store::emf::Metrics;

use crate::alerts::{self, AlertPlan, AlertWrite};
use crate::combine::{self, AggregatePlan, BucketReadings};
use crate::records::{Change, Ignored, StreamChange, classify, cmp_seq};
use crate::store::{DeviceUpdate, DynamoStore, Store, Written};
use crate::{AggregatorConfig, AggregatorError};

/// What one invocation did (logged, emitted as EMF, returned to tests and benchmarks).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    pub records_seen: u64,
    pub records_ignored: u64,
    /// New readings added to aggregates: INSERTs applied to their hourly item (replays and
    /// records already applied are not counted).
    pub readings_aggregated: u64,
    pub items_written: u64,
    pub conflicts_retried: u64,
    pub alerts_opened: u64,
    pub alerts_resolved: u64,
    /// Devices whose item was left as it was: only `lastSeenAt`/`latest` would have moved,
    /// by less than [`AggregatorConfig::device_refresh`].
    pub device_writes_deferred: u64,
    /// Items in the table that do not parse (written by another tool or an older version):
    /// skipped and logged with their key; the rest of the batch goes on.
    pub unreadable_items: u64,
    /// Write request units DynamoDB reported for this invocation's writes.
    pub write_units: f64,
    pub failed_items: u64,
    /// Alert notifications (the alerts role).
    pub notify: crate::NotifyReport,
}

impl Report {
    pub fn metrics(&self) -> Metrics {
        Metrics::new("aggregator")
            .count("RecordsSeen", self.records_seen)
            .count("RecordsIgnored", self.records_ignored)
            .count("ReadingsAggregated", self.readings_aggregated)
            .count("ItemsWritten", self.items_written)
            .count("ConflictsRetried", self.conflicts_retried)
            .count("AlertsOpened", self.alerts_opened)
            .count("AlertsResolved", self.alerts_resolved)
            .count("DeviceWritesDeferred", self.device_writes_deferred)
            .count("UnreadableItems", self.unreadable_items)
            .count("WriteUnits", self.write_units.ceil() as u64)
            .count("FailedItems", self.failed_items)
    }
}

#[derive(Default)]
struct Counters {
    readings_aggregated: AtomicU64,
    items_written: AtomicU64,
    conflicts_retried: AtomicU64,
    alerts_opened: AtomicU64,
    alerts_resolved: AtomicU64,
    device_writes_deferred: AtomicU64,
    unreadable_items: AtomicU64,
    /// Thousandths of a write unit.
    write_milli_units: AtomicU64,
}

impl Counters {
    fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
    fn written(&self, units: f64) {
        Self::add(&self.items_written, 1);
        Self::add(&self.write_milli_units, (units * 1000.0).round() as u64);
    }

    /// Counts and logs an unreadable item; `Ok` when `e` was one (the caller skips it).
    fn skip_unreadable(&self, e: AggregatorError, what: &str) -> Result<(), AggregatorError> {
        match e {
            AggregatorError::Store(s) if s.is_unreadable() => {
                Self::add(&self.unreadable_items, 1);
                tracing::warn!(error = %s, "{what} skipped: an item it needs is unreadable");
                Ok(())
            }
            other => Err(other),
        }
    }
}

/// A reading of one device in this batch, as the device item and alerts see it.
#[derive(Debug, Clone)]
struct Observation {
    at: Timestamp,
    seq: String,
    metrics: BTreeMap<MetricName, f64>,
}

#[derive(Debug, Clone)]
struct DevicePlan {
    device: DeviceId,
    first_index: usize,
    /// Sorted by time, one per timestamp (the newest record's values).
    readings: Vec<Observation>,
}

fn device_plans(changes: &[StreamChange]) -> Vec<DevicePlan> {
    let mut by_device: BTreeMap<DeviceId, (usize, BTreeMap<Timestamp, Observation>)> =
        BTreeMap::new();
    for sc in changes {
        let img = match &sc.change {
            Change::Insert(i) => i,
            Change::Correct { new, .. } => new,
            Change::Delete(_) => continue,
        };
        let (first, obs) = by_device
            .entry(img.device.clone())
            .or_insert((sc.index, BTreeMap::new()));
        *first = (*first).min(sc.index);
        let newer = obs
            .get(&img.at)
            .is_none_or(|o| cmp_seq(&sc.seq, &o.seq).is_gt());
        if newer {
            obs.insert(
                img.at,
                Observation {
                    at: img.at,
                    seq: sc.seq.clone(),
                    metrics: img.metrics.clone(),
                },
            );
        }
    }
    by_device
        .into_iter()
        .map(|(device, (first_index, obs))| DevicePlan {
            device,
            first_index,
            readings: obs.into_values().collect(),
        })
        .collect()
}

/// Reads `keys` with `get`; when an item among them does not parse, reads them one by one so
/// that only the unreadable ones are left out (and returned apart, to be skipped and counted).
async fn read_skipping_unreadable<K, T, F, Fut>(
    keys: &[K],
    get: F,
) -> (Result<HashMap<K, T>, StoreError>, HashSet<K>)
where
    K: Clone + Eq + std::hash::Hash + std::fmt::Debug,
    F: Fn(Vec<K>) -> Fut,
    Fut: std::future::Future<Output = Result<HashMap<K, T>, StoreError>>,
{
    if keys.is_empty() {
        return (Ok(HashMap::new()), HashSet::new());
    }
    match get(keys.to_vec()).await {
        Err(e) if e.is_unreadable() => {}
        other => return (other, HashSet::new()),
    }
    let mut found = HashMap::new();
    let mut unreadable = HashSet::new();
    for k in keys {
        match get(vec![k.clone()]).await {
            Ok(m) => found.extend(m),
            Err(e) if e.is_unreadable() => {
                tracing::warn!(key = ?k, error = %e, "unreadable item: this batch leaves it as it is");
                unreadable.insert(k.clone());
            }
            Err(e) => return (Err(e), unreadable),
        }
    }
    (Ok(found), unreadable)
}

/// The aggregator over a store (DynamoDB in production, fakes in unit tests).
pub struct Aggregator<S = DynamoStore> {
    store: S,
    config: AggregatorConfig,
    /// Publishes alert state changes (the alerts role only).
    notifier: Option<crate::Notifier>,
}

impl Aggregator<DynamoStore> {
    pub fn new(client: aws_sdk_dynamodb::Client, config: AggregatorConfig) -> Self {
        let store = DynamoStore::new(client, config.table_name.clone());
        Aggregator {
            store,
            config,
            notifier: None,
        }
    }
}

impl<S: Store> Aggregator<S> {
    pub fn with_store(store: S, config: AggregatorConfig) -> Self {
        Aggregator {
            store,
            config,
            notifier: None,
        }
    }

    /// Publishes the alert state changes of each batch (used when the role is `alerts`).
    pub fn with_notifier(mut self, notifier: crate::Notifier) -> Self {
        self.notifier = Some(notifier);
        self
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn config(&self) -> &AggregatorConfig {
        &self.config
    }

    /// The Lambda handler: never fails on input; a store failure becomes a partial batch
    /// failure from the first record of the items it left unwritten.
    pub async fn handle(&self, event: Event) -> Result<DynamoDbEventResponse, AggregatorError> {
        let (response, report) = self.process(&event).await;
        tracing::info!(
            records_seen = report.records_seen,
            records_ignored = report.records_ignored,
            readings_aggregated = report.readings_aggregated,
            items_written = report.items_written,
            conflicts_retried = report.conflicts_retried,
            alerts_opened = report.alerts_opened,
            alerts_resolved = report.alerts_resolved,
            device_writes_deferred = report.device_writes_deferred,
            unreadable_items = report.unreadable_items,
            write_units = report.write_units,
            failed_items = report.failed_items,
            "batch aggregated"
        );
        report.metrics().emit();
        if report.notify.changes > 0 {
            report.notify.log();
            report.notify.metrics().emit();
        }
        Ok(response)
    }

    /// [`Aggregator::handle`] without logging, returning what was done.
    pub async fn process(&self, event: &Event) -> (DynamoDbEventResponse, Report) {
        let mut report = Report {
            records_seen: event.records.len() as u64,
            ..Default::default()
        };
        let mut changes = Vec::new();
        for (i, rec) in event.records.iter().enumerate() {
            match classify(i, rec) {
                Ok(c) => changes.push(c),
                Err(why) => {
                    report.records_ignored += 1;
                    if let Ignored::Malformed(reason) = &why {
                        tracing::warn!(event_id = %rec.event_id, %reason, "record ignored");
                    } else {
                        tracing::debug!(event_id = %rec.event_id, reason = ?why, "record ignored");
                    }
                }
            }
        }
        let agg_plans = combine::plan(&changes);
        let dev_plans = device_plans(&changes);
        let counters = Counters::default();
        let mut failed: Vec<usize> = Vec::new();

        let agg_keys: Vec<_> = agg_plans.iter().map(|p| p.key.clone()).collect();
        let dev_ids: Vec<_> = dev_plans.iter().map(|p| p.device.clone()).collect();
        let store = &self.store;
        let ((aggs, unreadable_aggs), (devs, unreadable_devs)) = futures::join!(
            read_skipping_unreadable(
                &agg_keys,
                |ks| async move { store.get_aggregates(&ks).await }
            ),
            read_skipping_unreadable(&dev_ids, |ks| async move { store.get_devices(&ks).await })
        );
        let skipped = unreadable_aggs.len() + unreadable_devs.len();
        Counters::add(&counters.unreadable_items, skipped as u64);
        match (aggs, devs) {
            (Ok(aggs), Ok(devs)) => {
                let n = self.config.write_concurrency.max(1);
                // Indexes, not borrowed items, feed the streams: closures over `&T` would make
                // the handler future !Send (a rustc limitation with higher-ranked lifetimes),
                // and runtimes that spawn it need Send.
                let (agg_plans, dev_plans, counters) = (&agg_plans, &dev_plans, &counters);
                let agg_writes = futures::stream::iter(0..agg_plans.len())
                    .filter(|i| std::future::ready(!unreadable_aggs.contains(&agg_plans[*i].key)))
                    .map(|i| {
                        let p = &agg_plans[i];
                        let current = aggs.get(&p.key).cloned();
                        async move {
                            (
                                p.first_index(),
                                p.key.to_string(),
                                self.write_aggregate(p, current, counters).await,
                            )
                        }
                    })
                    .buffer_unordered(n)
                    .collect::<Vec<_>>();
                let dev_writes = futures::stream::iter(0..dev_plans.len())
                    .filter(|i| {
                        std::future::ready(!unreadable_devs.contains(&dev_plans[*i].device))
                    })
                    .map(|i| {
                        let p = &dev_plans[i];
                        let current = devs.get(&p.device).cloned();
                        async move {
                            (
                                p.first_index,
                                p.device.to_string(),
                                self.write_device(p, current, counters).await,
                            )
                        }
                    })
                    .buffer_unordered(n)
                    .collect::<Vec<_>>();
                let (agg_results, dev_results) = futures::join!(agg_writes, dev_writes);
                for (first, key, r) in agg_results {
                    if let Err(e) = r.or_else(|e| counters.skip_unreadable(e, "aggregate update")) {
                        tracing::error!(item = %key, error = %e, "aggregate not written");
                        failed.push(first);
                    }
                }
                for (first, device, r) in dev_results {
                    if let Err(e) = r.or_else(|e| counters.skip_unreadable(e, "device update")) {
                        tracing::error!(%device, error = %e, "device not updated");
                        failed.push(first);
                    }
                }
            }
            (a, d) => {
                let e = a
                    .err()
                    .or(d.err())
                    .map(|e| e.to_string())
                    .unwrap_or_default();
                tracing::error!(error = %e, "reading the batch's items failed");
                failed.extend(changes.iter().map(|c| c.index).min());
            }
        }

        if let (crate::Role::Alerts, Some(n)) = (self.config.role, &self.notifier) {
            let (not_done, notified) = n.process(event).await;
            report.notify = notified;
            failed.extend(not_done);
        }

        report.readings_aggregated = counters.readings_aggregated.load(Ordering::Relaxed);
        report.items_written = counters.items_written.load(Ordering::Relaxed);
        report.conflicts_retried = counters.conflicts_retried.load(Ordering::Relaxed);
        report.alerts_opened = counters.alerts_opened.load(Ordering::Relaxed);
        report.alerts_resolved = counters.alerts_resolved.load(Ordering::Relaxed);
        report.device_writes_deferred = counters.device_writes_deferred.load(Ordering::Relaxed);
        report.unreadable_items = counters.unreadable_items.load(Ordering::Relaxed);
        report.write_units = counters.write_milli_units.load(Ordering::Relaxed) as f64 / 1000.0;
        report.failed_items = failed.len() as u64;

        let mut response = DynamoDbEventResponse::default();
        // Lambda restarts the shard from the lowest reported record; everything before it
        // is done, everything after it is harmless to see again.
        if let Some(first) = failed.into_iter().min() {
            let mut f = DynamoDbBatchItemFailure::default();
            f.item_identifier = event.records[first].change.sequence_number.clone();
            response.batch_item_failures.push(f);
        }
        (response, report)
    }

    async fn write_aggregate(
        &self,
        plan: &AggregatePlan,
        mut current: Option<AggregateItem>,
        counters: &Counters,
    ) -> Result<(), AggregatorError> {
        let mut extremes: Option<BucketReadings> = None;
        for _ in 0..self.config.max_attempts {
            let applied = combine::apply(current.as_ref(), plan);
            if applied.applied == 0 {
                return Ok(());
            }
            let mut item = applied.item;
            if !applied.recompute.is_empty() {
                if extremes.is_none() {
                    let last = plan.bucket.end_exclusive().pred().unwrap_or(Timestamp::MAX);
                    extremes = Some(
                        self.store
                            .readings_between(&plan.device, plan.bucket.start(), last)
                            .await?,
                    );
                }
                if let Some(r) = &extremes {
                    combine::fix_extremes(&mut item, &applied.recompute, r);
                }
            }
            match self
                .store
                .put_aggregate(&item, current.as_ref().map(|c| c.version))
                .await?
            {
                Written::Ok { units } => {
                    counters.written(units);
                    if plan.bucket.period() == tidemark_schema::Period::Hourly {
                        Counters::add(&counters.readings_aggregated, applied.readings_added as u64);
                    }
                    return Ok(());
                }
                Written::Conflict => {
                    Counters::add(&counters.conflicts_retried, 1);
                    // The winner may have seen newer raw readings: ask the table again.
                    extremes = None;
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

    async fn reread_device(&self, d: &DeviceId) -> Result<Option<DeviceItem>, AggregatorError> {
        Ok(self
            .store
            .get_devices(std::slice::from_ref(d))
            .await?
            .remove(d))
    }

    async fn write_device(
        &self,
        plan: &DevicePlan,
        mut dev: Option<DeviceItem>,
        counters: &Counters,
    ) -> Result<(), AggregatorError> {
        let Some(newest) = plan.readings.last() else {
            return Ok(());
        };
        let mut known: HashMap<AlertId, AlertItem> = HashMap::new();
        for _ in 0..self.config.max_attempts {
            let last_seen = dev.as_ref().and_then(|d| d.last_seen_at);
            let moves = match last_seen {
                None => true,
                Some(l) if newest.at > l => true,
                // A correction of the latest reading itself.
                Some(l) if newest.at == l => {
                    dev.as_ref()
                        .and_then(|d| d.latest.as_ref())
                        .map(|x| &x.metrics)
                        != Some(&newest.metrics)
                }
                Some(_) => false,
            };
            if !moves {
                return Ok(());
            }
            let fresh: Vec<(Timestamp, &BTreeMap<MetricName, f64>)> = plan
                .readings
                .iter()
                .filter(|o| last_seen.is_none_or(|l| o.at > l))
                .map(|o| (o.at, &o.metrics))
                .collect();
            let open_before = dev
                .as_ref()
                .map(|d| d.open_alerts.clone())
                .unwrap_or_default();
            let thresholds =
                alerts::effective_thresholds(dev.as_ref(), &self.config.default_thresholds);
            let alert_plan = if fresh.is_empty() || thresholds.is_empty() {
                AlertPlan {
                    open_alerts: open_before.clone(),
                    ..Default::default()
                }
            } else {
                let missing: Vec<AlertId> = open_before
                    .values()
                    .filter(|id| !known.contains_key(*id))
                    .cloned()
                    .collect();
                if !missing.is_empty() {
                    known.extend(self.store.get_alerts(&plan.device, &missing).await?);
                }
                alerts::evaluate(&plan.device, &thresholds, &open_before, &known, &fresh)
            };

            // Nothing but freshness would change: leave the device item until it is
            // `device_refresh` behind (the decision depends only on the item and the batch,
            // so a replay decides the same).
            let changes_alerts =
                !alert_plan.writes.is_empty() || alert_plan.open_alerts != open_before;
            if let Some(l) = last_seen
                && !changes_alerts
                && newest.at > l
                && newest.at.epoch_millis() - l.epoch_millis()
                    < i64::try_from(self.config.device_refresh.as_millis()).unwrap_or(i64::MAX)
            {
                Counters::add(&counters.device_writes_deferred, 1);
                return Ok(());
            }
            let update = DeviceUpdate {
                device: plan.device.clone(),
                expected_last_seen: last_seen,
                last_seen_at: last_seen.map_or(newest.at, |l| l.max(newest.at)),
                latest: LatestReading {
                    timestamp: newest.at,
                    metrics: newest.metrics.clone(),
                },
                open_alerts: (alert_plan.open_alerts != open_before)
                    .then(|| alert_plan.open_alerts.clone()),
                now: Timestamp::now(),
                status_gsi1pk: keys::device_status_gsi1pk(
                    &plan.device,
                    DeviceStatus::Active,
                    self.config.status_shards,
                ),
            };
            if let Written::Ok { units } = self
                .store
                .commit_device(&update, &alert_plan.writes)
                .await?
            {
                counters.written(units);
                for w in &alert_plan.writes {
                    Counters::add(&counters.items_written, 1);
                    let after = match w {
                        AlertWrite::Create(a) => {
                            Counters::add(&counters.alerts_opened, 1);
                            a
                        }
                        AlertWrite::Update { after, .. } => after,
                    };
                    if after.state == AlertState::Resolved {
                        Counters::add(&counters.alerts_resolved, 1);
                    }
                }
                return Ok(());
            }
            // Someone else moved this device on: start over from what the table holds, with
            // fresh copies of every alert this attempt touched or knew.
            Counters::add(&counters.conflicts_retried, 1);
            dev = self.reread_device(&plan.device).await?;
            let mut ids: Vec<AlertId> = known.keys().cloned().collect();
            ids.extend(alert_plan.writes.iter().map(|w| match w {
                AlertWrite::Create(a) => a.alert_id.clone(),
                AlertWrite::Update { after, .. } => after.alert_id.clone(),
            }));
            if let Some(d) = &dev {
                ids.extend(d.open_alerts.values().cloned());
            }
            ids.sort();
            ids.dedup();
            known = if ids.is_empty() {
                HashMap::new()
            } else {
                self.store.get_alerts(&plan.device, &ids).await?
            };
        }
        Err(AggregatorError::Contended {
            key: plan.device.to_string(),
            attempts: self.config.max_attempts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeStore;
    use aws_lambda_events::event::dynamodb::{EventRecord, StreamRecord};
    use tidemark_schema::{Period, Reading, ReadingItem};

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    fn insert(seq: u64, device: &str, at: &str, v: f64) -> EventRecord {
        let item = ReadingItem::new(
            &Reading {
                device_id: DeviceId::new(device).unwrap(),
                timestamp: ts(at),
                metrics: BTreeMap::from([(MetricName::new("t").unwrap(), v)]),
                metadata: None,
            },
            None,
            30,
        );
        let mut c = StreamRecord::default();
        c.keys = serde_dynamo::to_item(serde_json::json!({"pk": item.pk, "sk": item.sk})).unwrap();
        c.new_image = serde_dynamo::to_item(&item).unwrap();
        c.sequence_number = Some(format!("{seq:021}"));
        let mut r = EventRecord::default();
        r.event_name = "INSERT".into();
        r.change = c;
        r
    }

    fn event(records: Vec<EventRecord>) -> Event {
        let mut e = Event::default();
        e.records = records;
        e
    }

    fn hourly(store: &FakeStore, device: &str, at: &str) -> Option<AggregateItem> {
        let k = AggregateItem::key_for(
            &DeviceId::new(device).unwrap(),
            Period::Hourly.bucket(ts(at)),
        );
        store.aggregates.lock().unwrap().get(&k).cloned()
    }

    fn count(a: &AggregateItem) -> u64 {
        a.metrics[&MetricName::new("t").unwrap()].count
    }

    fn batch() -> Vec<EventRecord> {
        vec![
            insert(1, "d1", "2026-04-20T14:00:00Z", 1.0),
            insert(2, "d2", "2026-04-20T14:00:00Z", 2.0),
            insert(3, "d1", "2026-04-20T14:01:00Z", 3.0),
            insert(4, "d2", "2026-04-20T14:01:00Z", 4.0),
        ]
    }

    #[tokio::test]
    async fn a_lost_race_is_retried_from_a_fresh_read() {
        let agg = Aggregator::with_store(FakeStore::default(), AggregatorConfig::new("t"));
        agg.process(&event(batch()[..2].to_vec())).await;
        agg.store().conflicts.store(2, Ordering::SeqCst);
        let (resp, report) = agg.process(&event(batch())).await;
        assert!(resp.batch_item_failures.is_empty());
        assert_eq!(report.conflicts_retried, 2);
        assert_eq!(
            count(&hourly(agg.store(), "d1", "2026-04-20T14:00:00Z").unwrap()),
            2
        );
        assert_eq!(
            count(&hourly(agg.store(), "d2", "2026-04-20T14:00:00Z").unwrap()),
            2
        );
    }

    #[tokio::test]
    async fn an_unwritable_item_fails_the_batch_from_its_first_record_and_the_retry_is_exact() {
        // GIVEN an outage on the hourly items (the daily ones still write)
        let agg = Aggregator::with_store(FakeStore::default(), AggregatorConfig::new("t"));
        let store_ok_for = |agg: &Aggregator<FakeStore>, f: Option<&str>| {
            *agg.store().failing.lock().unwrap() = f.map(str::to_owned);
        };
        store_ok_for(&agg, Some("hourly"));
        let (resp, report) = agg.process(&event(batch())).await;
        // THEN Lambda is told to retry from the first record behind a failed item
        assert_eq!(resp.batch_item_failures.len(), 1);
        assert_eq!(
            resp.batch_item_failures[0].item_identifier.as_deref(),
            Some("000000000000000000001")
        );
        assert!(report.failed_items >= 2);
        // WHEN the batch is retried after the outage THEN nothing is counted twice
        store_ok_for(&agg, None);
        let (resp, _) = agg.process(&event(batch())).await;
        assert!(resp.batch_item_failures.is_empty());
        for d in ["d1", "d2"] {
            assert_eq!(
                count(&hourly(agg.store(), d, "2026-04-20T14:00:00Z").unwrap()),
                2
            );
            let k = AggregateItem::key_for(
                &DeviceId::new(d).unwrap(),
                Period::Daily.bucket(ts("2026-04-20T14:00:00Z")),
            );
            let daily = agg.store().aggregates.lock().unwrap()[&k].clone();
            assert_eq!(count(&daily), 2);
        }
    }

    #[tokio::test]
    async fn records_that_are_not_readings_are_ignored_not_failed() {
        let agg = Aggregator::with_store(FakeStore::default(), AggregatorConfig::new("t"));
        let mut foreign = insert(9, "d1", "2026-04-20T14:00:00Z", 1.0);
        foreign.change.keys = serde_dynamo::to_item(serde_json::json!({"id": "x"})).unwrap();
        foreign.change.new_image = foreign.change.keys.clone();
        let mut no_seq = insert(10, "d1", "2026-04-20T14:00:00Z", 1.0);
        no_seq.change.sequence_number = None;
        let (resp, report) = agg.process(&event(vec![foreign, no_seq])).await;
        assert!(resp.batch_item_failures.is_empty());
        assert_eq!((report.records_ignored, report.items_written), (2, 0));
    }

    #[tokio::test]
    async fn the_device_moves_once_per_batch_and_never_back() {
        let agg = Aggregator::with_store(FakeStore::default(), AggregatorConfig::new("t"));
        let (_, r) = agg.process(&event(batch())).await;
        assert_eq!(
            r.items_written,
            2 * 2 + 2,
            "hourly+daily per device, one device write each"
        );
        let late = insert(5, "d1", "2026-04-20T13:00:00Z", 9.0);
        let (_, r) = agg.process(&event(vec![late])).await;
        assert_eq!(
            r.items_written, 2,
            "the late reading's hourly and daily, not the device"
        );
        let d = agg.store().devices.lock().unwrap()[&DeviceId::new("d1").unwrap()].clone();
        assert_eq!(d.last_seen_at, Some(ts("2026-04-20T14:01:00Z")));
    }

    #[tokio::test]
    async fn the_device_item_is_rewritten_only_when_it_lags_by_the_refresh_interval() {
        // GIVEN a device seen at 14:01, a 15-minute refresh and a max-5 threshold on t
        let config = AggregatorConfig::new("t").with_default_thresholds(
            crate::config::parse_thresholds(r#"{"t":{"max":5,"severity":"critical"}}"#).unwrap(),
        );
        let agg = Aggregator::with_store(FakeStore::default(), config);
        let last_seen = |agg: &Aggregator<FakeStore>| {
            agg.store().devices.lock().unwrap()[&DeviceId::new("d1").unwrap()].last_seen_at
        };
        agg.process(&event(vec![insert(1, "d1", "2026-04-20T14:01:00Z", 1.0)]))
            .await;
        // WHEN a batch brings readings up to 14:15:59 THEN only its rollups are written
        let (_, r) = agg
            .process(&event(vec![insert(2, "d1", "2026-04-20T14:15:59Z", 1.0)]))
            .await;
        assert_eq!((r.items_written, r.device_writes_deferred), (2, 1));
        assert_eq!(last_seen(&agg), Some(ts("2026-04-20T14:01:00Z")));
        // WHEN the newest reading is 15 minutes past lastSeenAt THEN the device moves
        let (_, r) = agg
            .process(&event(vec![insert(3, "d1", "2026-04-20T14:16:00Z", 1.0)]))
            .await;
        assert_eq!((r.items_written, r.device_writes_deferred), (3, 0));
        assert_eq!(last_seen(&agg), Some(ts("2026-04-20T14:16:00Z")));
        // AND a breach a minute later writes it at once, with the alert it opens
        let (_, r) = agg
            .process(&event(vec![insert(4, "d1", "2026-04-20T14:17:00Z", 9.0)]))
            .await;
        assert_eq!((r.alerts_opened, r.device_writes_deferred), (1, 0));
        assert_eq!(last_seen(&agg), Some(ts("2026-04-20T14:17:00Z")));
    }

    #[test]
    fn the_dynamodb_handler_future_is_send_for_spawning_runtimes() {
        fn assert_send<T: Send>(_: &T) {}
        let conf = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .build();
        let agg = Aggregator::new(
            aws_sdk_dynamodb::Client::from_conf(conf),
            AggregatorConfig::new("t"),
        );
        let fut = agg.handle(Event::default());
        assert_send(&fut);
    }

    #[test]
    fn emf_names_every_count_the_issue_asks_for() {
        let v = Report::default().metrics().to_json(0);
        for name in [
            "RecordsSeen",
            "ReadingsAggregated",
            "ItemsWritten",
            "ConflictsRetried",
            "AlertsOpened",
            "AlertsResolved",
        ] {
            assert!(v.get(name).is_some(), "{name}");
        }
        assert_eq!(v["Function"], "aggregator");
    }
}
