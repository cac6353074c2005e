//! The aggregator function: the table's stream, read twice (two event-source mappings on one
//! stream, the same binary in two roles, [`Role`]):
//!
//! - **rollups** (long batching window): exact hourly and daily aggregates. An hourly item
//!   keeps, per source item, the newest stream record it applied (`marks`,
//!   [`tidemark_schema::marks`]) and a `version` for optimistic concurrency, both advanced by
//!   the conditional write that applies a batch: replays, bisected batches and a partition
//!   split over two stream shards change nothing. A day follows its hours once it has closed,
//!   a placeholder readers sum until then ([`days`]). One write per touched hour per batch; a correction or delete that moves an hour's extreme
//!   folds the hour's raw readings page by page. A bucket whose
//!   rollup outgrows 64 KB (a gateway with thousands of tags) continues in overflow pages
//!   ([`pages`]), each with its own marks and version, none near the 400 KB limit.
//! - **alerts** ([`alerting`], short window): each device's alert states follow its readings
//!   in timestamp order (see that module), the device item's `lastSeenAt`/`latest`, written
//!   only when a state changes or `lastSeenAt` is [`AggregatorConfig::device_refresh`]
//!   (15 min) behind the newest reading.
//!
//! Both roles take reading changes from [`records`]: a single reading item's INSERT, MODIFY
//! or user REMOVE is one; a packed slot part's record (docs/design.md §5) is one per reading its old
//! and new images differ in, applied exactly as that reading's own record would be (a part
//! only being sealed changes nothing; a TTL expiry, of a part as of a reading, never changes
//! a rollup). A part whose image does not decode is skipped, logged with its key and counted
//! (`UnreadableItems`); the rest of the batch goes on. Reads of stored readings (extremes to
//! recompute, alert derivations) walk each layout epoch's single items or slot parts.
//!
//! The logic is pure ([`combine`], [`days`], [`alerting::rules`], [`records`]) and talks to the table
//! through the small traits of [`store`], implemented for DynamoDB by [`store::DynamoStore`].
//!
//! In the alerts role (`AGGREGATOR_ROLE=alerts`) a [`Notifier`] also publishes every alert
//! state change the batch's alert records show to EventBridge, once per change as [`notify`]
//! defines it (deterministic event IDs, markers read before and written after `PutEvents`).

pub mod alerting;
mod both;
pub mod combine;
pub mod config;
pub mod days;
pub mod dynamo;
pub mod error;
#[cfg(test)]
mod fake;
pub mod handler;
pub mod notify;
pub mod offline;
pub mod pages;
pub mod records;
pub mod report;
mod rollups;
pub mod store;
#[cfg(test)]
mod testing;

pub use both::BothRoles;
pub use config::{AggregatorConfig, Role};
pub use error::AggregatorError;
pub use handler::Aggregator;
pub use notify::{Notifier, NotifyReport};
pub use report::Report;
pub use store::DynamoStore;
pub use tidemark_store::read::Walked;
