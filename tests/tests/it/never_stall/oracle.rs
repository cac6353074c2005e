//! The brute-force oracle, from the valid operations alone: per device and timestamp the
//! latest value of each metric in Kinesis order (a keep-alive is a reading without
//! metrics); hourly and daily rollups folded from those readings; per device the alert
//! state of the threshold rule, a function of its readings in timestamp order. And the
//! checks of a finished case against the table.

use std::collections::{BTreeMap, BTreeSet};

use tidemark_aggregator::store::ReadingStore;
use tidemark_schema::{
    AggregateItem, AlertRule, DeviceId, DeviceItem, EntityKey, HeartbeatItem, Key, MetricName,
    Period, QuarantineItem, RulePhase, Stats, Timestamp,
};
use tidemark_testkit::rollups::{Rollup, same_stats, stored};

use super::driver::World;
use super::generator::{self, DEVICES};

/// One valid reading as sent: device, time, metrics (none: a keep-alive).
pub type SentReading = (usize, Timestamp, Vec<(String, f64)>);

/// What the oracle expects of one unit of a record (a plain record, or one user record of
/// a KPL aggregate).
#[derive(Debug, Clone)]
pub enum Expect {
    /// Valid: stored, these readings (device, time, metrics), never set aside.
    Valid(Vec<SentReading>),
    /// The watchdog's heartbeat, sent at this time.
    Heartbeat(Timestamp),
    /// Hostile: set aside with a reason, nothing of it checked otherwise.
    SetAside,
}

impl Expect {
    pub fn valid(device: usize, at: Timestamp, metrics: &[(String, f64)]) -> Self {
        Expect::Valid(vec![(device, at, metrics.to_vec())])
    }
}

/// A record put into the Kinesis shard.
#[derive(Debug, Clone)]
pub struct Sent {
    pub seq: String,
    pub partition_key: String,
    pub data: Vec<u8>,
    pub arrival: Timestamp,
    /// One per unit, in order (a KPL aggregate's user records).
    pub units: Vec<Expect>,
}

type Readings = BTreeMap<Timestamp, BTreeMap<MetricName, f64>>;

#[derive(Debug, Default)]
pub struct Oracle {
    readings: BTreeMap<usize, Readings>,
    /// Every (device, time) applied, in order: what corrections aim at.
    applied: Vec<(usize, Timestamp)>,
}

fn name(s: &str) -> MetricName {
    MetricName::new(s).expect("generated metric names are valid")
}

impl Oracle {
    /// A valid reading, after every earlier one (Kinesis order): its metrics win.
    pub fn apply(&mut self, device: usize, at: Timestamp, metrics: &[(String, f64)]) {
        let r = self
            .readings
            .entry(device)
            .or_default()
            .entry(at)
            .or_default();
        for (m, v) in metrics {
            r.insert(name(m), *v);
        }
        self.applied.push((device, at));
    }

    /// The `i`-th reading applied (modulo their number).
    pub fn nth_reading(&self, i: usize) -> Option<(usize, Timestamp)> {
        (!self.applied.is_empty()).then(|| self.applied[i % self.applied.len()])
    }

    /// Hourly and daily rollups of every checked device, by aggregate key (buckets with a
    /// metric only), folded from the readings with metrics.
    pub fn rollups(&self) -> BTreeMap<Key, Rollup> {
        let mut out: BTreeMap<Key, Rollup> = BTreeMap::new();
        for (d, readings) in &self.readings {
            let device = DeviceId::new(&generator::device_id(*d)).expect("a device ID");
            // A keep-alive is a reading, but no rollup's (AggregateItem::add_reading).
            for (at, metrics) in readings.iter().filter(|(_, m)| !m.is_empty()) {
                for period in [Period::Hourly, Period::Daily] {
                    let key = AggregateItem::key_for(&device, period.bucket(*at));
                    let e = out.entry(key).or_insert_with(|| Rollup {
                        metrics: BTreeMap::new(),
                        first_at: *at,
                        last_at: *at,
                    });
                    e.first_at = e.first_at.min(*at);
                    e.last_at = e.last_at.max(*at);
                    for (m, v) in metrics {
                        e.metrics
                            .entry(m.clone())
                            .and_modify(|s| s.merge(&Stats::at(*at, *v)))
                            .or_insert_with(|| Stats::at(*at, *v));
                    }
                }
            }
        }
        out
    }

