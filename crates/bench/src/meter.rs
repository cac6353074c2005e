//! A metering HTTP proxy between one function's DynamoDB client and DynamoDB Local.
//!
//! The handlers stay untouched: the proxy adds `"ReturnConsumedCapacity":"INDEXES"` to every
//! request body that accepts it and sums the `ConsumedCapacity` DynamoDB answers with, table
//! and GSI units apart. DynamoDB Local does not verify SigV4 signatures, so rewriting a signed
//! body is safe there (and only there). One proxy per function attributes the units.
//!
//! DynamoDB Local meters every operation but PartiQL's: the items a `BatchExecuteStatement`
//! inserted are metered when the totals are read, by [`crate::shadow`].

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde_json::Value;

pub use crate::capacity::{Capacity, consumed, consumed_by_index};
use tokio::net::{TcpListener, TcpStream};

/// What an operation's capacity units are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Write,
    Read,
}

/// `BatchExecuteStatement` counts as a write: Tidemark's only statements are INSERTs.
const WRITES: [&str; 6] = [
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "BatchWriteItem",
    "TransactWriteItems",
    "BatchExecuteStatement",
];
const READS: [&str; 6] = [
    "GetItem",
    "BatchGetItem",
    "Query",
    "Scan",
    "TransactGetItems",
    "ExecuteStatement",
];

/// The operation named by an `X-Amz-Target` header (`DynamoDB_20120810.PutItem`) and whether
/// it is metered; `None` for operations without capacity (DescribeTable, streams, …).
pub fn operation(target: &str) -> Option<(&str, Kind)> {
    let op = target.rsplit('.').next()?;
    if WRITES.contains(&op) {
        Some((op, Kind::Write))
    } else if READS.contains(&op) && op != "ExecuteStatement" {
        Some((op, Kind::Read))
    } else {
        None
    }
}

/// The request body with `ReturnConsumedCapacity` set to `INDEXES` (replacing whatever the
/// caller asked for: `INDEXES` reports a superset of `TOTAL`). `None` if the body is not a
/// JSON object, in which case it is forwarded unchanged.
pub fn rewrite_request(body: &[u8]) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(body).ok()?;
    v.as_object_mut()?
        .insert("ReturnConsumedCapacity".into(), Value::from("INDEXES"));
    serde_json::to_vec(&v).ok()
}

/// Read units AWS bills for a read that DynamoDB Local reports no capacity for: a read that
/// finds nothing still costs the minimum on AWS (0.5 RRU eventually consistent, 1 strongly
/// consistent: per key asked for by `GetItem`/`BatchGetItem`, per request for `Query` and
/// `Scan`), where DynamoDB Local reports 0 (an empty `Query`, a missing item of a
/// `BatchGetItem`). 0 for anything else.
pub fn unreported_read_minimum(op: &str, request: &[u8], response: &[u8]) -> f64 {
    let (Ok(req), Ok(resp)) = (
        serde_json::from_slice::<Value>(request),
        serde_json::from_slice::<Value>(response),
    ) else {
        return 0.0;
    };
    let minimum = |v: &Value| {
        if v.get("ConsistentRead").and_then(Value::as_bool) == Some(true) {
            1.0
        } else {
            0.5
        }
    };
    let reported = consumed(response).total;
    match op {
        "GetItem" if reported == 0.0 && resp.get("Item").is_none() => minimum(&req),
        "Query" | "Scan" if reported == 0.0 => minimum(&req),
        "BatchGetItem" => {
            let Some(tables) = req.get("RequestItems").and_then(Value::as_object) else {
                return 0.0;
            };
            let count = |v: Option<&Value>| v.and_then(Value::as_array).map_or(0, Vec::len);
            tables
                .iter()
                .map(|(table, ask)| {
                    let asked = count(ask.get("Keys"));
                    let found = count(resp.get("Responses").and_then(|r| r.get(table)));
                    let left = count(
                        resp.get("UnprocessedKeys")
                            .and_then(|u| u.get(table))
                            .and_then(|u| u.get("Keys")),
                    );
                    asked.saturating_sub(found + left) as f64 * minimum(ask)
                })
                .sum()
        }
        _ => 0.0,
    }
}

