//! The API's writes to alert items in DynamoDB ([`AlertWriter`]): each one conditional
//! `UpdateItem` of only the attributes it owns (`crates/api/src/store/alerts.rs` says why).

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use tidemark_schema::table::attr;
use tidemark_schema::{AlertId, Timestamp, field};
use tidemark_store::StoreError;
use tidemark_store::batch_get::key_item;

use super::DynamoStore;
use crate::store::{
    AlertOutcome, AlertOwner, AlertWriter, GetStore, Update, ack_update, snooze_update,
    unsnooze_update,
};

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
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
        owner: &AlertOwner,
        alert: &AlertId,
        update: Update,
        when: When,
    ) -> Result<AlertOutcome, StoreError> {
        let key = owner.alert_key(alert);
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
        owner: &AlertOwner,
        alert: &AlertId,
        now: Timestamp,
    ) -> Result<AlertOutcome, StoreError> {
        self.update_alert(owner, alert, ack_update(now), When::Unresolved)
            .await
    }

    async fn snooze(
        &self,
        owner: &AlertOwner,
        alert: &AlertId,
        until: Timestamp,
    ) -> Result<AlertOutcome, StoreError> {
        self.update_alert(owner, alert, snooze_update(until), When::Unresolved)
            .await
    }

    async fn unsnooze(
        &self,
        owner: &AlertOwner,
        alert: &AlertId,
    ) -> Result<AlertOutcome, StoreError> {
        // Unconditional but for existence: removing an absent attribute changes nothing, so
        // DynamoDB writes no stream record for it, and it costs what a failed condition
        // would, without a second call.
        self.update_alert(owner, alert, unsnooze_update(), When::Exists)
            .await
    }
}
