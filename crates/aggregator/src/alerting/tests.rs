//! The alerts role over the in-memory store: the situations the issue names, and the
//! property that order, replays and batching never change the outcome. The same situations
//! run against DynamoDB Local in `tests/it/local/alerts_local.rs`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use tidemark_schema::{AlertItem, AlertState, DeviceItem, RulePhase, RuleState, Timestamp};

use super::rules::{Fold, Phase, Rule};
use crate::config::{Role, parse_thresholds};
use crate::memory::MemoryStore;
use crate::report::Report;
use crate::testing::{device, device_modify, event, insert, metric};
use crate::{Aggregator, AggregatorConfig};

const T0: i64 = 1_776_693_600_000_000; // 2026-04-20T14:00:00Z

pub(super) fn at(s: i64) -> Timestamp {
    Timestamp::from_epoch_micros(T0 + s * 1_000_000).unwrap()
}

pub(super) struct Rig {
    pub(super) agg: Aggregator<MemoryStore>,
    seq: AtomicU64,
}

fn rig(thresholds: &str) -> Rig {
    rig_with(
        AggregatorConfig::new("t")
            .with_role(Role::Alerts)
            .with_default_thresholds(parse_thresholds(thresholds).unwrap()),
    )
}

pub(super) fn rig_with(mut config: AggregatorConfig) -> Rig {
    config.retry.base_delay = std::time::Duration::from_micros(50);
    Rig {
        agg: Aggregator::with_store(MemoryStore::default(), config),
        seq: AtomicU64::new(1),
    }
}

impl Rig {
    /// Stores the readings (as ingest does), then hands their stream records over as one batch.
    pub(super) async fn send(&self, readings: &[(i64, f64)]) -> Report {
        self.store(readings);
        self.deliver(readings).await
    }

    pub(super) fn store(&self, readings: &[(i64, f64)]) {
        for (s, v) in readings {
            self.agg.store().put_reading(
                &device("d1"),
                at(*s),
                BTreeMap::from([(metric("t"), *v)]),
            );
        }
    }

    pub(super) async fn deliver(&self, readings: &[(i64, f64)]) -> Report {
        let records = readings
            .iter()
            .map(|(s, v)| {
                insert(
                    self.seq.fetch_add(1, Ordering::SeqCst),
                    "d1",
                    at(*s),
                    "t",
                    *v,
                )
            })
            .collect();
        let (resp, report) = self.agg.process(&event(records)).await;
        assert!(resp.batch_item_failures.is_empty(), "{report:?}");
        report
    }

    pub(super) fn alerts(&self) -> Vec<AlertItem> {
        let mut a: Vec<AlertItem> = self.agg.store().alerts();
        a.sort_by_key(|a| a.opened_at);
        a
    }

    pub(super) fn open_alerts(&self) -> Vec<AlertItem> {
        self.alerts()
            .into_iter()
            .filter(|a| a.state != AlertState::Resolved)
            .collect()
    }

    pub(super) fn device(&self) -> DeviceItem {
        self.agg.store().device(&device("d1")).unwrap()
    }

    /// Gives the device item these thresholds (as `PUT /devices/{id}` does), `updated_at` set.
    fn set_device_thresholds(&self, thresholds: &str, updated_at: Option<Timestamp>) -> DeviceItem {
        let store = self.agg.store();
        let mut dev = store.device(&device("d1")).unwrap_or_else(|| {
            DeviceItem::new(device("d1"), tidemark_schema::DeviceStatus::Active, at(0))
        });
        dev.thresholds = parse_thresholds(thresholds).unwrap();
        dev.updated_at = updated_at.or(dev.updated_at);
        store.put_device(&dev);
        dev
    }

    /// Changes the device's thresholds and delivers the device item's MODIFY record.
    async fn change_thresholds(&self, thresholds: &str, updated_at: Option<Timestamp>) -> Report {
        let before = self.device();
        let after = self.set_device_thresholds(thresholds, updated_at);
        let (_, report) = self
            .agg
            .process(&event(vec![device_modify(99, &before, &after)]))
            .await;
        report
    }

