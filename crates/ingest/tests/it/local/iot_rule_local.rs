//! What the template's AWS IoT Core topic rule forwards (recorded in
//! `events/iot-rule-outputs.json`: the message base64 beside the thing's name from the topic,
//! for an object with and without `deviceId`, an array and a SenML pack) is stored as the
//! thing's readings, against DynamoDB Local: a reading naming no device is the thing's, one
//! without a time is at `receivedAt` (never a metric), and one naming another device is
//! quarantined as `identity_mismatch` with its record's bytes while the rest is stored, both
//! under `DEVICE_IDENTITY=partition-key` (the default) and `iot-thing`.

use std::collections::BTreeMap;

use crate::common::*;
use base64::Engine as _;
use serde_json::Value;
use tidemark_schema::{DeviceIdentity, EntityKey, QuarantineItem, QuarantineReason, ReadingItem};
use tidemark_store::from_item;
use tidemark_testkit::TestTable;

type Stored = BTreeMap<(String, String), BTreeMap<String, f64>>;

fn fixture() -> Value {
    serde_json::from_slice(
        &std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../events/iot-rule-outputs.json"
        ))
        .unwrap(),
    )
    .unwrap()
}

fn wanted(messages: &[Value]) -> Stored {
    messages
        .iter()
        .flat_map(|m| m["readings"].as_array().unwrap())
        .map(|r| {
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
        .collect()
}

#[test]
fn each_rule_output_carries_the_published_message_whole_and_the_topics_thing() {
    let fixture = fixture();
    for m in fixture["messages"].as_array().unwrap() {
        let out = &m["ruleOutput"];
        let thing = m["topic"].as_str().unwrap().split('/').nth(1);
        assert_eq!(out["tidemarkThing"].as_str(), thing);
        assert_eq!(m["partitionKey"].as_str(), thing);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(out["tidemarkPayload"].as_str().unwrap())
            .unwrap();
        let published: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(published, m["published"], "{}", m["shape"]);
    }
}

#[tokio::test]
async fn rule_outputs_are_the_things_readings_and_readings_of_other_devices_are_quarantined() {
    let fixture = fixture();
    let messages = fixture["messages"].as_array().unwrap();
    let records: Vec<(String, String)> = messages
        .iter()
        .map(|m| {
            (
                m["partitionKey"].as_str().unwrap().to_owned(),
                m["ruleOutput"].to_string(),
            )
        })
        .collect();
    for (mode, label) in [
        (DeviceIdentity::PartitionKey, "ingest-iot-pk"),
        (DeviceIdentity::IotThing, "ingest-iot-thing"),
    ] {
        let t = TestTable::new(label).await;
        let mut c = config(&t.name);
        c.device_identity = mode;
        let ingest = local_ingest(&t.client, c, t.client.clone());
        let (resp, stats) = ingest
            .process(&keyed_event_of(&records), soon())
            .await
            .unwrap();
        assert!(resp.batch_item_failures.is_empty());

        let items = scan(&t.client, &t.name).await;
        let stored: Stored = items
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
        assert_eq!(
            stored,
            wanted(messages),
            "{mode}: receivedAt is never a metric"
        );

        // Each record with a reading of another device is kept whole, its bytes as sent.
        let quarantined: Vec<QuarantineItem> = items
            .iter()
            .filter(|i| {
                matches!(
                    EntityKey::parse(&s(i, "pk"), &s(i, "sk")),
                    Ok(EntityKey::Quarantine { .. })
                )
            })
            .map(|i| from_item(i.clone()).unwrap())
            .collect();
        let want: Vec<usize> = (0..messages.len())
            .filter(|i| !messages[*i]["quarantined"].is_null())
            .collect();
        assert_eq!(quarantined.len(), want.len(), "{mode}");
        for i in &want {
            let q = quarantined
                .iter()
                .find(|q| q.sequence_number == seq(*i))
                .unwrap_or_else(|| panic!("{mode}: message {i} quarantined"));
            assert_eq!(
                q.reason,
                QuarantineReason::IdentityMismatch,
                "{}",
                q.message
            );
            assert_eq!(q.partition_key, records[*i].0);
            assert_eq!(q.payload, records[*i].1.as_bytes(), "the record's bytes");
        }
        assert_eq!(
            stats.quarantined_by_reason[&QuarantineReason::IdentityMismatch],
            want.len() as u64
        );
    }
}
