//! Alerts: the alert item, threshold or offline, and its state. Kept apart from the device
//! whose rule states open and resolve them.

use serde::{Deserialize, Serialize};

use crate::ids::{AlertId, AlertRule, DeviceId, MetricName, Severity};
use crate::tags::Tags;
use crate::time::Timestamp;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AlertState {
    Open,
    Acknowledged,
    Resolved,
}

/// `DEVICE#<id>` / `ALERT#<alertId>`; while not resolved also in GSI1 under
/// `ALERT_SEVERITY#<severity>#<n>` / `ALERT#<alertId>` (AP6; `n` a listing partition,
/// [`crate::keys::severity_gsi1pk`]). Resolving removes the GSI1 keys, so the index holds
/// only alerts someone may still need to act on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AlertItem {
    pub pk: String,
    pub sk: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gsi1pk: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gsi1sk: Option<String>,
    pub device_id: DeviceId,
    pub alert_id: AlertId,
    /// The metric of a threshold alert; absent for an offline one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<MetricName>,
    pub rule: AlertRule,
    /// The rule of `rules` that raised it (absent for a threshold's or a silence's alert).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_spec: Option<crate::rules::RuleSpec>,
    pub severity: Severity,
    pub state: AlertState,
    pub message: String,
    /// The most extreme breaching value. With `breach_count` and `last_breach_at`, written
    /// with the alert's state changes: it may lag while the alert stays open, and is exact
    /// once it resolves.
    pub value: f64,
    pub threshold: f64,
    pub breach_count: u64,
    pub opened_at: Timestamp,
    pub last_breach_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acknowledged_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<Timestamp>,
    /// No notifications for this alert until then (set by the API); its state still
    /// follows the readings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snoozed_until: Option<Timestamp>,
    /// The device's tags (its item's latest declared `tags`) when the alert was opened or
    /// last written by the function that follows it, so its events can be routed by tag.
    /// Absent when the device has none, and on alerts written before tags existed.
    #[serde(default, skip_serializing_if = "Tags::is_empty")]
    pub tags: Tags,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entities::field;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    #[test]
    fn alert_field_constants_are_the_serialised_names() {
        let t = ts("2026-04-20T14:00:00Z");
        let m = MetricName::new("temperature").unwrap();
        let a = AlertItem {
            pk: String::new(),
            sk: String::new(),
            gsi1pk: None,
            gsi1sk: None,
            device_id: DeviceId::new("sensor_01").unwrap(),
            alert_id: AlertId::for_breach(t, &m, AlertRule::Max),
            metric: Some(m),
            rule: AlertRule::Max,
            rule_spec: Some(
                crate::rules::RuleSpec::from_value(
                    &serde_json::json!({"metric":"t","unchangedForSeconds":60}),
                )
                .unwrap(),
            ),
            severity: Severity::Critical,
            state: AlertState::Open,
            message: String::new(),
            value: 31.0,
            threshold: 30.0,
            breach_count: 1,
            opened_at: t,
            last_breach_at: t,
            acknowledged_at: None,
            resolved_at: Some(t),
            snoozed_until: Some(t),
            tags: Tags::new(
                [(
                    crate::tags::TagKey::new("site").unwrap(),
                    crate::tags::TagValue::new("A").unwrap(),
                )]
                .into(),
            )
            .unwrap(),
        };
        let v = serde_json::to_value(&a).unwrap();
        for f in [
            field::STATE,
            field::VALUE,
            field::BREACH_COUNT,
            field::LAST_BREACH_AT,
            field::RESOLVED_AT,
            field::SNOOZED_UNTIL,
            field::TAGS,
            field::RULE_SPEC,
        ] {
            assert!(v.get(f).is_some(), "alert item has no {f}: {v}");
        }
    }

    #[test]
    fn an_alert_stored_before_tags_existed_reads_with_no_tags() {
        let v = serde_json::json!({
            "pk": "DEVICE#sensor_01", "sk": "ALERT#20260420T140000000000Z-temperature-max",
            "deviceId": "sensor_01", "alertId": "20260420T140000000000Z-temperature-max",
            "metric": "temperature", "rule": "max", "severity": "critical", "state": "open",
            "message": "temperature above 30", "value": 31.0, "threshold": 30.0,
            "breachCount": 1, "openedAt": "2026-04-20T14:00:00.000000Z",
            "lastBreachAt": "2026-04-20T14:00:00.000000Z"
        });
        let a: AlertItem = serde_json::from_value(v).unwrap();
        assert!(a.tags.is_empty());
        assert!(serde_json::to_value(&a).unwrap().get(field::TAGS).is_none());
    }
}
