//! The API's integration tests, in one binary: each former test file is a module, named as
//! the file was.
//!
//! - The modules at the top need no service: the handlers over the in-memory store, the
//!   OpenAPI document, the scope rules, the dashboard's files.
//! - `local` holds the tests against DynamoDB Local (some of its modules also run the same
//!   behaviour over the in-memory store). Start the services first: `scripts/services.sh start`.
//!
//! Run one module: `cargo test -p tidemark-api --test it packed_memory::`, or
//! `cargo test -p tidemark-api --test it local::grafana::`; everything but the services'
//! tests: `cargo test -p tidemark-api --test it -- --skip local::`.

mod common;
mod local;
mod memory;
mod openapi;
mod packed_memory;
mod scope_rules;
mod ui_assets;
