//! Packed slot writes against DynamoDB Local: concurrent writers, replays, corrections and
//! unreadable items.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::packed::{self, SlotReadings};
use tidemark_schema::{MetricName, Timestamp, field};
use tidemark_store::StoreError;
use tidemark_store::retry::RetryPolicy;
use tidemark_store::slots::{SlotKey, SlotWrite, write_slot};
use tidemark_testkit::TestTable;

fn start() -> Timestamp {
    Timestamp::parse_rfc3339("2026-04-20T14:00:00Z").unwrap()
}

fn key() -> SlotKey {
    SlotKey {
        pk: "DEVICE#d".into(),
        sk: "SLOT#2026-04-20T14:00:00.000000Z".into(),
        start: start(),
    }
}

fn readings(seconds: impl IntoIterator<Item = i64>, metric: &str, value: f64) -> SlotReadings {
    seconds
        .into_iter()
        .map(|s| {
            (
                start().plus_micros(s * 1_000_000).unwrap(),
                BTreeMap::from([(MetricName::new(metric).unwrap(), value)]),
            )
        })
        .collect()
}

fn deadline() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(60)
}

/// One slot write with the store's backoff and a minute to finish.
async fn write(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    batch: &SlotReadings,
) -> Result<SlotWrite, StoreError> {
    write_slot(
        client,
        table,
        &key(),
        batch,
        0,
        RetryPolicy::default(),
        deadline(),
    )
    .await
}

async fn stored(t: &TestTable) -> (SlotReadings, u64) {
    let items = t.scan().await;
    assert_eq!(items.len(), 1);
    let AttributeValue::B(b) = &items[0][field::PACKED] else {
        panic!("packed readings are binary");
    };
    let AttributeValue::N(v) = &items[0][field::VERSION] else {
        panic!("a version");
    };
    (
        packed::decode(start(), b.as_ref()).unwrap(),
        v.parse().unwrap(),
    )
}

#[tokio::test]
async fn concurrent_writers_of_one_slot_lose_no_reading_and_no_metric() {
    let t = TestTable::new("slots-race").await;
    // GIVEN eight writers racing into one slot: each its own readings, and each one metric of
    // ten shared timestamps (a gateway's per-sensor records split over shards)
    let writes = (0..8i64).map(|w| {
        let mut mine = readings((100 + w * 10)..(110 + w * 10), "own", w as f64);
        mine.extend(readings(0..10, &format!("m{w}"), w as f64));
        let client = t.client.clone();
        let name = t.name.clone();
        tokio::spawn(async move { write(&client, &name, &mine).await.unwrap() })
    });
    let results = futures::future::join_all(writes).await;
    // THEN every write went through and the slot holds all 80 own readings and the ten shared
    // ones with all eight metrics
    assert!(results.iter().all(|r| r.as_ref().unwrap().written));
    let (slot, version) = stored(&t).await;
    assert_eq!(slot.len(), 90);
    assert!((0..10).all(|s| slot[&start().plus_micros(s * 1_000_000).unwrap()].len() == 8));
    assert_eq!(version, 8, "one version per successful write");
}

#[tokio::test]
async fn a_replayed_batch_writes_nothing_and_a_correction_wins() {
    let t = TestTable::new("slots-replay").await;
    let batch = readings(0..60, "temperature", 21.5);
    let first = write(&t.client, &t.name, &batch).await.unwrap();
    assert!(first.written);
    // WHEN the same batch comes again THEN nothing is written (the version stays)
    let again = write(&t.client, &t.name, &batch).await.unwrap();
    assert!(!again.written);
    assert_eq!(stored(&t).await.1, 1);
    // WHEN one reading is corrected THEN its value wins and the other 59 stay
    let fix = readings(7..8, "temperature", 22.0);
    write(&t.client, &t.name, &fix).await.unwrap();
    let (slot, version) = stored(&t).await;
    assert_eq!((slot.len(), version), (60, 2));
    let seventh = &slot[&start().plus_micros(7_000_000).unwrap()];
    assert_eq!(seventh[&MetricName::new("temperature").unwrap()], 22.0);
}

#[tokio::test]
async fn an_unreadable_slot_item_is_an_error_and_is_left_as_it_is() {
    let t = TestTable::new("slots-corrupt").await;
    t.client
        .put_item()
        .table_name(&t.name)
        .item("pk", AttributeValue::S(key().pk))
        .item("sk", AttributeValue::S(key().sk))
        .item(field::PACKED, AttributeValue::B(Blob::new(vec![9, 9, 9])))
        .item(field::VERSION, AttributeValue::N("3".into()))
        .send()
        .await
        .unwrap();
    let batch = readings(0..3, "temperature", 21.5);
    let err = write(&t.client, &t.name, &batch).await.unwrap_err();
    assert!(err.is_unreadable(), "{err}");
    let items = t.scan().await;
    assert_eq!(
        items[0][field::PACKED],
        AttributeValue::B(Blob::new(vec![9, 9, 9]))
    );
}
