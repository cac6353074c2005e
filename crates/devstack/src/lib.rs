//! The local stack: everything `make run` does beyond starting the emulators.
//!
//! - [`bootstrap`]: the table and the stream, from the same definition the template uses;
//! - [`esm`]: emulated event-source mappings (Kinesis → ingest, DynamoDB Streams → the
//!   aggregator's rollups and alerts roles), polling `tidemark_streams`' sources;
//! - [`event_bus`]: a local `PutEvents` endpoint the alerts role publishes to;
//! - [`events`]: sample Lambda events dated now (`make events`, for `sam local invoke`);
//! - [`http_api`]: API Gateway's stand-in on loopback, in front of the API function;
//! - [`authorizer`]: its JWT authorizer, when the local stack signs in against an issuer;
//! - [`simulator`]: a device fleet publishing to Kinesis;
//! - [`pipeline`]: all of it wired together (`tidemark-devstack run`, the end-to-end test).

pub mod authorizer;
pub mod esm;
pub mod event_bus;
pub mod events;
pub mod http_api;
pub mod pipeline;
pub mod schedule;
pub mod simulator;

use std::time::Duration;

use aws_sdk_kinesis::types::StreamStatus;
use thiserror::Error;
use tidemark_store::settings::{self, ConfigError};
use tidemark_store::{ClientSettings, StoreError};
use tidemark_streams::LocalEndpoints;

#[derive(Debug, Error)]
pub enum DevstackError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("Kinesis {operation} failed: {message}")]
    Kinesis {
        operation: &'static str,
        message: String,
    },
    #[error("stream {0} did not become active")]
    StreamTimeout(String),
    #[error(transparent)]
    Mapping(#[from] tidemark_streams::StreamError),
    #[error("configuration: {0}")]
    Config(String),
    #[error("sample events: {0}")]
    Events(String),
    #[error("registering the simulated fleet: {0}")]
    Register(String),
    #[error("the export queue: {0}")]
    Queue(String),
}

/// The local stack reads some of the functions' settings itself, with their reader.
impl From<ConfigError> for DevstackError {
    fn from(e: ConfigError) -> Self {
        DevstackError::Config(e.to_string())
    }
}

/// Where the local stack lives; every field has docs/design.md §7's default and an env override.
#[derive(Debug, Clone)]
pub struct LocalConfig {
    pub table: String,
    pub stream: String,
    pub stream_shards: i32,
    pub dynamodb_endpoint: String,
    pub kinesis_endpoint: String,
}

impl LocalConfig {
    pub fn from_env() -> Self {
        let var = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_owned());
        let endpoints = LocalEndpoints::from_env();
        LocalConfig {
            table: var(
                settings::TABLE_NAME.name,
                tidemark_schema::TABLE.default_name,
            ),
            stream: var(settings::STREAM_NAME.name, "tidemark-readings"),
            stream_shards: var("STREAM_SHARDS", "2").parse().unwrap_or(2),
            dynamodb_endpoint: endpoints.dynamodb,
            kinesis_endpoint: endpoints.kinesis,
        }
    }

    pub async fn dynamodb(&self) -> aws_sdk_dynamodb::Client {
        tidemark_store::dynamodb_client(&ClientSettings::local(&self.dynamodb_endpoint)).await
    }

    /// DynamoDB Streams is served on the DynamoDB endpoint.
    pub async fn dynamodb_streams(&self) -> aws_sdk_dynamodbstreams::Client {
        tidemark_streams::local_streams::client(&self.dynamodb_endpoint).await
    }

    pub async fn kinesis(&self) -> aws_sdk_kinesis::Client {
        tidemark_streams::local::kinesis_client(&self.kinesis_endpoint).await
    }
}

/// Creates the table (from the schema's definition) and the Kinesis stream if they do not
/// exist yet, and waits until both are active. Safe to run any number of times.
pub async fn bootstrap(cfg: &LocalConfig) -> Result<(), DevstackError> {
    let ddb = cfg.dynamodb().await;
    tidemark_store::create_table(&ddb, &cfg.table, &tidemark_schema::TABLE).await?;
    let kin = cfg.kinesis().await;
    create_stream(&kin, &cfg.stream, cfg.stream_shards).await
}

/// Creates a Kinesis stream unless it exists, then waits for it to be active.
pub async fn create_stream(
    kin: &aws_sdk_kinesis::Client,
    name: &str,
    shards: i32,
) -> Result<(), DevstackError> {
    let err = |operation| {
        move |e: aws_sdk_kinesis::Error| DevstackError::Kinesis {
            operation,
            message: e.to_string(),
        }
    };
    match kin
        .create_stream()
        .stream_name(name)
        .shard_count(shards)
        .send()
        .await
    {
        Ok(_) => {}
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_in_use_exception()) => {}
        Err(e) => return Err(err("CreateStream")(e.into())),
    }
    for _ in 0..300 {
        let d = kin
            .describe_stream_summary()
            .stream_name(name)
            .send()
            .await
            .map_err(|e| err("DescribeStreamSummary")(e.into()))?;
        if d.stream_description_summary()
            .is_some_and(|s| *s.stream_status() == StreamStatus::Active)
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(DevstackError::StreamTimeout(name.to_owned()))
}
