//! One (metric, rule) of a device as a state machine over its readings in time order. Every
//! alert decision comes from [`Fold`]; [`could_change`] only decides when it must run.
//!
//! A reading is a *breach* (beyond the limit), *clear* (inside the limit by the deadband, or
//! simply inside it without one) or *hold* (between the two). Normal: a breach starts a run.
//! Pending: further breaches extend the run, which opens an alert once it spans `forSeconds`;
//! a hold or clear reading ends it. Open: breaches and holds keep it open; a clear reading
//! resolves it. So the state after the newest reading depends only on the readings since the
//! last clear one, which is what makes deriving it again from the table cheap and exact.

use tidemark_schema::{
    AlertId, AlertRule, DeviceItem, MetricName, RulePhase, RuleSpec, RuleState, Side, Threshold,
    Timestamp,
};

use super::signal::Signal;

/// One limit of one metric, with the threshold it comes from, or one rule of `rules`.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub metric: MetricName,
    pub rule: AlertRule,
    pub limit: f64,
    /// The limit's settings (for a rule of `rules`, [`RuleSpec::threshold`]).
    pub threshold: Threshold,
    /// A rule of `rules`: what it judges instead of the reading's value.
    pub spec: Option<RuleSpec>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Breach,
    Hold,
    Clear,
}

impl Rule {
    /// The rules of one metric's threshold (min, max or both).
    pub fn of(metric: &MetricName, t: &Threshold) -> Vec<Rule> {
        [(AlertRule::Min, t.min), (AlertRule::Max, t.max)]
            .into_iter()
            .filter_map(|(rule, limit)| {
                Some(Rule {
                    metric: metric.clone(),
                    rule,
                    limit: limit?,
                    threshold: t.clone(),
                    spec: None,
                })
            })
            .collect()
    }

    /// A rule of `rules`.
    pub fn of_spec(spec: &RuleSpec) -> Rule {
        Rule {
            metric: spec.metric.clone(),
            rule: spec.rule(),
            limit: spec.limit,
            threshold: spec.threshold(),
            spec: Some(spec.clone()),
        }
    }

    /// What tells a rule of `rules` apart from the device's others of its kind.
    pub fn tag(&self) -> Option<String> {
        self.spec.as_ref().map(RuleSpec::tag)
    }

    pub fn state_key(&self) -> String {
        let key = DeviceItem::rule_state_key(&self.metric, self.rule);
        match self.tag() {
            Some(tag) => format!("{key}.{tag}"),
            None => key,
        }
    }

    /// The alert of an episode starting at `start`.
    pub fn alert_id(&self, start: Timestamp) -> AlertId {
        match self.tag() {
            Some(tag) => AlertId::for_rule(start, &self.metric, self.rule, &tag),
            None => AlertId::for_breach(start, &self.metric, self.rule),
        }
    }

    /// Whether a stored alert is one of this rule's.
    pub fn raised(&self, a: &tidemark_schema::AlertItem) -> bool {
        a.metric.as_ref() == Some(&self.metric)
            && a.rule == self.rule
            && a.alert_id.rule_tag() == self.tag().as_deref()
    }

    /// What the rule judges, with nothing fed yet.
    pub fn signal(&self) -> Signal {
        self.spec.as_ref().map_or_else(Signal::value, Signal::of)
    }

    /// Breached above the limit (a max, a rule's `above`, a stuck value), else below it.
    pub fn above(&self) -> bool {
        match &self.spec {
            Some(s) => s.side == Side::Above,
            None => self.rule != AlertRule::Min,
        }
    }

    fn deadband(&self) -> f64 {
        self.threshold.deadband.unwrap_or(0.0).max(0.0)
    }

    fn for_micros(&self) -> i64 {
        i64::from(self.threshold.for_seconds.unwrap_or(0)) * 1_000_000
    }

    /// How long the signal must be clear before an open alert resolves.
    pub fn keep_firing_micros(&self) -> i64 {
        i64::from(self.threshold.keep_firing_for_seconds.unwrap_or(0)) * 1_000_000
    }

    /// How the signal's value at a reading judges (none yet: clear).
    pub fn class_of(&self, signal: Option<f64>) -> Class {
        signal.map_or(Class::Clear, |v| self.class(v))
    }

    pub fn class(&self, v: f64) -> Class {
        let stuck = matches!(self.rule, AlertRule::Stuck);
        let (breach, clear) = match (self.rule, self.above()) {
            // Never a threshold rule ([`Rule::of`] makes only min and max): never breached.
            (AlertRule::Offline, _) => (false, true),
            // Unchanged for the limit or longer.
            _ if stuck => (v >= self.limit, v < self.limit),
            (_, true) => (v > self.limit, v <= self.limit - self.deadband()),
            (_, false) => (v < self.limit, v >= self.limit + self.deadband()),
        };
        if breach {
            Class::Breach
        } else if clear {
            Class::Clear
        } else {
            Class::Hold
        }
    }

