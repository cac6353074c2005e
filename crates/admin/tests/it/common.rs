//! The admin tests' stack: a table, a Kinesis stream and devstack's in-process pipeline.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tidemark_devstack::LocalConfig;
use tidemark_devstack::esm::MappingConfig;
use tidemark_devstack::pipeline::{AlertsConfig, Functions, Pipeline, PipelineConfig};
use tidemark_schema::{AggregateItem, EntityKey, Timestamp};
use tidemark_testkit::{TestStream, TestTable, rollups, services, unique_name};

pub struct Stack {
    pub table: TestTable,
    pub stream: TestStream,
    pub on_failure: PathBuf,
}

impl Stack {
    pub async fn new(label: &str) -> Stack {
        Stack {
            table: TestTable::new(label).await,
            stream: TestStream::new(label, 2).await,
            on_failure: std::env::temp_dir().join(unique_name(&format!("{label}-onfailure"))),
        }
    }

    /// The pipeline with quick mappings; `dynamodb` is the functions' endpoint (DynamoDB
    /// Local or a fault proxy in front of it).
    pub async fn pipeline(
        &self,
        dynamodb: String,
        tweak: impl Fn(&str, MappingConfig) -> MappingConfig,
    ) -> Pipeline {
        let local = LocalConfig {
            table: self.table.name.clone(),
            stream: self.stream.name.clone(),
            stream_shards: 2,
            dynamodb_endpoint: dynamodb,
            kinesis_endpoint: services().kinesis_endpoint.clone(),
        };
        let quick = |name: &str, window_ms: u64| {
            tweak(
                name,
                MappingConfig {
                    batch_size: 500,
                    batching_window: Duration::from_millis(window_ms),
                    poll_interval: Duration::from_millis(100),
                    shard_refresh: Duration::from_secs(1),
                    retry_backoff: Duration::from_millis(50),
                    on_failure_dir: Some(self.on_failure.join(name)),
                    ..MappingConfig::new(name)
                },
            )
        };
        Pipeline::start(PipelineConfig {
            sign_in: None,
            offline_after_default: 0,
            watchdog: None,
            export: None,
            local,
            api_port: 0,
            functions: Functions::InProcess,
            ingest: quick("ingest", 200),
            rollups: quick("rollups", 500),
            default_layout: None,
            device_identity: tidemark_schema::DeviceIdentity::Payload,
            default_thresholds: "{}".into(),
            alerts: Some(AlertsConfig::ephemeral(quick("alerts", 500))),
        })
        .await
        .unwrap()
    }

    pub async fn publish(&self, records: &[(String, String)]) -> Vec<String> {
        let records: Vec<(String, Vec<u8>)> = records
            .iter()
            .map(|(k, json)| (k.clone(), json.as_bytes().to_vec()))
            .collect();
        self.stream.put(&records).await
    }

    /// Waits until the stored rollups equal the recomputation from the stored readings and
    /// `stored` readings are there; panics with the differences after `limit`.
    pub async fn wait_exact(&self, stored: usize, limit: Duration) {
        let t0 = Instant::now();
        loop {
            let items = self.table.scan().await;
            let n = readings_in(&items).len();
            let diffs = rollups::differences(&items);
            if n == stored && diffs.is_empty() {
                return;
            }
            assert!(
                t0.elapsed() < limit,
                "not exact after {limit:?}: {n} of {stored} readings; {diffs:#?}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// A reading record's partition key and JSON (integral values keep sums exact).
pub fn reading(device: &str, at: Timestamp, temperature: i64) -> (String, String) {
    (
        device.to_owned(),
        format!(r#"{{"deviceId":"{device}","timestamp":"{at}","temperature":{temperature}}}"#),
    )
}

/// `(device, epoch ms)` → temperature of the stored readings, single or packed.
pub fn readings_in(items: &[tidemark_store::Item]) -> BTreeMap<(String, i64), f64> {
    rollups::readings(items)
        .into_iter()
        .filter_map(|(device, at, m)| {
            let t = m.values().next().copied()?;
            Some(((device.to_string(), at.epoch_millis()), t))
        })
        .collect()
}

/// Adds 100 to every count and 1000 to every sum of `device`'s stored rollups.
pub async fn corrupt_rollups(stack: &Stack, device: &str) {
    for item in stack.table.scan().await {
        let Ok(mut agg) = tidemark_store::from_item::<AggregateItem>(item) else {
            continue;
        };
        if !matches!(EntityKey::parse(&agg.pk, &agg.sk), Ok(EntityKey::Aggregate { device: d, .. }) if d.as_str() == device)
        {
            continue;
        }
        for s in agg.metrics.values_mut() {
            s.count += 100;
            s.sum += 1000.0;
        }
        stack
            .table
            .client
            .put_item()
            .table_name(&stack.table.name)
            .set_item(Some(tidemark_store::to_item(&agg).unwrap()))
            .send()
            .await
            .unwrap();
    }
    assert!(!rollups::differences(&stack.table.scan().await).is_empty());
}

/// `minutes` minutes before now.
pub fn ago(minutes: i64) -> Timestamp {
    Timestamp::now().minus_millis(minutes * 60_000).unwrap()
}
