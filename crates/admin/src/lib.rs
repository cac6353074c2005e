//! `tidemark-admin`: what an operator runs after an incident. Not deployed; it talks to the
//! same table, stream and Kinesis stream as the functions, with the operator's credentials
//! (or to `make run`'s local stack with `--local`).
//!
//! - [`rebuild`]: recompute a device's hourly and daily rollups exactly from its raw readings,
//!   safely while the pipeline runs (fences in the table's stream; see the module);
//! - [`redrive`]: on-failure records (what Lambda sends to an on-failure destination, or what
//!   `make run` writes under `.local/onfailure/`) fed through ingest again while Kinesis still
//!   retains them; the aggregator's become rebuilds of the devices and days they touched;
//! - [`set_aside`]: what the pipeline set aside (`redrive --set-aside`), fed through ingest
//!   again after a fix;
//! - [`members`]: a group's member counts set from its tag index (`count-members`), for
//!   devices tagged before the counts existed.
//!
//! A separate crate rather than a devstack subcommand: devstack is the local stack, this is an
//! operator tool for deployed tables too, and does not depend on it. It reads streams with
//! [`tidemark_streams`], the GetShardIterator/GetRecords code devstack's mappings poll with too,
//! so that code exists once.

pub mod cli;
pub mod files;
pub mod members;
pub mod rebuild;
pub mod redrive;
pub mod set_aside;
pub mod stream;
pub mod window;

use std::sync::atomic::{AtomicU64, Ordering};

use thiserror::Error;

pub use rebuild::{Rebuild, RebuildReport, Rebuilder};
pub use redrive::{OnFailure, RedriveReport, Redriver};

#[derive(Debug, Error)]
pub enum AdminError {
    #[error("export: {0}")]
    Export(#[from] tidemark_exporter::ExportError),
    #[error(transparent)]
    Store(#[from] tidemark_store::StoreError),
    #[error(transparent)]
    Source(#[from] tidemark_streams::StreamError),
    #[error("DynamoDB {operation} failed: {message}")]
    DynamoDb {
        operation: &'static str,
        message: String,
    },
    #[error("{0}")]
    Stream(String),
    #[error("{0}")]
    Input(String),
    #[error("no longer retained: {0}")]
    NotRetained(String),
    #[error("ingest failed: {0}")]
    Ingest(String),
}

impl AdminError {
    fn dynamodb<E: std::error::Error + 'static>(
        operation: &'static str,
        e: aws_sdk_dynamodb::error::SdkError<E>,
    ) -> Self {
        AdminError::DynamoDb {
            operation,
            message: aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string(),
        }
    }
}

/// A value no other fence write (in this or another process) uses.
fn nonce() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}-{}",
        std::process::id(),
        tidemark_schema::Timestamp::now().epoch_millis(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}
