//! The local API server: real HTTP in, the HTTP API event a Lambda function would get, the
//! function's response back out.

use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use lambda_http::{Body, Request, RequestExt, Response};
use serde_json::{Value, json};
use tidemark_devstack::http_api::{HttpHandler, bind, serve};
use tokio::sync::watch;

/// Answers 201 with what it was given, so the test sees the event through the function's eyes.
struct Echo;

impl HttpHandler for Echo {
    async fn handle(&self, req: Request) -> Response<Body> {
        let ctx = req.request_context();
        let source_ip = match ctx {
            lambda_http::request::RequestContext::ApiGatewayV2(c) => c.http.source_ip.clone(),
            _ => None,
        };
        let q = req.query_string_parameters();
        let body = json!({
            "method": req.method().as_str(),
            "path": req.uri().path(),
            "query": req.uri().query(),
            "ids": q.first("ids"),
            "header": req.headers().get("x-test").map(|v| v.to_str().unwrap()),
            "body": String::from_utf8_lossy(req.body().as_ref()),
            "sourceIp": source_ip,
        });
        Response::builder()
            .status(201)
            .header("content-type", "application/json")
            .header("x-from-function", "yes")
            .body(Body::Text(body.to_string()))
            .unwrap()
    }
}

async fn request(
    addr: std::net::SocketAddr,
    req: http::request::Builder,
    body: &str,
) -> (u16, http::HeaderMap, Value) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = req
        .header(http::header::HOST, addr.to_string())
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    (
        parts.status.as_u16(),
        parts.headers,
        serde_json::from_slice(&bytes).unwrap(),
    )
}

#[tokio::test]
async fn a_request_reaches_the_function_as_an_http_api_event_and_its_response_comes_back() {
    // GIVEN the server on a free loopback port
    let (listener, addr) = bind(0).await.unwrap();
    assert!(addr.ip().is_loopback());
    let (stop, rx) = watch::channel(false);
    let server = tokio::spawn(serve(listener, Arc::new(Echo), rx));

    // WHEN a client sends a request with a query, a header and a body
    let (status, headers, body) = request(
        addr,
        http::Request::put("/devices/sensor_01?ids=a%2Cb&x=1").header("x-test", "42"),
        "{\"name\":\"Warehouse\"}",
    )
    .await;

    // THEN the function saw it as API Gateway would hand it over, and its answer is returned
    assert_eq!(status, 201);
    assert_eq!(headers["x-from-function"], "yes");
    assert_eq!(body["method"], "PUT");
    assert_eq!(body["path"], "/devices/sensor_01");
    assert_eq!(body["query"], "ids=a%2Cb&x=1");
    assert_eq!(body["ids"], "a,b");
    assert_eq!(body["header"], "42");
    assert_eq!(body["body"], "{\"name\":\"Warehouse\"}");
    assert_eq!(body["sourceIp"], "127.0.0.1");

    // AND the server stops when asked
    stop.send(true).unwrap();
    server.await.unwrap();
}
