//! `tidemark-admin redrive`: what a mapping gave up on, handled again.
//!
//! An on-failure record holds no records, only where they were: a shard and a range of
//! sequence numbers. For the ingest mapping (`KinesisBatchInfo`) the range is re-read from
//! Kinesis (AT_SEQUENCE_NUMBER up to the end) and fed through ingest again, which is
//! idempotent. For the aggregator's (`DDBStreamBatchInfo`) re-feeding stream records cannot be
//! trusted (an item's mark may already be past a record of it that was never applied, once a
//! later record of the item was); the retained range is read only
//! to learn which devices and days it touched, and those are rebuilt from the raw readings.
//! A range the stream no longer retains cannot be re-driven: the error says so, with the time
//! span the operator can rebuild instead.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use serde_json::Value;
use tidemark_aggregator::records::cmp_seq;
use tidemark_ingest::Ingest;
use tidemark_schema::{DeviceId, Timestamp};
use tidemark_store::write::batch::RetryPolicy;
use tidemark_streams::{DynamoDbStreamSource, EventSource, KinesisSource, Start};

use crate::window::reading_records;
use crate::{AdminError, Rebuild, Rebuilder};

/// Records per ingest invocation (the template's ingest batch size is larger; smaller
/// batches keep a retry cheap).
const BATCH: usize = 500;
/// Ingest attempts per batch before redrive stops (and says where).
const ATTEMPTS: u32 = 8;

/// Where a mapping gave up: its shard and sequence range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    pub stream_arn: String,
    pub shard_id: String,
    pub start: String,
    pub end: String,
    /// `approximateArrivalOfFirstRecord` / `…LastRecord`, as written.
    pub first_arrival: String,
    pub last_arrival: String,
}

/// One on-failure record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnFailure {
    Kinesis(Range),
    DynamoDbStream(Range),
}

impl OnFailure {
    /// Parses the JSON Lambda sends to an on-failure destination (also when wrapped as an SQS
    /// message `Body`).
    pub fn parse(doc: &Value) -> Result<OnFailure, AdminError> {
        if let Some(body) = doc.get("Body").and_then(Value::as_str) {
            let inner: Value = serde_json::from_str(body)
                .map_err(|e| AdminError::Input(format!("message body is not JSON: {e}")))?;
            return OnFailure::parse(&inner);
        }
        let range = |info: &Value| -> Result<Range, AdminError> {
            let s = |k: &str| {
                info.get(k)
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .ok_or_else(|| AdminError::Input(format!("on-failure record without {k}")))
            };
            let opt = |k: &str| s(k).unwrap_or_default();
            Ok(Range {
                stream_arn: s("streamArn")?,
                shard_id: s("shardId")?,
                start: s("startSequenceNumber")?,
                end: s("endSequenceNumber")?,
                first_arrival: opt("approximateArrivalOfFirstRecord"),
                last_arrival: opt("approximateArrivalOfLastRecord"),
            })
        };
        if let Some(info) = doc.get("KinesisBatchInfo") {
            return Ok(OnFailure::Kinesis(range(info)?));
        }
        if let Some(info) = doc.get("DDBStreamBatchInfo") {
            return Ok(OnFailure::DynamoDbStream(range(info)?));
        }
        Err(AdminError::Input(
            "neither KinesisBatchInfo nor DDBStreamBatchInfo: not an on-failure record".into(),
        ))
    }
}

/// What one re-drive did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RedriveReport {
    /// Kinesis records fed through ingest again.
    pub records: usize,
    /// Devices rebuilt, with the span of reading times rebuilt.
    pub rebuilt: BTreeMap<String, (Timestamp, Timestamp)>,
}

/// Re-drives on-failure records against one deployment (or the local stack).
pub struct Redriver {
    pub kinesis: aws_sdk_kinesis::Client,
    pub streams: aws_sdk_dynamodbstreams::Client,
    pub ingest: Ingest,
    pub rebuilder: Rebuilder,
}

