//! API latency per route against DynamoDB Local, and the handler's own time.
//!
//! `cargo run -p tidemark-api --example bench [-- <requests per route>]`
//!
//! For every route: p50/p99 of the whole request (handler + DynamoDB Local), and p50/p99
//! of the handler's own time = request time minus the wall-clock time during which at least
//! one store call was in flight (parallel shard queries count once). SDK request building
//! and response parsing count as store time. A benchmark, not a test: it asserts nothing
//! about speed. Debug builds are several times slower than the release Lambda binary.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tidemark_api::memory::MemoryStore;
use tidemark_api::store::{
    AlertOutcome, AlertOwner, AlertWriter, CallCounter, DeviceRegistration, DeviceWriter, GetStore,
    LayoutWriter, Page, PutDevice, QuerySpec, QueryStore, TagWriter,
};
use tidemark_api::{ApiConfig, App, DynamoStore};
use tidemark_schema::{
    AggregateItem, AlertId, AlertItem, AlertRule, AlertState, DeviceId, DeviceItem, DeviceStatus,
    DeviceType, Key, LatestReading, LayoutHistory, LayoutHistoryItem, MetricName, Period, Reading,
    ReadingItem, Severity, Stats, Timestamp, keys,
};
use tidemark_store::{Item, StoreError};
use tidemark_testkit::TestTable;

/// Wall-clock time with at least one store call in flight.
#[derive(Default)]
struct Busy {
    in_flight: usize,
    since: Option<Instant>,
    total: Duration,
}

struct Timed<S> {
    inner: S,
    busy: Mutex<Busy>,
}

impl<S> Timed<S> {
    fn enter(&self) {
        let mut b = self.busy.lock().unwrap();
        if b.in_flight == 0 {
            b.since = Some(Instant::now());
        }
        b.in_flight += 1;
    }
    fn exit(&self) {
        let mut b = self.busy.lock().unwrap();
        b.in_flight -= 1;
        if b.in_flight == 0 {
            let since = b.since.take().unwrap();
            b.total += since.elapsed();
        }
    }
    fn take(&self) -> Duration {
        std::mem::take(&mut self.busy.lock().unwrap().total)
    }
    async fn timed<T>(&self, f: impl std::future::Future<Output = T>) -> T {
        self.enter();
        let out = f.await;
        self.exit();
        out
    }
}

impl<S: QueryStore + Sync> QueryStore for Timed<S> {
    async fn query(
        &self,
        spec: &QuerySpec,
        start: Option<Item>,
        limit: i32,
    ) -> Result<Page, StoreError> {
        self.timed(self.inner.query(spec, start, limit)).await
    }
}

impl<S: GetStore + Sync> GetStore for Timed<S> {
    async fn get(&self, key: Key, consistent: bool) -> Result<Option<Item>, StoreError> {
        self.timed(self.inner.get(key, consistent)).await
    }
    async fn batch_get(&self, keys: Vec<Key>) -> Result<Vec<Item>, StoreError> {
        self.timed(self.inner.batch_get(keys)).await
    }
}

impl<S: DeviceWriter + Sync> DeviceWriter for Timed<S> {
    async fn put_device(
        &self,
        reg: &DeviceRegistration,
        now: Timestamp,
    ) -> Result<PutDevice, StoreError> {
        self.timed(self.inner.put_device(reg, now)).await
    }
}

impl<S: AlertWriter + Sync> AlertWriter for Timed<S> {
    async fn acknowledge(
        &self,
        d: &AlertOwner,
        a: &AlertId,
        now: Timestamp,
    ) -> Result<AlertOutcome, StoreError> {
        self.timed(self.inner.acknowledge(d, a, now)).await
    }
    async fn snooze(
        &self,
        d: &AlertOwner,
        a: &AlertId,
        until: Timestamp,
    ) -> Result<AlertOutcome, StoreError> {
        self.timed(self.inner.snooze(d, a, until)).await
    }
    async fn unsnooze(&self, d: &AlertOwner, a: &AlertId) -> Result<AlertOutcome, StoreError> {
        self.timed(self.inner.unsnooze(d, a)).await
    }
}

impl<S: CallCounter + Sync> CallCounter for Timed<S> {
    async fn count_call(
        &self,
        count: &tidemark_schema::CallerRateItem,
        limit: u32,
    ) -> Result<bool, StoreError> {
        self.timed(self.inner.count_call(count, limit)).await
    }
}

impl<S: LayoutWriter + Sync> LayoutWriter for Timed<S> {
    async fn replace_layouts(
        &self,
        d: &DeviceId,
        h: &LayoutHistory,
        version: u64,
    ) -> Result<bool, StoreError> {
        self.timed(self.inner.replace_layouts(d, h, version)).await
    }
}

impl<S: TagWriter + Sync> TagWriter for Timed<S> {
    async fn replace_tags(
        &self,
        d: &DeviceId,
        h: &tidemark_schema::TagHistory,
        version: u64,
    ) -> Result<bool, StoreError> {
        self.timed(self.inner.replace_tags(d, h, version)).await
    }
    async fn write_tag_index(
        &self,
        puts: &[tidemark_schema::TagIndexItem],
        deletes: &[Key],
    ) -> Result<(), StoreError> {
        self.timed(self.inner.write_tag_index(puts, deletes)).await
    }
}

fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

fn items<T: serde::Serialize>(out: &mut Vec<Item>, v: &[T]) {
    out.extend(v.iter().map(|x| tidemark_store::to_item(x).unwrap()));
}

fn device(id: &str, at: Timestamp) -> DeviceItem {
    let mut d = DeviceItem::new(DeviceId::new(id).unwrap(), DeviceStatus::Active, at);
    d.name = Some(format!("Device {id}"));
    d.device_type = Some(DeviceType::Sensor);
    d.firmware = Some("2.1.0".into());
    d.latest = Some(LatestReading {
        timestamp: at,
        metrics: [(MetricName::new("temperature").unwrap(), 21.5)]
            .into_iter()
            .collect(),
    });
    d
}

fn reading(id: &str, at: Timestamp, i: usize) -> Reading {
    Reading {
        device_id: DeviceId::new(id).unwrap(),
        timestamp: at,
        metrics: [
            ("temperature", 20.0 + (i % 50) as f64 / 10.0),
            ("humidity", 45.0),
            ("battery", 87.0),
        ]
        .into_iter()
        .map(|(k, v)| (MetricName::new(k).unwrap(), v))
        .collect(),
        metadata: None,
    }
}

/// A fleet: 100 devices, one with 3,600 readings (one a second), a hot one with 4 shards,
/// 24 hourly aggregates, 50 alerts.
fn fleet() -> Vec<Item> {
    let mut out = Vec::new();
    let base = ts("2026-04-20T14:00:00Z");
    let devices: Vec<DeviceItem> = (0..100)
        .map(|i| device(&format!("sensor_{i:02}"), base))
        .collect();
    items(&mut out, &devices);
    items(&mut out, &[device("hot_01", base)]);
    let plain: Vec<ReadingItem> = (0..3600)
        .map(|i| {
            ReadingItem::new(
                &reading("sensor_00", base.plus_millis(i as i64 * 1000).unwrap(), i),
                None,
                30,
            )
        })
        .collect();
    items(&mut out, &plain);
    let history = LayoutHistory::default()
        .with_change(base.minus_millis(1).unwrap(), 4)
        .unwrap();
    items(
        &mut out,
        &[LayoutHistoryItem::new(
            &DeviceId::new("hot_01").unwrap(),
            history.clone(),
        )],
    );
    let hot: Vec<ReadingItem> = (0..3600)
        .map(|i| {
            let at = base.plus_millis(i as i64 * 1000).unwrap();
            ReadingItem::new(&reading("hot_01", at, i), history.partition_at(at), 30)
        })
        .collect();
    items(&mut out, &hot);
    let dev0 = DeviceId::new("sensor_00").unwrap();
    let aggs: Vec<AggregateItem> = (0..24)
        .map(|h| {
            let at = ts("2026-04-20T00:00:00Z")
                .plus_millis(h * 3_600_000)
                .unwrap();
            let k = AggregateItem::key_for(&dev0, Period::Hourly.bucket(at));
            let mut s = Stats::at(at, 20.0);
            s.merge(&Stats::at(at.plus_millis(60_000).unwrap(), 23.0));
            AggregateItem {
                pk: k.pk,
                sk: k.sk,
                metrics: [("temperature", s.clone()), ("humidity", s)]
                    .into_iter()
                    .map(|(m, s)| (MetricName::new(m).unwrap(), s))
                    .collect(),
                first_at: at,
                last_at: at,
                applied: Default::default(),
                marks: Default::default(),
                marked_at: 0,
                from_table: false,
                folded: Default::default(),
                version: 1,
                sealed: false,
                open: false,
            }
        })
        .collect();
    items(&mut out, &aggs);
    let alerts: Vec<AlertItem> = (0..50)
        .map(|i| {
            let dev = DeviceId::new(&format!("sensor_{:02}", i)).unwrap();
            let m = MetricName::new("temperature").unwrap();
            let at = base.plus_millis(i as i64 * 60_000).unwrap();
            let id = AlertId::for_breach(at, &m, AlertRule::Max);
            AlertItem {
                pk: keys::device_pk(&dev),
                sk: keys::alert_sk(&id),
                gsi1pk: Some(keys::severity_gsi1pk(
                    Severity::Critical,
                    &keys::device_pk(&dev),
                )),
                gsi1sk: Some(keys::alert_gsi1sk(&id)),
                device_id: dev,
                alert_id: id,
                metric: Some(m),
                rule: AlertRule::Max,
                rule_spec: None,
                severity: Severity::Critical,
                state: AlertState::Open,
                message: "temperature above 30".into(),
                value: 31.0,
                threshold: 30.0,
                breach_count: 1,
                opened_at: at,
                last_breach_at: at,
                acknowledged_at: None,
                resolved_at: None,
                snoozed_until: None,
                tags: Default::default(),
            }
        })
        .collect();
    items(&mut out, &alerts);
    out
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args.iter().find_map(|s| s.parse().ok()).unwrap_or(200);
    let config = ApiConfig::new("bench").with_now(ts("2026-04-20T15:00:00Z"));
    if args.iter().any(|a| a == "--memory") {
        // The handler alone: the same fleet in the in-memory store (whose own work is
        // included, so this is an upper bound of the handler's time).
        let store = MemoryStore::new();
        for item in fleet() {
            store
                .put(item)
                .expect("a fleet item fits in DynamoDB's item limit");
        }
        let store = Timed {
            inner: store,
            busy: Mutex::new(Busy::default()),
        };
        run(&App::with_store(store, config), n, "in-memory store").await;
    } else {
        let t = TestTable::new("api-bench").await;
        t.put_all(fleet()).await;
        let store = Timed {
            inner: DynamoStore::new(t.client.clone(), t.name.clone()),
            busy: Mutex::new(Busy::default()),
        };
        let mut config = config;
        config.table_name = t.name.clone();
        run(&App::with_store(store, config), n, "DynamoDB Local").await;
    }
}

