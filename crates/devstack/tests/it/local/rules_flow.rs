//! An alert rule over time through `make run`'s pipeline (kinesis-mock → ingest → DynamoDB
//! Local → its stream → the alerts role → the local EventBridge endpoint): a device
//! registered through the API with a window rule gets one alert when its 5-minute mean
//! crosses the limit, not at a spike, and its `opened` event says it is a window alert and
//! which rule raised it. The rule kinds one by one are in
//! `crates/aggregator/tests/it/local/rules_local.rs`.

use crate::common;

use aws_sdk_kinesis::primitives::Blob;
use serde_json::{Value, json};
use tidemark_devstack::pipeline::{AlertsConfig, Pipeline};
use tidemark_schema::Timestamp;
use tidemark_testkit::{TestStream, TestTable, eventually};

/// The issue's windowed rule, without `forSeconds` so the test is quick.
const RULE: &str = r#"{"metric":"temperature","aggregate":"avg","window":"5m","above":30}"#;

/// One reading of `device` at `at`, into the stream now.
async fn send(stream: &TestStream, device: &str, at: Timestamp, temperature: f64) {
    let data = json!({"deviceId": device, "timestamp": at.to_string(), "temperature": temperature})
        .to_string();
    stream
        .client
        .put_record()
        .stream_name(&stream.name)
        .partition_key(device)
        .data(Blob::new(data.into_bytes()))
        .send()
        .await
        .unwrap();
}

/// The `opened` events the local event bus has received for `device`, as their details.
async fn opened(p: &Pipeline, device: &str) -> Vec<Value> {
    let log = p.events.as_ref().expect("the alerts mapping runs");
    log.events()
        .await
        .into_iter()
        .map(|e| e["detail"].clone())
        .filter(|d| d["deviceId"] == device && d["change"] == "opened")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_rule_set_through_the_api_opens_one_alert_whose_opened_event_has_kind_window() {
    let table = TestTable::new("rules-flow").await;
    let stream = TestStream::new("rules-flow", 1).await;
    let p = Pipeline::start(tidemark_devstack::pipeline::PipelineConfig {
        alerts: Some(AlertsConfig::ephemeral(common::fast("alerts", 1000))),
        ..common::in_process(&table, &stream, 100)
    })
    .await
    .unwrap();
    // GIVEN a device registered through the API with "the 5-minute mean above 30" (and no
    // thresholds: the fleet has none either)
    let body = json!({"name": "Boiler", "rules": [serde_json::from_str::<Value>(RULE).unwrap()]});
    let (status, resp) = common::put(p.api_addr, "/devices/boiler", &body.to_string()).await;
    assert_eq!(status, 201, "{resp}");

    // WHEN it sends a reading a minute for the last 15 minutes: 26.25, a spike to 40 at
    // minute 4 (the mean peaks at 29.95), then 31 from minute 8 on
    let start =
        Timestamp::from_epoch_micros((Timestamp::now().epoch_seconds() - 900) * 1_000_000).unwrap();
    let minute = |m: i64| start.plus_millis(m * 60_000).unwrap();
    for m in 0..15 {
        let v = match m {
            4 => 40.0,
            0..8 => 26.25,
            _ => 31.0,
        };
        send(&stream, "boiler", minute(m), v).await;
    }

    // THEN the bus receives one opened event, a window alert opened at minute 11, where the
    // window (t - 5m, t] first averages above 30 (26.25 and four of 31: 30.05)
    let events = eventually(
        common::PATIENCE,
        "the window alert's opened event",
        || async {
            let got = opened(&p, "boiler").await;
            (!got.is_empty()).then_some(got)
        },
    )
    .await;
    assert_eq!(events.len(), 1, "{events:?}");
    let d = &events[0];
    assert_eq!(
        (&d["kind"], &d["rule"], &d["metric"]),
        (&json!("window"), &json!("window"), &json!("temperature"))
    );
    assert_eq!(d["openedAt"], minute(11).to_string().as_str());
    // AND names the rule that raised it, as declared (the severity defaulted)
    let spec =
        &tidemark_schema::rules::parse_rules(&json!(
            [serde_json::from_str::<Value>(RULE).unwrap()]
        ))
        .unwrap()[0];
    assert_eq!(d["ruleSpec"], serde_json::to_value(spec).unwrap());
    // AND the API lists that one alert, open
    let alerts = common::all_items(p.api_addr, "/devices/boiler/alerts").await;
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(
        (&alerts[0]["alertId"], &alerts[0]["state"]),
        (&d["alertId"], &json!("open"))
    );
}
