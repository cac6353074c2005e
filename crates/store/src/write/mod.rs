//! Writing items, the counterpart of [`crate::read`]: the batch writer ([`batch`]), which
//! inserts new items 25 a call ([`insert`]) and merges the rest into what is stored
//! ([`map_merge`]); packed slots written under a version check ([`slots`]); layout and tag
//! histories replaced under an optimistic lock ([`layout_change`], [`tag_change`]); the tag
//! index's member and offline counts, moved in transactions ([`tag_counts`]); and the
//! in-memory engine as these writers use it ([`memory`]). Reading layouts and tags stays in
//! [`crate::layouts`] and [`crate::tags`], apart, so that a function that only reads them is
//! not granted the writes (the policy test follows module paths).

pub mod batch;
pub mod insert;
pub mod layout_change;
pub mod map_merge;
pub mod memory;
pub mod slots;
pub mod tag_change;
pub mod tag_counts;
