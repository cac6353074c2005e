//! Rules over a group of devices (docs/design.md §5 "Group rules"): a group is a tag
//! (`site:A`), its members the devices that hold it. A group rule raises an alert of the
//! group's own (`kind: "group"`), not one per member.
//!
//! Two kinds, both judged by the watchdog each minute from items whose number does not grow
//! with the group's members:
//! - `offlineFraction`, the share of the group's members whose offline alert is open, from
//!   per-partition counters the tag index keeps ([`crate::entities::TagCountItem`]);
//! - a window aggregate of one metric over the members' readings
//!   (`{"metric":"temperature","aggregate":"avg","window":"15m","above":28}`), from the
//!   per-minute statistics the group partials carry ([`crate::entities::GroupPartialItem`]),
//!   so only for groups of a tag key in `GROUP_TAGS`.
//!
//! The fleet declares its group rules in `GROUP_RULES`.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::ids::{MetricName, Severity};
use crate::rules::{Aggregate, RuleError, Side, bad, finite, format_window, parse_window, seconds};
use crate::tags::Tag;

/// At most this many group rules in a fleet.
pub const MAX_GROUP_RULES: usize = 64;

/// A group window is read whole at every judgement (its minutes' partials), so it is kept to
/// an hour: the read grows with the window, and a day-long one would cost a day's partials
/// every minute (docs/design.md §8).
pub const MAX_GROUP_WINDOW_SECONDS: u32 = 3_600;

/// What a group rule computes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupSignal {
    /// Offline members over members, 0 to 1 (0 for a group with no members).
    OfflineFraction,
    /// The aggregate of the members' readings of `metric` in the trailing whole minutes of
    /// `window_seconds` (a whole number of minutes).
    Window {
        metric: MetricName,
        aggregate: Aggregate,
        window_seconds: u32,
    },
}

/// One group rule as the fleet declares it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawGroupRule", into = "RawGroupRule")]
pub struct GroupRuleSpec {
    pub group: Tag,
    pub signal: GroupSignal,
    pub side: Side,
    pub limit: f64,
    pub severity: Severity,
    pub for_seconds: Option<u32>,
    pub keep_firing_for_seconds: Option<u32>,
}

/// `{"above": 0.1}` or `{"below": 0.5}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub above: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub below: Option<f64>,
}

/// The JSON shape of a group rule, every field optional: [`GroupRuleSpec::try_from`] decides
/// what is missing or wrong.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawGroupRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offline_fraction: Option<RawLimit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregate: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub above: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub below: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<Severity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_seconds: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_firing_for_seconds: Option<u32>,
}

fn fraction(field: &'static str, v: f64) -> Result<f64, RuleError> {
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(bad(field, format!("{v} is not a fraction from 0 to 1")))
    }
}