/// Per-operation counts of one proxy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct OpStats {
    pub calls: u64,
    pub capacity: Capacity,
    /// `ConditionalCheckFailedException` (and transaction cancellations): DynamoDB Local
    /// reports no capacity for them, AWS bills them (1 WRU per KB of the item).
    pub conditional_failures: u64,
    pub other_errors: u64,
    /// Time from forwarding the request to having the whole response, summed.
    pub upstream_ms: f64,
    /// The GSI units of `capacity`, by index name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gsi_by_index: BTreeMap<String, f64>,
    /// Read units AWS bills and DynamoDB Local reports as none ([`unreported_read_minimum`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unreported_read_minimum: f64,
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// Everything one proxy saw.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct MeterTotals {
    pub by_operation: BTreeMap<String, OpStats>,
    /// Items inserted by PartiQL and not metered yet.
    #[serde(skip)]
    pub unmetered: Vec<(String, serde_json::Map<String, Value>)>,
}

impl MeterTotals {
    fn sum(&self, kind: Kind) -> (Capacity, u64, u64) {
        let mut c = Capacity::default();
        let (mut calls, mut failed) = (0, 0);
        for (op, s) in &self.by_operation {
            if operation(op).map(|(_, k)| k) == Some(kind) {
                c.add(s.capacity);
                calls += s.calls;
                failed += s.conditional_failures;
            }
        }
        (c, calls, failed)
    }

    /// Write units (table, GSI, total), write calls and failed conditional writes.
    pub fn writes(&self) -> (Capacity, u64, u64) {
        self.sum(Kind::Write)
    }

    pub fn reads(&self) -> (Capacity, u64) {
        let (c, calls, _) = self.sum(Kind::Read);
        (c, calls)
    }

    /// Read units AWS would bill on top of [`Self::reads`] ([`unreported_read_minimum`]).
    pub fn unreported_read_minimum(&self) -> f64 {
        self.by_operation
            .values()
            .map(|s| s.unreported_read_minimum)
            .sum()
    }

    /// The GSI units of `kind`'s operations, by index name.
    pub fn gsi_by_index(&self, kind: Kind) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for (op, s) in &self.by_operation {
            if operation(op).map(|(_, k)| k) == Some(kind) {
                for (i, u) in &s.gsi_by_index {
                    *out.entry(i.clone()).or_insert(0.0) += u;
                }
            }
        }
        out
    }

    /// Records what a successful `BatchExecuteStatement` did per statement (its units, if
    /// any, are counted by [`Self::record`]).
    pub fn record_statements(&mut self, request: &[u8], response: &[u8]) {
        let out = crate::shadow::batch_outcome(request, response);
        let s = self
            .by_operation
            .entry("BatchExecuteStatement".to_owned())
            .or_default();
        s.conditional_failures += out.taken;
        s.other_errors += out.other_errors;
        self.unmetered.extend(out.unmetered);
    }

    /// Records one exchange: `op` is the bare operation name.
    pub fn record(&mut self, op: &str, status: StatusCode, response: &[u8], upstream_ms: f64) {
        let s = self.by_operation.entry(op.to_owned()).or_default();
        s.calls += 1;
        s.upstream_ms += upstream_ms;
        if status.is_success() {
            s.capacity.add(consumed(response));
            for (i, u) in consumed_by_index(response) {
                *s.gsi_by_index.entry(i).or_insert(0.0) += u;
            }
        } else {
            let text = String::from_utf8_lossy(response);
            if text.contains("ConditionalCheckFailed") || text.contains("TransactionCanceled") {
                s.conditional_failures += 1;
            } else {
                s.other_errors += 1;
            }
        }
    }
}

