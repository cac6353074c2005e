//! API Gateway HTTP API (payload v2) events, deserialised by lambda_http exactly as on
//! Lambda, through `App::handle`: the `events/apigw-*.json` samples (also usable with
//! `cargo lambda invoke --data-file` and `sam local invoke -e`) and aws_lambda_events' own
//! fixture.

mod common;

use common::*;
use serde_json::{Value, json};

fn event(name: &str) -> lambda_http::Request {
    let path = format!("{}/../../events/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    lambda_http::request::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

async fn invoke(app: &tidemark_api::App, req: lambda_http::Request) -> (u16, Value) {
    let resp = app.handle(req).await;
    (
        resp.status().as_u16(),
        serde_json::from_slice(resp.body().as_ref()).unwrap(),
    )
}

#[tokio::test]
async fn the_aws_lambda_events_fixture_is_answered_with_a_json_404() {
    // GIVEN aws_lambda_events' sample request (GET /, $default stage, no authorizer)
    let text = include_str!("fixtures/example-apigw-v2-request-no-authorizer.json");
    let req = lambda_http::request::from_str(text).unwrap();
    let t = sample_table("api-ev-fixture").await;
    // THEN it is routed to nothing, cleanly
    let (status, body) = invoke(&app(&t), req).await;
    assert_eq!(status, 404);
    assert_eq!(
        body,
        json!({"error":{"code":"not_found","message":"no route for /"}})
    );
}

#[tokio::test]
async fn sample_events_are_served() {
    let t = sample_table("api-ev-samples").await;
    let app = app(&t);

    let (status, device) = invoke(&app, event("apigw-get-device.json")).await;
    assert_eq!(
        (status, device["name"].as_str()),
        (200, Some("Warehouse Temp A"))
    );

    // A named stage ("prod") in the raw path is ignored.
    let (status, readings) = invoke(&app, event("apigw-list-readings.json")).await;
    assert_eq!(status, 200, "{readings}");
    assert_eq!(readings["items"].as_array().unwrap().len(), 2);
    assert_eq!(readings["cursor"], Value::Null);

    let (status, latest) = invoke(&app, event("apigw-latest-reading.json")).await;
    assert_eq!(
        (status, latest["timestamp"].as_str()),
        (200, Some("2026-04-20T14:01:00.000000Z"))
    );

    let (status, alerts) = invoke(&app, event("apigw-fleet-alerts.json")).await;
    assert_eq!(
        (status, alerts["items"][0]["state"].as_str()),
        (200, Some("open"))
    );

    let (status, created) = invoke(&app, event("apigw-put-device.json")).await;
    assert_eq!(
        (status, created["deviceId"].as_str()),
        (201, Some("sensor_02"))
    );
    assert_eq!(created["location"]["site"], "Hall 3");

    // Raising a device's shard count takes effect once every ingest container can know it:
    // now + 30 s cache + 300 s future allowance + 5 s skew, on a whole second.
    let (status, shards) = invoke(&app, event("apigw-put-shards.json")).await;
    assert_eq!(status, 200, "{shards}");
    let effective = now().plus_millis(336_000).unwrap();
    assert_eq!(
        shards,
        json!({"deviceId":"sensor_01","count":1,
               "epochs":[{"from": effective.to_string(),"count":4}]})
    );

    let (status, acked) = invoke(&app, event("apigw-ack-alert.json")).await;
    assert_eq!(
        (status, acked["state"].as_str()),
        (200, Some("acknowledged"))
    );
}
