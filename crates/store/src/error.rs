use aws_sdk_dynamodb::error::SdkError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("item conversion failed: {0}")]
    Conversion(#[from] serde_dynamo::Error),
    #[error("DynamoDB {operation} failed: {source}")]
    Dynamo {
        operation: &'static str,
        #[source]
        source: Box<aws_sdk_dynamodb::Error>,
    },
    /// A request the SDK refused to build (a bug in how we built it, never input).
    #[error("invalid {operation} request: {message}")]
    Request {
        operation: &'static str,
        message: String,
    },
    /// An item in the table that does not parse as what its key says it is (written by
    /// another tool or an older version): callers skip it, log it and count it.
    #[error("item {key} is unreadable: {message}")]
    Unreadable { key: String, message: String },
    /// An item that would pass DynamoDB's 400 KB limit: refused here, before any write.
    #[error("item {key} would be {bytes} bytes: over DynamoDB's 400 KB item size limit")]
    TooLarge { key: String, bytes: usize },
    #[error("table {table} was not {state} after {seconds} s")]
    Timeout {
        table: String,
        state: &'static str,
        seconds: u64,
    },
}

impl StoreError {
    /// Adapts an SDK error of any DynamoDB operation, naming the operation.
    pub fn sdk<E, R>(operation: &'static str) -> impl FnOnce(SdkError<E, R>) -> StoreError
    where
        aws_sdk_dynamodb::Error: From<SdkError<E, R>>,
    {
        move |e| StoreError::Dynamo {
            operation,
            source: Box::new(aws_sdk_dynamodb::Error::from(e)),
        }
    }

    /// The service error, when there is one (to tell a failed condition from an outage).
    pub fn dynamo(&self) -> Option<&aws_sdk_dynamodb::Error> {
        match self {
            StoreError::Dynamo { source, .. } => Some(source),
            _ => None,
        }
    }

    pub fn is_unreadable(&self) -> bool {
        matches!(self, StoreError::Unreadable { .. })
    }

    /// A write DynamoDB refuses for good because of the item itself (past its 400 KB item
    /// limit, or an update that would take it there): no retry can succeed.
    pub fn is_too_large(&self) -> bool {
        use aws_sdk_dynamodb::error::ProvideErrorMetadata;
        if matches!(self, StoreError::TooLarge { .. }) {
            return true;
        }
        self.dynamo().is_some_and(|e| {
            e.code() == Some("ValidationException")
                && e.message().is_some_and(|m| {
                    let m = m.to_ascii_lowercase();
                    m.contains("item size") && m.contains("exceeded")
                })
        })
    }

    /// Whether the same request, sent again, fails the same way: the item or the request
    /// itself is at fault (DynamoDB's `ValidationException`, an item or transaction past its
    /// limits, an item we cannot convert or parse, a request we built wrong). This is the one
    /// classification every function uses to tell what it sets aside from what it retries
    /// (docs/design.md §4, "What is retried, what is set aside").
    ///
    /// Everything else is transient, and retried for as long as it takes: throttling, server
    /// errors, timeouts, lost conditional races, and also a missing table or a denied grant,
    /// which an operator fixes (setting every record aside during such an outage would
    /// empty the pipeline into the quarantine).
    pub fn is_permanent(&self) -> bool {
        use aws_sdk_dynamodb::error::ProvideErrorMetadata;
        match self {
            StoreError::Conversion(_)
            | StoreError::Request { .. }
            | StoreError::Unreadable { .. }
            | StoreError::TooLarge { .. } => true,
            StoreError::Timeout { .. } => false,
            StoreError::Dynamo { source, .. } => {
                source.code() == Some("ValidationException")
                    || matches!(
                        source.as_ref(),
                        aws_sdk_dynamodb::Error::ItemCollectionSizeLimitExceededException(_)
                    )
            }
        }
    }

    /// A transaction DynamoDB cancelled because another one was writing one of its items,
    /// with no condition of its own failing: worth another try
    /// ([`crate::retry::TRANSACTION_CONFLICT_ATTEMPTS`]).
    pub fn is_transaction_conflict(&self) -> bool {
        match self.dynamo() {
            Some(aws_sdk_dynamodb::Error::TransactionCanceledException(c)) => {
                let codes: Vec<&str> = c
                    .cancellation_reasons()
                    .iter()
                    .filter_map(|r| r.code())
                    .collect();
                codes.contains(&"TransactionConflict") && !codes.contains(&"ConditionalCheckFailed")
            }
            Some(aws_sdk_dynamodb::Error::TransactionConflictException(_)) => true,
            _ => false,
        }
    }

    pub fn is_conditional_check_failed(&self) -> bool {
        matches!(
            self.dynamo(),
            Some(aws_sdk_dynamodb::Error::ConditionalCheckFailedException(_))
        )
    }
}

/// A failed write call, and whether re-sending it may succeed.
#[derive(Debug)]
pub struct BatchCallError {
    /// Throttling, a 5xx, a timeout, a dropped connection or a contended key: worth another
    /// try.
    pub retryable: bool,
    pub error: StoreError,
}

impl BatchCallError {
    /// A request that went wrong before or outside DynamoDB's own errors (one the SDK refused
    /// to build, an answer that does not add up, a key still contended).
    pub fn request(retryable: bool, operation: &'static str, message: impl Into<String>) -> Self {
        BatchCallError {
            retryable,
            error: StoreError::Request {
                operation,
                message: message.into(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::error::ErrorMetadata;
    use aws_sdk_dynamodb::operation::put_item::PutItemError;
    use aws_sdk_dynamodb::types::error::ProvisionedThroughputExceededException;

    fn service(code: &str) -> StoreError {
        StoreError::Dynamo {
            operation: "PutItem",
            source: Box::new(aws_sdk_dynamodb::Error::from(PutItemError::generic(
                ErrorMetadata::builder().code(code).build(),
            ))),
        }
    }

    #[test]
    fn a_refused_item_is_permanent_and_an_outage_is_not() {
        assert!(service("ValidationException").is_permanent());
        assert!(
            StoreError::TooLarge {
                key: "k".into(),
                bytes: 500_000
            }
            .is_permanent()
        );
        assert!(!service("ThrottlingException").is_permanent());
        assert!(!service("InternalServerError").is_permanent());
        assert!(!service("AccessDeniedException").is_permanent());
        let throttled = StoreError::Dynamo {
            operation: "PutItem",
            source: Box::new(
                aws_sdk_dynamodb::Error::ProvisionedThroughputExceededException(
                    ProvisionedThroughputExceededException::builder().build(),
                ),
            ),
        };
        assert!(!throttled.is_permanent());
        assert!(
            !StoreError::Timeout {
                table: "t".into(),
                state: "ACTIVE",
                seconds: 1
            }
            .is_permanent()
        );
    }
}
