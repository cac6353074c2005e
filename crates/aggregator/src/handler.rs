//! One invocation: decode the records once ([`crate::records::decode`]), then do this
//! function's role with them (rollups or alerts), and report the first record behind anything left undone as the batch item
//! failure (Lambda restarts the shard there; everything after it is harmless to see again).

use std::collections::{BTreeMap, HashMap};

use aws_lambda_events::event::dynamodb::Event;
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use futures::{FutureExt, StreamExt};
use tidemark_schema::{DeviceId, DeviceItem};

use crate::AggregatorError;
use crate::alerting::device::DeviceBatch;
use crate::config::Role;
use crate::failed::{Failed, guarded};
use crate::function::Aggregator;
use crate::records::{Change, Decoded, Ignored, StreamChange, decode_all};
use crate::report::{Counters, Report};
use crate::store::{Store, read_skipping_unreadable};

/// Per device, what the batch brings for its alerts.
fn device_batches(
    changes: &[StreamChange],
    records: &[Decoded],
) -> BTreeMap<DeviceId, DeviceBatch> {
    let mut out: BTreeMap<DeviceId, DeviceBatch> = BTreeMap::new();
    for sc in changes {
        let img = sc.change.image();
        let b = out.entry(img.device.clone()).or_default();
        b.index(sc.index);
        let mut rewrite = |m: &tidemark_schema::MetricName, at| {
            let t = b.rewritten.entry(m.clone()).or_insert(at);
            *t = (*t).min(at);
            let u = b.rewritten_until.entry(m.clone()).or_insert(at);
            *u = (*u).max(at);
        };
        match &sc.change {
            // A slot's changes at one timestamp may come from several parts (each holding some
            // of its metrics): they add up.
            Change::Insert(i) => {
                b.readings
                    .entry(i.at)
                    .or_default()
                    .extend(i.metrics.clone());
            }
            Change::Correct { old, new } => {
                // Only a changed value rewrites history; an added metric is a new reading.
                for (m, v) in &old.metrics {
                    if new.metrics.get(m) != Some(v) {
                        rewrite(m, old.at);
                    }
                }
                b.readings
                    .entry(new.at)
                    .or_default()
                    .extend(new.metrics.clone());
            }
            Change::Delete(i) => {
                for m in i.metrics.keys() {
                    rewrite(m, i.at);
                }
            }
        }
    }
    for (i, rec) in records.iter().enumerate() {
        let Decoded::Device(d) = rec else { continue };
        if d.thresholds {
            let b = out.entry(d.device.clone()).or_default();
            b.index(i);
            b.thresholds_changed = true;
        }
        if d.offline_settings {
            let b = out.entry(d.device.clone()).or_default();
            b.index(i);
            b.offline_settings_changed = true;
        }
    }
    for (d, (first, a)) in crate::offline::arrivals::arrivals(records) {
        match out.get_mut(&d) {
            Some(b) => {
                b.first_index = b.first_index.min(first);
                b.arrivals = Some(a);
            }
            None => {
                out.insert(
                    d,
                    DeviceBatch {
                        first_index: first,
                        arrivals: Some(a),
                        ..DeviceBatch::default()
                    },
                );
            }
        }
    }
    out
}

impl<S: Store> Aggregator<S> {
    /// The Lambda handler: never fails on input; a store failure, or work the `deadline`
    /// (the invocation's, less [`AggregatorConfig::deadline_margin`]) left unfinished, becomes
    /// a partial batch failure from the first record of the items it left unwritten.
    pub async fn handle(
        &self,
        event: Event,
        deadline: std::time::Instant,
    ) -> Result<DynamoDbEventResponse, AggregatorError> {
        let (response, report) = self.process_until(&event, deadline).await;
        tracing::info!(
            role = ?self.config.role,
            records_seen = report.records_seen,
            records_ignored = report.records_ignored,
            readings_aggregated = report.readings_aggregated,
            items_written = report.items_written,
            conflicts_retried = report.conflicts_retried,
            alerts_opened = report.alerts_opened,
            alerts_resolved = report.alerts_resolved,
            alert_derivations = report.alert_derivations,
            device_writes_deferred = report.device_writes_deferred,
            unreadable_items = report.unreadable_items,
            write_units = report.write_units,
            failed_items = report.failed_items,
            out_of_time = report.out_of_time,
            set_aside = report.set_aside,
            repaired = report.repaired,
            "batch processed"
        );
        report.metrics().emit();
        if report.notify.changes > 0 {
            report.notify.log();
            report.notify.metrics().emit();
        }
        Ok(response)
    }

