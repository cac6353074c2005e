//! The watchdog: a scheduled function (EventBridge Scheduler, `rate(1 minute)`) that opens an
//! offline alert for every device no reading of which has arrived for its
//! `offlineAfterSeconds` (docs/design.md §5, "Offline devices").
//!
//! One run ([`Watchdog::run`]):
//!
//! 1. **Heartbeats.** It puts a heartbeat record into every shard of the readings stream and
//!    waits (briefly) until ingest has stored, and the alerts role has seen, everything ahead
//!    of them ([`tidemark_schema::HeartbeatItem`]). The oldest heartbeat every shard has
//!    passed is the *watermark*: every reading that arrived before it is on its device's item.
//!    A backlog (a slow or failing ingest, a DynamoDB outage) holds the watermark back, and
//!    with it every decision: silence the backlog explains is never taken for a dead device.
//! 2. **Due devices.** It queries GSI2's watch partitions for check times before the watermark
//!    (the alerts role keeps each watched device's there, [`upkeep`]): the cost grows with the
//!    devices falling silent, not with the fleet.
//! 3. **Decide.** For each, it reads the device item and the arrivals of the readings stored
//!    since its newest known reading (the alerts role writes arrivals down lazily); a device
//!    that arrived after all gets its check time moved, one that did not gets its alert, in
//!    one transaction with the device item (conditional on its version), under an ID made
//!    from its deadline, so two runs at once open one alert.
//!
//! 4. **Group rules.** Last, it judges each rule of `GROUP_RULES`: an `offlineFraction` from
//!    its group's counts (the 16 count items beside the tag index), a window from the group
//!    partials' per-minute statistics up to where the rollups role has come (the oldest
//!    `rollupsPassedAt` of the heartbeats); then it writes the rule's state with the group
//!    alert it opens or resolves in one transaction, only when that changes (`groups`,
//!    docs/design.md §5 "Group rules").
//!
//! The alert's `opened` event goes out as every alert's does: the alerts role reads the alert
//! item's stream record and publishes it once. The alert item carries the device item's
//! `tags`, so the event does too (`detail.tags`, routed by tag like a threshold alert's).
//!
//! Modules, the shape of every function crate: [`config`] (its settings), [`error`]
//! ([`WatchdogError`]), [`report`] ([`Report`], what one run did), [`store`] ([`WatchStore`],
//! the table operations a run needs), [`dynamo`] (that trait on DynamoDB), [`memory`] (the
//! same over the one in-memory test engine, [`MemoryStore`]), [`pipeline`] (the heartbeats)
//! and [`run`] (one run).
//!
//! [`upkeep`]: https://docs.rs/tidemark-aggregator (`offline::upkeep` in `crates/aggregator`)

pub mod config;
pub mod dynamo;
pub mod error;
pub mod groups;
pub mod memory;
pub mod pipeline;
pub mod report;
pub mod run;
pub mod store;

pub use config::WatchdogConfig;
pub use dynamo::DynamoWatch;
pub use error::WatchdogError;
pub use memory::MemoryStore;
pub use pipeline::{Heartbeats, KinesisHeartbeats};
pub use report::Report;
pub use run::Watchdog;
pub use store::WatchStore;
