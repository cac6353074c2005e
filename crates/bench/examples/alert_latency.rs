//! How fast an alert is open and published: from a breaching reading entering Kinesis to its
//! `opened` event arriving at the local PutEvents endpoint, through the whole pipeline with
//! the template's mapping settings (ingest window `IngestBatchingWindowSeconds` = 1 s, alerts
//! window `AlertBatchingWindowSeconds` = 1 s, the rollups mapping's long window beside it).
//!
//! ```sh
//! cargo run --release -p tidemark-bench --example alert_latency   # writes bench/ALERTS.md
//! cargo run -p tidemark-bench --example alert_latency -- --breaches 20 --out /tmp
//! ```
//!
//! A fleet of devices sends a normal reading every second; every half second one of them
//! sends a breach instead (then normal readings again, which resolve it). Each breach's
//! latency is the time from just before its `PutRecords` call to the first poll (every 20 ms)
//! of the event log that shows its `opened` event. The target (p99 under 10 s) is reported,
//! never asserted. Like `make bench`, it runs on a DynamoDB Local of its own: the shared one
//! slows down after a long test run and would be measured instead of Tidemark.
//! `ALERT_LATENCY_TRACE=1` prints the mappings' progress while it runs (to see where time goes).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;
use tidemark_bench::local_ddb::LocalDynamo;
use tidemark_schema::{AlertId, AlertRule, MetricName, Timestamp};
use tidemark_testkit::{TestStream, workspace_root};

mod common;

const DEVICES: usize = 20;

fn arg(name: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != name).nth(1)
}