    /// The more extreme of two breaching values.
    fn worse(&self, a: f64, b: f64) -> f64 {
        if self.above() { a.max(b) } else { a.min(b) }
    }

    fn lasted(&self, since: Timestamp, at: Timestamp) -> bool {
        at.epoch_micros() - since.epoch_micros() >= self.for_micros()
    }
}

/// A breach that opened an alert: its whole life as far as the readings folded show it.
#[derive(Debug, Clone, PartialEq)]
pub struct Episode {
    /// The first breaching reading of the run (names the alert).
    pub start: Timestamp,
    /// The reading at which the run had lasted `forSeconds` (the start without one).
    pub opened_at: Timestamp,
    /// The most extreme breaching value.
    pub peak: f64,
    pub breaches: u64,
    pub last_breach_at: Timestamp,
    pub resolved_at: Option<Timestamp>,
    /// While open: the first reading of the run of clear ones that may resolve it once it
    /// spans `keepFiringForSeconds`.
    pub quiet_since: Option<Timestamp>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Phase {
    Normal,
    Pending {
        since: Timestamp,
        peak: f64,
        breaches: u64,
        last: Timestamp,
    },
    Open(Episode),
}

/// Folds readings of one rule in time order.
#[derive(Debug, Clone)]
pub struct Fold {
    pub rule: Rule,
    pub phase: Phase,
    /// What the rule judges, fed every reading folded (and any fed before the fold began).
    pub signal: Signal,
    /// Episodes that opened and resolved in the folded readings, oldest first.
    pub closed: Vec<Episode>,
    /// The newest reading folded.
    pub newest: Option<Timestamp>,
}

impl Fold {
    pub fn new(rule: Rule, phase: Phase) -> Self {
        let signal = rule.signal();
        Fold::warmed(rule, phase, signal)
    }

    /// A fold whose signal has already been fed the readings before its first.
    pub fn warmed(rule: Rule, phase: Phase, signal: Signal) -> Self {
        Fold {
            rule,
            phase,
            signal,
            closed: Vec::new(),
            newest: None,
        }
    }

    /// One reading, no older than the last one folded; how its signal judged.
    pub fn step(&mut self, at: Timestamp, v: f64) -> Class {
        self.newest = Some(at);
        let signal = self.signal.push(at, v);
        let class = self.rule.class_of(signal);
        let v = signal.unwrap_or(f64::NAN);
        let phase = std::mem::replace(&mut self.phase, Phase::Normal);
        self.phase = match (phase, class) {
            (Phase::Normal, Class::Breach) => self.breached(at, v, at, v, 1),
            (Phase::Normal, _) | (Phase::Pending { .. }, _) if class != Class::Breach => {
                Phase::Normal
            }
            (
                Phase::Pending {
                    since,
                    peak,
                    breaches,
                    ..
                },
                _,
            ) => self.breached(since, self.rule.worse(peak, v), at, v, breaches + 1),
            (Phase::Open(mut e), Class::Breach) => {
                e.peak = self.rule.worse(e.peak, v);
                e.breaches += 1;
                e.last_breach_at = at;
                e.quiet_since = None;
                Phase::Open(e)
            }
            (Phase::Open(mut e), Class::Hold) => {
                e.quiet_since = None;
                Phase::Open(e)
            }
            (Phase::Open(mut e), Class::Clear) => {
                let quiet = *e.quiet_since.get_or_insert(at);
                if at.epoch_micros() - quiet.epoch_micros() >= self.rule.keep_firing_micros() {
                    e.resolved_at = Some(at);
                    e.quiet_since = None;
                    self.closed.push(e);
                    Phase::Normal
                } else {
                    Phase::Open(e)
                }
            }
            (p, _) => p,
        };
        class
    }

