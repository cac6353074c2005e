//! Offline devices (docs/design.md §5, "Offline devices"): a device whose readings stop
//! arriving for its `offlineAfterSeconds` gets an offline alert, and its next reading resolves
//! it.
//!
//! - [`arrivals`]: what a batch of the table's stream says about arrivals (each reading and
//!   slot part carries the Kinesis arrival of the record that wrote it) and about the
//!   pipeline's heartbeats.
//! - [`upkeep`]: what the alerts role writes on the device item for it: the newest arrival,
//!   the GSI2 watch key (when the silence needs checking), the resolution.
//!
//! The watchdog (`crates/watchdog`, a scheduled function) finds the devices whose check time
//! has passed, makes sure the pipeline has passed it too, and opens their alerts.

pub mod arrivals;
mod heartbeats;
pub mod upkeep;
