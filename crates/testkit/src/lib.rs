//! Test harness for Tidemark's integration tests.
//!
//! Starts DynamoDB Local and kinesis-mock through `scripts/services.sh` (the same script
//! `make run` uses) unless they already answer, once per test process; the script's lock
//! makes concurrent test processes share one start. Every test gets its own uniquely named
//! table or stream, deleted when the guard drops, so tests never see each other's data.

pub mod browser;
pub mod duckdb;
pub mod eventually;
pub mod fault_proxy;
pub mod oidc;
pub mod rollups;

pub use eventually::{eventually, eventually_blocking};
pub use fault_proxy::{Fault, FaultProxy};

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tidemark_store::ClientSettings;

/// Where the local services listen.
#[derive(Debug, Clone)]
pub struct Services {
    pub dynamodb_endpoint: String,
    pub kinesis_endpoint: String,
    /// moto's S3 server (the export's bucket).
    pub s3_endpoint: String,
}

impl Services {
    /// DynamoDB Local's socket address (for tools that proxy it, like the bench's meter).
    pub fn dynamodb_addr(&self) -> std::net::SocketAddr {
        use std::net::ToSocketAddrs;
        self.dynamodb_endpoint
            .trim_start_matches("http://")
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .unwrap_or_else(|| panic!("cannot resolve {}", self.dynamodb_endpoint))
    }
}

fn port(var: &str, default: u16) -> u16 {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn answers(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_ok()
}

/// The workspace root (the folder holding `scripts/`).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root exists")
}

/// Starts or reuses the local services; panics with the script's output if they cannot start.
pub fn services() -> &'static Services {
    static S: OnceLock<Services> = OnceLock::new();
    S.get_or_init(|| {
        let ddb = port("TIDEMARK_DYNAMODB_PORT", 8000);
        let kin = port("TIDEMARK_KINESIS_PORT", 4567);
        let s3 = port("TIDEMARK_S3_PORT", 4569);
        if !(answers(ddb) && answers(kin) && answers(s3)) {
            let out = std::process::Command::new("bash")
                .arg(workspace_root().join("scripts/services.sh"))
                .arg("start")
                .output()
                .expect("run scripts/services.sh");
            assert!(
                out.status.success(),
                "could not start the local services:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Services {
            dynamodb_endpoint: format!("http://127.0.0.1:{ddb}"),
            kinesis_endpoint: format!("http://127.0.0.1:{kin}"),
            s3_endpoint: format!("http://127.0.0.1:{s3}"),
        }
    })
}

/// A name no other test (in this or another process) uses: `<label>-<pid>-<n>-<nanos>`.
pub fn unique_name(label: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{label}-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn dynamodb_settings() -> ClientSettings {
    ClientSettings::local(services().dynamodb_endpoint.clone())
}

pub async fn dynamodb() -> aws_sdk_dynamodb::Client {
    tidemark_store::dynamodb_client(&dynamodb_settings()).await
}

pub async fn kinesis() -> aws_sdk_kinesis::Client {
    let endpoint = services().kinesis_endpoint.clone();
    let shared = tidemark_store::sdk_config(&ClientSettings::local(endpoint.clone())).await;
    let conf = aws_sdk_kinesis::config::Builder::from(&shared)
        .endpoint_url(endpoint)
        .build();
    aws_sdk_kinesis::Client::from_conf(conf)
}

/// Runs a cleanup future to completion from `Drop`, whatever runtime (if any) is current.
fn block_on_cleanup<F: std::future::Future<Output = ()> + Send + 'static>(f: F) {
    let _ = std::thread::spawn(move || {
        if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            rt.block_on(f);
        }
    })
    .join();
}

/// A table of Tidemark's schema, unique to one test, deleted on drop.
pub struct TestTable {
    pub name: String,
    pub client: aws_sdk_dynamodb::Client,
}

impl TestTable {
    pub async fn new(label: &str) -> TestTable {
        let client = dynamodb().await;
        let name = unique_name(label);
        tidemark_store::create_table(&client, &name, &tidemark_schema::TABLE)
            .await
            .unwrap_or_else(|e| panic!("create table {name}: {e}"));
        TestTable { name, client }
    }

