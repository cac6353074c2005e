//! The rollups role: every reading change lands in its hour ([`hours`]: a placeholder while
//! the hour is open, its rollup recomputed from the table once closed), each write on the
//! item's version (re-read, backed off and retried on a lost race), and each touched day then
//! follows its hours once it has closed, a placeholder written once before that ([`days`]).
//! A bucket whose rollup outgrows one item (thousands of metrics under one device ID) is split
//! into pages ([`pages`]).
//!
//! - [`combine`]: a batch's reading changes as per-bucket plans, and a bucket's summary of
//!   its readings. Pure.
//! - [`hours`]: an hour's placeholder and its rollup from the table once closed.
//! - [`days`]: a day from its hours. Pure.
//! - [`pages`]: a bucket's rollup cut into pages under the item size limit.
//! - [`settled`]: when a bucket counts as closed, and what a container need not look at again.
//! - `batch`: the role over one batch, in that order.

mod batch;
pub mod combine;
pub mod days;
pub mod hours;
pub mod pages;
pub mod settled;