/// A running proxy; its counters can be read and reset while it runs.
#[derive(Clone)]
pub struct Meter {
    pub addr: SocketAddr,
    totals: Arc<Mutex<MeterTotals>>,
    /// The latest metered request's headers: its credentials pick the DynamoDB Local
    /// database the shadow puts go to.
    headers: Arc<Mutex<http::HeaderMap>>,
    shadow: Arc<tokio::sync::Mutex<crate::shadow::Shadow>>,
}

impl Meter {
    /// Starts a proxy on an ephemeral loopback port forwarding to `upstream` (`host:port`).
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Meter> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let totals = Arc::new(Mutex::new(MeterTotals::default()));
        let headers = Arc::new(Mutex::new(http::HeaderMap::new()));
        let (t, h) = (totals.clone(), headers.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (t, h) = (t.clone(), h.clone());
                tokio::spawn(async move {
                    // HTTP/1 serves one request at a time per connection, so each client
                    // connection gets its own upstream connection.
                    let upstream_conn = Arc::new(tokio::sync::Mutex::new(None));
                    let svc = service_fn(move |req| {
                        forward(req, upstream, upstream_conn.clone(), t.clone(), h.clone())
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Ok(Meter {
            addr,
            totals,
            headers,
            shadow: Arc::new(tokio::sync::Mutex::new(crate::shadow::Shadow::new(
                upstream,
            ))),
        })
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MeterTotals> {
        self.totals.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Meters the PartiQL inserts seen so far (outside any timed call).
    async fn settle(&self) {
        let items = std::mem::take(&mut self.lock().unmetered);
        if items.is_empty() {
            return;
        }
        let headers = self
            .headers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let measured = self.shadow.lock().await.measure(&headers, items).await;
        let mut t = self.lock();
        let s = t
            .by_operation
            .entry("BatchExecuteStatement".to_owned())
            .or_default();
        match measured {
            Ok(units) => s.capacity.add(units),
            Err(e) => {
                eprintln!("bench: metering PartiQL inserts failed: {e}");
                s.other_errors += 1;
            }
        }
    }

    pub async fn totals(&self) -> MeterTotals {
        self.settle().await;
        self.lock().clone()
    }

    /// Returns the totals so far and starts counting from zero.
    pub async fn take(&self) -> MeterTotals {
        self.settle().await;
        std::mem::take(&mut *self.lock())
    }
}

type Upstream = Arc<tokio::sync::Mutex<Option<SendRequest<Full<Bytes>>>>>;

fn bad_gateway(e: impl std::fmt::Display) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(format!("meter proxy: {e}"))));
    *r.status_mut() = StatusCode::BAD_GATEWAY;
    r
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

async fn forward(
    req: Request<Incoming>,
    upstream: SocketAddr,
    conn: Upstream,
    totals: Arc<Mutex<MeterTotals>>,
    headers: Arc<Mutex<http::HeaderMap>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (mut parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return Ok(bad_gateway(e)),
    };
    let op = parts
        .headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .and_then(operation)
        .map(|(op, _)| op.to_owned());
    if op.is_some() {
        *headers.lock().unwrap_or_else(|p| p.into_inner()) = parts.headers.clone();
    }
    let body = match op.as_ref().and_then(|_| rewrite_request(&body)) {
        Some(b) => {
            parts.headers.remove(http::header::TRANSFER_ENCODING);
            parts
                .headers
                .insert(http::header::CONTENT_LENGTH, b.len().into());
            Bytes::from(b)
        }
        None => body,
    };
    let mut guard = conn.lock().await;
    let mut last_err = None;
    for _ in 0..2 {
        let sender = match guard.as_mut() {
            Some(s) if !s.is_closed() => s,
            _ => match connect(upstream).await {
                Ok(s) => guard.insert(s),
                Err(e) => return Ok(bad_gateway(e)),
            },
        };
        let req = Request::from_parts(parts.clone(), Full::new(body.clone()));
        let sent = std::time::Instant::now();
        match sender.send_request(req).await {
            Ok(resp) => {
                let (rparts, rbody) = resp.into_parts();
                let bytes = match rbody.collect().await {
                    Ok(b) => b.to_bytes(),
                    Err(e) => return Ok(bad_gateway(e)),
                };
                if let Some(op) = &op {
                    let mut t = totals.lock().unwrap_or_else(|p| p.into_inner());
                    t.record(
                        op,
                        rparts.status,
                        &bytes,
                        sent.elapsed().as_secs_f64() * 1e3,
                    );
                    if op == "BatchExecuteStatement" && rparts.status.is_success() {
                        t.record_statements(&body, &bytes);
                    }
                    if rparts.status.is_success() {
                        let extra = unreported_read_minimum(op, &body, &bytes);
                        if extra > 0.0 {
                            t.by_operation
                                .entry(op.clone())
                                .or_default()
                                .unreported_read_minimum += extra;
                        }
                    }
                }
                return Ok(Response::from_parts(rparts, Full::new(bytes)));
            }
            Err(e) => {
                // A kept-alive upstream connection closed under us: reconnect once.
                *guard = None;
                last_err = Some(e);
            }
        }
    }
    Ok(bad_gateway(last_err.map_or_else(
        || "no attempt".to_owned(),
        |e| e.to_string(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_operations_with_capacity_are_metered() {
        assert_eq!(
            operation("DynamoDB_20120810.PutItem"),
            Some(("PutItem", Kind::Write))
        );
        assert_eq!(
            operation("DynamoDB_20120810.TransactWriteItems"),
            Some(("TransactWriteItems", Kind::Write))
        );
        assert_eq!(
            operation("DynamoDB_20120810.Query"),
            Some(("Query", Kind::Read))
        );
        assert_eq!(operation("DynamoDB_20120810.DescribeTable"), None);
        assert_eq!(operation("DynamoDBStreams_20120810.GetRecords"), None);
    }

    #[test]
    fn rewrite_asks_for_index_capacity_and_keeps_everything_else() {
        // GIVEN a request that asked for TOTAL
        let body = br#"{"TableName":"t","Item":{"pk":{"S":"a"}},"ReturnConsumedCapacity":"TOTAL"}"#;
        // WHEN it passes the proxy
        let out: Value = serde_json::from_slice(&rewrite_request(body).unwrap()).unwrap();
        // THEN it asks for INDEXES and is otherwise the same request
        assert_eq!(out["ReturnConsumedCapacity"], "INDEXES");
        assert_eq!(out["TableName"], "t");
        assert_eq!(out["Item"]["pk"]["S"], "a");
        let plain = rewrite_request(br#"{"TableName":"t"}"#).unwrap();
        assert!(String::from_utf8(plain).unwrap().contains("INDEXES"));
        assert_eq!(rewrite_request(b"not json"), None);
        assert_eq!(rewrite_request(b"[1,2]"), None);
    }

    #[test]
    fn single_item_capacity_splits_table_and_gsi() {
        // Shapes as DynamoDB Local returns them.
        let put = br#"{"ConsumedCapacity":{"TableName":"t","CapacityUnits":2.0,"Table":{"CapacityUnits":1.0},"GlobalSecondaryIndexes":{"GSI1":{"CapacityUnits":1.0}}}}"#;
        assert_eq!(
            consumed(put),
            Capacity {
                total: 2.0,
                table: 1.0,
                gsi: 1.0
            }
        );
        let update = br#"{"ConsumedCapacity":{"TableName":"t","CapacityUnits":1.0,"Table":{"CapacityUnits":1.0}}}"#;
        assert_eq!(consumed(update).table, 1.0);
        assert_eq!(consumed(update).gsi, 0.0);
    }

    #[test]
    fn batch_and_transaction_capacity_lists_are_summed() {
        let batch = br#"{"UnprocessedItems":{},"ConsumedCapacity":[{"TableName":"t","CapacityUnits":3.0,"Table":{"CapacityUnits":2.0},"GlobalSecondaryIndexes":{"GSI1":{"CapacityUnits":1.0}}},{"TableName":"u","CapacityUnits":1.0}]}"#;
        assert_eq!(
            consumed(batch),
            Capacity {
                total: 4.0,
                table: 3.0,
                gsi: 1.0
            }
        );
        let tx = br#"{"ConsumedCapacity":[{"TableName":"t","CapacityUnits":8.0,"WriteCapacityUnits":8.0,"Table":{"WriteCapacityUnits":4.0,"CapacityUnits":4.0},"GlobalSecondaryIndexes":{"GSI1":{"WriteCapacityUnits":4.0,"CapacityUnits":4.0}}}]}"#;
        assert_eq!(
            consumed(tx),
            Capacity {
                total: 8.0,
                table: 4.0,
                gsi: 4.0
            }
        );
        assert_eq!(consumed(b"{}"), Capacity::default());
        let by_index = consumed_by_index(batch);
        assert_eq!(by_index.get("GSI1"), Some(&1.0));
        assert_eq!(by_index.len(), 1);
        let mut t = MeterTotals::default();
        t.record("TransactWriteItems", StatusCode::OK, tx, 1.0);
        t.record("Query", StatusCode::OK, br#"{"ConsumedCapacity":{"CapacityUnits":0.5,"GlobalSecondaryIndexes":{"GSI2":{"CapacityUnits":0.5}}}}"#, 1.0);
        assert_eq!(t.gsi_by_index(Kind::Write).get("GSI1"), Some(&4.0));
        assert_eq!(t.gsi_by_index(Kind::Read).get("GSI2"), Some(&0.5));
    }

    #[test]
    fn reads_that_find_nothing_cost_the_minimum_that_dynamodb_local_leaves_out() {
        let empty = br#"{"Items":[],"Count":0,"ConsumedCapacity":{"CapacityUnits":0.0}}"#;
        let gsi_query = br#"{"TableName":"t","IndexName":"GSI2"}"#;
        assert_eq!(unreported_read_minimum("Query", gsi_query, empty), 0.5);
        let strong = br#"{"TableName":"t","ConsistentRead":true}"#;
        assert_eq!(unreported_read_minimum("Query", strong, empty), 1.0);
        let found = br#"{"Items":[{}],"Count":1,"ConsumedCapacity":{"CapacityUnits":1.0}}"#;
        assert_eq!(unreported_read_minimum("Query", strong, found), 0.0);
        let batch = br#"{"RequestItems":{"t":{"Keys":[{},{},{}],"ConsistentRead":true}}}"#;
        let one = br#"{"Responses":{"t":[{}]},"UnprocessedKeys":{},"ConsumedCapacity":[{"CapacityUnits":1.0}]}"#;
        assert_eq!(unreported_read_minimum("BatchGetItem", batch, one), 2.0);
        let missing = br#"{"ConsumedCapacity":{"CapacityUnits":0.0}}"#;
        assert_eq!(unreported_read_minimum("GetItem", gsi_query, missing), 0.5);
        assert_eq!(unreported_read_minimum("PutItem", strong, missing), 0.0);
    }

    #[test]
    fn failed_conditions_are_counted_apart_from_units() {
        let mut t = MeterTotals::default();
        t.record(
            "UpdateItem",
            StatusCode::OK,
            br#"{"ConsumedCapacity":{"CapacityUnits":1.0,"Table":{"CapacityUnits":1.0}}}"#,
            1.0,
        );
        t.record(
            "UpdateItem",
            StatusCode::BAD_REQUEST,
            br#"{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException"}"#,
            1.0,
        );
        t.record(
            "Query",
            StatusCode::OK,
            br#"{"ConsumedCapacity":{"CapacityUnits":0.5}}"#,
            1.0,
        );
        let (w, calls, failed) = t.writes();
        assert_eq!((w.total, calls, failed), (1.0, 2, 1));
        assert_eq!(t.reads().0.total, 0.5);
    }
}
