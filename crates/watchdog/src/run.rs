//! One watchdog run, over the store operations it needs ([`WatchStore`], in `store.rs`) and the pipeline
//! ([`Heartbeats`]); see the crate docs for the rule.

use futures::StreamExt;
use tidemark_schema::keys::{self, ShardName};
use tidemark_schema::{
    AlertId, AlertItem, AlertRule, AlertState, DeviceId, DeviceItem, EntityKey, Severity, Timestamp,
};

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
        pk: key.pk,
        sk: key.sk,
        gsi1pk: Some(keys::severity_gsi1pk(severity)),
        gsi1sk: Some(keys::alert_gsi1sk(&id)),
        device_id: dev.device_id.clone(),
        alert_id: id,
        metric: None,
        rule: AlertRule::Offline,
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
        let (watermark, passed) = self.watermark(&shards, sent, deadline).await?;
        report.watermark = watermark;
        report.heartbeat_passed = passed;
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
        Ok(self.finish(report))
    }

    fn finish(&self, mut report: Report) -> Report {
        let (r, w) = self.store.units();
        report.read_units = r;
        report.write_units = w;
        report
    }

    /// The oldest heartbeat every shard in `shards` has passed, waiting (until the configured
    /// wait or `deadline`) for the one sent at `sent`; and whether it came.
    async fn watermark(
        &self,
        shards: &[ShardName],
        sent: Timestamp,
        deadline: tokio::time::Instant,
    ) -> Result<(Option<Timestamp>, bool), WatchdogError> {
        let until = (tokio::time::Instant::now() + self.config.heartbeat_wait).min(deadline);
        loop {
            let items = self.store.heartbeats().await?;
            let passed = |s: &ShardName| {
                let key = EntityKey::Heartbeat(s.clone()).key();
                items
                    .iter()
                    .find(|h| h.sk == key.sk)
                    .and_then(|h| h.passed_at)
            };
            let marks: Option<Vec<Timestamp>> = shards.iter().map(passed).collect();
            let watermark = marks.and_then(|m| m.into_iter().min());
            let all_passed = watermark.is_some_and(|w| w >= sent);
            if all_passed || shards.is_empty() {
                return Ok((watermark, all_passed));
            }
            if tokio::time::Instant::now() + self.config.heartbeat_poll >= until {
                return Ok((watermark, false));
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
