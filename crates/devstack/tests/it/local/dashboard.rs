//! The dashboard in a real headless Chromium (WebDriver), against the whole local pipeline
//! holding known data: readings sent through Kinesis, stored by ingest, rolled up and
//! alerted on by the aggregator, served by the API function behind the local HTTP server.
//! Screenshots go to `target/dashboard/` for people to look at.
//!
//! The stack is started once per test binary (a pipeline takes seconds to seed), on its own
//! thread and runtime so it outlives each test's runtime; its table and stream are unique to
//! this run, like every other test's.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tidemark_devstack::esm::MappingConfig;
use tidemark_devstack::pipeline::{AlertsConfig, Functions, Pipeline, PipelineConfig};
use tidemark_schema::{
    AlertId, AlertItem, AlertRule, AlertState, DeviceId, DeviceItem, DeviceStatus, EntityKey,
    MetricName, OfflineState, Period, RuleSpec, Severity, Threshold, Timestamp, keys,
};
use tidemark_testkit::browser::{Browser, screenshot_dir};
use tidemark_testkit::{TestStream, TestTable, unique_name};
use tidemark_watchdog::run::offline_alert;

use crate::common;

const THRESHOLDS: &str =
    r#"{"temperature":{"max":35,"severity":"critical"},"battery":{"min":10,"severity":"warning"}}"#;
/// Readings of the wave device: one every 10 s, more than a chart draws raw (1000).
const WAVE_READINGS: i64 = 1200;
const WAVE_STEP_MS: i64 = 10_000;
const WAIT: Duration = Duration::from_secs(60);
/// The device that went silent ten minutes before the seeding, and its offline window.
const SILENT: &str = "dash_silent";
const SILENT_WINDOW: u32 = 120;
/// The device with an open alert of every kind and rules of its own ([`seed_rule_alerts`]).
const RULED: &str = "dash_rules";
/// Its rules, as `PUT /devices/{id}` takes them: one of each kind of `rules`.
const RULES: [&str; 3] = [
    r#"{"metric":"temperature","aggregate":"avg","window":"5m","above":30,"forSeconds":600,"severity":"warning"}"#,
    r#"{"metric":"pressure","rate":"per_minute","above":5,"severity":"critical","keepFiringForSeconds":300}"#,
    r#"{"metric":"flow","unchangedForSeconds":3600}"#,
];

struct Stack {
    api: SocketAddr,
    /// The wave device's readings: (time, temperature).
    wave: Vec<(Timestamp, f64)>,
}

async fn call(addr: SocketAddr, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, addr.to_string())
        .body(Full::new(Bytes::from(
            body.map(|b| b.to_string()).unwrap_or_default(),
        )))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn wave_temperature(i: i64) -> f64 {
    // Two decimals, so what the page shows is exactly what was sent.
    ((20.0 + 6.0 * (i as f64 / 40.0).sin()) * 100.0).round() / 100.0
}

fn reading(device: &str, at: Timestamp, temperature: f64, battery: f64) -> Vec<u8> {
    json!({"deviceId": device, "timestamp": at.to_string(), "temperature": temperature,
           "battery": battery})
    .to_string()
    .into_bytes()
}

/// The records the stack is seeded with: the wave device, three devices whose newest reading
/// breaches the critical threshold (one for the fleet page, one to acknowledge, one to
/// snooze), a calm device, and three records ingest must quarantine (text, binary, and a
/// KPL aggregate's bad user record).
/// (partition key, record data) for Kinesis.
type Record = (String, Vec<u8>);

fn records(now: Timestamp) -> (Vec<Record>, Vec<(Timestamp, f64)>) {
    let start = now
        .minus_millis(WAVE_READINGS * WAVE_STEP_MS + 60_000)
        .unwrap();
    let mut out = Vec::new();
    let mut wave = Vec::new();
    for i in 0..WAVE_READINGS {
        let at = start.plus_millis(i * WAVE_STEP_MS).unwrap();
        let t = wave_temperature(i);
        wave.push((at, t));
        out.push(("dash_wave".to_owned(), reading("dash_wave", at, t, 90.0)));
    }
    for (device, last) in [
        ("dash_hot", 40.5),
        ("dash_ack", 41.0),
        ("dash_snooze", 42.0),
        ("dash_calm", 21.0),
    ] {
        for i in 0..10 {
            let at = now.minus_millis((10 - i) * 60_000).unwrap();
            let t = if i == 9 { last } else { 20.0 + i as f64 / 10.0 };
            out.push((device.to_owned(), reading(device, at, t, 80.0)));
        }
    }
    out.push((
        "dash_text".to_owned(),
        b"temperature=22.4 (not JSON)".to_vec(),
    ));
    out.push(("dash_bin".to_owned(), vec![0xff, 0x00, 0x10, 0xfe, 0x7f]));
    // A KPL aggregate whose only user record is bad: quarantined alone, as user record 0.
    out.push((
        "dash_kpl".to_owned(),
        tidemark_ingest::kpl::aggregate(&[("dash_kpl", None, b"not JSON either")]),
    ));
    (out, wave)
}