    /// [`Aggregator::process_until`] with time enough for any batch (tests, tools).
    pub async fn process(&self, event: &Event) -> (DynamoDbEventResponse, Report) {
        let hour = std::time::Duration::from_secs(3600);
        self.process_until(event, std::time::Instant::now() + hour)
            .await
    }

    /// [`Aggregator::handle`] without logging, returning what was done.
    pub async fn process_until(
        &self,
        event: &Event,
        deadline: std::time::Instant,
    ) -> (DynamoDbEventResponse, Report) {
        let deadline = tokio::time::Instant::from_std(deadline);
        let stop = deadline
            .checked_sub(self.config.deadline_margin)
            .unwrap_or(deadline);
        let mut report = Report {
            records_seen: event.records.len() as u64,
            ..Default::default()
        };
        let counters = Counters::default();
        let decoded = decode_all(event);
        let mut changes = Vec::new();
        for (rec, d) in event.records.iter().zip(&decoded) {
            match d.reading_changes() {
                Ok(c) => changes.extend_from_slice(c),
                Err(why) => {
                    report.records_ignored += 1;
                    match &why {
                        Ignored::Malformed(reason) => {
                            tracing::warn!(event_id = %rec.event_id, %reason, "record ignored")
                        }
                        Ignored::Unreadable { key, reason } => {
                            Counters::add(&counters.unreadable_items, 1);
                            tracing::warn!(
                                event_id = %rec.event_id, %key, %reason,
                                "unreadable slot part: its record is skipped"
                            );
                        }
                        _ => {
                            tracing::debug!(event_id = %rec.event_id, reason = ?why, "record ignored")
                        }
                    }
                }
            }
        }
        let mut failed = Failed::default();
        let work = async {
            match self.config.role {
                Role::Rollups => self.rollups(&changes, &counters, stop, &mut failed).await,
                Role::Alerts => {
                    let batches = device_batches(&changes, &decoded);
                    self.alerts(&batches, &counters, stop, &mut failed).await;
                }
            }
        };
        // A panic outside any one device's or item's work (each of which catches its own)
        // fails the batch's first reading record for good.
        if let Err(panic) = std::panic::AssertUnwindSafe(Box::pin(work))
            .catch_unwind()
            .await
        {
            let e = AggregatorError::Panicked(crate::failed::panic_message(panic.as_ref()));
            let first = changes.iter().map(|c| c.index).min().unwrap_or(0);
            let of_first: Vec<&StreamChange> =
                changes.iter().filter(|c| c.index == first).collect();
            let device = of_first.first().map(|c| c.change.image().device.clone());
            let hours = of_first
                .iter()
                .map(|c| tidemark_schema::Period::Hourly.bucket(c.change.image().at));
            failed.fail(first, &e, device.as_ref(), hours);
        }
        // Permanent failures are counted, and set aside at the third, before anything that
        // waits for the records before it (the heartbeats) looks at what is left.
        self.settle(event, &mut failed, &counters).await;
        if self.config.role == Role::Rollups {
            self.groups_of_done(event, &changes, &counters, stop, &mut failed)
                .await;
        }
        // Each role behind everything before the heartbeat, the rollups role behind its group
        // partials too.
        self.pass_heartbeats(&decoded, &counters, &mut failed.retry)
            .await;

        if let (Role::Alerts, Some(n)) = (self.config.role, &self.notifier) {
            let changes = crate::notify::changes_of(&decoded);
            match tokio::time::timeout_at(stop, n.publish_changes(changes)).await {
                Ok((not_done, notified)) => {
                    report.notify = notified;
                    failed.extend(not_done);
                }
                // Publishing is idempotent (markers): the next invocation publishes what
                // this one had not, from the first record.
                Err(_) => {
                    Counters::add(&counters.out_of_time, 1);
                    failed.extend((!event.records.is_empty()).then_some(0));
                }
            }
        }
        Box::pin(self.repair_open(&counters, stop)).await;
        counters.fill(&mut report);
        report.failed_items = failed.retry.len() as u64;

        let mut response = DynamoDbEventResponse::default();
        if let Some(first) = failed.retry.into_iter().min() {
            let mut f = DynamoDbBatchItemFailure::default();
            f.item_identifier = event.records[first].change.sequence_number.clone();
            response.batch_item_failures.push(f);
        }
        (response, report)
    }

