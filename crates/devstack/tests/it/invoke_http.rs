//! Functions behind the Lambda Invoke HTTP API (what `cargo lambda watch` serves), against a
//! stand-in server that answers the way the real API does.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use aws_lambda_events::event::dynamodb::Event;
use aws_lambda_events::event::kinesis::KinesisEvent;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tidemark_devstack::esm::{HttpFunction, KinesisHandler, StreamHandler};

/// Serves one canned answer per request; records (path, body) of each request.
async fn fake_invoke_api(
    answer: impl Fn(&Value) -> (u16, Option<&'static str>, String) + Send + Sync + 'static,
) -> (String, Arc<Mutex<Vec<(String, Value)>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<(String, Value)>>> = Arc::default();
    let answer = Arc::new(answer);
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let (answer, log) = (answer.clone(), log.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                    let (answer, log) = (answer.clone(), log.clone());
                    async move {
                        let path = req.uri().path().to_owned();
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let event: Value = serde_json::from_slice(&body).unwrap();
                        let (status, function_error, out) = answer(&event);
                        log.lock().unwrap().push((path, event));
                        let mut resp = http::Response::new(Full::new(Bytes::from(out)));
                        *resp.status_mut() = http::StatusCode::from_u16(status).unwrap();
                        if let Some(fe) = function_error {
                            resp.headers_mut()
                                .insert("X-Amz-Function-Error", fe.parse().unwrap());
                        }
                        Ok::<_, Infallible>(resp)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (format!("http://{addr}"), seen)
}

fn kinesis_event() -> KinesisEvent {
    serde_json::from_value(json!({"Records": [{
        "kinesis": {"partitionKey": "sensor_01", "sequenceNumber": "49590338271490256608559692538361571095921575989136588898",
                    "data": "eyJ4IjoxfQ==", "approximateArrivalTimestamp": 1545084650.987, "kinesisSchemaVersion": "1.0"},
        "eventSource": "aws:kinesis", "eventID": "shardId-000000000006:1", "eventName": "aws:kinesis:record",
        "eventVersion": "1.0", "awsRegion": "us-east-1", "eventSourceARN": "arn:aws:kinesis:us-east-1:000000000000:stream/s"
    }]}))
    .unwrap()
}

#[tokio::test]
async fn a_kinesis_batch_is_posted_to_the_function_and_its_failures_come_back() {
    let (url, seen) = fake_invoke_api(|_| {
        (
            200,
            None,
            json!({"batchItemFailures": [{"itemIdentifier": "4959"}]}).to_string(),
        )
    })
    .await;
    let f = HttpFunction::new(&url, "tidemark-ingest").unwrap();
    let resp = KinesisHandler::handle(&f, kinesis_event()).await.unwrap();
    assert_eq!(
        resp.batch_item_failures[0].item_identifier.as_deref(),
        Some("4959")
    );
    let seen = seen.lock().unwrap();
    assert_eq!(
        seen[0].0,
        "/2015-03-31/functions/tidemark-ingest/invocations"
    );
    // The function receives the event exactly as Lambda serialises it.
    assert_eq!(seen[0].1["Records"][0]["kinesis"]["data"], "eyJ4IjoxfQ==");
    assert_eq!(
        seen[0].1["Records"][0]["kinesis"]["partitionKey"],
        "sensor_01"
    );
}

#[tokio::test]
async fn a_function_error_header_is_a_function_error() {
    let (url, _) = fake_invoke_api(|_| {
        (
            200,
            Some("Unhandled"),
            json!({"errorType": "&str", "errorMessage": "boom"}).to_string(),
        )
    })
    .await;
    let f = HttpFunction::new(&url, "tidemark-aggregator").unwrap();
    let err = StreamHandler::handle(&f, Event::default())
        .await
        .unwrap_err();
    assert!(err.0.contains("boom"), "{err}");
}

#[tokio::test]
async fn an_http_error_is_a_function_error_and_a_null_answer_is_success() {
    let (url, _) = fake_invoke_api(|e| {
        if e["Records"].as_array().unwrap().is_empty() {
            (200, None, "null".to_owned())
        } else {
            (502, None, "bad gateway".to_owned())
        }
    })
    .await;
    let f = HttpFunction::new(&url, "x").unwrap();
    let ok = StreamHandler::handle(&f, Event::default()).await.unwrap();
    assert!(ok.batch_item_failures.is_empty());
    assert!(KinesisHandler::handle(&f, kinesis_event()).await.is_err());
}

#[test]
fn only_plain_http_invoke_urls_are_accepted() {
    assert!(HttpFunction::new("https://example.invalid", "x").is_err());
    assert!(HttpFunction::new("not a url", "x").is_err());
    assert!(HttpFunction::new("http://127.0.0.1:9000", "x").is_ok());
}
