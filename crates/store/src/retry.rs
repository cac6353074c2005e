//! One retry policy for every DynamoDB call Tidemark repeats by itself (unprocessed batch
//! items and keys, throttled single-item writes, lost optimistic races): which errors are worth
//! another try, and how long to wait before it.

use std::time::Duration;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use rand::Rng;

/// Throttling, server errors and transport trouble are transient; a request DynamoDB refuses
/// (validation, missing table, access denied) will be refused again.
pub fn is_retryable<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> bool {
    match e {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            true
        }
        SdkError::ServiceError(s) => matches!(
            s.err().code(),
            Some(
                "ProvisionedThroughputExceededException"
                    | "ThrottlingException"
                    | "RequestLimitExceeded"
                    | "InternalServerError"
                    | "InternalFailure"
                    | "ServiceUnavailable"
                    | "ReplicatedWriteConflictException"
                    | "TransactionInProgressException"
            )
        ),
        _ => false,
    }
}

/// How often a transaction DynamoDB cancelled for meeting another on one of its items
/// ([`crate::StoreError::is_transaction_conflict`]) is tried in all, a jittered
/// [`RetryPolicy::delay`] apart: writers that share an item (a group's count items, say)
/// meet now and then in a burst.
pub const TRANSACTION_CONFLICT_ATTEMPTS: u32 = 8;

/// Exponential backoff with full jitter: the n-th wait is uniform in
/// `[0, min(max_delay, base_delay * 2^(n-1))]`, which spreads competing writers best.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base_delay: Duration::from_millis(25),
            max_delay: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    /// The ceiling of the `attempt`-th wait (1-based).
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let factor = 1u32
            .checked_shl(attempt.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.base_delay
            .checked_mul(factor)
            .map_or(self.max_delay, |d| d.min(self.max_delay))
    }

    /// A random wait for the `attempt`-th retry.
    pub fn delay(&self, attempt: u32) -> Duration {
        let cap = self.ceiling(attempt).as_micros() as u64;
        Duration::from_micros(rand::rng().random_range(0..=cap))
    }
}
