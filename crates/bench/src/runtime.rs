//! Start-up time and peak memory of a function binary under a tiny fake Lambda Runtime API:
//! the binary is spawned with the environment Lambda gives it; "ready" is its first
//! `GET /2018-06-01/runtime/invocation/next`; it gets one sample event, and after its response
//! the peak resident set (`VmHWM` in `/proc/<pid>/status`) is read before it is stopped.

use std::convert::Infallible;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tidemark_store::settings;
use tokio::net::TcpListener;
use tokio::sync::Notify;

use crate::BenchError;

#[derive(Debug, Default)]
struct State {
    next_at: Option<Instant>,
    served: bool,
    done_at: Option<Instant>,
    outcome: Option<String>,
}

/// One cold start.
#[derive(Debug, Clone, Serialize)]
pub struct ColdStart {
    pub ready_ms: f64,
    /// From handing out the event to receiving the response (first, cold invocation).
    pub first_invocation_ms: f64,
    pub peak_rss_kb: u64,
    /// `response`, or `error: <body>` if the function reported one.
    pub outcome: String,
}

/// Several cold starts of one binary.
#[derive(Debug, Clone, Serialize)]
pub struct StartupFigures {
    pub function: String,
    pub runs: Vec<ColdStart>,
    pub ready_ms_median: f64,
    pub first_invocation_ms_median: f64,
    pub peak_rss_mb_max: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Peak resident set size in kB from a `/proc/<pid>/status` text.
pub fn vm_hwm_kb(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

async fn serve(
    req: Request<Incoming>,
    event: Bytes,
    state: Arc<Mutex<State>>,
    notify: Arc<Notify>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_owned();
    let now = Instant::now();
    if path.ends_with("/runtime/invocation/next") {
        let first = {
            let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
            s.next_at.get_or_insert(now);
            !std::mem::replace(&mut s.served, true)
        };
        if !first {
            // The function is warm and waiting: it stays here until it is stopped.
            std::future::pending::<()>().await;
        }
        let deadline = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() + 30_000)
            .unwrap_or(0);
        let resp = Response::builder()
            .header("Lambda-Runtime-Aws-Request-Id", "bench-request-1")
            .header("Lambda-Runtime-Deadline-Ms", deadline.to_string())
            .header(
                "Lambda-Runtime-Invoked-Function-Arn",
                "arn:aws:lambda:us-east-1:123456789012:function:bench",
            )
            .header(
                "Lambda-Runtime-Trace-Id",
                "Root=1-00000000-000000000000000000000000",
            )
            .header("Content-Type", "application/json")
            .body(Full::new(event));
        return Ok(resp.unwrap_or_else(|_| Response::new(Full::new(Bytes::new()))));
    }
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let outcome = if path.ends_with("/response") {
        "response".to_owned()
    } else {
        format!(
            "error: {}",
            String::from_utf8_lossy(&body)
                .chars()
                .take(300)
                .collect::<String>()
        )
    };
    {
        let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
        s.done_at.get_or_insert(now);
        s.outcome.get_or_insert(outcome);
    }
    notify.notify_one();
    let mut r = Response::new(Full::new(Bytes::from_static(b"{\"status\":\"OK\"}")));
    *r.status_mut() = StatusCode::ACCEPTED;
    Ok(r)
}

/// One cold start of `binary` with `env`, fed `event`.
pub async fn cold_start(
    binary: &Path,
    env: &[(String, String)],
    event: Bytes,
) -> Result<ColdStart, BenchError> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let state = Arc::new(Mutex::new(State::default()));
    let notify = Arc::new(Notify::new());
    let (s, n) = (state.clone(), notify.clone());
    let server = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (s, n, e) = (s.clone(), n.clone(), event.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req| serve(req, e.clone(), s.clone(), n.clone()));
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    let mut cmd = tokio::process::Command::new(binary);
    cmd.env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("AWS_LAMBDA_RUNTIME_API", addr.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let spawned = Instant::now();
    let mut child = cmd.spawn()?;
    let pid = child.id().unwrap_or(0);
    let waited = tokio::time::timeout(Duration::from_secs(30), notify.notified()).await;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let _ = child.start_kill();
    let _ = child.wait().await;
    server.abort();
    if waited.is_err() {
        return Err(BenchError::Other(format!(
            "{} gave no response within 30 s",
            binary.display()
        )));
    }
    let s = state.lock().unwrap_or_else(|p| p.into_inner());
    let next_at = s.next_at.unwrap_or(spawned);
    let done_at = s.done_at.unwrap_or(next_at);
    Ok(ColdStart {
        ready_ms: next_at.duration_since(spawned).as_secs_f64() * 1_000.0,
        first_invocation_ms: done_at.duration_since(next_at).as_secs_f64() * 1_000.0,
        peak_rss_kb: vm_hwm_kb(&status).unwrap_or(0),
        outcome: s.outcome.clone().unwrap_or_default(),
    })
}

/// `runs` cold starts of one function binary.
pub async fn startup(
    function: &str,
    binary: &Path,
    env: &[(String, String)],
    event: Bytes,
    runs: usize,
) -> Result<StartupFigures, BenchError> {
    let mut all = Vec::new();
    for _ in 0..runs {
        all.push(cold_start(binary, env, event.clone()).await?);
    }
    Ok(StartupFigures {
        function: function.to_owned(),
        ready_ms_median: median(all.iter().map(|r| r.ready_ms).collect()),
        first_invocation_ms_median: median(all.iter().map(|r| r.first_invocation_ms).collect()),
        peak_rss_mb_max: all.iter().map(|r| r.peak_rss_kb).max().unwrap_or(0) as f64 / 1024.0,
        runs: all,
    })
}

/// The environment Lambda gives a function (what `lambda_runtime` reads), plus Tidemark's.
pub fn lambda_env(function: &str, table: &str, dynamodb_endpoint: &str) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = [
        ("AWS_LAMBDA_FUNCTION_NAME", function),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256"),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST"),
        ("AWS_LAMBDA_LOG_STREAM_NAME", "2026/01/01/[$LATEST]bench"),
        ("AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/bench"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "local"),
        ("AWS_SECRET_ACCESS_KEY", "local"),
        (settings::TABLE_NAME.name, table),
        (settings::TIDEMARK_LOCAL.name, "1"),
        (settings::TIDEMARK_DYNAMODB_ENDPOINT.name, dynamodb_endpoint),
        ("RUST_LOG", "warn"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    if let Ok(path) = std::env::var("PATH") {
        env.push(("PATH".into(), path));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_rss_comes_from_vm_hwm() {
        let status = "Name:\tx\nVmPeak:\t  20000 kB\nVmHWM:\t    7340 kB\nVmRSS:\t 7000 kB\n";
        assert_eq!(vm_hwm_kb(status), Some(7340));
        assert_eq!(vm_hwm_kb("Name: x\n"), None);
    }
}
