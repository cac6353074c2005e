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

    pub fn is_conditional_check_failed(&self) -> bool {
        matches!(
            self.dynamo(),
            Some(aws_sdk_dynamodb::Error::ConditionalCheckFailedException(_))
        )
    }
}
