//! The aggregator's integration tests, one binary: `local` holds the tests that run against
//! DynamoDB Local (start it with `scripts/services.sh start`); `common` the helpers they
//! share. Stream records are built by `tidemark_aggregator::testing`.
//!
//! One former test file is one module: `cargo test -p tidemark-aggregator --test it
//! alerts_local::` runs the alerts role's tests only.

mod common;
mod local;