async fn seed_and_serve() -> (Stack, TestTable, TestStream, Pipeline) {
    let table = TestTable::new("dash").await;
    let stream = TestStream::new("dash", 1).await;
    let fast = |name: &str| MappingConfig {
        batch_size: 1000,
        batching_window: Duration::from_millis(300),
        poll_interval: Duration::from_millis(100),
        shard_refresh: Duration::from_secs(1),
        max_retries: Some(10),
        on_failure_dir: Some(std::env::temp_dir().join(unique_name("dash-onfailure"))),
        ..MappingConfig::new(name)
    };
    let pipeline = Pipeline::start(PipelineConfig {
        sign_in: None,
        offline_after_default: 0,
        watchdog: None,
        export: None,
        local: common::local_config(&table, &stream, 1),
        api_port: 0,
        functions: Functions::InProcess,
        ingest: fast("ingest"),
        rollups: fast("rollups"),
        default_layout: None,
        device_identity: tidemark_schema::DeviceIdentity::Payload,
        default_thresholds: THRESHOLDS.into(),
        alerts: Some(AlertsConfig::ephemeral(fast("alerts"))),
    })
    .await
    .unwrap();
    let api = pipeline.api_addr;
    let (status, _) = call(
        api,
        "PUT",
        "/devices/dash_wave",
        Some(json!({"name": "Cold room wave", "type": "sensor",
                    "thresholds": {"temperature": {"max": 30, "severity": "warning",
                                                   "deadband": 0.5, "forSeconds": 120}}})),
    )
    .await;
    assert_eq!(status, 201);
    // A window of its own: its readings' arrivals are written down, so it is online.
    let (status, _) = call(
        api,
        "PUT",
        "/devices/dash_calm",
        Some(json!({"offlineAfterSeconds": 3600})),
    )
    .await;
    assert_eq!(status, 201);
    // Whole seconds: the page's Date keeps milliseconds, the table may keep microseconds.
    let now = Timestamp::from_epoch_millis(Timestamp::now().epoch_millis() / 1000 * 1000).unwrap();
    let (recs, wave) = records(now);
    stream.put(&recs).await;
    // Caught up: every wave reading rolled up, both breaches alerted, both bad records kept.
    let from = now.minus_millis(86_400_000).unwrap();
    let q = format!(
        "from={}&to={}&period=hourly&limit=1000",
        enc(&from.to_string()),
        enc(&now.plus_millis(3_600_000).unwrap().to_string())
    );
    let last = common::LastSeen::default();
    tidemark_testkit::eventually(
        Duration::from_secs(120),
        "the pipeline takes in the seeded records",
        || async {
            let (_, agg) = call(
                api,
                "GET",
                &format!("/devices/dash_wave/aggregates?{q}"),
                None,
            )
            .await;
            let counted: u64 = agg["items"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|b| b["metrics"]["temperature"]["count"].as_u64().unwrap_or(0))
                        .sum()
                })
                .unwrap_or(0);
            let (_, alerts) = call(api, "GET", "/alerts?state=open", None).await;
            let open = alerts["items"].as_array().map_or(0, Vec::len);
            let (_, quarantined) = call(api, "GET", "/quarantine", None).await;
            let bad = quarantined["items"].as_array().map_or(0, Vec::len);
            last.set(format!(
                "(rolled up, open alerts, quarantined) = {:?}, want ({WAVE_READINGS}, >= 3, 3)",
                (counted, open, bad)
            ));
            (counted == WAVE_READINGS as u64 && open >= 3 && bad == 3).then_some(())
        },
    )
    .await;
    seed_offline(&table, now).await;
    seed_rule_alerts(&table, now).await;
    (Stack { api, wave }, table, stream, pipeline)
}

/// [`SILENT`] as the watchdog leaves a device that went silent (this stack runs none): its
/// offline alert open (built as the watchdog builds it), the device offline since its last
/// arrival, ten minutes ago, and listed under the offline partition. Written once the
/// pipeline is idle; it sends no readings, so nothing resolves it.
async fn seed_offline(table: &TestTable, now: Timestamp) {
    let id = DeviceId::new(SILENT).unwrap();
    let since = now.minus_millis(600_000).unwrap();
    let mut dev = DeviceItem::new(
        id.clone(),
        DeviceStatus::Active,
        since.minus_millis(3_600_000).unwrap(),
    );
    dev.offline_after_seconds = Some(SILENT_WINDOW);
    let alert = offline_alert(&dev, SILENT_WINDOW, since);
    dev.last_arrival_at = Some(since);
    dev.offline = Some(OfflineState {
        alert: alert.alert_id.clone(),
        since,
        counted: Vec::new(),
    });
    dev.gsi2pk = Some(keys::offline_gsi2pk(&id));
    dev.gsi2sk = Some(keys::offline_gsi2sk(&id));
    dev.version = Some(1);
    for item in [
        tidemark_store::to_item(&dev).unwrap(),
        tidemark_store::to_item(&alert).unwrap(),
    ] {
        table
            .client
            .put_item()
            .table_name(&table.name)
            .set_item(Some(item))
            .send()
            .await
            .unwrap();
    }
}

