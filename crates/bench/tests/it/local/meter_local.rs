//! The metering proxy against DynamoDB Local: what passes through is counted, and the
//! functions behind it see DynamoDB's own answers.

use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_bench::meter::Meter;
use tidemark_store::ClientSettings;
use tidemark_testkit::{TestTable, services};

async fn metered(table: &TestTable) -> (Meter, aws_sdk_dynamodb::Client) {
    let _ = table;
    let addr = services().dynamodb_addr();
    let meter = Meter::start(addr).await.unwrap();
    let client = tidemark_store::dynamodb_client(&ClientSettings::local(meter.endpoint())).await;
    (meter, client)
}

#[tokio::test]
async fn writes_through_the_proxy_are_counted_with_their_index_units() {
    // GIVEN a Tidemark table behind a metering proxy
    let table = TestTable::new("bench-meter").await;
    let (meter, client) = metered(&table).await;
    // WHEN a device item with GSI1 keys and a plain item are put, and one is read back
    for (sk, gsi) in [("#METADATA", true), ("OTHER", false)] {
        let mut req = client
            .put_item()
            .table_name(&table.name)
            .item("pk", AttributeValue::S("DEVICE#d1".into()))
            .item("sk", AttributeValue::S(sk.into()));
        if gsi {
            req = req
                .item("gsi1pk", AttributeValue::S("DEVICE_STATUS#active".into()))
                .item("gsi1sk", AttributeValue::S("DEVICE#d1".into()));
        }
        req.send().await.unwrap();
    }
    let got = client
        .get_item()
        .table_name(&table.name)
        .key("pk", AttributeValue::S("DEVICE#d1".into()))
        .key("sk", AttributeValue::S("OTHER".into()))
        .send()
        .await
        .unwrap();
    // THEN the caller got DynamoDB's answer, and the proxy counted 2 table + 1 GSI write units
    assert!(got.item().is_some());
    let (w, calls, failed) = meter.totals().await.writes();
    assert_eq!(
        (w.table, w.gsi, w.total, calls, failed),
        (2.0, 1.0, 3.0, 2, 0)
    );
    assert_eq!(meter.totals().await.reads().1, 1);
}

#[tokio::test]
async fn a_failed_condition_reaches_the_caller_and_is_counted() {
    let table = TestTable::new("bench-meter-cond").await;
    let (meter, client) = metered(&table).await;
    let err = client
        .put_item()
        .table_name(&table.name)
        .item("pk", AttributeValue::S("DEVICE#d1".into()))
        .item("sk", AttributeValue::S("#METADATA".into()))
        .condition_expression("attribute_exists(pk)")
        .send()
        .await
        .unwrap_err();
    assert!(
        err.as_service_error()
            .is_some_and(|e| e.is_conditional_check_failed_exception())
    );
    let (w, calls, failed) = meter.take().await.writes();
    assert_eq!((w.total, calls, failed), (0.0, 1, 1));
    assert_eq!(meter.totals().await.by_operation.len(), 0);
}

#[tokio::test]
async fn partiql_inserts_are_metered_as_the_puts_they_stand_for() {
    use tidemark_store::write::batch::Inserted;
    // GIVEN a table behind the proxy, and what PutItem of the same items costs
    let table = TestTable::new("bench-meter-pq").await;
    let (meter, client) = metered(&table).await;
    let item = |sk: &str, big: bool| {
        let mut i = std::collections::HashMap::from([
            ("pk".to_owned(), AttributeValue::S("DEVICE#d1".into())),
            ("sk".to_owned(), AttributeValue::S(sk.into())),
        ]);
        if big {
            i.insert("pad".into(), AttributeValue::S("x".repeat(1500)));
        }
        i
    };
    for (sk, big) in [("p1", false), ("p2", true)] {
        client
            .put_item()
            .table_name(&table.name)
            .set_item(Some(item(sk, big)))
            .send()
            .await
            .unwrap();
    }
    let puts = meter.take().await.writes().0.total;
    assert_eq!(puts, 3.0, "1 unit for the small item, 2 for the 1.5 KB one");
    // WHEN the same shapes are inserted by PartiQL, and one key is taken
    let answers = tidemark_store::write::insert::insert_batch(
        &client,
        &table.name,
        vec![item("q1", false), item("q2", true), item("p1", false)],
    )
    .await
    .unwrap();
    assert_eq!(answers, [Inserted::Yes, Inserted::Yes, Inserted::Taken]);
    // THEN the inserts cost what the puts did, and the taken key is a failed condition
    let (w, calls, failed) = meter.take().await.writes();
    assert_eq!((w.total, calls, failed), (3.0, 1, 1));
    // and the shadow left no item behind in the table itself
    assert_eq!(table.scan().await.len(), 4);
}