impl Redriver {
    pub async fn redrive(&self, f: &OnFailure) -> Result<RedriveReport, AdminError> {
        match f {
            OnFailure::Kinesis(r) => self.kinesis_range(r).await,
            OnFailure::DynamoDbStream(r) => self.stream_range(r).await,
        }
    }

    async fn kinesis_range(&self, r: &Range) -> Result<RedriveReport, AdminError> {
        let name = r
            .stream_arn
            .rsplit_once(":stream/")
            .map(|(_, n)| n)
            .ok_or_else(|| AdminError::Input(format!("{} is not a Kinesis ARN", r.stream_arn)))?;
        let source = KinesisSource::new(self.kinesis.clone(), name).await?;
        let records = read_range(&source, r).await?;
        let mut report = RedriveReport::default();
        for batch in records.chunks(BATCH) {
            self.ingest_batch(batch.to_vec()).await?;
            report.records += batch.len();
        }
        Ok(report)
    }

    /// One batch through ingest, retried from the first record it reports as not written.
    async fn ingest_batch(&self, mut batch: Vec<KinesisEventRecord>) -> Result<(), AdminError> {
        let policy = RetryPolicy::default();
        for attempt in 1..=ATTEMPTS {
            let mut event = KinesisEvent::default();
            event.records = batch.clone();
            let deadline = Instant::now() + Duration::from_secs(60);
            let failed_from = match self.ingest.process(&event, deadline).await {
                Ok((resp, _)) => match resp.batch_item_failures.first() {
                    None => return Ok(()),
                    Some(f) => f.item_identifier.clone(),
                },
                Err(e) => {
                    tracing::warn!(error = %e, attempt, "ingest failed; retrying");
                    None
                }
            };
            if let Some(seq) = failed_from
                && let Some(i) = batch.iter().position(|r| r.kinesis.sequence_number == seq)
            {
                batch.drain(..i);
            }
            tokio::time::sleep(policy.delay(attempt)).await;
        }
        let first = batch
            .first()
            .map(|r| r.kinesis.sequence_number.clone())
            .unwrap_or_default();
        Err(AdminError::Ingest(format!(
            "records from sequence number {first} on are still not written after {ATTEMPTS} \
             attempts; run redrive again once DynamoDB is healthy"
        )))
    }

    async fn stream_range(&self, r: &Range) -> Result<RedriveReport, AdminError> {
        let source = DynamoDbStreamSource::new(self.streams.clone(), &r.stream_arn);
        let records = read_range(&source, r).await.map_err(|e| match e {
            AdminError::NotRetained(why) => AdminError::NotRetained(format!(
                "{why}; the devices it touched cannot be learned from the stream any more: \
                 rebuild the devices written between {} and {} with `tidemark-admin rebuild`",
                r.first_arrival, r.last_arrival
            )),
            other => other,
        })?;
        let mut spans: BTreeMap<DeviceId, (Timestamp, Timestamp)> = BTreeMap::new();
        let mut touch = |device: DeviceId, at: Timestamp| {
            let e = spans.entry(device).or_insert((at, at));
            e.0 = e.0.min(at);
            e.1 = e.1.max(at);
        };
        for rec in &records {
            match reading_records(rec) {
                Ok(rrs) => rrs.into_iter().for_each(|rr| touch(rr.device, rr.at)),
                // Its readings are unknown, but they are in the slot's hour or the next (a
                // part may carry its next slot's readings).
                Err(u) => {
                    touch(u.device.clone(), u.start.hour_start());
                    let next_hour_end = u.start.hour_start().plus_micros(2 * 3_600_000_000 - 1);
                    touch(u.device, next_hour_end.unwrap_or(Timestamp::MAX));
                }
            }
        }
        let mut report = RedriveReport::default();
        for (device, (from, to)) in spans {
            self.rebuilder
                .rebuild(&Rebuild {
                    device: device.clone(),
                    from,
                    to,
                })
                .await?;
            report.rebuilt.insert(device.to_string(), (from, to));
        }
        Ok(report)
    }
}

