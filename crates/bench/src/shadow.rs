//! Metering PartiQL inserts, which DynamoDB Local leaves unmetered.
//!
//! DynamoDB Local answers `BatchExecuteStatement` without `ConsumedCapacity`, whatever the
//! request asks; AWS meters each statement like the single-item call it stands for. So the
//! meter keeps every item a batch inserted and, when its totals are read, puts each into an
//! empty *shadow* table (same keys and indexes, created on first use) with
//! `ReturnConsumedCapacity: INDEXES`, and counts what DynamoDB Local reports for that put:
//! the units of writing that item new, by DynamoDB Local's own accounting rather than by a
//! size formula of ours. The shadow item is deleted again, so every put finds its key free.
//! This happens outside the timed handler calls.
//!
//! Only statements of the form Tidemark sends are understood:
//! `INSERT INTO "table" VALUE {'name': ?, ...}` with one parameter per name.

use std::collections::HashMap;
use std::net::SocketAddr;

use http::HeaderMap;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::body::Bytes;
use serde_json::{Map, Value, json};

use crate::capacity::{Capacity, consumed};

/// What one `BatchExecuteStatement` exchange did.
#[derive(Debug, Default, PartialEq)]
pub struct BatchOutcome {
    /// Items inserted, by table, when the response carried no capacity to count instead.
    pub unmetered: Vec<(String, Map<String, Value>)>,
    /// Statements refused because the key was taken (billed by AWS like a failed condition).
    pub taken: u64,
    /// Statements that failed otherwise, or that this module could not read.
    pub other_errors: u64,
}

/// The table and attribute names of an INSERT statement as Tidemark writes them.
pub fn parse_insert(statement: &str) -> Option<(String, Vec<String>)> {
    let rest = statement.strip_prefix("INSERT INTO \"")?;
    let end = rest.find('"')?;
    let table = rest[..end].to_owned();
    let mut fields = rest[end + 1..]
        .trim_start()
        .strip_prefix("VALUE {")?
        .chars();
    let mut names = Vec::new();
    loop {
        match fields.next()? {
            '\'' => {
                let mut name = String::new();
                loop {
                    match fields.next()? {
                        '\'' if fields.clone().next() == Some('\'') => {
                            fields.next();
                            name.push('\'');
                        }
                        '\'' => break,
                        c => name.push(c),
                    }
                }
                names.push(name);
            }
            '}' => return Some((table, names)),
            _ => {}
        }
    }
}

/// Reads a `BatchExecuteStatement` request and its (successful) response.
pub fn batch_outcome(request: &[u8], response: &[u8]) -> BatchOutcome {
    let mut out = BatchOutcome::default();
    let (Ok(req), Ok(resp)) = (
        serde_json::from_slice::<Value>(request),
        serde_json::from_slice::<Value>(response),
    ) else {
        out.other_errors += 1;
        return out;
    };
    let statements = req["Statements"].as_array().cloned().unwrap_or_default();
    let answers = resp["Responses"].as_array().cloned().unwrap_or_default();
    let metered = resp.get("ConsumedCapacity").is_some();
    for (s, a) in statements.iter().zip(answers.iter()) {
        match a.pointer("/Error/Code").and_then(Value::as_str) {
            Some("DuplicateItem" | "ConditionalCheckFailed") => out.taken += 1,
            Some(_) => out.other_errors += 1,
            None if metered => {}
            None => {
                let parsed = s["Statement"].as_str().and_then(parse_insert);
                let params = s["Parameters"].as_array();
                match (parsed, params) {
                    (Some((table, names)), Some(p)) if p.len() == names.len() => {
                        out.unmetered
                            .push((table, names.into_iter().zip(p.iter().cloned()).collect()));
                    }
                    _ => out.other_errors += 1,
                }
            }
        }
    }
    out
}

/// Puts items into shadow tables to learn their write units (see the module docs).
pub struct Shadow {
    upstream: SocketAddr,
    /// Tables whose shadow exists, with their key attribute names.
    keys: HashMap<String, Vec<String>>,
}

fn shadow_name(table: &str) -> String {
    format!("{table}-meter-shadow")
}

impl Shadow {
    pub fn new(upstream: SocketAddr) -> Self {
        Shadow {
            upstream,
            keys: HashMap::new(),
        }
    }

    async fn call(&self, headers: &HeaderMap, op: &str, body: Value) -> Result<Value, String> {
        let stream = tokio::net::TcpStream::connect(self.upstream)
            .await
            .map_err(|e| e.to_string())?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let body = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
        let mut req = Request::post("/")
            .header("host", self.upstream.to_string())
            .header("content-type", "application/x-amz-json-1.0")
            .header("x-amz-target", format!("DynamoDB_20120810.{op}"))
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        // The caller's credentials name the DynamoDB Local database to use.
        for h in ["authorization", "x-amz-date", "x-amz-security-token"] {
            if let Some(v) = headers.get(h) {
                req.headers_mut().insert(h, v.clone());
            }
        }
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        let ok = resp.status().is_success();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
        if ok { Ok(v) } else { Err(format!("{op}: {v}")) }
    }

