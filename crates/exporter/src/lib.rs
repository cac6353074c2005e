//! The exporter: each closed hour of readings, and the hourly and daily rollups, as Parquet
//! objects under Hive-style partitions that Athena reads through partition projection
//! (issue: export to Parquet on S3).
//!
//! Built so far: the tables' columns ([`columns`], one source for the files and the Glue
//! table), deterministic Parquet files ([`file`]), the object keys ([`paths`]), an hour
//! exported in slices ([`slice`], each a run of activity partitions and its own invocation) and
//! sealed from them ([`hour`]) to any object store ([`sink`], [`s3`]), and a day's daily
//! rollups, each group's closed hours and days in the table ([`groups`]) and the devices'
//! tags over time (the `devices` table), and the schedule ([`schedule`]: closed hours once,
//! hours the rollups role marked as changed after their close again, their slices sent to
//! a queue, [`queue`], and the hour sealed once all are in), which the deployed function
//! ([`function`], on EventBridge Scheduler and its SQS queue) and `make run` run and
//! `tidemark-admin export` backfills with.
//!
//! The shape of every function crate: [`config`] (its settings), [`error`] ([`ExportError`]),
//! [`report`] ([`Report`], what one run did), [`store`] (the traits the export and the
//! schedule run over: [`ExportTable`], [`State`]), [`dynamo`] (them on DynamoDB) and
//! [`memory`] (them over the one in-memory test engine, [`MemoryStore`]).

pub mod columns;
pub mod config;
pub mod dynamo;
pub mod error;
pub mod file;
pub mod function;
pub mod groups;
pub mod hour;
pub mod memory;
pub mod objects;
pub mod paths;
pub mod queue;
pub mod report;
pub mod s3;
pub mod schedule;
pub mod sink;
pub mod slice;
pub mod slicing;
pub mod store;

pub use dynamo::{DynamoExportTable, DynamoState};
pub use error::ExportError;
pub use memory::MemoryStore;
pub use report::Report;
pub use store::{ExportTable, State};
