//! DynamoDB's hard limits, in one place: the writers stay inside them by construction, and
//! the in-memory fakes refuse what DynamoDB would refuse, so a test meets the limit where
//! production would.

/// Actions in one `TransactWriteItems` (a larger one is a `ValidationException`, for ever).
pub const MAX_TRANSACT_ACTIONS: usize = 100;

/// Puts and deletes in one `BatchWriteItem`.
pub use crate::batch::MAX_BATCH_WRITE;

/// Keys in one `BatchGetItem`.
pub use crate::batch_get::MAX_KEYS as MAX_BATCH_GET_KEYS;

/// The error DynamoDB gives a transaction of more than [`MAX_TRANSACT_ACTIONS`] actions, as
/// a fake returns it.
pub fn too_many_actions(actions: usize) -> crate::StoreError {
    crate::StoreError::Request {
        operation: "TransactWriteItems",
        message: format!(
            "ValidationException: {actions} actions; a transaction takes at most {MAX_TRANSACT_ACTIONS}"
        ),
    }
}
