//! Alert rules over a metric's behaviour in time (docs/design.md §5 "Alert rules"): a
//! trailing window's aggregate, the rate of change between consecutive readings, or a value
//! that has not changed. A device keeps up to [`MAX_RULES`] of them in `rules`, next to its
//! thresholds; devices without their own take the fleet's `DEFAULT_RULES`.
//!
//! A rule is judged at each reading of its metric, on a *signal* computed from the stored
//! readings in time order (the aggregator's `alerting::signal`), with the same state machine
//! as a threshold: `forSeconds`, `deadband`, and `keepFiringForSeconds`. Its identity is its
//! kind and a hash of what it computes ([`RuleSpec::tag`]): the metric, the signal and the
//! side. The limit, severity and durations are not part of it, so changing them re-judges the
//! same rule from the newest reading on, as a changed threshold does; changing what it
//! computes is a new rule, and the old one's open alert resolves at the change.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::entities::{MAX_METRIC_MAGNITUDE, Threshold};
use crate::ids::{AlertRule, MetricName, Severity};

/// At most this many rules per device (and in the fleet default).
pub const MAX_RULES: usize = 16;
/// The longest window a rule may aggregate over: a day.
pub const MAX_WINDOW_SECONDS: u32 = 86_400;
/// The longest `unchangedForSeconds`, `forSeconds` or `keepFiringForSeconds`: a week.
pub const MAX_RULE_SECONDS: u32 = 7 * 86_400;

/// What is wrong with a rule, naming the field (the API answers it as a 400 with the field
/// path `rules[<i>].<field>`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{field}: {problem}")]
pub struct RuleError {
    pub field: &'static str,
    pub problem: String,
}

pub(crate) fn bad(field: &'static str, problem: impl Into<String>) -> RuleError {
    RuleError {
        field,
        problem: problem.into(),
    }
}

/// The aggregate a window rule takes of its readings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Aggregate {
    Avg,
    Min,
    Max,
    Count,
    Sum,
    /// The nearest-rank 95th percentile of the window's readings (exact: the value at rank
    /// ⌈0.95·n⌉). Only on devices that keep percentiles (`percentiles: true`).
    P95,
}

impl Aggregate {
    pub const ALLOWED: &'static str = "avg, min, max, count, sum, p95";

    pub fn parse(s: &str) -> Option<Aggregate> {
        Some(match s {
            "avg" => Aggregate::Avg,
            "min" => Aggregate::Min,
            "max" => Aggregate::Max,
            "count" => Aggregate::Count,
            "sum" => Aggregate::Sum,
            "p95" => Aggregate::P95,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Aggregate::Avg => "avg",
            Aggregate::Min => "min",
            Aggregate::Max => "max",
            Aggregate::Count => "count",
            Aggregate::Sum => "sum",
            Aggregate::P95 => "p95",
        }
    }
}

/// The time unit a rate rule's rate is per.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RatePer {
    Second,
    Minute,
    Hour,
}

impl RatePer {
    pub const ALLOWED: &'static str = "per_second, per_minute, per_hour";

    pub fn parse(s: &str) -> Option<RatePer> {
        Some(match s {
            "per_second" => RatePer::Second,
            "per_minute" => RatePer::Minute,
            "per_hour" => RatePer::Hour,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RatePer::Second => "per_second",
            RatePer::Minute => "per_minute",
            RatePer::Hour => "per_hour",
        }
    }

    pub fn seconds(self) -> u32 {
        match self {
            RatePer::Second => 1,
            RatePer::Minute => 60,
            RatePer::Hour => 3_600,
        }
    }
}

/// What a rule computes at each reading of its metric.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Signal {
    /// The aggregate of the metric's readings in the trailing window `(t - window, t]`.
    Window {
        aggregate: Aggregate,
        window_seconds: u32,
    },
    /// The change from the previous reading (in time order) per unit of time.
    Rate { per: RatePer },
    /// How long the value has been the same: the time since the first reading of the run of
    /// equal values this reading ends. Breached at `unchangedForSeconds` or more.
    Stuck,
}

