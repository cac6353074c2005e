//! One device's share of an alerts-role batch: decide, derive when needed, write once.

use std::collections::{BTreeMap, HashMap};

use tidemark_schema::{
    AlertId, AlertItem, AlertState, DeviceId, DeviceItem, DeviceStatus, MetricName, RuleSpec,
    RuleState, Threshold, Timestamp, keys,
};

use super::commit::transactions;
use super::derive::{Need, derive};
use super::plan::{
    AlertWrite, episodes_from, plan_derived, resolve_write, rule_state_alerts, with_tags,
};
use super::rules::{Rule, could_change};
use crate::AggregatorError;
use crate::function::Aggregator;
use crate::offline::arrivals::Arrivals;
use crate::offline::upkeep::{Seen, upkeep};
use crate::report::Counters;
use crate::store::{DeviceUpdate, Store, Written};

/// What one batch brings for one device.
#[derive(Debug, Clone, Default)]
pub struct DeviceBatch {
    /// The first record of the device in the batch (for partial batch failures).
    pub first_index: usize,
    /// New readings by time (a correction's new values included).
    pub readings: BTreeMap<Timestamp, BTreeMap<MetricName, f64>>,
    /// Per metric, the earliest reading corrected or deleted: derived again from there.
    pub rewritten: BTreeMap<MetricName, Timestamp>,
    /// Per metric, the newest reading corrected or deleted.
    pub rewritten_until: BTreeMap<MetricName, Timestamp>,
    /// The device item changed its thresholds: every rule state is checked against them.
    pub thresholds_changed: bool,
    /// When the device's records in the batch arrived (an exact resend included).
    pub arrivals: Option<Arrivals>,
    /// The device item changed its offline settings.
    pub offline_settings_changed: bool,
}

impl DeviceBatch {
    /// The hours of the readings the batch brings or rewrites (what a repair re-derives
    /// from).
    pub fn hours(&self) -> std::collections::BTreeSet<tidemark_schema::Bucket> {
        self.readings
            .keys()
            .chain(self.rewritten.values())
            .chain(self.rewritten_until.values())
            .map(|t| tidemark_schema::Period::Hourly.bucket(*t))
            .collect()
    }

    pub fn index(&mut self, i: usize) {
        self.first_index = if self.readings.is_empty() && self.rewritten.is_empty() {
            i
        } else {
            self.first_index.min(i)
        };
    }
}

/// Per metric, the device's own threshold, else the default.
pub fn effective_thresholds(
    device: Option<&DeviceItem>,
    defaults: &BTreeMap<MetricName, Threshold>,
) -> BTreeMap<MetricName, Threshold> {
    let mut t = defaults.clone();
    if let Some(d) = device {
        t.extend(d.thresholds.iter().map(|(m, th)| (m.clone(), th.clone())));
    }
    t
}

/// The device's own rules, else the fleet's; a p95 window only where the device keeps
/// percentiles, and one rule per identity (the first).
pub fn effective_rules(device: Option<&DeviceItem>, defaults: &[RuleSpec]) -> Vec<RuleSpec> {
    let percentiles = device.is_some_and(|d| d.percentiles);
    let mut seen = std::collections::BTreeSet::new();
    device
        .and_then(|d| d.rules.as_deref())
        .unwrap_or(defaults)
        .iter()
        .filter(|r| percentiles || !r.needs_percentiles())
        .filter(|r| seen.insert((r.metric.clone(), r.rule(), r.tag())))
        .cloned()
        .collect()
}

/// Every rule of the device: its thresholds' sides, then its rules.
pub fn device_rules(
    device: Option<&DeviceItem>,
    default_thresholds: &BTreeMap<MetricName, Threshold>,
    default_rules: &[RuleSpec],
) -> Vec<Rule> {
    let thresholds = effective_thresholds(device, default_thresholds);
    thresholds
        .iter()
        .flat_map(|(m, t)| Rule::of(m, t))
        .chain(
            effective_rules(device, default_rules)
                .iter()
                .map(Rule::of_spec),
        )
        .collect()
}

