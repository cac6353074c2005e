//! What is retried, what is set aside (docs/design.md §5): a failure of the rollups or
//! alerts role is either transient ([`AggregatorError::is_permanent`] false: throttling, 5xx,
//! timeouts, lost races, the deadline), reported from the first record behind it and retried
//! for as long as it takes, or permanent (a `ValidationException`, an item or transaction over
//! DynamoDB's limits, an invariant of ours, a panic): the same records fail the same way again.
//!
//! A permanent failure is counted against the first stream record of the work that failed
//! (a device's alerts, a bucket's rollup): the record the mapping resumes from, as the batch
//! item failure names it. The count is an item (`PIPELINE` / `FAILURES#<role>#<record>.<kind>`,
//! [`tidemark_store::failures`]), so a cold start does not start it over. At
//! [`SET_ASIDE_AFTER`] failures the record is set aside: a [`RepairItem`] names the stream
//! record, the device, the hours and days the failed work touched, the error and the function
//! version; `SetAside` is counted (EMF) and the batch goes on past it. Repairs are done from the
//! table (`Aggregator::repair_open`): each role reads its open repairs at most once a minute
//! per container (the heartbeats' records invoke both roles every minute) and recomputes those
//! hours and days (rollups) or re-derives that device's alert rules from the first of those
//! hours (alerts), as it does for a closed hour or late data, then deletes the repair item. A
//! repair that fails stays, and is tried again a minute later.

use std::collections::{BTreeSet, HashMap};

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use sha2::Digest;
use tidemark_schema::keys::FailedRecord;
use tidemark_schema::{
    AggregateItem, Bucket, DeviceId, EntityKey, Key, Period, RepairItem, Timestamp,
};
pub use tidemark_store::failures::SET_ASIDE_AFTER;

use crate::AggregatorError;
use crate::alerting::device::{DeviceBatch, device_rules};
use crate::config::Role;
use crate::failed::{Failed, Permanent, guarded};
use crate::function::Aggregator;
use crate::report::Counters;
use crate::rollups::combine::AggregatePlan;
use crate::rollups::days::HourChange;
use crate::store::Store;

/// How often a container reads its role's open repairs (a query of one partition).
pub const REPAIR_EVERY_MS: i64 = 60_000;

/// Repairs read, and done, at most per check.
pub const REPAIRS_PER_CHECK: usize = 10;

/// Hours one repair item names at most: a record touching more (a store-and-forward upload of
/// months) is set aside as several, so every item stays small and every repair fits in an
/// invocation.
pub const HOURS_PER_REPAIR: usize = 48;

/// The role's name in failure counts and repair items.
pub fn role_name(role: Role) -> &'static str {
    match role {
        Role::Rollups => "rollups",
        Role::Alerts => "alerts",
    }
}

/// The count's name for a record failing a given way on a device: `<sequence>.<kind>` and,
/// with a device, a short hash of it (two devices' work can fail behind one record only when
/// the whole batch did).
fn failed_record(role: Role, rec: &EventRecord, p: &Permanent) -> Option<FailedRecord> {
    let id = rec
        .change
        .sequence_number
        .clone()
        .unwrap_or_else(|| rec.event_id.clone());
    let mut name = format!("{id}.{}", p.kind);
    if let Some(d) = &p.device {
        let h = sha2::Sha256::digest(d.as_str().as_bytes());
        name.push('.');
        name.extend(h.iter().take(4).map(|b| format!("{b:02x}")));
    }
    FailedRecord::new(role_name(role), &name)
}

/// The hours and days of `p`, cut into parts of at most [`HOURS_PER_REPAIR`] hours, each with
/// the days of its hours (the first also with the days no hour of it names).
fn repair_parts(p: &Permanent) -> Vec<(Vec<Timestamp>, Vec<Timestamp>)> {
    let hours: Vec<Timestamp> = p.hours.iter().copied().collect();
    let day_of = |h: &Timestamp| Period::Daily.bucket(*h).start();
    let of_hours: BTreeSet<Timestamp> = hours.iter().map(day_of).collect();
    let alone: Vec<Timestamp> = p.days.difference(&of_hours).copied().collect();
    let mut parts: Vec<(Vec<Timestamp>, Vec<Timestamp>)> = hours
        .chunks(HOURS_PER_REPAIR)
        .map(|c| {
            let days: BTreeSet<Timestamp> = c.iter().map(day_of).collect();
            (c.to_vec(), days.into_iter().collect())
        })
        .collect();
    match parts.first_mut() {
        Some((_, days)) => {
            days.extend(alone);
            days.sort();
        }
        None => parts.push((Vec::new(), alone)),
    }
    parts
}

