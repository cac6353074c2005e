//! Tidemark's ingest function (docs/design.md §3–§4): Kinesis records → validated readings → one
//! DynamoDB table, bad records quarantined with their raw bytes, and a partial-batch response
//! that never lets the event source mapping skip an unwritten record.
//!
//! A reading's identity is its device and timestamp (microseconds), nothing else. Records of
//! one device with the same timestamp become one reading holding every metric they carry; the
//! same metric sent again with another value is a correction and the later record (Kinesis
//! order) wins; an exact resend changes nothing. Inside a batch the writer merges such records
//! before writing; across batches each reading is written as a merge into what the table holds:
//! new ones as conditional inserts, 25 a call ([`tidemark_store::write::insert`]), the rest one by one
//! ([`tidemark_store::write::map_merge`]), so nothing sent is ever erased by a later record.
//!
//! A device whose layout packs readings (docs/design.md §4, [`tidemark_schema::layout`]) has each
//! batch's readings merged into its slot items instead, one read-merge-write per slot under a
//! version check ([`tidemark_store::write::slots`], [`packing`]), with the same rules. Layouts come
//! from one cached query of the `CONFIG` partition, read into the layout book every function
//! uses ([`tidemark_store::layouts::LayoutBook`]); a configured `DEFAULT_LAYOUT` is recorded
//! there for the future, never for readings already written.
//!
//! - [`kpl`]: records aggregated by the Kinesis Producer Library, opened into their user
//!   records; [`units`]: a batch as units of decoding (a plain record, or one user record).
//! - [`decode_record`]: pure decoding and validation of one record (JSON readings, or a
//!   SenML pack: [`senml`]); [`decode_message`] also unwraps what the IoT rule forwards and
//!   names the thing that published it. A refused record is a [`Rejection`], kept whole in
//!   the quarantine ([`rejection`]).
//! - [`identity`]: which devices a record may speak for (`DEVICE_IDENTITY`: its partition key
//!   and the devices a gateway lists, or its IoT thing); readings of others are quarantined as
//!   `identity_mismatch` while the rest of the record is stored.
//! - [`metric_cap`]: a device's cap on distinct metric names per UTC day (default 1,000,
//!   `maxMetricsPerDay` on its item); names past it are taken out of their readings and
//!   quarantined as `too_many_metrics` while the rest is stored.
//! - [`Ingest`]: the handler, over small store traits ([`BatchWriteApi`], and [`store`]'s
//!   [`LayoutHistorySource`] and [`DeviceDirectory`]) and a [`tidemark_schema::Clock`];
//!   [`Ingest::new`] wires them to DynamoDB ([`dynamo`]: [`DynamoLookups`]). [`memory`] holds
//!   them all in memory ([`memory::MemoryStore`]) for tests and benchmarks.
//! - [`config`]: the function's settings ([`IngestConfig`]); [`report`]: what one invocation
//!   did ([`Report`]), its EMF metrics and log line.
//! - [`event`]: the Kinesis event as Lambda delivers it ([`KinesisBatch`]), its arrivals read
//!   to the millisecond.
//! - [`error`]: what fails a batch ([`IngestError`]), and whether a retry could cure it.
//! - The `tidemark-ingest` binary is a thin Lambda wrapper around [`Ingest::handle`].
//!
//! [`BatchWriteApi`]: tidemark_store::write::batch::BatchWriteApi

pub mod config;
pub mod decode;
pub mod dynamo;
pub mod error;
pub mod event;
pub mod handler;
pub mod heartbeat;
pub mod identity;
pub mod kpl;
pub mod memory;
pub mod metric_cap;
pub mod packing;
pub mod rejection;
pub mod report;
pub mod senml;
pub mod set_aside;
pub mod store;
pub mod units;

pub use config::{ConfigError, IngestConfig, UnknownDevices};
pub use decode::{
    Message, Rejection, decode_message, decode_record, decode_record_at, reading_item,
};
pub use dynamo::DynamoLookups;
pub use error::IngestError;
pub use event::{KinesisBatch, arrival_time};
pub use handler::{Ingest, deadline_from_epoch_millis};
pub use rejection::quarantine_items;
pub use report::Report;
pub use store::{DeviceDirectory, LayoutHistorySource};
