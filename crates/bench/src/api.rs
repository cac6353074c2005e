//! API latency per route: `App::handle` in process over a populated table, so the figure is
//! the handler plus its DynamoDB round trips, without API Gateway or Lambda in front.

use std::time::Instant;

use lambda_http::{Body, Request};
use serde::Serialize;
use tidemark_api::{ApiConfig, App};
use tidemark_schema::Timestamp;

use crate::BenchError;

#[derive(Debug, Clone, Serialize)]
pub struct RouteLatency {
    pub route: String,
    pub requests: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Responses by status code, e.g. `{"200": 300}`.
    pub statuses: std::collections::BTreeMap<u16, usize>,
}

/// The nearest-rank percentile of sorted `v`.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// What to ask of a route for request `i`.
pub struct RouteCase {
    pub route: &'static str,
    pub make: Box<dyn Fn(usize) -> (http::Method, String, Option<String>) + Send + Sync>,
}

/// The routes of docs/design.md §6 that read, plus device registration, over devices `ids` whose
/// readings span `[from, to)`.
pub fn cases(ids: Vec<String>, from: Timestamp, to: Timestamp) -> Vec<RouteCase> {
    let ids = std::sync::Arc::new(ids);
    let quarter = from.plus_millis(15 * 60_000).unwrap_or(to);
    let (f, q, t) = (from.to_string(), quarter.to_string(), to.to_string());
    let day = from.day().to_string();
    let batch = ids.iter().take(50).cloned().collect::<Vec<_>>().join(",");
    // (route, method, path and body for device `d` and request `i`)
    type Make = Box<dyn Fn(&str, usize) -> (String, Option<String>) + Send + Sync>;
    let get = http::Method::GET;
    let table: Vec<(&'static str, http::Method, Make)> = vec![
        (
            "GET /devices/{id}",
            get.clone(),
            Box::new(|d, _| (format!("/devices/{d}"), None)),
        ),
        (
            "GET /devices?status=active",
            get.clone(),
            Box::new(|_, _| ("/devices?status=active&limit=100".to_owned(), None)),
        ),
        (
            "GET /devices/{id}/readings (15 min, limit 100)",
            get.clone(),
            Box::new(move |d, _| {
                (
                    format!("/devices/{d}/readings?from={f}&to={q}&limit=100"),
                    None,
                )
            }),
        ),
        (
            "GET /devices/{id}/readings/latest",
            get.clone(),
            Box::new(|d, _| (format!("/devices/{d}/readings/latest"), None)),
        ),
        (
            "GET /latest?ids= (50 devices)",
            get.clone(),
            Box::new(move |_, _| (format!("/latest?ids={batch}"), None)),
        ),
        (
            "GET /devices/{id}/alerts",
            get.clone(),
            Box::new(|d, _| (format!("/devices/{d}/alerts"), None)),
        ),
        (
            "GET /alerts?severity=critical&state=open",
            get.clone(),
            Box::new(|_, _| ("/alerts?severity=critical&state=open".to_owned(), None)),
        ),
        (
            "GET /devices/{id}/aggregates?period=hourly",
            get.clone(),
            Box::new(move |d, _| {
                let from = from.to_string();
                (
                    format!("/devices/{d}/aggregates?period=hourly&from={from}&to={t}"),
                    None,
                )
            }),
        ),
        (
            "GET /quarantine?day=",
            get,
            Box::new(move |_, _| (format!("/quarantine?day={day}"), None)),
        ),
        (
            "PUT /devices/{id}",
            http::Method::PUT,
            Box::new(|d, i| {
                (
                    format!("/devices/{d}"),
                    Some(format!(r#"{{"name":"bench device {i}","type":"sensor"}}"#)),
                )
            }),
        ),
    ];
    table
        .into_iter()
        .map(|(route, method, make)| {
            let ids = ids.clone();
            RouteCase {
                route,
                make: Box::new(move |i| {
                    let d = &ids[(i * 7919) % ids.len().max(1)];
                    let (path, body) = make(d, i);
                    (method.clone(), path, body)
                }),
            }
        })
        .collect()
}

/// Sends `per_route` requests to each case, one at a time, and times each.
pub async fn measure(
    client: aws_sdk_dynamodb::Client,
    table: &str,
    cases: &[RouteCase],
    per_route: usize,
) -> Result<Vec<RouteLatency>, BenchError> {
    let app = App::new(client, ApiConfig::new(table));
    let mut out = Vec::new();
    for c in cases {
        let mut times = Vec::with_capacity(per_route);
        let mut statuses = std::collections::BTreeMap::new();
        // A few unmeasured requests warm connections and caches, as a warm Lambda has them.
        for i in 0..(per_route + 5) {
            let (method, uri, body) = (c.make)(i);
            let req: Request = http::Request::builder()
                .method(method)
                .uri(uri)
                .body(body.map_or(Body::Empty, Body::Text))
                .map_err(|e| BenchError::Other(e.to_string()))?;
            let t = Instant::now();
            let resp = app.handle(req).await;
            let ms = t.elapsed().as_secs_f64() * 1_000.0;
            if i >= 5 {
                times.push(ms);
                *statuses.entry(resp.status().as_u16()).or_insert(0) += 1;
            }
        }
        times.sort_by(f64::total_cmp);
        out.push(RouteLatency {
            route: c.route.to_owned(),
            requests: times.len(),
            p50_ms: percentile(&times, 50.0),
            p99_ms: percentile(&times, 99.0),
            max_ms: times.last().copied().unwrap_or(0.0),
            statuses,
        });
    }
    Ok(out)
}

/// Registers `id` (`PUT /devices/{id}`): the device routes answer for registered devices
/// only (on AWS the aggregator registers a device with its first reading).
pub async fn register(app: &App, id: &tidemark_schema::DeviceId) -> Result<(), BenchError> {
    register_as(app, id, r#"{"name":"bench"}"#).await
}

/// `PUT /devices/{id}` with `body` through the handler.
pub async fn register_as(
    app: &App,
    id: &tidemark_schema::DeviceId,
    body: &str,
) -> Result<(), BenchError> {
    let req: Request = http::Request::builder()
        .method(http::Method::PUT)
        .uri(format!("/devices/{id}"))
        .body(Body::Text(body.into()))
        .map_err(|e| BenchError::Other(e.to_string()))?;
    let resp = app.handle(req).await;
    if !resp.status().is_success() {
        return Err(BenchError::Other(format!(
            "registering {id}: {}",
            resp.status()
        )));
    }
    Ok(())
}

/// Every page of the list route `uri` (which has a query already) through the handler,
/// following the cursor to the end: (items, pages).
pub async fn read_pages(app: &App, uri: &str) -> Result<(u64, u64), BenchError> {
    let (items, pages) = read_rows(app, uri).await?;
    Ok((items.len() as u64, pages))
}

/// [`read_pages`], keeping the items.
pub async fn read_rows(app: &App, uri: &str) -> Result<(Vec<serde_json::Value>, u64), BenchError> {
    let mut cursor: Option<String> = None;
    let (mut items, mut pages) = (Vec::new(), 0u64);
    loop {
        let mut u = uri.to_owned();
        if let Some(c) = &cursor {
            u.push_str(&format!("&cursor={c}"));
        }
        let req: Request = http::Request::builder()
            .uri(u)
            .body(Body::Empty)
            .map_err(|e| BenchError::Other(e.to_string()))?;
        let resp = app.handle(req).await;
        let mut body: serde_json::Value = match resp.body() {
            Body::Text(t) => serde_json::from_str(t)?,
            Body::Binary(b) => serde_json::from_slice(b)?,
            _ => serde_json::Value::Null,
        };
        if !resp.status().is_success() {
            return Err(BenchError::Other(format!("{uri}: {body}")));
        }
        pages += 1;
        if let serde_json::Value::Array(page) = body["items"].take() {
            items.extend(page);
        }
        match body["cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return Ok((items, pages)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&[3.0], 99.0), 3.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }
}
