//! The exporter's errors: what can stop an export.

use thiserror::Error;

/// What can stop an export (a file, an hour, a run).
#[derive(Debug, Error)]
pub enum ExportError {
    #[error(transparent)]
    Parquet(#[from] parquet::errors::ParquetError),
    #[error("column {0} is required and a row has no value for it")]
    Missing(&'static str),
    #[error("column {0} was given values of another type")]
    Mismatch(&'static str),
    #[error("row ({device}, {time_us}, {metric}) came after a row it should precede")]
    Unsorted {
        device: String,
        time_us: i64,
        metric: String,
    },
    #[error(transparent)]
    Store(#[from] tidemark_store::StoreError),
    #[error("writing a manifest: {0}")]
    Manifest(serde_json::Error),
    #[error("hour {hour} cannot be sealed: slice {slice} has no summary of this export")]
    Incomplete {
        hour: tidemark_schema::Timestamp,
        slice: u16,
    },
    #[error(
        "slice of hour {hour} of export {generation} superseded: its export is no longer the hour's"
    )]
    Superseded {
        hour: tidemark_schema::Timestamp,
        generation: i64,
    },
    #[error("SQS {operation} failed: {message}")]
    Queue {
        operation: &'static str,
        message: String,
    },
    #[error("S3 {operation} failed: {message}")]
    S3 {
        operation: &'static str,
        message: String,
    },
}