fn limit_of(
    field: &'static str,
    above: Option<f64>,
    below: Option<f64>,
    check: impl Fn(&'static str, f64) -> Result<f64, RuleError>,
    above_field: &'static str,
    below_field: &'static str,
) -> Result<(Side, f64), RuleError> {
    match (above, below) {
        (Some(a), None) => Ok((Side::Above, check(above_field, a)?)),
        (None, Some(b)) => Ok((Side::Below, check(below_field, b)?)),
        _ => Err(bad(field, "give exactly one of above and below")),
    }
}

/// The window signal of a rule giving `metric`, `aggregate` and `window`.
fn window_signal(r: &RawGroupRule) -> Result<GroupSignal, RuleError> {
    let metric = r
        .metric
        .as_deref()
        .ok_or_else(|| bad("metric", "required"))?;
    let metric = MetricName::new(metric).map_err(|e| bad("metric", e.to_string()))?;
    let aggregate = r.aggregate.as_deref().ok_or_else(|| {
        bad(
            "aggregate",
            format!("required: one of {}", GROUP_AGGREGATES),
        )
    })?;
    let aggregate = match Aggregate::parse(aggregate) {
        Some(Aggregate::P95) => {
            return Err(bad(
                "aggregate",
                format!("p95 is not kept per minute across a group; one of {GROUP_AGGREGATES}"),
            ));
        }
        Some(a) => a,
        None => {
            return Err(bad(
                "aggregate",
                format!("{aggregate:?} is not one of {GROUP_AGGREGATES}"),
            ));
        }
    };
    let window = r
        .window
        .as_deref()
        .ok_or_else(|| bad("window", "required, e.g. \"15m\""))?;
    let window_seconds = parse_window(window).ok_or_else(|| {
        bad(
            "window",
            format!("{window:?} is not like \"15m\" or \"1h\""),
        )
    })?;
    if window_seconds == 0 || window_seconds % 60 != 0 {
        return Err(bad(
            "window",
            format!("{window:?}: a group window is a whole number of minutes"),
        ));
    }
    if window_seconds > MAX_GROUP_WINDOW_SECONDS {
        return Err(bad(
            "window",
            format!("{window:?} is over a group window's limit of 1h"),
        ));
    }
    Ok(GroupSignal::Window {
        metric,
        aggregate,
        window_seconds,
    })
}

/// The aggregates a group window takes.
pub const GROUP_AGGREGATES: &str = "avg, min, max, count, sum";

impl TryFrom<RawGroupRule> for GroupRuleSpec {
    type Error = RuleError;

    fn try_from(r: RawGroupRule) -> Result<Self, RuleError> {
        let group = r.group.as_deref().ok_or_else(|| bad("group", "required"))?;
        let group = Tag::parse(group).map_err(|e| bad("group", e.to_string()))?;
        let windowed = r.metric.is_some() || r.aggregate.is_some() || r.window.is_some();
        let (signal, (side, limit)) = match (&r.offline_fraction, windowed) {
            (Some(_), true) => {
                return Err(bad(
                    "offlineFraction",
                    "a group rule is either offlineFraction or a window (metric, aggregate, \
                     window), not both",
                ));
            }
            (Some(l), false) => {
                if r.above.is_some() || r.below.is_some() {
                    return Err(bad(
                        "above",
                        "an offlineFraction rule gives its limit inside it: \
                         {\"offlineFraction\": {\"above\": 0.1}}",
                    ));
                }
                (
                    GroupSignal::OfflineFraction,
                    limit_of(
                        "offlineFraction",
                        l.above,
                        l.below,
                        fraction,
                        "offlineFraction.above",
                        "offlineFraction.below",
                    )?,
                )
            }
            (None, true) => (
                window_signal(&r)?,
                limit_of("above", r.above, r.below, finite, "above", "below")?,
            ),
            (None, false) => {
                return Err(bad(
                    "offlineFraction",
                    "required: {\"above\": 0.1}, or a window (metric, aggregate, window, above)",
                ));
            }
        };
        Ok(GroupRuleSpec {
            group,
            signal,
            side,
            limit,
            severity: r.severity.unwrap_or(Severity::Warning),
            for_seconds: seconds("forSeconds", r.for_seconds)?,
            keep_firing_for_seconds: seconds("keepFiringForSeconds", r.keep_firing_for_seconds)?,
        })
    }
}

impl From<GroupRuleSpec> for RawGroupRule {
    fn from(s: GroupRuleSpec) -> RawGroupRule {
        let (above, below) = match s.side {
            Side::Above => (Some(s.limit), None),
            Side::Below => (None, Some(s.limit)),
        };
        let mut raw = RawGroupRule {
            group: Some(s.group.to_string()),
            severity: Some(s.severity),
            for_seconds: s.for_seconds,
            keep_firing_for_seconds: s.keep_firing_for_seconds,
            ..RawGroupRule::default()
        };
        match s.signal {
            GroupSignal::OfflineFraction => {
                raw.offline_fraction = Some(RawLimit { above, below });
            }
            GroupSignal::Window {
                metric,
                aggregate,
                window_seconds,
            } => {
                raw.metric = Some(metric.as_str().to_owned());
                raw.aggregate = Some(aggregate.as_str().to_owned());
                raw.window = Some(format_window(window_seconds));
                raw.above = above;
                raw.below = below;
            }
        }
        raw
    }
}

impl GroupRuleSpec {
    /// Parses one group rule from JSON, naming the field at fault.
    pub fn from_value(v: &serde_json::Value) -> Result<GroupRuleSpec, RuleError> {
        let raw: RawGroupRule = serde_json::from_value(v.clone()).map_err(|e| {
            bad(
                "rule",
                format!(
                    "{e} (fields: group, offlineFraction, metric, aggregate, window, above, \
                     below, severity, forSeconds, keepFiringForSeconds)"
                ),
            )
        })?;
        GroupRuleSpec::try_from(raw)
    }

    /// Eight hex digits of SHA-256 over what the rule computes (group, signal, side): its
    /// identity in its state's key and its alerts' IDs. The limit, severity and durations are
    /// not part of it, so changing them keeps the rule's open alert.
    pub fn tag(&self) -> String {
        let side = match self.side {
            Side::Above => "above",
            Side::Below => "below",
        };
        let signal = match &self.signal {
            GroupSignal::OfflineFraction => "offlineFraction".to_owned(),
            GroupSignal::Window {
                metric,
                aggregate,
                window_seconds,
            } => format!("{metric}|{}|{window_seconds}", aggregate.as_str()),
        };
        let digest = Sha256::digest(format!("{}|{signal}|{side}", self.group).as_bytes());
        digest[..4].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether `value` is on the breaching side of the limit.
    pub fn breached(&self, value: f64) -> bool {
        match self.side {
            Side::Above => value > self.limit,
            Side::Below => value < self.limit,
        }
    }
}

impl fmt::Display for GroupRuleSpec {
    /// The alert's message: `site:A offline fraction above 0.1`,
    /// `site:A temperature avg over 15m above 28`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let side = match self.side {
            Side::Above => "above",
            Side::Below => "below",
        };
        let limit = crate::entities::number(self.limit);
        match &self.signal {
            GroupSignal::OfflineFraction => {
                write!(f, "{} offline fraction {side} {limit}", self.group)
            }
            GroupSignal::Window {
                metric,
                aggregate,
                window_seconds,
            } => write!(
                f,
                "{} {metric} {} over {} {side} {limit}",
                self.group,
                aggregate.as_str(),
                format_window(*window_seconds)
            ),
        }
    }
}

