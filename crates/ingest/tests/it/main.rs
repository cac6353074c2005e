//! The ingest function's integration tests, in one binary: each former test file is a
//! module, named as the file was.
//!
//! - The modules at the top need no service: the handler over the crate's in-memory store
//!   (`tidemark_ingest::memory::MemoryStore`), heartbeats, KPL limits, quarantine sizes, what
//!   is set aside, and a memory measurement run by hand (`kpl_memory`, ignored unless asked
//!   for).
//! - `local` holds the tests against DynamoDB Local. Start the services first:
//!   `scripts/services.sh start`.
//!
//! Run one module: `cargo test -p tidemark-ingest --test it set_aside::`, or
//! `cargo test -p tidemark-ingest --test it local::packed_local::`; everything but the
//! services' tests: `cargo test -p tidemark-ingest --test it -- --skip local::`.

mod common;
mod handler;
mod heartbeats;
mod kpl_limits;
mod kpl_memory;
mod local;
mod quarantine_size;
mod set_aside;
