//! The aggregator function: DynamoDB Streams records of readings become exact hourly and
//! daily rollups, an alert lifecycle and each device's latest reading (DESIGN §5).
//!
//! Exactly once under at-least-once delivery rests on three watermarks, each stored on the
//! item it protects and advanced by a conditional write in the same request as the change:
//!
//! - aggregate items keep, per source partition key, the highest stream sequence number they
//!   have applied (`applied`), with a `version` for optimistic concurrency;
//! - the device item's `lastSeenAt`: only readings newer than it move `latest` or feed alerts,
//!   and alert changes commit in one transaction with it (only when an alert changes; the
//!   common case is one plain UpdateItem);
//! - an alert's own state time (`lastBreachAt`, then `resolvedAt`), checked as well.
//!
//! Cost (DESIGN §8): one write per touched item per batch — hourly, daily, device — so on
//! the standard fleet (about 5 readings of a device per 300 s batch) the aggregator spends
//! 0.6 WRU per reading (`cargo run -p tidemark-aggregator --example wru`).
//!
//! The logic is pure ([`combine`], [`alerts`], [`records`]) and talks to the table through the
//! small traits of [`store`], implemented for DynamoDB by [`store::DynamoStore`].

pub mod alerts;
pub mod combine;
pub mod config;
pub mod error;
#[cfg(test)]
mod fake;
pub mod handler;
pub mod records;
pub mod store;

pub use config::AggregatorConfig;
pub use error::AggregatorError;
pub use handler::{Aggregator, Report};
pub use store::DynamoStore;
