use thiserror::Error;
use tidemark_store::StoreError;

#[derive(Debug, Error)]
pub enum AggregatorError {
    #[error("configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("item {key} still conflicted after {attempts} attempts")]
    Contended { key: String, attempts: u32 },
    #[error("not finished before the invocation's deadline")]
    OutOfTime,
}
