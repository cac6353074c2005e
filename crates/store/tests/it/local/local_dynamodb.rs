//! The store against a real DynamoDB Local, started by the project's own script.

use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::table::{GSI1, attr};
use tidemark_schema::*;
use tidemark_store::{from_item, to_item};
use tidemark_testkit::TestTable;

fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

fn sample_reading() -> Reading {
    Reading {
        device_id: DeviceId::new("sensor_01").unwrap(),
        timestamp: ts("2026-04-20T14:00:00Z"),
        metrics: [("temperature", 22.4), ("humidity", 45.0), ("battery", 87.0)]
            .into_iter()
            .map(|(k, v)| (MetricName::new(k).unwrap(), v))
            .collect(),
        metadata: Some(
            serde_json::json!({"fw": "2.1.0"})
                .as_object()
                .unwrap()
                .clone(),
        ),
    }
}

#[tokio::test]
async fn a_table_made_before_an_index_existed_gains_it_and_keeps_its_items() {
    let t = TestTable::new("store-upgrade").await;
    tidemark_store::delete_table(&t.client, &t.name)
        .await
        .unwrap();
    let mut older = TABLE;
    older.global_secondary_indexes = &TABLE.global_secondary_indexes[..1];
    tidemark_store::create_table(&t.client, &t.name, &older)
        .await
        .unwrap();
    t.client
        .put_item()
        .table_name(&t.name)
        .item(attr::PK, AttributeValue::S("DEVICE#d".into()))
        .item(attr::SK, AttributeValue::S("#METADATA".into()))
        .send()
        .await
        .unwrap();
    tidemark_store::create_table(&t.client, &t.name, &TABLE)
        .await
        .unwrap();
    let d = t
        .client
        .describe_table()
        .table_name(&t.name)
        .send()
        .await
        .unwrap();
    let names: Vec<_> = d
        .table()
        .unwrap()
        .global_secondary_indexes()
        .iter()
        .filter_map(|g| g.index_name())
        .collect();
    assert!(names.contains(&tidemark_schema::table::GSI2), "{names:?}");
    let kept = t.client.scan().table_name(&t.name).send().await.unwrap();
    assert_eq!(kept.count(), 1);
}

#[tokio::test]
async fn created_table_has_the_schema_definition() {
    let t = TestTable::new("store-def").await;
    let d = t
        .client
        .describe_table()
        .table_name(&t.name)
        .send()
        .await
        .unwrap();
    let table = d.table().unwrap();
    let keys: Vec<_> = table
        .key_schema()
        .iter()
        .map(|k| (k.attribute_name(), k.key_type().as_str()))
        .collect();
    assert_eq!(keys, [(attr::PK, "HASH"), (attr::SK, "RANGE")]);
    let index = |name: &str| {
        table
            .global_secondary_indexes()
            .iter()
            .find(|g| g.index_name() == Some(name))
            .unwrap_or_else(|| panic!("no index {name}"))
    };
    let projected = index(GSI1).projection().unwrap().non_key_attributes();
    assert_eq!(
        projected,
        TABLE.global_secondary_indexes[0].non_key_attributes
    );
    let gsi2 = index(tidemark_schema::table::GSI2).projection().unwrap();
    assert_eq!(gsi2.projection_type().unwrap().as_str(), "KEYS_ONLY");
    let stream = table.stream_specification().unwrap();
    assert!(stream.stream_enabled());
    assert_eq!(
        stream.stream_view_type().unwrap().as_str(),
        TABLE.stream_view_type
    );
    let ttl = t
        .client
        .describe_time_to_live()
        .table_name(&t.name)
        .send()
        .await
        .unwrap();
    let ttl = ttl.time_to_live_description().unwrap();
    assert_eq!(ttl.attribute_name(), Some(TABLE.ttl_attribute));
}

