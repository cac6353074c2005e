//! A group rule's alert and its state (docs/design.md §5 "Group rules"), both in the group's
//! partition `GROUP#<key>:<value>`, written only by the watchdog, which judges the rules.

use serde::{Deserialize, Serialize};

use crate::entities::AlertState;
use crate::group_rules::GroupRuleSpec;
use crate::ids::{AlertId, AlertRule, Severity};
use crate::keys::{self, EntityKey};
use crate::tags::Tag;
use crate::time::Timestamp;

/// `GROUP#<tag>` / `ALERT#<opened at>-group.<rule tag>`; while not resolved also in GSI1
/// under `ALERT_SEVERITY#<severity>#<n>` / `ALERT#<alertId>`, beside the devices' open alerts,
/// so one listing shows both. Its attributes are named as a device alert's are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupAlertItem {
    pub pk: String,
    pub sk: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gsi1pk: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gsi1sk: Option<String>,
    pub group: Tag,
    pub alert_id: AlertId,
    /// Always [`AlertRule::Group`]: the `kind` a listing and an event show.
    pub rule: AlertRule,
    pub rule_spec: GroupRuleSpec,
    pub severity: Severity,
    pub state: AlertState,
    pub message: String,
    /// What the rule measured when it opened (the offline fraction, or the window's
    /// aggregate); runs that find it still breached write nothing.
    pub value: f64,
    pub threshold: f64,
    /// An `offlineFraction` rule's counts when `value` was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offline_members: Option<i64>,
    /// A window rule's: the readings `value` was folded from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readings: Option<u64>,
    pub opened_at: Timestamp,
    pub last_breach_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acknowledged_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snoozed_until: Option<Timestamp>,
}

/// What a group rule measured at a judgement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GroupMeasure {
    /// The group's members and how many of them have an open offline alert.
    Counts { members: i64, offline: i64 },
    /// A window's aggregate (`None`: no reading in the window) and how many readings it is of.
    Window { value: Option<f64>, readings: u64 },
}

impl GroupMeasure {
    /// The value the rule's limit is held against; `None` when there is nothing to judge
    /// (a window without readings is neither breached nor clear of a `below` limit: it is
    /// clear).
    pub fn value(&self) -> Option<f64> {
        match self {
            GroupMeasure::Counts { members, offline } => Some(fraction(*members, *offline)),
            GroupMeasure::Window { value, .. } => *value,
        }
    }
}

impl GroupAlertItem {
    /// A new, open alert of `rule` at `at`, with what it measured then.
    pub fn open(rule: &GroupRuleSpec, at: Timestamp, measure: GroupMeasure) -> Self {
        let alert_id = AlertId::for_group(at, &rule.tag());
        let key = EntityKey::GroupAlert {
            tag: rule.group.clone(),
            alert: alert_id.clone(),
        }
        .key();
        GroupAlertItem {
            gsi1pk: Some(keys::severity_gsi1pk(rule.severity, &key.pk)),
            gsi1sk: Some(key.sk.clone()),
            pk: key.pk,
            sk: key.sk,
            group: rule.group.clone(),
            alert_id,
            rule: AlertRule::Group,
            rule_spec: rule.clone(),
            severity: rule.severity,
            state: AlertState::Open,
            message: rule.to_string(),
            value: measure.value().unwrap_or(0.0),
            threshold: rule.limit,
            members: match measure {
                GroupMeasure::Counts { members, .. } => Some(members),
                GroupMeasure::Window { .. } => None,
            },
            offline_members: match measure {
                GroupMeasure::Counts { offline, .. } => Some(offline),
                GroupMeasure::Window { .. } => None,
            },
            readings: match measure {
                GroupMeasure::Window { readings, .. } => Some(readings),
                GroupMeasure::Counts { .. } => None,
            },
            opened_at: at,
            last_breach_at: at,
            acknowledged_at: None,
            resolved_at: None,
            snoozed_until: None,
        }
    }
}

/// Offline members over members; 0 for a group with none.
pub fn fraction(members: i64, offline: i64) -> f64 {
    if members <= 0 {
        0.0
    } else {
        (offline.max(0) as f64 / members as f64).min(1.0)
    }
}

/// `GROUP#<tag>` / `RULE#<rule tag>`: where a group rule stands. Written under an optimistic
/// lock (`version`) together with any alert it opens or resolves, so two watchdog runs at once
/// open one alert, and only when something changes: a run that finds the same standing writes
/// nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupRuleStateItem {
    pub pk: String,
    pub sk: String,
    #[serde(default)]
    pub version: u64,
    /// The open alert, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert: Option<AlertId>,
    /// Since when the condition has held without an alert (counting toward `forSeconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breach_since: Option<Timestamp>,
    /// Since when the condition has not held while the alert is open (counting toward
    /// `keepFiringForSeconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiet_since: Option<Timestamp>,
}

impl GroupRuleStateItem {
    pub fn key(rule: &GroupRuleSpec) -> keys::Key {
        EntityKey::GroupRule {
            tag: rule.group.clone(),
            rule: rule.tag(),
        }
        .key()
    }

    /// The state of a rule never judged.
    pub fn new(rule: &GroupRuleSpec) -> Self {
        let key = Self::key(rule);
        GroupRuleStateItem {
            pk: key.pk,
            sk: key.sk,
            version: 0,
            alert: None,
            breach_since: None,
            quiet_since: None,
        }
    }
}
