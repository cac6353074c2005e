//! A local stand-in for Amazon EventBridge's `PutEvents`, so the alerts function publishes
//! with the real SDK client, only pointed here (`TIDEMARK_EVENTBRIDGE_ENDPOINT`).
//!
//! It speaks what the SDK sends: `POST /` with `X-Amz-Target: AWSEvents.PutEvents` and an AWS
//! JSON 1.1 body, and answers `{"FailedEntryCount":…,"Entries":[{"EventId":…}…]}`. Each
//! accepted event is wrapped as EventBridge delivers it to a rule target (`version`, `id`,
//! `source`, `detail-type`, `time`, `detail` parsed, …), logged, appended as one JSON line to
//! a file (`.local/events.jsonl` under `make run`), and listed by `GET /events`.
//! An entry without `Source`, `DetailType` or a JSON object `Detail` fails with EventBridge's
//! error codes, as the service would reject it.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tidemark_streams::{LOCAL_ACCOUNT, LOCAL_REGION};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::{Mutex, watch};

use crate::esm::stop_requested;

/// EventBridge's limit on a `PutEvents` request.
const MAX_REQUEST_BYTES: usize = 256 * 1024;
const TARGET: &str = "AWSEvents.PutEvents";

/// The events received, in order, and where they are appended.
#[derive(Debug, Default)]
pub struct EventLog {
    events: Mutex<Vec<Value>>,
    /// When each event arrived (same order), for `make run`'s alert latency.
    arrivals: Mutex<Vec<std::time::Instant>>,
    file: Option<PathBuf>,
    ids: AtomicU64,
}

impl EventLog {
    /// `file`: a JSON-lines file the events are appended to (its folder is created).
    pub fn new(file: Option<PathBuf>) -> Self {
        EventLog {
            file,
            ..Default::default()
        }
    }

    /// Every event received so far, as delivered to a rule target.
    pub async fn events(&self) -> Vec<Value> {
        self.events.lock().await.clone()
    }

    /// The events from the `from`-th on, each with the instant it arrived.
    pub async fn since(&self, from: usize) -> Vec<(std::time::Instant, Value)> {
        let events = self.events.lock().await;
        let arrivals = self.arrivals.lock().await;
        arrivals
            .iter()
            .zip(events.iter())
            .skip(from)
            .map(|(t, e)| (*t, e.clone()))
            .collect()
    }

    async fn record(&self, event: Value) {
        let d = &event["detail"];
        tracing::info!(
            target: "tidemark_devstack::events",
            "{} {}: {} {} {} ({})",
            event["detail-type"].as_str().unwrap_or_default(),
            d["change"].as_str().unwrap_or("-"),
            // A group rule's alert names its group where a device's names its device.
            d["deviceId"].as_str().or(d["group"].as_str()).unwrap_or("-"),
            d["metric"].as_str().or(d["kind"].as_str()).unwrap_or("-"),
            d["severity"].as_str().unwrap_or("-"),
            d["path"].as_str().unwrap_or("-"),
        );
        if let Some(path) = &self.file {
            let line = format!("{event}\n");
            let written = async {
                if let Some(dir) = path.parent() {
                    tokio::fs::create_dir_all(dir).await?;
                }
                let mut f = tokio::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .await?;
                f.write_all(line.as_bytes()).await
            };
            if let Err(e) = written.await {
                tracing::warn!(file = %path.display(), error = %e, "event not appended");
            }
        }
        let mut events = self.events.lock().await;
        self.arrivals.lock().await.push(std::time::Instant::now());
        events.push(event);
    }

    /// Answers one `PutEvents` body: per entry an `EventId` or an error.
    pub async fn put_events(&self, body: &[u8]) -> Result<Value, String> {
        let req: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
        let entries = req["Entries"]
            .as_array()
            .filter(|e| (1..=10).contains(&e.len()))
            .ok_or("Entries must hold 1 to 10 entries")?;
        let mut results = Vec::with_capacity(entries.len());
        let mut failed = 0;
        for e in entries {
            match self.envelope(e) {
                Ok(event) => {
                    results.push(json!({"EventId": event["id"]}));
                    self.record(event).await;
                }
                Err((code, message)) => {
                    failed += 1;
                    results.push(json!({"ErrorCode": code, "ErrorMessage": message}));
                }
            }
        }
        Ok(json!({"FailedEntryCount": failed, "Entries": results}))
    }

