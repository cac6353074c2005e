//! Functions behind the Lambda Invoke HTTP API (`cargo lambda watch`, or anything serving
//! `POST /2015-03-31/functions/{name}/invocations`), so the real binaries can run behind the
//! emulated mappings.

use aws_lambda_events::event::dynamodb::Event;
use aws_lambda_events::event::kinesis::KinesisEvent;
use aws_lambda_events::event::streams::{DynamoDbEventResponse, KinesisEventResponse};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{FunctionError, KinesisHandler, StreamHandler};

/// A function invoked over HTTP, synchronously (`RequestResponse`).
#[derive(Debug, Clone)]
pub struct HttpFunction {
    authority: String,
    path: String,
}

impl HttpFunction {
    /// `url` is the invoke endpoint's base, e.g. `http://127.0.0.1:9000`.
    pub fn new(url: &str, function_name: &str) -> Result<Self, FunctionError> {
        let uri: http::Uri = url
            .parse()
            .map_err(|e| FunctionError(format!("invalid invoke URL {url}: {e}")))?;
        if uri.scheme_str() != Some("http") {
            return Err(FunctionError(format!(
                "invoke URL {url} must be plain http"
            )));
        }
        let authority = uri
            .authority()
            .ok_or_else(|| FunctionError(format!("invoke URL {url} has no host")))?
            .to_string();
        let base = uri.path().trim_end_matches('/');
        Ok(HttpFunction {
            authority,
            path: format!("{base}/2015-03-31/functions/{function_name}/invocations"),
        })
    }

    /// One invocation. A non-2xx status or an `X-Amz-Function-Error` header is a function
    /// error, as the real Invoke API reports it.
    pub async fn invoke<T: Serialize, R: DeserializeOwned>(
        &self,
        payload: &T,
    ) -> Result<R, FunctionError> {
        let body = serde_json::to_vec(payload).map_err(FunctionError::new)?;
        let stream = tokio::net::TcpStream::connect(&self.authority)
            .await
            .map_err(|e| FunctionError(format!("connect {}: {e}", self.authority)))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(FunctionError::new)?;
        tokio::spawn(conn);
        let req = http::Request::post(&self.path)
            .header(http::header::HOST, &self.authority)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header("X-Amz-Invocation-Type", "RequestResponse")
            .body(Full::new(Bytes::from(body)))
            .map_err(FunctionError::new)?;
        let resp = sender.send_request(req).await.map_err(FunctionError::new)?;
        let status = resp.status();
        let function_error = resp
            .headers()
            .get("X-Amz-Function-Error")
            .map(|v| v.to_str().unwrap_or("Unhandled").to_owned());
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(FunctionError::new)?
            .to_bytes();
        if !status.is_success() || function_error.is_some() {
            return Err(FunctionError(format!(
                "invoke returned {status} {}: {}",
                function_error.unwrap_or_default(),
                String::from_utf8_lossy(&bytes)
            )));
        }
        // A handler returning nothing (`null`) succeeded with no failures.
        if bytes.is_empty() || &bytes[..] == b"null" {
            return serde_json::from_str("{\"batchItemFailures\":[]}").map_err(FunctionError::new);
        }
        serde_json::from_slice(&bytes).map_err(FunctionError::new)
    }
}

impl KinesisHandler for HttpFunction {
    async fn handle(&self, event: KinesisEvent) -> Result<KinesisEventResponse, FunctionError> {
        self.invoke(&event).await
    }
}

impl StreamHandler for HttpFunction {
    async fn handle(&self, event: Event) -> Result<DynamoDbEventResponse, FunctionError> {
        self.invoke(&event).await
    }
}