#[tokio::test]
async fn creating_an_existing_table_is_a_no_op() {
    let t = TestTable::new("store-twice").await;
    tidemark_store::create_table(&t.client, &t.name, &TABLE)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_reading_round_trips_through_the_table() {
    let t = TestTable::new("store-reading").await;
    let item = ReadingItem::new(&sample_reading(), None, 30);
    t.put(&item).await;
    let got = t
        .client
        .get_item()
        .table_name(&t.name)
        .key(attr::PK, AttributeValue::S("DEVICE#sensor_01".into()))
        .key(
            attr::SK,
            AttributeValue::S("READING#2026-04-20T14:00:00.000000Z".into()),
        )
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    let raw = got.item().unwrap().clone();
    assert_eq!(raw["ttl"], AttributeValue::N(item.ttl.to_string()));
    assert!(matches!(raw["metrics"], AttributeValue::M(_)));
    let back: ReadingItem = from_item(raw).unwrap();
    assert_eq!(back, item);
    assert_eq!(back.to_reading().unwrap().0, sample_reading());
}

#[tokio::test]
async fn a_device_is_found_by_status_in_gsi1() {
    let t = TestTable::new("store-gsi").await;
    let d = DeviceItem::new(
        DeviceId::new("sensor_01").unwrap(),
        DeviceStatus::Active,
        ts("2026-04-20T14:00:00Z"),
    );
    t.client
        .put_item()
        .table_name(&t.name)
        .set_item(Some(to_item(&d).unwrap()))
        .send()
        .await
        .unwrap();
    let q = t
        .client
        .query()
        .table_name(&t.name)
        .index_name(GSI1)
        .key_condition_expression("#pk = :pk")
        .expression_attribute_names("#pk", attr::GSI1PK)
        .expression_attribute_values(":pk", AttributeValue::S("DEVICE_STATUS#active".into()))
        .send()
        .await
        .unwrap();
    let items: Vec<DeviceItem> = q
        .items()
        .iter()
        .map(|i| from_item(i.clone()).unwrap())
        .collect();
    assert_eq!(items, vec![d]);
}

#[tokio::test]
async fn quarantine_payload_is_stored_as_binary() {
    let t = TestTable::new("store-quarantine").await;
    let received = ts("2026-04-20T14:00:00.123000Z");
    let k = QuarantineItem::key_for(received.day(), received, "4959");
    let q = QuarantineItem {
        pk: k.pk,
        sk: k.sk,
        reason: QuarantineReason::NotJson,
        message: "expected value at line 1 column 1".into(),
        received_at: received,
        sequence_number: "4959".into(),
        sub_record: None,
        explicit_hash_key: None,
        partition_key: "sensor_01".into(),
        partition_key_sha256: None,
        explicit_hash_key_sha256: None,
        message_sha256: None,
        function_version: None,
        size: 3,
        payload: vec![0xff, 0x00, 0x7b],
        parts: 1,
        ttl: received.ttl_after_days(QuarantineItem::RETENTION_DAYS),
    };
    let item = to_item(&q).unwrap();
    assert!(matches!(item["payload"], AttributeValue::B(_)));
    t.client
        .put_item()
        .table_name(&t.name)
        .set_item(Some(item))
        .send()
        .await
        .unwrap();
    let got = t
        .client
        .get_item()
        .table_name(&t.name)
        .key(attr::PK, AttributeValue::S(q.pk.clone()))
        .key(attr::SK, AttributeValue::S(q.sk.clone()))
        .send()
        .await
        .unwrap();
    let back: QuarantineItem = from_item(got.item.unwrap()).unwrap();
    assert_eq!(back, q);
}

fn reading_item(metrics: &[(&str, f64)], fw: Option<&str>) -> tidemark_store::Item {
    let mut r = sample_reading();
    r.metrics = metrics
        .iter()
        .map(|(k, v)| (MetricName::new(k).unwrap(), *v))
        .collect();
    r.metadata = fw.map(|fw| serde_json::json!({ "fw": fw }).as_object().unwrap().clone());
    to_item(&ReadingItem::new(&r, None, 30)).unwrap()
}

async fn stored_metrics(t: &TestTable) -> Vec<(String, f64)> {
    let items = t.scan().await;
    assert_eq!(items.len(), 1, "one reading per device and timestamp");
    let r: ReadingItem = from_item(items[0].clone()).unwrap();
    r.metrics
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

#[tokio::test]
async fn merging_records_of_one_timestamp_keeps_every_metric_and_the_later_value_wins() {
    use tidemark_store::write::map_merge::{Merged, merge_item};
    let t = TestTable::new("store-merge").await;
    let m = field::METRICS;
    // GIVEN a gateway's records for one device and timestamp, one sensor each
    let first = merge_item(
        &t.client,
        &t.name,
        reading_item(&[("temperature", 22.4)], None),
        m,
    );
    assert_eq!(first.await.unwrap(), Merged::Inserted);
    let second = reading_item(&[("humidity", 45.0)], Some("2.1.0"));
    let r = merge_item(&t.client, &t.name, second.clone(), m)
        .await
        .unwrap();
    assert_eq!(r, Merged::Merged);
    assert_eq!(
        stored_metrics(&t).await,
        [("humidity".into(), 45.0), ("temperature".into(), 22.4)]
    );
    // WHEN the same record is sent again THEN nothing is written
    let again = merge_item(&t.client, &t.name, second, m).await.unwrap();
    assert!(matches!(again, Merged::Unchanged | Merged::Merged));
    // WHEN a later record corrects one metric THEN its value wins and the other stays
    let fix = reading_item(&[("temperature", 22.9)], None);
    merge_item(&t.client, &t.name, fix, m).await.unwrap();
    assert_eq!(
        stored_metrics(&t).await,
        [("humidity".into(), 45.0), ("temperature".into(), 22.9)]
    );
    let item: ReadingItem = from_item(t.scan().await[0].clone()).unwrap();
    assert_eq!(item.metadata.unwrap()["fw"], "2.1.0", "metadata kept");
}

#[tokio::test]
async fn concurrent_merges_into_one_key_lose_no_metric() {
    use tidemark_store::write::map_merge::merge_item;
    let t = TestTable::new("store-merge-race").await;
    let names: Vec<String> = (0..24).map(|i| format!("m{i}")).collect();
    let writes = names.iter().enumerate().map(|(i, n)| {
        let item = reading_item(&[(n.as_str(), i as f64)], None);
        merge_item(&t.client, &t.name, item, field::METRICS)
    });
    for r in futures::future::join_all(writes).await {
        r.unwrap();
    }
    let stored = stored_metrics(&t).await;
    assert_eq!(stored.len(), 24, "{stored:?}");
}

#[tokio::test]
async fn an_item_without_a_metrics_map_under_a_reading_key_is_replaced_not_a_failure() {
    use tidemark_store::write::map_merge::{Merged, merge_item};
    let t = TestTable::new("store-merge-foreign").await;
    let mut foreign = reading_item(&[("temperature", 1.0)], None);
    foreign.insert(field::METRICS.into(), AttributeValue::S("garbage".into()));
    t.client
        .put_item()
        .table_name(&t.name)
        .set_item(Some(foreign))
        .send()
        .await
        .unwrap();
    let item = reading_item(&[("temperature", 22.4)], None);
    let r = merge_item(&t.client, &t.name, item, field::METRICS).await;
    assert_eq!(r.unwrap(), Merged::Replaced);
    assert_eq!(stored_metrics(&t).await, [("temperature".into(), 22.4)]);
}

fn reading_at(device: &str, second: u32, metrics: &[(&str, f64)]) -> tidemark_store::Item {
    let mut r = sample_reading();
    r.device_id = DeviceId::new(device).unwrap();
    r.timestamp = ts(&format!("2026-04-20T14:00:{second:02}Z"));
    r.metrics = metrics
        .iter()
        .map(|(k, v)| (MetricName::new(k).unwrap(), *v))
        .collect();
    to_item(&ReadingItem::new(&r, None, 30)).unwrap()
}

#[tokio::test]
async fn batched_inserts_write_new_readings_25_a_call_and_merge_into_taken_keys() {
    use tidemark_store::retry::RetryPolicy;
    use tidemark_store::write::batch::{BatchWriter, Inserted, MAX_BATCH_WRITE, PendingWrite};
    let t = TestTable::new("store-insert").await;
    let m = field::METRICS;
    // GIVEN one reading already stored, and one call's worth of inserts for a fresh device
    let answers = tidemark_store::write::insert::insert_batch(
        &t.client,
        &t.name,
        vec![
            reading_at("a", 0, &[("temperature", 20.0)]),
            reading_at("a", 1, &[("temperature", 21.0)]),
        ],
    )
    .await
    .unwrap();
    assert_eq!(answers, [Inserted::Yes, Inserted::Yes]);
    // WHEN the same key is inserted again THEN it is reported taken and left as it was
    let again = tidemark_store::write::insert::insert_batch(
        &t.client,
        &t.name,
        vec![reading_at("a", 0, &[("humidity", 40.0)])],
    )
    .await
    .unwrap();
    assert_eq!(again, [Inserted::Taken]);
    // WHEN a batch of 60 new readings and a same-timestamp record for the stored one is written
    let mut writes: Vec<PendingWrite> = (0..60)
        .map(|i| {
            PendingWrite::merge(
                i,
                reading_at("b", i as u32, &[("temperature", i as f64)]),
                m,
            )
        })
        .collect();
    writes.push(PendingWrite::merge(
        60,
        reading_at("a", 0, &[("humidity", 40.0)]),
        m,
    ));
    let w = BatchWriter::new(t.client.clone(), &t.name, 4, RetryPolicy::default());
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let r = w.write_all(writes, deadline).await;
    // THEN every reading is stored once, the taken key holds both metrics, and the new ones
    // went out a call per 25 (plus the one merge's calls)
    assert_eq!(
        (r.written, r.failed_tags.len(), r.merged),
        (61, 0, 1),
        "{r:?}"
    );
    assert!(
        r.calls <= (61usize.div_ceil(MAX_BATCH_WRITE) + 3) as u64,
        "{} calls",
        r.calls
    );
    let items = t.scan().await;
    assert_eq!(items.len(), 62);
    let stored: Vec<ReadingItem> = items.into_iter().map(|i| from_item(i).unwrap()).collect();
    let merged = stored
        .iter()
        .find(|r| r.metrics.len() == 2)
        .expect("the same-timestamp record merged into the stored reading");
    assert_eq!(merged.metrics.values().copied().sum::<f64>(), 60.0);
}