    fn envelope(&self, e: &Value) -> Result<Value, (&'static str, String)> {
        let text = |k: &str| e[k].as_str().filter(|s| !s.is_empty());
        let source = text("Source").ok_or(("InvalidArgument", "Source is required".into()))?;
        let detail_type =
            text("DetailType").ok_or(("InvalidArgument", "DetailType is required".into()))?;
        let detail: Value = text("Detail")
            .and_then(|d| serde_json::from_str(d).ok())
            .filter(Value::is_object)
            .ok_or(("MalformedDetail", "Detail is not a JSON object".into()))?;
        let n = self.ids.fetch_add(1, Ordering::Relaxed);
        let time = match &e["Time"] {
            // The SDK sends epoch seconds.
            Value::Number(s) => s.as_f64().and_then(|s| {
                tidemark_schema::Timestamp::from_epoch_millis((s * 1000.0) as i64).ok()
            }),
            _ => None,
        }
        .unwrap_or_else(tidemark_schema::Timestamp::now);
        let bus = text("EventBusName").unwrap_or("default");
        Ok(json!({
            "version": "0",
            "id": format!("local-{}-{n:08}", std::process::id()),
            "detail-type": detail_type,
            "source": source,
            "account": LOCAL_ACCOUNT,
            "time": time.to_string(),
            "region": LOCAL_REGION,
            "resources": e["Resources"].as_array().cloned().unwrap_or_default(),
            "event-bus-name": bus,
            "detail": detail,
        }))
    }
}

/// Serves `PutEvents` and `GET /events` until `shutdown`.
pub async fn serve(listener: TcpListener, log: Arc<EventLog>, mut shutdown: watch::Receiver<bool>) {
    let mut conns = tokio::task::JoinSet::new();
    while !stop_requested(&shutdown) {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => continue,
        };
        let log = log.clone();
        conns.spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let log = log.clone();
                async move { Ok::<_, Infallible>(answer(&log, req).await) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(error = %e, "connection closed");
            }
        });
        while conns.try_join_next().is_some() {}
    }
    conns.abort_all();
}

async fn answer(log: &EventLog, req: http::Request<Incoming>) -> http::Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    if parts.method == http::Method::GET && parts.uri.path() == "/events" {
        return reply(
            200,
            "application/json",
            json!({"items": log.events().await}),
        );
    }
    let target = parts
        .headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok());
    if parts.method != http::Method::POST || target != Some(TARGET) {
        return error(
            404,
            "UnknownOperationException",
            "only POST with X-Amz-Target: AWSEvents.PutEvents, and GET /events",
        );
    }
    let bytes = match Limited::new(body, MAX_REQUEST_BYTES).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return error(413, "ValidationException", "request larger than 256 KB"),
    };
    match log.put_events(&bytes).await {
        Ok(v) => reply(200, "application/x-amz-json-1.1", v),
        Err(e) => error(400, "ValidationException", &e),
    }
}

fn error(status: u16, code: &str, message: &str) -> http::Response<Full<Bytes>> {
    reply(
        status,
        "application/x-amz-json-1.1",
        json!({"__type": code, "message": message}),
    )
}

fn reply(status: u16, content_type: &'static str, body: Value) -> http::Response<Full<Bytes>> {
    let mut r = http::Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::BAD_REQUEST);
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    r
}

/// Binds the endpoint on loopback (0 picks a free port).
pub async fn bind(port: u16) -> std::io::Result<(TcpListener, SocketAddr)> {
    crate::http_api::bind(port).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn put_events_accepts_good_entries_and_names_the_bad_ones() {
        let log = EventLog::new(None);
        let body = json!({"Entries": [
            {"Source": "tidemark", "DetailType": "Alert State Change",
             "Detail": "{\"change\":\"opened\"}", "EventBusName": "bus", "Time": 1776700000.5},
            {"Source": "tidemark", "DetailType": "Alert State Change", "Detail": "not json"},
        ]});
        let out = log.put_events(body.to_string().as_bytes()).await.unwrap();
        assert_eq!(out["FailedEntryCount"], 1);
        assert!(out["Entries"][0]["EventId"].is_string());
        assert_eq!(out["Entries"][1]["ErrorCode"], "MalformedDetail");
        let events = log.events().await;
        assert_eq!(events.len(), 1);
        assert_eq!(events[0]["detail"]["change"], "opened");
        assert_eq!(events[0]["event-bus-name"], "bus");
        assert_eq!(events[0]["time"], "2026-04-20T15:46:40.500000Z");
        assert!(log.put_events(b"{}").await.is_err(), "no entries");
    }
}