/// Which side of the limit is a breach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    Above,
    Below,
}

/// One alert rule as a device or the fleet default declares it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawRule", into = "RawRule")]
pub struct RuleSpec {
    pub metric: MetricName,
    pub signal: Signal,
    pub side: Side,
    /// The limit: `above`/`below`, or `unchangedForSeconds` for a stuck rule.
    pub limit: f64,
    pub severity: Severity,
    pub deadband: Option<f64>,
    pub for_seconds: Option<u32>,
    pub keep_firing_for_seconds: Option<u32>,
}

/// The JSON shape of a rule, every field optional: [`RuleSpec::try_from`] decides which kind
/// it is and what is missing or wrong.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregate: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unchanged_for_seconds: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub above: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub below: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<Severity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadband: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_seconds: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_firing_for_seconds: Option<u32>,
}

/// `"5m"`, `"300s"`, `"1h"` (a whole number of seconds, minutes or hours) in seconds.
pub fn parse_window(s: &str) -> Option<u32> {
    let unit = match s.chars().last()? {
        's' => 1,
        'm' => 60,
        'h' => 3_600,
        _ => return None,
    };
    let digits = &s[..s.len() - 1];
    if digits.is_empty() || digits.len() > 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u32>().ok()?.checked_mul(unit)
}

/// A window in its shortest whole unit: `300` → `"5m"`.
pub fn format_window(seconds: u32) -> String {
    if seconds % 3_600 == 0 {
        format!("{}h", seconds / 3_600)
    } else if seconds % 60 == 0 {
        format!("{}m", seconds / 60)
    } else {
        format!("{seconds}s")
    }
}

pub(crate) fn seconds(field: &'static str, v: Option<u32>) -> Result<Option<u32>, RuleError> {
    match v {
        Some(s) if s > MAX_RULE_SECONDS => Err(bad(
            field,
            format!("{s} is over the limit of {MAX_RULE_SECONDS} s (a week)"),
        )),
        v => Ok(v.filter(|s| *s > 0)),
    }
}

pub(crate) fn finite(field: &'static str, v: f64) -> Result<f64, RuleError> {
    if v.is_finite() && v.abs() <= MAX_METRIC_MAGNITUDE {
        Ok(v)
    } else {
        Err(bad(field, format!("{v} is not a number within ±1e100")))
    }
}

impl TryFrom<RawRule> for RuleSpec {
    type Error = RuleError;

