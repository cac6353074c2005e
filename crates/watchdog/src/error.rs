//! The watchdog's errors: what can stop a run.

/// What can stop a run.
#[derive(Debug, thiserror::Error)]
pub enum WatchdogError {
    #[error("configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Store(#[from] tidemark_store::StoreError),
    #[error("Kinesis {operation}: {message}")]
    Kinesis {
        operation: &'static str,
        message: String,
    },
}
