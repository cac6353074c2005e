//! The exporter: each closed hour of readings, and the hourly and daily rollups, as Parquet
//! objects under Hive-style partitions that Athena reads through partition projection
//! (issue: export to Parquet on S3).
//!
//! Built so far: the tables' columns ([`columns`], one source for the files and the Glue
//! table), deterministic Parquet files ([`file`]) and the object keys ([`paths`]). The
//! scheduled function, the S3 writes, the manifests and the template come next.

pub mod columns;
pub mod file;
pub mod paths;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum ExportError {
    #[error(transparent)]
    Parquet(#[from] parquet::errors::ParquetError),
    #[error("column {0} is required and a row has no value for it")]
    Missing(&'static str),
    #[error("column {0} was given values of another type")]
    Mismatch(&'static str),
}