    fn try_from(r: RawRule) -> Result<Self, RuleError> {
        let metric = r
            .metric
            .as_deref()
            .ok_or_else(|| bad("metric", "required"))?;
        let metric = MetricName::new(metric).map_err(|e| bad("metric", e.to_string()))?;
        let kinds = [
            r.aggregate.is_some() || r.window.is_some(),
            r.rate.is_some(),
            r.unchanged_for_seconds.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() != 1 {
            return Err(bad(
                "rule",
                "give exactly one of aggregate and window, rate, or unchangedForSeconds",
            ));
        }
        let side_limit = || match (r.above, r.below) {
            (Some(a), None) => Ok((Side::Above, finite("above", a)?)),
            (None, Some(b)) => Ok((Side::Below, finite("below", b)?)),
            _ => Err(bad("above", "give exactly one of above and below")),
        };
        let (signal, side, limit) = if let Some(u) = r.unchanged_for_seconds {
            if r.above.is_some() || r.below.is_some() || r.deadband.is_some() {
                return Err(bad(
                    "unchangedForSeconds",
                    "a stuck-value rule takes no above, below or deadband",
                ));
            }
            let u = seconds("unchangedForSeconds", Some(u))?
                .ok_or_else(|| bad("unchangedForSeconds", "must be at least 1"))?;
            (Signal::Stuck, Side::Above, f64::from(u))
        } else if let Some(per) = &r.rate {
            let per = RatePer::parse(per).ok_or_else(|| {
                bad(
                    "rate",
                    format!("unknown rate {per:?}; allowed: {}", RatePer::ALLOWED),
                )
            })?;
            let (side, limit) = side_limit()?;
            (Signal::Rate { per }, side, limit)
        } else {
            let aggregate = r
                .aggregate
                .as_deref()
                .ok_or_else(|| bad("aggregate", "required with window"))?;
            let aggregate = Aggregate::parse(aggregate).ok_or_else(|| {
                bad(
                    "aggregate",
                    format!(
                        "unknown aggregate {aggregate:?}; allowed: {}",
                        Aggregate::ALLOWED
                    ),
                )
            })?;
            let window = r
                .window
                .as_deref()
                .ok_or_else(|| bad("window", "required with aggregate"))?;
            let window_seconds = parse_window(window).filter(|s| *s > 0).ok_or_else(|| {
                bad(
                    "window",
                    format!("{window:?} is not a duration like \"30s\", \"5m\" or \"1h\""),
                )
            })?;
            if window_seconds > MAX_WINDOW_SECONDS {
                return Err(bad(
                    "window",
                    format!("{window:?} is over the limit of 24h"),
                ));
            }
            let (side, limit) = side_limit()?;
            (
                Signal::Window {
                    aggregate,
                    window_seconds,
                },
                side,
                limit,
            )
        };
        let deadband = match r.deadband {
            Some(d) if !(0.0..=MAX_METRIC_MAGNITUDE).contains(&d) => {
                return Err(bad(
                    "deadband",
                    format!("{d} is not a number from 0 to 1e100"),
                ));
            }
            d => d.filter(|d| *d > 0.0),
        };
        Ok(RuleSpec {
            metric,
            signal,
            side,
            limit,
            severity: r.severity.unwrap_or(Severity::Warning),
            deadband,
            for_seconds: seconds("forSeconds", r.for_seconds)?,
            keep_firing_for_seconds: seconds("keepFiringForSeconds", r.keep_firing_for_seconds)?,
        })
    }
}

impl From<RuleSpec> for RawRule {
    fn from(s: RuleSpec) -> RawRule {
        let mut r = RawRule {
            metric: Some(s.metric.to_string()),
            severity: Some(s.severity),
            deadband: s.deadband,
            for_seconds: s.for_seconds,
            keep_firing_for_seconds: s.keep_firing_for_seconds,
            ..RawRule::default()
        };
        match s.signal {
            Signal::Window {
                aggregate,
                window_seconds,
            } => {
                r.aggregate = Some(aggregate.as_str().to_owned());
                r.window = Some(format_window(window_seconds));
            }
            Signal::Rate { per } => r.rate = Some(per.as_str().to_owned()),
            // The limit is a whole number of seconds by construction.
            Signal::Stuck => r.unchanged_for_seconds = Some(s.limit as u32),
        }
        if s.signal != Signal::Stuck {
            match s.side {
                Side::Above => r.above = Some(s.limit),
                Side::Below => r.below = Some(s.limit),
            }
        }
        r
    }
}

impl RuleSpec {
    /// Parses one rule from JSON, naming the field at fault.
    pub fn from_value(v: &serde_json::Value) -> Result<RuleSpec, RuleError> {
        let raw: RawRule = serde_json::from_value(v.clone()).map_err(|e| {
            bad(
                "rule",
                format!("{e} (fields: metric, aggregate, window, rate, unchangedForSeconds, above, below, severity, deadband, forSeconds, keepFiringForSeconds)"),
            )
        })?;
        RuleSpec::try_from(raw)
    }

    /// The rule's kind as alerts and events show it.
    pub fn rule(&self) -> AlertRule {
        match self.signal {
            Signal::Window { .. } => AlertRule::Window,
            Signal::Rate { .. } => AlertRule::Rate,
            Signal::Stuck => AlertRule::Stuck,
        }
    }

