//! The admin tool's integration tests, one binary: `local` holds the tests that run against
//! DynamoDB Local, kinesis-mock and moto's S3 (start the services with `scripts/services.sh
//! start`); `common` the helpers they share.
//!
//! One former test file is one module: `cargo test -p tidemark-admin --test it redrive::`
//! runs the redrive tests only.

mod common;
mod local;