    fn rule_state(&self) -> Option<RuleState> {
        let dev = self.agg.store().device(&device("d1"))?;
        dev.rule_states.get("t-max").cloned()
    }
}

const MAX30: &str = r#"{"t":{"max":30,"severity":"critical"}}"#;

#[tokio::test]
async fn a_late_breach_never_leaves_an_alert_open_when_newer_readings_are_normal() {
    let r = rig(MAX30);
    // GIVEN normal readings, then later normal readings whose device write is deferred
    r.send(&[(0, 20.0), (60, 21.0)]).await;
    let report = r.send(&[(120, 22.0), (180, 23.0)]).await;
    assert_eq!(report.device_writes_deferred, 1);
    // WHEN a store-and-forward breach older than the newest of them arrives
    let report = r.send(&[(150, 40.0)]).await;
    // THEN it is history (opened and resolved by the next reading), never an open alert
    assert!(r.open_alerts().is_empty(), "{:?}", r.alerts());
    assert_eq!(report.alerts_opened, 1);
    let a = &r.alerts()[0];
    assert_eq!((a.opened_at, a.resolved_at), (at(150), Some(at(180))));
    // AND lastSeenAt and latest never moved back to it
    let d = r.device();
    assert_eq!(d.last_seen_at, Some(at(180)));
    assert_eq!(d.latest.unwrap().timestamp, at(180));
}

#[tokio::test]
async fn every_reading_of_a_hot_device_is_evaluated_whichever_shard_commits_first() {
    let r = rig(MAX30);
    // GIVEN four shards' readings, all stored; the spike's shard is processed last
    let shards: [&[(i64, f64)]; 4] = [
        &[(0, 20.0), (4, 20.0)],
        &[(1, 20.0), (5, 20.0)],
        &[(2, 20.0), (6, 20.0)],
        &[(3, 99.0), (7, 20.0)],
    ];
    for s in shards {
        r.store(s);
    }
    for s in shards {
        r.deliver(s).await;
    }
    // THEN the one-reading spike opened an alert, which the next reading resolved
    let alerts = r.alerts();
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!((alerts[0].opened_at, alerts[0].value), (at(3), 99.0));
    assert_eq!(alerts[0].resolved_at, Some(at(4)));
    assert_eq!(r.rule_state().unwrap().mode, RulePhase::Normal);
}

#[tokio::test]
async fn removing_a_threshold_resolves_the_alert_it_opened() {
    let r = rig("{}");
    // GIVEN a device with its own threshold and an open alert
    r.set_device_thresholds(MAX30, None);
    r.send(&[(10, 35.0)]).await;
    assert_eq!(r.open_alerts().len(), 1);
    // WHEN the API removes the threshold (the device item's MODIFY reaches the stream)
    let report = r.change_thresholds("{}", Some(at(20))).await;
    // THEN the alert is resolved at the change and the rule state is gone
    assert_eq!(report.alerts_resolved, 1);
    assert!(r.open_alerts().is_empty());
    assert_eq!(r.alerts()[0].resolved_at, Some(at(20)));
    assert!(r.rule_state().is_none());
}

