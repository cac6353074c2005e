//! Reading a table's DynamoDB stream to its current end, and cutting the records into the
//! batches a stream event-source mapping with a batching window would deliver.

use std::collections::HashMap;

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_sdk_dynamodbstreams::types::ShardIteratorType;
use tidemark_devstack::esm::DynamoDbStreamSource;

use crate::BenchError;

/// A reader that remembers, per shard, the last sequence number it returned.
pub struct StreamReader {
    client: aws_sdk_dynamodbstreams::Client,
    arn: String,
    after: HashMap<String, String>,
}

fn err(op: &'static str) -> impl Fn(String) -> BenchError {
    move |m| BenchError::Stream(format!("{op}: {m}"))
}

impl StreamReader {
    pub async fn for_table(
        dynamodb: &aws_sdk_dynamodb::Client,
        client: aws_sdk_dynamodbstreams::Client,
        table: &str,
    ) -> Result<Self, BenchError> {
        let source = DynamoDbStreamSource::for_table(dynamodb, client.clone(), table)
            .await
            .map_err(|e| BenchError::Stream(e.to_string()))?;
        Ok(StreamReader {
            client,
            arn: source.arn().to_owned(),
            after: HashMap::new(),
        })
    }

    /// Every record written since the last call, shard by shard (parents first, as the
    /// stream lists them), in the shape Lambda delivers.
    pub async fn drain(&mut self) -> Result<Vec<EventRecord>, BenchError> {
        let shards = self
            .client
            .describe_stream()
            .stream_arn(&self.arn)
            .send()
            .await
            .map_err(|e| {
                err("DescribeStream")(
                    aws_sdk_dynamodbstreams::error::DisplayErrorContext(e).to_string(),
                )
            })?
            .stream_description()
            .map(|d| {
                d.shards()
                    .iter()
                    .filter_map(|s| s.shard_id().map(str::to_owned))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        let mut out = Vec::new();
        for shard in shards {
            let req = self
                .client
                .get_shard_iterator()
                .stream_arn(&self.arn)
                .shard_id(&shard);
            let req = match self.after.get(&shard) {
                Some(seq) => req
                    .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                    .sequence_number(seq),
                None => req.shard_iterator_type(ShardIteratorType::TrimHorizon),
            };
            let mut it = req
                .send()
                .await
                .map_err(|e| {
                    err("GetShardIterator")(
                        aws_sdk_dynamodbstreams::error::DisplayErrorContext(e).to_string(),
                    )
                })?
                .shard_iterator()
                .map(str::to_owned);
            while let Some(i) = it {
                let page = self
                    .client
                    .get_records()
                    .shard_iterator(i)
                    .limit(1_000)
                    .send()
                    .await
                    .map_err(|e| {
                        err("GetRecords")(
                            aws_sdk_dynamodbstreams::error::DisplayErrorContext(e).to_string(),
                        )
                    })?;
                if page.records().is_empty() {
                    break;
                }
                for r in page.records() {
                    if let Some(seq) = r.dynamodb().and_then(|d| d.sequence_number()) {
                        self.after.insert(shard.clone(), seq.to_owned());
                    }
                    out.push(
                        DynamoDbStreamSource::event_record(&self.arn, r)
                            .map_err(|e| BenchError::Stream(e.to_string()))?,
                    );
                }
                it = page.next_shard_iterator().map(str::to_owned);
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
