//! DynamoDB outages through `make run`'s pipeline: Kinesis → ingest → table → stream →
//! aggregator, the functions' DynamoDB calls going through a fault-injecting proxy that fails
//! every call, twice, each time for longer than the 10 retries the mappings used to allow:
//! once before ingest has written anything, once while the aggregator has records to apply.
//! When DynamoDB comes back the pipeline catches up by itself: every reading stored once,
//! every rollup exact.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tidemark_devstack::LocalConfig;
use tidemark_devstack::esm::{MappingConfig, read_on_failure_records};
use tidemark_devstack::pipeline::{AlertsConfig, Pipeline, PipelineConfig};
use tidemark_schema::{EntityKey, ReadingItem, Timestamp};
use tidemark_testkit::{
    Fault, FaultProxy, TestStream, TestTable, eventually, rollups, services, unique_name,
};

/// Each of the two outages: longer than the old mapping's 10 retries took with this test's
/// 50 ms first backoff (about 21 s of backoff plus the failing invocations).
const OUTAGE: Duration = Duration::from_secs(40);

/// `(device, epoch ms)` → the record's JSON; integral values, so sums are exact.
fn readings(
    devices: &[&str],
    start: Timestamp,
    n: usize,
    salt: i64,
) -> BTreeMap<(String, i64), String> {
    let mut out = BTreeMap::new();
    for (d, device) in devices.iter().enumerate() {
        for i in 0..n {
            // Spread over two hours (three hourly buckets), a reading every ~4 minutes.
            let at = start.epoch_millis() + (i as i64) * 241_000 + (d as i64) * 1_000 + salt;
            let ts = Timestamp::from_epoch_millis(at).unwrap();
            let temp = (i as i64 * 7 + d as i64 * 3 + salt) % 40;
            let hum = 30 + (i as i64 * 5 + salt) % 50;
            out.insert(
                ((*device).to_owned(), at),
                format!(
                    r#"{{"deviceId":"{device}","timestamp":"{ts}","temperature":{temp},"humidity":{hum}}}"#
                ),
            );
        }
    }
    out
}

async fn publish(stream: &TestStream, records: &BTreeMap<(String, i64), String>) {
    let records: Vec<(String, Vec<u8>)> = records
        .iter()
        .map(|((d, _), json)| (d.clone(), json.as_bytes().to_vec()))
        .collect();
    stream.put(&records).await;
}

/// The stored readings: `(device, epoch ms)` → metrics.
fn stored_readings(
    items: &[tidemark_store::Item],
) -> BTreeMap<(String, i64), BTreeMap<String, f64>> {
    items
        .iter()
        .filter_map(|i| {
            let r: ReadingItem = tidemark_store::from_item(i.clone()).ok()?;
            let EntityKey::Reading { device, at, .. } = EntityKey::parse(&r.pk, &r.sk).ok()? else {
                return None;
            };
            let metrics = r.metrics.iter().map(|(k, v)| (k.to_string(), *v)).collect();
            Some(((device.to_string(), at.epoch_millis()), metrics))
        })
        .collect()
}

