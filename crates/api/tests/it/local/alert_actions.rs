//! Snoozing alerts and the threshold fields that shape them, through the handler: the same
//! behaviour over the in-memory store and against DynamoDB Local, and, against DynamoDB
//! Local only, what a conditional write guarantees when the pipeline resolves an alert
//! while someone snoozes it.

use std::collections::HashMap;

use crate::common::*;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use serde_json::{Value, json};
use tidemark_api::memory::MemoryStore;
use tidemark_api::{ApiConfig, App, Store};
use tidemark_schema::table::attr;
use tidemark_schema::{AlertState, EntityKey, field};
use tidemark_testkit::TestTable;

const SNOOZE: &str = "/devices/sensor_01/alerts/20260420T143000000000Z-temperature-max/snooze";

fn memory_app() -> App<MemoryStore> {
    let store = MemoryStore::new();
    store.put_entity(&sample_device()).unwrap();
    store.put_entity(&sample_alert()).unwrap();
    store.put_entity(&resolved_alert()).unwrap();
    App::with_store(store, ApiConfig::new("memory").with_now(now()))
}

async fn dynamo_app(label: &str) -> (TestTable, App) {
    let t = sample_table(label).await;
    put(&t, &resolved_alert()).await;
    let app = app(&t);
    (t, app)
}

/// A resolved humidity alert of the sample device, opened before the sample one.
fn resolved_alert() -> tidemark_schema::AlertItem {
    let mut a = sample_alert();
    a.alert_id = tidemark_schema::AlertId::for_breach(
        ts("2026-04-20T10:00:00Z"),
        &metric("humidity"),
        tidemark_schema::AlertRule::Min,
    );
    a.sk = tidemark_schema::keys::alert_sk(&a.alert_id);
    a.metric = Some(metric("humidity"));
    a.state = AlertState::Resolved;
    a.gsi1pk = None;
    a.gsi1sk = None;
    a.resolved_at = Some(ts("2026-04-20T11:00:00Z"));
    a
}

fn error_param(body: &Value) -> String {
    let m = body["error"]["message"].as_str().unwrap_or_default();
    m.strip_prefix("invalid ")
        .and_then(|r| r.split(':').next())
        .unwrap_or_default()
        .to_owned()
}

/// The whole snooze lifecycle of the sample alert, as a caller sees it.
async fn snooze_then_unsnooze<S: Store>(app: &App<S>) {
    // GIVEN the sample's open alert, WHEN it is snoozed (until given with an offset)
    let (status, body) = call(
        app,
        "POST",
        SNOOZE,
        r#"{"until":"2026-04-20T18:00:00+02:00"}"#,
    )
    .await;
    // THEN it is the same alert with `snoozedUntil`, normalised to UTC, and still open
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["snoozedUntil"], "2026-04-20T16:00:00.000000Z");
    assert_eq!(body["state"], "open");
    assert_eq!(body["breachCount"], 2);
    // AND the device's alerts and the fleet-wide list both show it
    let (_, device) = get(app, "/devices/sensor_01/alerts").await;
    assert_eq!(
        device["items"][0]["snoozedUntil"],
        "2026-04-20T16:00:00.000000Z"
    );
    let (_, fleet) = get(app, "/alerts?severity=critical").await;
    assert_eq!(
        fleet["items"][0]["snoozedUntil"], "2026-04-20T16:00:00.000000Z",
        "{fleet}"
    );
    // WHEN snoozed again THEN the later call's time replaces the first (shorter is fine)
    let (status, body) = call(app, "POST", SNOOZE, r#"{"until":"2026-04-20T15:30:00Z"}"#).await;
    assert_eq!(
        (status, body["snoozedUntil"].as_str()),
        (200, Some("2026-04-20T15:30:00.000000Z"))
    );
    // AND acknowledging keeps the snooze (each action writes only its own attributes)
    let ack = SNOOZE.replace("/snooze", "/ack");
    let (status, body) = call(app, "POST", &ack, "").await;
    assert_eq!(status, 200);
    assert_eq!(body["state"], "acknowledged");
    assert_eq!(body["snoozedUntil"], "2026-04-20T15:30:00.000000Z");
    // WHEN unsnoozed THEN 200 with the alert, no `snoozedUntil`, all else as it was
    let (status, body) = call(app, "DELETE", SNOOZE, "").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.get("snoozedUntil").is_none(), "{body}");
    assert_eq!(body["state"], "acknowledged");
    // AND unsnoozing again is the same 200 and the same alert
    assert_eq!(call(app, "DELETE", SNOOZE, "").await, (200, body.clone()));
    let (_, device) = get(app, "/devices/sensor_01/alerts").await;
    assert_eq!(device["items"][0], body);
}

