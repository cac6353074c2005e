//! The API's writes to alert items: acknowledge, snooze, unsnooze. Each is one conditional
//! UpdateItem of only the attributes it owns, never a rewrite of the item, so a resolve the
//! pipeline commits meanwhile is never undone, and the write lands on the alert only while
//! its condition holds. The updates are data here; the DynamoDB store renders them
//! (`crates/api/src/dynamo/alerts.rs`), the in-memory store applies them.

use std::future::Future;

use std::fmt;

use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::{AlertId, AlertState, DeviceId, EntityKey, Key, Tag, Timestamp, field};
use tidemark_store::{Item, StoreError};

use super::Update;

/// Whose alert: a device's, or a group rule's (`GROUP#<tag>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlertOwner {
    Device(DeviceId),
    Group(Tag),
}

impl AlertOwner {
    /// The key of its alert `alert`.
    pub fn alert_key(&self, alert: &AlertId) -> Key {
        match self {
            AlertOwner::Device(d) => EntityKey::Alert {
                device: d.clone(),
                alert: alert.clone(),
            },
            AlertOwner::Group(g) => EntityKey::GroupAlert {
                tag: g.clone(),
                alert: alert.clone(),
            },
        }
        .key()
    }
}

impl fmt::Display for AlertOwner {
    /// `device sensor_01`, `group site:A`: as error messages name it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AlertOwner::Device(d) => write!(f, "device {d}"),
            AlertOwner::Group(g) => write!(f, "group {g}"),
        }
    }
}

/// What a write to an alert found.
#[derive(Debug, Clone, PartialEq)]
pub enum AlertOutcome {
    /// Written (or nothing was left to change); the alert as stored afterwards.
    Updated(Item),
    /// Already resolved: nothing to acknowledge or snooze.
    Resolved,
    /// No such alert (or no such device).
    Missing,
}

pub trait AlertWriter {
    /// Acknowledges an unresolved alert; `acknowledgedAt` is set the first time only.
    fn acknowledge(
        &self,
        owner: &AlertOwner,
        alert: &AlertId,
        now: Timestamp,
    ) -> impl Future<Output = Result<AlertOutcome, StoreError>> + Send;

    /// Sets `snoozedUntil` of an unresolved alert to `until` (replacing an earlier snooze).
    fn snooze(
        &self,
        owner: &AlertOwner,
        alert: &AlertId,
        until: Timestamp,
    ) -> impl Future<Output = Result<AlertOutcome, StoreError>> + Send;

    /// Removes `snoozedUntil`, whatever the alert's state (an alert without one is returned
    /// as it is). Never [`AlertOutcome::Resolved`].
    fn unsnooze(
        &self,
        owner: &AlertOwner,
        alert: &AlertId,
    ) -> impl Future<Output = Result<AlertOutcome, StoreError>> + Send;
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

/// What acknowledging does to an unresolved alert: `state` becomes `acknowledged`, and
/// `acknowledgedAt` is set the first time only (rendered by the DynamoDB store, applied by
/// the in-memory one).
pub fn ack_update(now: Timestamp) -> Update {
    Update {
        set: vec![(field::STATE, s("acknowledged"))],
        set_if_absent: vec![(field::ACKNOWLEDGED_AT, s(now.to_string()))],
        remove: Vec::new(),
    }
}

/// What snoozing does: `snoozedUntil` and nothing else.
pub fn snooze_update(until: Timestamp) -> Update {
    Update {
        set: vec![(field::SNOOZED_UNTIL, s(until.to_string()))],
        set_if_absent: Vec::new(),
        remove: Vec::new(),
    }
}

/// What unsnoozing does: removes `snoozedUntil` and nothing else.
pub fn unsnooze_update() -> Update {
    Update {
        set: Vec::new(),
        set_if_absent: Vec::new(),
        remove: vec![field::SNOOZED_UNTIL],
    }
}

/// The state an alert item says it is in (for the fake and for tests).
pub fn alert_state(item: &Item) -> Option<AlertState> {
    match item.get(field::STATE).and_then(|v| v.as_s().ok())?.as_str() {
        "open" => Some(AlertState::Open),
        "acknowledged" => Some(AlertState::Acknowledged),
        "resolved" => Some(AlertState::Resolved),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_alert_write_names_only_its_own_attributes() {
        let at = Timestamp::parse_rfc3339("2026-04-20T16:00:00Z").unwrap();
        let (expr, names, values) = snooze_update(at).expression();
        assert_eq!(expr, "SET #s0 = :s0");
        assert_eq!(names["#s0"], field::SNOOZED_UNTIL);
        assert_eq!(values[":s0"], s(at.to_string()));
        // An update with nothing to set is a bare REMOVE (DynamoDB refuses an empty SET).
        let (expr, names, values) = unsnooze_update().expression();
        assert_eq!(expr, "REMOVE #r0");
        assert_eq!(names["#r0"], field::SNOOZED_UNTIL);
        assert!(values.is_empty());
        let (expr, names, _) = ack_update(at).expression();
        assert_eq!(expr, "SET #s0 = :s0, #n0 = if_not_exists(#n0, :n0)");
        assert_eq!(
            (names["#s0"].as_str(), names["#n0"].as_str()),
            (field::STATE, field::ACKNOWLEDGED_AT)
        );
    }
}
