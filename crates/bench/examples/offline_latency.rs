//! How fast a silent device's offline alert is open and published, and how fast its return
//! resolves it: through `make run`'s whole pipeline (kinesis-mock → ingest → a DynamoDB Local
//! of its own → its stream → the alerts role → the local PutEvents endpoint) with the
//! template's settings: ingest and alerts windows 1 s, the watchdog every 60 s
//! (`rate(1 minute)`) waiting at most 20 s for its heartbeats.
//!
//! ```sh
//! cargo run --release -p tidemark-bench --example offline_latency   # writes bench/OFFLINE_LATENCY.md
//! cargo run -p tidemark-bench --example offline_latency -- --devices 6 --spread 60 --out /tmp
//! ```
//!
//! A fleet with the smallest window the API takes (`OFFLINE_AFTER_SECONDS` = 60) sends a
//! reading per device every 5 s. Each device falls silent once, at a time drawn uniformly
//! over `--spread` seconds (so silences never line up with the watchdog's minute, which
//! started with the pipeline), stays silent for the window plus 150 s, then sends again.
//! *Open latency* is from just before the device's last `PutRecords` call to the first poll
//! (every 50 ms) of the event log that shows its `opened` offline event; the issue's target
//! is the window plus 90 s (p99). *Resolve latency* is from just before its first
//! `PutRecords` back to its `resolved` event; the target is an alert change's (`ALERTS.md`:
//! under 10 s). Both are reported, never asserted.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tidemark_bench::api::percentile;
use tidemark_bench::local_ddb::LocalDynamo;
use tidemark_devstack::pipeline::WatchdogSchedule;
use tidemark_schema::Timestamp;
use tidemark_testkit::{TestStream, workspace_root};

mod common;

/// The fleet's offline window: the smallest the API accepts.
const WINDOW_S: u64 = 60;
/// How often each device sends.
const EVERY: Duration = Duration::from_secs(5);
/// How long a device stays silent: long enough that an alert opening late is still seen.
const SILENCE: Duration = Duration::from_secs(WINDOW_S + 150);
/// The template's schedule (`rate(1 minute)`).
const WATCHDOG_PERIOD: Duration = Duration::from_secs(60);

fn arg(name: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != name).nth(1)
}

/// A stable draw in [0, 1) for device `d` (splitmix64), so runs are comparable.
fn draw(d: usize) -> f64 {
    let mut z = (d as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) as f64 / (u64::MAX as f64 + 1.0)
}

/// One device's timeline, as the sender and the event log saw it.
#[derive(Default)]
struct Device {
    /// When it falls silent, from the start of measuring.
    silent_at: Duration,
    next_send: Duration,
    /// Just before its last `PutRecords` before the silence.
    last_put: Option<Instant>,
    /// Just before its first `PutRecords` after it.
    back_put: Option<Instant>,
    opened: Option<Instant>,
    resolved: Option<Instant>,
    /// Offline events it got while it was sending (none expected).
    spurious: usize,
}