/// The rules of `thresholds` that must be derived again, from when.
fn needs(b: &DeviceBatch, rules: &[Rule], rule_states: &BTreeMap<String, RuleState>) -> Vec<Need> {
    let mut out = Vec::new();
    for rule in rules {
        let stored = rule_states.get(&rule.state_key());
        let mut from: Option<Timestamp> = None;
        let mut earliest = |t: Timestamp| from = Some(from.map_or(t, |f| f.min(t)));
        if let Some(t) = b.rewritten.get(&rule.metric) {
            earliest(*t);
        }
        if let Some(t) = b.readings.iter().find_map(|(at, m)| {
            let v = m.get(&rule.metric)?;
            could_change(stored, rule, *at, *v).then_some(*at)
        }) {
            earliest(t);
        }
        // A changed threshold alone re-judges the newest reading from the stored state: it
        // applies from now on, and the history before it stays as it was decided.
        let changed = stored.filter(|s| s.threshold != rule.threshold);
        let (from, resume) = match (from, changed) {
            (Some(from), _) => (from, false),
            (None, Some(s)) => (s.at, true),
            (None, None) => continue,
        };
        // The newest change the batch brings to the metric.
        let until = b
            .readings
            .iter()
            .rev()
            .find(|(_, m)| m.contains_key(&rule.metric))
            .map(|(at, _)| *at)
            .into_iter()
            .chain(b.rewritten_until.get(&rule.metric).copied())
            .max()
            .unwrap_or(from)
            .max(from);
        out.push(Need {
            rule: rule.clone(),
            from,
            stored: stored.cloned(),
            resume,
            until,
        });
    }
    out
}

fn micros_between(a: Timestamp, b: Timestamp) -> i64 {
    b.epoch_micros() - a.epoch_micros()
}

/// Counts what a landed transaction wrote.
fn count_written(counters: &Counters, units: f64, writes: &[AlertWrite]) {
    counters.written(units);
    for w in writes {
        Counters::add(&counters.items_written, 1);
        if matches!(w, AlertWrite::Create(_) | AlertWrite::Reopen { .. }) {
            Counters::add(&counters.alerts_opened, 1);
        }
        if w.after().state == AlertState::Resolved {
            Counters::add(&counters.alerts_resolved, 1);
        }
    }
}

impl<S: Store> Aggregator<S> {
    /// The device update and its alert writes, in transactions DynamoDB takes
    /// ([`super::commit`]); a conflict in any of them: decide again.
    async fn commit(
        &self,
        update: &DeviceUpdate,
        writes: Vec<AlertWrite>,
        counters: &Counters,
    ) -> Result<Written, AggregatorError> {
        let (ahead, with_device) = transactions(writes);
        for t in &ahead {
            match self.store.put_alerts(&update.device, t).await? {
                Written::Ok { units } => count_written(counters, units, t),
                Written::Conflict => return Ok(Written::Conflict),
            }
        }
        let w = self.store.commit_device(update, &with_device).await?;
        if let Written::Ok { units } = w {
            count_written(counters, units, &with_device);
        }
        Ok(w)
    }