fn sent_metrics(
    sent: &BTreeMap<(String, i64), String>,
) -> BTreeMap<(String, i64), BTreeMap<String, f64>> {
    sent.iter()
        .map(|(k, json)| {
            let v: serde_json::Value = serde_json::from_str(json).unwrap();
            let m = ["temperature", "humidity"]
                .iter()
                .map(|n| ((*n).to_owned(), v[*n].as_f64().unwrap()))
                .collect();
            (k.clone(), m)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dynamodb_outage_longer_than_ten_retries_loses_and_double_counts_nothing() {
    // GIVEN make run's pipeline whose functions reach DynamoDB through a fault proxy
    let table = TestTable::new("outage").await;
    let stream = TestStream::new("outage", 2).await;
    let proxy = FaultProxy::start(services().dynamodb_addr()).await.unwrap();
    let local = LocalConfig {
        table: table.name.clone(),
        stream: stream.name.clone(),
        stream_shards: 2,
        dynamodb_endpoint: proxy.endpoint(),
        kinesis_endpoint: services().kinesis_endpoint.clone(),
    };
    let on_failure = std::env::temp_dir().join(unique_name("outage-onfailure"));
    let base = PipelineConfig::from_env(local).unwrap();
    // The mappings' own settings (retry count included) are make run's; only the waits are
    // shortened so the test is quick.
    let tune = |m: MappingConfig, window_ms: u64, dir: &str| MappingConfig {
        batching_window: Duration::from_millis(window_ms),
        poll_interval: Duration::from_millis(100),
        shard_refresh: Duration::from_secs(1),
        retry_backoff: Duration::from_millis(50),
        on_failure_dir: Some(on_failure.join(dir)),
        ..m
    };
    let cfg = PipelineConfig {
        sign_in: None,
        offline_after_default: 0,
        watchdog: None,
        export: None,
        api_port: 0,
        ingest: tune(base.ingest.clone(), 300, "ingest"),
        rollups: tune(base.rollups.clone(), 1_000, "rollups"),
        alerts: Some(AlertsConfig::ephemeral(tune(
            base.alerts.clone().expect("the alerts mapping").mapping,
            1_000,
            "alerts",
        ))),
        ..base
    };
    let pipeline = Pipeline::start(cfg).await.unwrap();

    let retries = |m: &tidemark_devstack::esm::MappingStats| {
        m.partial_failures.load(Ordering::Relaxed) + m.function_errors.load(Ordering::Relaxed)
    };
    let devices = ["outage-a", "outage-b", "outage-c"];
    let start = Timestamp::now().minus_millis(2 * 3_600_000).unwrap();
    let first = readings(&devices, start, 15, 0);
    let second = readings(&devices, start, 15, 500);

    // WHEN DynamoDB fails every call (throttling and 500s) from before ingest ever reached it,
    // while readings of three devices over the last two hours arrive, for longer than ten
    // retries take
    proxy.fail_with(Fault::Both);
    publish(&stream, &first).await;
    // The outage's length: this sleep paces the fault only; the outcome is polled below.
    tokio::time::sleep(OUTAGE).await;
    let ingest_retries = retries(&pipeline.ingest);
    proxy.recover();
    let t0 = Instant::now();
    // (Handled means delivered, or given up on by a mapping with a finite retry count: then
    // the final check shows what was lost.) Polled every 20 ms, not with `eventually`'s
    // 100 ms: the next outage should begin before the aggregator has applied them.
    while pipeline.ingest.delivered() + pipeline.ingest.discarded() < first.len() as u64 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "ingest never handled the first readings after the outage"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // AND again once they are stored but before the aggregator has applied them, while more
    // readings arrive
    proxy.fail_with(Fault::Both);
    publish(&stream, &second).await;
    // The second outage's length (pacing only, as above).
    tokio::time::sleep(OUTAGE).await;
    let aggregator_retries = retries(&pipeline.rollups);
    proxy.recover();

    // THEN the pipeline catches up by itself: every reading stored once, every rollup exact
    let mut sent = first.clone();
    sent.extend(second.clone());
    let want = sent_metrics(&sent);
    let last = crate::common::LastSeen::default();
    eventually(
        Duration::from_secs(120),
        "the pipeline catches up by itself",
        || async {
            let items = table.scan().await;
            let got = stored_readings(&items);
            let diffs = rollups::differences(&items);
            last.set(format!(
                "{} of {} readings stored; rollup differences: {diffs:#?}",
                got.len(),
                want.len()
            ));
            (got == want && diffs.is_empty()).then_some(())
        },
    )
    .await;
    let (ingest_discarded, aggregator_discarded) =
        (pipeline.ingest.discarded(), pipeline.rollups.discarded());
    pipeline.stop().await;
    // AND the outages really hit both functions, and no mapping skipped a batch
    assert!(ingest_retries > 0, "ingest never saw the outage");
    assert!(
        aggregator_retries > 0,
        "the aggregator never saw the outage"
    );
    assert_eq!((ingest_discarded, aggregator_discarded), (0, 0));
    assert!(read_on_failure_records(&on_failure.join("ingest")).is_empty());
    assert!(read_on_failure_records(&on_failure.join("rollups")).is_empty());
}
