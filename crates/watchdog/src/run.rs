//! One watchdog run, over the store operations it needs ([`WatchStore`], in `store.rs`) and the pipeline
//! ([`Heartbeats`]); see the crate docs for the rule.

use futures::StreamExt;
use tidemark_schema::keys::{self, ShardName};
use tidemark_schema::{
    AlertId, AlertItem, AlertRule, AlertState, DeviceId, DeviceItem, EntityKey, GroupMeasure,
    GroupRuleSpec, GroupRuleStateItem, GroupSignal, HeartbeatItem, Severity, Timestamp,
    fold_minutes,
};
use tidemark_store::StoreError;

use crate::groups::{GroupStep, hours_of, judge, window_measure, window_span};
use crate::{Heartbeats, Report, WatchStore, WatchdogConfig, WatchdogError};

/// What one due device came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    Opened,
    Postponed,
    Unwatched,
    /// Not due any more, offline already, or gone.
    Nothing,
    Lost,
}

pub struct Watchdog<S, P> {
    pub store: S,
    pub pipeline: P,
    pub config: WatchdogConfig,
}

fn plus_seconds(t: Timestamp, s: u32) -> Timestamp {
    t.plus_millis(i64::from(s) * 1000).unwrap_or(Timestamp::MAX)
}

/// The offline alert of `dev`, silent since `since`, with window `window`: opened at its
/// deadline, whose time names it, with the device's tags (its events route by them).
pub fn offline_alert(dev: &DeviceItem, window: u32, since: Timestamp) -> AlertItem {
    let deadline = plus_seconds(since, window);
    let id = AlertId::for_offline(deadline);
    let severity = dev.offline_severity.unwrap_or(Severity::Warning);
    let key = EntityKey::Alert {
        device: dev.device_id.clone(),
        alert: id.clone(),
    }
    .key();
    AlertItem {
        gsi1pk: Some(keys::severity_gsi1pk(severity, &key.pk)),
        pk: key.pk,
        sk: key.sk,
        gsi1sk: Some(keys::alert_gsi1sk(&id)),
        device_id: dev.device_id.clone(),
        alert_id: id,
        metric: None,
        rule: AlertRule::Offline,
        rule_spec: None,
        severity,
        state: AlertState::Open,
        message: format!("no reading arrived for {window} s"),
        value: f64::from(window),
        threshold: f64::from(window),
        breach_count: 1,
        opened_at: deadline,
        last_breach_at: deadline,
        acknowledged_at: None,
        resolved_at: None,
        snoozed_until: None,
        tags: dev.tags.clone(),
    }
}

/// A group rule not judged this run (another run changed it first, or the table failed):
/// judged again next run.
struct GroupLost;

impl<S: WatchStore, P: Heartbeats> Watchdog<S, P> {
    pub fn new(store: S, pipeline: P, config: WatchdogConfig) -> Self {
        Watchdog {
            store,
            pipeline,
            config,
        }
    }

