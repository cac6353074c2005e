//! Reading a DynamoDB or Kinesis stream: shards and their lineage, shard iterators from a
//! position ([`Start`]), GetRecords pages, records in the shape Lambda puts them in an event.
//!
//! It exists so that shard iteration, lineage and positions are written once, and shared by
//! devstack's emulated event-source mappings (which poll streams), `tidemark-admin` (which
//! re-reads on-failure ranges and watches its fences in the table's stream) and the bench
//! (which replays a table's stream into the aggregator): the operator tool and the bench read
//! streams without depending on the local stack. The mapping engine (batching, retries,
//! bisect, checkpoints, on-failure records) stays in devstack; this crate only reads.
//!
//! - [`EventSource`]: a stream as a poller sees it; [`DynamoDbStreamSource`] and
//!   [`KinesisSource`] implement it over the AWS SDK;
//! - [`local_streams`]: the DynamoDB Streams client for DynamoDB Local (which repairs what it
//!   answers), and [`local`]: where the local emulators listen, with clients for them.
//!
//! Not deployed: no function reads a stream itself (Lambda's mappings do), so none depends on
//! this crate. Stream sequence numbers are compared with
//! `tidemark_aggregator::records::cmp_seq`, which the aggregator needs when deployed.

pub mod dynamodb;
pub mod kinesis;
pub mod local;
pub mod local_streams;

use std::future::Future;

use thiserror::Error;

pub use dynamodb::DynamoDbStreamSource;
pub use kinesis::KinesisSource;
pub use local::LocalEndpoints;

/// The account and region local ARNs are made of.
pub const LOCAL_ACCOUNT: &str = "000000000000";
pub const LOCAL_REGION: &str = "us-east-1";

#[derive(Debug, Error)]
pub enum StreamError {
    #[error("{service} {operation} failed: {message}")]
    Source {
        service: &'static str,
        operation: &'static str,
        message: String,
    },
    #[error("table {0} has no stream")]
    NoStream(String),
}

impl StreamError {
    /// The stream no longer holds the records asked for (`TrimmedDataAccessException`).
    pub fn is_trimmed(&self) -> bool {
        matches!(self, StreamError::Source { message, .. } if message.starts_with("TrimmedDataAccessException"))
    }
}

/// A shard and its lineage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardInfo {
    pub id: String,
    pub parent: Option<String>,
    pub adjacent_parent: Option<String>,
}

/// Where a shard iterator starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    TrimHorizon,
    Latest,
    After(String),
    /// At this sequence number, included (`AT_SEQUENCE_NUMBER`: what a re-drive starts at).
    At(String),
}

/// One GetRecords answer.
#[derive(Debug)]
pub struct Page<R> {
    pub records: Vec<R>,
    /// `None` once a closed shard has been read to its end.
    pub next: Option<String>,
    /// Kinesis' `MillisBehindLatest`, when the source reports it.
    pub millis_behind: Option<i64>,
}

/// A stream read shard by shard. Records are already in the Lambda event's shape.
pub trait EventSource: Send + Sync + 'static {
    type Record: Clone + Send + Sync + 'static;

    /// The stream's ARN (the `eventSourceARN` of every record).
    fn arn(&self) -> &str;
    /// The key of the batch description in an on-failure record.
    fn batch_info_key(&self) -> &'static str;
    /// Most records one GetRecords call may return.
    fn max_read(&self) -> usize;
    fn shards(&self) -> impl Future<Output = Result<Vec<ShardInfo>, StreamError>> + Send;
    /// A shard iterator, `None` if the shard has nothing more to give.
    fn iterator(
        &self,
        shard: &str,
        start: &Start,
    ) -> impl Future<Output = Result<Option<String>, StreamError>> + Send;
    fn read(
        &self,
        shard: &str,
        iterator: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Page<Self::Record>, StreamError>> + Send;
    fn sequence(record: &Self::Record) -> &str;
    /// Approximate arrival (Kinesis) or creation (DynamoDB) time, epoch milliseconds.
    fn arrival_millis(record: &Self::Record) -> i64;
}
