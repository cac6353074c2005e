//! A fault-injecting DynamoDB endpoint: an HTTP proxy in front of DynamoDB Local that, while
//! switched on, answers every DynamoDB call with the error DynamoDB itself sends during an
//! outage or under throttling, and forwards everything unchanged otherwise.
//!
//! Point a client (or a whole pipeline) at [`FaultProxy::endpoint`] instead of DynamoDB Local.
//! Only the DynamoDB API (`X-Amz-Target: DynamoDB_20120810.*`) fails: DynamoDB Streams calls,
//! served on the same endpoint locally, are another service on AWS and keep working, so a
//! test can show what the functions do while the table is unreachable.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

/// What the proxy answers while faults are on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `500 InternalServerError`, as during a service outage.
    InternalServerError,
    /// `400 ThrottlingException`, as when a table or account is throttled.
    Throttling,
    /// Each failed call alternates between the two.
    Both,
}

impl Fault {
    fn code(self) -> u8 {
        match self {
            Fault::InternalServerError => 1,
            Fault::Throttling => 2,
            Fault::Both => 3,
        }
    }
}

/// The operations the proxy fails: the DynamoDB API, not DynamoDB Streams.
const DYNAMODB_TARGET: &str = "DynamoDB_20120810.";

#[derive(Default)]
struct State {
    /// 0 = healthy, else [`Fault::code`].
    fault: AtomicU8,
    failed: AtomicU64,
    forwarded: AtomicU64,
}

/// A running proxy. Cheap to clone; every clone switches the same proxy.
#[derive(Clone)]
pub struct FaultProxy {
    pub addr: SocketAddr,
    state: Arc<State>,
}

impl FaultProxy {
    /// Starts a healthy proxy on an ephemeral loopback port, forwarding to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State::default());
        let s = state.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let s = s.clone();
                tokio::spawn(async move {
                    // HTTP/1 serves one request at a time per connection, so each client
                    // connection gets its own upstream connection.
                    let up: Upstream = Arc::new(tokio::sync::Mutex::new(None));
                    let svc = service_fn(move |req| handle(req, upstream, up.clone(), s.clone()));
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Ok(FaultProxy { addr, state })
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// From now on every DynamoDB call fails with `fault`.
    pub fn fail_with(&self, fault: Fault) {
        self.state.fault.store(fault.code(), Ordering::SeqCst);
    }

    /// From now on calls are forwarded again.
    pub fn recover(&self) {
        self.state.fault.store(0, Ordering::SeqCst);
    }

    /// Calls answered with an injected error so far.
    pub fn failed_calls(&self) -> u64 {
        self.state.failed.load(Ordering::Relaxed)
    }

    /// Calls forwarded to DynamoDB Local so far.
    pub fn forwarded_calls(&self) -> u64 {
        self.state.forwarded.load(Ordering::Relaxed)
    }
}

type Upstream = Arc<tokio::sync::Mutex<Option<SendRequest<Full<Bytes>>>>>;

fn respond(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/x-amz-json-1.0"),
    );
    r
}

/// The error response DynamoDB sends for `fault` (its JSON protocol's `__type` and message).
fn injected(fault: u8, n: u64) -> Response<Full<Bytes>> {
    let throttle = match fault {
        1 => false,
        2 => true,
        _ => n % 2 == 1,
    };
    if throttle {
        respond(
            StatusCode::BAD_REQUEST,
            r#"{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"Rate of requests exceeds the allowed throughput."}"#.into(),
        )
    } else {
        respond(
            StatusCode::INTERNAL_SERVER_ERROR,
            r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"Internal server error"}"#.into(),
        )
    }
}

async fn connect(upstream: SocketAddr) -> std::io::Result<SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(upstream).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(std::io::Error::other)?;
    tokio::spawn(conn);
    Ok(sender)
}

async fn handle(
    req: Request<Incoming>,
    upstream: SocketAddr,
    conn: Upstream,
    state: Arc<State>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return Ok(respond(StatusCode::BAD_GATEWAY, e.to_string())),
    };
    let is_dynamodb = parts
        .headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with(DYNAMODB_TARGET));
    let fault = state.fault.load(Ordering::SeqCst);
    if is_dynamodb && fault != 0 {
        let n = state.failed.fetch_add(1, Ordering::Relaxed);
        return Ok(injected(fault, n));
    }
    state.forwarded.fetch_add(1, Ordering::Relaxed);
    let mut guard = conn.lock().await;
    let mut last_err = String::from("no attempt");
    for _ in 0..2 {
        let sender = match guard.as_mut() {
            Some(s) if !s.is_closed() => s,
            _ => match connect(upstream).await {
                Ok(s) => guard.insert(s),
                Err(e) => return Ok(respond(StatusCode::BAD_GATEWAY, e.to_string())),
            },
        };
        let req = Request::from_parts(parts.clone(), Full::new(body.clone()));
        match sender.send_request(req).await {
            Ok(resp) => {
                let (rparts, rbody) = resp.into_parts();
                return Ok(match rbody.collect().await {
                    Ok(b) => Response::from_parts(rparts, Full::new(b.to_bytes())),
                    Err(e) => respond(StatusCode::BAD_GATEWAY, e.to_string()),
                });
            }
            Err(e) => {
                // A kept-alive upstream connection closed under us: reconnect once.
                *guard = None;
                last_err = e.to_string();
            }
        }
    }
    Ok(respond(StatusCode::BAD_GATEWAY, last_err))
}
