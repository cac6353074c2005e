//! The local stand-in for API Gateway: an HTTP server on loopback that turns each request into
//! the HTTP API (payload 2.0) event Lambda would receive, parsed by `lambda_http` exactly as in
//! a deployed function, and sends back the function's response.
//!
//! There is no authorizer locally: the server listens on 127.0.0.1 only. `/` redirects to the
//! dashboard the API function serves under `/ui/`, so `make run`'s URL opens it.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use lambda_http::{Body, Request, Response};
use serde_json::{Map, Value, json};
use tidemark_streams::LOCAL_ACCOUNT;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::esm::stop_requested;

/// API Gateway's own limit on a request payload.
pub const MAX_REQUEST_BYTES: usize = 10 * 1024 * 1024;

/// The API function (`tidemark_api::App`, or a fake in tests).
pub trait HttpHandler: Send + Sync + 'static {
    fn handle(&self, req: Request) -> impl Future<Output = Response<Body>> + Send;
}

impl<S: tidemark_api::Store + Send + Sync + 'static> HttpHandler for tidemark_api::App<S> {
    async fn handle(&self, req: Request) -> Response<Body> {
        tidemark_api::App::handle(self, req).await
    }
}

/// Binds `127.0.0.1:port` (0 picks a free port; the bound address is returned).
pub async fn bind(port: u16) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port))).await?;
    let addr = listener.local_addr()?;
    Ok((listener, addr))
}

/// Serves until `shutdown`; connections in flight are finished gracefully.
pub async fn serve<H: HttpHandler>(
    listener: TcpListener,
    handler: Arc<H>,
    mut shutdown: watch::Receiver<bool>,
) {
    let ids = Arc::new(AtomicU64::new(0));
    let mut conns = tokio::task::JoinSet::new();
    while !stop_requested(&shutdown) {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => continue,
        };
        let handler = handler.clone();
        let ids = ids.clone();
        let mut stop = shutdown.clone();
        conns.spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let handler = handler.clone();
                let id = ids.fetch_add(1, Ordering::Relaxed);
                async move { Ok::<_, Infallible>(answer(&*handler, req, peer, id).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(error = %e, "connection closed");
                    }
                }
                _ = async { let _ = stop.wait_for(|s| *s).await; } => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
        while conns.try_join_next().is_some() {}
    }
    while conns.join_next().await.is_some() {}
}

async fn answer<H: HttpHandler>(
    handler: &H,
    req: http::Request<Incoming>,
    peer: SocketAddr,
    id: u64,
) -> http::Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    if parts.uri.path() == "/" && parts.method == http::Method::GET {
        let mut r = http::Response::new(Full::new(Bytes::new()));
        *r.status_mut() = http::StatusCode::FOUND;
        r.headers_mut().insert(
            http::header::LOCATION,
            http::HeaderValue::from_static("/ui/"),
        );
        return r;
    }
    let bytes = match Limited::new(body, MAX_REQUEST_BYTES).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return plain(413, "request body too large"),
    };
    let event = api_gateway_v2_event(&parts, &bytes, peer, id);
    let request = match lambda_http::request::from_str(&event.to_string()) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "request not representable as an HTTP API event");
            return plain(400, "bad request");
        }
    };
    let resp = handler.handle(request).await;
    let (parts, body) = resp.into_parts();
    let mut out = http::Response::from_parts(parts, Full::new(Bytes::from(body_bytes(body))));
    // hyper sets the length from the body; a stale one from the function must not conflict.
    out.headers_mut().remove(http::header::CONTENT_LENGTH);
    out
}

fn body_bytes(body: Body) -> Vec<u8> {
    match body {
        Body::Text(s) => s.into_bytes(),
        Body::Binary(b) => b,
        _ => Vec::new(),
    }
}

fn plain(status: u16, msg: &str) -> http::Response<Full<Bytes>> {
    let mut r = http::Response::new(Full::new(Bytes::from(
        json!({"error": {"code": "bad_request", "message": msg}}).to_string(),
    )));
    *r.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::BAD_REQUEST);
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

