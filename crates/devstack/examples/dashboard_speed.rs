//! The dashboard's speed on the local stack: time to a drawn fleet page with 1,000 devices,
//! time to a drawn 7-day device chart, and the size of what a browser downloads.
//!
//! ```sh
//! cargo run -p tidemark-devstack --example dashboard_speed            # writes bench/DASHBOARD.md
//! cargo run -p tidemark-devstack --example dashboard_speed -- --runs 3
//! ```
//!
//! It seeds a fresh table through the whole pipeline (Kinesis → ingest → aggregator), serves
//! it with the API function behind the local HTTP server, and loads each page in headless
//! Chromium (`scripts/browser.sh`) several times. "Drawn" is the page's own mark
//! (`window.tidemark.drawnAt`, milliseconds since navigation start) after its data calls
//! returned and uPlot drew every chart. Targets (under 1 s each, under 150 KB compressed) are
//! reported, never asserted.

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tidemark_devstack::LocalConfig;
use tidemark_devstack::esm::MappingConfig;
use tidemark_devstack::pipeline::{AlertsConfig, Functions, Pipeline, PipelineConfig};
use tidemark_schema::Timestamp;
use tidemark_testkit::browser::Browser;
use tidemark_testkit::{TestStream, TestTable, services, unique_name, workspace_root};

const DEVICES: usize = 1000;
const WEEK_MINUTES: i64 = 7 * 24 * 60;

fn reading(device: &str, at: Timestamp, i: i64) -> Vec<u8> {
    let t = 20.0 + 5.0 * (i as f64 / 90.0).sin();
    json!({"deviceId": device, "timestamp": at.to_string(), "temperature": (t * 100.0).round() / 100.0,
           "humidity": 40 + i % 9, "battery": 90})
    .to_string()
    .into_bytes()
}

async fn get(addr: SocketAddr, path: &str) -> Value {
    use http_body_util::{BodyExt, Empty};
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("handshake");
    tokio::spawn(conn);
    let req = http::Request::get(path.replace(':', "%3A"))
        .header(http::header::HOST, addr.to_string())
        .body(Empty::<hyper::body::Bytes>::new())
        .expect("request");
    let resp = sender.send_request(req).await.expect("response");
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
}

