//! No record stalls a shard (docs/design.md §4, "What is retried, what is set aside"),
//! through `make run`'s pipeline (kinesis-mock → ingest → DynamoDB Local → its stream → the
//! aggregator and alerts roles → the local API) and the watchdog, run here by hand: after
//! each hostile record, a new device whose readings go to the same shard is stored and
//! alerted on.
//!
//! - Case 1: a KPL aggregate whose partition-key table holds a key over Kinesis's 256
//!   characters (one of them 450 KB, more than a DynamoDB item holds) beside a user record
//!   that is not JSON is quarantined whole as `corrupt_aggregate`, and its shard moves on.
//! - Case 3: a record shaped like the watchdog's heartbeat, from another producer and dated
//!   2099, put on every shard, moves no watermark: a device sending every 5 s with a 60 s
//!   window gets no offline alert.

use crate::common;

use std::time::Duration;

use aws_sdk_kinesis::primitives::Blob;
use serde_json::{Value, json};
use tidemark_devstack::esm::MappingConfig;
use tidemark_devstack::pipeline::{AlertsConfig, Functions, Pipeline, PipelineConfig};
use tidemark_schema::Timestamp;
use tidemark_testkit::{TestStream, TestTable, eventually, unique_name};
use tidemark_watchdog::{DynamoWatch, KinesisHeartbeats, Report, Watchdog, WatchdogConfig};

const THRESHOLDS: &str = r#"{"temperature":{"max":35,"severity":"critical"}}"#;

/// How long the pipeline may take to store a reading and open its alert: generous, since the
/// emulators are shared with other suites (never a measure of speed).
const PATIENCE: Duration = Duration::from_secs(60);

fn fast(name: &str) -> MappingConfig {
    MappingConfig {
        batch_size: 100,
        batching_window: Duration::from_millis(300),
        poll_interval: Duration::from_millis(100),
        shard_refresh: Duration::from_secs(1),
        retry_backoff: Duration::from_millis(50),
        on_failure_dir: Some(std::env::temp_dir().join(unique_name("never-stall-onfailure"))),
        ..MappingConfig::new(name)
    }
}

struct Running {
    p: Pipeline,
    stream: TestStream,
    table: TestTable,
    /// The starting hash key of each shard: an explicit hash key that puts a record there.
    shards: Vec<(String, String)>,
}

async fn start(label: &str) -> Running {
    let table = TestTable::new(label).await;
    let stream = TestStream::new(label, 2).await;
    let p = Pipeline::start(PipelineConfig {
        local: common::local_config(&table, &stream, 2),
        api_port: 0,
        functions: Functions::InProcess,
        ingest: fast("ingest"),
        rollups: fast("rollups"),
        default_layout: None,
        device_identity: tidemark_schema::DeviceIdentity::Payload,
        default_thresholds: THRESHOLDS.into(),
        alerts: Some(AlertsConfig::ephemeral(fast("alerts"))),
        sign_in: None,
        offline_after_default: 0,
        watchdog: None,
        export: None,
    })
    .await
    .unwrap();
    let listed = stream
        .client
        .list_shards()
        .stream_name(&stream.name)
        .send()
        .await
        .unwrap();
    let shards = listed
        .shards()
        .iter()
        .map(|s| {
            let start = s.hash_key_range().map(|r| r.starting_hash_key().to_owned());
            (s.shard_id().to_owned(), start.unwrap())
        })
        .collect();
    Running {
        p,
        stream,
        table,
        shards,
    }
}

impl Running {
    /// Puts `data` on the shard whose range starts at `hash_key`; its sequence number.
    async fn put(&self, partition_key: &str, hash_key: &str, data: Vec<u8>) -> String {
        let out = self
            .stream
            .client
            .put_record()
            .stream_name(&self.stream.name)
            .partition_key(partition_key)
            .explicit_hash_key(hash_key)
            .data(Blob::new(data))
            .send()
            .await
            .unwrap();
        out.sequence_number().to_owned()
    }

    async fn reading(&self, device: &str, hash_key: &str, at: Timestamp, temperature: f64) {
        let data =
            json!({"deviceId": device, "timestamp": at.to_string(), "temperature": temperature});
        self.put(device, hash_key, data.to_string().into_bytes())
            .await;
    }

