//! A table's DynamoDB stream, read as a stream event-source mapping reads it.

use aws_lambda_events::event::dynamodb::EventRecord;
use aws_sdk_dynamodbstreams::types::{AttributeValue, ShardIteratorType};
use base64::Engine;
use serde_json::{Map, Value, json};

use crate::{EventSource, LOCAL_REGION, Page, ShardInfo, Start, StreamError};

fn err(operation: &'static str) -> impl FnOnce(String) -> StreamError {
    move |message| StreamError::Source {
        service: "DynamoDB Streams",
        operation,
        message,
    }
}

/// The service's error code and message, or the whole context for transport errors.
fn describe<E, R>(e: aws_sdk_dynamodbstreams::error::SdkError<E, R>) -> String
where
    E: aws_sdk_dynamodbstreams::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match e.as_service_error() {
        Some(s) => format!(
            "{}: {}",
            s.code().unwrap_or("ServiceError"),
            s.message().unwrap_or_default()
        ),
        None => aws_sdk_dynamodbstreams::error::DisplayErrorContext(e).to_string(),
    }
}

/// The stream of a table (DynamoDB Local serves it on the DynamoDB endpoint).
pub struct DynamoDbStreamSource {
    client: aws_sdk_dynamodbstreams::Client,
    arn: String,
}

impl DynamoDbStreamSource {
    /// The table's latest stream.
    pub async fn for_table(
        dynamodb: &aws_sdk_dynamodb::Client,
        streams: aws_sdk_dynamodbstreams::Client,
        table: &str,
    ) -> Result<Self, StreamError> {
        let d = dynamodb
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(|e| {
                err("DescribeTable")(
                    aws_sdk_dynamodb::error::DisplayErrorContext(aws_sdk_dynamodb::Error::from(e))
                        .to_string(),
                )
            })?;
        let arn = d
            .table()
            .and_then(|t| t.latest_stream_arn())
            .ok_or_else(|| StreamError::NoStream(table.to_owned()))?;
        Ok(DynamoDbStreamSource {
            client: streams,
            arn: arn.to_owned(),
        })
    }

    /// A stream known by its ARN (e.g. from an on-failure record's `streamArn`).
    pub fn new(streams: aws_sdk_dynamodbstreams::Client, arn: impl Into<String>) -> Self {
        DynamoDbStreamSource {
            client: streams,
            arn: arn.into(),
        }
    }

    /// The stream's ARN (what Lambda names as each record's `eventSourceARN`).
    pub fn arn(&self) -> &str {
        &self.arn
    }

