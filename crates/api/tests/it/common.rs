//! Shared helpers: the docs/design.md §9 sample data, items written straight through the schema
//! types, and requests built the way the local server builds them (plain `http::Request`).

#![allow(dead_code)]

use std::collections::BTreeMap;

use lambda_http::{Body, Request};
use serde_json::Value;
use tidemark_api::{ApiConfig, App};
use tidemark_schema::packed::SlotReadings;
use tidemark_schema::{
    AggregateItem, AlertId, AlertItem, AlertRule, DeviceId, DeviceItem, DeviceStatus, DeviceType,
    MetricName, Period, Reading, ReadingItem, Stats, Timestamp,
};
use tidemark_schema::{LayoutHistory, keys};
use tidemark_store::retry::RetryPolicy;
use tidemark_store::write::slots::{Content, SlotKey, SlotWriter};
use tidemark_testkit::TestTable;

pub fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

pub fn dev(s: &str) -> DeviceId {
    DeviceId::new(s).unwrap()
}

pub fn metric(s: &str) -> MetricName {
    MetricName::new(s).unwrap()
}

/// "Now" for every test: an hour after the sample readings, so they are neither in the
/// future nor expired.
pub fn now() -> Timestamp {
    ts("2026-04-20T15:00:00Z")
}

/// Logs of the handler (errors carry the store's details there) in the test output.
pub fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter(tracing_subscriber::EnvFilter::new("tidemark_api=info"))
        .try_init();
}

pub fn app(t: &TestTable) -> App {
    init_logs();
    App::new(t.client.clone(), ApiConfig::new(&t.name).with_now(now()))
}

/// [`app`] with the clock at `now` (RFC 3339).
pub fn at_clock(t: &TestTable, now: &str) -> App {
    init_logs();
    App::new(t.client.clone(), ApiConfig::new(&t.name).with_now(ts(now)))
}

pub async fn put<T: serde::Serialize>(t: &TestTable, v: &T) {
    t.client
        .put_item()
        .table_name(&t.name)
        .set_item(Some(tidemark_store::to_item(v).unwrap()))
        .send()
        .await
        .unwrap();
}

/// Writes many entities through the store's batch writer ([`TestTable::put_all`]).
pub async fn put_all<T: serde::Serialize>(t: &TestTable, items: &[T]) {
    t.put_all(
        items
            .iter()
            .map(|v| tidemark_store::to_item(v).unwrap())
            .collect(),
    )
    .await;
}

pub fn sample_device() -> DeviceItem {
    let mut d = DeviceItem::new(
        dev("sensor_01"),
        DeviceStatus::Active,
        ts("2026-04-01T09:00:00Z"),
    );
    d.name = Some("Warehouse Temp A".into());
    d.device_type = Some(DeviceType::Sensor);
    d.firmware = Some("2.1.0".into());
    d
}

pub fn reading(device: &str, at: Timestamp, m: &[(&str, f64)]) -> Reading {
    Reading {
        device_id: dev(device),
        timestamp: at,
        metrics: m.iter().map(|(k, v)| (metric(k), *v)).collect(),
        metadata: None,
    }
}

pub fn sample_readings() -> Vec<Reading> {
    vec![
        reading(
            "sensor_01",
            ts("2026-04-20T14:00:00Z"),
            &[("temperature", 22.4), ("humidity", 45.0), ("battery", 87.0)],
        ),
        reading(
            "sensor_01",
            ts("2026-04-20T14:01:00Z"),
            &[("temperature", 22.5), ("humidity", 44.0), ("battery", 87.0)],
        ),
    ]
}

pub fn sample_alert_id() -> AlertId {
    AlertId::for_breach(
        ts("2026-04-20T14:30:00Z"),
        &metric("temperature"),
        AlertRule::Max,
    )
}

pub fn sample_alert() -> AlertItem {
    let a = tidemark_testkit::open_alert("sensor_01");
    assert_eq!(a.alert_id, sample_alert_id());
    a
}

pub fn aggregate(device: &str, period: Period, at: Timestamp, rs: &[Reading]) -> AggregateItem {
    let bucket = period.bucket(at);
    let k = AggregateItem::key_for(&dev(device), bucket);
    let mut metrics: BTreeMap<MetricName, Stats> = BTreeMap::new();
    for r in rs {
        for (m, v) in &r.metrics {
            metrics
                .entry(m.clone())
                .and_modify(|s| s.merge(&Stats::at(r.timestamp, *v)))
                .or_insert_with(|| Stats::at(r.timestamp, *v));
        }
    }
    AggregateItem {
        pk: k.pk,
        sk: k.sk,
        metrics,
        first_at: rs.first().unwrap().timestamp,
        last_at: rs.last().unwrap().timestamp,
        applied: BTreeMap::from([("shardId-0".into(), "100".into())]),
        marks: Default::default(),
        marked_at: 0,
        from_table: false,
        folded: Default::default(),
        version: 3,
        sealed: false,
        open: false,
    }
}