    /// A run from `since` whose latest breach is `at`: open once it has lasted.
    fn breached(&self, since: Timestamp, peak: f64, at: Timestamp, v: f64, n: u64) -> Phase {
        let peak = self.rule.worse(peak, v);
        if self.rule.lasted(since, at) {
            Phase::Open(Episode {
                start: since,
                opened_at: at,
                peak,
                breaches: n,
                last_breach_at: at,
                resolved_at: None,
                quiet_since: None,
            })
        } else {
            Phase::Pending {
                since,
                peak,
                breaches: n,
                last: at,
            }
        }
    }
}

/// Whether a reading of the rule's metric may change the stored state, so the state must be
/// derived again from the table. Readings that each leave a state as it is leave it as it is
/// in any order, so skipping them (and not writing) is exact; a reading at or before the
/// state's own time is late and always derived again.
///
/// A rule of `rules` judges a signal of the readings before it, which only the table has:
/// every reading of its metric derives it (reads only; the state is written when it changes).
pub fn could_change(rule_state: Option<&RuleState>, rule: &Rule, at: Timestamp, v: f64) -> bool {
    if rule.spec.is_some() {
        return true;
    }
    let class = rule.class(v);
    let Some(s) = rule_state else {
        return class == Class::Breach;
    };
    if at <= s.at {
        return true;
    }
    match s.mode {
        RulePhase::Normal => class == Class::Breach,
        RulePhase::Pending => {
            class != Class::Breach || s.since.is_none_or(|since| rule.lasted(since, at))
        }
        RulePhase::Open => class == Class::Clear,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_schema::Severity;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_epoch_micros(1_776_000_000_000_000 + s * 1_000_000).unwrap()
    }
    fn rule(deadband: Option<f64>, for_seconds: Option<u32>) -> Rule {
        let mut th = Threshold::new(None, Some(30.0), Severity::Critical);
        th.deadband = deadband;
        th.for_seconds = for_seconds;
        Rule::of(&MetricName::new("temperature").unwrap(), &th).remove(0)
    }
    fn fold(r: Rule, vals: &[(i64, f64)]) -> Fold {
        let mut f = Fold::new(r, Phase::Normal);
        for (s, v) in vals {
            f.step(t(*s), *v);
        }
        f
    }

    #[test]
    fn a_breach_opens_and_the_first_reading_inside_resolves() {
        let f = fold(
            rule(None, None),
            &[(0, 20.0), (1, 31.0), (2, 35.0), (3, 30.0)],
        );
        assert_eq!(f.phase, Phase::Normal);
        assert_eq!(f.closed.len(), 1);
        let e = &f.closed[0];
        assert_eq!(
            (e.start, e.opened_at, e.peak, e.breaches),
            (t(1), t(1), 35.0, 2)
        );
        assert_eq!(e.resolved_at, Some(t(3)));
    }

    #[test]
    fn deadband_keeps_an_alert_open_until_the_value_is_back_by_the_margin() {
        let f = fold(
            rule(Some(2.0), None),
            &[(1, 31.0), (2, 29.0), (3, 30.5), (4, 28.5)],
        );
        assert!(
            matches!(f.phase, Phase::Open(_)),
            "29 and 28.5 are within 2 of 30"
        );
        let f = fold(rule(Some(2.0), None), &[(1, 31.0), (2, 29.0), (3, 28.0)]);
        assert_eq!(f.phase, Phase::Normal);
        assert_eq!(f.closed[0].resolved_at, Some(t(3)));
        // a hovering value does not open anything by itself
        let f = fold(rule(Some(2.0), None), &[(1, 29.0), (2, 30.0), (3, 29.5)]);
        assert_eq!((f.phase, f.closed.len()), (Phase::Normal, 0));
    }

    #[test]
    fn for_seconds_opens_only_when_the_breach_has_lasted_on_reading_time() {
        let r = rule(None, Some(60));
        let f = fold(r.clone(), &[(0, 31.0), (30, 32.0), (59, 33.0)]);
        assert!(matches!(f.phase, Phase::Pending { since, .. } if since == t(0)));
        let f = fold(r.clone(), &[(0, 31.0), (30, 32.0), (60, 31.0)]);
        let Phase::Open(e) = &f.phase else {
            panic!("{:?}", f.phase)
        };
        assert_eq!(
            (e.start, e.opened_at, e.breaches, e.peak),
            (t(0), t(60), 3, 32.0)
        );
        // a reading inside the limit restarts the clock
        let f = fold(r, &[(0, 31.0), (30, 29.0), (60, 31.0), (100, 31.0)]);
        assert!(matches!(f.phase, Phase::Pending { since, .. } if since == t(60)));
    }

    #[test]
    fn only_readings_that_could_move_the_state_ask_for_a_derivation() {
        let r = rule(Some(2.0), Some(60));
        let rule_state = |mode, since: Option<i64>| RuleState {
            mode,
            since: since.map(t),
            alert: None,
            at: t(100),
            threshold: r.threshold.clone(),
        };
        assert!(!could_change(None, &r, t(1), 25.0));
        assert!(could_change(None, &r, t(1), 31.0));
        let normal = rule_state(RulePhase::Normal, None);
        assert!(!could_change(Some(&normal), &r, t(101), 29.0));
        assert!(could_change(Some(&normal), &r, t(101), 31.0));
        assert!(could_change(Some(&normal), &r, t(99), 20.0), "late");
        let pending = rule_state(RulePhase::Pending, Some(90));
        assert!(!could_change(Some(&pending), &r, t(120), 31.0));
        assert!(
            could_change(Some(&pending), &r, t(150), 31.0),
            "lasted 60 s"
        );
        assert!(could_change(Some(&pending), &r, t(120), 29.0), "run ends");
        let open = rule_state(RulePhase::Open, Some(10));
        assert!(!could_change(Some(&open), &r, t(120), 29.0), "hold");
        assert!(could_change(Some(&open), &r, t(120), 27.0), "clear");
    }
}