    /// Eight hex digits of SHA-256 over what the rule computes (metric, signal, side): its
    /// identity in rule-state keys and alert IDs.
    pub fn tag(&self) -> String {
        let what = match self.signal {
            Signal::Window {
                aggregate,
                window_seconds,
            } => format!("window|{}|{window_seconds}", aggregate.as_str()),
            Signal::Rate { per } => format!("rate|{}", per.as_str()),
            Signal::Stuck => "stuck".to_owned(),
        };
        let side = match self.side {
            Side::Above => "above",
            Side::Below => "below",
        };
        let digest = Sha256::digest(format!("{}|{what}|{side}", self.metric).as_bytes());
        digest[..4].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The limit's settings as a threshold (what a rule state records it was derived with).
    pub fn threshold(&self) -> Threshold {
        let mut t = match self.side {
            Side::Above => Threshold::new(None, Some(self.limit), self.severity),
            Side::Below => Threshold::new(Some(self.limit), None, self.severity),
        };
        t.deadband = self.deadband;
        t.for_seconds = self.for_seconds;
        t.keep_firing_for_seconds = self.keep_firing_for_seconds;
        t
    }

    /// Whether the rule needs the device to keep percentiles.
    pub fn needs_percentiles(&self) -> bool {
        matches!(
            self.signal,
            Signal::Window {
                aggregate: Aggregate::P95,
                ..
            }
        )
    }
}

impl fmt::Display for RuleSpec {
    /// The alert's message: `temperature avg over 5m above 30`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let side = match self.side {
            Side::Above => "above",
            Side::Below => "below",
        };
        let limit = crate::entities::number(self.limit);
        match self.signal {
            Signal::Window {
                aggregate,
                window_seconds,
            } => write!(
                f,
                "{} {} over {} {side} {limit}",
                self.metric,
                aggregate.as_str(),
                format_window(window_seconds)
            ),
            Signal::Rate { per } => write!(
                f,
                "{} rate {} {side} {limit}",
                self.metric,
                per.as_str().replace('_', " ")
            ),
            Signal::Stuck => write!(f, "{} unchanged for {limit} s", self.metric),
        }
    }
}

