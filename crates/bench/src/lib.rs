//! `make bench`: what Tidemark costs and how fast it is, measured on the local stack, side by
//! side with the textbook design (docs/design.md §8). Benchmarks report; they never assert.
//!
//! - [`meter`]: a metering proxy that makes DynamoDB report the write units of every call
//!   ([`capacity`] reads them from a response);
//! - [`scenario`]: deterministic fleets and the Kinesis events they produce;
//! - [`run`]: one scenario through one design, handlers called in process;
//! - [`baseline`]: the textbook design (per-record puts, per-reading rollup updates);
//! - [`api`], [`runtime`], [`artifacts`]: API latency, start-up and memory under a fake
//!   Lambda Runtime API, binary sizes and the criterion CPU figures;
//! - [`report`]: `bench/REPORT.md` and `bench/report.json`.

pub mod api;
pub mod artifacts;
pub mod baseline;
pub mod capacity;
pub mod local_ddb;
pub mod meter;
pub mod report;
pub mod run;
pub mod runtime;
pub mod scenario;
pub mod shadow;
pub mod storage;
pub mod stream;
pub mod windows;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum BenchError {
    #[error(transparent)]
    Store(#[from] tidemark_store::StoreError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error("stream: {0}")]
    Stream(String),
    #[error("baseline: {0}")]
    Baseline(String),
    #[error("function failed: {0}")]
    Function(String),
    #[error("setup: {0}")]
    Setup(String),
    #[error("{0}")]
    Other(String),
}
