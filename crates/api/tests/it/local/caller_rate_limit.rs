//! Rate limits per caller against DynamoDB Local (docs/design.md §6 "Rate limits per
//! caller"): with `CALLER_RATE_LIMIT` set, a caller's requests past it in one UTC minute are
//! a 429 naming the limit with `Retry-After`, before anything is read; other callers are not
//! affected; the next minute starts afresh; off (0), nothing is counted.

use crate::common::*;
use aws_sdk_dynamodb::types::AttributeValue;
use http::Response;
use lambda_http::{Body, Request};
use serde_json::{Value, json};
use tidemark_api::budget::Usage;
use tidemark_api::{ApiConfig, App};
use tidemark_schema::keys::CALLER_PREFIX;
use tidemark_schema::{CallerRateItem, Timestamp};
use tidemark_testkit::TestTable;

/// `GET /devices/sensor_01` as API Gateway passes it on from the JWT authorizer, for the
/// token whose subject is `sub`.
fn from(sub: &str) -> Request {
    let path = format!(
        "{}/../../events/apigw-get-device.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v["requestContext"]["authorizer"]["jwt"]["claims"] =
        json!({"sub": sub, "iss": "https://issuer.example.com/", "scope": "tidemark/read"});
    lambda_http::request::from_str(&v.to_string()).unwrap()
}

async fn table(label: &str) -> TestTable {
    let t = TestTable::new(label).await;
    put(&t, &sample_device()).await;
    t
}

fn app_at(t: &TestTable, limit: u32, at: Timestamp) -> App {
    init_logs();
    let mut config = ApiConfig::new(&t.name).with_now(at);
    config.caller_rate_limit = limit;
    App::new(t.client.clone(), config)
}

async fn send(app: &App, req: Request) -> (Response<Body>, Value, Usage) {
    let (resp, usage) = app.handle_metered(req).await;
    let body: Value = serde_json::from_slice(resp.body().as_ref()).unwrap();
    (resp, body, usage)
}

async fn counts(t: &TestTable) -> Vec<tidemark_store::Item> {
    t.scan()
        .await
        .into_iter()
        .filter(|it| {
            it.get("pk")
                .and_then(|v| v.as_s().ok())
                .is_some_and(|pk| pk.starts_with(CALLER_PREFIX))
        })
        .collect()
}

#[tokio::test]
async fn a_callers_requests_past_the_limit_in_a_minute_are_refused_until_the_next_minute() {
    // GIVEN a limit of 3 requests a minute, and the clock at 11:59:57
    let t = table("api-rate-limit").await;
    let app = app_at(&t, 3, ts("2026-04-20T11:59:57Z"));
    // WHEN alice asks three times THEN each is answered, and each read the device
    for _ in 0..3 {
        let (resp, body, usage) = send(&app, from("alice")).await;
        assert_eq!(resp.status(), 200, "{body}");
        assert!(usage.items > 0);
    }
    // WHEN she asks a fourth time, at 11:59:59.2 THEN it is a 429 naming the limit, telling
    // her to come back in a second, and nothing was read for it
    app.config().clock.set(ts("2026-04-20T11:59:59.2Z"));
    let (resp, body, usage) = send(&app, from("alice")).await;
    assert_eq!(resp.status(), 429, "{body}");
    assert_eq!(body["error"]["code"], "rate_limited", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains('3') && message.contains("CALLER_RATE_LIMIT"),
        "{message}"
    );
    assert_eq!(resp.headers()["retry-after"], "1");
    assert_eq!(resp.headers()["content-type"], "application/json");
    assert_eq!(usage, Usage::default(), "a refused request reads nothing");
    // AND bob, another caller, is served in the same minute
    let (resp, body, _) = send(&app, from("bob")).await;
    assert_eq!(resp.status(), 200, "{body}");
    // WHEN the next minute begins (12:00:00) THEN alice is served again
    app.config().clock.set(ts("2026-04-20T12:00:00Z"));
    let (resp, body, _) = send(&app, from("alice")).await;
    assert_eq!(resp.status(), 200, "{body}");
    assert!(resp.headers().get("retry-after").is_none());

    // The counts: one item per caller and minute, under a hash of the caller, expiring
    // minutes after its minute; the refused request was not counted.
    let stored = counts(&t).await;
    assert_eq!(stored.len(), 3, "alice's two minutes and bob's one");
    let alice = CallerRateItem::new("jwt:alice", ts("2026-04-20T11:59:00Z"));
    let item = stored
        .iter()
        .find(|it| {
            it["pk"].as_s().ok() == Some(&alice.pk) && it["sk"].as_s().ok() == Some(&alice.sk)
        })
        .expect("alice's 11:59 count");
    assert_eq!(item["requests"].as_n().unwrap(), "3");
    assert_eq!(item["ttl"].as_n().unwrap(), &alice.ttl.to_string());
    for it in &stored {
        let text = format!("{it:?}");
        assert!(!text.contains("alice") && !text.contains("bob"), "{text}");
    }
}

#[tokio::test]
async fn without_a_limit_nothing_is_counted() {
    // GIVEN the default (0: off)
    let t = table("api-rate-off").await;
    let app = app_at(&t, 0, ts("2026-04-20T11:59:57Z"));
    assert_eq!(ApiConfig::new("t").caller_rate_limit, 0);
    // WHEN one caller asks more often than any limit in the tests
    for _ in 0..5 {
        let (resp, body, _) = send(&app, from("alice")).await;
        assert_eq!(resp.status(), 200, "{body}");
    }
    // THEN no count was written
    assert!(counts(&t).await.is_empty());
}

#[tokio::test]
async fn a_request_naming_no_caller_is_not_counted() {
    // GIVEN a limit of 1, on a local stack without auth (no authorizer in the request)
    let t = table("api-rate-anonymous").await;
    let app = app_at(&t, 1, ts("2026-04-20T11:59:57Z"));
    // WHEN it is asked twice THEN both are answered and nothing is counted
    for _ in 0..2 {
        let (resp, body, _) = send(&app, request("GET", "/devices/sensor_01", "")).await;
        assert_eq!(resp.status(), 200, "{body}");
    }
    assert!(counts(&t).await.is_empty());
}

#[tokio::test]
async fn a_count_that_cannot_be_written_lets_the_request_through() {
    // GIVEN a limit of 1, and alice's count of this minute an item DynamoDB cannot grow (a
    // foreign item at its key, 5 bytes under the 400 KB item limit): counting her fails
    let t = table("api-rate-fails-open").await;
    let at = ts("2026-04-20T11:59:57Z");
    let app = app_at(&t, 1, at);
    let count = CallerRateItem::new("jwt:alice", at);
    let used = 2 + count.pk.len() + 2 + count.sk.len() + 1;
    let blob = vec![0u8; 400 * 1024 - 5 - used];
    t.put_item(
        [
            ("pk", AttributeValue::S(count.pk.clone())),
            ("sk", AttributeValue::S(count.sk.clone())),
            ("b", AttributeValue::B(blob.into())),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect(),
    )
    .await;
    // WHEN she asks twice THEN both are answered: the limit fails open
    for _ in 0..2 {
        let (resp, body, _) = send(&app, from("alice")).await;
        assert_eq!(resp.status(), 200, "{body}");
    }
    // AND bob, whose count can be written, is still held to the limit
    let (resp, _, _) = send(&app, from("bob")).await;
    assert_eq!(resp.status(), 200);
    let (resp, body, _) = send(&app, from("bob")).await;
    assert_eq!(resp.status(), 429, "{body}");
}