    /// One run; `deadline` (the invocation's) bounds the wait for heartbeats and the
    /// decisions (what is not decided is still due at the next run).
    pub async fn run(&self, deadline: tokio::time::Instant) -> Result<Report, WatchdogError> {
        let sent = self.config.clock.now();
        let mut report = Report::default();
        let shards = match self.pipeline.send(sent).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "heartbeats not sent: nothing is decided this run");
                return Ok(self.finish(report));
            }
        };
        report.shards = shards.len();
        let (watermark, passed, rollups) = self.watermark(&shards, sent, deadline).await?;
        report.watermark = watermark;
        report.heartbeat_passed = passed;
        report.rollups_watermark = rollups;
        let Some(watermark) = watermark else {
            return Ok(self.finish(report));
        };
        let mut due = Vec::new();
        for p in keys::watch_gsi2pks() {
            let left = self.config.max_devices.saturating_sub(due.len());
            if left == 0 {
                break;
            }
            due.extend(self.store.due(&p, watermark, left).await?);
        }
        report.due = due.len() as u64;
        let decisions = futures::stream::iter(due)
            .map(|id| async move {
                let d = tokio::time::timeout_at(deadline, self.decide(&id, watermark)).await;
                (id, d)
            })
            .buffer_unordered(self.config.concurrency.max(1))
            .collect::<Vec<_>>()
            .await;
        for (id, d) in decisions {
            match d {
                Ok(Ok(Decision::Opened)) => report.opened += 1,
                Ok(Ok(Decision::Postponed)) => report.postponed += 1,
                Ok(Ok(Decision::Unwatched)) => report.unwatched += 1,
                Ok(Ok(Decision::Lost)) => report.lost += 1,
                Ok(Ok(Decision::Nothing)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(device = %id, error = %e, "device not decided: due again next run");
                    report.failed += 1;
                }
                Err(_) => report.failed += 1,
            }
        }
        // After the offline decisions, so the counts hold the alerts this run opened.
        let now = self.config.clock.now();
        for rule in &self.config.group_rules {
            match self.judge_group(rule, now, rollups).await {
                Ok(Some(step)) => {
                    report.group_opened += u64::from(step.open.is_some());
                    report.group_resolved += u64::from(step.resolve.is_some());
                }
                Ok(None) => {}
                Err(GroupLost) => report.group_lost += 1,
            }
        }
        Ok(self.finish(report))
    }

    /// What `rule` measures now, and the instant it is judged at: an `offlineFraction` at
    /// `now`, a window at the end of its whole minutes before the rollups watermark (`None`
    /// without one: not judged this run).
    async fn measure(
        &self,
        rule: &GroupRuleSpec,
        now: Timestamp,
        rollups: Option<Timestamp>,
    ) -> Result<Option<(GroupMeasure, Timestamp)>, StoreError> {
        match &rule.signal {
            GroupSignal::OfflineFraction => {
                let counts = self.store.group_counts(&rule.group).await?;
                Ok(Some((counts.into(), now)))
            }
            GroupSignal::Window {
                metric,
                aggregate,
                window_seconds,
            } => {
                let Some((from, to)) = rollups.and_then(|m| window_span(*window_seconds, m)) else {
                    return Ok(None);
                };
                let mut parts = Vec::new();
                for hour in hours_of(from, to) {
                    let items = self.store.group_partials(&rule.group, hour).await?;
                    parts.extend(items.into_iter().map(|p| (hour, p)));
                }
                let folded = fold_minutes(parts.iter().map(|(h, p)| (*h, p)), metric, from, to);
                Ok(Some((window_measure(*aggregate, folded), to)))
            }
        }
    }

    /// Judges one group rule; `Ok(Some)` with what it wrote.
    async fn judge_group(
        &self,
        rule: &GroupRuleSpec,
        now: Timestamp,
        rollups: Option<Timestamp>,
    ) -> Result<Option<GroupStep>, GroupLost> {
        let run = async {
            let Some((measure, at)) = self.measure(rule, now, rollups).await? else {
                return Ok(None);
            };
            let state = self
                .store
                .group_rule_state(rule)
                .await?
                .unwrap_or_else(|| GroupRuleStateItem::new(rule));
            let Some(step) = judge(rule, &state, measure, at) else {
                return Ok(None);
            };
            if !self.store.commit_group(rule, &step, at).await? {
                return Err(None);
            }
            if let Some(a) = &step.open {
                tracing::info!(group = %rule.group, alert = %a.alert_id, measure = ?measure, "group alert opened");
            }
            Ok::<_, Option<StoreError>>(Some(step))
        };
        run.await.map_err(|e| {
            if let Some(e) = e {
                tracing::warn!(group = %rule.group, error = %e, "group rule not judged: next run");
            }
            GroupLost
        })
    }

    fn finish(&self, mut report: Report) -> Report {
        let (r, w) = self.store.units();
        report.read_units = r;
        report.write_units = w;
        report
    }

    /// The oldest heartbeat every shard in `shards` has passed, waiting (until the configured
    /// wait or `deadline`) for the one sent at `sent`; whether it came; and the oldest the
    /// rollups role has passed on every shard (not waited for: it batches for minutes).
    async fn watermark(
        &self,
        shards: &[ShardName],
        sent: Timestamp,
        deadline: tokio::time::Instant,
    ) -> Result<(Option<Timestamp>, bool, Option<Timestamp>), WatchdogError> {
        let until = (tokio::time::Instant::now() + self.config.heartbeat_wait).min(deadline);
        loop {
            let items = self.store.heartbeats().await?;
            let oldest = |mark: fn(&HeartbeatItem) -> Option<Timestamp>| {
                let marks: Option<Vec<Timestamp>> = shards
                    .iter()
                    .map(|s| {
                        let key = EntityKey::Heartbeat(s.clone()).key();
                        items.iter().find(|h| h.sk == key.sk).and_then(mark)
                    })
                    .collect();
                marks.and_then(|m| m.into_iter().min())
            };
            let watermark = oldest(|h| h.passed_at);
            let rollups = oldest(|h| h.rollups_passed_at);
            let all_passed = watermark.is_some_and(|w| w >= sent);
            if all_passed || shards.is_empty() {
                return Ok((watermark, all_passed, rollups));
            }
            if tokio::time::Instant::now() + self.config.heartbeat_poll >= until {
                return Ok((watermark, false, rollups));
            }
            tokio::time::sleep(self.config.heartbeat_poll).await;
        }
    }

    async fn decide(&self, id: &DeviceId, watermark: Timestamp) -> Result<Decision, WatchdogError> {
        let Some(dev) = self.store.device(id).await? else {
            return Ok(Decision::Nothing);
        };
        let Some(window) = dev.offline_after(self.config.offline_after_default) else {
            return Ok(if self.store.unwatch(&dev).await? {
                Decision::Unwatched
            } else {
                Decision::Lost
            });
        };
        let (Some(check), Some(known), None) =
            (dev.watch_check(), dev.last_arrival_at, dev.offline.as_ref())
        else {
            return Ok(Decision::Nothing);
        };
        if check > watermark {
            return Ok(Decision::Nothing);
        }
        // Arrivals the alerts role has not written down are on the readings stored since the
        // newest one it knows of.
        let stored = match dev.last_seen_at {
            Some(since) => self.store.newest_arrival(id, since).await?,
            None => None,
        };
        let arrived = stored.map_or(known, |s| s.max(known));
        let deadline = plus_seconds(arrived, window);
        if deadline > watermark {
            let moved = self.store.postpone(&dev, arrived, deadline).await?;
            return Ok(if moved {
                Decision::Postponed
            } else {
                Decision::Lost
            });
        }
        let alert = offline_alert(&dev, window, arrived);
        if !self.store.open(&dev, &alert, arrived).await? {
            return Ok(Decision::Lost);
        }
        tracing::info!(device = %id, alert = %alert.alert_id, since = %arrived, "device offline");
        Ok(Decision::Opened)
    }
}

