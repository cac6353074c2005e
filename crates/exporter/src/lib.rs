//! The exporter: each closed hour of readings, and the hourly and daily rollups, as Parquet
//! objects under Hive-style partitions that Athena reads through partition projection
//! (issue: export to Parquet on S3).
//!
//! Built so far: the tables' columns ([`columns`], one source for the files and the Glue
//! table), deterministic Parquet files ([`file`]), the object keys ([`paths`]), one hour's
//! export ([`hour`]) from the table ([`source`]) to any object store ([`sink`], [`s3`]),
//! and a day's daily rollups, each group's closed hours and days in the table
//! ([`groups`]) and the devices' tags over time (the `devices` table), and the schedule
//! ([`schedule`]: closed hours once, hours the rollups role marked as changed after their
//! close again), which the deployed function ([`function`], on EventBridge Scheduler) and
//! `make run` run and `tidemark-admin export` backfills with.

pub mod columns;
pub mod config;
pub mod export_table;
pub mod file;
pub mod function;
pub mod groups;
pub mod hour;
pub mod paths;
pub mod s3;
pub mod schedule;
pub mod sink;

use thiserror::Error;

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
    #[error("S3 {operation} failed: {message}")]
    S3 {
        operation: &'static str,
        message: String,
    },
}