/// Every refusal: 409 resolved, 404 unknown, 400 naming `until` (before any store call).
async fn snooze_refusals<S: Store>(app: &App<S>) {
    let resolved = format!(
        "/devices/sensor_01/alerts/{}/snooze",
        resolved_alert().alert_id.as_str()
    );
    let later = r#"{"until":"2026-04-20T16:00:00Z"}"#;
    let (status, body) = call(app, "POST", &resolved, later).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("conflict"))
    );
    // Unsnoozing a resolved alert that has no snooze answers it, unchanged.
    let (status, body) = call(app, "DELETE", &resolved, "").await;
    assert_eq!((status, body["state"].as_str()), (200, Some("resolved")));
    assert!(body.get("snoozedUntil").is_none());
    for path in [
        "/devices/sensor_01/alerts/20200101T000000000000Z-temperature-max/snooze",
        "/devices/nobody/alerts/20260420T143000000000Z-temperature-max/snooze",
    ] {
        assert_eq!(call(app, "POST", path, later).await.0, 404, "POST {path}");
        assert_eq!(call(app, "DELETE", path, "").await.0, 404, "DELETE {path}");
    }
    for (body, param) in [
        (r#"{"until":"2026-04-20T14:59:59Z"}"#, "until"),
        (r#"{"until":"2026-04-20T15:00:00Z"}"#, "until"),
        (r#"{"until":"2026-05-21T15:00:00Z"}"#, "until"),
        (r#"{"until":"soon"}"#, "until"),
        (r#"{}"#, "until"),
        ("", "until"),
        (r#"{"until":"2026-04-20T16:00:00Z","for":"1h"}"#, "body"),
    ] {
        let (status, b) = call(app, "POST", SNOOZE, body).await;
        assert_eq!(
            (status, error_param(&b)),
            (400, param.to_owned()),
            "{body}: {b}"
        );
    }
    let (status, b) = call(app, "POST", "/devices/sensor_01/alerts/nope/snooze", later).await;
    assert_eq!((status, error_param(&b)), (400, "alertId".to_owned()));
    // None of it touched the sample alert.
    let (_, device) = get(app, "/devices/sensor_01/alerts").await;
    assert!(device["items"][0].get("snoozedUntil").is_none());
}

#[tokio::test]
async fn snoozing_sets_snoozed_until_everywhere_and_unsnoozing_clears_it_over_memory() {
    snooze_then_unsnooze(&memory_app()).await;
}

#[tokio::test]
async fn snoozing_sets_snoozed_until_everywhere_and_unsnoozing_clears_it_in_dynamodb() {
    let (_t, app) = dynamo_app("api-snooze").await;
    snooze_then_unsnooze(&app).await;
}

#[tokio::test]
async fn snooze_refuses_resolved_unknown_and_badly_timed_requests_over_memory() {
    snooze_refusals(&memory_app()).await;
}

#[tokio::test]
async fn snooze_refuses_resolved_unknown_and_badly_timed_requests_in_dynamodb() {
    let (_t, app) = dynamo_app("api-snooze-no").await;
    snooze_refusals(&app).await;
}

/// What the aggregator does when a reading is back inside the limits: one UpdateItem that
/// resolves the alert and takes it out of GSI1.
async fn resolve_like_the_pipeline(t: &TestTable) {
    let key = EntityKey::Alert {
        device: dev("sensor_01"),
        alert: sample_alert_id(),
    }
    .key();
    t.client
        .update_item()
        .table_name(&t.name)
        .key(attr::PK, AttributeValue::S(key.pk))
        .key(attr::SK, AttributeValue::S(key.sk))
        .update_expression("SET #st = :r, #ra = :at REMOVE #g1, #g2")
        .expression_attribute_names("#st", field::STATE)
        .expression_attribute_names("#ra", field::RESOLVED_AT)
        .expression_attribute_names("#g1", attr::GSI1PK)
        .expression_attribute_names("#g2", attr::GSI1SK)
        .expression_attribute_values(":r", AttributeValue::S("resolved".into()))
        .expression_attribute_values(":at", AttributeValue::S(now().to_string()))
        .return_values(ReturnValue::None)
        .send()
        .await
        .unwrap();
}

async fn stored_alert(t: &TestTable) -> HashMap<String, AttributeValue> {
    let key = EntityKey::Alert {
        device: dev("sensor_01"),
        alert: sample_alert_id(),
    }
    .key();
    t.client
        .get_item()
        .table_name(&t.name)
        .key(attr::PK, AttributeValue::S(key.pk))
        .key(attr::SK, AttributeValue::S(key.sk))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snooze_racing_the_pipelines_resolve_never_undoes_it_and_lands_only_if_it_answered_200() {
    for round in 0..12 {
        // GIVEN an open alert
        let t = sample_table(&format!("api-snooze-race-{round}")).await;
        let app = app(&t);
        // WHEN a snooze and the pipeline's resolve run at the same time
        let ((status, body), ()) = tokio::join!(
            call(&app, "POST", SNOOZE, r#"{"until":"2026-04-20T16:00:00Z"}"#),
            resolve_like_the_pipeline(&t),
        );
        // THEN the alert is resolved and out of the index whatever the order
        let item = stored_alert(&t).await;
        assert_eq!(
            item[field::STATE].as_s().unwrap(),
            "resolved",
            "round {round}"
        );
        assert!(!item.contains_key(attr::GSI1PK), "round {round}");
        // AND the snooze is on it exactly when the caller was told so: a 200 landed before
        // the resolve, a 409 wrote nothing
        let snoozed = item.contains_key(field::SNOOZED_UNTIL);
        match status {
            200 => assert!(snoozed, "round {round}: 200 but no snooze stored"),
            409 => assert!(!snoozed, "round {round}: 409 but a snooze was stored"),
            other => panic!("round {round}: {other} {body}"),
        }
        // AND after the resolve a snooze is a 409 that writes nothing
        let (status, _) = call(&app, "POST", SNOOZE, r#"{"until":"2026-04-20T17:00:00Z"}"#).await;
        assert_eq!(status, 409);
        assert_eq!(
            stored_alert(&t).await.get(field::SNOOZED_UNTIL),
            item.get(field::SNOOZED_UNTIL)
        );
    }
}

#[tokio::test]
async fn deadband_and_for_seconds_round_trip_and_bad_ones_are_400s_naming_the_field() {
    let t = TestTable::new("api-thresholds").await;
    let app = app(&t);
    let thresholds = json!({
        "temperature": {"min": -5, "max": 30, "severity": "critical", "deadband": 1.5,
                        "forSeconds": 120},
        "battery": {"min": 10, "severity": "warning"}
    });
    let (status, put_body) = call(
        &app,
        "PUT",
        "/devices/cold_01",
        &json!({"thresholds": thresholds}).to_string(),
    )
    .await;
    assert_eq!(status, 201, "{put_body}");
    assert_eq!(put_body["thresholds"], thresholds);
    let (status, got) = get(&app, "/devices/cold_01").await;
    assert_eq!(status, 200);
    assert_eq!(got["thresholds"], thresholds);
    for (threshold, param) in [
        (
            json!({"max": 30, "severity": "critical", "deadband": -0.5}),
            "thresholds.temperature.deadband",
        ),
        (
            json!({"min": 20, "max": 30, "severity": "critical", "deadband": 11}),
            "thresholds.temperature.deadband",
        ),
        (
            json!({"max": 30, "severity": "critical", "forSeconds": 90000}),
            "thresholds.temperature.forSeconds",
        ),
        (
            json!({"max": 30, "severity": "critical", "forSeconds": 2.5}),
            "thresholds.temperature.forSeconds",
        ),
    ] {
        let body = json!({"thresholds": {"temperature": threshold}}).to_string();
        let (status, b) = call(&app, "PUT", "/devices/cold_01", &body).await;
        assert_eq!((status, error_param(&b)), (400, param.to_owned()), "{body}");
    }
    // None of the refused bodies changed what is stored.
    assert_eq!(
        get(&app, "/devices/cold_01").await.1["thresholds"],
        thresholds
    );
}