/// The table key of the item a stream record is about.
fn item_key(rec: &EventRecord) -> (String, String) {
    let get = |k: &str| match rec.change.keys.get(k) {
        Some(serde_dynamo::AttributeValue::S(s)) => s.clone(),
        _ => String::new(),
    };
    (get("pk"), get("sk"))
}

impl<S: Store> Aggregator<S> {
    /// Counts each permanent failure of `failed` against its record; a record that has now
    /// failed so [`SET_ASIDE_AFTER`] times is set aside (a repair item written) and no longer
    /// held against the batch; the others join `failed.retry`.
    pub(crate) async fn settle(&self, event: &Event, failed: &mut Failed, counters: &Counters) {
        let role = self.config.role;
        let now = self.config.clock.now();
        let ttl = now.epoch_seconds() + tidemark_store::failures::COUNT_TTL_SECONDS;
        for p in std::mem::take(&mut failed.permanent).into_values() {
            let Some(rec) = event.records.get(p.index) else {
                failed.retry.push(p.index);
                continue;
            };
            tracing::error!(
                role = role_name(role), event_id = %rec.event_id, device = ?p.device,
                kind = p.kind, error = %p.error, "a record failed for good"
            );
            let Some(record) = failed_record(role, rec, &p) else {
                failed.retry.push(p.index);
                continue;
            };
            let n = match self.store.count_failure(&record, &p.error, ttl).await {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(error = %e, "counting a failure failed; the record is retried");
                    failed.retry.push(p.index);
                    continue;
                }
            };
            if n < SET_ASIDE_AFTER {
                failed.retry.push(p.index);
                continue;
            }
            match Box::pin(self.set_aside(rec, &p, now)).await {
                Ok(key) => {
                    Counters::add(&counters.set_aside, 1);
                    tracing::error!(
                        role = role_name(role), event_id = %rec.event_id, device = ?p.device,
                        repair = %key, failures = n, error = %p.error,
                        "record set aside; its rollups or alerts are repaired from the table"
                    );
                }
                Err(e) => {
                    tracing::warn!(error = %e, "writing a repair item failed; the record is retried");
                    failed.retry.push(p.index);
                }
            }
        }
    }

    /// Writes the repair items of `p` (one per [`HOURS_PER_REPAIR`] hours); the first's key.
    async fn set_aside(
        &self,
        rec: &EventRecord,
        p: &Permanent,
        now: Timestamp,
    ) -> Result<Key, AggregatorError> {
        let role = self.config.role;
        let seq = rec.change.sequence_number.clone().unwrap_or_default();
        let (item_pk, item_sk) = item_key(rec);
        let mut first = None;
        for (n, (hours, days)) in repair_parts(p).into_iter().enumerate() {
            let name = if n == 0 {
                seq.clone()
            } else {
                format!("{seq}.{n:04}")
            };
            let record = FailedRecord::new(role_name(role), &name)
                .or_else(|| FailedRecord::new(role_name(role), &format!("unknown.{n:04}")))
                .ok_or_else(|| AggregatorError::Config("a role name is not a key word".into()))?;
            let key = EntityKey::Repair { at: now, record }.key();
            let item = RepairItem {
                pk: key.pk.clone(),
                sk: key.sk.clone(),
                role: role_name(role).to_owned(),
                event_id: rec.event_id.clone(),
                sequence_number: seq.clone(),
                item_pk: tidemark_store::failures::cut(&item_pk),
                item_sk: tidemark_store::failures::cut(&item_sk),
                device_id: p.device.clone(),
                hours,
                days,
                kind: p.kind.to_owned(),
                error: tidemark_store::failures::cut(&p.error),
                function_version: tidemark_store::failures::function_version(),
                set_aside_at: now,
                ttl: now.epoch_seconds() + RepairItem::TTL_SECONDS,
            };
            self.store.put_repair(&item).await?;
            first.get_or_insert(key);
        }
        first.ok_or_else(|| AggregatorError::Config("a set-aside without a repair".into()))
    }

    /// Does the role's open repairs, if this container has not looked for a minute. Not
    /// part of the batch's success: a repair not done now is tried again.
    pub(crate) async fn repair_open(&self, counters: &Counters, stop: tokio::time::Instant) {
        let now = self.config.clock.now();
        {
            let Ok(mut last) = self.repairs_checked.lock() else {
                return;
            };
            if last.is_some_and(|l: Timestamp| {
                now.epoch_millis() - l.epoch_millis() < REPAIR_EVERY_MS
                    && now.epoch_millis() >= l.epoch_millis()
            }) {
                return;
            }
            *last = Some(now);
        }
        let role = role_name(self.config.role);
        let open = match self.store.open_repairs(role, REPAIRS_PER_CHECK).await {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(error = %e, "reading the open repairs failed; the next check tries again");
                return;
            }
        };
        for r in open {
            let done = counters
                .until(stop, guarded(Box::pin(self.repair(&r, counters))))
                .await;
            let key = Key {
                pk: r.pk.clone(),
                sk: r.sk.clone(),
            };
            match done {
                Ok(()) => match self.store.delete_repair(&key).await {
                    Ok(()) => {
                        Counters::add(&counters.repaired, 1);
                        tracing::info!(repair = %key, device = ?r.device_id, "repair done");
                    }
                    Err(e) => {
                        tracing::warn!(repair = %key, error = %e, "deleting a repair done failed")
                    }
                },
                Err(e) => {
                    tracing::warn!(repair = %key, error = %e, "repair failed; tried again later")
                }
            }
        }
    }

    /// One repair, from the table: what the set-aside record's work would have done.
    async fn repair(&self, r: &RepairItem, counters: &Counters) -> Result<(), AggregatorError> {
        let Some(device) = &r.device_id else {
            return Ok(());
        };
        match self.config.role {
            Role::Rollups => self.repair_rollups(device, r, counters).await,
            Role::Alerts => self.repair_alerts(device, r, counters).await,
        }
    }

    /// Recomputes the repair's hours from the table (a placeholder while open), then its
    /// days from their hours, as a batch touching them would.
    async fn repair_rollups(
        &self,
        device: &DeviceId,
        r: &RepairItem,
        counters: &Counters,
    ) -> Result<(), AggregatorError> {
        let now = self.config.clock.now();
        let mut changed: HashMap<Bucket, Vec<HourChange>> = HashMap::new();
        let mut days: BTreeSet<Bucket> = r.days.iter().map(|d| Period::Daily.bucket(*d)).collect();
        for h in &r.hours {
            let hour = Period::Hourly.bucket(*h);
            let plan = AggregatePlan::bare(device, hour);
            let current = self.read_page0(&plan.key).await?;
            let open = !crate::rollups::settled::closed(hour, now);
            let change = Box::pin(self.write_hour(&plan, current, open, counters)).await?;
            let day = Period::Daily.bucket(hour.start());
            days.insert(day);
            changed.entry(day).or_default().push(change);
        }
        // The export holds the closed hours as they were before: it writes them again.
        let late: Vec<Timestamp> = r
            .hours
            .iter()
            .copied()
            .filter(|h| crate::rollups::settled::closed(Period::Hourly.bucket(*h), now))
            .collect();
        if !late.is_empty() {
            self.store.mark_export_dirty(&late, now).await?;
        }
        for day in days {
            let plan = AggregatePlan::bare(device, day);
            let current = self.read_page0(&plan.key).await?;
            if crate::rollups::settled::closed(day, now) {
                // The day's own write may be what failed: fold it from its hours, whatever
                // it holds.
                Box::pin(self.refold_closed_day(&plan, current, counters)).await?;
            } else {
                let hours = changed.get(&day).map_or(&[][..], Vec::as_slice);
                Box::pin(self.write_day(&plan, current, hours, true, counters)).await?;
            }
        }
        Ok(())
    }

    /// Makes the closed day `plan` names the fold of its hourly items, on its version as
    /// read; a lost race reads it again and folds again.
    async fn refold_closed_day(
        &self,
        plan: &AggregatePlan,
        mut current: Option<AggregateItem>,
        counters: &Counters,
    ) -> Result<(), AggregatorError> {
        for attempt in 1..=self.config.max_attempts {
            let puts = self.refold_day(plan, current.take(), counters).await?;
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

    async fn read_page0(&self, key: &Key) -> Result<Option<AggregateItem>, AggregatorError> {
        Ok(self
            .store
            .get_aggregates(std::slice::from_ref(key))
            .await?
            .remove(key))
    }

    /// Re-derives the device's alert rules from the first of the repair's hours, as for a
    /// late or corrected reading, and brings its newest reading in (its `latest`).
    async fn repair_alerts(
        &self,
        device: &DeviceId,
        r: &RepairItem,
        counters: &Counters,
    ) -> Result<(), AggregatorError> {
        let dev = self
            .store
            .get_devices(std::slice::from_ref(device))
            .await?
            .remove(device);
        let mut b = DeviceBatch::default();
        let from = r.hours.first().copied();
        let until = r
            .hours
            .last()
            .map(|h| Period::Hourly.bucket(*h).end_exclusive())
            .and_then(|e| e.pred());
        match (from, until) {
            (Some(from), Some(until)) => {
                let rules = device_rules(
                    dev.as_ref(),
                    &self.config.default_thresholds,
                    &self.config.default_rules,
                );
                let metrics: std::collections::BTreeSet<_> =
                    rules.into_iter().map(|r| r.metric).collect();
                for m in metrics {
                    b.rewritten.insert(m.clone(), from);
                    b.rewritten_until.insert(m.clone(), until);
                }
                let newest = self
                    .store
                    .readings_page(device, from, until, true, 1)
                    .await?;
                b.readings.extend(newest);
            }
            _ => b.thresholds_changed = true,
        }
        Box::pin(self.alert_device(device, &b, dev, counters)).await
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use aws_lambda_events::event::dynamodb::EventRecord;
    use tidemark_schema::{AlertState, Clock, MetricName};

    use super::*;
    use crate::config::parse_thresholds;
    use crate::memory::MemoryStore;
    use crate::report::Report;
    use crate::testing::{device, event, insert, metric};
    use crate::{Aggregator, AggregatorConfig};

    fn t(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    fn aggregator(role: Role, clock: &Clock) -> Aggregator<MemoryStore> {
        let mut config = AggregatorConfig::new("t")
            .with_role(role)
            .with_default_thresholds(
                parse_thresholds(r#"{"t":{"max":30,"severity":"critical"}}"#).unwrap(),
            );
        config.clock = clock.clone();
        config.retry.base_delay = std::time::Duration::from_micros(50);
        Aggregator::with_store(MemoryStore::default(), config)
    }

    /// One reading of `t` per device, all in the 14:00 hour, each its own record.
    fn batch() -> Vec<EventRecord> {
        vec![
            insert(1, "d1", t("2026-04-20T14:00:00Z"), "t", 1.0),
            insert(2, "d2", t("2026-04-20T14:05:00Z"), "t", 50.0),
            insert(3, "d1", t("2026-04-20T14:10:00Z"), "t", 3.0),
            insert(4, "d3", t("2026-04-20T14:15:00Z"), "t", 4.0),
        ]
    }

    /// Delivers `records` as the event-source mapping does: from the first record reported
    /// failed, again, until a batch succeeds or `attempts` run out, the clock moving
    /// `backoff` between attempts. The reports, one per attempt.
    async fn deliver(
        agg: &Aggregator<MemoryStore>,
        clock: &Clock,
        mut records: Vec<EventRecord>,
        attempts: usize,
        backoff_ms: i64,
    ) -> Vec<(Option<String>, Report)> {
        let mut out = Vec::new();
        for _ in 0..attempts {
            let (resp, report) = agg.process_written(&event(records.clone())).await;
            let failed = resp
                .batch_item_failures
                .first()
                .and_then(|f| f.item_identifier.clone());
            out.push((failed.clone(), report));
            let Some(seq) = failed else {
                break;
            };
            let from = records
                .iter()
                .position(|r| r.change.sequence_number.as_deref() == Some(&seq))
                .unwrap();
            records = records.split_off(from);
            clock.set(clock.now().plus_millis(backoff_ms).unwrap());
        }
        out
    }

    fn repairs(agg: &Aggregator<MemoryStore>, role: &str) -> Vec<RepairItem> {
        let pk = tidemark_schema::keys::repair_pk(role);
        agg.store()
            .table
            .scan()
            .into_iter()
            .filter(|i| i.get("pk").and_then(|v| v.as_s().ok()) == Some(&pk))
            .map(|i| tidemark_store::from_item(i).unwrap())
            .collect()
    }

    fn failure_counts(agg: &Aggregator<MemoryStore>) -> usize {
        agg.store()
            .table
            .scan()
            .into_iter()
            .filter(|i| {
                i.get("sk")
                    .and_then(|v| v.as_s().ok())
                    .is_some_and(|sk| sk.starts_with(tidemark_schema::keys::FAILURES_PREFIX))
            })
            .count()
    }

    fn hour_of(agg: &Aggregator<MemoryStore>, d: &str) -> Option<AggregateItem> {
        agg.store().aggregate(&AggregateItem::key_for(
            &device(d),
            Period::Hourly.bucket(t("2026-04-20T14:00:00Z")),
        ))
    }

    fn rollups_differ(agg: &Aggregator<MemoryStore>) -> Vec<String> {
        tidemark_testkit::rollups::differences(&agg.store().table.scan())
    }

    #[test]
    fn a_record_touching_months_is_set_aside_as_small_repairs_covering_every_hour_and_day() {
        let start = t("2026-01-01T00:00:00Z");
        let hours: BTreeSet<Timestamp> = (0..24 * 90)
            .map(|h| start.plus_millis(h * 3_600_000).unwrap())
            .collect();
        let mut days: BTreeSet<Timestamp> = hours
            .iter()
            .map(|h| Period::Daily.bucket(*h).start())
            .collect();
        days.insert(t("2025-12-01T00:00:00Z"));
        let p = Permanent {
            index: 0,
            device: Some(device("d")),
            hours: hours.clone(),
            days: days.clone(),
            kind: "validation",
            error: "e".into(),
        };
        let parts = repair_parts(&p);
        assert_eq!(parts.len(), 45);
        assert!(parts.iter().all(|(h, _)| h.len() <= HOURS_PER_REPAIR));
        let all_hours: BTreeSet<Timestamp> = parts.iter().flat_map(|(h, _)| h.clone()).collect();
        let all_days: BTreeSet<Timestamp> = parts.iter().flat_map(|(_, d)| d.clone()).collect();
        assert_eq!((all_hours, all_days), (hours, days));
        let alone = Permanent {
            hours: BTreeSet::new(),
            ..p
        };
        assert_eq!(repair_parts(&alone).len(), 1);
    }

    #[tokio::test]
    async fn a_300_s_outage_is_retried_for_as_long_as_it_lasts_and_sets_nothing_aside() {
        // GIVEN the rollups role past the hour's close, and the table failing every hourly
        // write (a server error) for 300 s
        let clock = Clock::fixed(t("2026-04-20T16:00:00Z"));
        let agg = aggregator(Role::Rollups, &clock);
        *agg.store().failing.lock().unwrap() = Some("hourly".into());
        // WHEN the batch is delivered and retried every 10 s through the outage
        let during = deliver(&agg, &clock, batch(), 30, 10_000).await;
        // THEN every attempt was reported failed, and nothing was counted or set aside
        assert_eq!(during.len(), 30);
        assert!(during.iter().all(|(f, r)| f.is_some() && r.set_aside == 0));
        assert!(repairs(&agg, "rollups").is_empty());
        assert_eq!(failure_counts(&agg), 0);
        // AND once the table is back the retry lands every rollup exactly
        *agg.store().failing.lock().unwrap() = None;
        let after = deliver(&agg, &clock, batch(), 1, 0).await;
        assert_eq!(after[0].0, None);
        assert!(
            rollups_differ(&agg).is_empty(),
            "{:?}",
            rollups_differ(&agg)
        );
    }

    #[tokio::test]
    async fn a_record_failing_for_good_is_retried_twice_then_set_aside_and_repaired_once_fixed() {
        // GIVEN the rollups role past the hour's close, and DynamoDB refusing every rollup of
        // d2 (a ValidationException: the same write fails the same way for ever)
        let clock = Clock::fixed(t("2026-04-20T16:00:00Z"));
        let agg = aggregator(Role::Rollups, &clock);
        *agg.store().refusing.lock().unwrap() = Some("DEVICE#d2#AGG".into());
        // WHEN the batch is delivered as the mapping does
        let attempts = deliver(&agg, &clock, batch(), 10, 1_000).await;
        // THEN d2's record is reported failed twice, and at the third attempt set aside: the
        // batch succeeds past it
        let failed: Vec<Option<String>> = attempts.iter().map(|(f, _)| f.clone()).collect();
        let d2 = Some("000000000000000000002".to_owned());
        assert_eq!(failed, vec![d2.clone(), d2, None]);
        assert_eq!(attempts[2].1.set_aside, 1);
        assert_eq!(attempts[2].1.metrics().to_json(0)["SetAside"], 1.0);
        // AND a repair item names the record, the device, its hour and day, and the error
        let r = repairs(&agg, "rollups");
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(r[0].sequence_number, "000000000000000000002");
        assert_eq!(r[0].device_id, Some(device("d2")));
        assert_eq!(r[0].hours, vec![t("2026-04-20T14:00:00Z")]);
        assert_eq!(r[0].days, vec![t("2026-04-20T00:00:00Z")]);
        assert_eq!(r[0].kind, "validation");
        assert!(r[0].item_pk.starts_with("DEVICE#d2"), "{:?}", r[0]);
        // AND the records after it were processed
        let count = |d: &str| hour_of(&agg, d).map(|h| h.metrics[&metric("t")].count);
        assert_eq!((count("d1"), count("d3")), (Some(2), Some(1)));
        assert_eq!(count("d2"), None);

        // WHEN the cause is removed and, a minute later, any batch comes
        *agg.store().refusing.lock().unwrap() = None;
        clock.set(clock.now().plus_millis(REPAIR_EVERY_MS).unwrap());
        let next = vec![insert(5, "d9", t("2026-04-20T15:55:00Z"), "t", 1.0)];
        let (resp, report) = agg.process_written(&event(next)).await;
        assert!(resp.batch_item_failures.is_empty());
        // THEN the repair recomputed d2's hour and day from the table, and is gone
        assert_eq!(report.repaired, 1);
        assert_eq!(count("d2"), Some(1));
        assert!(repairs(&agg, "rollups").is_empty());
        assert!(
            rollups_differ(&agg).is_empty(),
            "{:?}",
            rollups_differ(&agg)
        );
    }

    #[tokio::test]
    async fn a_panic_on_one_device_is_caught_set_aside_and_its_alerts_rederived_once_fixed() {
        // GIVEN the alerts role (t above 30 opens a critical alert), and d2's device write
        // panicking (a bug of ours)
        let clock = Clock::fixed(t("2026-04-20T14:20:00Z"));
        let agg = aggregator(Role::Alerts, &clock);
        *agg.store().panicking.lock().unwrap() = Some("DEVICE#d2##METADATA".into());
        // WHEN the batch is delivered as the mapping does
        let attempts = deliver(&agg, &clock, batch(), 10, 1_000).await;
        // THEN the panic fails only d2's record, set aside at the third attempt
        assert_eq!(attempts.len(), 3);
        assert_eq!(attempts[2].0, None);
        let r = repairs(&agg, "alerts");
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(r[0].kind, "panic");
        assert_eq!(r[0].hours, vec![t("2026-04-20T14:00:00Z")]);
        // AND the other devices' records were processed
        assert!(agg.store().device(&device("d1")).is_some());
        assert!(agg.store().device(&device("d3")).is_some());
        assert!(agg.store().device(&device("d2")).is_none());
        assert!(agg.store().alerts().is_empty());

        // WHEN the bug is fixed and, a minute later, any batch comes
        *agg.store().panicking.lock().unwrap() = None;
        clock.set(clock.now().plus_millis(REPAIR_EVERY_MS).unwrap());
        let next = vec![insert(5, "d9", t("2026-04-20T14:21:00Z"), "t", 1.0)];
        let (resp, report) = agg.process_written(&event(next)).await;
        assert!(resp.batch_item_failures.is_empty());
        // THEN d2's alert rules were derived from its stored readings: its 50 opened the
        // alert, and its latest reading is the one set aside
        assert_eq!(report.repaired, 1);
        let alerts = agg.store().alerts();
        assert_eq!(alerts.len(), 1, "{alerts:?}");
        assert_eq!(alerts[0].state, AlertState::Open);
        assert_eq!(alerts[0].device_id, device("d2"));
        let d2 = agg.store().device(&device("d2")).unwrap();
        let latest = d2.latest.unwrap();
        assert_eq!(latest.timestamp, t("2026-04-20T14:05:00Z"));
        assert_eq!(
            latest.metrics,
            BTreeMap::from([(MetricName::new("t").unwrap(), 50.0)])
        );
        assert!(repairs(&agg, "alerts").is_empty());
    }

    #[tokio::test]
    async fn a_day_whose_own_write_failed_for_good_is_folded_again_by_its_repair() {
        // GIVEN the rollups role past the day's close, and DynamoDB refusing d2's daily item
        // only (its hour writes)
        let clock = Clock::fixed(t("2026-04-21T02:00:00Z"));
        let agg = aggregator(Role::Rollups, &clock);
        *agg.store().refusing.lock().unwrap() = Some("DEVICE#d2#AGG#daily".into());
        let attempts = deliver(&agg, &clock, batch(), 10, 1_000).await;
        assert_eq!(attempts.len(), 3);
        let r = repairs(&agg, "rollups");
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(r[0].days, vec![t("2026-04-20T00:00:00Z")]);
        assert!(!rollups_differ(&agg).is_empty(), "d2's day is missing");
        // WHEN the cause is gone and a minute passes
        *agg.store().refusing.lock().unwrap() = None;
        clock.set(clock.now().plus_millis(REPAIR_EVERY_MS).unwrap());
        let next = vec![insert(5, "d9", t("2026-04-21T01:55:00Z"), "t", 1.0)];
        let (_, report) = agg.process_written(&event(next)).await;
        // THEN the day is the fold of its hours, as the table says
        assert_eq!(report.repaired, 1);
        assert!(
            rollups_differ(&agg).is_empty(),
            "{:?}",
            rollups_differ(&agg)
        );
    }

    #[tokio::test]
    async fn a_repair_that_still_fails_stays_and_is_tried_again_a_minute_later() {
        let clock = Clock::fixed(t("2026-04-20T16:00:00Z"));
        let agg = aggregator(Role::Rollups, &clock);
        *agg.store().refusing.lock().unwrap() = Some("DEVICE#d2#AGG".into());
        deliver(&agg, &clock, batch(), 10, 1_000).await;
        assert_eq!(repairs(&agg, "rollups").len(), 1);
        // WHEN a minute later the cause is still there
        clock.set(clock.now().plus_millis(REPAIR_EVERY_MS).unwrap());
        let next = || vec![insert(5, "d9", t("2026-04-20T15:55:00Z"), "t", 1.0)];
        let (resp, report) = agg.process_written(&event(next())).await;
        // THEN the batch is not held up, and the repair stays
        assert!(resp.batch_item_failures.is_empty());
        assert_eq!(report.repaired, 0);
        assert_eq!(repairs(&agg, "rollups").len(), 1);
        // AND a batch within the minute does not look again; the one after does
        *agg.store().refusing.lock().unwrap() = None;
        let (_, report) = agg.process_written(&event(next())).await;
        assert_eq!(report.repaired, 0);
        clock.set(clock.now().plus_millis(REPAIR_EVERY_MS).unwrap());
        let (_, report) = agg.process_written(&event(next())).await;
        assert_eq!(report.repaired, 1);
        assert!(
            rollups_differ(&agg).is_empty(),
            "{:?}",
            rollups_differ(&agg)
        );
    }
}
