//! The watchdog's heartbeat records (docs/design.md §5, "Offline devices"). The watchdog puts
//! one into every shard of the stream; ingest, having stored every record ahead of it in its
//! shard, writes the shard's heartbeat item. That is how the watchdog knows which arrivals
//! the table already holds, so a backlog never looks like silence.

use aws_lambda_events::event::kinesis::KinesisEventRecord;
use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::keys::ShardName;
use tidemark_schema::{EntityKey, HeartbeatItem, Timestamp};
use tidemark_store::write::batch::{BatchWriteApi, BatchWriter, PendingWrite};
use tidemark_store::{Item, StoreError};

use crate::error::IngestError;

pub use tidemark_schema::heartbeat::accepted;

/// The shard a record came from, from its event ID (`shardId-…:<sequence>`).
pub fn shard_of(record: &KinesisEventRecord) -> Option<ShardName> {
    let id = record.event_id.as_deref()?;
    ShardName::new(id.split_once(':').map_or(id, |(s, _)| s))
}

/// The shard's heartbeat item: the heartbeat sent at `sent` is behind everything stored.
pub fn item(shard: &ShardName, sent: Timestamp, stored: Timestamp) -> Result<Item, StoreError> {
    let key = EntityKey::Heartbeat(shard.clone()).key();
    let mut item = tidemark_store::to_item(&HeartbeatItem {
        pk: key.pk,
        sk: key.sk,
        sent_at: sent,
        stored_at: Some(stored),
        passed_at: None,
        rollups_passed_at: None,
    })?;
    item.retain(|_, v| !matches!(v, AttributeValue::Null(_)));
    Ok(item)
}

/// Writes the heartbeat items of the batch's heartbeat records (`(unit, shard, sent)`) that
/// nothing before them failed (only then is everything ahead of them stored), after
/// everything else. Returns how many it wrote, and the earliest heartbeat whose write failed,
/// to be retried with its record.
pub async fn pass_on<W: BatchWriteApi>(
    writer: &BatchWriter<W>,
    heartbeats: Vec<(usize, ShardName, Timestamp)>,
    first_failed: Option<usize>,
    now: Timestamp,
    write_by: tokio::time::Instant,
) -> Result<(u64, Option<usize>), IngestError> {
    let mut puts = Vec::new();
    for (i, shard, sent) in heartbeats {
        if first_failed.is_some_and(|f| f < i) {
            break;
        }
        let item = item(&shard, sent, now).map_err(IngestError::Item)?;
        puts.push(PendingWrite::put(i, item));
    }
    if puts.is_empty() {
        return Ok((0, None));
    }
    let n = puts.len() as u64;
    let report = writer.write_all(puts, write_by).await;
    Ok((n, report.earliest_failed_tag()))
}
