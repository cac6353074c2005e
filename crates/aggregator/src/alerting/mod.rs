//! The alerts role: each device's alert state follows its readings in time order, however
//! they arrive.
//!
//! - [`rules`]: one (metric, rule) as a state machine (breach, deadband hold, `forSeconds`,
//!   `keepFiringForSeconds`), judging a [`signal`]: the reading itself for a threshold, a
//!   window's aggregate, a rate or an unchanged run for a rule of `rules`.
//! - [`derive`](mod@derive): a rule's state derived again from the stored readings, in bounded memory.
//! - [`plan`]: alert items and the device's rule states to write ([`write`]: one alert's
//!   write, as the store takes it).
//! - [`device`]: one device's batch: decide whether anything may change, derive, write.
//!
//! The device item's `alertSlots` hold each rule's state as of its last change. A batch
//! whose readings each leave that state as it is writes nothing (the common case: one
//! consistent read of the device item per device and batch). A reading that could change it,
//! a late one, a correction or a delete derives the rule again from the
//! table, where every reading is before its stream record is: so concurrent invocations of a
//! hot device's partitions, replays, bisected batches and late data all end in the state of the
//! readings sorted by time. Writes of one device serialise on its `version`.
//!
//! A changed threshold only re-judges the newest reading from the stored state (it applies
//! from now on; history is never replayed as events), and an episode keeps the alert it
//! already has when late readings move its start earlier ([`plan::episode_id`]); one the
//! readings show never ended reopens its resolved alert ([`write::AlertWrite::Reopen`]). Alert
//! writes go in transactions DynamoDB accepts ([`commit`]).

pub mod commit;
pub mod derive;
pub mod device;
pub mod plan;
#[cfg(test)]
mod rule_tests;
pub mod rules;
pub mod signal;
#[cfg(test)]
mod tests;
pub mod write;
