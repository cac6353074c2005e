//! The watchdog's integration tests, one binary: `local` holds the tests that run against
//! DynamoDB Local (start it with `scripts/services.sh start`).
//!
//! One former test file is one module: `cargo test -p tidemark-watchdog --test it
//! watchdog_local::` runs them.

mod local;
