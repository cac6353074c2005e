//! What must survive the whole pipeline (Kinesis → ingest → table → stream → aggregator →
//! API), sent the way real fleets send it: gateways publishing one record per sensor with a
//! shared timestamp, corrections, resends, and devices sampling faster than a millisecond.

use std::time::Duration;

use serde_json::{Value, json};
use tidemark_devstack::esm::MappingConfig;
use tidemark_devstack::pipeline::{AlertsConfig, Functions, Pipeline, PipelineConfig};
use tidemark_schema::Timestamp;
use tidemark_testkit::{TestStream, TestTable, eventually};

use crate::common;
use crate::common::{LastSeen, encode, try_all_items};

struct Running {
    pipeline: Pipeline,
    stream: TestStream,
    _table: TestTable,
    sent: u64,
}

async fn start(label: &str) -> Running {
    let table = TestTable::new(label).await;
    let stream = TestStream::new(label, 1).await;
    let local = common::local_config(&table, &stream, 1);
    let fast = |name: &str| MappingConfig {
        batch_size: 100,
        batching_window: Duration::from_millis(200),
        poll_interval: Duration::from_millis(100),
        shard_refresh: Duration::from_secs(1),
        ..MappingConfig::new(name)
    };
    let pipeline = Pipeline::start(PipelineConfig {
        sign_in: None,
        offline_after_default: 0,
        watchdog: None,
        export: None,
        local,
        api_port: 0,
        functions: Functions::InProcess,
        ingest: fast("ingest"),
        rollups: fast("rollups"),
        default_layout: None,
        device_identity: tidemark_schema::DeviceIdentity::Payload,
        default_thresholds: "{}".into(),
        alerts: Some(AlertsConfig::ephemeral(fast("alerts"))),
    })
    .await
    .unwrap();
    Running {
        pipeline,
        stream,
        _table: table,
        sent: 0,
    }
}

impl Running {
    /// Puts the records into Kinesis (one partition key per device, as devices do) and waits
    /// until ingest has taken all of them, so the next call's records land in later batches.
    async fn send(&mut self, records: &[Value]) {
        for r in records {
            let device = r["deviceId"].as_str().unwrap().to_owned();
            self.stream
                .client
                .put_record()
                .stream_name(&self.stream.name)
                .partition_key(device)
                .data(aws_sdk_kinesis::primitives::Blob::new(
                    serde_json::to_vec(r).unwrap(),
                ))
                .send()
                .await
                .unwrap();
        }
        self.sent += records.len() as u64;
        let sent = self.sent;
        eventually(
            Duration::from_secs(60),
            "ingest takes the records",
            || async { (self.pipeline.ingest.delivered() >= sent).then_some(()) },
        )
        .await;
    }

    /// Polls a list route until `done` accepts its items (60 s at most).
    async fn until(&self, path: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let last = LastSeen::default();
        eventually(
            Duration::from_secs(60),
            &format!("{path} matches"),
            || async {
                match try_all_items(self.pipeline.api_addr, path).await {
                    Ok(items) if done(&items) => Some(items),
                    Ok(items) => {
                        last.set(format!("{items:?}"));
                        None
                    }
                    Err(e) => {
                        last.set(e);
                        None
                    }
                }
            },
        )
        .await
    }
}

fn range(at: Timestamp) -> String {
    let from = at.minus_millis(3_600_000).unwrap();
    let to = at.plus_millis(3_600_000).unwrap();
    format!(
        "from={}&to={}",
        encode(&from.to_string()),
        encode(&to.to_string())
    )
}

