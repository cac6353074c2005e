//! Every failure the API can answer with, and its JSON body `{"error":{"code","message"}}`
//! (`too_much` adds `limit`, the budget limit the answer would pass).
//!
//! Messages name the offending parameter and the rule so a caller can fix the request without
//! reading our code; anything internal (SDK errors, table names) goes to the log only.

use http::StatusCode;
use serde_json::json;
use thiserror::Error;
use tidemark_store::StoreError;

#[derive(Debug, Error)]
pub enum ApiError {
    /// A request parameter (path segment, query parameter, body field) is invalid.
    #[error("invalid {param}: {message}")]
    BadRequest { param: String, message: String },
    #[error("{0}")]
    NotFound(String),
    #[error("method {method} is not allowed on {path}; allowed: {allowed}")]
    MethodNotAllowed {
        method: String,
        path: String,
        allowed: String,
    },
    #[error("{0}")]
    Conflict(String),
    /// The caller's token lacks the scope the route needs.
    #[error("this route needs the {0} scope")]
    Forbidden(String),
    /// A request without the verified token claims the deployment's auth gives every
    /// request (it did not come through the JWT authorizer).
    #[error("{0}")]
    Unauthorized(String),
    /// What a caller limited to some sites may not do ([`crate::access::Scope`]): put a
    /// device in a site outside them, or use a fleet-wide route.
    #[error("{0}")]
    OutsideScope(String),
    /// An answer that would pass a limit of the request's budget ([`crate::budget`]): names
    /// the limit and how to narrow the query.
    #[error("{message}")]
    TooMuch {
        limit: crate::budget::Limit,
        message: String,
    },
    /// The caller has made its `CALLER_RATE_LIMIT` requests of this minute
    /// ([`crate::rate`]); answered 429 with `Retry-After: retry_after`.
    #[error(
        "this caller has made its {limit} requests of this minute (CALLER_RATE_LIMIT); retry in \
         {retry_after} s"
    )]
    RateLimited { limit: u32, retry_after: u64 },
    #[error("request body is {size} bytes; the limit is {limit}")]
    PayloadTooLarge { size: usize, limit: usize },
    /// DynamoDB throttled us past the SDK's retries: the caller may retry.
    #[error("the table is busy; retry shortly")]
    Busy(#[source] StoreError),
    #[error("internal error")]
    Internal(#[source] StoreError),
    /// Data in the table that does not parse (a bug or a foreign writer, never input).
    #[error("internal error")]
    Corrupt(String),
}

impl ApiError {
    pub fn bad(param: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::BadRequest {
            param: param.into(),
            message: message.into(),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest { .. } | ApiError::TooMuch { .. } => StatusCode::BAD_REQUEST,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Forbidden(_) | ApiError::OutsideScope(_) => StatusCode::FORBIDDEN,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) | ApiError::Corrupt(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ApiError::BadRequest { .. } => "bad_request",
            ApiError::TooMuch { .. } => "too_much",
            ApiError::NotFound(_) => "not_found",
            ApiError::MethodNotAllowed { .. } => "method_not_allowed",
            ApiError::Conflict(_) => "conflict",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::OutsideScope(_) => "outside_scope",
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::PayloadTooLarge { .. } => "payload_too_large",
            ApiError::RateLimited { .. } => "rate_limited",
            ApiError::Busy(_) => "busy",
            ApiError::Internal(_) | ApiError::Corrupt(_) => "internal",
        }
    }

    /// The public body; `Display` of internal variants never includes their source.
    pub fn body(&self) -> serde_json::Value {
        if let ApiError::TooMuch { limit, .. } = self {
            return json!({"error": {
                "code": self.code(),
                "limit": limit.as_str(),
                "message": self.to_string(),
            }});
        }
        json!({"error": {"code": self.code(), "message": self.to_string()}})
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        use aws_sdk_dynamodb::Error as E;
        match e.dynamo() {
            Some(
                E::ProvisionedThroughputExceededException(_)
                | E::RequestLimitExceeded(_)
                | E::ThrottlingException(_),
            ) => ApiError::Busy(e),
            _ => ApiError::Internal(e),
        }
    }
}

impl From<serde_dynamo::Error> for ApiError {
    fn from(e: serde_dynamo::Error) -> Self {
        ApiError::Corrupt(e.to_string())
    }
}
