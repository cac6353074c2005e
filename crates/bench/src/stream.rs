//! Reading a table's DynamoDB stream to its current end, and cutting the records into the
//! batches a stream event-source mapping with a batching window would deliver.

use std::collections::HashMap;

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use tidemark_streams::{DynamoDbStreamSource, EventSource, Start};

use crate::BenchError;

/// A reader that remembers, per shard, the last sequence number it returned. The stream
/// calls are `tidemark_streams`' (the same source devstack's emulated event-source mappings
/// poll).
pub struct StreamReader {
    source: DynamoDbStreamSource,
    after: HashMap<String, String>,
}

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Stream(e.to_string())
}

impl StreamReader {
    pub async fn for_table(
        dynamodb: &aws_sdk_dynamodb::Client,
        client: aws_sdk_dynamodbstreams::Client,
        table: &str,
    ) -> Result<Self, BenchError> {
        let source = DynamoDbStreamSource::for_table(dynamodb, client, table)
            .await
            .map_err(err)?;
        Ok(StreamReader {
            source,
            after: HashMap::new(),
        })
    }

    /// Every record written since the last call, shard by shard (parents first, as the
    /// stream lists them), in the shape Lambda delivers.
    pub async fn drain(&mut self) -> Result<Vec<EventRecord>, BenchError> {
        let mut out = Vec::new();
        for shard in self.source.shards().await.map_err(err)? {
            let start = match self.after.get(&shard.id) {
                Some(seq) => Start::After(seq.clone()),
                None => Start::TrimHorizon,
            };
            let mut it = self.source.iterator(&shard.id, &start).await.map_err(err)?;
            while let Some(i) = it {
                let page = self
                    .source
                    .read(&shard.id, &i, self.source.max_read())
                    .await
                    .map_err(err)?;
                let Some(last) = page.records.last() else {
                    break;
                };
                self.after.insert(
                    shard.id.clone(),
                    DynamoDbStreamSource::sequence(last).to_owned(),
                );
                out.extend(page.records);
                it = page.next;
            }
        }
        Ok(out)
    }
}

/// Cuts records (all arrived within one batching window) into the invocations the mapping
/// makes: at most `batch_size` records and at most [`crate::scenario::MAX_PAYLOAD_BYTES`]
/// of event JSON each.
pub fn batches(records: Vec<EventRecord>, batch_size: usize) -> Vec<Event> {
    let mut out = Vec::new();
    let mut cur: Vec<EventRecord> = Vec::new();
    let mut bytes = 0usize;
    for r in records {
        let size = serde_json::to_vec(&r).map(|v| v.len()).unwrap_or(0) + 1;
        if !cur.is_empty()
            && (cur.len() >= batch_size || bytes + size > crate::scenario::MAX_PAYLOAD_BYTES)
        {
            let mut e = Event::default();
            e.records = std::mem::take(&mut cur);
            out.push(e);
            bytes = 0;
        }
        bytes += size;
        cur.push(r);
    }
    if !cur.is_empty() {
        let mut e = Event::default();
        e.records = cur;
        out.push(e);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(i: usize) -> EventRecord {
        let mut r = EventRecord::default();
        r.event_id = format!("{i}");
        r
    }

    #[test]
    fn batches_respect_the_batch_size() {
        let b = batches((0..2_500).map(record).collect(), 1_000);
        assert_eq!(
            b.iter().map(|e| e.records.len()).collect::<Vec<_>>(),
            vec![1_000, 1_000, 500]
        );
        assert!(batches(Vec::new(), 10).is_empty());
    }
}