    /// Every item of the table (consistent reads, every page), in key order: what a test
    /// compares before and after a replay.
    pub async fn scan(&self) -> Vec<tidemark_store::Item> {
        scan_table(&self.client, &self.name).await
    }

    /// A group's `(members, offlineMembers)` as its count items say, summed over the tag
    /// index's partitions (read by a scan: what a test checks after the writers moved them).
    pub async fn group_counts(&self, tag: &tidemark_schema::Tag) -> (i64, i64) {
        let wanted = tidemark_schema::TagCountItem::keys(tag);
        let mut c = (0, 0);
        for i in self.scan().await {
            let Ok(n) = tidemark_store::from_item::<tidemark_schema::TagCountItem>(i) else {
                continue;
            };
            if wanted.iter().any(|k| k.pk == n.pk && k.sk == n.sk) {
                c.0 += n.members;
                c.1 += n.offline_members;
            }
        }
        c
    }

    /// Puts an entity as it is stored (its serde form), replacing any item with its key.
    pub async fn put<T: serde::Serialize>(&self, v: &T) {
        let item = tidemark_store::to_item(v).unwrap_or_else(|e| panic!("not an item: {e}"));
        self.put_item(item).await;
    }

    /// Puts raw items, each replacing any item with its key, through the store's own
    /// batch writer (25 a call, unprocessed items and throttled calls retried with backoff):
    /// how a test or bench seeds a table. Panics unless every item is written.
    pub async fn put_all(&self, items: Vec<tidemark_store::Item>) {
        put_items(&self.client, &self.name, items).await;
    }

    /// Puts a raw item (a malformed one, say), replacing any item with its key.
    pub async fn put_item(&self, item: tidemark_store::Item) {
        self.client
            .put_item()
            .table_name(&self.name)
            .set_item(Some(item))
            .send()
            .await
            .unwrap_or_else(|e| panic!("put into {}: {e}", self.name));
    }
}

/// [`TestTable::put_all`] for a table a test or bench made itself.
pub async fn put_items(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    items: Vec<tidemark_store::Item>,
) {
    use tidemark_store::write::batch::{BatchWriter, PendingWrite};
    let writes = items
        .into_iter()
        .enumerate()
        .map(|(tag, item)| PendingWrite::put(tag, item))
        .collect();
    let writer = BatchWriter::new(client.clone(), table, 4, Default::default());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    let report = writer.write_all(writes, deadline).await;
    assert!(
        report.failed_tags.is_empty() && report.refused.is_empty(),
        "seeding {table}: {} of {} items not written ({:?})",
        report.failed_tags.len() + report.refused.len(),
        report.submitted,
        report.last_error
    );
}

/// Every item of `table` (consistent reads, every page), ordered by `pk` then `sk`.
pub async fn scan_table(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Vec<tidemark_store::Item> {
    let mut out = Vec::new();
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .send()
            .await
            .unwrap_or_else(|e| panic!("scan {table}: {e:?}"));
        out.extend(page.items.unwrap_or_default());
        match page.last_evaluated_key {
            Some(k) if !k.is_empty() => start = Some(k),
            _ => break,
        }
    }
    let key = |i: &tidemark_store::Item, a: &str| {
        i.get(a)
            .and_then(|v| v.as_s().ok())
            .cloned()
            .unwrap_or_default()
    };
    out.sort_by_cached_key(|i| (key(i, "pk"), key(i, "sk")));
    out
}

impl Drop for TestTable {
    fn drop(&mut self) {
        if std::env::var_os("TIDEMARK_KEEP_TABLES").is_some() {
            return;
        }
        let name = self.name.clone();
        block_on_cleanup(async move {
            let client = dynamodb().await;
            let _ = client.delete_table().table_name(name).send().await;
        });
    }
}

/// A Kinesis stream unique to one test, active on return, deleted on drop.
pub struct TestStream {
    pub name: String,
    pub client: aws_sdk_kinesis::Client,
}

