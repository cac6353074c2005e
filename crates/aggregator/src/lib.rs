//! The aggregator function: the table's stream, read twice (two event-source mappings on one
//! stream, the same binary in two roles, [`Role`]):
//!
//! - **rollups** (long batching window): exact hourly and daily aggregates, each written
//!   once it closes ([`hours`]): while open its item is a placeholder readers replace (an
//!   hour by its readings, a day by the sum of its hours), and once closed every write of an
//!   hour is its recomputation from the table, conditional on the item's `version` and
//!   written only when the content differs: replays, bisected batches and records still
//!   ahead in the stream write nothing. A day follows its hours once it has closed
//!   ([`days`]). A bucket whose rollup outgrows 64 KB (a gateway with thousands of tags)
//!   continues in overflow pages ([`pages`]), each with its own version, none near the 400 KB
//!   limit. Once the batch has settled which records it reports for a retry, the role also
//!   writes its group partials ([`groups`]): per (group, hour) the values the records before
//!   the first of those stored and replaced, keyed by the batch's first record, under a
//!   manifest, so a replayed, retried or bisected batch never counts twice.
//! - **alerts** ([`alerting`], short window): each device's alert states follow its readings
//!   in timestamp order (see that module), the device item's `lastSeenAt`/`latest`, written
//!   only when a state changes or `lastSeenAt` is [`AggregatorConfig::device_refresh`]
//!   (15 min) behind the newest reading.
//!
//! Each stream record is decoded once ([`records::decode`]): reading changes, a device's
//! changed settings, an alert's images, a heartbeat, a TTL expiry, or nothing of ours. Both
//! roles take reading changes from there: a single reading item's INSERT, MODIFY
//! or user REMOVE is one; a packed slot part's record (docs/design.md §5) is one per reading its old
//! and new images differ in, applied exactly as that reading's own record would be (a part
//! only being sealed changes nothing; a TTL expiry, of a part as of a reading, never changes
//! a rollup). A part whose image does not decode is skipped, logged with its key and counted
//! (`UnreadableItems`); the rest of the batch goes on. Reads of stored readings (hours to
//! recompute, alert derivations) walk each layout epoch's single items or slot parts.
//!
//! The rollups role's files are under [`rollups`], the alerts role's under [`alerting`]; the
//! function itself is [`Aggregator`] ([`function`]), one invocation [`handler`].
//!
//! The logic is pure ([`combine`], [`days`], [`alerting::rules`], [`records`]) and talks to the table
//! through the small traits of [`store`], implemented for DynamoDB by [`dynamo::DynamoStore`]
//! and over the one in-memory test engine by `memory::MemoryStore` (unit tests, and other
//! crates' tests with the `testing` feature). Its settings are [`config`], what fails an
//! invocation [`error`], what one did (metrics and log line) [`Report`].
//!
//! In the alerts role (`AGGREGATOR_ROLE=alerts`) a [`Notifier`] also publishes every alert
//! state change the batch's alert records show to EventBridge, once per change as [`notify`]
//! defines it (deterministic event IDs, markers read before and written after `PutEvents`).
//!
//! No record stalls a shard ([`setaside`]): a transient failure is reported and retried for as
//! long as it takes; work that fails for good (a refused write, a panic, caught per device and
//! per bucket) is counted against its first record and, at the third failure, set aside as a
//! repair item that the role does from the table once the cause is gone.

pub mod alerting;
mod both;
pub mod config;
pub mod dynamo;
pub mod error;
pub(crate) mod failed;
pub mod function;
/// Group partials: the rollups role's share of a group's hour until the export recomputes it.
pub mod groups;
pub mod handler;
/// The store over the in-memory test engine (unit tests; other crates' tests with the
/// `testing` feature).
#[cfg(any(test, feature = "testing"))]
pub mod memory;
pub mod notify;
pub mod offline;
pub mod records;
pub mod report;
pub mod role;
pub mod rollups;
pub mod setaside;
pub mod store;
/// Stream records as DynamoDB Streams delivers them (unit tests; the `testing` feature).
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use both::BothRoles;
pub use config::{AggregatorConfig, Role};
pub use error::AggregatorError;
pub use function::Aggregator;
pub use notify::{Notifier, NotifyReport};
pub use report::Report;
pub use rollups::{combine, days, hours, pages};
pub use store::DynamoStore;
pub use tidemark_store::read::Walked;