#[cfg(test)]
mod tests {
    //! [`Watchdog::run`] over the in-memory store ([`crate::MemoryStore`]), its heartbeats
    //! passed at once by a stand-in for the pipeline: the decisions the DynamoDB tests
    //! (`crates/watchdog/tests/it/local/watchdog_local.rs`) check, with the run's logic only.

    use std::collections::BTreeMap;
    use std::time::Duration;

    use tidemark_schema::keys::{self, ShardName};
    use tidemark_schema::{
        Clock, DeviceId, DeviceItem, DeviceStatus, EntityKey, HeartbeatItem, Layout, LayoutHistory,
        LayoutHistoryItem, MetricName, Reading, ReadingItem, SlotLen, Timestamp,
    };
    use tidemark_store::write::slots::{SlotKey, SlotWriter};

    use super::*;
    use crate::{MemoryStore, WatchStore};

    const WINDOW: u32 = 300;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    fn id(s: &str) -> DeviceId {
        DeviceId::new(s).unwrap()
    }

    /// The readings stream, one shard: the heartbeat passes the moment it is sent (ingest and
    /// the alerts role have caught up), or, `stalled`, is never seen passing.
    struct Pipeline {
        table: MemoryStore,
        stalled: bool,
        /// Whether the rollups role marks the heartbeats too.
        rollups: bool,
    }

    impl Heartbeats for Pipeline {
        async fn send(&self, at: Timestamp) -> Result<Vec<ShardName>, WatchdogError> {
            let shard = ShardName::new("shardId-000000000000").unwrap();
            let key = EntityKey::Heartbeat(shard.clone()).key();
            let passed = (!self.stalled).then_some(at);
            self.table.put_entity(&HeartbeatItem {
                pk: key.pk,
                sk: key.sk,
                sent_at: at,
                stored_at: passed,
                passed_at: passed,
                rollups_passed_at: passed.filter(|_| self.rollups),
            })?;
            Ok(vec![shard])
        }
    }