    /// The alerts role over the batch's devices, concurrently.
    async fn alerts(
        &self,
        batches: &BTreeMap<DeviceId, DeviceBatch>,
        counters: &Counters,
        stop: tokio::time::Instant,
        failed: &mut Failed,
    ) {
        let ids: Vec<DeviceId> = batches.keys().cloned().collect();
        let store = &self.store;
        let (devs, unreadable) =
            read_skipping_unreadable(&ids, |ks| async move { store.get_devices(&ks).await }).await;
        Counters::add(&counters.unreadable_items, unreadable.len() as u64);
        let devs: HashMap<DeviceId, DeviceItem> = match devs {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(error = %e, "reading the batch's devices failed");
                if let Some(first) = batches.values().map(|b| b.first_index).min() {
                    failed.fail(first, &AggregatorError::Store(e), None, []);
                }
                return;
            }
        };
        let (ids, unreadable) = (&ids, &unreadable);
        let results = futures::stream::iter(0..ids.len())
            .filter(|i| std::future::ready(!unreadable.contains(&ids[*i])))
            .map(|i| {
                let id = &ids[i];
                let b = &batches[id];
                let dev = devs.get(id).cloned();
                async move {
                    (
                        b.first_index,
                        id,
                        counters
                            .until(stop, guarded(self.alert_device(id, b, dev, counters)))
                            .await,
                    )
                }
            })
            .buffer_unordered(self.config.write_concurrency.max(1))
            .collect::<Vec<_>>()
            .await;
        for (first, device, r) in results {
            if let Err(e) = r.or_else(|e| counters.skip_unreadable(e, "device alerts")) {
                tracing::error!(%device, error = %e, "device alerts not updated");
                failed.fail(first, &e, Some(device), batches[device].hours());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AggregatorConfig;
    use crate::memory::MemoryStore;
    use crate::report::Report;
    use aws_lambda_events::event::dynamodb::EventRecord;
    use std::sync::atomic::Ordering;
    use tidemark_schema::{AggregateItem, MetricName, Period, Timestamp};

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    fn insert(seq: u64, device: &str, at: &str, v: f64) -> EventRecord {
        crate::testing::insert(seq, device, ts(at), "t", v)
    }

    fn event(records: Vec<EventRecord>) -> Event {
        let mut e = Event::default();
        e.records = records;
        e
    }

    fn hourly(store: &MemoryStore, device: &str, at: &str) -> Option<AggregateItem> {
        let k = AggregateItem::key_for(
            &DeviceId::new(device).unwrap(),
            Period::Hourly.bucket(ts(at)),
        );
        store.aggregate(&k)
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

    #[test]
    fn changes_of_one_timestamp_from_two_slot_parts_merge_their_metrics() {
        use crate::records::Image;
        // A metric added to a reading whose other metrics are in another part: two changes
        // of one batch at the same timestamp.
        let image = |pairs: &[(&str, f64)]| Image {
            pk: "DEVICE#d1".into(),
            sk: "READING#2026-04-20T14:00:00.000000Z".into(),
            device: DeviceId::new("d1").unwrap(),
            at: ts("2026-04-20T14:00:00Z"),
            metrics: pairs
                .iter()
                .map(|(k, v)| (MetricName::new(k).unwrap(), *v))
                .collect(),
        };
        let changes = [
            StreamChange {
                index: 0,
                seq: "1".into(),
                change: Change::Correct {
                    old: image(&[("t", 1.0)]),
                    new: image(&[("t", 2.0)]),
                },
            },
            StreamChange {
                index: 1,
                seq: "2".into(),
                change: Change::Insert(image(&[("h", 40.0)])),
            },
        ];
        let batches = device_batches(&changes, &[]);
        let b = &batches[&DeviceId::new("d1").unwrap()];
        assert_eq!(
            b.readings[&ts("2026-04-20T14:00:00Z")],
            image(&[("t", 2.0), ("h", 40.0)]).metrics
        );
    }

    #[tokio::test]
    async fn a_lost_race_is_retried_from_a_fresh_read() {
        let agg = Aggregator::with_store(MemoryStore::default(), AggregatorConfig::new("t"));
        agg.process_written(&event(batch()[..2].to_vec())).await;
        agg.store().conflicts.store(2, Ordering::SeqCst);
        let (resp, report) = agg.process_written(&event(batch())).await;
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
        let agg = Aggregator::with_store(MemoryStore::default(), AggregatorConfig::new("t"));
        let store_ok_for = |agg: &Aggregator<MemoryStore>, f: Option<&str>| {
            *agg.store().failing.lock().unwrap() = f.map(str::to_owned);
        };
        store_ok_for(&agg, Some("hourly"));
        let (resp, report) = agg.process_written(&event(batch())).await;
        // THEN Lambda is told to retry from the first record behind a failed item
        assert_eq!(resp.batch_item_failures.len(), 1);
        assert_eq!(
            resp.batch_item_failures[0].item_identifier.as_deref(),
            Some("000000000000000000001")
        );
        assert!(report.failed_items >= 2);
        // WHEN the batch is retried after the outage THEN nothing is counted twice
        store_ok_for(&agg, None);
        let (resp, _) = agg.process_written(&event(batch())).await;
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
            let daily = agg.store().aggregate(&k).unwrap();
            assert_eq!(count(&daily), 2);
        }
    }

    #[tokio::test]
    async fn work_the_deadline_leaves_is_reported_and_the_retry_finishes_it_exactly() {
        // GIVEN a table so slow that the batch's four aggregate writes, one at a time, take
        // longer than the invocation has
        let mut config = AggregatorConfig::new("t");
        config.write_concurrency = 1;
        config.deadline_margin = std::time::Duration::ZERO;
        let agg = Aggregator::with_store(MemoryStore::default(), config);
        *agg.store().write_delay.lock().unwrap() = Some(std::time::Duration::from_millis(300));
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(450);
        let (resp, report) = agg.process_until(&event(batch()), deadline).await;
        // THEN the function answers before its deadline, with what it left undone as the
        // batch item failure, instead of being killed with the whole batch
        assert!(report.out_of_time >= 1, "{report:?}");
        assert_eq!(resp.batch_item_failures.len(), 1);
        // AND the retry from there finishes it, counting nothing twice
        *agg.store().write_delay.lock().unwrap() = None;
        let (resp, report) = agg.process_written(&event(batch())).await;
        assert!(resp.batch_item_failures.is_empty());
        assert_eq!(report.out_of_time, 0);
        for d in ["d1", "d2"] {
            assert_eq!(
                count(&hourly(agg.store(), d, "2026-04-20T14:00:00Z").unwrap()),
                2
            );
        }
    }

    /// A MODIFY of a reading of `device` from `old` to `new` (one metric `t`).
    fn modify(seq: u64, device: &str, at: &str, old: f64, new: f64) -> EventRecord {
        let mut r = insert(seq, device, at, new);
        let before = insert(seq, device, at, old);
        r.change.old_image = before.change.new_image;
        r.event_name = "MODIFY".into();
        r
    }

    #[tokio::test]
    async fn a_corrected_daily_maximum_is_recomputed_from_the_hours_not_the_days_readings() {
        let agg = Aggregator::with_store(MemoryStore::default(), AggregatorConfig::new("t"));
        let d1 = DeviceId::new("d1").unwrap();
        // GIVEN three hours of a day, 60 readings each, with a spike of 90 at 14:30
        let mut records = Vec::new();
        let mut seq = 1;
        for hour in [10, 14, 18] {
            for minute in 0..60 {
                let at = format!("2026-04-20T{hour:02}:{minute:02}:00Z");
                let v = if hour == 14 && minute == 30 {
                    90.0
                } else {
                    f64::from(hour) + f64::from(minute) / 100.0
                };
                agg.store().put_reading(
                    &d1,
                    ts(&at),
                    BTreeMap::from([(MetricName::new("t").unwrap(), v)]),
                );
                records.push(insert(seq, "d1", &at, v));
                seq += 1;
            }
        }
        agg.process_written(&event(records)).await;
        // WHEN the spike is corrected to 10
        agg.store().put_reading(
            &d1,
            ts("2026-04-20T14:30:00Z"),
            BTreeMap::from([(MetricName::new("t").unwrap(), 10.0)]),
        );
        agg.store().readings_summarized.store(0, Ordering::SeqCst);
        let (resp, _) = agg
            .process_written(&event(vec![modify(
                seq,
                "d1",
                "2026-04-20T14:30:00Z",
                90.0,
                10.0,
            )]))
            .await;
        assert!(resp.batch_item_failures.is_empty());
        // THEN the hour and the day have their true extremes
        let t = MetricName::new("t").unwrap();
        let hour = hourly(agg.store(), "d1", "2026-04-20T14:00:00Z").unwrap();
        assert_eq!((hour.metrics[&t].min, hour.metrics[&t].max), (10.0, 14.59));
        let k = AggregateItem::key_for(&d1, Period::Daily.bucket(ts("2026-04-20T14:00:00Z")));
        let day = agg.store().aggregate(&k).unwrap();
        assert_eq!((day.metrics[&t].min, day.metrics[&t].max), (10.0, 18.59));
        assert_eq!(day.metrics[&t].count, 180);
        // AND only the corrected hour's readings were read, not the day's
        let read = agg.store().readings_summarized.load(Ordering::SeqCst);
        assert_eq!(read, 60);
    }

    #[tokio::test]
    async fn records_that_are_not_readings_are_ignored_not_failed() {
        let agg = Aggregator::with_store(MemoryStore::default(), AggregatorConfig::new("t"));
        let mut foreign = insert(9, "d1", "2026-04-20T14:00:00Z", 1.0);
        foreign.change.keys = serde_dynamo::to_item(serde_json::json!({"id": "x"})).unwrap();
        foreign.change.new_image = foreign.change.keys.clone();
        let mut no_seq = insert(10, "d1", "2026-04-20T14:00:00Z", 1.0);
        no_seq.change.sequence_number = None;
        let (resp, report) = agg.process(&event(vec![foreign, no_seq])).await;
        assert_eq!(report.records_seen, 2);
        assert!(resp.batch_item_failures.is_empty());
        assert_eq!((report.records_ignored, report.items_written), (2, 0));
    }

    #[tokio::test]
    async fn every_reading_of_a_slot_record_counts_once_and_a_corrupt_part_is_skipped_and_counted()
    {
        use crate::testing::{slot_item, slot_record};
        let agg = Aggregator::with_store(MemoryStore::default(), AggregatorConfig::new("t"));
        let hour_slots = tidemark_schema::LayoutHistory::EMPTY
            .with_layout(
                ts("2026-04-20T00:00:00Z"),
                tidemark_schema::Layout::packed(tidemark_schema::SlotLen::new(3600).unwrap()),
            )
            .unwrap();
        agg.store()
            .histories
            .lock()
            .unwrap()
            .insert(DeviceId::new("d1").unwrap(), hour_slots);
        let start = ts("2026-04-20T14:00:00Z");
        let v1 = slot_item("d1", start, 0, &[(0, 1.0), (10, 2.0), (20, 3.0)]);
        let v2 = slot_item("d1", start, 0, &[(0, 1.0), (10, 2.0), (20, 3.0), (30, 4.0)]);
        let mut corrupt = slot_item("d1", ts("2026-04-20T15:00:00Z"), 0, &[(0, 9.0)]);
        corrupt.packed.truncate(3);
        // GIVEN a batch: a slot part's INSERT (three readings of one hour), a corrupt part,
        // a single reading of another device, then the part's MODIFY adding a fourth
        let batch = vec![
            slot_record(1, None, Some(&v1)),
            slot_record(2, None, Some(&corrupt)),
            insert(3, "d2", "2026-04-20T14:00:00Z", 5.0),
            slot_record(4, Some(&v1), Some(&v2)),
        ];
        // WHEN it is delivered, bisected and delivered again
        let (resp, report) = agg.process_written(&event(batch.clone())).await;
        agg.process_written(&event(batch[..2].to_vec())).await;
        agg.process_written(&event(batch.clone())).await;
        // THEN nothing failed, the corrupt part was counted, and every reading counted once
        assert!(resp.batch_item_failures.is_empty());
        assert_eq!(report.unreadable_items, 1);
        assert_eq!(report.readings_aggregated, 5);
        let h = hourly(agg.store(), "d1", "2026-04-20T14:00:00Z").unwrap();
        let s = &h.metrics[&MetricName::new("t").unwrap()];
        assert_eq!((s.count, s.sum, s.min, s.max), (4, 10.0, 1.0, 4.0));
        assert_eq!(
            count(&hourly(agg.store(), "d2", "2026-04-20T14:00:00Z").unwrap()),
            1
        );
        assert!(hourly(agg.store(), "d1", "2026-04-20T15:00:00Z").is_none());
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
        let fut = agg.handle(Event::default(), std::time::Instant::now());
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
