//! The alert lifecycle of one device over the readings of one batch that are newer than the
//! device's `lastSeenAt` (a late reading never flips an alert).
//!
//! One open alert per (device, metric, rule): a breach opens it (its ID is derived from the
//! breaching reading, so a replay makes the same ID); further breaches raise its peak, count
//! and last-breach time; the first normal reading resolves it. Acknowledged is a state only
//! the API sets: it is never overwritten here, only resolved. An alert's own state time
//! (`lastBreachAt`, then `resolvedAt`) is its watermark: readings at or before it were
//! already counted, which is what keeps two racing invocations exact.

use std::collections::{BTreeMap, HashMap};

use tidemark_schema::{
    AlertId, AlertItem, AlertRule, AlertState, DeviceId, DeviceItem, EntityKey, MetricName,
    Threshold, Timestamp, keys, number,
};

/// A write the plan needs.
#[derive(Debug, Clone, PartialEq)]
pub enum AlertWrite {
    /// A new alert (may already be resolved when the same batch ended the breach).
    Create(Box<AlertItem>),
    /// An existing alert moved on; the write is conditional on `before`'s state time.
    Update {
        before: Box<AlertItem>,
        after: Box<AlertItem>,
    },
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct AlertPlan {
    pub writes: Vec<AlertWrite>,
    /// The device's `openAlerts` after the batch.
    pub open_alerts: BTreeMap<String, AlertId>,
    pub opened: u64,
    pub resolved: u64,
}

/// The time up to which an alert has seen readings.
pub fn watermark(a: &AlertItem) -> Timestamp {
    a.resolved_at.unwrap_or(a.last_breach_at)
}

fn breaches(rule: AlertRule, limit: f64, v: f64) -> bool {
    match rule {
        AlertRule::Max => v > limit,
        AlertRule::Min => v < limit,
    }
}

/// Per metric, the device's own threshold, else the default.
pub fn effective_thresholds(
    device: Option<&DeviceItem>,
    defaults: &BTreeMap<MetricName, Threshold>,
) -> BTreeMap<MetricName, Threshold> {
    let mut t = defaults.clone();
    if let Some(d) = device {
        for (m, th) in &d.thresholds {
            t.insert(m.clone(), th.clone());
        }
    }
    t
}

fn new_alert(
    device: &DeviceId,
    metric: &MetricName,
    rule: AlertRule,
    th: &Threshold,
    limit: f64,
    at: Timestamp,
    v: f64,
) -> AlertItem {
    let id = AlertId::for_breach(at, metric, rule);
    let key = EntityKey::Alert {
        device: device.clone(),
        alert: id.clone(),
    }
    .key();
    let side = match rule {
        AlertRule::Max => "above",
        AlertRule::Min => "below",
    };
    AlertItem {
        pk: key.pk,
        sk: key.sk,
        gsi1pk: Some(keys::severity_gsi1pk(th.severity)),
        gsi1sk: Some(keys::alert_gsi1sk(&id)),
        device_id: device.clone(),
        alert_id: id,
        metric: metric.clone(),
        rule,
        severity: th.severity,
        state: AlertState::Open,
        message: format!("{metric} {side} {}", number(limit)),
        value: v,
        threshold: limit,
        breach_count: 1,
        opened_at: at,
        last_breach_at: at,
        acknowledged_at: None,
        resolved_at: None,
        snoozed_until: None,
    }
}

fn resolve(a: &mut AlertItem, at: Timestamp) {
    a.state = AlertState::Resolved;
    a.resolved_at = Some(at);
    a.gsi1pk = None;
    a.gsi1sk = None;
}

/// Plans the alert writes of one device.
///
/// `known` holds every alert item already read: those the device's `openAlerts` names and
/// any whose creation conflicted (it exists: a replay or a racing invocation made it), which
/// is then adopted instead of created twice. `readings` are newer than `lastSeenAt`, sorted
/// by time, one per timestamp.
pub fn evaluate(
    device: &DeviceId,
    thresholds: &BTreeMap<MetricName, Threshold>,
    open_alerts: &BTreeMap<String, AlertId>,
    known: &HashMap<AlertId, AlertItem>,
    readings: &[(Timestamp, &BTreeMap<MetricName, f64>)],
) -> AlertPlan {
    let mut plan = AlertPlan {
        open_alerts: open_alerts.clone(),
        ..Default::default()
    };
    for (metric, th) in thresholds {
        for (rule, limit) in [(AlertRule::Min, th.min), (AlertRule::Max, th.max)] {
            let Some(limit) = limit else { continue };
            let slot = DeviceItem::alert_slot(metric, rule);
            // (alert as stored, alert now); `before` is None for an alert created here.
            let mut cur: Option<(Option<AlertItem>, AlertItem)> = open_alerts
                .get(&slot)
                .and_then(|id| known.get(id))
                .filter(|a| a.state != AlertState::Resolved)
                .map(|a| (Some(a.clone()), a.clone()));
            // Readings up to here were seen by an alert that is already resolved.
            let mut seen_until: Option<Timestamp> = None;
            for (at, values) in readings {
                let Some(&v) = values.get(metric) else {
                    continue;
                };
                if seen_until.is_some_and(|t| *at <= t) {
                    continue;
                }
                if let Some((_, a)) = &cur
                    && *at <= watermark(a)
                {
                    continue;
                }
                let breach = breaches(rule, limit, v);
                match (&mut cur, breach) {
                    (Some((_, a)), true) => {
                        a.breach_count += 1;
                        a.value = match rule {
                            AlertRule::Max => a.value.max(v),
                            AlertRule::Min => a.value.min(v),
                        };
                        a.last_breach_at = *at;
                    }
                    (Some(_), false) => {
                        if let Some((before, mut a)) = cur.take() {
                            resolve(&mut a, *at);
                            plan.resolved += 1;
                            plan.writes.push(match before {
                                Some(before) => AlertWrite::Update {
                                    before: Box::new(before),
                                    after: Box::new(a),
                                },
                                None => AlertWrite::Create(Box::new(a)),
                            });
                        }
                    }
                    (None, true) => {
                        let id = AlertId::for_breach(*at, metric, rule);
                        match known.get(&id) {
                            Some(existing) if existing.state == AlertState::Resolved => {
                                seen_until = Some(watermark(existing));
                            }
                            Some(existing) => {
                                cur = Some((Some(existing.clone()), existing.clone()));
                            }
                            None => {
                                plan.opened += 1;
                                cur = Some((
                                    None,
                                    new_alert(device, metric, rule, th, limit, *at, v),
                                ));
                            }
                        }
                    }
                    (None, false) => {}
                }
            }
            match cur {
                Some((before, a)) => {
                    plan.open_alerts.insert(slot, a.alert_id.clone());
                    match before {
                        None => plan.writes.push(AlertWrite::Create(Box::new(a))),
                        Some(b) if b != a => plan.writes.push(AlertWrite::Update {
                            before: Box::new(b),
                            after: Box::new(a),
                        }),
                        Some(_) => {}
                    }
                }
                None => {
                    plan.open_alerts.remove(&slot);
                }
            }
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_schema::Severity;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }
    fn temp() -> MetricName {
        MetricName::new("temperature").unwrap()
    }
    fn dev() -> DeviceId {
        DeviceId::new("sensor_01").unwrap()
    }
    fn thresholds() -> BTreeMap<MetricName, Threshold> {
        BTreeMap::from([(
            temp(),
            Threshold::new(Some(0.0), Some(30.0), Severity::Critical),
        )])
    }
    fn readings(vals: &[(&str, f64)]) -> Vec<(Timestamp, BTreeMap<MetricName, f64>)> {
        vals.iter()
            .map(|(t, v)| (ts(t), BTreeMap::from([(temp(), *v)])))
            .collect()
    }
    fn run(
        open: &BTreeMap<String, AlertId>,
        known: &HashMap<AlertId, AlertItem>,
        vals: &[(&str, f64)],
    ) -> AlertPlan {
        let r = readings(vals);
        let refs: Vec<_> = r.iter().map(|(t, m)| (*t, m)).collect();
        evaluate(&dev(), &thresholds(), open, known, &refs)
    }
    fn created(p: &AlertPlan) -> AlertItem {
        match &p.writes[0] {
            AlertWrite::Create(a) => (**a).clone(),
            w => panic!("expected a create, got {w:?}"),
        }
    }

    #[test]
    fn a_breach_opens_one_alert_and_further_breaches_update_it() {
        let p = run(
            &BTreeMap::new(),
            &HashMap::new(),
            &[
                ("2026-04-20T14:00:00Z", 25.0),
                ("2026-04-20T14:01:00Z", 31.0),
                ("2026-04-20T14:02:00Z", 35.0),
                ("2026-04-20T14:03:00Z", 32.0),
            ],
        );
        assert_eq!((p.opened, p.resolved, p.writes.len()), (1, 0, 1));
        let a = created(&p);
        assert_eq!(
            a.alert_id.as_str(),
            "20260420T140100000000Z-temperature-max"
        );
        assert_eq!(
            (a.value, a.breach_count, a.last_breach_at),
            (35.0, 3, ts("2026-04-20T14:03:00Z"))
        );
        assert_eq!(a.message, "temperature above 30");
        assert_eq!(a.gsi1pk.as_deref(), Some("ALERT_SEVERITY#critical"));
        assert_eq!(p.open_alerts["temperature-max"], a.alert_id);
    }

    #[test]
    fn the_first_normal_reading_resolves_and_drops_the_index_keys() {
        let p = run(
            &BTreeMap::new(),
            &HashMap::new(),
            &[("2026-04-20T14:01:00Z", 31.0)],
        );
        let open = created(&p);
        let known = HashMap::from([(open.alert_id.clone(), open.clone())]);
        let p2 = run(
            &p.open_alerts,
            &known,
            &[
                ("2026-04-20T14:02:00Z", 20.0),
                ("2026-04-20T14:03:00Z", 31.0),
            ],
        );
        assert_eq!((p2.opened, p2.resolved), (1, 1));
        let AlertWrite::Update { after, .. } = &p2.writes[0] else {
            panic!("{:?}", p2.writes)
        };
        assert_eq!(after.state, AlertState::Resolved);
        assert_eq!(after.resolved_at, Some(ts("2026-04-20T14:02:00Z")));
        assert_eq!((after.gsi1pk.as_ref(), after.gsi1sk.as_ref()), (None, None));
        // a new breach after resolution is a new alert
        let AlertWrite::Create(again) = &p2.writes[1] else {
            panic!()
        };
        assert_eq!(p2.open_alerts["temperature-max"], again.alert_id);
    }

    #[test]
    fn an_acknowledged_alert_stays_acknowledged_while_breaching() {
        let p = run(
            &BTreeMap::new(),
            &HashMap::new(),
            &[("2026-04-20T14:01:00Z", 31.0)],
        );
        let mut acked = created(&p);
        acked.state = AlertState::Acknowledged;
        acked.acknowledged_at = Some(ts("2026-04-20T14:01:30Z"));
        let known = HashMap::from([(acked.alert_id.clone(), acked.clone())]);
        let p2 = run(&p.open_alerts, &known, &[("2026-04-20T14:02:00Z", 33.0)]);
        let AlertWrite::Update { after, .. } = &p2.writes[0] else {
            panic!()
        };
        assert_eq!(after.state, AlertState::Acknowledged);
        assert_eq!((after.breach_count, after.value), (2, 33.0));
    }

    #[test]
    fn readings_the_alert_already_saw_change_nothing() {
        // GIVEN an alert that counted breaches up to 14:03 (another invocation got there first)
        let p = run(
            &BTreeMap::new(),
            &HashMap::new(),
            &[
                ("2026-04-20T14:01:00Z", 31.0),
                ("2026-04-20T14:03:00Z", 32.0),
            ],
        );
        let a = created(&p);
        let known = HashMap::from([(a.alert_id.clone(), a.clone())]);
        // WHEN the same readings are evaluated again, without the device knowing the alert
        let p2 = run(
            &BTreeMap::new(),
            &known,
            &[
                ("2026-04-20T14:01:00Z", 31.0),
                ("2026-04-20T14:03:00Z", 32.0),
            ],
        );
        // THEN the existing alert is adopted, not duplicated or recounted
        assert!(p2.writes.is_empty(), "{:?}", p2.writes);
        assert_eq!(p2.opened, 0);
        assert_eq!(p2.open_alerts["temperature-max"], a.alert_id);
    }

    #[test]
    fn min_rule_tracks_the_lowest_value() {
        let p = run(
            &BTreeMap::new(),
            &HashMap::new(),
            &[
                ("2026-04-20T14:01:00Z", -1.0),
                ("2026-04-20T14:02:00Z", -5.0),
            ],
        );
        let a = created(&p);
        assert_eq!((a.rule, a.value, a.breach_count), (AlertRule::Min, -5.0, 2));
        assert_eq!(a.message, "temperature below 0");
    }
}