/// The HTTP API payload 2.0 event for a request, as API Gateway builds it.
pub fn api_gateway_v2_event(
    parts: &http::request::Parts,
    body: &[u8],
    peer: SocketAddr,
    id: u64,
) -> Value {
    let mut headers = Map::new();
    let mut cookies = Vec::new();
    for (name, value) in &parts.headers {
        let v = String::from_utf8_lossy(value.as_bytes()).into_owned();
        if name == http::header::COOKIE {
            cookies.extend(v.split(';').map(|c| Value::String(c.trim().to_owned())));
            continue;
        }
        match headers.get_mut(name.as_str()) {
            // API Gateway joins repeated headers with commas.
            Some(Value::String(existing)) => {
                existing.push(',');
                existing.push_str(&v);
            }
            _ => {
                headers.insert(name.as_str().to_owned(), Value::String(v));
            }
        }
    }
    let raw_query = parts.uri.query().unwrap_or_default();
    let mut query = Map::new();
    for pair in raw_query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (percent_decode(k), percent_decode(v));
        match query.get_mut(&k) {
            Some(Value::String(existing)) => {
                existing.push(',');
                existing.push_str(&v);
            }
            _ => {
                query.insert(k, Value::String(v));
            }
        }
    }
    let now = tidemark_schema::Timestamp::now();
    let (body, is_base64) = match std::str::from_utf8(body) {
        _ if body.is_empty() => (Value::Null, false),
        Ok(s) => (Value::String(s.to_owned()), false),
        Err(_) => (
            Value::String(base64::engine::general_purpose::STANDARD.encode(body)),
            true,
        ),
    };
    let host = headers
        .get("host")
        .and_then(Value::as_str)
        .unwrap_or("localhost")
        .to_owned();
    let mut event = json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": parts.uri.path(),
        "rawQueryString": raw_query,
        "headers": headers,
        "requestContext": {
            "accountId": LOCAL_ACCOUNT,
            "apiId": "local",
            "domainName": host,
            "domainPrefix": "local",
            "http": {
                "method": parts.method.as_str(),
                "path": parts.uri.path(),
                "protocol": "HTTP/1.1",
                "sourceIp": peer.ip().to_string(),
                "userAgent": headers.get("user-agent").and_then(Value::as_str).unwrap_or_default(),
            },
            "requestId": format!("local-{}-{id}", now.epoch_millis()),
            "routeKey": "$default",
            "stage": "$default",
            "time": now.to_string(),
            "timeEpoch": now.epoch_millis(),
        },
        "isBase64Encoded": is_base64,
    });
    if let Some(m) = event.as_object_mut() {
        if !query.is_empty() {
            m.insert("queryStringParameters".into(), Value::Object(query));
        }
        if !cookies.is_empty() {
            m.insert("cookies".into(), Value::Array(cookies));
        }
        if !body.is_null() {
            m.insert("body".into(), body);
        }
    }
    event
}

/// `application/x-www-form-urlencoded` decoding of one query component.
fn percent_decode(s: &str) -> String {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).map(|d| d as u8)
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h * 16 + l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_components_are_decoded_like_api_gateway_does() {
        assert_eq!(percent_decode("a%2Cb+c"), "a,b c");
        assert_eq!(
            percent_decode("2026-04-20T14%3A00%3A00Z"),
            "2026-04-20T14:00:00Z"
        );
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }

    #[test]
    fn a_request_becomes_an_http_api_event_lambda_http_understands() {
        let req =
            http::Request::get("/devices/sensor_01/readings?from=2026-04-20T14%3A00%3A00Z&limit=5")
                .header("host", "127.0.0.1:3000")
                .header("x-a", "1")
                .header("x-a", "2")
                .body(())
                .unwrap();
        let (parts, ()) = req.into_parts();
        let peer: SocketAddr = "127.0.0.1:5555".parse().unwrap();
        let event = api_gateway_v2_event(&parts, b"", peer, 1);
        assert_eq!(event["headers"]["x-a"], "1,2");
        let r = lambda_http::request::from_str(&event.to_string()).unwrap();
        assert_eq!(r.method(), http::Method::GET);
        assert_eq!(r.uri().path(), "/devices/sensor_01/readings");
        assert_eq!(
            r.uri().query(),
            Some("from=2026-04-20T14%3A00%3A00Z&limit=5")
        );
        use lambda_http::RequestExt;
        let q = r.query_string_parameters();
        assert_eq!(q.first("from"), Some("2026-04-20T14:00:00Z"));
        assert_eq!(q.first("limit"), Some("5"));
    }

    #[test]
    fn a_json_body_arrives_as_text() {
        let req = http::Request::put("/devices/d1")
            .header("content-type", "application/json")
            .body(())
            .unwrap();
        let (parts, ()) = req.into_parts();
        let event = api_gateway_v2_event(
            &parts,
            b"{\"name\":\"x\"}",
            "127.0.0.1:1".parse().unwrap(),
            2,
        );
        let r = lambda_http::request::from_str(&event.to_string()).unwrap();
        assert_eq!(r.method(), http::Method::PUT);
        assert_eq!(r.body().as_ref(), b"{\"name\":\"x\"}");
    }
}
