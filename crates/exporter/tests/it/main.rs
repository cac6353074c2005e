//! The exporter's integration tests, one binary: `local` holds the tests that run against
//! DynamoDB Local, moto's S3 and DuckDB (start the services with `scripts/services.sh
//! start`); `common` the helpers they share.
//!
//! One former test file is one module: `cargo test -p tidemark-exporter --test it
//! hour_local::` runs the hour export's tests only.

mod common;
mod local;
