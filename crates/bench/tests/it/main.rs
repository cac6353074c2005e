//! The integration tests of `tidemark-bench`, one binary: the benchmark harness: its simulated mappings agree with the template, the metering proxy and both designs on DynamoDB Local.
//!
//! One module per former test file: `cargo test -p tidemark-bench --test it <module>::` runs one.
//! `local` needs the emulators (`scripts/services.sh start`; the tests start them when
//! nothing answers).

mod local;
mod template_agrees;