/// p50, p90, p99 (nearest rank) and max; NaN for none.
fn stats(v: &mut [f64]) -> [f64; 4] {
    if v.is_empty() {
        return [f64::NAN; 4];
    }
    v.sort_by(f64::total_cmp);
    [
        percentile(v, 50.0),
        percentile(v, 90.0),
        percentile(v, 99.0),
        v.last().copied().unwrap_or(f64::NAN),
    ]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    common::init_tracing();
    let n: usize = arg("--devices").and_then(|v| v.parse().ok()).unwrap_or(40);
    let spread = Duration::from_secs(arg("--spread").and_then(|v| v.parse().ok()).unwrap_or(240));
    let out_dir = arg("--out").map_or_else(|| workspace_root().join("bench"), Into::into);
    let dynamo = LocalDynamo::start().await.expect("DynamoDB Local starts");
    let stream = TestStream::new("offline-latency", 2).await;
    let pipeline = common::template_pipeline(
        common::Setup {
            label: "offline-latency",
            offline_after_default: WINDOW_S as u32,
            watchdog: Some(WatchdogSchedule::every(WATCHDOG_PERIOD)),
            default_thresholds: "{}".into(),
        },
        &dynamo,
        &stream,
    )
    .await;
    let events = pipeline
        .events
        .clone()
        .expect("the alerts mapping runs in process");

    // Every device sends from the start; the first silence comes after a window's worth of
    // sending, so each device is registered and watched before it falls silent.
    let warm = Duration::from_secs(WINDOW_S);
    let mut devices: BTreeMap<String, Device> = (0..n)
        .map(|d| {
            let id = format!("quiet_{d:02}");
            let dev = Device {
                silent_at: warm + spread.mul_f64(draw(d)),
                next_send: EVERY.mul_f64(d as f64 / n as f64),
                ..Device::default()
            };
            (id, dev)
        })
        .collect();
    let end = warm + spread + SILENCE + Duration::from_secs(30);
    eprintln!(
        "offline_latency: {n} devices, silences over {} s from {} s, about {} s in all",
        spread.as_secs(),
        warm.as_secs(),
        end.as_secs()
    );
    let started = Instant::now();
    let mut seen = 0usize;
    loop {
        let t = started.elapsed();
        let mut records = Vec::new();
        let mut sending = Vec::new();
        for (id, d) in devices.iter_mut() {
            let silent = t >= d.silent_at && t < d.silent_at + SILENCE;
            if t < d.next_send {
                continue;
            }
            d.next_send += EVERY;
            if silent {
                continue;
            }
            let at = Timestamp::now();
            let body = json!({"deviceId": id, "timestamp": at.to_string(), "t": 21.5});
            records.push((id.clone(), body.to_string().into_bytes()));
            sending.push((id.clone(), t >= d.silent_at + SILENCE));
        }
        if !records.is_empty() {
            let put_at = Instant::now();
            stream.put(&records).await;
            for (id, back) in sending {
                let d = devices.get_mut(&id).expect("a device of the fleet");
                if back {
                    d.back_put.get_or_insert(put_at);
                } else {
                    d.last_put = Some(put_at);
                }
            }
        }
        for (at, e) in events.since(seen).await {
            seen += 1;
            let detail: &Value = &e["detail"];
            if detail["kind"] != "offline" {
                continue;
            }
            let Some(d) = detail["deviceId"]
                .as_str()
                .and_then(|id| devices.get_mut(id))
            else {
                continue;
            };
            match detail["change"].as_str() {
                Some("opened") if d.last_put.is_some() && d.opened.is_none() => {
                    d.opened = Some(at);
                }
                Some("resolved") if d.back_put.is_some() && d.resolved.is_none() => {
                    d.resolved = Some(at);
                }
                _ => d.spurious += 1,
            }
        }
        let done = devices.values().all(|d| d.resolved.is_some());
        if done || t > end {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    pipeline.stop().await;
    dynamo.stop().await;

    let window = WINDOW_S as f64;
    let mut open: Vec<f64> = devices
        .values()
        .filter_map(|d| Some(d.opened?.duration_since(d.last_put?).as_secs_f64() - window))
        .collect();
    let mut resolve: Vec<f64> = devices
        .values()
        .filter_map(|d| Some(d.resolved?.duration_since(d.back_put?).as_secs_f64()))
        .collect();
    let spurious: usize = devices.values().map(|d| d.spurious).sum();
    let (opened, resolved) = (open.len(), resolve.len());
    let o = stats(&mut open);
    let r = stats(&mut resolve);
    let verdict = |ok: bool| if ok { "met" } else { "**missed**" };
    let open_ok = opened == n && spurious == 0 && o[2] <= 90.0;
    let resolve_ok = resolved == n && r[2] < 10.0;
    let report = format!(
        "# Offline alert latency\n\n\
         Generated by `cargo run --release -p tidemark-bench --example offline_latency` \
         (part of `make bench`); nothing is edited by hand. How it measures is in the example's \
         doc comment (`crates/bench/examples/offline_latency.rs`).\n\n\
         - **Date (UTC):** {date}\n\
         - **What:** from a device's last `PutRecords` into Kinesis (kinesis-mock) to its \
         `opened` offline event at the local PutEvents endpoint, and from its first \
         `PutRecords` back to its `resolved` event, through ingest, a DynamoDB Local of its \
         own, its stream, the alerts role and the watchdog, all in process on this 2-core \
         machine, in real time.\n\
         - **Settings (template.yaml's):** ingest window 1 s, alerts window 1 s, rollups \
         window 300 s, the watchdog every 60 s waiting at most 20 s for its heartbeats; \
         mappings poll a caught-up shard every 250 ms. `OFFLINE_AFTER_SECONDS` = {WINDOW_S} \
         (the smallest window; a longer one moves the deadline, not the latency after it).\n\
         - **Load:** {n} devices, a reading each every {every} s; each falls silent once, at \
         a time drawn uniformly over {spread} s (so the silences fall at every phase of the \
         watchdog's minute), for {silence} s, then sends again.\n\n\
         | target | goal | measured | verdict |\n|---|---|---|---|\n\
         | last arrival → offline alert open and published, p99 | ≤ window + 90 s | \
         window + {o2:.1} s ({opened} of {n} opened, {spurious} offline events while sending) \
         | {ov} |\n\
         | next arrival → `resolved` published, p99 | < 10 s (an alert change, `ALERTS.md`) \
         | {r2:.2} s ({resolved} of {n}) | {rv} |\n\n\
         | latency | samples | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|\n\
         | open, beyond the window | {opened} | {o0:.1} s | {o1:.1} s | {o2:.1} s | {o3:.1} s |\n\
         | resolve | {resolved} | {r0:.2} s | {r1:.2} s | {r2:.2} s | {r3:.2} s |\n\n\
         Where the open latency comes from: the watchdog decides up to its watermark (the \
         heartbeats it put into each shard at the run's start, once ingest has stored them and \
         the alerts role has seen them), so a device's deadline is caught by the first run \
         starting after it: 0 to 60 s, uniform over the silences' phases, plus the \
         heartbeats' way through the pipeline and the alerts role publishing the change (its \
         1 s window). Percentiles are nearest-rank: with {n} samples the p99 is the worst of them.\n\n\
         On AWS the path adds Lambda's own polling (a Kinesis shard about once a second, a \
         DynamoDB stream shard four times a second) and EventBridge Scheduler's own delay in \
         starting each run, and loses DynamoDB Local's slowness on a shared machine.\n",
        date = Timestamp::now(),
        every = EVERY.as_secs(),
        spread = spread.as_secs(),
        silence = SILENCE.as_secs(),
        ov = verdict(open_ok),
        rv = verdict(resolve_ok),
        o0 = o[0],
        o1 = o[1],
        o2 = o[2],
        o3 = o[3],
        r0 = r[0],
        r1 = r[1],
        r2 = r[2],
        r3 = r[3],
    );
    std::fs::create_dir_all(&out_dir).expect("out dir");
    let path = out_dir.join("OFFLINE_LATENCY.md");
    std::fs::write(&path, &report).expect("write report");
    print!("{report}");
    eprintln!("offline_latency: wrote {}", path.display());
}