#[tokio::test]
async fn changing_a_threshold_re_evaluates_its_alert() {
    let r = rig("{}");
    r.set_device_thresholds(MAX30, None);
    r.send(&[(10, 35.0)]).await;
    // WHEN the limit is raised above the value
    r.change_thresholds(r#"{"t":{"max":40,"severity":"critical"}}"#, None)
        .await;
    // THEN the alert of the old limit is resolved and nothing is open under the new one
    assert!(r.open_alerts().is_empty(), "{:?}", r.alerts());
    assert_eq!(r.rule_state().unwrap().threshold.max, Some(40.0));
}

#[tokio::test]
async fn a_value_hovering_at_the_limit_does_not_flap_with_a_deadband() {
    let r = rig(r#"{"t":{"max":30,"deadband":2,"severity":"critical"}}"#);
    r.send(&[(0, 31.0), (1, 29.5), (2, 30.5), (3, 29.0), (4, 30.2)])
        .await;
    assert_eq!(
        r.alerts().len(),
        1,
        "one alert, never resolved and reopened"
    );
    assert_eq!(r.open_alerts().len(), 1);
    r.send(&[(5, 27.9)]).await;
    assert!(r.open_alerts().is_empty());
}

#[tokio::test]
async fn for_seconds_opens_only_when_the_breach_has_lasted() {
    let r = rig(r#"{"t":{"max":30,"forSeconds":60,"severity":"warning"}}"#);
    let report = r.send(&[(0, 31.0), (30, 31.0)]).await;
    assert_eq!(report.alerts_opened, 0);
    assert_eq!(r.rule_state().unwrap().mode, RulePhase::Pending);
    let report = r.send(&[(60, 32.0)]).await;
    assert_eq!(report.alerts_opened, 1);
    let a = &r.open_alerts()[0];
    assert_eq!((a.opened_at, a.breach_count, a.value), (at(60), 3, 32.0));
}

#[tokio::test]
async fn a_late_reading_inside_the_deadband_that_breaks_a_run_closes_the_alert_it_opened() {
    let r = rig(r#"{"t":{"max":30,"deadband":1.5,"forSeconds":30,"severity":"critical"}}"#);
    // GIVEN a breach lasting 30 s, which opened an alert
    r.send(&[(0, 31.0), (30, 31.0)]).await;
    assert_eq!(r.open_alerts().len(), 1);
    // WHEN a reading from between them arrives late, not breaching (though inside the
    // deadband, which by itself would hold an open alert)
    r.send(&[(15, 29.0)]).await;
    // THEN, in time order, the breach never lasted 30 s: nothing is open, a run is pending
    assert!(r.open_alerts().is_empty(), "{:?}", r.alerts());
    let s = r.rule_state().unwrap();
    assert_eq!((s.mode, s.since), (RulePhase::Pending, Some(at(30))));
}

#[tokio::test]
async fn a_replayed_batch_writes_nothing_and_duplicates_nothing() {
    let r = rig(MAX30);
    r.send(&[(0, 20.0), (1, 35.0), (2, 36.0)]).await;
    let before = (r.alerts(), r.device());
    r.seq.store(1, Ordering::SeqCst);
    let report = r.deliver(&[(0, 20.0), (1, 35.0), (2, 36.0)]).await;
    assert_eq!((report.items_written, report.alerts_opened), (0, 0));
    assert_eq!((r.alerts(), r.device()), before);
}

#[tokio::test]
async fn a_normal_batch_on_a_known_device_reads_one_item_and_writes_nothing() {
    let r = rig(MAX30);
    r.send(&[(0, 20.0)]).await;
    let report = r.send(&[(10, 21.0), (20, 22.0)]).await;
    assert_eq!((report.items_written, report.alert_derivations), (0, 0));
}

#[tokio::test]
async fn a_long_hold_is_derived_page_by_page_never_all_at_once() {
    // GIVEN 3 hours at 10 Hz held inside the deadband after a breach (108,000 readings)
    let r = rig(r#"{"t":{"max":30,"deadband":5,"severity":"critical"}}"#);
    r.send(&[(0, 31.0)]).await;
    let hold: Vec<(i64, f64)> = (1..108_000).map(|i| (i, 28.0)).collect();
    r.agg.store().put_readings(
        &device("d1"),
        hold.iter().map(|(s, x)| {
            (
                Timestamp::from_epoch_micros(T0 + s * 100_000).unwrap(),
                BTreeMap::from([(metric("t"), *x)]),
            )
        }),
    );
    r.agg.store().largest_read.store(0, Ordering::SeqCst);
    // WHEN a late reading from the middle arrives (a derivation over the whole hold)
    r.send(&[(5_000, 10.0)]).await;
    // THEN the alert resolved there, and no read held more than a page of readings
    assert_eq!(r.alerts()[0].resolved_at, Some(at(5_000)));
    let largest = r.agg.store().largest_read.load(Ordering::SeqCst);
    assert!(largest <= 2_000, "one read returned {largest} readings");
}

#[tokio::test]
async fn a_late_breach_before_a_snoozed_alert_keeps_its_id_acknowledgement_and_snooze() {
    let r = rig(MAX30);
    // GIVEN an alert opened at 150, acknowledged and snoozed by an operator
    r.send(&[(100, 20.0), (150, 35.0), (160, 36.0)]).await;
    let opened = r.open_alerts();
    assert_eq!(opened.len(), 1);
    let id = opened[0].alert_id.clone();
    {
        let store = r.agg.store();
        let mut a = store
            .alerts()
            .into_iter()
            .find(|a| a.alert_id == id)
            .unwrap();
        a.state = AlertState::Acknowledged;
        a.acknowledged_at = Some(at(170));
        a.snoozed_until = Some(at(3_600));
        store.put_alert(&a);
    }
    // WHEN a late breach at 140 extends the episode backwards
    r.send(&[(140, 33.0)]).await;
    // THEN it is still the one alert, same ID, acknowledged and snoozed, now opened at 140
    let alerts = r.alerts();
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    let a = &alerts[0];
    assert_eq!(a.alert_id, id);
    assert_eq!(a.state, AlertState::Acknowledged);
    assert_eq!(a.snoozed_until, Some(at(3_600)));
    assert_eq!(a.opened_at, at(140));
    assert_eq!(r.rule_state().unwrap().alert, Some(id));
}

#[tokio::test]
async fn a_late_breach_before_a_resolved_episode_adds_no_second_alert() {
    let r = rig(MAX30);
    // GIVEN an episode from 150 resolved at 200
    r.send(&[(100, 20.0), (150, 35.0), (200, 20.0)]).await;
    let before = r.alerts();
    assert_eq!(before.len(), 1);
    // WHEN a late breach at 140 belongs to the same episode
    r.send(&[(140, 33.0)]).await;
    // THEN the episode keeps its one alert, as it was
    assert_eq!(r.alerts(), before);
}

/// A MODIFY of d1's reading at `s` (metric `t`) from `old` to `new`, as a correction gives.
fn correction(
    seq: u64,
    s: i64,
    old: f64,
    new: f64,
) -> aws_lambda_events::event::dynamodb::EventRecord {
    let image = |v: f64| {
        let mut r = crate::testing::insert(seq, "d1", at(s), "t", v);
        std::mem::take(&mut r.change.new_image)
    };
    let mut r = crate::testing::insert(seq, "d1", at(s), "t", new);
    r.change.old_image = image(old);
    r.change.new_image = image(new);
    r.event_name = "MODIFY".into();
    r
}

#[tokio::test]
async fn a_correction_that_removes_an_episodes_end_reopens_its_alert_keeping_id_acknowledgement_and_snooze()
 {
    let r = rig(MAX30);
    // GIVEN an episode from 150 resolved at 200, acknowledged and snoozed by an operator
    r.send(&[(100, 20.0), (150, 35.0), (200, 20.0)]).await;
    let before = r.alerts();
    assert_eq!(before.len(), 1);
    assert_eq!(before[0].resolved_at, Some(at(200)));
    let id = before[0].alert_id.clone();
    {
        let mut a = before[0].clone();
        a.acknowledged_at = Some(at(170));
        a.snoozed_until = Some(at(3_600));
        r.agg.store().put_alert(&a);
    }
    // WHEN the reading that ended it is corrected into a breach
    r.store(&[(200, 36.0)]);
    let (resp, report) = r
        .agg
        .process(&event(vec![correction(500, 200, 20.0, 36.0)]))
        .await;
    assert!(resp.batch_item_failures.is_empty(), "{report:?}");
    // THEN the episode never ended: its one alert is open again, same ID, acknowledgement and
    // snooze kept, its resolution gone and its peak grown
    let alerts = r.alerts();
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    let a = &alerts[0];
    assert_eq!(a.alert_id, id);
    assert_eq!(a.state, AlertState::Acknowledged);
    assert_eq!(a.resolved_at, None);
    assert_eq!(a.acknowledged_at, Some(at(170)));
    assert_eq!(a.snoozed_until, Some(at(3_600)));
    assert_eq!((a.opened_at, a.value), (at(150), 36.0));
    assert!(a.gsi1pk.is_some() && a.gsi1sk.is_some(), "{a:?}");
    // AND the rule state is open on it
    let s = r.rule_state().unwrap();
    assert_eq!((s.mode, s.alert), (RulePhase::Open, Some(id)));
    // AND the next normal reading resolves it again
    r.send(&[(250, 20.0)]).await;
    assert!(r.open_alerts().is_empty(), "{:?}", r.alerts());
    assert_eq!(r.alerts()[0].resolved_at, Some(at(250)));
    assert_eq!(r.rule_state().unwrap().mode, RulePhase::Normal);
}

#[tokio::test]
async fn a_changed_threshold_applies_from_the_newest_reading_and_never_replays_history() {
    let r = rig("{}");
    r.set_device_thresholds(MAX30, None);
    // GIVEN history with two episodes over 30, and readings of 25 that were normal
    r.send(&[
        (0, 25.0),
        (10, 35.0),
        (20, 25.0),
        (30, 36.0),
        (40, 25.0),
        (50, 26.0),
    ])
    .await;
    assert_eq!(r.alerts().len(), 2);
    // WHEN the limit is lowered to 24 (every reading of the history would have breached)
    r.change_thresholds(r#"{"t":{"max":24,"severity":"critical"}}"#, None)
        .await;
    // THEN the past is left as decided: one new alert, opened by the newest reading
    let alerts = r.alerts();
    assert_eq!(alerts.len(), 3, "{alerts:?}");
    let open = r.open_alerts();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].opened_at, at(50));
    assert_eq!(open[0].threshold, 24.0);
}

impl Rig {
    /// Adds readings to the table directly (history too long to store one by one).
    fn extend_history(&self, readings: impl Iterator<Item = (i64, f64)>) {
        self.agg.store().put_readings(
            &device("d1"),
            readings.map(|(s, x)| (at(s), BTreeMap::from([(metric("t"), x)]))),
        );
    }

    fn readings_read(&self) -> usize {
        self.agg.store().readings_read.swap(0, Ordering::SeqCst)
    }
}

fn rig_with_budget(thresholds: &str, max_forward: u64) -> Rig {
    let mut r = rig(thresholds);
    let mut config = r.agg.config().clone();
    config.scan.max_forward = max_forward;
    r.agg = Aggregator::with_store(MemoryStore::default(), config);
    r
}

#[tokio::test]
async fn a_late_breach_in_a_long_history_reads_only_the_readings_around_it() {
    // GIVEN 100,000 normal readings a second apart
    let r = rig(MAX30);
    r.send(&[(0, 20.0)]).await;
    r.extend_history((1..100_000).map(|s| (s, 20.0)));
    r.send(&[(100_000, 21.0)]).await;
    r.readings_read();
    // WHEN a breach from the middle of it arrives late
    r.send(&[(50_000, 40.0)]).await;
    // THEN it is one resolved alert, ended by the reading after it
    let alerts = r.alerts();
    assert_eq!(alerts.len(), 1);
    assert_eq!(alerts[0].resolved_at, Some(at(50_001)));
    assert!(r.open_alerts().is_empty());
    // AND the derivation read the readings around it, not the 50,000 after it
    let read = r.readings_read();
    assert!(read < 5_000, "read {read} readings");
}

#[tokio::test]
async fn a_late_change_and_a_new_breach_far_apart_are_both_derived_within_the_budget() {
    // GIVEN 100,000 normal readings, and a derivation budget of 1,000 readings forwards
    let r = rig_with_budget(MAX30, 1_000);
    r.send(&[(0, 20.0)]).await;
    r.extend_history((1..100_000).map(|s| (s, 20.0)));
    r.send(&[(100_000, 21.0)]).await;
    r.readings_read();
    // WHEN one batch brings a late breach from near the start and a new breach
    r.send(&[(10, 40.0), (100_001, 41.0)]).await;
    // THEN the late one is a resolved alert and the new one is open: both exact
    let alerts = r.alerts();
    assert_eq!(alerts.len(), 2, "{alerts:?}");
    assert_eq!(
        (alerts[0].opened_at, alerts[0].resolved_at),
        (at(10), Some(at(11)))
    );
    assert_eq!(r.open_alerts()[0].opened_at, at(100_001));
    // AND nothing near the 100,000 readings between them was read
    let read = r.readings_read();
    assert!(read < 10_000, "read {read} readings");
}

#[tokio::test]
async fn a_changed_threshold_on_a_long_history_reads_a_few_readings() {
    let r = rig("{}");
    r.set_device_thresholds(MAX30, None);
    // GIVEN a breach long ago, then 100,000 normal readings that changed nothing
    r.send(&[(0, 20.0), (1, 35.0), (2, 20.0)]).await;
    r.extend_history((3..100_000).map(|s| (s, 25.0)));
    r.readings_read();
    // WHEN the limit is lowered below the newest value
    r.change_thresholds(r#"{"t":{"max":24,"severity":"critical"}}"#, None)
        .await;
    // THEN the newest reading opens the alert, and the derivation read a few readings
    assert_eq!(r.open_alerts()[0].opened_at, at(99_999));
    let read = r.readings_read();
    assert!(read < 100, "read {read} readings");
}

/// A store-and-forward upload: `n` readings a second apart, alternating above and below 30.
fn alternating(n: i64) -> Vec<(i64, f64)> {
    (0..n)
        .map(|i| (i, if i % 2 == 0 { 35.0 } else { 25.0 }))
        .collect()
}

#[tokio::test]
async fn an_upload_of_three_hundred_episodes_is_written_in_transactions_of_at_most_a_hundred() {
    // GIVEN a device that uploads 600 buffered readings, each breach ended by the next reading
    let r = rig(MAX30);
    // WHEN they arrive in one batch (the memory store refuses a transaction past 100 actions, as
    // DynamoDB does)
    let report = r.send(&alternating(600)).await;
    // THEN every episode is one resolved alert, and the device moved on
    let alerts = r.alerts();
    assert_eq!(alerts.len(), 300);
    assert!(r.open_alerts().is_empty());
    assert_eq!(report.alerts_opened, 300);
    assert_eq!(r.device().last_seen_at, Some(at(599)));
    assert_eq!(r.rule_state().map(|s| s.mode), Some(RulePhase::Normal));
}

#[tokio::test]
async fn a_crash_between_alert_transactions_is_finished_by_the_retry_without_a_duplicate() {
    let r = rig(MAX30);
    let readings = alternating(600);
    r.store(&readings);
    // GIVEN the device's own transaction (the last one) fails once, after the alerts ahead of
    // it were written
    r.agg.store().failing_commits.store(1, Ordering::SeqCst);
    let records: Vec<_> = readings
        .iter()
        .map(|(s, v)| insert(r.seq.fetch_add(1, Ordering::SeqCst), "d1", at(*s), "t", *v))
        .collect();
    let (resp, _) = r.agg.process(&event(records.clone())).await;
    assert_eq!(resp.batch_item_failures.len(), 1);
    let written_before_crash = r.alerts().len();
    assert!(written_before_crash > 0 && written_before_crash < 300);
    // WHEN Lambda retries the batch
    let (resp, _) = r.agg.process(&event(records)).await;
    // THEN every episode is there exactly once, and the rule state knows it
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(r.alerts().len(), 300);
    assert!(r.open_alerts().is_empty());
    assert_eq!(r.rule_state().map(|s| s.mode), Some(RulePhase::Normal));
}

#[tokio::test]
async fn a_late_reading_that_splits_off_an_episodes_later_part_gives_that_part_an_alert_of_its_own()
{
    let r = rig(MAX30);
    // GIVEN an alert opened at 589 s, whose episode a late breach moved back to 531 s
    r.send(&[(589, 31.0)]).await;
    r.send(&[(531, 33.0)]).await;
    let first = r.alerts();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].opened_at, at(531));
    // WHEN a late normal reading at 532 s splits the episode in two
    r.send(&[(532, 26.0)]).await;
    // THEN the first alert ends at 532 s and the part from 589 s is open under an alert of
    // its own, though the ID its start would make is the first alert's
    let alerts = r.alerts();
    let states: Vec<_> = alerts
        .iter()
        .map(|a| (a.opened_at, a.resolved_at, a.alert_id == first[0].alert_id))
        .collect();
    assert_eq!(
        states,
        vec![(at(531), Some(at(532)), true), (at(589), None, false)]
    );
    assert_eq!(r.rule_state().map(|s| s.mode), Some(RulePhase::Open));
}

pub(super) type Batch = Vec<(i64, f64)>;

/// Readings (seconds, values rounded to `step`) as the table holds them (one per second: the
/// last sent wins), and cut into batches by `cuts` in the delivery order `order` draws.
pub(super) fn batches_of(
    values: &[(i64, f64)],
    step: f64,
    cuts: &[usize],
    order: &[u16],
) -> (BTreeMap<i64, f64>, Vec<Batch>) {
    let mut table: BTreeMap<i64, f64> = BTreeMap::new();
    let mut sent: Vec<(i64, f64)> = Vec::new();
    for (s, v) in values {
        let v = (v / step).round() * step;
        table.insert(*s, v);
        sent.push((*s, v));
    }
    sent.retain(|(s, v)| table[s] == *v);
    sent.dedup_by_key(|(s, _)| *s);
    let mut batches: Vec<Batch> = Vec::new();
    let mut rest = &sent[..];
    for c in cuts.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let n = (*c).min(rest.len());
        batches.push(rest[..n].to_vec());
        rest = &rest[n..];
    }
    let mut idx: Vec<usize> = (0..batches.len()).collect();
    idx.sort_by_key(|i| order[*i % order.len()]);
    (table, idx.into_iter().map(|i| batches[i].clone()).collect())
}

/// The states the readings sorted by time give, per the rules' own fold.
fn expected(thresholds: &str, readings: &BTreeMap<i64, f64>) -> Phase {
    let th = parse_thresholds(thresholds).unwrap();
    let rule = Rule::of(&metric("t"), &th[&metric("t")]).remove(0);
    let mut f = Fold::new(rule, Phase::Normal);
    for (s, v) in readings {
        f.step(at(*s), *v);
    }
    f.phase
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Random readings around the limit, cut into batches, delivered in random order (disorder
    /// and late data), some batches twice (replays) and some bisected: the final state is
    /// the one of the readings sorted by time.
    #[test]
    fn final_alert_states_equal_those_of_the_readings_sorted_by_time(
        values in proptest::collection::vec((0i64..600, 25.0f64..35.0), 1..40),
        cuts in proptest::collection::vec(1usize..6, 1..20),
        order in proptest::collection::vec(any::<u16>(), 40),
        replays in proptest::collection::vec(any::<bool>(), 40),
        rules in prop_oneof![
            Just(MAX30),
            Just(r#"{"t":{"max":30,"deadband":2,"severity":"critical"}}"#),
            Just(r#"{"t":{"max":30,"forSeconds":60,"severity":"critical"}}"#),
            Just(r#"{"t":{"max":30,"deadband":1.5,"forSeconds":30,"severity":"critical"}}"#),
        ],
    ) {
        let (table, batches) = batches_of(&values, 0.25, &cuts, &order);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let r = rig(rules);
            // every reading is in the table before its record is delivered
            for b in &batches { r.store(b); }
            for (k, b) in batches.iter().enumerate() {
                r.deliver(b).await;
                if replays[k % replays.len()] {
                    r.deliver(&b[..b.len().div_ceil(2)]).await;
                }
            }
            let want = expected(rules, &table);
            let rule_state = r.rule_state();
            let mode = rule_state.as_ref().map_or(RulePhase::Normal, |s| s.mode);
            let open = r.open_alerts();
            match &want {
                Phase::Normal => {
                    prop_assert_eq!(mode, RulePhase::Normal);
                    prop_assert!(open.is_empty(), "{:?}", open);
                }
                Phase::Pending { since, .. } => {
                    prop_assert_eq!(mode, RulePhase::Pending);
                    prop_assert_eq!(rule_state.unwrap().since, Some(*since));
                    prop_assert!(open.is_empty(), "{:?}", open);
                }
                Phase::Open(e) => {
                    prop_assert_eq!(mode, RulePhase::Open);
                    prop_assert_eq!(open.len(), 1, "{:?}", open);
                    prop_assert_eq!(open[0].opened_at, e.opened_at);
                }
            }
            Ok(())
        })?;
    }
}