/// A table holding every row of docs/design.md §9.
pub async fn sample_table(label: &str) -> TestTable {
    let t = TestTable::new(label).await;
    put(&t, &sample_device()).await;
    for r in sample_readings() {
        put(&t, &ReadingItem::new(&r, None, 30)).await;
    }
    put(&t, &sample_alert()).await;
    let rs = sample_readings();
    put(
        &t,
        &aggregate("sensor_01", Period::Hourly, rs[0].timestamp, &rs),
    )
    .await;
    put(
        &t,
        &aggregate("sensor_01", Period::Daily, rs[0].timestamp, &rs),
    )
    .await;
    t
}

pub fn request(method: &str, uri: &str, body: &str) -> Request {
    let body = if body.is_empty() {
        Body::Empty
    } else {
        Body::Text(body.to_owned())
    };
    http::Request::builder()
        .method(method)
        .uri(uri)
        .body(body)
        .unwrap()
}

pub async fn call<S: tidemark_api::Store>(
    app: &App<S>,
    method: &str,
    uri: &str,
    body: &str,
) -> (u16, Value) {
    let resp = app.handle(request(method, uri, body)).await;
    let status = resp.status().as_u16();
    assert_eq!(
        resp.headers()["content-type"],
        "application/json",
        "{method} {uri}"
    );
    let v: Value = serde_json::from_slice(resp.body().as_ref())
        .unwrap_or_else(|e| panic!("{method} {uri}: body is not JSON: {e}"));
    (status, v)
}

pub async fn get<S: tidemark_api::Store>(app: &App<S>, uri: &str) -> (u16, Value) {
    call(app, "GET", uri, "").await
}

/// Follows cursors to the end; returns every item and the number of pages.
pub async fn walk<S: tidemark_api::Store>(app: &App<S>, uri: &str) -> (Vec<Value>, usize) {
    let mut items = Vec::new();
    let mut pages = 0;
    let mut cursor: Option<String> = None;
    loop {
        let u = match &cursor {
            None => uri.to_owned(),
            Some(c) => format!("{uri}&cursor={c}"),
        };
        let (status, body) = get(app, &u).await;
        assert_eq!(status, 200, "{u}: {body}");
        pages += 1;
        items.extend(body["items"].as_array().unwrap().iter().cloned());
        match body["cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
        assert!(pages < 10_000, "cursor never ends");
    }
    (items, pages)
}

/// The stored version of a device's shard and layout history (`None`: no item).
pub async fn layout_history_version(t: &TestTable, device: &str) -> Option<String> {
    let key = tidemark_schema::EntityKey::DeviceLayout(dev(device)).key();
    let item = t
        .client
        .get_item()
        .table_name(&t.name)
        .key("pk", aws_sdk_dynamodb::types::AttributeValue::S(key.pk))
        .key("sk", aws_sdk_dynamodb::types::AttributeValue::S(key.sk))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item?;
    item.get("version").and_then(|v| v.as_n().ok()).cloned()
}

/// Stores `readings` of `device` as `history` says: single items with the existing item
/// writes, packed ones with the slot writer, each slot in two writes (odd positions, then
/// even ones) so that small parts interleave in time.
pub async fn store(t: &TestTable, device: &str, history: &LayoutHistory, readings: &[Reading]) {
    let writer = SlotWriter {
        part_bytes: 120,
        ..SlotWriter::new(t.client.clone(), &t.name, RetryPolicy::default())
    };
    let mut singles = Vec::new();
    let mut slots: BTreeMap<(String, Timestamp), Content> = BTreeMap::new();
    for r in readings {
        let shard = history.partition_at(r.timestamp);
        match history.layout_at(r.timestamp).slot {
            None => singles.push(ReadingItem::new(r, shard, 30)),
            Some(l) => {
                let pk = keys::reading_pk(&dev(device), shard);
                let slot = slots.entry((pk, l.start_of(r.timestamp))).or_default();
                slot.readings.insert(r.timestamp, r.metrics.clone());
                if let Some(m) = &r.metadata {
                    slot.metadata
                        .insert(r.timestamp, Value::Object(m.clone()).to_string());
                }
            }
        }
    }
    put_all(t, &singles).await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    for ((pk, start), content) in slots {
        let rs = &content.readings;
        let l = history.layout_at(start.max(*rs.keys().next().unwrap()));
        let len = l.slot.unwrap();
        let ttl = len.last_of(start).ttl_after_days(30);
        let key = SlotKey { pk, start, len };
        for parity in [1, 0] {
            let half: SlotReadings = rs
                .iter()
                .enumerate()
                .filter(|(i, _)| i % 2 == parity)
                .map(|(_, (k, v))| (*k, v.clone()))
                .collect();
            let half = Content {
                metadata: content
                    .metadata
                    .iter()
                    .filter(|(at, _)| half.contains_key(at))
                    .map(|(at, m)| (*at, m.clone()))
                    .collect(),
                readings: half,
            };
            if !half.readings.is_empty() {
                writer
                    .write_content(&key, &half, ttl, deadline)
                    .await
                    .unwrap();
            }
        }
    }
}
