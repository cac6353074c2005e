//! What the template's AWS IoT Core topic rule forwards (recorded in
//! `events/iot-rule-outputs.json`) is stored as readings, against DynamoDB Local: the device
//! ID from the topic, the device's own timestamp when it sends one, else `receivedAt` (when
//! IoT Core received the message), which is never a metric.

mod common;

use std::collections::BTreeMap;

use common::*;
use serde_json::Value;
use tidemark_schema::ReadingItem;
use tidemark_store::from_item;
use tidemark_testkit::TestTable;

#[tokio::test]
async fn rule_outputs_are_readings_with_the_topics_device_and_a_time_even_without_one() {
    let fixture: Value = serde_json::from_slice(
        &std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../events/iot-rule-outputs.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let messages = fixture["messages"].as_array().unwrap();
    let payloads: Vec<String> = messages
        .iter()
        .map(|m| m["ruleOutput"].to_string())
        .collect();
    let t = TestTable::new("ingest-iot").await;
    let ingest = local_ingest(&t.client, config(&t.name), t.client.clone());
    let (resp, stats) = ingest.process(&event_of(&payloads), soon()).await.unwrap();
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(stats.quarantined, 0);

    let items = scan(&t.client, &t.name).await;
    let stored: BTreeMap<(String, String), BTreeMap<String, f64>> = items
        .iter()
        .filter(|i| s(i, "sk").starts_with("READING#"))
        .map(|i| {
            let r: ReadingItem = from_item(i.clone()).unwrap();
            (
                (
                    r.pk.trim_start_matches("DEVICE#").to_owned(),
                    r.sk.trim_start_matches("READING#").to_owned(),
                ),
                r.metrics.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            )
        })
        .collect();
    let wanted: BTreeMap<(String, String), BTreeMap<String, f64>> = messages
        .iter()
        .map(|m| {
            let r = &m["reading"];
            (
                (
                    r["deviceId"].as_str().unwrap().to_owned(),
                    r["timestamp"].as_str().unwrap().to_owned(),
                ),
                r["metrics"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_f64().unwrap()))
                    .collect(),
            )
        })
        .collect();
    assert_eq!(stored, wanted, "receivedAt is a time, never a metric");
}