    pub(crate) async fn alert_device(
        &self,
        id: &DeviceId,
        b: &DeviceBatch,
        mut dev: Option<DeviceItem>,
        counters: &Counters,
    ) -> Result<(), AggregatorError> {
        let limits = self.config.scan;
        let refresh = i64::try_from(self.config.device_refresh.as_micros()).unwrap_or(i64::MAX);
        for attempt in 1..=self.config.max_attempts {
            let rules = device_rules(
                dev.as_ref(),
                &self.config.default_thresholds,
                &self.config.default_rules,
            );
            let stored: BTreeMap<String, RuleState> = dev
                .as_ref()
                .map(|d| d.rule_states.clone())
                .unwrap_or_default();
            let needs = needs(b, &rules, &stored);
            Counters::add(&counters.alert_derivations, needs.len() as u64);
            let batch_newest = b.readings.keys().next_back().copied();
            let now = self.config.clock.now();
            let (derived, newest) = derive(&self.store, id, needs, &limits).await?;

            let offline = upkeep(
                id,
                dev.as_ref(),
                self.config.offline_after_default,
                Seen {
                    arrivals: b.arrivals,
                    newest_reading: batch_newest,
                    settings_changed: b.offline_settings_changed,
                },
                now,
            );
            let mut ids = rule_state_alerts(&stored);
            ids.extend(offline.resolve.as_ref().map(|r| r.0.clone()));
            ids.retain(|a| !a.as_str().is_empty());
            let mut known: HashMap<AlertId, AlertItem> = if ids.is_empty() {
                HashMap::new()
            } else {
                self.store.get_alerts(id, &ids).await?
            };
            if let Some(from) = episodes_from(&derived) {
                known.extend(self.store.alerts_since(id, from).await?);
            }
            let mut writes: Vec<AlertWrite> = Vec::new();
            let mut rule_states = stored.clone();
            for d in &derived {
                let p = plan_derived(id, d, &known);
                writes.extend(p.writes);
                if let Some(s) = p.rule_state {
                    rule_states.insert(d.fold.rule.state_key(), s);
                }
            }
            if let Some((alert, at)) = &offline.resolve {
                writes.extend(resolve_write(known.get(alert), *at));
            }
            // A threshold that is gone resolves what it opened, at the change.
            let live: Vec<String> = rules.iter().map(Rule::state_key).collect();
            for (k, s) in &stored {
                if live.contains(k) {
                    continue;
                }
                let at = dev
                    .as_ref()
                    .and_then(|d| d.updated_at)
                    .filter(|u| *u > s.at)
                    .unwrap_or(s.at);
                if let Some(a) = &s.alert {
                    writes.extend(resolve_write(known.get(a), at));
                }
                rule_states.remove(k);
            }

            let last_seen = dev.as_ref().and_then(|d| d.last_seen_at);
            let registered = dev
                .as_ref()
                .is_some_and(|d| d.version.is_some() && d.last_seen_at.is_some());
            let lagging = batch_newest
                .is_some_and(|n| last_seen.is_none_or(|l| micros_between(l, n) >= refresh));
            if rule_states == stored && writes.is_empty() && !lagging && !offline.must_write {
                if registered && batch_newest.is_some_and(|n| last_seen.is_some_and(|l| n > l)) {
                    Counters::add(&counters.device_writes_deferred, 1);
                }
                if registered || batch_newest.is_none() {
                    return Ok(());
                }
            }
            // `latest` is the newest stored reading, never an older one than the item holds.
            let newest = match newest {
                Some((timestamp, metrics)) => {
                    Some(tidemark_schema::LatestReading { timestamp, metrics })
                }
                None => {
                    self.store
                        .newest_reading(id, last_seen.unwrap_or(Timestamp::MIN))
                        .await?
                }
            };
            let latest = newest.filter(|n| last_seen.is_none_or(|l| n.timestamp >= l));
            let last_seen_at = [
                last_seen,
                latest.as_ref().map(|l| l.timestamp),
                batch_newest,
            ]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(now);
            let update = DeviceUpdate {
                device: id.clone(),
                expected_version: dev.as_ref().and_then(|d| d.version),
                last_seen_at,
                latest,
                rule_states,
                now,
                status_gsi1pk: keys::device_status_gsi1pk(
                    id,
                    DeviceStatus::Active,
                    self.config.status_partitions,
                ),
                offline: offline.clone(),
            };
            let tags = dev.as_ref().map(|d| d.tags.clone()).unwrap_or_default();
            with_tags(&mut writes, &tags);
            match self.commit(&update, writes, counters).await? {
                Written::Ok { .. } => return Ok(()),
                Written::Conflict => {
                    // Another invocation (a hot device's other partition, a retry) wrote first:
                    // back off, then decide again from what the table holds.
                    Counters::add(&counters.conflicts_retried, 1);
                    tokio::time::sleep(self.config.retry.delay(attempt)).await;
                    dev = self
                        .store
                        .get_devices(std::slice::from_ref(id))
                        .await?
                        .remove(id);
                }
            }
        }
        Err(AggregatorError::Contended {
            key: id.to_string(),
            attempts: self.config.max_attempts,
        })
    }
}
