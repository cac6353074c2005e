//! The integration tests of `tidemark-store`, one binary: the store against DynamoDB Local and kinesis-mock.
//!
//! One module per former test file: `cargo test -p tidemark-store --test it <module>::` runs one.
//! `local` needs the emulators (`scripts/services.sh start`; the tests start them when
//! nothing answers).

mod local;
