//! What the tests share: HTTP calls to the local API as a client makes them, the fast
//! in-process pipeline, what a wait saw last, and the one browser at a time.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::Value;

pub async fn get(addr: SocketAddr, path_and_query: &str) -> (u16, Value) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = http::Request::get(path_and_query)
        .header(http::header::HOST, addr.to_string())
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let json = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("{path_and_query}: not JSON ({e}): {body:?}"));
    (status, json)
}

pub async fn post(addr: SocketAddr, path: &str, body: &str) -> (u16, Value) {
    with_body(http::Method::POST, addr, path, body).await
}

pub async fn put(addr: SocketAddr, path: &str, body: &str) -> (u16, Value) {
    with_body(http::Method::PUT, addr, path, body).await
}

async fn with_body(method: http::Method, addr: SocketAddr, path: &str, body: &str) -> (u16, Value) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, addr.to_string())
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(http_body_util::Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Every item of a paginated list.
pub async fn all_items(addr: SocketAddr, path: &str) -> Vec<Value> {
    match try_all_items(addr, path).await {
        Ok(items) => items,
        Err(e) => panic!("{e}"),
    }
}

/// Every item of a paginated list, or the first non-200 answer (while the pipeline catches
/// up, a device the aggregator has not registered yet is a 404).
pub async fn try_all_items(addr: SocketAddr, path: &str) -> Result<Vec<Value>, String> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let sep = if path.contains('?') { '&' } else { '?' };
        let url = match &cursor {
            Some(c) => format!("{path}{sep}cursor={}", encode(c)),
            None => path.to_owned(),
        };
        let (status, body) = get(addr, &url).await;
        if status != 200 {
            return Err(format!("{url}: {status} {body}"));
        }
        items.extend(body["items"].as_array().unwrap().iter().cloned());
        match body["cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return Ok(items),
        }
    }
}

/// How long a test waits for the pipeline to catch up before it fails (what the former
/// `eventually` of this module allowed: 120 polls a quarter of a second apart).
pub const PATIENCE: Duration = Duration::from_secs(30);

/// What a wait saw last: printed if the test panics (a deadline of
/// [`tidemark_testkit::eventually`] passed), so a timeout also says what was there instead.
#[derive(Default)]
pub struct LastSeen(std::sync::Mutex<String>);

impl LastSeen {
    pub fn set(&self, seen: impl Into<String>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = seen.into();
    }
}

impl Drop for LastSeen {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "last seen: {}",
                self.0.lock().unwrap_or_else(|e| e.into_inner())
            );
        }
    }
}

/// The local stack of a test's own table and stream, on the shared emulators.
pub fn local_config(
    table: &tidemark_testkit::TestTable,
    stream: &tidemark_testkit::TestStream,
    stream_shards: i32,
) -> tidemark_devstack::LocalConfig {
    let s = tidemark_testkit::services();
    tidemark_devstack::LocalConfig {
        table: table.name.clone(),
        stream: stream.name.clone(),
        stream_shards,
        dynamodb_endpoint: s.dynamodb_endpoint.clone(),
        kinesis_endpoint: s.kinesis_endpoint.clone(),
    }
}

/// A mapping that delivers at once: batches of `batch`, a 200 ms window, polled every 100 ms.
pub fn fast(name: &str, batch: usize) -> tidemark_devstack::esm::MappingConfig {
    tidemark_devstack::esm::MappingConfig {
        batch_size: batch,
        batching_window: Duration::from_millis(200),
        poll_interval: Duration::from_millis(100),
        shard_refresh: Duration::from_secs(1),
        ..tidemark_devstack::esm::MappingConfig::new(name)
    }
}

/// The pipeline in process on the test's table and one-shard stream: fast mappings of
/// `batch`, no alerts role, no schedules, no sign-in; a test changes what it needs.
pub fn in_process(
    table: &tidemark_testkit::TestTable,
    stream: &tidemark_testkit::TestStream,
    batch: usize,
) -> tidemark_devstack::pipeline::PipelineConfig {
    tidemark_devstack::pipeline::PipelineConfig {
        sign_in: None,
        offline_after_default: 0,
        watchdog: None,
        export: None,
        local: local_config(table, stream, 1),
        api_port: 0,
        functions: tidemark_devstack::pipeline::Functions::InProcess,
        ingest: fast("ingest", batch),
        rollups: fast("rollups", batch),
        default_layout: None,
        device_identity: tidemark_schema::DeviceIdentity::Payload,
        default_thresholds: "{}".into(),
        alerts: None,
    }
}

/// One browser at a time in this process: the dashboard tests of several modules run side
/// by side, and the machine's two cores are shared with their pipelines.
pub fn browser(
    width: u32,
    height: u32,
) -> (
    std::sync::MutexGuard<'static, ()>,
    tidemark_testkit::browser::Browser,
) {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = ONE.lock().unwrap_or_else(|e| e.into_inner());
    (
        guard,
        tidemark_testkit::browser::Browser::start(width, height),
    )
}