    /// A watchdog at `now` over a fresh in-memory table, never waiting for a heartbeat.
    fn watchdog(now: Timestamp, stalled: bool) -> Watchdog<MemoryStore, Pipeline> {
        let store = MemoryStore::new();
        let pipeline = Pipeline {
            table: store.clone(),
            stalled,
            rollups: true,
        };
        Watchdog::new(
            store,
            pipeline,
            WatchdogConfig {
                heartbeat_wait: Duration::ZERO,
                clock: Clock::fixed(now),
                ..WatchdogConfig::new("t", "readings")
            },
        )
    }

    /// A device watched with `WINDOW`, its last arrival (and newest reading) at `arrived`.
    fn watched(name: &str, arrived: Timestamp) -> DeviceItem {
        let mut d = DeviceItem::new(id(name), DeviceStatus::Active, arrived);
        d.offline_after_seconds = Some(WINDOW);
        d.last_arrival_at = Some(arrived);
        d.last_seen_at = Some(arrived);
        d.version = Some(3);
        d.gsi2pk = Some(keys::watch_gsi2pk(&d.device_id));
        d.gsi2sk = Some(keys::watch_gsi2sk(
            arrived.plus_millis(i64::from(WINDOW) * 1000).unwrap(),
        ));
        d
    }

    fn reading(name: &str, at: Timestamp, metrics: &[(&str, f64)]) -> Reading {
        Reading {
            device_id: id(name),
            timestamp: at,
            metrics: metrics
                .iter()
                .map(|(k, v)| (MetricName::new(k).unwrap(), *v))
                .collect(),
            metadata: None,
        }
    }

    /// Stores `r` as a single reading item, arrived at `arrived`.
    fn store_single(w: &Watchdog<MemoryStore, Pipeline>, r: &Reading, arrived: Timestamp) {
        let mut item = ReadingItem::new(r, None, 30);
        item.arrived_at = Some(arrived);
        w.store.put_entity(&item).unwrap();
    }

    async fn run(w: &Watchdog<MemoryStore, Pipeline>) -> Report {
        w.run(tokio::time::Instant::now() + Duration::from_secs(30))
            .await
            .unwrap()
    }

    fn device(w: &Watchdog<MemoryStore, Pipeline>, name: &str) -> DeviceItem {
        w.store
            .stored_device(&id(name))
            .unwrap()
            .expect("the device")
    }

