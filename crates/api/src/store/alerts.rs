//! The API's writes to alert items: acknowledge, snooze, unsnooze. Each is one conditional
//! UpdateItem of only the attributes it owns, never a rewrite of the item, so a resolve the
//! pipeline commits meanwhile is never undone, and the write lands on the alert only while
//! its condition holds.

use std::future::Future;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use tidemark_schema::table::attr;
use tidemark_schema::{AlertId, AlertState, DeviceId, EntityKey, Timestamp, field};
use tidemark_store::batch_get::key_item;
use tidemark_store::{Item, StoreError};

use super::{DynamoStore, GetStore, Update};

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
        device: &DeviceId,
        alert: &AlertId,
        now: Timestamp,
    ) -> impl Future<Output = Result<AlertOutcome, StoreError>> + Send;

    /// Sets `snoozedUntil` of an unresolved alert to `until` (replacing an earlier snooze).
    fn snooze(
        &self,
        device: &DeviceId,
        alert: &AlertId,
        until: Timestamp,
    ) -> impl Future<Output = Result<AlertOutcome, StoreError>> + Send;

    /// Removes `snoozedUntil`, whatever the alert's state (an alert without one is returned
    /// as it is). Never [`AlertOutcome::Resolved`].
    fn unsnooze(
        &self,
        device: &DeviceId,
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

/// When a conditional write applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum When {
    /// The alert exists and is not resolved.
    Unresolved,
    /// The alert exists, in any state.
    Exists,
}

impl DynamoStore {
    /// Applies `update` to the alert if `when` holds, returning it as stored. When an
    /// unresolved-only write's condition fails, one consistent read tells a missing alert
    /// from a resolved one.
    async fn update_alert(
        &self,
        device: &DeviceId,
        alert: &AlertId,
        update: Update,
        when: When,
    ) -> Result<AlertOutcome, StoreError> {
        let key = EntityKey::Alert {
            device: device.clone(),
            alert: alert.clone(),
        }
        .key();
        let (expression, mut names, mut values) = update.expression();
        names.insert("#pk".into(), attr::PK.into());
        let condition = match when {
            When::Unresolved => {
                names.insert("#st".into(), field::STATE.into());
                values.insert(":resolved".into(), s("resolved"));
                "attribute_exists(#pk) AND #st <> :resolved"
            }
            When::Exists => "attribute_exists(#pk)",
        };
        let res = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key_item(&key)))
            .condition_expression(condition)
            .update_expression(expression)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values((!values.is_empty()).then_some(values))
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .map_err(StoreError::sdk("UpdateItem"));
        match res {
            Ok(out) => Ok(AlertOutcome::Updated(out.attributes.unwrap_or_default())),
            Err(e) if e.is_conditional_check_failed() => Ok(match when {
                When::Exists => AlertOutcome::Missing,
                When::Unresolved => match self.get(key, true).await? {
                    None => AlertOutcome::Missing,
                    Some(_) => AlertOutcome::Resolved,
                },
            }),
            Err(e) => Err(e),
        }
    }
}

impl AlertWriter for DynamoStore {
    async fn acknowledge(
        &self,
        device: &DeviceId,
        alert: &AlertId,
        now: Timestamp,
    ) -> Result<AlertOutcome, StoreError> {
        self.update_alert(device, alert, ack_update(now), When::Unresolved)
            .await
    }

    async fn snooze(
        &self,
        device: &DeviceId,
        alert: &AlertId,
        until: Timestamp,
    ) -> Result<AlertOutcome, StoreError> {
        self.update_alert(device, alert, snooze_update(until), When::Unresolved)
            .await
    }

    async fn unsnooze(
        &self,
        device: &DeviceId,
        alert: &AlertId,
    ) -> Result<AlertOutcome, StoreError> {
        // Unconditional but for existence: removing an absent attribute changes nothing, so
        // DynamoDB writes no stream record for it, and it costs what a failed condition
        // would, without a second call.
        self.update_alert(device, alert, unsnooze_update(), When::Exists)
            .await
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