/// Parses the fleet's group rules (`GROUP_RULES`): at most [`MAX_GROUP_RULES`], each valid,
/// no two with one identity. The error names the rule's index.
pub fn parse_group_rules(
    v: &serde_json::Value,
) -> Result<Vec<GroupRuleSpec>, (Option<usize>, RuleError)> {
    let list = v
        .as_array()
        .ok_or_else(|| (None, bad("groupRules", "must be an array of group rules")))?;
    if list.len() > MAX_GROUP_RULES {
        return Err((
            None,
            bad(
                "groupRules",
                format!("{} rules; at most {MAX_GROUP_RULES}", list.len()),
            ),
        ));
    }
    let rules: Vec<GroupRuleSpec> = list
        .iter()
        .enumerate()
        .map(|(i, r)| GroupRuleSpec::from_value(r).map_err(|e| (Some(i), e)))
        .collect::<Result<_, _>>()?;
    for (i, r) in rules.iter().enumerate() {
        if let Some(j) = rules[..i]
            .iter()
            .position(|o| (&o.group, o.tag()) == (&r.group, r.tag()))
        {
            return Err((
                Some(i),
                bad(
                    "rule",
                    format!(
                        "computes the same as groupRules[{j}] (group, signal and side); keep one"
                    ),
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
    fn the_issues_offline_fraction_rule_parses_and_prints_back() {
        let v = json!({"group":"site:A","offlineFraction":{"above":0.1}});
        let r = GroupRuleSpec::from_value(&v).unwrap();
        assert_eq!(r.group.to_string(), "site:A");
        assert_eq!((r.side, r.limit), (Side::Above, 0.1));
        let mut back = serde_json::to_value(&r).unwrap();
        back.as_object_mut().unwrap().remove("severity");
        assert_eq!(back, v);
        assert_eq!(r.to_string(), "site:A offline fraction above 0.1");
        assert!(r.breached(0.11) && !r.breached(0.1));
    }

    #[test]
    fn each_bad_group_rule_names_its_field() {
        for (v, field) in [
            (json!({"offlineFraction":{"above":0.1}}), "group"),
            (
                json!({"group":"siteA","offlineFraction":{"above":0.1}}),
                "group",
            ),
            (json!({"group":"site:A"}), "offlineFraction"),
            (
                json!({"group":"site:A","offlineFraction":{"above":1.5}}),
                "offlineFraction.above",
            ),
            (
                json!({"group":"site:A","offlineFraction":{"above":0.1,"below":0.2}}),
                "offlineFraction",
            ),
            (
                json!({"group":"site:A","offlineFraction":{"above":0.1},"forSeconds":999999999}),
                "forSeconds",
            ),
            (
                json!({"group":"site:A","metric":"t","aggregate":"avg","window":"15m"}),
                "above",
            ),
            (
                json!({"group":"site:A","metric":"t","aggregate":"median","window":"15m","above":1}),
                "aggregate",
            ),
            (
                json!({"group":"site:A","metric":"t","aggregate":"p95","window":"15m","above":1}),
                "aggregate",
            ),
            (
                json!({"group":"site:A","metric":"t","aggregate":"avg","window":"2h","above":1}),
                "window",
            ),
            (
                json!({"group":"site:A","metric":"t","aggregate":"avg","window":"90s","above":1}),
                "window",
            ),
            (
                json!({"group":"site:A","metric":"bad metric","aggregate":"avg","window":"5m","above":1}),
                "metric",
            ),
            (
                json!({"group":"site:A","aggregate":"avg","window":"5m","above":1}),
                "metric",
            ),
            (
                json!({"group":"site:A","metric":"t","aggregate":"avg","window":"5m","offlineFraction":{"above":0.1}}),
                "offlineFraction",
            ),
            (
                json!({"group":"site:A","offlineFraction":{"above":0.1},"above":3}),
                "above",
            ),
            (
                json!({"group":"site:A","offlineFraction":{"above":0.1},"colour":1}),
                "rule",
            ),
        ] {
            let e = GroupRuleSpec::from_value(&v).unwrap_err();
            assert_eq!(e.field, field, "{v}: {e}");
        }
    }

    #[test]
    fn the_identity_is_group_and_side_not_the_limit() {
        let a =
            GroupRuleSpec::from_value(&json!({"group":"site:A","offlineFraction":{"above":0.1}}))
                .unwrap();
        let b = GroupRuleSpec::from_value(
            &json!({"group":"site:A","offlineFraction":{"above":0.3},"severity":"critical"}),
        )
        .unwrap();
        let c =
            GroupRuleSpec::from_value(&json!({"group":"site:B","offlineFraction":{"above":0.1}}))
                .unwrap();
        assert_eq!(a.tag(), b.tag());
        assert_ne!(a.tag(), c.tag());
        assert_eq!(a.tag().len(), 8);
        let both = json!([{"group":"site:A","offlineFraction":{"above":0.1}},{"group":"site:A","offlineFraction":{"above":0.2}}]);
        assert_eq!(parse_group_rules(&both).unwrap_err().0, Some(1));
        let many = serde_json::Value::Array(
            (0..65)
                .map(|i| json!({"group":format!("site:S{i}"),"offlineFraction":{"above":0.1}}))
                .collect(),
        );
        assert_eq!(parse_group_rules(&many).unwrap_err().1.field, "groupRules");
    }

    #[test]
    fn the_issues_group_window_rule_parses_prints_back_and_has_its_own_identity() {
        let v = json!({"group":"site:A","metric":"temperature","aggregate":"avg","window":"15m","above":28.5});
        let r = GroupRuleSpec::from_value(&v).unwrap();
        assert_eq!(
            r.signal,
            GroupSignal::Window {
                metric: MetricName::new("temperature").unwrap(),
                aggregate: Aggregate::Avg,
                window_seconds: 900
            }
        );
        let mut back = serde_json::to_value(&r).unwrap();
        back.as_object_mut().unwrap().remove("severity");
        assert_eq!(back, v);
        assert_eq!(r.to_string(), "site:A temperature avg over 15m above 28.5");
        let offline =
            GroupRuleSpec::from_value(&json!({"group":"site:A","offlineFraction":{"above":0.1}}))
                .unwrap();
        let other = GroupRuleSpec::from_value(
            &json!({"group":"site:A","metric":"temperature","aggregate":"max","window":"15m","above":28}),
        )
        .unwrap();
        assert_ne!(r.tag(), offline.tag());
        assert_ne!(r.tag(), other.tag());
        let both = serde_json::Value::Array(vec![
            v.clone(),
            json!({"group":"site:A","offlineFraction":{"above":0.1}}),
        ]);
        assert_eq!(parse_group_rules(&both).unwrap().len(), 2);
    }
}
