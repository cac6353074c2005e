//! What an operator does to an alert: acknowledge, snooze, unsnooze. Each validates the
//! request, then makes one conditional write of only its own attributes (see
//! [`crate::store::AlertWriter`]), so it never undoes what the pipeline wrote meanwhile.

use http::StatusCode;
use tidemark_schema::AlertId;

use super::Reply;
use crate::App;
use crate::error::ApiError;
use crate::render;
#[allow(unused_imports)]
use crate::store::traits::*;
use crate::store::{AlertOutcome, AlertOwner, Store};
use crate::validate;

fn missing(owner: &AlertOwner, alert: &AlertId) -> ApiError {
    ApiError::NotFound(format!("{owner} has no alert {alert}"))
}

impl<S: Store> App<S> {
    /// Idempotent: the first `acknowledgedAt` stays.
    pub(super) async fn ack(&self, id: AlertOwner, alert: AlertId) -> Result<Reply, ApiError> {
        match self.store.acknowledge(&id, &alert, self.now()).await? {
            AlertOutcome::Updated(item) => Ok((StatusCode::OK, render::alert(item)?)),
            AlertOutcome::Resolved => Err(ApiError::Conflict(format!(
                "alert {alert} of {id} is already resolved; only open alerts can be \
                 acknowledged"
            ))),
            AlertOutcome::Missing => Err(missing(&id, &alert)),
        }
    }

    /// Silences an unresolved alert's notifications until the body's `until`; its state
    /// still follows the readings. A later snooze replaces an earlier one.
    pub(super) async fn snooze(
        &self,
        id: AlertOwner,
        alert: AlertId,
        body: &[u8],
    ) -> Result<Reply, ApiError> {
        let until = validate::snooze_until(self.within_body_limit(body)?, self.now())?;
        match self.store.snooze(&id, &alert, until).await? {
            AlertOutcome::Updated(item) => Ok((StatusCode::OK, render::alert(item)?)),
            AlertOutcome::Resolved => Err(ApiError::Conflict(format!(
                "alert {alert} of {id} is already resolved; only unresolved alerts can \
                 be snoozed"
            ))),
            AlertOutcome::Missing => Err(missing(&id, &alert)),
        }
    }

    /// Ends a snooze. Idempotent: 200 with the alert whether or not it was snoozed, in any
    /// state; 404 only for an unknown alert.
    pub(super) async fn unsnooze(&self, id: AlertOwner, alert: AlertId) -> Result<Reply, ApiError> {
        match self.store.unsnooze(&id, &alert).await? {
            AlertOutcome::Updated(item) => Ok((StatusCode::OK, render::alert(item)?)),
            // (Never `Resolved`: unsnoozing applies in any state.)
            AlertOutcome::Resolved | AlertOutcome::Missing => Err(missing(&id, &alert)),
        }
    }
}
