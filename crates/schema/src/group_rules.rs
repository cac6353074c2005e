//! Rules over a group of devices (docs/design.md §5 "Group rules"): a group is a tag
//! (`site:A`), its members the devices that hold it. A group rule raises an alert of the
//! group's own (`kind: "group"`), not one per member.
//!
//! Built: `offlineFraction`, the share of the group's members whose offline alert is open,
//! judged by the watchdog each minute from per-partition counters the tag index keeps
//! ([`crate::entities::TagCountItem`]), so the judgement reads a fixed handful of items
//! whatever the group's size. The fleet declares its group rules in `GROUP_RULES`.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::ids::Severity;
use crate::rules::{RuleError, Side, bad, seconds};
use crate::tags::Tag;

/// At most this many group rules in a fleet.
pub const MAX_GROUP_RULES: usize = 64;

/// What a group rule computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupSignal {
    /// Offline members over members, 0 to 1 (0 for a group with no members).
    OfflineFraction,
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
    /// Group window aggregates (`metric`, `aggregate`, `window`) are named so that a rule
    /// giving them is told they are not built yet, rather than that the field is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregate: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
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

impl TryFrom<RawGroupRule> for GroupRuleSpec {
    type Error = RuleError;

    fn try_from(r: RawGroupRule) -> Result<Self, RuleError> {
        let group = r.group.as_deref().ok_or_else(|| bad("group", "required"))?;
        let group = Tag::parse(group).map_err(|e| bad("group", e.to_string()))?;
        if r.metric.is_some() || r.aggregate.is_some() || r.window.is_some() {
            return Err(bad(
                "aggregate",
                "a group rule over a window of its members' readings is not built yet; \
                 a group rule takes offlineFraction",
            ));
        }
        let limit = r
            .offline_fraction
            .ok_or_else(|| bad("offlineFraction", "required: {\"above\": 0.1}"))?;
        let (side, limit) = match (limit.above, limit.below) {
            (Some(a), None) => (Side::Above, fraction("offlineFraction.above", a)?),
            (None, Some(b)) => (Side::Below, fraction("offlineFraction.below", b)?),
            _ => {
                return Err(bad(
                    "offlineFraction",
                    "give exactly one of above and below",
                ));
            }
        };
        Ok(GroupRuleSpec {
            group,
            signal: GroupSignal::OfflineFraction,
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
        let limit = match s.side {
            Side::Above => RawLimit {
                above: Some(s.limit),
                below: None,
            },
            Side::Below => RawLimit {
                above: None,
                below: Some(s.limit),
            },
        };
        RawGroupRule {
            group: Some(s.group.to_string()),
            offline_fraction: Some(limit),
            severity: Some(s.severity),
            for_seconds: s.for_seconds,
            keep_firing_for_seconds: s.keep_firing_for_seconds,
            ..RawGroupRule::default()
        }
    }
}

impl GroupRuleSpec {
    /// Parses one group rule from JSON, naming the field at fault.
    pub fn from_value(v: &serde_json::Value) -> Result<GroupRuleSpec, RuleError> {
        let raw: RawGroupRule = serde_json::from_value(v.clone()).map_err(|e| {
            bad(
                "rule",
                format!("{e} (fields: group, offlineFraction, severity, forSeconds, keepFiringForSeconds)"),
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
        let digest = Sha256::digest(format!("{}|offlineFraction|{side}", self.group).as_bytes());
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
    /// The alert's message: `site:A offline fraction above 0.1`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let side = match self.side {
            Side::Above => "above",
            Side::Below => "below",
        };
        write!(
            f,
            "{} offline fraction {side} {}",
            self.group,
            crate::entities::number(self.limit)
        )
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
                    format!("computes the same as groupRules[{j}] (group and side); keep one"),
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
                json!({"group":"site:A","metric":"t","aggregate":"avg","window":"15m","above":28}),
                "rule",
            ),
            (
                json!({"group":"site:A","metric":"t","aggregate":"avg","window":"15m"}),
                "aggregate",
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
}