/// The stream says the records (or their whole shard) are gone.
fn no_longer_there(e: &tidemark_streams::StreamError) -> bool {
    let s = e.to_string();
    e.is_trimmed() || s.contains("TrimmedDataAccess") || s.contains("ResourceNotFound")
}

/// The records of `r` still in the stream, from its start to its end. Fails with
/// [`AdminError::NotRetained`] if the stream no longer holds its first record.
async fn read_range<S: EventSource>(source: &S, r: &Range) -> Result<Vec<S::Record>, AdminError> {
    let gone = |why: String| {
        AdminError::NotRetained(format!(
            "shard {} from sequence number {}: {why}",
            r.shard_id, r.start
        ))
    };
    let mut it = match source
        .iterator(&r.shard_id, &Start::At(r.start.clone()))
        .await
    {
        Ok(it) => it,
        Err(e) if no_longer_there(&e) => return Err(gone(e.to_string())),
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    let mut idle = 0;
    while let Some(iter) = it {
        let page = match source.read(&r.shard_id, &iter, 1_000).await {
            Ok(p) => p,
            Err(e) if no_longer_there(&e) => return Err(gone(e.to_string())),
            Err(e) => return Err(e.into()),
        };
        it = page.next;
        if page.records.is_empty() {
            idle += 1;
            if idle > 20 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        idle = 0;
        for rec in page.records {
            let seq = S::sequence(&rec).to_owned();
            if out.is_empty() && cmp_seq(&seq, &r.start).is_gt() {
                return Err(gone(format!(
                    "the oldest record still there is {seq}: the start of the range expired"
                )));
            }
            if cmp_seq(&seq, &r.end).is_gt() {
                return Ok(out);
            }
            let last = cmp_seq(&seq, &r.end).is_eq();
            out.push(rec);
            if last {
                return Ok(out);
            }
        }
    }
    if out.is_empty() {
        return Err(gone("the stream holds none of its records".into()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn info() -> Value {
        json!({
            "shardId": "shardId-000000000001",
            "startSequenceNumber": "100",
            "endSequenceNumber": "200",
            "approximateArrivalOfFirstRecord": "2026-04-20T14:00:00.000Z",
            "approximateArrivalOfLastRecord": "2026-04-20T14:00:05.000Z",
            "batchSize": 3,
            "streamArn": "arn:aws:kinesis:us-east-1:000000000000:stream/tidemark-readings",
        })
    }

    #[test]
    fn an_on_failure_record_is_read_plain_or_as_an_sqs_message_body() {
        let plain = json!({"requestContext": {}, "KinesisBatchInfo": info()});
        let want = OnFailure::Kinesis(Range {
            stream_arn: "arn:aws:kinesis:us-east-1:000000000000:stream/tidemark-readings".into(),
            shard_id: "shardId-000000000001".into(),
            start: "100".into(),
            end: "200".into(),
            first_arrival: "2026-04-20T14:00:00.000Z".into(),
            last_arrival: "2026-04-20T14:00:05.000Z".into(),
        });
        assert_eq!(OnFailure::parse(&plain).unwrap(), want);
        let sqs = json!({"MessageId": "m", "Body": plain.to_string()});
        assert_eq!(OnFailure::parse(&sqs).unwrap(), want);
        let stream = json!({"DDBStreamBatchInfo": info()});
        assert!(matches!(
            OnFailure::parse(&stream).unwrap(),
            OnFailure::DynamoDbStream(_)
        ));
    }

    #[test]
    fn anything_else_is_an_input_error_naming_what_is_missing() {
        let e = OnFailure::parse(&json!({"hello": 1})).unwrap_err();
        assert!(e.to_string().contains("not an on-failure record"), "{e}");
        let mut partial = info();
        partial.as_object_mut().unwrap().remove("endSequenceNumber");
        let e = OnFailure::parse(&json!({"KinesisBatchInfo": partial})).unwrap_err();
        assert!(e.to_string().contains("endSequenceNumber"), "{e}");
    }
}
