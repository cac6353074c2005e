use thiserror::Error;
use tidemark_store::StoreError;

#[derive(Debug, Error)]
pub enum AggregatorError {
    #[error("configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An item of ours that does not hold what we write (never input: a bug or a hand edit).
    #[error("item {key} is corrupt: {reason}")]
    Corrupt { key: String, reason: String },
    #[error("item {key} still conflicted after {attempts} attempts")]
    Contended { key: String, attempts: u32 },
}