async fn run<S: tidemark_api::Store>(app: &App<Timed<S>>, n: usize, against: &str) {
    let ids: Vec<String> = (0..100).map(|i| format!("sensor_{i:02}")).collect();
    let latest_many = format!("/latest?ids={}", ids.join(","));
    let routes: Vec<(&str, &str, String, &str)> = vec![
        ("GET /devices/{id}", "GET", "/devices/sensor_01".into(), ""),
        ("PUT /devices/{id}", "PUT", "/devices/sensor_99".into(), r#"{"name":"Bench","type":"sensor","status":"active","firmware":"2.1.0","thresholds":{"temperature":{"max":30,"severity":"critical"}}}"#),
        ("GET /devices?status (100)", "GET", "/devices?status=active&limit=100".into(), ""),
        ("GET readings (100 of 3600)", "GET", "/devices/sensor_00/readings?limit=100".into(), ""),
        ("GET readings (1000)", "GET", "/devices/sensor_00/readings?limit=1000&order=desc".into(), ""),
        ("GET readings 4 shards (100)", "GET", "/devices/hot_01/readings?limit=100".into(), ""),
        ("GET readings/latest", "GET", "/devices/sensor_00/readings/latest".into(), ""),
        ("GET readings/latest 4 shards", "GET", "/devices/hot_01/readings/latest".into(), ""),
        ("GET /latest?ids= (100)", "GET", latest_many, ""),
        ("GET /devices/{id}/alerts", "GET", "/devices/sensor_01/alerts".into(), ""),
        ("GET /alerts?severity&state", "GET", "/alerts?severity=critical&state=open".into(), ""),
        ("GET aggregates hourly (24)", "GET", "/devices/sensor_00/aggregates?period=hourly&from=2026-04-20T00:00:00Z&to=2026-04-20T23:00:00Z".into(), ""),
        ("GET /quarantine", "GET", "/quarantine?day=2026-04-20".into(), ""),
        ("POST ack", "POST", "/devices/sensor_01/alerts/20260420T140100000000Z-temperature-max/ack".into(), ""),
        ("POST snooze", "POST", "/devices/sensor_01/alerts/20260420T140100000000Z-temperature-max/snooze".into(), r#"{"until":"2026-04-20T16:00:00Z"}"#),
        ("DELETE snooze", "DELETE", "/devices/sensor_01/alerts/20260420T140100000000Z-temperature-max/snooze".into(), ""),
        ("GET unknown route (404)", "GET", "/nope".into(), ""),
    ];
    println!("{n} requests per route, {against}, debug build\n");
    println!(
        "{:<30} {:>9} {:>9} {:>11} {:>11}",
        "route", "p50 ms", "p99 ms", "own p50 µs", "own p99 µs"
    );
    for (name, method, uri, body) in routes {
        let mut total = Vec::with_capacity(n);
        let mut own = Vec::with_capacity(n);
        for i in 0..n + 10 {
            let req = http::Request::builder()
                .method(method)
                .uri(uri.as_str())
                .body(if body.is_empty() {
                    lambda_http::Body::Empty
                } else {
                    lambda_http::Body::Text(body.to_owned())
                })
                .unwrap();
            app.store().take();
            let start = Instant::now();
            let resp = app.handle(req).await;
            let elapsed = start.elapsed();
            let store_time = app.store().take();
            assert!(resp.status().as_u16() < 500, "{name}: {}", resp.status());
            if i >= 10 {
                total.push(elapsed);
                own.push(elapsed.saturating_sub(store_time));
            }
        }
        total.sort();
        own.sort();
        println!(
            "{:<30} {:>9.2} {:>9.2} {:>11} {:>11}",
            name,
            pct(&total, 0.5).as_secs_f64() * 1e3,
            pct(&total, 0.99).as_secs_f64() * 1e3,
            pct(&own, 0.5).as_micros(),
            pct(&own, 0.99).as_micros(),
        );
    }
}