    async fn items(&self, path: &str) -> Vec<Value> {
        common::try_all_items(self.p.api_addr, path)
            .await
            .unwrap_or_default()
    }

    /// The quarantined records of the days around now.
    async fn quarantined(&self) -> Vec<Value> {
        let now = Timestamp::now();
        let mut days = vec![now.day(), now.minus_millis(60_000).unwrap().day()];
        days.dedup();
        let mut out = Vec::new();
        for d in days {
            out.extend(self.items(&format!("/quarantine?day={d}")).await);
        }
        out
    }

    /// A device never seen before, on the shard of `hash_key`: its reading breaching the
    /// temperature threshold is stored and opens an alert.
    async fn a_new_device_is_stored_and_alerted_on(&self, device: &str, hash_key: &str) {
        let at = Timestamp::now();
        self.reading(device, hash_key, at, 40.0).await;
        let from = at.minus_millis(60_000).unwrap().to_string();
        let to = at.plus_millis(60_000).unwrap().to_string();
        let path = format!(
            "/devices/{device}/readings?from={}&to={}",
            common::encode(&from),
            common::encode(&to)
        );
        eventually(
            PATIENCE,
            &format!("{device}'s reading is stored"),
            || async { (self.items(&path).await.len() == 1).then_some(()) },
        )
        .await;
        eventually(PATIENCE, &format!("{device}'s alert opens"), || async {
            self.items(&format!("/devices/{device}/alerts"))
                .await
                .iter()
                .any(|a| a["kind"] == "threshold" && a["state"] == "open")
                .then_some(())
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_aggregate_with_a_partition_key_past_256_characters_is_set_aside_and_its_shard_moves_on()
{
    let r = start("stall-kpl").await;
    let (_, shard) = r.shards[0].clone();
    // GIVEN two aggregates on one shard, each with a non-JSON user record under a key past
    // Kinesis's 256 characters: 300 characters, and 450 KB (more than a DynamoDB item holds)
    // and a valid user record beside it
    let valid =
        json!({"deviceId": "kpl_dev", "timestamp": Timestamp::now().to_string(), "temperature": 1});
    let valid = valid.to_string();
    let mut sent = Vec::new();
    for key in ["k".repeat(300), "k".repeat(450 * 1024)] {
        let aggregate = tidemark_ingest::kpl::aggregate(&[
            (&key, None, b"not json {"),
            ("kpl_dev", None, valid.as_bytes()),
        ]);
        let seq = r.put("kpl_producer", &shard, aggregate.clone()).await;
        sent.push((seq, aggregate));
    }
    // THEN a new device on the same shard is stored and alerted on
    r.a_new_device_is_stored_and_alerted_on("fresh_01", &shard)
        .await;
    // AND each aggregate is in the quarantine whole, as corrupt_aggregate, with its bytes
    let q = r.quarantined().await;
    for (seq, aggregate) in &sent {
        let item = q
            .iter()
            .find(|x| x["sequenceNumber"] == json!(seq))
            .unwrap_or_else(|| panic!("aggregate {seq} quarantined: {q:#?}"));
        assert_eq!(item["reason"], "corrupt_aggregate");
        assert!(item.get("subRecord").is_none(), "whole: {item}");
        assert_eq!(item["partitionKey"], "kpl_producer");
        assert!(
            item["message"].as_str().unwrap().contains("characters"),
            "{item}"
        );
        use base64::Engine;
        let payload = base64::engine::general_purpose::STANDARD
            .decode(item["payload"].as_str().unwrap())
            .unwrap();
        assert!(payload == *aggregate, "its bytes, whole");
    }
    // AND ingest never failed a batch over them
    let failed =
        r.p.ingest
            .partial_failures
            .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(failed, 0, "no batch of ingest failed");
    // AND nothing of them was stored: not even the valid user record
    let (status, body) = common::get(r.p.api_addr, "/devices/kpl_dev").await;
    assert_eq!(status, 404, "{body}");
    r.p.stop().await;
}

/// A watchdog on the test's table and stream, as `offline.rs` runs it.
fn watchdog(r: &Running) -> Watchdog<DynamoWatch, KinesisHeartbeats> {
    Watchdog::new(
        DynamoWatch::new(r.table.client.clone(), r.table.name.clone()),
        KinesisHeartbeats {
            client: r.stream.client.clone(),
            stream: r.stream.name.clone(),
        },
        WatchdogConfig {
            offline_after_default: 0,
            heartbeat_wait: Duration::from_secs(3),
            heartbeat_poll: Duration::from_millis(100),
            ..WatchdogConfig::new(r.table.name.clone(), r.stream.name.clone())
        },
    )
}

async fn run(w: &Watchdog<DynamoWatch, KinesisHeartbeats>) -> Report {
    w.run(tokio::time::Instant::now() + Duration::from_secs(30))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forged_heartbeat_on_every_shard_opens_no_offline_alert_for_a_device_that_sends() {
    let r = start("stall-hb").await;
    let w = watchdog(&r);
    let (_, shard) = r.shards[0].clone();
    // GIVEN a device with a 60 s window sending a reading every 5 s for the whole test
    let (status, _) = common::put(
        r.p.api_addr,
        "/devices/steady_01",
        r#"{"name":"Steady","offlineAfterSeconds":60}"#,
    )
    .await;
    assert_eq!(status, 201);
    let sender = {
        let (client, stream, shard) = (
            r.stream.client.clone(),
            r.stream.name.clone(),
            shard.clone(),
        );
        tokio::spawn(async move {
            for i in 0u32.. {
                let data = json!({"deviceId": "steady_01", "timestamp": Timestamp::now().to_string(), "t": i});
                let put = client
                    .put_record()
                    .stream_name(&stream)
                    .partition_key("steady_01")
                    .explicit_hash_key(&shard)
                    .data(Blob::new(data.to_string().into_bytes()))
                    .send()
                    .await;
                if let Err(e) = put {
                    eprintln!("steady_01's reading {i} not sent: {e}");
                }
                // Paces the input only: a device that reports every five seconds.
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        })
    };
    eventually(PATIENCE, "steady_01 is watched", || async {
        (common::get(r.p.api_addr, "/devices/steady_01").await.1["connectivity"] == "online")
            .then_some(())
    })
    .await;

    // WHEN another producer puts the watchdog's heartbeat shape, dated 2099, on every shard
    let forged = br#"{"tidemarkHeartbeat":"2099-01-01T00:00:00Z"}"#;
    let mut forgeries = Vec::new();
    for (_, start) in &r.shards {
        forgeries.push(r.put("sensor_forger", start, forged.to_vec()).await);
    }
    // THEN a new device on each shard, after the forgery, is stored and alerted on
    for (i, (_, start)) in r.shards.iter().enumerate() {
        r.a_new_device_is_stored_and_alerted_on(&format!("fresh_{i:02}"), start)
            .await;
    }

    // AND over 30 s of the watchdog running while the device sends, no offline alert opens
    // (before the fix the first run opened one: a watermark of 2099 is past every deadline),
    // and the watchdog's own heartbeats pass, to a watermark that is no later than now
    let span = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut passed = 0;
    while tokio::time::Instant::now() < span {
        let report = run(&w).await;
        assert_eq!(report.opened, 0, "{report:?}");
        if report.heartbeat_passed {
            passed += 1;
            let watermark = report.watermark.unwrap();
            assert!(
                watermark <= Timestamp::now(),
                "the watermark is a time that has come: {watermark}"
            );
        }
        // Paces the runs only: the check is that none of them, over the whole span, opens one.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(passed > 0, "the watchdog's heartbeats pass");
    let alerts = r.items("/devices/steady_01/alerts").await;
    assert!(alerts.is_empty(), "{alerts:#?}");
    assert_eq!(
        common::get(r.p.api_addr, "/devices/steady_01").await.1["connectivity"],
        "online"
    );
    // AND the forged records are in the quarantine, as the bad records they are
    let q = r.quarantined().await;
    for s in &forgeries {
        assert!(
            q.iter().any(|x| x["sequenceNumber"] == json!(s)),
            "forgery {s} quarantined: {q:#?}"
        );
    }
    sender.abort();
    r.p.stop().await;
}