/// Parses a list of rules (a device's `rules`, the fleet's `DEFAULT_RULES`): at most
/// [`MAX_RULES`], each valid. The error names the rule's index.
pub fn parse_rules(v: &serde_json::Value) -> Result<Vec<RuleSpec>, (Option<usize>, RuleError)> {
    let list = v
        .as_array()
        .ok_or_else(|| (None, bad("rules", "must be an array of rules")))?;
    if list.len() > MAX_RULES {
        return Err((
            None,
            bad(
                "rules",
                format!("{} rules; at most {MAX_RULES} per device", list.len()),
            ),
        ));
    }
    let rules: Vec<RuleSpec> = list
        .iter()
        .enumerate()
        .map(|(i, r)| RuleSpec::from_value(r).map_err(|e| (Some(i), e)))
        .collect::<Result<_, _>>()?;
    // One rule per identity: two would share one state and one alert.
    for (i, r) in rules.iter().enumerate() {
        if let Some(j) = rules[..i]
            .iter()
            .position(|o| (&o.metric, o.rule(), o.tag()) == (&r.metric, r.rule(), r.tag()))
        {
            return Err((
                Some(i),
                bad(
                    "rule",
                    format!("computes the same as rules[{j}] (metric, signal and side); keep one"),
                ),
            ));
        }
    }
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_issues_three_examples_parse_and_print_back() {
        for v in [
            json!({"metric":"temperature","aggregate":"avg","window":"5m","above":30.0,"forSeconds":600}),
            json!({"metric":"pressure","rate":"per_minute","above":5.0}),
            json!({"metric":"flow","unchangedForSeconds":3600}),
        ] {
            let r = RuleSpec::from_value(&v).unwrap();
            let mut back = serde_json::to_value(&r).unwrap();
            back.as_object_mut().unwrap().remove("severity");
            assert_eq!(back, v);
            assert_eq!(serde_json::from_value::<RuleSpec>(back).unwrap(), r);
        }
        let w = RuleSpec::from_value(
            &json!({"metric":"temperature","aggregate":"avg","window":"5m","above":30}),
        )
        .unwrap();
        assert_eq!(w.to_string(), "temperature avg over 5m above 30");
        assert_eq!(w.rule(), AlertRule::Window);
    }

    #[test]
    fn bad_rules_name_the_field_at_fault() {
        for (v, field) in [
            (
                json!({"metric":"t","aggregate":"median","window":"5m","above":1}),
                "aggregate",
            ),
            (
                json!({"metric":"t","aggregate":"avg","window":"25h","above":1}),
                "window",
            ),
            (
                json!({"metric":"t","aggregate":"avg","window":"86401s","above":1}),
                "window",
            ),
            (
                json!({"metric":"t","aggregate":"avg","window":"5 minutes","above":1}),
                "window",
            ),
            (
                json!({"metric":"9t","aggregate":"avg","window":"5m","above":1}),
                "metric",
            ),
            (json!({"aggregate":"avg","window":"5m","above":1}), "metric"),
            (json!({"metric":"t","rate":"per_day","above":1}), "rate"),
            (json!({"metric":"t","rate":"per_minute"}), "above"),
            (
                json!({"metric":"t","rate":"per_minute","above":1,"below":0}),
                "above",
            ),
            (
                json!({"metric":"t","unchangedForSeconds":0}),
                "unchangedForSeconds",
            ),
            (
                json!({"metric":"t","unchangedForSeconds":60,"above":1}),
                "unchangedForSeconds",
            ),
            (
                json!({"metric":"t","rate":"per_minute","unchangedForSeconds":60}),
                "rule",
            ),
            (
                json!({"metric":"t","rate":"per_minute","above":1,"colour":"red"}),
                "rule",
            ),
            (
                json!({"metric":"t","rate":"per_minute","above":1e300}),
                "above",
            ),
            (
                json!({"metric":"t","rate":"per_minute","above":1,"deadband":-1}),
                "deadband",
            ),
            (
                json!({"metric":"t","rate":"per_minute","above":1,"forSeconds":9999999}),
                "forSeconds",
            ),
        ] {
            let e = RuleSpec::from_value(&v).unwrap_err();
            assert_eq!(e.field, field, "{v}: {e}");
        }
        let many = serde_json::Value::Array(vec![
            json!({"metric":"t","rate":"per_minute","above":1});
            17
        ]);
        assert_eq!(parse_rules(&many).unwrap_err().1.field, "rules");
        let twice = json!([
            {"metric":"t","rate":"per_minute","above":1},
            {"metric":"t","rate":"per_minute","above":2}
        ]);
        assert_eq!(parse_rules(&twice).unwrap_err().0, Some(1));
    }

    #[test]
    fn a_rules_identity_is_what_it_computes_not_its_limit() {
        let a =
            RuleSpec::from_value(&json!({"metric":"t","aggregate":"avg","window":"5m","above":30}))
                .unwrap();
        let b = RuleSpec::from_value(
            &json!({"metric":"t","aggregate":"avg","window":"300s","above":31,"forSeconds":60}),
        )
        .unwrap();
        let c =
            RuleSpec::from_value(&json!({"metric":"t","aggregate":"max","window":"5m","above":30}))
                .unwrap();
        let d =
            RuleSpec::from_value(&json!({"metric":"t","aggregate":"avg","window":"5m","below":30}))
                .unwrap();
        assert_eq!(a.tag(), b.tag());
        assert_ne!(a.tag(), c.tag());
        assert_ne!(a.tag(), d.tag());
        assert_eq!(a.tag().len(), 8);
    }
}
