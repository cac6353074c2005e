//! The watchdog's heartbeats in part 2: what they cost on their way through ingest and the
//! alerts role, and the stand-in the measured runs send them to.

use serde::{Deserialize, Serialize};
use tidemark_aggregator::{Aggregator, AggregatorConfig, Role};
use tidemark_bench::BenchError;
use tidemark_bench::meter::Meter;
use tidemark_bench::run::Target;
use tidemark_bench::scenario::{KinesisRecord, kinesis_records};
use tidemark_ingest::{Ingest, IngestConfig};
use tidemark_schema::keys::ShardName;
use tidemark_schema::{Clock, HeartbeatItem, Timestamp};
use tidemark_watchdog::{Heartbeats, WatchdogError};

use crate::follower::Follower;
use crate::metering::{Spent, client_via};
use crate::pipeline::{alerts_filter, event_of, ingest};

/// The pipeline's part of the heartbeats: what ingest and the alerts role spend per
/// heartbeat, measured by sending heartbeat records through both.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HeartbeatCost {
    pub shards: usize,
    pub rounds: u64,
    pub ingest_invocations: u64,
    pub alerts_invocations: u64,
    pub ingest: Spent,
    pub alerts: Spent,
}

/// The heartbeats' stand-in: marks every shard's heartbeat item stored and passed at the
/// moment it is sent (as ingest and the alerts role would, once the records ahead of it are
/// in), through a client of its own that the proxy does not meter.
pub struct PassedAtOnce {
    pub client: aws_sdk_dynamodb::Client,
    pub table: String,
    pub shards: Vec<ShardName>,
}

impl Heartbeats for PassedAtOnce {
    async fn send(&self, at: Timestamp) -> Result<Vec<ShardName>, WatchdogError> {
        for s in &self.shards {
            let item = HeartbeatItem::passed_at_once(s, at);
            let item = tidemark_store::to_item(&item).map_err(WatchdogError::Store)?;
            self.client
                .put_item()
                .table_name(&self.table)
                .set_item(Some(item))
                .send()
                .await
                .map_err(|e| WatchdogError::Config(format!("heartbeat stand-in: {e:?}")))?;
        }
        Ok(self.shards.clone())
    }
}

pub fn shard_names(n: usize) -> Vec<ShardName> {
    (0..n)
        .map(|i| {
            ShardName::new(&format!("shardId-{i:012}"))
                .unwrap_or_else(|| unreachable!("valid shard name"))
        })
        .collect()
}

/// `rounds` heartbeats into each of `shards` through the real ingest and alerts role (one
/// ingest invocation per shard, as each shard has its own), a minute apart before `t0`.
pub async fn heartbeat_cost(
    target: &Target,
    table: &str,
    shards: &[ShardName],
    rounds: u64,
    t0: Timestamp,
) -> Result<HeartbeatCost, BenchError> {
    let ingest_meter = Meter::start(target.dynamodb).await?;
    let alerts_meter = Meter::start(target.dynamodb).await?;
    let ingester = Ingest::new(client_via(&ingest_meter).await, IngestConfig::new(table));
    let mut config = AggregatorConfig::new(table).with_role(Role::Alerts);
    config.clock = Clock::fixed(t0);
    let alerts = Aggregator::new(client_via(&alerts_meter).await, config);
    let mut reader = Follower::for_table(target, table).await?;
    let mut out = HeartbeatCost {
        shards: shards.len(),
        rounds,
        ..HeartbeatCost::default()
    };
    let mut seq = 1;
    for r in 0..rounds {
        let sent = t0.minus_millis((rounds - r) as i64 * 60_000).unwrap_or(t0);
        for s in shards {
            let rec = KinesisRecord {
                key: tidemark_schema::heartbeat::PARTITION_KEY.into(),
                data: tidemark_schema::heartbeat::record(sent),
                arrived: sent,
            };
            ingest(&ingester, &kinesis_records(&[rec], s.as_str(), seq)?).await?;
            seq += 1;
            out.ingest_invocations += 1;
        }
        // The heartbeat items' records, then the role's own marks (echoes, a batch of
        // their own a window later).
        for _ in 0..2 {
            let mut records = reader.drain().await?;
            records.retain(alerts_filter);
            for event in event_of(records) {
                let (resp, _) = alerts.process(&event).await;
                if !resp.batch_item_failures.is_empty() {
                    return Err(BenchError::Function("alerts failed a heartbeat".into()));
                }
                out.alerts_invocations += 1;
            }
        }
    }
    out.ingest = Spent::of(&ingest_meter.take().await);
    out.alerts = Spent::of(&alerts_meter.take().await);
    Ok(out)
}