/// [`RULED`]: a device with a threshold and [`RULES`] of its own, and one open alert of
/// each kind, built as the functions that raise them build them (the aggregator's
/// `alerting::plan` for a threshold's and a rule's, the watchdog's `offline_alert`): the
/// dashboard must tell the kinds apart and describe each rule. Written once the pipeline is
/// idle; the device sends no readings, so nothing resolves them.
async fn seed_rule_alerts(table: &TestTable, now: Timestamp) {
    let id = DeviceId::new(RULED).unwrap();
    let mut dev = DeviceItem::new(
        id.clone(),
        DeviceStatus::Active,
        now.minus_millis(86_400_000).unwrap(),
    );
    let temperature = MetricName::new("temperature").unwrap();
    dev.thresholds.insert(
        temperature.clone(),
        Threshold::new(None, Some(35.0), Severity::Warning),
    );
    let specs: Vec<RuleSpec> = RULES
        .iter()
        .map(|r| RuleSpec::from_value(&serde_json::from_str(r).unwrap()).unwrap())
        .collect();
    dev.rules = Some(specs.clone());
    dev.version = Some(1);
    // Ten minutes apart, the threshold's the oldest: the pages list them newest first.
    let at = |minutes_ago: i64| now.minus_millis(minutes_ago * 60_000).unwrap();
    let threshold = open_alert(
        &id,
        at(50),
        &temperature,
        AlertRule::Max,
        None,
        (36.5, 35.0),
    );
    let offline = offline_alert(&dev, 900, at(55));
    let mut items = vec![
        tidemark_store::to_item(&dev).unwrap(),
        tidemark_store::to_item(&threshold).unwrap(),
        tidemark_store::to_item(&offline).unwrap(),
    ];
    // The window's peak mean, the rate's peak per minute, the longest run of one value (s).
    for (i, (spec, peak)) in specs.iter().zip([31.2, 7.5, 4500.0]).enumerate() {
        let a = open_alert(
            &id,
            at(30 - 10 * i as i64),
            &spec.metric,
            spec.rule(),
            Some(spec),
            (peak, spec.limit),
        );
        items.push(tidemark_store::to_item(&a).unwrap());
    }
    // And a group rule's alert, as the watchdog opens it: three of site Z's fourteen offline.
    let rule = tidemark_schema::GroupRuleSpec::from_value(
        &serde_json::json!({"group": GROUP, "offlineFraction": {"above": 0.1}}),
    )
    .unwrap();
    let group = tidemark_schema::GroupAlertItem::open(
        &rule,
        at(5),
        tidemark_schema::GroupMeasure::Counts {
            members: 14,
            offline: 3,
        },
    );
    items.push(tidemark_store::to_item(&group).unwrap());
    // And another group's, for the page to acknowledge.
    let rule = tidemark_schema::GroupRuleSpec::from_value(
        &serde_json::json!({"group": ACK_GROUP, "offlineFraction": {"above": 0.5}}),
    )
    .unwrap();
    let group = tidemark_schema::GroupAlertItem::open(
        &rule,
        at(5),
        tidemark_schema::GroupMeasure::Counts {
            members: 4,
            offline: 3,
        },
    );
    items.push(tidemark_store::to_item(&group).unwrap());
    // And a group window rule's: site X's 15-minute mean temperature was 28.4 over 45
    // readings.
    let rule = tidemark_schema::GroupRuleSpec::from_value(&serde_json::json!(
        {"group": WINDOW_GROUP, "metric": "temperature", "aggregate": "avg", "window": "15m", "above": 28}
    ))
    .unwrap();
    let group = tidemark_schema::GroupAlertItem::open(
        &rule,
        at(5),
        tidemark_schema::GroupMeasure::Window {
            value: Some(28.4),
            readings: 45,
        },
    );
    items.push(tidemark_store::to_item(&group).unwrap());
    for item in items {
        table
            .client
            .put_item()
            .table_name(&table.name)
            .set_item(Some(item))
            .send()
            .await
            .unwrap();
    }
}

/// The groups of the group rules' alerts [`seed_rule_alerts`] writes: one to look at, one
/// to acknowledge, one of a window rule.
const GROUP: &str = "site:Z";
const ACK_GROUP: &str = "site:Y";
const WINDOW_GROUP: &str = "site:X";

/// An open alert of `device` as the aggregator's `alerting::plan` writes one: a threshold's
/// (no `spec`) or a rule's, with its ID and message made the same way.
fn open_alert(
    device: &DeviceId,
    opened: Timestamp,
    metric: &MetricName,
    rule: AlertRule,
    spec: Option<&RuleSpec>,
    (peak, limit): (f64, f64),
) -> AlertItem {
    let (alert_id, message, severity) = match spec {
        Some(s) => (
            AlertId::for_rule(opened, metric, rule, &s.tag()),
            s.to_string(),
            s.severity,
        ),
        None => (
            AlertId::for_breach(opened, metric, rule),
            format!("{metric} above {limit}"),
            Severity::Warning,
        ),
    };
    let key = EntityKey::Alert {
        device: device.clone(),
        alert: alert_id.clone(),
    }
    .key();
    AlertItem {
        gsi1pk: Some(keys::severity_gsi1pk(severity, &key.pk)),
        pk: key.pk,
        sk: key.sk,
        gsi1sk: Some(keys::alert_gsi1sk(&alert_id)),
        device_id: device.clone(),
        alert_id,
        metric: Some(metric.clone()),
        rule,
        rule_spec: spec.cloned(),
        severity,
        state: AlertState::Open,
        message,
        value: peak,
        threshold: limit,
        breach_count: 3,
        opened_at: opened,
        last_breach_at: opened,
        acknowledged_at: None,
        resolved_at: None,
        snoozed_until: None,
        tags: Default::default(),
    }
}

fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The seeded stack, started once for this test binary. Its table and stream live until the
/// process ends (DynamoDB Local and kinesis-mock keep them in memory only).
fn stack() -> &'static Stack {
    static STACK: OnceLock<Stack> = OnceLock::new();
    STACK.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let (stack, _table, _stream, _pipeline) = seed_and_serve().await;
                tx.send(stack).unwrap();
                std::future::pending::<()>().await;
            });
        });
        rx.recv().expect("the dashboard stack started")
    })
}

fn open(b: &Browser, api: SocketAddr, hash: &str) {
    b.goto(&format!("http://{api}/ui/#/{hash}"));
    wait_drawn(b, hash.split(['/', '?']).next().unwrap_or_default());
}

