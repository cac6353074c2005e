//! A Kinesis stream, read as a Kinesis event-source mapping reads it.

use aws_lambda_events::encodings::SecondTimestamp;
use aws_lambda_events::event::kinesis::KinesisEventRecord;
use aws_sdk_kinesis::types::ShardIteratorType;
use base64::Engine;
use chrono::{DateTime, Utc};
use serde_json::json;

use crate::{EventSource, LOCAL_ACCOUNT, LOCAL_REGION, Page, ShardInfo, Start, StreamError};

fn err(operation: &'static str) -> impl FnOnce(aws_sdk_kinesis::Error) -> StreamError {
    use aws_sdk_kinesis::error::ProvideErrorMetadata;
    move |e| StreamError::Source {
        service: "Kinesis",
        operation,
        message: match (e.code(), e.message()) {
            (Some(code), msg) => format!("{code}: {}", msg.unwrap_or_default()),
            _ => aws_sdk_kinesis::error::DisplayErrorContext(e).to_string(),
        },
    }
}

/// A Kinesis stream (kinesis-mock locally) read with GetShardIterator/GetRecords.
pub struct KinesisSource {
    client: aws_sdk_kinesis::Client,
    stream: String,
    arn: String,
}

impl KinesisSource {
    pub async fn new(client: aws_sdk_kinesis::Client, stream: &str) -> Result<Self, StreamError> {
        let d = client
            .describe_stream_summary()
            .stream_name(stream)
            .send()
            .await
            .map_err(|e| err("DescribeStreamSummary")(e.into()))?;
        let arn = d
            .stream_description_summary()
            .map(|s| s.stream_arn().to_owned())
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| {
                format!("arn:aws:kinesis:{LOCAL_REGION}:{LOCAL_ACCOUNT}:stream/{stream}")
            });
        Ok(KinesisSource {
            client,
            stream: stream.to_owned(),
            arn,
        })
    }

    /// The record as Lambda puts it in the event (data base64, arrival in epoch seconds).
    pub fn event_record(
        arn: &str,
        shard: &str,
        r: &aws_sdk_kinesis::types::Record,
    ) -> Result<KinesisEventRecord, serde_json::Error> {
        let arrival = r
            .approximate_arrival_timestamp()
            .map(|t| t.as_secs_f64())
            .unwrap_or_default();
        let mut record: KinesisEventRecord = serde_json::from_value(json!({
            "kinesis": {
                "kinesisSchemaVersion": "1.0",
                "partitionKey": r.partition_key().unwrap_or_default(),
                "sequenceNumber": r.sequence_number(),
                "data": base64::engine::general_purpose::STANDARD.encode(r.data().as_ref()),
                "approximateArrivalTimestamp": arrival,
            },
            "eventSource": "aws:kinesis",
            "eventVersion": "1.0",
            "eventID": format!("{shard}:{}", r.sequence_number()),
            "eventName": "aws:kinesis:record",
            "invokeIdentityArn": format!("arn:aws:iam::{LOCAL_ACCOUNT}:role/tidemark-local"),
            "awsRegion": LOCAL_REGION,
            "eventSourceARN": arn,
        }))?;
        // The arrival as Kinesis stamped it, to the millisecond: `aws_lambda_events` reads
        // the fraction of the seconds written above as a count of milliseconds (`.5` as
        // 5 ms), as `tidemark_ingest::KinesisBatch` explains.
        let millis = r.approximate_arrival_timestamp().map(|t| t.to_millis());
        if let Some(at) = millis
            .and_then(Result::ok)
            .and_then(DateTime::<Utc>::from_timestamp_millis)
        {
            record.kinesis.approximate_arrival_timestamp = SecondTimestamp(at);
        }
        Ok(record)
    }
}

impl EventSource for KinesisSource {
    type Record = KinesisEventRecord;

    fn arn(&self) -> &str {
        &self.arn
    }

    fn batch_info_key(&self) -> &'static str {
        "KinesisBatchInfo"
    }

    fn max_read(&self) -> usize {
        10_000
    }

    async fn shards(&self) -> Result<Vec<ShardInfo>, StreamError> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let req = match &token {
                Some(t) => self.client.list_shards().next_token(t),
                None => self.client.list_shards().stream_name(&self.stream),
            };
            let page = req.send().await.map_err(|e| err("ListShards")(e.into()))?;
            out.extend(page.shards().iter().map(|s| ShardInfo {
                id: s.shard_id().to_owned(),
                parent: s.parent_shard_id().map(str::to_owned),
                adjacent_parent: s.adjacent_parent_shard_id().map(str::to_owned),
            }));
            token = page.next_token().map(str::to_owned);
            if token.is_none() {
                return Ok(out);
            }
        }
    }

    async fn iterator(&self, shard: &str, start: &Start) -> Result<Option<String>, StreamError> {
        let req = self
            .client
            .get_shard_iterator()
            .stream_name(&self.stream)
            .shard_id(shard);
        let req = match start {
            Start::TrimHorizon => req.shard_iterator_type(ShardIteratorType::TrimHorizon),
            Start::Latest => req.shard_iterator_type(ShardIteratorType::Latest),
            Start::After(seq) => req
                .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                .starting_sequence_number(seq),
            Start::At(seq) => req
                .shard_iterator_type(ShardIteratorType::AtSequenceNumber)
                .starting_sequence_number(seq),
        };
        let out = req
            .send()
            .await
            .map_err(|e| err("GetShardIterator")(e.into()))?;
        Ok(out.shard_iterator().map(str::to_owned))
    }

    async fn read(
        &self,
        shard: &str,
        iterator: &str,
        limit: usize,
    ) -> Result<Page<KinesisEventRecord>, StreamError> {
        let out = self
            .client
            .get_records()
            .shard_iterator(iterator)
            .limit(i32::try_from(limit).unwrap_or(10_000))
            .send()
            .await
            .map_err(|e| err("GetRecords")(e.into()))?;
        let mut records = Vec::with_capacity(out.records().len());
        for r in out.records() {
            let rec = Self::event_record(&self.arn, shard, r).map_err(|e| StreamError::Source {
                service: "Kinesis",
                operation: "GetRecords",
                message: format!("record not convertible to a Lambda event: {e}"),
            })?;
            records.push(rec);
        }
        Ok(Page {
            records,
            next: out.next_shard_iterator().map(str::to_owned),
            millis_behind: out.millis_behind_latest(),
        })
    }

    fn sequence(record: &KinesisEventRecord) -> &str {
        &record.kinesis.sequence_number
    }

    fn arrival_millis(record: &KinesisEventRecord) -> i64 {
        record
            .kinesis
            .approximate_arrival_timestamp
            .timestamp_millis()
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_kinesis::primitives::{Blob, DateTime};

    use super::*;

    #[test]
    fn an_event_record_carries_its_arrival_to_the_millisecond() {
        for millis in [
            1_795_824_020_500,
            1_795_824_020_310,
            1_795_824_020_050,
            1_795_824_020_007,
        ] {
            let r = aws_sdk_kinesis::types::Record::builder()
                .sequence_number("49590338271490256608559692538361571095921575989136588898")
                .partition_key("sensor_01")
                .data(Blob::new("{}"))
                .approximate_arrival_timestamp(DateTime::from_millis(millis))
                .build()
                .unwrap();
            let rec = KinesisSource::event_record("arn", "shardId-000000000000", &r).unwrap();
            assert_eq!(
                rec.kinesis.approximate_arrival_timestamp.timestamp_millis(),
                millis
            );
        }
    }
}
