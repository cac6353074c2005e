//! The integration tests of `tidemark-testkit`, one binary: the test harness itself (the fault proxy against DynamoDB Local).
//!
//! One module per former test file: `cargo test -p tidemark-testkit --test it <module>::` runs one.
//! `local` needs the emulators (`scripts/services.sh start`; the tests start them when
//! nothing answers).

mod local;
