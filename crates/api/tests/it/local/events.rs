//! API Gateway HTTP API (payload v2) events, deserialised by lambda_http exactly as on
//! Lambda, through `App::handle`: the `events/apigw-*.json` samples (also usable with
//! `cargo lambda invoke --data-file` and `sam local invoke -e`) and aws_lambda_events' own
//! fixture.

use crate::common::*;
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
    let text = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/example-apigw-v2-request-no-authorizer.json"
    ));
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

    // Raising a device's partition count takes effect once every ingest container can know it:
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

/// The sample event `name` with the JWT's scopes replaced by `scopes`.
fn with_scopes(name: &str, scopes: &[&str]) -> lambda_http::Request {
    let path = format!("{}/../../events/{name}", env!("CARGO_MANIFEST_DIR"));
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v["requestContext"]["authorizer"]["jwt"]["scopes"] = json!(scopes);
    lambda_http::request::from_str(&v.to_string()).unwrap()
}

#[tokio::test]
async fn the_scopes_are_held_by_the_names_the_deployment_gives_them() {
    let t = sample_table("api-ev-scope-names").await;
    let mut config = tidemark_api::ApiConfig::new(t.name.clone());
    config.scopes = tidemark_api::ScopeNames {
        read: "https://api.example/read".into(),
        write: "fleet.write".into(),
        admin: "fleet.admin".into(),
    };
    let app = tidemark_api::App::new(t.client.clone(), config);
    // The default names mean nothing to this deployment.
    let (status, body) = invoke(
        &app,
        with_scopes("apigw-get-device.json", &["tidemark/read"]),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("https://api.example/read"),
        "{body}"
    );
    let (status, _) = invoke(
        &app,
        with_scopes("apigw-get-device.json", &["https://api.example/read"]),
    )
    .await;
    assert_eq!(status, 200);
    let (status, body) = invoke(
        &app,
        with_scopes("apigw-put-device.json", &["https://api.example/read"]),
    )
    .await;
    assert_eq!(status, 403);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("fleet.write")
    );
    let (status, _) = invoke(&app, with_scopes("apigw-put-device.json", &["fleet.write"])).await;
    assert!(status == 200 || status == 201, "{status}");
}

#[tokio::test]
async fn each_route_needs_its_scope_read_write_or_admin() {
    let t = sample_table("api-ev-scopes").await;
    let app = app(&t);
    // A read-only token reads but cannot write.
    let (status, _) = invoke(
        &app,
        with_scopes("apigw-get-device.json", &["tidemark/read"]),
    )
    .await;
    assert_eq!(status, 200);
    let (status, body) = invoke(
        &app,
        with_scopes("apigw-put-device.json", &["tidemark/read"]),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "forbidden");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tidemark/write")
    );
    let (status, _) = invoke(
        &app,
        with_scopes("apigw-put-device.json", &["tidemark/write"]),
    )
    .await;
    assert!(status == 200 || status == 201, "{status}");
    // A write token does not read (scopes are not a ladder).
    let (status, _) = invoke(
        &app,
        with_scopes("apigw-get-device.json", &["tidemark/write"]),
    )
    .await;
    assert_eq!(status, 403);
    // The quarantine holds raw payloads: admin only.
    let mut q: Value = serde_json::from_str(
        &std::fs::read_to_string(format!(
            "{}/../../events/apigw-get-device.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap(),
    )
    .unwrap();
    q["rawPath"] = json!("/quarantine");
    q["requestContext"]["http"]["path"] = json!("/quarantine");
    for (scopes, want) in [
        (vec!["tidemark/read", "tidemark/write"], 403),
        (vec!["tidemark/admin"], 200),
    ] {
        q["requestContext"]["authorizer"]["jwt"]["scopes"] = json!(scopes);
        let req = lambda_http::request::from_str(&q.to_string()).unwrap();
        let (status, body) = invoke(&app, req).await;
        assert_eq!(status, want, "{scopes:?}: {body}");
    }
}

#[tokio::test]
async fn snoozing_and_unsnoozing_need_the_write_scope_like_acknowledging() {
    let t = sample_table("api-ev-snooze").await;
    let app = app(&t);
    let path = format!(
        "{}/../../events/apigw-ack-alert.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let ack: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let snooze_path = ack["rawPath"].as_str().unwrap().replace("/ack", "/snooze");
    let request = |method: &str, scopes: &[&str]| {
        let mut v = ack.clone();
        v["rawPath"] = json!(snooze_path);
        v["requestContext"]["http"]["path"] = json!(snooze_path);
        v["requestContext"]["http"]["method"] = json!(method);
        v["requestContext"]["authorizer"]["jwt"]["scopes"] = json!(scopes);
        if method == "POST" {
            v["body"] = json!(r#"{"until":"2026-04-20T16:00:00Z"}"#);
        }
        lambda_http::request::from_str(&v.to_string()).unwrap()
    };
    for method in ["POST", "DELETE"] {
        let (status, body) = invoke(&app, request(method, &["tidemark/read"])).await;
        assert_eq!(status, 403, "{method} with a read token: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("tidemark/write")
        );
    }
    let (status, body) = invoke(&app, request("POST", &["tidemark/write"])).await;
    assert_eq!(
        (status, body["snoozedUntil"].as_str()),
        (200, Some("2026-04-20T16:00:00.000000Z")),
        "{body}"
    );
    let (status, body) = invoke(&app, request("DELETE", &["tidemark/write"])).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.get("snoozedUntil").is_none(), "{body}");
}