/// Waits until the page has drawn `view` without an error.
fn wait_drawn(b: &Browser, view: &str) {
    b.wait_for(
        &format!(
            "window.tidemark && window.tidemark.view === '{view}' && \
             document.body.dataset.state === 'ready' && window.tidemark.renders > 0"
        ),
        WAIT,
    );
    let error = b.eval("return window.tidemark.error;", vec![]);
    assert_eq!(error, Value::Null, "the page reported an error");
}

fn shot(b: &Browser, name: &str) {
    b.screenshot(&screenshot_dir().join(format!("{name}.png")));
}

#[test]
fn root_redirects_to_the_dashboard_which_lists_every_device_and_marks_open_critical_ones() {
    let s = stack();
    let (_one, b) = common::browser(1280, 900);
    b.goto(&format!("http://{}/", s.api));
    wait_drawn(&b, "fleet");
    let url = b.eval("return location.pathname;", vec![]);
    assert_eq!(url, "/ui/");
    let rows = b.eval(
        "return [...document.querySelectorAll('#fleet tbody tr')].map(r => \
         ({id: r.dataset.device, critical: r.classList.contains('critical'), \
           text: r.innerText, \
           temperature: +r.querySelector('[data-metric=temperature]')?.dataset.value}));",
        vec![],
    );
    let rows = rows.as_array().unwrap();
    let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [
            "dash_ack",
            "dash_calm",
            "dash_hot",
            "dash_rules",
            "dash_silent",
            "dash_snooze",
            "dash_wave"
        ]
    );
    let critical: Vec<&str> = rows
        .iter()
        .filter(|r| r["critical"] == true)
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert!(critical.contains(&"dash_hot"), "{rows:?}");
    assert!(!critical.contains(&"dash_calm") && !critical.contains(&"dash_wave"));
    let wave = rows.iter().find(|r| r["id"] == "dash_wave").unwrap();
    let text = wave["text"].as_str().unwrap();
    assert!(text.contains("Cold room wave"), "name shown: {text}");
    assert_eq!(wave["temperature"].as_f64(), Some(s.wave.last().unwrap().1));
    shot(&b, "fleet");
}

#[test]
fn a_short_range_draws_every_raw_reading_with_the_right_extremes_and_stays_in_the_url() {
    let s = stack();
    let (_one, b) = common::browser(1280, 1000);
    // 30 minutes of the 10-second wave: 181 readings, inclusive bounds.
    let from = s.wave[180].0;
    let to = s.wave[360].0;
    let hash = format!(
        "device/dash_wave?from={}&to={}",
        enc(&from.to_string()),
        enc(&to.to_string())
    );
    open(&b, s.api, &hash);
    let chart = b.eval(
        "const c = document.querySelector('.chart[data-metric=temperature]'); \
         return {points: +c.dataset.points, min: +c.dataset.min, max: +c.dataset.max, \
                 resolution: c.dataset.resolution, canvas: !!c.querySelector('canvas')};",
        vec![],
    );
    let want: Vec<f64> = s.wave[180..=360].iter().map(|(_, t)| *t).collect();
    assert_eq!(chart["resolution"], "raw");
    assert_eq!(chart["points"], json!(want.len()));
    assert_eq!(chart["min"].as_f64(), want.iter().cloned().reduce(f64::min));
    assert_eq!(chart["max"].as_f64(), want.iter().cloned().reduce(f64::max));
    assert_eq!(chart["canvas"], true, "uPlot drew a canvas");
    // A reload of the same URL shows the same range.
    b.eval("location.reload();", vec![]);
    wait_drawn(&b, "device");
    let again = b.eval(
        "return +document.querySelector('.chart[data-metric=temperature]').dataset.points;",
        vec![],
    );
    assert_eq!(again, json!(want.len()));
    shot(&b, "device-raw");
}