impl TestStream {
    pub async fn new(label: &str, shards: i32) -> TestStream {
        let client = kinesis().await;
        let name = unique_name(label);
        client
            .create_stream()
            .stream_name(&name)
            .shard_count(shards)
            .send()
            .await
            .unwrap_or_else(|e| panic!("create stream {name}: {e:?}"));
        for _ in 0..300 {
            let d = client
                .describe_stream_summary()
                .stream_name(&name)
                .send()
                .await
                .unwrap_or_else(|e| panic!("describe stream {name}: {e:?}"));
            let status = d
                .stream_description_summary()
                .map(|s| s.stream_status().clone());
            if status == Some(aws_sdk_kinesis::types::StreamStatus::Active) {
                return TestStream { name, client };
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("stream {name} did not become active");
    }

    /// Puts `(partition key, data)` records, 500 a call (Kinesis' limit, so up to 500 arrive
    /// in one call, as one batch); panics on any refused record (a benchmark or test cannot go
    /// on without them). Answers each record's sequence number, in order.
    pub async fn put(&self, records: &[(String, Vec<u8>)]) -> Vec<String> {
        use aws_sdk_kinesis::primitives::Blob;
        use aws_sdk_kinesis::types::PutRecordsRequestEntry;
        let mut sequence_numbers = Vec::with_capacity(records.len());
        for chunk in records.chunks(500) {
            let entries = chunk
                .iter()
                .map(|(pk, data)| {
                    PutRecordsRequestEntry::builder()
                        .partition_key(pk)
                        .data(Blob::new(data.clone()))
                        .build()
                        .expect("partition key and data are set")
                })
                .collect();
            let out = self
                .client
                .put_records()
                .stream_name(&self.name)
                .set_records(Some(entries))
                .send()
                .await
                .unwrap_or_else(|e| panic!("put records into {}: {e:?}", self.name));
            assert_eq!(
                out.failed_record_count(),
                Some(0),
                "kinesis-mock refused records"
            );
            sequence_numbers.extend(
                out.records
                    .iter()
                    .map(|r| r.sequence_number.clone().unwrap_or_default()),
            );
        }
        sequence_numbers
    }
}

impl Drop for TestStream {
    fn drop(&mut self) {
        let name = self.name.clone();
        block_on_cleanup(async move {
            let client = kinesis().await;
            let _ = client
                .delete_stream()
                .stream_name(name)
                .enforce_consumer_deletion(true)
                .send()
                .await;
        });
    }
}

/// An open critical `temperature` max alert on `device`, opened 2026-04-20T14:30Z, as the
/// alerts role writes one (in GSI1 while unresolved): for tests of what reads and acts on it.
pub fn open_alert(device: &str) -> tidemark_schema::AlertItem {
    use tidemark_schema::{
        AlertId, AlertItem, AlertRule, AlertState, DeviceId, EntityKey, MetricName, Severity,
        Timestamp,
    };
    let at = |s| Timestamp::parse_rfc3339(s).expect("a valid time");
    let metric = MetricName::new("temperature").expect("a valid metric");
    let device = DeviceId::new(device).expect("a valid device ID");
    let id = AlertId::for_breach(at("2026-04-20T14:30:00Z"), &metric, AlertRule::Max);
    let k = EntityKey::Alert {
        device: device.clone(),
        alert: id.clone(),
    }
    .key();
    AlertItem {
        gsi1pk: Some(tidemark_schema::keys::severity_gsi1pk(
            Severity::Critical,
            &k.pk,
        )),
        pk: k.pk,
        sk: k.sk,
        gsi1sk: Some(tidemark_schema::keys::alert_gsi1sk(&id)),
        device_id: device,
        alert_id: id,
        metric: Some(metric),
        rule: AlertRule::Max,
        rule_spec: None,
        severity: Severity::Critical,
        state: AlertState::Open,
        message: "temperature above 30".into(),
        value: 31.5,
        threshold: 30.0,
        breach_count: 2,
        opened_at: at("2026-04-20T14:30:00Z"),
        last_breach_at: at("2026-04-20T14:31:00Z"),
        acknowledged_at: None,
        resolved_at: None,
        snoozed_until: None,
        tags: Default::default(),
    }
}
