//! The emulated DynamoDB stream mapping against DynamoDB Local, with fake functions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::streams::DynamoDbEventResponse;
use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_devstack::esm::{FunctionError, Mapping, MappingConfig, StreamHandler};
use tidemark_streams::DynamoDbStreamSource;
use tidemark_testkit::{TestTable, services};
use tokio::sync::watch;

#[derive(Clone, Default)]
struct Fake {
    calls: Arc<Mutex<Vec<Vec<EventRecord>>>>,
    fail_first_at: Option<usize>,
}

impl StreamHandler for Fake {
    async fn handle(&self, event: Event) -> Result<DynamoDbEventResponse, FunctionError> {
        let n = {
            let mut c = self.calls.lock().unwrap();
            c.push(event.records.clone());
            c.len()
        };
        let mut resp = DynamoDbEventResponse::default();
        if let (1, Some(i)) = (n, self.fail_first_at) {
            let mut f = aws_lambda_events::event::streams::DynamoDbBatchItemFailure::default();
            f.item_identifier = event.records[i].change.sequence_number.clone();
            resp.batch_item_failures.push(f);
        }
        Ok(resp)
    }
}

async fn streams_client() -> aws_sdk_dynamodbstreams::Client {
    tidemark_streams::local_streams::client(&services().dynamodb_endpoint).await
}

async fn put(t: &TestTable, pk: &str, sk: &str, v: i64) {
    t.client
        .put_item()
        .table_name(&t.name)
        .item("pk", AttributeValue::S(pk.into()))
        .item("sk", AttributeValue::S(sk.into()))
        .item("v", AttributeValue::N(v.to_string()))
        .item(
            "m",
            AttributeValue::M(HashMap::from([(
                "temperature".to_owned(),
                AttributeValue::N("22.5".into()),
            )])),
        )
        .send()
        .await
        .unwrap();
}

async fn run_until(t: &TestTable, f: Fake, want: usize) -> Vec<Vec<EventRecord>> {
    let source = DynamoDbStreamSource::for_table(&t.client, streams_client().await, &t.name)
        .await
        .unwrap();
    let cfg = MappingConfig {
        batching_window: Duration::from_millis(500),
        poll_interval: Duration::from_millis(50),
        retry_backoff: Duration::from_millis(10),
        ..MappingConfig::new("fake")
    };
    let mapping = Mapping::new(source, f.clone(), cfg);
    let stats = mapping.stats();
    let (stop, rx) = watch::channel(false);
    let task = tokio::spawn(mapping.run(rx));
    tidemark_testkit::eventually(
        Duration::from_secs(30),
        "the mapping delivers what was written",
        || async { (stats.delivered() as usize >= want).then_some(()) },
    )
    .await;
    stop.send(true).unwrap();
    task.await.unwrap();
    f.calls.lock().unwrap().clone()
}

#[tokio::test]
async fn table_changes_arrive_as_lambda_stream_events_in_order() {
    // GIVEN an insert, an update and a delete of one item
    let t = TestTable::new("esm-ddb").await;
    put(&t, "DEVICE#a", "READING#1", 1).await;
    put(&t, "DEVICE#a", "READING#1", 2).await;
    t.client
        .delete_item()
        .table_name(&t.name)
        .key("pk", AttributeValue::S("DEVICE#a".into()))
        .key("sk", AttributeValue::S("READING#1".into()))
        .send()
        .await
        .unwrap();
    // WHEN the mapping runs
    let calls = run_until(&t, Fake::default(), 3).await;
    let records: Vec<EventRecord> = calls.concat();
    // THEN the function saw INSERT, MODIFY, REMOVE in order, with images and keys
    let names: Vec<&str> = records.iter().map(|r| r.event_name.as_str()).collect();
    assert_eq!(names, ["INSERT", "MODIFY", "REMOVE"]);
    let seqs: Vec<u128> = records
        .iter()
        .map(|r| {
            r.change
                .sequence_number
                .as_deref()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Item {
        pk: String,
        v: i64,
        m: HashMap<String, f64>,
    }
    let new: Item = serde_dynamo::from_item(records[1].change.new_image.clone()).unwrap();
    let old: Item = serde_dynamo::from_item(records[1].change.old_image.clone()).unwrap();
    assert_eq!((new.v, old.v), (2, 1));
    assert_eq!(new.m["temperature"], 22.5);
    assert!(records[2].change.new_image.is_empty());
    assert_eq!(records[2].change.keys.len(), 2);
    assert_eq!(records[0].event_source.as_deref(), Some("aws:dynamodb"));
    assert!(
        records[0]
            .event_source_arn
            .as_deref()
            .unwrap()
            .contains(&t.name)
    );
    assert!(records[0].change.size_bytes > 0);
}

#[tokio::test]
async fn a_reported_item_failure_replays_stream_records_from_that_record() {
    let t = TestTable::new("esm-ddb-partial").await;
    for i in 0..5 {
        put(&t, "DEVICE#a", &format!("READING#{i}"), i).await;
    }
    let f = Fake {
        fail_first_at: Some(2),
        ..Fake::default()
    };
    let calls = run_until(&t, f, 5).await;
    let sks = |c: &Vec<EventRecord>| -> Vec<String> {
        c.iter()
            .map(|r| {
                serde_dynamo::from_attribute_value::<_, String>(
                    r.change.keys.get("sk").unwrap().clone(),
                )
                .unwrap()
            })
            .collect()
    };
    assert_eq!(calls.len(), 2);
    assert_eq!(sks(&calls[0]).len(), 5);
    assert_eq!(sks(&calls[1]), ["READING#2", "READING#3", "READING#4"]);
}