    #[tokio::test]
    async fn a_device_silent_past_its_window_gets_exactly_one_offline_alert() {
        // GIVEN a device silent since 14:00 (due at 14:05) and one heard from at 14:09
        let w = watchdog(ts("2026-04-20T14:10:00Z"), false);
        w.store
            .put_entity(&watched("silent", ts("2026-04-20T14:00:00Z")))
            .unwrap();
        w.store
            .put_entity(&watched("healthy", ts("2026-04-20T14:09:00Z")))
            .unwrap();

        // WHEN the watchdog runs at 14:10
        let first = run(&w).await;

        // THEN the silent one, alone due, gets its alert, named by its deadline, and leaves
        // the watch for the offline partition
        assert_eq!(
            (first.due, first.opened, first.failed),
            (1, 1, 0),
            "{first:?}"
        );
        let d = device(&w, "silent");
        let state = d.offline.expect("offline");
        assert_eq!(state.alert.as_str(), "20260420T140500000000Z-offline");
        assert_eq!(state.since, ts("2026-04-20T14:00:00Z"));
        assert_eq!(d.gsi2pk, Some(keys::offline_gsi2pk(&d.device_id)));
        assert_eq!(d.version, Some(4));
        let alerts = w.store.alerts(&id("silent")).await.unwrap();
        assert_eq!(alerts.len(), 1);
        assert_eq!(alerts[0].alert_id, state.alert);
        assert!(device(&w, "healthy").offline.is_none());
        assert!(w.store.alerts(&id("healthy")).await.unwrap().is_empty());
        // AND a second run finds nothing due and opens nothing
        let second = run(&w).await;
        assert_eq!((second.due, second.opened), (0, 0), "{second:?}");
        assert_eq!(w.store.alerts(&id("silent")).await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_group_window_rule_is_judged_up_to_the_rollups_mark_and_not_without_one() {
        // GIVEN "site:A's hottest reading over 5 minutes above 40", and a rollups partial of
        // 14:00 holding one 45 at 14:05
        let site = tidemark_schema::Tag::parse("site:A").unwrap();
        let rule = tidemark_schema::GroupRuleSpec::from_value(&serde_json::json!(
            {"group":"site:A","metric":"temperature","aggregate":"max","window":"5m","above":40}
        ))
        .unwrap();
        let hour = ts("2026-04-20T14:00:00Z");
        let key = tidemark_schema::GroupPartialItem::key(&site, hour, "49600000000000000001");
        let metric = tidemark_schema::MetricName::new("temperature").unwrap();
        let minute = tidemark_schema::Minute::of(ts("2026-04-20T14:05:10Z"));
        let partial = tidemark_schema::GroupPartialItem {
            pk: key.pk,
            sk: key.sk,
            added: [(
                metric.clone(),
                tidemark_schema::Stats::at_sketched(hour, 45.0),
            )]
            .into(),
            removed: BTreeMap::new(),
            added_minutes: [(
                metric,
                [(minute, tidemark_schema::MinuteStats::of(45.0))].into(),
            )]
            .into(),
            removed_minutes: BTreeMap::new(),
            ttl: 0,
        };
        let mut w = watchdog(ts("2026-04-20T14:08:30Z"), false);
        w.config.group_rules = vec![rule.clone()];
        w.store.put_entity(&partial).unwrap();
        // WHEN the watchdog runs at 14:08:30 before the rollups role has marked a heartbeat
        w.pipeline.rollups = false;
        let r = run(&w).await;
        // THEN the rule is not judged: without the mark the partials may lack readings
        assert_eq!((r.rollups_watermark, r.group_opened), (None, 0), "{r:?}");
        // WHEN the rollups role has come as far: the window [14:03, 14:08) holds the 45
        w.pipeline.rollups = true;
        let r = run(&w).await;
        assert_eq!(r.group_opened, 1, "{r:?}");
        let state = w.store.group_rule_state(&rule).await.unwrap().unwrap();
        assert_eq!(
            state.alert.unwrap().as_str(),
            format!("20260420T140800000000Z-group.{}", rule.tag())
        );
        // AND at 14:11:10 the window [14:06, 14:11) holds no reading: resolved
        w.config.clock = Clock::fixed(ts("2026-04-20T14:11:10Z"));
        let r = run(&w).await;
        assert_eq!(r.group_resolved, 1, "{r:?}");
    }

    #[tokio::test]
    async fn a_group_rule_opens_one_group_alert_when_its_offline_members_pass_the_fraction() {
        // GIVEN site:A of four members (as the tag index counts them), two of them silent
        // since 14:00, and the rule "more than a quarter of site:A offline"
        let mut w = watchdog(ts("2026-04-20T14:10:00Z"), false);
        let site = tidemark_schema::Tag::parse("site:A").unwrap();
        w.config.group_rules = vec![
            tidemark_schema::GroupRuleSpec::from_value(
                &serde_json::json!({"group":"site:A","offlineFraction":{"above":0.25}}),
            )
            .unwrap(),
        ];
        let tags =
            tidemark_schema::Tags::new([(site.key.clone(), site.value.clone())].into()).unwrap();
        let mut members = BTreeMap::new();
        for (name, arrived) in [
            ("a1", "2026-04-20T14:00:00Z"),
            ("a2", "2026-04-20T14:00:00Z"),
            ("a3", "2026-04-20T14:09:00Z"),
            ("a4", "2026-04-20T14:09:00Z"),
        ] {
            let mut d = watched(name, ts(arrived));
            d.tags = tags.clone();
            w.store.put_entity(&d).unwrap();
            let key = tidemark_schema::TagCountItem::key_of(&site, &id(name));
            *members.entry(key).or_insert(0) += 1;
        }
        for (key, n) in members {
            w.store
                .put_entity(&tidemark_schema::TagCountItem {
                    pk: key.pk,
                    sk: key.sk,
                    members: n,
                    offline_members: 0,
                })
                .unwrap();
        }

        // WHEN the watchdog runs at 14:10
        let first = run(&w).await;

        // THEN both silent ones are offline, counted in site:A, and the group has one alert
        assert_eq!((first.opened, first.group_opened), (2, 1), "{first:?}");
        let counts = w.store.group_counts(&site).await.unwrap();
        assert_eq!((counts.members, counts.offline), (4, 2));
        assert_eq!(
            device(&w, "a1").offline.unwrap().counted,
            vec![site.clone()]
        );
        let rule = &w.config.group_rules[0];
        let state = w.store.group_rule_state(rule).await.unwrap().unwrap();
        let alert = state.alert.clone().expect("an open group alert");
        assert_eq!(
            alert.as_str(),
            format!("20260420T141000000000Z-group.{}", rule.tag())
        );
        // AND a second run changes nothing
        let second = run(&w).await;
        assert_eq!(
            (second.group_opened, second.group_resolved),
            (0, 0),
            "{second:?}"
        );
        assert_eq!(
            w.store.group_rule_state(rule).await.unwrap().unwrap(),
            state
        );
    }

    #[tokio::test]
    async fn a_due_device_whose_reading_arrived_after_its_check_time_is_postponed_not_alerted() {
        // GIVEN a device due at 14:05 by its item, but a reading of it arrived at 14:08
        let w = watchdog(ts("2026-04-20T14:10:00Z"), false);
        let later = ts("2026-04-20T14:08:00Z");
        w.store
            .put_entity(&watched("lagging", ts("2026-04-20T14:00:00Z")))
            .unwrap();
        store_single(&w, &reading("lagging", later, &[("t", 1.0)]), later);

        // WHEN the watchdog runs
        let report = run(&w).await;

        // THEN it moves the check time to that arrival + 300 s and opens nothing
        assert_eq!(
            (report.due, report.postponed, report.opened, report.failed),
            (1, 1, 0, 0),
            "{report:?}"
        );
        let after = device(&w, "lagging");
        assert_eq!(
            after.gsi2sk,
            Some(keys::watch_gsi2sk(ts("2026-04-20T14:13:00Z")))
        );
        assert_eq!(after.last_arrival_at, Some(later));
        assert!(after.offline.is_none());
        assert!(w.store.alerts(&id("lagging")).await.unwrap().is_empty());
        // AND the next run finds nothing due
        assert_eq!(run(&w).await.due, 0);
    }

    #[tokio::test]
    async fn a_due_device_that_lost_its_window_leaves_the_watch() {
        let w = watchdog(ts("2026-04-20T14:10:00Z"), false);
        let mut d = watched("unwatched", ts("2026-04-20T14:00:00Z"));
        d.offline_after_seconds = Some(0);
        w.store.put_entity(&d).unwrap();

        let r = run(&w).await;

        assert_eq!(
            (r.due, r.unwatched, r.opened, r.failed),
            (1, 1, 0, 0),
            "{r:?}"
        );
        let after = device(&w, "unwatched");
        assert_eq!((after.gsi2pk, after.gsi2sk), (None, None));
        assert!(after.offline.is_none());
        assert_eq!(run(&w).await.due, 0);
    }

    #[tokio::test]
    async fn without_a_watermark_nothing_is_decided() {
        // GIVEN a silent device, and a pipeline whose heartbeat has not passed (a backlog)
        let w = watchdog(ts("2026-04-20T14:10:00Z"), true);
        let d = watched("silent", ts("2026-04-20T14:00:00Z"));
        w.store.put_entity(&d).unwrap();

        // WHEN the watchdog runs
        let r = run(&w).await;

        // THEN it has no watermark and decides nothing: the silence may be the backlog's
        assert_eq!(r.watermark, None);
        assert!(!r.heartbeat_passed);
        assert_eq!((r.due, r.opened, r.postponed), (0, 0, 0), "{r:?}");
        assert_eq!(device(&w, "silent"), d);
        assert!(w.store.alerts(&id("silent")).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_keep_alive_or_an_exact_resend_keeps_a_device_online_whatever_its_layout() {
        let w = watchdog(ts("2026-04-20T14:10:00Z"), false);
        let len = SlotLen::new(60).unwrap();
        let packed = LayoutHistory::default()
            .with_layout(ts("2026-04-20T00:00:00Z"), Layout::packed(len))
            .unwrap();
        let (newest, later) = (ts("2026-04-20T14:00:00Z"), ts("2026-04-20T14:08:00Z"));
        // Writes a reading packed in its 60 s slot, as ingest does, stamped with its arrival.
        let write_packed = async |r: &Reading, arrived: Timestamp| {
            let key = SlotKey {
                pk: keys::reading_pk(&r.device_id, None),
                start: len.start_of(r.timestamp),
                len,
            };
            let readings: BTreeMap<_, _> = [(r.timestamp, r.metrics.clone())].into();
            SlotWriter::new(w.store.table(), "t", Default::default())
                .arrived(Some(arrived))
                .write(
                    &key,
                    &readings,
                    i64::MAX,
                    tokio::time::Instant::now() + Duration::from_secs(30),
                )
                .await
                .unwrap();
        };
        // GIVEN three devices last seen arriving at 14:00 (due at 14:05), their newest
        // reading of then stored: one in single items, two packed in 60 s slots
        let devices = [
            ("resend_single", false),
            ("resend_packed", true),
            ("alive_packed", true),
        ];
        for (name, is_packed) in devices {
            w.store.put_entity(&watched(name, newest)).unwrap();
            let r = reading(name, newest, &[("t", 1.0)]);
            if is_packed {
                let history = LayoutHistoryItem::new(&id(name), packed.clone());
                w.store.put_entity(&history).unwrap();
                write_packed(&r, newest).await;
            } else {
                store_single(&w, &r, newest);
            }
        }
        // WHEN at 14:08 two of them send that reading again, exactly, and the third sends a
        // keep-alive (a reading without metrics)
        store_single(&w, &reading("resend_single", newest, &[("t", 1.0)]), later);
        write_packed(&reading("resend_packed", newest, &[("t", 1.0)]), later).await;
        write_packed(&reading("alive_packed", later, &[]), later).await;

        // THEN the watchdog finds all three due, and postpones each to 14:13: none is offline
        let report = run(&w).await;
        assert_eq!(
            (report.due, report.postponed, report.opened, report.failed),
            (3, 3, 0, 0),
            "{report:?}"
        );
        for (name, _) in devices {
            let d = device(&w, name);
            assert_eq!(d.last_arrival_at, Some(later), "{name}");
            assert!(d.offline.is_none(), "{name}");
        }
    }

    #[tokio::test]
    async fn a_decision_on_a_device_changed_since_it_was_read_is_lost_and_writes_nothing() {
        // GIVEN a silent device read by a run, then written by the alerts role (version 4)
        let store = MemoryStore::new();
        let read = watched("raced", ts("2026-04-20T14:00:00Z"));
        store
            .put_entity(&DeviceItem {
                version: Some(4),
                ..read.clone()
            })
            .unwrap();
        let alert = offline_alert(&read, WINDOW, ts("2026-04-20T14:00:00Z"));

        // THEN no write made on the stale read goes through, the alert with it
        let later = ts("2026-04-20T14:08:00Z");
        assert!(!store.postpone(&read, later, later).await.unwrap());
        assert!(!store.unwatch(&read).await.unwrap());
        assert!(!store.open(&read, &alert, later).await.unwrap());
        assert!(store.alerts(&id("raced")).await.unwrap().is_empty());
        assert_eq!(
            store.stored_device(&id("raced")).unwrap().unwrap().version,
            Some(4)
        );

        // AND on a fresh read the alert opens once: an alert of the same deadline is not new
        let fresh = store.stored_device(&id("raced")).unwrap().unwrap();
        assert!(store.open(&fresh, &alert, later).await.unwrap());
        let again = store.stored_device(&id("raced")).unwrap().unwrap();
        assert!(!store.open(&again, &alert, later).await.unwrap());
        assert_eq!(store.alerts(&id("raced")).await.unwrap().len(), 1);
        assert_eq!(
            store.stored_device(&id("raced")).unwrap().unwrap().version,
            Some(5)
        );
    }
}