#[test]
fn a_range_holding_more_readings_than_a_chart_draws_shows_hourly_rollups() {
    let s = stack();
    let (_one, b) = common::browser(1280, 1000);
    open(&b, s.api, "device/dash_wave?range=1d");
    let chart = b.eval(
        "const c = document.querySelector('.chart[data-metric=temperature]'); \
         return {points: +c.dataset.points, min: +c.dataset.min, max: +c.dataset.max, \
                 resolution: c.dataset.resolution};",
        vec![],
    );
    let mut hours: Vec<String> = s
        .wave
        .iter()
        .map(|(t, _)| Period::Hourly.bucket(*t).start().to_string())
        .collect();
    hours.dedup();
    let temps = s.wave.iter().map(|(_, t)| *t);
    assert_eq!(chart["resolution"], "hourly");
    assert_eq!(chart["points"], json!(hours.len()));
    assert_eq!(chart["min"].as_f64(), temps.clone().reduce(f64::min));
    assert_eq!(chart["max"].as_f64(), temps.reduce(f64::max));
    let pressed = b.eval(
        "return document.querySelector('#range [aria-pressed=true]').dataset.range;",
        vec![],
    );
    assert_eq!(pressed, "1d");
    // The device's own threshold, in words, with its deadband and duration.
    let rule = b.eval(
        "return document.querySelector('.threshold[data-metric=temperature]')?.innerText;",
        vec![],
    );
    assert_eq!(
        rule,
        "Alert: warning above 30 for 2 min; resolves 0.5 back inside"
    );
    shot(&b, "device-hourly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledging_an_alert_in_the_page_acknowledges_it_through_the_api() {
    let s = stack();
    let api = s.api;
    let (_, before) = call(api, "GET", "/devices/dash_ack/alerts", None).await;
    let alert = before["items"][0].clone();
    assert_eq!(alert["state"], "open", "{before}");
    let id = alert["alertId"].as_str().unwrap().to_owned();
    let page = tokio::task::spawn_blocking(move || {
        let (_one, b) = common::browser(1280, 1000);
        open(&b, api, "device/dash_ack?range=1h");
        b.click(&format!("button[data-ack='{id}']"));
        b.wait_for(
            &format!("document.querySelector(\"li[data-alert='{id}']\")?.dataset.state === 'acknowledged'"),
            WAIT,
        );
        shot(&b, "device-acknowledged");
        id
    })
    .await
    .unwrap();
    let (_, after) = call(api, "GET", "/devices/dash_ack/alerts", None).await;
    let acked = after["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["alertId"] == page.as_str())
        .unwrap();
    assert_eq!(acked["state"], "acknowledged");
    assert!(acked["acknowledgedAt"].is_string(), "{acked}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledging_a_group_alert_in_the_page_acknowledges_it_under_its_group() {
    let s = stack();
    let api = s.api;
    let listed = |v: &Value| -> Value {
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["group"] == ACK_GROUP)
            .cloned()
            .unwrap_or(Value::Null)
    };
    let (_, before) = call(api, "GET", "/alerts?tag=site:Y", None).await;
    let alert = listed(&before);
    assert_eq!(alert["state"], "open", "{before}");
    let id = alert["alertId"].as_str().unwrap().to_owned();
    // WHEN Acknowledge is clicked on the group alert's row of the alerts page
    tokio::task::spawn_blocking(move || {
        let (_one, b) = common::browser(1280, 1000);
        open(&b, api, "alerts");
        let row = format!("li[data-group='{ACK_GROUP}']");
        b.click(&format!("{row} button[data-ack='{id}']"));
        b.wait_for(
            &format!(
                "!document.querySelector(\"{row} button[data-ack]\") || \
                 document.querySelector(\"{row}\").dataset.state === 'acknowledged'"
            ),
            WAIT,
        );
        shot(&b, "alerts-group-acknowledged");
    })
    .await
    .unwrap();
    // THEN the API has it acknowledged, under its group
    let (_, after) = call(api, "GET", "/alerts?tag=site:Y", None).await;
    let acked = listed(&after);
    assert_eq!(acked["state"], "acknowledged", "{after}");
    assert!(acked["acknowledgedAt"].is_string(), "{acked}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snoozing_an_alert_in_the_page_snoozes_it_for_the_chosen_hours_and_unsnooze_ends_it() {
    let s = stack();
    let api = s.api;
    let (_, before) = call(api, "GET", "/devices/dash_snooze/alerts", None).await;
    let alert = before["items"][0].clone();
    assert_eq!(alert["state"], "open", "{before}");
    assert!(alert.get("snoozedUntil").is_none(), "{alert}");
    let id = alert["alertId"].as_str().unwrap().to_owned();
    let clicked_at = Timestamp::now();
    // WHEN "Snooze 1 h" is clicked on the fleet-wide alerts page (where another device's
    // alert, opened at the same instant, has the same ID: alert IDs are per device)
    let (shown, id) = tokio::task::spawn_blocking(move || {
        let (_one, b) = common::browser(1280, 1000);
        open(&b, api, "alerts");
        let row = format!("li[data-device='dash_snooze'][data-alert='{id}']");
        b.click(&format!("{row} button[data-snooze][data-hours='1']"));
        // THEN the alert shows as snoozed, with its time, and offers Unsnooze
        let li = format!("document.querySelector(\"{row}\")");
        b.wait_for(&format!("{li}?.dataset.snoozed === 'true'"), WAIT);
        let shown = b.eval(
            &format!(
                "const li = {li}; return {{state: li.dataset.state, \
                 badge: li.querySelector('.state-snoozed').innerText, \
                 until: li.querySelector('.state-snoozed').dataset.until, \
                 unsnooze: !!li.querySelector('button[data-unsnooze]'), \
                 snooze: !!li.querySelector('button[data-snooze]')}};"
            ),
            vec![],
        );
        shot(&b, "alerts-snoozed");
        (shown, id)
    })
    .await
    .unwrap();
    assert_eq!(shown["state"], "open", "snoozing leaves the state alone");
    assert!(
        shown["badge"]
            .as_str()
            .unwrap()
            .starts_with("snoozed until "),
        "{shown}"
    );
    assert_eq!(
        (&shown["unsnooze"], &shown["snooze"]),
        (&json!(true), &json!(false)),
        "Unsnooze offered, Snooze not"
    );
    // AND the API has it snoozed for an hour from the click
    let (_, after) = call(api, "GET", "/devices/dash_snooze/alerts", None).await;
    let stored = after["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["alertId"] == id.as_str())
        .unwrap()
        .clone();
    let until = Timestamp::parse_rfc3339(
        stored["snoozedUntil"]
            .as_str()
            .unwrap_or_else(|| panic!("not snoozed: {after}")),
    )
    .unwrap();
    // AND only this device's alert: the other device's same-instant alert is untouched
    let (_, hot) = call(api, "GET", "/devices/dash_hot/alerts", None).await;
    assert!(
        hot["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a.get("snoozedUntil").is_none()),
        "{hot}"
    );
    assert_eq!(shown["until"], stored["snoozedUntil"]);
    let hour = 3_600_000;
    assert!(
        until >= clicked_at.plus_millis(hour - 60_000).unwrap()
            && until <= Timestamp::now().plus_millis(hour + 60_000).unwrap(),
        "snoozed until {until}, clicked at {clicked_at}"
    );
    // WHEN Unsnooze is clicked on the device page THEN the snooze is gone, in the page and
    // in the API, and Snooze is offered again
    let id = tokio::task::spawn_blocking(move || {
        let (_one, b) = common::browser(1280, 1000);
        open(&b, api, "device/dash_snooze?range=1h");
        b.click(&format!("button[data-unsnooze='{id}']"));
        b.wait_for(
            &format!(
                "document.querySelector(\"li[data-alert='{id}']\")?.dataset.snoozed === 'false' \
                 && !!document.querySelector(\"button[data-snooze='{id}']\")"
            ),
            WAIT,
        );
        id
    })
    .await
    .unwrap();
    let (_, last) = call(api, "GET", "/devices/dash_snooze/alerts", None).await;
    let stored = last["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["alertId"] == id.as_str())
        .unwrap();
    assert!(stored.get("snoozedUntil").is_none(), "{stored}");
    assert_eq!(stored["state"], "open");
}

#[test]
fn the_quarantine_page_shows_text_payloads_as_text_and_binary_ones_as_hex() {
    let s = stack();
    let (_one, b) = common::browser(1280, 800);
    open(&b, s.api, "quarantine");
    let rows = b.eval(
        "return [...document.querySelectorAll('#quarantine tbody tr')].map(r => ({ \
           key: r.querySelector('td:nth-child(3)').innerText, reason: r.dataset.reason, \
           kind: r.querySelector('pre').dataset.kind, payload: r.querySelector('pre').innerText, \
           sub: r.dataset.subRecord, note: r.querySelector('.sub-record')?.innerText}));",
        vec![],
    );
    let rows = rows.as_array().unwrap();
    let by = |k: &str| {
        rows.iter()
            .find(|r| r["key"] == k)
            .unwrap_or_else(|| panic!("{k}: {rows:?}"))
    };
    assert_eq!(by("dash_text")["kind"], "text");
    assert_eq!(by("dash_text")["payload"], "temperature=22.4 (not JSON)");
    assert_eq!(by("dash_text")["reason"], "not_json");
    assert_eq!(by("dash_bin")["kind"], "hex");
    assert_eq!(by("dash_bin")["payload"], "ff 00 10 fe 7f");
    assert_eq!(by("dash_bin")["sub"], "");
    // The aggregate's bad user record: its own bytes, and which user record it was.
    assert_eq!(by("dash_kpl")["payload"], "not JSON either");
    assert_eq!(by("dash_kpl")["sub"], "0");
    assert_eq!(by("dash_kpl")["note"], "user record 0 of a KPL aggregate");
    shot(&b, "quarantine");
}

#[test]
fn every_page_fits_a_phone_width_and_the_alerts_page_lists_open_alerts_by_severity() {
    let s = stack();
    let (_one, b) = common::browser(390, 844);
    for (hash, name) in [
        ("fleet", "phone-fleet"),
        ("device/dash_wave?range=1h", "phone-device"),
        ("alerts", "phone-alerts"),
        ("quarantine", "phone-quarantine"),
    ] {
        open(&b, s.api, hash);
        let overflow = b.eval(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth;",
            vec![],
        );
        assert!(
            overflow.as_i64().unwrap() <= 0,
            "{hash} scrolls sideways by {overflow} px on a phone"
        );
        shot(&b, name);
    }
    open(&b, s.api, "alerts");
    let listed = b.eval(
        "return [...document.querySelectorAll('ul[data-severity] li')].map(l => \
           [l.closest('ul').dataset.severity, l.dataset.state]);",
        vec![],
    );
    let listed = listed.as_array().unwrap();
    assert!(
        listed.iter().any(|l| l[0] == "critical" && l[1] == "open"),
        "{listed:?}"
    );
    assert!(
        listed.iter().all(|l| l[1] == "open"),
        "only open by default"
    );
}

/// Waits until the device page of `id` has drawn (a device page replacing another has the
/// same view name).
fn open_device(b: &Browser, api: SocketAddr, id: &str) {
    b.goto(&format!("http://{api}/ui/#/device/{id}?range=1h"));
    b.wait_for(
        &format!(
            "window.tidemark && window.tidemark.device && window.tidemark.device.id === '{id}' \
             && window.tidemark.view === 'device' && document.body.dataset.state === 'ready'"
        ),
        WAIT,
    );
    let error = b.eval("return window.tidemark.error;", vec![]);
    assert_eq!(error, Value::Null, "the page reported an error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offline_device_is_marked_in_the_fleet_and_its_offline_alert_shows_its_kind_not_a_metric()
 {
    let s = stack();
    let api = s.api;
    // GIVEN the API has dash_silent offline with its open offline alert, and dash_calm (a
    // window of its own, its readings arrived) online
    let (_, silent) = call(api, "GET", &format!("/devices/{SILENT}"), None).await;
    assert_eq!(silent["connectivity"], "offline", "{silent}");
    let alert_id = silent["offline"]["alert"].as_str().unwrap().to_owned();
    let (_, alerts) = call(api, "GET", &format!("/devices/{SILENT}/alerts"), None).await;
    assert_eq!(alerts["items"][0]["kind"], "offline", "{alerts}");
    assert!(alerts["items"][0].get("metric").is_none(), "{alerts}");
    tidemark_testkit::eventually(common::PATIENCE, "dash_calm is online", || async {
        let calm = call(api, "GET", "/devices/dash_calm", None).await.1;
        (calm["connectivity"] == "online").then_some(())
    })
    .await;
    let id = alert_id.clone();
    let (fleet, summary, listed, view, devices) = tokio::task::spawn_blocking(move || {
        let (_one, b) = common::browser(1280, 1000);
        // WHEN the fleet page is open
        open(&b, api, "fleet");
        let fleet = b.eval(
            "return Object.fromEntries([...document.querySelectorAll('#fleet tbody tr')].map(r => \
               [r.dataset.device, {row: r.classList.contains('offline'), \
                 connectivity: r.dataset.connectivity ?? null, \
                 marker: r.querySelector('.badge.offline')?.innerText ?? null, \
                 status: r.querySelector('td[data-label=Status]').innerText}]));",
            vec![],
        );
        let summary = b.eval(
            "return document.getElementById('fleet-summary').innerText;",
            vec![],
        );
        shot(&b, "fleet-offline");
        // AND the alerts page
        open(&b, api, "alerts");
        let listed = b.eval(
            &format!(
                "const li = document.querySelector(\"li[data-device='{SILENT}'][data-alert='{id}']\"); \
                 return li && {{kind: li.dataset.kind, state: li.dataset.state, \
                   severity: li.closest('ul').dataset.severity, \
                   marker: li.querySelector('.badge.offline')?.innerText ?? null, \
                   msg: li.querySelector('.msg').innerText, \
                   ack: !!li.querySelector('button[data-ack]')}};"
            ),
            vec![],
        );
        let view = b.eval("return document.getElementById('view').innerText;", vec![]);
        shot(&b, "alerts-offline");
        // AND the two devices' pages
        let mut devices = Vec::new();
        for d in [SILENT, "dash_calm"] {
            open_device(&b, api, d);
            devices.push(b.eval(
                "const p = document.getElementById('device-facts'); \
                 return {connectivity: p.dataset.connectivity ?? null, text: p.innerText, \
                   marker: !!p.querySelector('.badge.offline'), \
                   alerts: document.getElementById('view').innerText};",
                vec![],
            ));
            shot(&b, &format!("device-{d}"));
        }
        (fleet, summary, listed, view, devices)
    })
    .await
    .unwrap();
    // THEN the fleet marks dash_silent offline, and no other device
    let row = &fleet[SILENT];
    assert_eq!(
        (&row["row"], &row["connectivity"], &row["marker"]),
        (&json!(true), &json!("offline"), &json!("offline")),
        "{fleet}"
    );
    assert_eq!(row["status"], "active offline", "{fleet}");
    for (d, r) in fleet.as_object().unwrap() {
        if d != SILENT {
            assert_eq!(
                (&r["row"], &r["marker"]),
                (&json!(false), &Value::Null),
                "{d} is not offline: {fleet}"
            );
        }
    }
    assert!(
        summary
            .as_str()
            .unwrap()
            .contains(" · 1 offline fleet-wide"),
        "{summary}"
    );
    // AND its alert is listed as an offline one, with the window, never a metric
    assert_eq!(listed["kind"], "offline", "{listed}");
    assert_eq!(listed["state"], "open");
    assert_eq!(listed["severity"], "warning");
    assert_eq!(listed["marker"], "offline");
    assert_eq!(listed["ack"], true, "an offline alert can be acknowledged");
    let msg = listed["msg"].as_str().unwrap();
    assert!(
        msg.starts_with(&format!(
            "offline no reading arrived for {SILENT_WINDOW} s · silent for "
        )),
        "{msg}"
    );
    assert!(!msg.contains("peak") && !msg.contains("threshold"), "{msg}");
    for text in [&view, &devices[0]["alerts"], &devices[1]["alerts"]] {
        let text = text.as_str().unwrap();
        assert!(
            !text.contains("undefined") && !text.contains("NaN"),
            "{text}"
        );
    }
    // AND the device pages say so: offline with the badge, online quietly
    let [silent_page, calm_page] = &devices[..] else {
        unreachable!()
    };
    assert_eq!(silent_page["connectivity"], "offline");
    assert_eq!(silent_page["marker"], true);
    assert!(
        silent_page["text"]
            .as_str()
            .unwrap()
            .contains("offline after 2 min without a reading"),
        "{silent_page}"
    );
    assert!(
        silent_page["alerts"]
            .as_str()
            .unwrap()
            .contains(&format!("no reading arrived for {SILENT_WINDOW} s")),
        "{silent_page}"
    );
    assert_eq!(calm_page["connectivity"], "online");
    assert_eq!(calm_page["marker"], false);
    assert!(
        calm_page["text"].as_str().unwrap().contains(" · online · "),
        "{calm_page}"
    );
}

/// The alert rows of the list `list` (a selector) of device [`RULED`], by kind: each row's
/// `data-kind`, its kind badge, its rule's description and its whole message.
fn rule_rows(b: &Browser, list: &str) -> Value {
    b.eval(
        &format!(
            "return [...document.querySelectorAll(\"{list} li[data-device='{RULED}']\")].map(li => \
               ({{kind: li.dataset.kind, badge: li.querySelector('.badge.kind')?.innerText ?? null, \
                 describe: li.querySelector('.describe')?.innerText ?? null, \
                 msg: li.querySelector('.msg').innerText}}));"
        ),
        vec![],
    )
}

#[test]
fn every_alert_kind_shows_its_kind_and_describes_its_rule_and_the_device_page_lists_its_rules() {
    // GIVEN dash_rules with an open alert of each kind, and a rule of each kind of its own
    let s = stack();
    let (_one, b) = common::browser(1280, 1000);
    // WHEN the alerts page and the device's page are open
    open(&b, s.api, "alerts");
    let listed = rule_rows(&b, "ul[data-severity]");
    shot(&b, "alerts-kinds");
    open_device(&b, s.api, RULED);
    let on_device = rule_rows(&b, "#device-alerts");
    let rules = b.eval(
        "return [...document.querySelectorAll('#device-rules li')].map(li => \
           ({kind: li.dataset.kind, metric: li.dataset.metric, \
             badge: li.querySelector('.badge.kind')?.innerText ?? null, \
             describe: li.querySelector('.describe')?.innerText ?? null, text: li.innerText}));",
        vec![],
    );
    let view = b.eval("return document.getElementById('view').innerText;", vec![]);
    shot(&b, "device-kinds");
    // THEN both pages show every kind, each row marked with it and describing its rule
    // (the newest first: the alerts page groups by severity, so it is compared by kind)
    let want = [
        (
            "stuck",
            "unchanged for 1h",
            "flow unchanged for 1h · same value for 75 min",
        ),
        (
            "rate",
            "rate per minute above 5",
            "pressure rate per minute above 5 · peak 7.5",
        ),
        (
            "window",
            "avg over 5m above 30",
            "temperature avg over 5m above 30 · peak 31.2",
        ),
        (
            "offline",
            "no reading arrived for 900 s",
            "no reading arrived for 900 s · silent for ",
        ),
        (
            "threshold",
            "above 35",
            "temperature above 35 · peak 36.5, threshold 35",
        ),
    ];
    for (page, rows) in [("alerts", &listed), ("device", &on_device)] {
        let rows = rows.as_array().unwrap();
        let mut kinds: Vec<&str> = rows.iter().map(|r| r["kind"].as_str().unwrap()).collect();
        if page == "alerts" {
            kinds.sort_unstable();
            let mut all: Vec<&str> = want.iter().map(|w| w.0).collect();
            all.sort_unstable();
            assert_eq!(kinds, all, "{page}: {rows:?}");
        } else {
            assert_eq!(kinds, want.map(|w| w.0), "{page}: {rows:?}");
        }
        for (kind, describe, msg) in want {
            let row = rows.iter().find(|r| r["kind"] == kind).unwrap();
            assert_eq!(row["badge"], kind, "{page}: {row}");
            assert_eq!(row["describe"], describe, "{page}: {row}");
            let shown = row["msg"].as_str().unwrap();
            assert!(
                shown.starts_with(&format!("{kind} {msg}")),
                "{page}: {shown:?} is not {kind} {msg:?}…"
            );
        }
    }
    // AND the device page lists its rules, each with its kind, limit and conditions
    let rules = rules.as_array().unwrap();
    let texts: Vec<(&str, &str, &str, &str)> = rules
        .iter()
        .map(|r| {
            assert_eq!(r["badge"], r["kind"], "{r}");
            (
                r["kind"].as_str().unwrap(),
                r["metric"].as_str().unwrap(),
                r["describe"].as_str().unwrap(),
                r["text"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        texts,
        [
            (
                "window",
                "temperature",
                "avg over 5m above 30",
                "window temperature avg over 5m above 30 · warning for 10 min"
            ),
            (
                "rate",
                "pressure",
                "rate per minute above 5",
                "rate pressure rate per minute above 5 · critical; keeps firing 5 min after it clears"
            ),
            (
                "stuck",
                "flow",
                "unchanged for 1h",
                "stuck flow unchanged for 1h · warning"
            ),
        ]
    );
    let view = view.as_str().unwrap();
    assert!(
        !view.contains("undefined") && !view.contains("NaN"),
        "{view}"
    );

    // AND the alerts page shows the group rule's alert under its group, not a device: its
    // kind, its rule, the share offline, and a link to the fleet filtered by the group
    open(&b, s.api, "alerts");
    let group = b.eval(
        &format!(
            "const li = document.querySelector(\"ul[data-severity] li[data-group='{GROUP}']\"); \
             return li && {{kind: li.dataset.kind, device: li.dataset.device ?? null, \
               badge: li.querySelector('.badge.kind')?.innerText ?? null, \
               describe: li.querySelector('.describe')?.innerText ?? null, \
               msg: li.querySelector('.msg').innerText, \
               link: li.querySelector('a.id')?.getAttribute('href') ?? null, \
               name: li.querySelector('a.id')?.innerText ?? null}};"
        ),
        vec![],
    );
    assert_eq!(
        (&group["kind"], &group["badge"], &group["device"]),
        (&json!("group"), &json!("group"), &Value::Null),
        "{group}"
    );
    assert_eq!(group["describe"], "offline fraction above 10 %", "{group}");
    assert_eq!(
        group["msg"], "group offline fraction above 10 % · 21.4 % offline (3 of 14)",
        "{group}"
    );
    assert_eq!(
        (&group["name"], &group["link"]),
        (&json!(GROUP), &json!("#/fleet?tag=site%3AZ")),
        "{group}"
    );
    // AND a group window rule's alert with its metric, its rule, and its value over the
    // readings it was taken from
    let window = b.eval(
        &format!(
            "const li = document.querySelector(\"ul[data-severity] li[data-group='{WINDOW_GROUP}']\"); \
             return li && {{kind: li.dataset.kind, msg: li.querySelector('.msg').innerText}};"
        ),
        vec![],
    );
    assert_eq!(window["kind"], "group", "{window}");
    assert_eq!(
        window["msg"], "group temperature avg over 15m above 28 · 28.4 over 45 readings",
        "{window}"
    );
}