fn stats<'a>(aggregates: &'a [Value], metric: &str) -> &'a Value {
    &aggregates[0]["metrics"][metric]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_sharing_a_timestamp_become_one_reading_with_every_metric_counted_once() {
    let mut p = start("same-ts").await;
    let at = Timestamp::now().minus_millis(10 * 60_000).unwrap();
    let t = at.to_string();
    let reading = |m: Value| {
        let mut r = json!({"deviceId": "gw_01", "timestamp": t});
        r.as_object_mut()
            .unwrap()
            .extend(m.as_object().unwrap().clone());
        r
    };
    // GIVEN a gateway sending one record per sensor with the same timestamp: two in one batch,
    p.send(&[
        reading(json!({"temperature": 22.4})),
        reading(json!({"humidity": 45})),
    ])
    .await;
    // a third in a later batch,
    p.send(&[reading(json!({"pressure": 1013.2}))]).await;
    // then a correction of the temperature, and an exact resend of the humidity record
    p.send(&[reading(json!({"temperature": 23.0}))]).await;
    p.send(&[reading(json!({"humidity": 45}))]).await;

    // THEN the API shows one reading holding every metric, the correction's value winning
    let path = format!("/devices/gw_01/readings?{}", range(at));
    let readings = p
        .until(&path, |items| {
            items.len() == 1 && items[0]["temperature"].as_f64() == Some(23.0)
        })
        .await;
    assert_eq!(readings[0]["timestamp"], json!(t));
    assert_eq!(readings[0]["humidity"].as_f64(), Some(45.0));
    assert_eq!(readings[0]["pressure"].as_f64(), Some(1013.2));

    // AND the hourly rollup counts each metric once, with the corrected value
    let path = format!("/devices/gw_01/aggregates?period=hourly&{}", range(at));
    let hourly = p
        .until(&path, |items| {
            items.len() == 1
                && items[0]["metrics"]["temperature"]["sum"].as_f64() == Some(23.0)
                && items[0]["metrics"]["pressure"]["count"] == json!(1)
        })
        .await;
    for m in ["temperature", "humidity", "pressure"] {
        assert_eq!(stats(&hourly, m)["count"], json!(1), "{m}: {hourly:?}");
    }
    assert_eq!(stats(&hourly, "humidity")["sum"].as_f64(), Some(45.0));
    let path = format!("/devices/gw_01/aggregates?period=daily&{}", range(at));
    let daily = p
        .until(&path, |items| {
            items.len() == 1 && items[0]["metrics"]["temperature"]["sum"].as_f64() == Some(23.0)
        })
        .await;
    assert_eq!(stats(&daily, "temperature")["count"], json!(1));
    assert_eq!(stats(&daily, "humidity")["count"], json!(1));
    p.pipeline.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_sampling_faster_than_a_millisecond_keeps_every_reading() {
    let mut p = start("sub-ms").await;
    let at = Timestamp::now().minus_millis(10 * 60_000).unwrap();
    // GIVEN 8 readings 125 µs apart (8 kHz), sent as RFC 3339 with microseconds and nanoseconds
    let sent: Vec<(Timestamp, f64)> = (0..8)
        .map(|i| (at.plus_micros(i * 125).unwrap(), i as f64))
        .collect();
    let records: Vec<Value> = sent
        .iter()
        .enumerate()
        .map(|(i, (t, v))| {
            let text = if i % 2 == 0 {
                t.to_string()
            } else {
                t.to_string().replace('Z', "999Z") // nine digits: the rest is truncated
            };
            json!({"deviceId": "fast_01", "timestamp": text, "vibration": v})
        })
        .collect();
    p.send(&records).await;
    // THEN every reading is stored, in time order, with its microseconds
    let path = format!("/devices/fast_01/readings?{}&limit=3", range(at));
    let readings = p.until(&path, |items| items.len() == 8).await;
    let got: Vec<(String, f64)> = readings
        .iter()
        .map(|r| {
            (
                r["timestamp"].as_str().unwrap().to_owned(),
                r["vibration"].as_f64().unwrap(),
            )
        })
        .collect();
    let want: Vec<(String, f64)> = sent.iter().map(|(t, v)| (t.to_string(), *v)).collect();
    assert_eq!(got, want);
    // AND the rollup counts all of them
    let path = format!("/devices/fast_01/aggregates?period=hourly&{}", range(at));
    p.until(&path, |items| {
        items.len() == 1 && items[0]["metrics"]["vibration"]["count"] == json!(8)
    })
    .await;
    p.pipeline.stop().await;
}