    /// The record as Lambda puts it in the event: the wire JSON of the stream record, parsed
    /// by `aws_lambda_events` exactly as it parses a real invocation payload.
    pub fn event_record(
        arn: &str,
        r: &aws_sdk_dynamodbstreams::types::Record,
    ) -> Result<EventRecord, serde_json::Error> {
        let mut change = Map::new();
        if let Some(d) = r.dynamodb() {
            if let Some(t) = d.approximate_creation_date_time() {
                change.insert("ApproximateCreationDateTime".into(), json!(t.as_secs_f64()));
            }
            for (k, img) in [
                ("Keys", d.keys()),
                ("NewImage", d.new_image()),
                ("OldImage", d.old_image()),
            ] {
                if let Some(img) = img {
                    change.insert(k.into(), wire_item(img));
                }
            }
            change.insert("SequenceNumber".into(), json!(d.sequence_number()));
            change.insert("SizeBytes".into(), json!(d.size_bytes().unwrap_or(0)));
            if let Some(v) = d.stream_view_type() {
                change.insert("StreamViewType".into(), json!(v.as_str()));
            }
        }
        let mut rec = json!({
            "eventID": r.event_id().unwrap_or_default(),
            "eventName": r.event_name().map(|n| n.as_str()).unwrap_or_default(),
            "eventVersion": r.event_version().unwrap_or("1.1"),
            "eventSource": "aws:dynamodb",
            "awsRegion": r.aws_region().unwrap_or(LOCAL_REGION),
            "dynamodb": change,
            "eventSourceARN": arn,
        });
        if let (Some(id), Some(m)) = (r.user_identity(), rec.as_object_mut()) {
            m.insert(
                "userIdentity".into(),
                json!({"type": id.r#type(), "principalId": id.principal_id()}),
            );
        }
        serde_json::from_value(rec)
    }
}

fn wire_item(item: &std::collections::HashMap<String, AttributeValue>) -> Value {
    Value::Object(
        item.iter()
            .map(|(k, v)| (k.clone(), wire_value(v)))
            .collect(),
    )
}

/// DynamoDB's JSON wire form of a value (`{"S": "…"}`, `{"N": "…"}`, …).
fn wire_value(v: &AttributeValue) -> Value {
    let b64 =
        |b: &aws_smithy_types::Blob| base64::engine::general_purpose::STANDARD.encode(b.as_ref());
    match v {
        AttributeValue::S(s) => json!({"S": s}),
        AttributeValue::N(n) => json!({"N": n}),
        AttributeValue::B(b) => json!({"B": b64(b)}),
        AttributeValue::Bool(b) => json!({"BOOL": b}),
        AttributeValue::Null(b) => json!({"NULL": b}),
        AttributeValue::Ss(v) => json!({"SS": v}),
        AttributeValue::Ns(v) => json!({"NS": v}),
        AttributeValue::Bs(v) => json!({"BS": v.iter().map(b64).collect::<Vec<_>>()}),
        AttributeValue::L(v) => json!({"L": v.iter().map(wire_value).collect::<Vec<_>>()}),
        AttributeValue::M(m) => json!({"M": wire_item(m)}),
        _ => json!({"NULL": true}),
    }
}

impl EventSource for DynamoDbStreamSource {
    type Record = EventRecord;

    fn arn(&self) -> &str {
        &self.arn
    }

    fn batch_info_key(&self) -> &'static str {
        "DDBStreamBatchInfo"
    }

    fn max_read(&self) -> usize {
        1_000
    }

    async fn shards(&self) -> Result<Vec<ShardInfo>, StreamError> {
        let mut out = Vec::new();
        let mut last: Option<String> = None;
        loop {
            let d = self
                .client
                .describe_stream()
                .stream_arn(&self.arn)
                .set_exclusive_start_shard_id(last.clone())
                .send()
                .await
                .map_err(|e| err("DescribeStream")(describe(e)))?;
            let Some(desc) = d.stream_description() else {
                return Ok(out);
            };
            out.extend(desc.shards().iter().filter_map(|s| {
                Some(ShardInfo {
                    id: s.shard_id()?.to_owned(),
                    parent: s.parent_shard_id().map(str::to_owned),
                    adjacent_parent: None,
                })
            }));
            last = desc.last_evaluated_shard_id().map(str::to_owned);
            if last.is_none() {
                return Ok(out);
            }
        }
    }

    async fn iterator(&self, shard: &str, start: &Start) -> Result<Option<String>, StreamError> {
        let req = self
            .client
            .get_shard_iterator()
            .stream_arn(&self.arn)
            .shard_id(shard);
        let req = match start {
            Start::TrimHorizon => req.shard_iterator_type(ShardIteratorType::TrimHorizon),
            Start::Latest => req.shard_iterator_type(ShardIteratorType::Latest),
            Start::After(seq) => req
                .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                .sequence_number(seq),
            Start::At(seq) => req
                .shard_iterator_type(ShardIteratorType::AtSequenceNumber)
                .sequence_number(seq),
        };
        let out = req.send().await.map_err(|e| {
            err("GetShardIterator")(
                aws_sdk_dynamodbstreams::error::DisplayErrorContext(e).to_string(),
            )
        })?;
        Ok(out.shard_iterator().map(str::to_owned))
    }

    async fn read(
        &self,
        _shard: &str,
        iterator: &str,
        limit: usize,
    ) -> Result<Page<EventRecord>, StreamError> {
        let out = self
            .client
            .get_records()
            .shard_iterator(iterator)
            .limit(i32::try_from(limit).unwrap_or(1_000))
            .send()
            .await
            .map_err(|e| {
                err("GetRecords")(
                    aws_sdk_dynamodbstreams::error::DisplayErrorContext(e).to_string(),
                )
            })?;
        let mut records = Vec::with_capacity(out.records().len());
        for r in out.records() {
            records.push(Self::event_record(&self.arn, r).map_err(|e| {
                err("GetRecords")(format!("record not convertible to a Lambda event: {e}"))
            })?);
        }
        Ok(Page {
            records,
            next: out.next_shard_iterator().map(str::to_owned),
            millis_behind: None,
        })
    }

    fn sequence(record: &EventRecord) -> &str {
        record.change.sequence_number.as_deref().unwrap_or_default()
    }

    fn arrival_millis(record: &EventRecord) -> i64 {
        record
            .change
            .approximate_creation_date_time
            .timestamp_millis()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use aws_sdk_dynamodbstreams::types::{
        Identity, OperationType, Record, StreamRecord, StreamViewType,
    };

    use super::*;

    #[test]
    fn a_ttl_deletion_keeps_its_user_identity_and_old_image() {
        // GIVEN the stream record DynamoDB writes when TTL deletes a reading
        let old = HashMap::from([
            ("pk".to_owned(), AttributeValue::S("DEVICE#d1".into())),
            (
                "sk".to_owned(),
                AttributeValue::S("READING#2026-04-20T14:00:00.000000Z".into()),
            ),
            (
                "metrics".to_owned(),
                AttributeValue::M(HashMap::from([(
                    "temperature".to_owned(),
                    AttributeValue::N("22.4".into()),
                )])),
            ),
            ("ttl".to_owned(), AttributeValue::N("1779285600".into())),
            ("flags".to_owned(), AttributeValue::Ss(vec!["a".into()])),
            (
                "raw".to_owned(),
                AttributeValue::B(aws_smithy_types::Blob::new(b"\x00\x01".to_vec())),
            ),
            ("gone".to_owned(), AttributeValue::Null(true)),
        ]);
        let rec = Record::builder()
            .event_id("e1")
            .event_name(OperationType::Remove)
            .event_version("1.1")
            .aws_region("us-east-1")
            .dynamodb(
                StreamRecord::builder()
                    .approximate_creation_date_time(aws_smithy_types::DateTime::from_secs(
                        1_776_693_600,
                    ))
                    .set_keys(Some(HashMap::from([
                        ("pk".to_owned(), old["pk"].clone()),
                        ("sk".to_owned(), old["sk"].clone()),
                    ])))
                    .set_old_image(Some(old))
                    .sequence_number("000000000000000000123")
                    .size_bytes(120)
                    .stream_view_type(StreamViewType::NewAndOldImages)
                    .build(),
            )
            .user_identity(
                Identity::builder()
                    .r#type("Service")
                    .principal_id("dynamodb.amazonaws.com")
                    .build(),
            )
            .build();
        // WHEN it becomes a Lambda event record
        let e = DynamoDbStreamSource::event_record("arn:stream", &rec).unwrap();
        // THEN it reads like the one Lambda delivers
        assert_eq!(e.event_name, "REMOVE");
        assert_eq!(e.event_source_arn.as_deref(), Some("arn:stream"));
        let who = e
            .user_identity
            .expect("TTL deletions carry a user identity");
        assert_eq!(
            (who.type_.as_str(), who.principal_id.as_str()),
            ("Service", "dynamodb.amazonaws.com")
        );
        assert_eq!(
            e.change.sequence_number.as_deref(),
            Some("000000000000000000123")
        );
        assert_eq!(e.change.size_bytes, 120);
        assert_eq!(
            e.change.approximate_creation_date_time.timestamp(),
            1_776_693_600
        );
        assert!(e.change.new_image.is_empty());
        #[derive(serde::Deserialize)]
        struct Old {
            metrics: HashMap<String, f64>,
            ttl: i64,
        }
        let old: Old = serde_dynamo::from_item(e.change.old_image.clone()).unwrap();
        assert_eq!(old.metrics["temperature"], 22.4);
        assert_eq!(old.ttl, 1_779_285_600);
        let wire = serde_json::to_value(&e.change.old_image).unwrap();
        assert_eq!(wire["raw"], json!({"B": "AAE="}));
        assert_eq!(wire["flags"], json!({"SS": ["a"]}));
        assert_eq!(wire["gone"], json!({"NULL": true}));
        assert_eq!(e.change.keys.len(), 2);
    }

    #[test]
    fn an_insert_has_no_user_identity() {
        let rec = Record::builder()
            .event_id("e2")
            .event_name(OperationType::Insert)
            .dynamodb(StreamRecord::builder().sequence_number("5").build())
            .build();
        let e = DynamoDbStreamSource::event_record("arn", &rec).unwrap();
        assert_eq!(e.event_name, "INSERT");
        assert!(e.user_identity.is_none());
    }
}