async fn put(stream: &TestStream, records: &[(String, serde_json::Value)]) {
    let records: Vec<(String, Vec<u8>)> = records
        .iter()
        .map(|(pk, v)| (pk.clone(), v.to_string().into_bytes()))
        .collect();
    stream.put(&records).await;
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    common::init_tracing();
    let breaches: usize = arg("--breaches").and_then(|n| n.parse().ok()).unwrap_or(60);
    let out_dir = arg("--out").map_or_else(|| workspace_root().join("bench"), Into::into);
    let dynamo = LocalDynamo::start().await.expect("DynamoDB Local starts");
    let stream = TestStream::new("alert-latency", 2).await;
    let pipeline = common::template_pipeline(
        common::Setup {
            label: "alert-latency",
            offline_after_default: 0,
            watchdog: None,
            default_thresholds: r#"{"temperature":{"max":35,"severity":"critical"}}"#.into(),
        },
        &dynamo,
        &stream,
    )
    .await;
    let events = pipeline
        .events
        .clone()
        .expect("the alerts mapping runs in process");

    // Warm-up: the mappings find their shards and the first invocations pay their start-up;
    // measuring starts once a first breach has made it through.
    let warm_at = Timestamp::now();
    put(
        &stream,
        &[(
            "warm_up".into(),
            json!({"deviceId": "warm_up", "timestamp": warm_at.to_string(), "temperature": 40.0}),
        )],
    )
    .await;
    let warm = Instant::now();
    while !events
        .events()
        .await
        .iter()
        .any(|e| e["detail"]["deviceId"] == "warm_up")
    {
        assert!(
            warm.elapsed() < Duration::from_secs(300),
            "the pipeline never published the warm-up alert"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "alert_latency: warm after {:.1} s; measuring {breaches} breaches",
        warm.elapsed().as_secs_f64()
    );

    let temperature = MetricName::new("temperature").expect("metric");
    let mut sent: BTreeMap<String, Instant> = BTreeMap::new();
    let mut latencies: BTreeMap<String, f64> = BTreeMap::new();
    let mut n = 0usize;
    let started = Instant::now();
    let mut seen_events = events.events().await.len();
    let mut last_tick = Instant::now();
    loop {
        // Every 500 ms: one breach (while any are left) and a normal reading of every other
        // device on every second tick.
        if last_tick.elapsed() >= Duration::from_millis(500) || n == 0 {
            last_tick = Instant::now();
            let now = Timestamp::now();
            let breach = (n < breaches).then_some(n % DEVICES);
            let mut records = Vec::new();
            for d in 0..DEVICES {
                let id = format!("lat_{d:02}");
                let t = if breach == Some(d) {
                    40.0
                } else if n % 2 == 0 {
                    22.0
                } else {
                    continue;
                };
                records.push((
                    id.clone(),
                    json!({"deviceId": id, "timestamp": now.to_string(), "temperature": t}),
                ));
            }
            if let Some(d) = breach {
                let alert = AlertId::for_breach(now, &temperature, AlertRule::Max);
                sent.insert(format!("lat_{d:02}/{alert}"), Instant::now());
            }
            if !records.is_empty() {
                put(&stream, &records).await;
            }
            n += 1;
        }
        if std::env::var_os("ALERT_LATENCY_TRACE").is_some() && n % 4 == 0 {
            let st = |m: &std::sync::Arc<tidemark_devstack::esm::MappingStats>| {
                (
                    m.delivered(),
                    m.invocations.load(std::sync::atomic::Ordering::Relaxed),
                    m.last_arrival_millis
                        .load(std::sync::atomic::Ordering::Relaxed),
                )
            };
            eprintln!(
                "t={:.1}s ingest {:?} alerts {:?} now_ms {} seen {}/{}",
                started.elapsed().as_secs_f64(),
                st(&pipeline.ingest),
                pipeline.alerts.as_ref().map(st),
                Timestamp::now().epoch_millis(),
                latencies.len(),
                sent.len()
            );
        }
        let all = events.events().await;
        for e in &all[seen_events..] {
            let d = &e["detail"];
            if d["change"] != "opened" {
                continue;
            }
            let key = format!(
                "{}/{}",
                d["deviceId"].as_str().unwrap_or_default(),
                d["alertId"].as_str().unwrap_or_default()
            );
            if let Some(t0) = sent.get(&key) {
                latencies
                    .entry(key)
                    .or_insert_with(|| t0.elapsed().as_secs_f64());
            }
        }
        seen_events = all.len();
        if latencies.len() == sent.len() && n >= breaches {
            break;
        }
        if started.elapsed() > Duration::from_secs(breaches as u64 + 120) {
            eprintln!(
                "alert_latency: {} of {} breaches never showed an opened event",
                sent.len() - latencies.len(),
                sent.len()
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    pipeline.stop().await;
    dynamo.stop().await;

    let mut v: Vec<f64> = latencies.values().copied().collect();
    v.sort_by(f64::total_cmp);
    let missing = sent.len() - v.len();
    let (p50, p90, p99, max) = if v.is_empty() {
        (f64::NAN, f64::NAN, f64::NAN, f64::NAN)
    } else {
        (
            percentile(&v, 50.0),
            percentile(&v, 90.0),
            percentile(&v, 99.0),
            v[v.len() - 1],
        )
    };
    let verdict = if missing == 0 && p99 < 10.0 {
        "met"
    } else {
        "**missed**"
    };
    let report = format!(
        "# Alert latency\n\n\
         Generated by `cargo run --release -p tidemark-bench --example alert_latency` \
         (part of `make bench`); nothing is edited by hand.\n\n\
         - **Date (UTC):** {date}\n\
         - **What:** time from a breaching reading's `PutRecords` into Kinesis (kinesis-mock) \
         to its `opened` event at the local PutEvents endpoint, through ingest, a DynamoDB Local of its own, \
         its stream and the aggregator's alerts role, all in process on this 2-core machine.\n\
         - **Settings (template.yaml's):** ingest window 1 s, alerts window 1 s, rollups window \
         300 s; mappings poll a caught-up shard every 250 ms.\n\
         - **Load:** after a warm-up breach has gone through, {DEVICES} devices, a normal reading each every second, one breach every \
         0.5 s ({breaches} breaches, each resolved by the device's next reading).\n\n\
         | target | goal | measured | verdict |\n|---|---|---|---|\n\
         | breach → alert open and published, p99 | < 10 s | {p99:.2} s | {verdict} |\n\n\
         | breaches | seen | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|\n\
         | {sent} | {seen} | {p50:.2} s | {p90:.2} s | {p99:.2} s | {max:.2} s |\n\n\
         On AWS the same path adds Lambda's own polling (a Kinesis shard about once a second, \
         a DynamoDB stream shard four times a second) and real network hops, and loses \
         DynamoDB Local's slowness on a shared machine; the windows (1 s + 1 s) are the same.\n",
        date = Timestamp::now(),
        sent = sent.len(),
        seen = v.len(),
    );
    std::fs::create_dir_all(&out_dir).expect("out dir");
    let path = out_dir.join("ALERTS.md");
    std::fs::write(&path, &report).expect("write report");
    print!("{report}");
    eprintln!("alert_latency: wrote {}", path.display());
}