    /// Whether the device's threshold alert is open: its newest reading of the metric (by
    /// timestamp) is past the limit (no deadband, no duration: every reading decides).
    pub fn alert_open(&self, device: usize) -> bool {
        let m = name(generator::ALERTED);
        self.readings
            .get(&device)
            .and_then(|rs| rs.values().rev().find_map(|r| r.get(&m)))
            .is_some_and(|v| *v > generator::LIMIT)
    }
}

fn same(a: &Rollup, b: &Rollup) -> bool {
    a.first_at == b.first_at
        && a.last_at == b.last_at
        && a.metrics.len() == b.metrics.len()
        && a.metrics
            .iter()
            .all(|(m, x)| b.metrics.get(m).is_some_and(|y| same_stats(x, y)))
}

/// Every way the finished case differs from the oracle (empty: none).
pub async fn check(w: &World<'_>) -> Vec<String> {
    let mut out = Vec::new();
    let store = w.store();
    let items = store.table.scan();

    // Valid records are never set aside; hostile ones are, with a reason.
    let mut set_aside: BTreeMap<(String, Option<u32>), String> = BTreeMap::new();
    for i in &items {
        let pk = i.get("pk").and_then(|v| v.as_s().ok());
        if !pk.is_some_and(|p| p.starts_with(tidemark_schema::keys::QUARANTINE_PREFIX)) {
            continue;
        }
        if let Ok(q) = tidemark_store::from_item::<QuarantineItem>(i.clone()) {
            let why = format!("{}: {}", q.reason.as_str(), q.message);
            set_aside.insert((q.sequence_number, q.sub_record), why);
        }
    }
    let mut genuine: Option<Timestamp> = None;
    for s in &w.kinesis {
        let aggregate = s.data.starts_with(&tidemark_ingest::kpl::MAGIC);
        for (n, u) in s.units.iter().enumerate() {
            let sub = aggregate.then_some(n as u32);
            match u {
                Expect::Valid(_) => {
                    for k in [(s.seq.clone(), sub), (s.seq.clone(), None)] {
                        if let Some(why) = set_aside.get(&k) {
                            out.push(format!(
                                "valid record {} {sub:?} was set aside: {why}",
                                s.seq
                            ));
                        }
                    }
                }
                Expect::Heartbeat(at) => genuine = genuine.max(Some(*at)),
                Expect::SetAside => {
                    if !set_aside.keys().any(|(seq, _)| *seq == s.seq) {
                        out.push(format!(
                            "hostile record {} was neither stored nor set aside",
                            s.seq
                        ));
                    }
                }
            }
        }
    }

    // Nothing valid fails for good, not even once: no failure count, and no stream record
    // an aggregator role set aside (hostile records never reach the roles as readings of a
    // checked device; whatever of [`generator::EVIL`] is stored must not fail either).
    for i in &items {
        let text = |a: &str| {
            i.get(a)
                .and_then(|v| v.as_s().ok())
                .cloned()
                .unwrap_or_default()
        };
        let (pk, sk) = (text("pk"), text("sk"));
        if pk == tidemark_schema::keys::PIPELINE_PK
            && sk.starts_with(tidemark_schema::keys::FAILURES_PREFIX)
        {
            if let Some(set_aside_as_hostile) = failed_hostile(w, &sk) {
                if !set_aside_as_hostile {
                    out.push(format!(
                        "a valid record failed for good: {sk}: {}",
                        text("lastError")
                    ));
                }
            } else {
                out.push(format!(
                    "a record failed for good: {sk}: {}",
                    text("lastError")
                ));
            }
        }
        if pk.starts_with(tidemark_schema::keys::REPAIR_PREFIX) {
            out.push(format!("a stream record was set aside: {pk} / {sk}"));
        }
    }

    // Only the watchdog's heartbeats move the shard's heartbeat.
    for i in &items {
        let (Some(pk), Some(sk)) = (
            i.get("pk").and_then(|v| v.as_s().ok()),
            i.get("sk").and_then(|v| v.as_s().ok()),
        ) else {
            continue;
        };
        if let Ok(EntityKey::Heartbeat(shard)) = EntityKey::parse(pk, sk)
            && let Ok(h) = tidemark_store::from_item::<HeartbeatItem>(i.clone())
            && genuine.is_none_or(|g| h.sent_at > g)
        {
            out.push(format!(
                "the heartbeat of {shard} says {}, but the watchdog's newest was {genuine:?}",
                h.sent_at
            ));
        }
    }

    // Readings, through the one reader of stored readings.
    for d in 0..DEVICES {
        let id = DeviceId::new(&generator::device_id(d)).expect("a device ID");
        let got: Readings = match store
            .readings_between(&id, Timestamp::MIN, Timestamp::MAX)
            .await
        {
            Ok(rs) => rs.into_iter().collect(),
            Err(e) => {
                out.push(format!("device {d}: readings unreadable: {e}"));
                continue;
            }
        };
        let want = w.oracle_readings(d);
        let times: BTreeSet<&Timestamp> = got.keys().chain(want.keys()).collect();
        for at in times {
            if got.get(at) != want.get(at) {
                out.push(format!(
                    "device {d} at {at}: stored {:?}, expected {:?}",
                    got.get(at),
                    want.get(at)
                ));
            }
        }
    }

    // Rollups, as readers see them (an open hour as its readings, an open day as its hours).
    let checked: BTreeSet<String> = (0..DEVICES)
        .map(|d| {
            tidemark_schema::keys::device_pk(
                &DeviceId::new(&generator::device_id(d)).expect("an ID"),
            )
        })
        .collect();
    let got: BTreeMap<Key, Rollup> = stored(&items)
        .into_iter()
        .filter(|(k, _)| checked.contains(&k.pk))
        .collect();
    let want = w.oracle.rollups();
    for k in got.keys().chain(want.keys()).collect::<BTreeSet<_>>() {
        match (got.get(k), want.get(k)) {
            (Some(g), Some(w)) if same(g, w) => {}
            (g, w) => out.push(format!("rollup {k}: stored {g:?}, expected {w:?}")),
        }
    }

    // Alert states.
    let metric = name(generator::ALERTED);
    let alerts = store.alerts();
    for d in 0..DEVICES {
        let id = DeviceId::new(&generator::device_id(d)).expect("a device ID");
        let state = store.device(&id).and_then(|dev| {
            dev.rule_states
                .get(&DeviceItem::rule_state_key(&metric, AlertRule::Max))
                .map(|s| s.mode)
        });
        let open = state == Some(RulePhase::Open);
        if open != w.oracle.alert_open(d) {
            out.push(format!(
                "device {d}: alert state {state:?}, expected {}",
                if w.oracle.alert_open(d) {
                    "open"
                } else {
                    "normal"
                }
            ));
        }
        let unresolved = alerts
            .iter()
            .filter(|a| {
                a.device_id == id && a.metric.as_ref() == Some(&metric) && a.resolved_at.is_none()
            })
            .count();
        if unresolved != usize::from(open) {
            let rule = store.device(&id).map(|dev| dev.rule_states);
            let mine: Vec<String> = alerts
                .iter()
                .filter(|a| a.device_id == id)
                .map(|a| {
                    format!(
                        "{} {:?} opened {} resolved {:?} value {}",
                        a.alert_id, a.state, a.opened_at, a.resolved_at, a.value
                    )
                })
                .collect();
            out.push(format!(
                "device {d}: {unresolved} unresolved alerts with its rule {state:?}: rule states \
                 {rule:?}, alerts {mine:?}"
            ));
        }
    }
    out
}

/// For a failure count's sort key naming one of ingest's Kinesis records: whether that
/// record is hostile (`None`: not one of ingest's records).
fn failed_hostile(w: &World<'_>, sk: &str) -> Option<bool> {
    let s = w.kinesis.iter().find(|s| sk.contains(&s.seq))?;
    Some(s.units.iter().all(|u| matches!(u, Expect::SetAside)))
}

impl World<'_> {
    pub fn oracle_readings(&self, device: usize) -> Readings {
        self.oracle
            .readings
            .get(&device)
            .cloned()
            .unwrap_or_default()
    }
}