    /// Creates `table`'s shadow if need be; its key attribute names.
    async fn ensure(&mut self, headers: &HeaderMap, table: &str) -> Result<Vec<String>, String> {
        if let Some(k) = self.keys.get(table) {
            return Ok(k.clone());
        }
        let d = self
            .call(headers, "DescribeTable", json!({ "TableName": table }))
            .await?;
        let t = &d["Table"];
        let mut create = json!({
            "TableName": shadow_name(table),
            "KeySchema": t["KeySchema"],
            "AttributeDefinitions": t["AttributeDefinitions"],
            "BillingMode": "PAY_PER_REQUEST",
        });
        if let Some(gsis) = t["GlobalSecondaryIndexes"].as_array() {
            create["GlobalSecondaryIndexes"] = gsis
                .iter()
                .map(|g| {
                    json!({
                        "IndexName": g["IndexName"],
                        "KeySchema": g["KeySchema"],
                        "Projection": g["Projection"],
                    })
                })
                .collect();
        }
        if let Err(e) = self.call(headers, "CreateTable", create).await
            && !e.contains("ResourceInUseException")
        {
            return Err(e);
        }
        let keys: Vec<String> = t["KeySchema"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|k| k["AttributeName"].as_str().map(str::to_owned))
            .collect();
        self.keys.insert(table.to_owned(), keys.clone());
        Ok(keys)
    }

    /// The units of writing each item new into its table, by DynamoDB Local's accounting.
    pub async fn measure(
        &mut self,
        headers: &HeaderMap,
        items: Vec<(String, Map<String, Value>)>,
    ) -> Result<Capacity, String> {
        let mut sum = Capacity::default();
        for (table, item) in items {
            let key: Map<String, Value> = self
                .ensure(headers, &table)
                .await?
                .into_iter()
                .filter_map(|n| item.get(&n).map(|v| (n, v.clone())))
                .collect();
            let put = self
                .call(
                    headers,
                    "PutItem",
                    json!({
                        "TableName": shadow_name(&table),
                        "Item": item,
                        "ReturnConsumedCapacity": "INDEXES",
                    }),
                )
                .await?;
            let units = consumed(&serde_json::to_vec(&put).map_err(|e| e.to_string())?);
            sum.total += units.total;
            sum.table += units.table;
            sum.gsi += units.gsi;
            self.call(
                headers,
                "DeleteItem",
                json!({ "TableName": shadow_name(&table), "Key": key }),
            )
            .await?;
        }
        Ok(sum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_statements_give_their_table_and_names_in_order() {
        assert_eq!(
            parse_insert("INSERT INTO \"tide-mark\" VALUE {'it''s': ?, 'pk': ?}"),
            Some(("tide-mark".into(), vec!["it's".into(), "pk".into()]))
        );
        assert_eq!(parse_insert("SELECT * FROM \"t\""), None);
        assert_eq!(parse_insert("INSERT INTO \"t\" VALUE {'a': ?"), None);
    }

    #[test]
    fn inserted_items_are_kept_for_metering_and_refusals_counted() {
        let req = json!({"Statements": [
            {"Statement": "INSERT INTO \"t\" VALUE {'pk': ?, 'v': ?}",
             "Parameters": [{"S": "a"}, {"N": "1"}]},
            {"Statement": "INSERT INTO \"t\" VALUE {'pk': ?}", "Parameters": [{"S": "b"}]},
            {"Statement": "INSERT INTO \"t\" VALUE {'pk': ?}", "Parameters": [{"S": "c"}]},
        ]});
        let resp = json!({"Responses": [
            {"TableName": "t"},
            {"TableName": "t", "Error": {"Code": "DuplicateItem", "Message": "taken"}},
            {"TableName": "t", "Error": {"Code": "ValidationError", "Message": "too big"}},
        ]});
        let out = batch_outcome(
            &serde_json::to_vec(&req).unwrap(),
            &serde_json::to_vec(&resp).unwrap(),
        );
        assert_eq!((out.taken, out.other_errors), (1, 1));
        assert_eq!(out.unmetered.len(), 1);
        assert_eq!(out.unmetered[0].0, "t");
        assert_eq!(out.unmetered[0].1["v"], json!({"N": "1"}));
        // A response that carries capacity (as AWS's does) is counted from it instead.
        let mut metered = resp.clone();
        metered["ConsumedCapacity"] = json!([{"TableName": "t", "CapacityUnits": 1.0}]);
        let out = batch_outcome(
            &serde_json::to_vec(&req).unwrap(),
            &serde_json::to_vec(&metered).unwrap(),
        );
        assert!(out.unmetered.is_empty());
    }
}
