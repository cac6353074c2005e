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
/// under `ALERT_SEVERITY#<severity>` / `ALERT#<alertId>`, beside the devices' open alerts,
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
    /// The offline fraction when it opened (runs that find it still breached write nothing).
    pub value: f64,
    pub threshold: f64,
    /// The group's counts when `value` was taken.
    pub members: i64,
    pub offline_members: i64,
    pub opened_at: Timestamp,
    pub last_breach_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acknowledged_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snoozed_until: Option<Timestamp>,
}

impl GroupAlertItem {
    /// A new, open alert of `rule` at `at`, with the group's counts then.
    pub fn open(rule: &GroupRuleSpec, at: Timestamp, members: i64, offline: i64) -> Self {
        let alert_id = AlertId::for_group(at, &rule.tag());
        let key = EntityKey::GroupAlert {
            tag: rule.group.clone(),
            alert: alert_id.clone(),
        }
        .key();
        GroupAlertItem {
            gsi1pk: Some(keys::severity_gsi1pk(rule.severity)),
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
            value: fraction(members, offline),
            threshold: rule.limit,
            members,
            offline_members: offline,
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