/// Milliseconds from navigation start to the page's drawn mark, `runs` times.
fn page_times(b: &Browser, url: &str, view: &str, runs: usize) -> Vec<f64> {
    (0..runs)
        .map(|_| {
            b.goto("about:blank");
            b.goto(url);
            let v = b.wait_for(
                &format!(
                    "window.tidemark && window.tidemark.view === '{view}' && \
                     window.tidemark.renders > 0 && !window.tidemark.error && window.tidemark.drawnAt"
                ),
                Duration::from_secs(60),
            );
            v.as_f64().unwrap_or(f64::NAN)
        })
        .collect()
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

fn gzip_size(bytes: &[u8]) -> usize {
    let mut child = Command::new("gzip")
        .args(["-9", "-c"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("gzip on PATH");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(bytes)
        .expect("feed gzip");
    child.wait_with_output().expect("gzip output").stdout.len()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let runs = std::env::args()
        .skip_while(|a| a != "--runs")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(5usize);
    let table = TestTable::new("dash-speed").await;
    let stream = TestStream::new("dash-speed", 2).await;
    let s = services();
    let mapping = |name: &str| MappingConfig {
        batch_size: 1000,
        batching_window: Duration::from_millis(500),
        poll_interval: Duration::from_millis(100),
        max_retries: Some(10),
        on_failure_dir: Some(std::env::temp_dir().join(unique_name("dash-speed-onfailure"))),
        ..MappingConfig::new(name)
    };
    let pipeline = Pipeline::start(PipelineConfig {
        sign_in: None,
        offline_after_default: 0,
        watchdog: None,
        export: None,
        local: LocalConfig {
            table: table.name.clone(),
            stream: stream.name.clone(),
            stream_shards: 2,
            dynamodb_endpoint: s.dynamodb_endpoint.clone(),
            kinesis_endpoint: s.kinesis_endpoint.clone(),
        },
        api_port: 0,
        functions: Functions::InProcess,
        ingest: mapping("ingest"),
        rollups: mapping("rollups"),
        default_layout: None,
        device_identity: tidemark_schema::DeviceIdentity::Payload,
        default_thresholds: r#"{"temperature":{"max":35,"severity":"critical"}}"#.into(),
        alerts: Some(AlertsConfig::ephemeral(mapping("alerts"))),
    })
    .await
    .expect("pipeline starts");
    let api: SocketAddr = pipeline.api_addr;

    // A fleet of 1,000 devices with a reading each, and one device with a reading a minute
    // for the last 7 days.
    let now = Timestamp::now();
    let mut records: Vec<(String, Vec<u8>)> = (0..DEVICES)
        .map(|n| {
            let id = format!("fleet_{n:04}");
            let at = now.minus_millis(60_000 + n as i64).expect("in range");
            (id.clone(), reading(&id, at, n as i64))
        })
        .collect();
    for i in 0..WEEK_MINUTES {
        let at = now
            .minus_millis((WEEK_MINUTES - i) * 60_000)
            .expect("in range");
        records.push(("week_0001".into(), reading("week_0001", at, i)));
    }
    let t0 = Instant::now();
    stream.put(&records).await;
    let total = records.len() as u64;
    let from = now
        .minus_millis(8 * 86_400_000)
        .expect("in range")
        .to_string();
    let rolled = format!("/devices/week_0001/aggregates?period=daily&from={from}");
    loop {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let days = get(api, &rolled).await;
        let counted: u64 = days["items"].as_array().map_or(0, |a| {
            a.iter()
                .map(|d| d["metrics"]["temperature"]["count"].as_u64().unwrap_or(0))
                .sum()
        });
        let last = get(api, &format!("/devices/fleet_{:04}", DEVICES - 1)).await;
        if counted == WEEK_MINUTES as u64 && last["deviceId"].is_string() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(1800),
            "the pipeline did not catch up in 30 minutes"
        );
    }
    eprintln!(
        "seeded {total} readings through the pipeline in {:.1} s",
        t0.elapsed().as_secs_f64()
    );

    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into());
    let fleet_url = format!("http://{api}/ui/#/fleet");
    let week_url = format!("http://{api}/ui/#/device/week_0001?range=7d");
    let (fleet, week, resolution, points) = tokio::task::spawn_blocking(move || {
        let b = Browser::start(1280, 900);
        let fleet = page_times(&b, &fleet_url, "fleet", runs);
        let week = page_times(&b, &week_url, "device", runs);
        let chart = b.eval(
            "const c = document.querySelector('.chart[data-metric=temperature]'); \
             return [c.dataset.resolution, +c.dataset.points];",
            vec![],
        );
        (fleet, week, chart[0].clone(), chart[1].clone())
    })
    .await
    .expect("browser runs");

    let mut raw_total = 0;
    let mut gz_total = 0;
    let mut rows = String::new();
    for a in tidemark_api::ui::ASSETS {
        let gz = gzip_size(a.body.as_bytes());
        raw_total += a.body.len();
        gz_total += gz;
        rows.push_str(&format!("| `{}` | {} | {} |\n", a.name, a.body.len(), gz));
    }
    let report = format!(
        "# Dashboard speed (local stack)\n\n\
         Command: `cargo run -p tidemark-devstack --example dashboard_speed -- --runs {runs}` \
         (debug build of the API function, DynamoDB Local and kinesis-mock, headless \
         {chromium}), {date}. Times are milliseconds from navigation start to the page's drawn \
         mark (data fetched, table or every chart drawn); the first run loads the files cold. \
         Load average when the browser runs started: {load} (a shared machine: compare runs \
         at a similar load).\n\n\
         | page | runs (ms) | median | target |\n|---|---|---|---|\n\
         | fleet, {DEVICES} devices (first page of 50) | {fleet:?} | {fm:.0} | < 1000 |\n\
         | device, 7-day range ({res} rollups, {points} points per chart) | {week:?} | {wm:.0} | < 1000 |\n\n\
         Files the browser downloads: {raw_total} bytes, {gz_total} bytes with gzip -9 (target < 150 KB \
         compressed). The API function sends them uncompressed, with ETags: a reload revalidates \
         and gets 304s.\n\n\
         | file | bytes | gzip -9 |\n|---|---|---|\n{rows}",
        chromium = Command::new("chromium")
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default(),
        date = Timestamp::now().day(),
        fleet = fleet.iter().map(|v| v.round() as i64).collect::<Vec<_>>(),
        week = week.iter().map(|v| v.round() as i64).collect::<Vec<_>>(),
        fm = median(&fleet),
        wm = median(&week),
        res = resolution.as_str().unwrap_or("?"),
        points = points,
    );
    println!("{report}");
    let path = workspace_root().join("bench/DASHBOARD.md");
    std::fs::write(&path, &report).expect("write bench/DASHBOARD.md");
    eprintln!("wrote {}", path.display());
    pipeline.stop().await;
}
