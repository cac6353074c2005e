//! The integration tests of `tidemark-schema`, one binary: properties of the key schema.
//!
//! One module per former test file: `cargo test -p tidemark-schema --test it <module>::` runs one.

mod properties;
