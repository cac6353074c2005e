//! Heartbeats into the readings stream: one record into every open shard, aimed by its
//! explicit hash key at the start of the shard's hash range.

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use tidemark_schema::Timestamp;
use tidemark_schema::keys::ShardName;

use crate::WatchdogError;

/// The Kinesis client: at `endpoint` (a local kinesis-mock) when given, else the SDK's own
/// resolution.
pub async fn kinesis_client(endpoint: Option<&str>) -> aws_sdk_kinesis::Client {
    let settings = match &endpoint {
        Some(e) => tidemark_store::ClientSettings::local(*e),
        None => tidemark_store::ClientSettings::default(),
    };
    let shared = tidemark_store::sdk_config(&settings).await;
    let mut b = aws_sdk_kinesis::config::Builder::from(&shared);
    if let Some(e) = endpoint {
        b = b.endpoint_url(e);
    }
    aws_sdk_kinesis::Client::from_conf(b.build())
}

/// Where heartbeats go.
pub trait Heartbeats: Sync {
    /// Puts a heartbeat sent at `at` into every open shard; returns those shards.
    fn send(
        &self,
        at: Timestamp,
    ) -> impl Future<Output = Result<Vec<ShardName>, WatchdogError>> + Send;
}

/// The readings stream.
#[derive(Debug, Clone)]
pub struct KinesisHeartbeats {
    pub client: aws_sdk_kinesis::Client,
    pub stream: String,
}

fn kinesis(operation: &'static str) -> impl Fn(aws_sdk_kinesis::Error) -> WatchdogError {
    move |e| WatchdogError::Kinesis {
        operation,
        message: aws_sdk_kinesis::error::DisplayErrorContext(e).to_string(),
    }
}

/// How often a refused heartbeat entry (a throttled shard) is sent again in one run.
const ATTEMPTS: usize = 3;

impl KinesisHeartbeats {
    /// The open shards (no ending sequence number) and the start of each one's hash range.
    async fn open_shards(&self) -> Result<Vec<(ShardName, String)>, WatchdogError> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let req = match &token {
                Some(t) => self.client.list_shards().next_token(t),
                None => self.client.list_shards().stream_name(&self.stream),
            };
            let page = req
                .send()
                .await
                .map_err(|e| kinesis("ListShards")(e.into()))?;
            for s in page.shards() {
                let open = s
                    .sequence_number_range()
                    .is_none_or(|r| r.ending_sequence_number().is_none());
                if let (true, Some(name)) = (open, ShardName::new(s.shard_id())) {
                    let start = s
                        .hash_key_range()
                        .map(|h| h.starting_hash_key().to_owned())
                        .unwrap_or_else(|| "0".into());
                    out.push((name, start));
                }
            }
            match page.next_token() {
                Some(t) if !t.is_empty() => token = Some(t.to_owned()),
                _ => return Ok(out),
            }
        }
    }
}

impl Heartbeats for KinesisHeartbeats {
    async fn send(&self, at: Timestamp) -> Result<Vec<ShardName>, WatchdogError> {
        let shards = self.open_shards().await?;
        let data = tidemark_schema::heartbeat::record(at);
        let mut pending: Vec<&(ShardName, String)> = shards.iter().collect();
        for _ in 0..ATTEMPTS {
            if pending.is_empty() {
                break;
            }
            let entries = pending
                .iter()
                .map(|(_, hash)| {
                    PutRecordsRequestEntry::builder()
                        .data(Blob::new(data.clone()))
                        .partition_key(tidemark_schema::heartbeat::PARTITION_KEY)
                        .explicit_hash_key(hash)
                        .build()
                        .map_err(|e| WatchdogError::Kinesis {
                            operation: "PutRecords",
                            message: e.to_string(),
                        })
                })
                .collect::<Result<Vec<_>, _>>()?;
            let out = self
                .client
                .put_records()
                .stream_name(&self.stream)
                .set_records(Some(entries))
                .send()
                .await
                .map_err(|e| kinesis("PutRecords")(e.into()))?;
            let refused: Vec<bool> = out
                .records()
                .iter()
                .map(|r| r.error_code().is_some())
                .collect();
            pending = pending
                .into_iter()
                .zip(refused)
                .filter_map(|(s, no)| no.then_some(s))
                .collect();
        }
        if !pending.is_empty() {
            tracing::warn!(
                shards = pending.len(),
                "heartbeats refused: those shards keep their last watermark"
            );
        }
        Ok(shards.into_iter().map(|(s, _)| s).collect())
    }
}
