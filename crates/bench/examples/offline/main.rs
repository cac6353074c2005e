//! Offline-device detection, what it costs: measured with DynamoDB's own consumed capacity
//! (DynamoDB Local's `ConsumedCapacity`, table and GSI apart, through the metering proxy).
//! Writes `bench/OFFLINE.md` and `bench/offline.json`.
//!
//! 1. **Deadline upkeep** (the alerts role keeping `lastArrivalAt` and the GSI2 watch key on
//!    the device item). The standard fleet (200 devices, one reading a minute each, every
//!    reading jittered by up to ±10 s and arriving 50 ms to 1 s after its timestamp) goes
//!    through ingest and the alerts role, called in process, for each fleet window
//!    `OFFLINE_AFTER_SECONDS` = 0 (off: the baseline), 300, 900 and 3600, with
//!    `DEVICE_REFRESH_SECONDS` = 900 and no thresholds. Batches are cut as the template's
//!    mappings cut them: a batching window of 1 s (ingest and alerts, the template defaults)
//!    opens at the first record that arrives, not on a minute or slot boundary; every record
//!    of the alerts mapping's filter (readings, device items, alert items, heartbeats) is read
//!    from the table's real DynamoDB stream, the alerts role's own device writes included (an
//!    echo batch of its own when no reading arrives within its window). Time is simulated:
//!    each record's `approximateArrivalTimestamp` is its simulated arrival, and the alerts
//!    role's clock ([`AggregatorConfig::clock`], fixed) is moved to each invocation's time.
//!    After a warm-up (every device registered and watched), write units per stored reading
//!    are summed over the measured hours; the upkeep cost is the difference to the run with
//!    the window off. The watchdog's heartbeats are left out here (a fixed cost per minute
//!    and shard, not per reading, measured in part 2, and paid with the window off too: the
//!    watchdog runs whatever the fleet default is).
//! 2. **Watchdog runs** over 100,000 devices of which 1 % are offline, seeded directly
//!    (`BatchWriteItem`, 25 items a call, 8 calls in flight): 99,000 watched with check times
//!    spread evenly over the next window, 1,000 offline (`CONNECTIVITY#offline`, with their
//!    open alerts). The real [`Watchdog::run`] over [`DynamoWatch`], whose client goes through
//!    the metering proxy; its heartbeats go to a stand-in ([`Heartbeats`]) that marks every
//!    shard's heartbeat item passed at the moment it is sent (what ingest and the alerts role
//!    do; their cost is measured apart, by sending heartbeat records through the real ingest
//!    and alerts role on the same table before seeding). The watchdog's clock is fixed and
//!    moved so that exactly 0, 100 and 1,000 watched devices fall due (plus 100 whose newer
//!    readings should postpone them). Read and write units per run and per due device, both
//!    as the watchdog counts them (`RunReport`) and as the proxy saw them, the latter also with
//!    AWS's minimum charge for reads that find nothing (which DynamoDB Local reports as 0).
//!
//! Benchmarks report; they never assert (and never on wall-clock speed).
//!
//!   cargo run --release -p tidemark-bench --example offline [-- --quick] [--only upkeep|watchdog]
//!       [--windows 0,300,900,3600] [--out DIR] [--render]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::kinesis::KinesisEvent;
use aws_sdk_dynamodb::types::{PutRequest, WriteRequest};
use base64::Engine;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tidemark_aggregator::{Aggregator, AggregatorConfig, Role};
use tidemark_bench::BenchError;
use tidemark_bench::local_ddb::LocalDynamo;
use tidemark_bench::meter::{Kind, Meter, MeterTotals};
use tidemark_bench::run::Target;
use tidemark_bench::scenario::{
    TEMPLATE_ALERTS_BATCH, TEMPLATE_ALERTS_WINDOW_MS, TEMPLATE_DEVICE_REFRESH_S,
    TEMPLATE_INGEST_BATCH, TEMPLATE_INGEST_WINDOW_MS, reading_json,
};
use tidemark_ingest::{Ingest, IngestConfig};
use tidemark_schema::keys::{self, ShardName};
use tidemark_schema::{
    Clock, DeviceId, DeviceItem, DeviceStatus, EntityKey, HeartbeatItem, LatestReading, MetricName,
    OfflineState, Timestamp,
};
use tidemark_store::{ClientSettings, Item};
use tidemark_streams::{DynamoDbStreamSource, EventSource, Start};
use tidemark_watchdog::{
    DynamoWatch, Heartbeats, WatchStore, Watchdog, WatchdogConfig, WatchdogError,
};

/// The fleet windows measured (`OFFLINE_AFTER_SECONDS`; 0 is off).
const WINDOWS_S: [u32; 4] = [0, 300, 900, 3600];
/// `DEVICE_REFRESH_SECONDS`, the template's default.
const REFRESH_S: u64 = TEMPLATE_DEVICE_REFRESH_S;
/// A reading is sent up to this far before or after its minute.
const JITTER_MS: i64 = 10_000;

/// On-demand prices assumed (us-east-1, USD per million request units).
const USD_PER_M_RRU: f64 = 0.25;
const USD_PER_M_WRU: f64 = 1.25;
/// Watchdog runs in a 30-day month at one a minute.
const RUNS_PER_MONTH: f64 = 30.0 * 24.0 * 60.0;

// ---------------------------------------------------------------------------------------
// Shared

/// SplitMix64: stable pseudo-random numbers.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A number in [0, 1) from (a, b, salt).
fn unit(a: u64, b: u64, salt: u64) -> f64 {
    (mix((a << 40) ^ (b << 4) ^ salt) >> 11) as f64 / (1u64 << 53) as f64
}

fn at_ms(ms: i64) -> Timestamp {
    Timestamp::from_epoch_millis(ms).unwrap_or(Timestamp::MIN)
}

fn device_id(s: &str) -> DeviceId {
    DeviceId::new(s).unwrap_or_else(|_| unreachable!("generated IDs are valid"))
}

/// Units one function spent, as the proxy saw them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Spent {
    wru: f64,
    wru_table: f64,
    wru_gsi: f64,
    /// GSI write units by index.
    wru_by_index: BTreeMap<String, f64>,
    rru: f64,
    /// Read units AWS bills and DynamoDB Local reports as none: reads that find nothing
    /// (an empty query, a missing item) cost the minimum on AWS.
    #[serde(default)]
    rru_unreported: f64,
    write_calls: u64,
    read_calls: u64,
    /// Failed conditional writes (no units reported by DynamoDB Local; AWS bills them).
    conditional_failures: u64,
    /// Calls and units by operation.
    by_operation: BTreeMap<String, (u64, f64)>,
}

impl Spent {
    /// Read units as AWS would bill them.
    fn rru_aws(&self) -> f64 {
        self.rru + self.rru_unreported
    }

    fn of(t: &MeterTotals) -> Spent {
        let (w, write_calls, conditional_failures) = t.writes();
        let (r, read_calls) = t.reads();
        Spent {
            wru: w.total,
            wru_table: w.table,
            wru_gsi: w.gsi,
            wru_by_index: t.gsi_by_index(Kind::Write),
            rru: r.total,
            rru_unreported: t.unreported_read_minimum(),
            write_calls,
            read_calls,
            conditional_failures,
            by_operation: t
                .by_operation
                .iter()
                .map(|(op, s)| (op.clone(), (s.calls, s.capacity.total)))
                .collect(),
        }
    }
}

async fn client_via(m: &Meter) -> aws_sdk_dynamodb::Client {
    tidemark_store::dynamodb_client(&ClientSettings::local(m.endpoint())).await
}

fn sdk_err(e: impl std::fmt::Debug) -> BenchError {
    BenchError::Other(format!("{e:?}"))
}

/// One Kinesis record: (partition key, data, arrival).
struct KRecord {
    key: String,
    data: Vec<u8>,
    arrived: Timestamp,
}

/// The event the ingest mapping delivers for `records` of shard `shard`.
fn kinesis_event(
    records: &[KRecord],
    shard: &str,
    first_seq: u64,
) -> Result<KinesisEvent, BenchError> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let records: Vec<serde_json::Value> = records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let seq = format!("{:056}", first_seq + i as u64);
            json!({
                "kinesis": {
                    "kinesisSchemaVersion": "1.0",
                    "partitionKey": r.key,
                    "sequenceNumber": seq,
                    "data": b64.encode(&r.data),
                    "approximateArrivalTimestamp": r.arrived.epoch_millis() as f64 / 1000.0,
                },
                "eventSource": "aws:kinesis",
                "eventVersion": "1.0",
                "eventID": format!("{shard}:{seq}"),
                "eventName": "aws:kinesis:record",
                "invokeIdentityArn": "arn:aws:iam::123456789012:role/bench",
                "awsRegion": "us-east-1",
                "eventSourceARN": "arn:aws:kinesis:us-east-1:123456789012:stream/bench",
            })
        })
        .collect();
    Ok(serde_json::from_value(json!({ "Records": records }))?)
}

async fn ingest(ingest: &Ingest, event: &KinesisEvent) -> Result<u64, BenchError> {
    let (resp, stats) = ingest
        .process(event, Instant::now() + Duration::from_secs(120))
        .await
        .map_err(|e| BenchError::Function(e.to_string()))?;
    if !resp.batch_item_failures.is_empty() {
        return Err(BenchError::Function("ingest failed a batch".into()));
    }
    Ok(stats.readings)
}

fn key_attr<'a>(r: &'a EventRecord, name: &str) -> Option<&'a str> {
    match r.change.keys.get(name) {
        Some(serde_dynamo::AttributeValue::S(s)) => Some(s.as_str()),
        _ => None,
    }
}

/// template.yaml's FilterCriteria of the alerts mapping: readings, slot parts, alert items,
/// device items and heartbeats, TTL deletions excluded.
fn alerts_filter(r: &EventRecord) -> bool {
    let ttl = r
        .user_identity
        .as_ref()
        .is_some_and(|u| !u.principal_id.is_empty());
    let wanted = key_attr(r, "sk").is_some_and(|sk| {
        sk.starts_with(keys::READING_PREFIX)
            || sk.starts_with(keys::SLOT_PREFIX)
            || sk.starts_with(keys::ALERT_PREFIX)
            || sk == keys::DEVICE_METADATA_SK
            || sk.starts_with(keys::HEARTBEAT_PREFIX)
    });
    wanted && !ttl
}

fn is_reading(r: &EventRecord) -> bool {
    key_attr(r, "sk")
        .is_some_and(|sk| sk.starts_with(keys::READING_PREFIX) || sk.starts_with(keys::SLOT_PREFIX))
}

/// A table's stream read to its end again and again, as cheaply as DynamoDB Local allows: each
/// shard's iterator is kept between reads (one `GetRecords` per open shard when nothing is
/// left), and the shards are listed again only when one has been read to its end.
/// (`tidemark_bench::stream::StreamReader` asks for a new iterator on every shard at every
/// read: the same records, four calls instead of one, and these runs read the stream after
/// every batch.)
struct Follower {
    source: DynamoDbStreamSource,
    /// Shards being read and their next iterator.
    open: Vec<(String, String)>,
    /// Shards seen (read to their end or being read).
    seen: std::collections::HashSet<String>,
    /// The last record read from each shard.
    last: BTreeMap<String, String>,
}

fn stream_err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Stream(e.to_string())
}

impl Follower {
    async fn for_table(target: &Target, table: &str) -> Result<Follower, BenchError> {
        let direct = target.client().await;
        let source = DynamoDbStreamSource::for_table(&direct, target.streams().await, table)
            .await
            .map_err(stream_err)?;
        let mut f = Follower {
            source,
            open: Vec::new(),
            seen: Default::default(),
            last: BTreeMap::new(),
        };
        f.list().await?;
        Ok(f)
    }

    /// Starts reading every shard not seen yet from its beginning (parents come first in the
    /// listing, so a child is read after its parent's records).
    async fn list(&mut self) -> Result<(), BenchError> {
        for shard in self.source.shards().await.map_err(stream_err)? {
            if !self.seen.insert(shard.id.clone()) {
                continue;
            }
            if let Some(it) = self
                .source
                .iterator(&shard.id, &Start::TrimHorizon)
                .await
                .map_err(stream_err)?
            {
                self.open.push((shard.id, it));
            }
        }
        Ok(())
    }

    async fn drain(&mut self) -> Result<Vec<EventRecord>, BenchError> {
        let max = self.source.max_read();
        let mut out = Vec::new();
        loop {
            let mut ended = false;
            let mut still_open = Vec::with_capacity(self.open.len());
            for (shard, mut it) in std::mem::take(&mut self.open) {
                let mut attempts = 0;
                loop {
                    let page = match self.source.read(&shard, &it, max).await {
                        Ok(p) => p,
                        // DynamoDB Local refuses an iterator taken while its shard was still
                        // empty, and iterators expire: a new one where this one was.
                        Err(e) if attempts < 5 => {
                            attempts += 1;
                            let start = match self.last.get(&shard) {
                                Some(seq) => Start::After(seq.clone()),
                                None => Start::TrimHorizon,
                            };
                            tokio::time::sleep(Duration::from_millis(20 * attempts)).await;
                            match self.source.iterator(&shard, &start).await {
                                Ok(Some(fresh)) => {
                                    it = fresh;
                                    continue;
                                }
                                Ok(None) => {
                                    ended = true;
                                    break;
                                }
                                Err(_) => return Err(stream_err(e)),
                            }
                        }
                        Err(e) => return Err(stream_err(e)),
                    };
                    let full = page.records.len() >= max;
                    if let Some(r) = page.records.last() {
                        self.last
                            .insert(shard.clone(), DynamoDbStreamSource::sequence(r).to_owned());
                    }
                    out.extend(page.records);
                    match page.next {
                        Some(next) => it = next,
                        None => {
                            ended = true;
                            break;
                        }
                    }
                    if !full {
                        still_open.push((shard.clone(), it.clone()));
                        break;
                    }
                }
            }
            self.open = still_open;
            if !ended {
                return Ok(out);
            }
            // A shard closed: its children hold what came after.
            self.list().await?;
        }
    }
}

fn event_of(records: Vec<EventRecord>) -> Vec<Event> {
    tidemark_bench::stream::batches(records, TEMPLATE_ALERTS_BATCH)
}

// ---------------------------------------------------------------------------------------
// Part 1: deadline upkeep

#[derive(Debug, Clone, Serialize, Deserialize)]
struct UpkeepRun {
    offline_after_s: u32,
    device_refresh_s: u64,
    devices: u32,
    warmup_min: i64,
    measured_min: i64,
    /// Readings stored in the measured window.
    readings: u64,
    ingest_invocations: u64,
    alerts_invocations: u64,
    /// Alerts invocations that held only the role's own device writes (no reading).
    echo_invocations: u64,
    failed_batches: u64,
    ingest: Spent,
    alerts: Spent,
    /// Device items written by the alerts role (their stream records), and of those, how many
    /// moved the GSI2 watch key (or set it the first time).
    device_writes: u64,
    watch_key_moves: u64,
    /// Devices with a watch key at the end.
    watched_at_end: u64,
    seconds: f64,
}

impl UpkeepRun {
    fn per(&self, v: f64) -> f64 {
        v / self.readings.max(1) as f64
    }
    fn alerts_wru(&self) -> f64 {
        self.per(self.alerts.wru)
    }
    /// Device item writes per device per hour.
    fn device_writes_per_hour(&self) -> f64 {
        self.device_writes as f64 / f64::from(self.devices) / (self.measured_min as f64 / 60.0)
    }
}

struct FleetSend {
    device: u32,
    n: u64,
    at: Timestamp,
    arrived: Timestamp,
}

/// `devices` devices, one reading a minute each from `start` for `minutes`: a device's n-th
/// reading is at its phase + n minutes ± up to 10 s, arriving 50 ms to 1 s later. In
/// arrival order.
fn fleet(devices: u32, start: Timestamp, minutes: i64) -> Vec<FleetSend> {
    let start_ms = start.epoch_millis();
    let end_ms = start_ms + minutes * 60_000;
    let mut out = Vec::new();
    for d in 0..devices {
        let phase = 60_000 * i64::from(d) / i64::from(devices);
        for n in 0.. {
            let nominal = start_ms + phase + n * 60_000;
            let jitter = ((unit(u64::from(d), n as u64, 1) * 2.0 - 1.0) * JITTER_MS as f64) as i64;
            let at = (nominal + jitter).max(start_ms);
            let latency = 50 + (unit(u64::from(d), n as u64, 2) * 950.0) as i64;
            let arrived = at + latency;
            if arrived >= end_ms {
                break;
            }
            out.push(FleetSend {
                device: d,
                n: n as u64,
                at: at_ms(at),
                arrived: at_ms(arrived),
            });
        }
    }
    out.sort_by_key(|s| (s.arrived, s.device));
    out
}

fn fleet_device(d: u32) -> DeviceId {
    device_id(&format!("dev-{d:04}"))
}

/// Device writes in `records` (the alerts role's, echoed by the stream) and how many of them
/// changed the GSI2 watch key.
fn count_device_writes(records: &[EventRecord]) -> (u64, u64) {
    let (mut writes, mut moves) = (0, 0);
    for r in records {
        if key_attr(r, "sk") != Some(keys::DEVICE_METADATA_SK) {
            continue;
        }
        writes += 1;
        let g2 = |img: &serde_dynamo::Item| match img.get(tidemark_schema::table::attr::GSI2SK) {
            Some(serde_dynamo::AttributeValue::S(s)) => Some(s.clone()),
            _ => None,
        };
        let (old, new) = (g2(&r.change.old_image), g2(&r.change.new_image));
        if new.is_some() && old != new {
            moves += 1;
        }
    }
    (writes, moves)
}

async fn upkeep_run(
    target: &Target,
    window: u32,
    devices: u32,
    start: Timestamp,
    warmup_min: i64,
    measured_min: i64,
) -> Result<UpkeepRun, BenchError> {
    let began = Instant::now();
    let table = format!("upkeep-{window}");
    let direct = target.client().await;
    tidemark_store::create_table(&direct, &table, &tidemark_schema::TABLE).await?;
    let ingest_meter = Meter::start(target.dynamodb).await?;
    let alerts_meter = Meter::start(target.dynamodb).await?;
    let ingester = Ingest::new(client_via(&ingest_meter).await, IngestConfig::new(&table));
    let clock = Clock::fixed(start);
    let mut config = AggregatorConfig::new(&table).with_role(Role::Alerts);
    config.device_refresh = Duration::from_secs(REFRESH_S);
    config.offline_after_default = window;
    config.clock = clock.clone();
    let alerts = Aggregator::new(client_via(&alerts_meter).await, config);
    let mut reader = Follower::for_table(target, &table).await?;

    let sends = fleet(devices, start, warmup_min + measured_min);
    let warm_end = start
        .plus_millis(warmup_min * 60_000)
        .unwrap_or(Timestamp::MAX);
    let mut out = UpkeepRun {
        offline_after_s: window,
        device_refresh_s: REFRESH_S,
        devices,
        warmup_min,
        measured_min,
        readings: 0,
        ingest_invocations: 0,
        alerts_invocations: 0,
        echo_invocations: 0,
        failed_batches: 0,
        ingest: Spent::default(),
        alerts: Spent::default(),
        device_writes: 0,
        watch_key_moves: 0,
        watched_at_end: 0,
        seconds: 0.0,
    };
    let mut measuring = false;
    // Whether the role's last invocation was in the measured window.
    let mut produced_measuring = false;
    // Where the time goes (stderr only): ingest, stream reads, the alerts role.
    let mut phase = [0.0f64; 3];
    // The alerts role's own device writes, not delivered yet, and when they were written.
    let mut echoes: Vec<EventRecord> = Vec::new();
    let mut echoed_at = start;
    let mut seq = 1u64;
    let mut i = 0;
    let invoke = |records: Vec<EventRecord>, at: Timestamp| {
        clock.set(at);
        let alerts = &alerts;
        async move {
            let (mut n, mut failed) = (0u64, 0u64);
            for event in event_of(records) {
                let (resp, _) = alerts.process(&event).await;
                failed += u64::from(!resp.batch_item_failures.is_empty());
                n += 1;
            }
            (n, failed)
        }
    };
    while i < sends.len() {
        // The ingest mapping's window opens at the first record and closes a window later.
        let first = sends[i].arrived;
        let close = first
            .plus_millis(TEMPLATE_INGEST_WINDOW_MS)
            .unwrap_or(Timestamp::MAX);
        let end = i + sends[i..]
            .iter()
            .take(TEMPLATE_INGEST_BATCH)
            .take_while(|s| s.arrived < close)
            .count();
        if !measuring && first >= warm_end {
            // Everything so far was the warm-up: measure from here.
            ingest_meter.take().await;
            alerts_meter.take().await;
            out.ingest_invocations = 0;
            out.alerts_invocations = 0;
            out.echo_invocations = 0;
            out.failed_batches = 0;
            out.device_writes = 0;
            out.watch_key_moves = 0;
            measuring = true;
        }
        let records: Vec<KRecord> = sends[i..end]
            .iter()
            .map(|s| {
                let id = fleet_device(s.device);
                KRecord {
                    key: id.to_string(),
                    data: reading_json(&id, s.at, s.device, s.n),
                    arrived: s.arrived,
                }
            })
            .collect();
        let event = kinesis_event(&records, "shardId-000000000000", seq)?;
        seq += records.len() as u64;
        let t = Instant::now();
        ingest(&ingester, &event).await?;
        phase[0] += t.elapsed().as_secs_f64();
        out.ingest_invocations += 1;
        if measuring {
            out.readings += (end - i) as u64;
        }
        i = end;
        // Ingest was invoked at `close`; its writes open the alerts mapping's window, which
        // the role's earlier device writes opened already if they were written less than a
        // window before.
        let t = Instant::now();
        let mut records: Vec<EventRecord> = reader.drain().await?;
        phase[1] += t.elapsed().as_secs_f64();
        records.retain(alerts_filter);
        let (own, readings): (Vec<_>, Vec<_>) = records.into_iter().partition(|r| !is_reading(r));
        // The role's writes of the last batch: counted when that batch was measured.
        if produced_measuring {
            let (w, m) = count_device_writes(&own);
            out.device_writes += w;
            out.watch_key_moves += m;
        }
        echoes.extend(own);
        let echo_close = echoed_at
            .plus_millis(TEMPLATE_ALERTS_WINDOW_MS)
            .unwrap_or(Timestamp::MAX);
        let batch_at = if !echoes.is_empty() && echo_close <= close {
            // The echoes' window closed before these readings came: a batch of their own.
            let (n, failed) = invoke(std::mem::take(&mut echoes), echo_close).await;
            out.alerts_invocations += n;
            out.echo_invocations += n;
            out.failed_batches += failed;
            close.plus_millis(TEMPLATE_ALERTS_WINDOW_MS)
        } else if echoes.is_empty() {
            close.plus_millis(TEMPLATE_ALERTS_WINDOW_MS)
        } else {
            Some(echo_close)
        }
        .unwrap_or(Timestamp::MAX);
        let mut batch = std::mem::take(&mut echoes);
        batch.extend(readings);
        let t = Instant::now();
        let (n, failed) = invoke(batch, batch_at).await;
        phase[2] += t.elapsed().as_secs_f64();
        out.alerts_invocations += n;
        out.failed_batches += failed;
        echoed_at = batch_at;
        produced_measuring = measuring;
    }
    // The last device writes come back once more.
    let mut rest = reader.drain().await?;
    rest.retain(alerts_filter);
    let (w, m) = count_device_writes(&rest);
    out.device_writes += w;
    out.watch_key_moves += m;
    echoes.extend(rest);
    if !echoes.is_empty() {
        let at = echoed_at
            .plus_millis(TEMPLATE_ALERTS_WINDOW_MS)
            .unwrap_or(Timestamp::MAX);
        let (n, failed) = invoke(std::mem::take(&mut echoes), at).await;
        out.alerts_invocations += n;
        out.echo_invocations += n;
        out.failed_batches += failed;
    }
    out.ingest = Spent::of(&ingest_meter.take().await);
    out.alerts = Spent::of(&alerts_meter.take().await);
    out.watched_at_end = watched(&direct, &table).await?;
    let _ = tidemark_store::delete_table(&direct, &table).await;
    out.seconds = began.elapsed().as_secs_f64();
    eprintln!(
        "offline: window {window} s: {:.0} s in ingest, {:.0} s reading the stream, {:.0} s in the alerts role",
        phase[0], phase[1], phase[2]
    );
    eprintln!(
        "offline: window {window} s: {} readings, alerts {:.4} WRU/reading ({:.4} table + {:.4} GSI), {:.2} device writes/device/h, {} key moves, {:.1} s",
        out.readings,
        out.alerts_wru(),
        out.per(out.alerts.wru_table),
        out.per(out.alerts.wru_gsi),
        out.device_writes_per_hour(),
        out.watch_key_moves,
        out.seconds
    );
    Ok(out)
}

/// Device items with a GSI2 watch key (a scan, not metered).
async fn watched(client: &aws_sdk_dynamodb::Client, table: &str) -> Result<u64, BenchError> {
    let mut n = 0;
    let mut pages = client
        .scan()
        .table_name(table)
        .index_name(tidemark_schema::table::GSI2)
        .into_paginator()
        .items()
        .send();
    while let Some(item) = pages.next().await {
        let item = item.map_err(sdk_err)?;
        if let Some(aws_sdk_dynamodb::types::AttributeValue::S(pk)) =
            item.get(tidemark_schema::table::attr::GSI2PK)
            && pk.starts_with(keys::OFFLINE_WATCH_PREFIX)
        {
            n += 1;
        }
    }
    Ok(n)
}

// ---------------------------------------------------------------------------------------
// Part 2: watchdog runs

/// The pipeline's part of the heartbeats: what ingest and the alerts role spend per
/// heartbeat, measured by sending heartbeat records through both.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct HeartbeatCost {
    shards: usize,
    rounds: u64,
    ingest_invocations: u64,
    alerts_invocations: u64,
    ingest: Spent,
    alerts: Spent,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct WatchRun {
    label: String,
    /// Devices whose check time had passed, by construction.
    expected_due: u64,
    due: u64,
    opened: u64,
    postponed: u64,
    lost: u64,
    failed: u64,
    /// What the watchdog counted itself (`RunReport`).
    report_rru: f64,
    report_wru: f64,
    /// What the proxy saw.
    spent: Spent,
    seconds: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct WatchPart {
    watched: u64,
    offline: u64,
    window_s: u32,
    shards: usize,
    seeded_items: u64,
    seed_seconds: f64,
    heartbeat: HeartbeatCost,
    runs: Vec<WatchRun>,
    /// Devices in the offline partition after the runs.
    offline_after_runs: u64,
    /// When a run failed devices: the error of `DynamoWatch::postpone` on one of them.
    #[serde(default)]
    postpone_error: Option<String>,
}

/// The heartbeats' stand-in: marks every shard's heartbeat item stored and passed at the
/// moment it is sent (as ingest and the alerts role would, once the records ahead of it are
/// in), through a client of its own that the proxy does not meter.
struct PassedAtOnce {
    client: aws_sdk_dynamodb::Client,
    table: String,
    shards: Vec<ShardName>,
}

impl Heartbeats for PassedAtOnce {
    async fn send(&self, at: Timestamp) -> Result<Vec<ShardName>, WatchdogError> {
        for s in &self.shards {
            let key = EntityKey::Heartbeat(s.clone()).key();
            let item = HeartbeatItem {
                pk: key.pk,
                sk: key.sk,
                sent_at: at,
                stored_at: Some(at),
                passed_at: Some(at),
            };
            let item = tidemark_store::to_item(&item).map_err(WatchdogError::Store)?;
            self.client
                .put_item()
                .table_name(&self.table)
                .set_item(Some(item))
                .send()
                .await
                .map_err(|e| WatchdogError::Config(format!("heartbeat stand-in: {e:?}")))?;
        }
        Ok(self.shards.clone())
    }
}

fn shard_names(n: usize) -> Vec<ShardName> {
    (0..n)
        .map(|i| {
            ShardName::new(&format!("shardId-{i:012}"))
                .unwrap_or_else(|| unreachable!("valid shard name"))
        })
        .collect()
}

/// `rounds` heartbeats into each of `shards` through the real ingest and alerts role (one
/// ingest invocation per shard, as each shard has its own), a minute apart before `t0`.
async fn heartbeat_cost(
    target: &Target,
    table: &str,
    shards: &[ShardName],
    rounds: u64,
    t0: Timestamp,
) -> Result<HeartbeatCost, BenchError> {
    let ingest_meter = Meter::start(target.dynamodb).await?;
    let alerts_meter = Meter::start(target.dynamodb).await?;
    let ingester = Ingest::new(client_via(&ingest_meter).await, IngestConfig::new(table));
    let mut config = AggregatorConfig::new(table).with_role(Role::Alerts);
    config.clock = Clock::fixed(t0);
    let alerts = Aggregator::new(client_via(&alerts_meter).await, config);
    let mut reader = Follower::for_table(target, table).await?;
    let mut out = HeartbeatCost {
        shards: shards.len(),
        rounds,
        ..HeartbeatCost::default()
    };
    let mut seq = 1;
    for r in 0..rounds {
        let sent = t0.minus_millis((rounds - r) as i64 * 60_000).unwrap_or(t0);
        for s in shards {
            let rec = KRecord {
                key: "tidemark-heartbeat".into(),
                data: tidemark_schema::heartbeat::record(sent),
                arrived: sent,
            };
            ingest(&ingester, &kinesis_event(&[rec], s.as_str(), seq)?).await?;
            seq += 1;
            out.ingest_invocations += 1;
        }
        // The heartbeat items' records, then the role's own marks (echoes, a batch of
        // their own a window later).
        for _ in 0..2 {
            let mut records = reader.drain().await?;
            records.retain(alerts_filter);
            for event in event_of(records) {
                let (resp, _) = alerts.process(&event).await;
                if !resp.batch_item_failures.is_empty() {
                    return Err(BenchError::Function("alerts failed a heartbeat".into()));
                }
                out.alerts_invocations += 1;
            }
        }
    }
    out.ingest = Spent::of(&ingest_meter.take().await);
    out.alerts = Spent::of(&alerts_meter.take().await);
    Ok(out)
}

/// Check time of the i-th watched device (in check order): spread evenly over the window
/// after `t0`.
fn check_of(t0: Timestamp, i: u64, watched: u64, window_s: u32) -> Timestamp {
    let span_ms = i64::from(window_s) * 1000;
    at_ms(t0.epoch_millis() + ((i as i64 + 1) * span_ms) / watched as i64)
}

fn latest(at: Timestamp, i: u64) -> LatestReading {
    let m = |s: &str| MetricName::new(s).unwrap_or_else(|_| unreachable!("valid metric name"));
    let r1 = |x: f64| (x * 10.0).round() / 10.0;
    LatestReading {
        timestamp: at,
        metrics: BTreeMap::from([
            (m("temperature"), r1(18.0 + 6.0 * unit(i, 0, 1))),
            (m("humidity"), r1(35.0 + 20.0 * unit(i, 0, 2))),
            (m("pressure"), r1(1005.0 + 15.0 * unit(i, 0, 3))),
            (m("battery"), r1(100.0 - unit(i, 0, 4))),
        ]),
    }
}

fn watched_id(i: u64) -> DeviceId {
    device_id(&format!("dev-{i:06}"))
}

/// The i-th watched device: its check time `check`, its last known arrival a window before.
fn watched_item(i: u64, check: Timestamp, window_s: u32) -> DeviceItem {
    let id = watched_id(i);
    let arrived = check
        .minus_millis(i64::from(window_s) * 1000)
        .unwrap_or(check);
    let seen = arrived.minus_millis(300).unwrap_or(arrived);
    let mut d = DeviceItem::new(
        id.clone(),
        DeviceStatus::Active,
        seen.minus_millis(30 * 86_400_000).unwrap_or(seen),
    );
    d.offline_after_seconds = Some(window_s);
    d.last_arrival_at = Some(arrived);
    d.last_seen_at = Some(seen);
    d.latest = Some(latest(seen, i));
    d.gsi2pk = Some(keys::watch_gsi2pk(&id));
    d.gsi2sk = Some(keys::watch_gsi2sk(check));
    d.version = Some(1 + i % 97);
    d
}

/// The i-th offline device and its open alert.
fn offline_items(i: u64, t0: Timestamp, window_s: u32) -> (DeviceItem, tidemark_schema::AlertItem) {
    let id = device_id(&format!("off-{i:06}"));
    // Silent for a while: since 1 to 48 hours.
    let since = t0
        .minus_millis(3_600_000 + (unit(i, 0, 9) * 47.0 * 3_600_000.0) as i64)
        .unwrap_or(t0);
    let mut d = DeviceItem::new(
        id.clone(),
        DeviceStatus::Active,
        since.minus_millis(30 * 86_400_000).unwrap_or(since),
    );
    d.offline_after_seconds = Some(window_s);
    d.last_arrival_at = Some(since);
    let seen = since.minus_millis(300).unwrap_or(since);
    d.last_seen_at = Some(seen);
    d.latest = Some(latest(seen, i + 1_000_000));
    d.version = Some(2);
    let alert = tidemark_watchdog::run::offline_alert(&d, window_s, since);
    d.offline = Some(OfflineState {
        alert: alert.alert_id.clone(),
        since,
    });
    d.gsi2pk = Some(keys::OFFLINE_GSI2PK.into());
    d.gsi2sk = Some(keys::offline_gsi2sk(&id));
    (d, alert)
}

/// Writes `items` with `BatchWriteItem`, 25 a call, `concurrency` calls in flight, sending
/// unprocessed items again.
async fn seed(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    items: Vec<Item>,
    concurrency: usize,
) -> Result<u64, BenchError> {
    let n = items.len() as u64;
    let chunks: Vec<Vec<Item>> = items.chunks(25).map(<[Item]>::to_vec).collect();
    let results = futures::stream::iter(chunks)
        .map(|chunk| async move {
            let mut pending: Vec<WriteRequest> = chunk
                .into_iter()
                .map(|item| {
                    PutRequest::builder()
                        .set_item(Some(item))
                        .build()
                        .map(|p| WriteRequest::builder().put_request(p).build())
                        .map_err(sdk_err)
                })
                .collect::<Result<_, _>>()?;
            for attempt in 0..20 {
                if pending.is_empty() {
                    break;
                }
                if attempt > 0 {
                    tokio::time::sleep(Duration::from_millis(50 * attempt)).await;
                }
                let out = client
                    .batch_write_item()
                    .request_items(table, std::mem::take(&mut pending))
                    .send()
                    .await
                    .map_err(sdk_err)?;
                pending = out
                    .unprocessed_items
                    .and_then(|mut m| m.remove(table))
                    .unwrap_or_default();
            }
            if pending.is_empty() {
                Ok(())
            } else {
                Err(BenchError::Setup("seeding: items left unprocessed".into()))
            }
        })
        .buffer_unordered(concurrency)
        .collect::<Vec<Result<(), BenchError>>>()
        .await;
    results.into_iter().collect::<Result<Vec<()>, _>>()?;
    Ok(n)
}

/// Counts the items of a GSI2 partition (a query, not metered).
async fn gsi2_count(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    pk: &str,
) -> Result<u64, BenchError> {
    let mut n = 0;
    let mut pages = client
        .query()
        .table_name(table)
        .index_name(tidemark_schema::table::GSI2)
        .key_condition_expression("#p = :p")
        .expression_attribute_names("#p", tidemark_schema::table::attr::GSI2PK)
        .expression_attribute_values(
            ":p",
            aws_sdk_dynamodb::types::AttributeValue::S(pk.to_owned()),
        )
        .into_paginator()
        .items()
        .send();
    while let Some(i) = pages.next().await {
        i.map_err(sdk_err)?;
        n += 1;
    }
    Ok(n)
}

async fn watchdog_part(
    target: &Target,
    watched: u64,
    offline: u64,
    window_s: u32,
    shards: usize,
) -> Result<WatchPart, BenchError> {
    let table = "offline-watch";
    let direct = target.client().await;
    tidemark_store::create_table(&direct, table, &tidemark_schema::TABLE).await?;
    let shard_list = shard_names(shards);
    // Whole milliseconds: check times and arrivals are kept in them.
    let t0 = at_ms(Timestamp::now().epoch_millis());
    let heartbeat = heartbeat_cost(target, table, &shard_list, 10, t0).await?;
    eprintln!(
        "offline: heartbeats: ingest {:.1} WRU, alerts role {:.1} WRU over {} heartbeats",
        heartbeat.ingest.wru,
        heartbeat.alerts.wru,
        heartbeat.rounds * shards as u64
    );

    // The cohorts, in check order: 100 then 1,000 that fall silent, then 100 whose newer
    // readings postpone them; the rest are not due during the runs.
    let (first, second, postponed) = (100u64, 1_000u64, 100u64);
    let cohort_end = (first + second + postponed).min(watched);
    let began = Instant::now();
    let mut items: Vec<Item> = Vec::with_capacity((watched + 2 * offline) as usize);
    for i in 0..watched {
        let d = watched_item(i, check_of(t0, i, watched, window_s), window_s);
        items.push(tidemark_store::to_item(&d)?);
    }
    for i in 0..offline {
        let (d, a) = offline_items(i, t0, window_s);
        items.push(tidemark_store::to_item(&d)?);
        items.push(tidemark_store::to_item(&a)?);
    }
    let seeded = seed(&direct, table, items, 8).await?;
    // The readings of the devices that fall due: each one's last reading (the one its item
    // knows), and for the postponed cohort a newer one, arrived after the device item's last
    // write (not within a quarter window of its check time, so nothing moved it).
    let ingester = Ingest::new(direct.clone(), IngestConfig::new(table));
    let mut records = Vec::new();
    for i in 0..cohort_end {
        let d = watched_item(i, check_of(t0, i, watched, window_s), window_s);
        let (Some(seen), Some(arrived)) = (d.last_seen_at, d.last_arrival_at) else {
            continue;
        };
        let id = d.device_id.clone();
        records.push(KRecord {
            key: id.to_string(),
            data: reading_json(&id, seen, i as u32, 0),
            arrived,
        });
        if i >= first + second {
            let later = seen.plus_millis(i64::from(window_s) * 300).unwrap_or(seen);
            records.push(KRecord {
                key: id.to_string(),
                data: reading_json(&id, later, i as u32, 1),
                arrived: later.plus_millis(300).unwrap_or(later),
            });
        }
    }
    let mut seq = 1_000_000;
    for chunk in records.chunks(TEMPLATE_INGEST_BATCH) {
        ingest(
            &ingester,
            &kinesis_event(chunk, "shardId-000000000000", seq)?,
        )
        .await?;
        seq += chunk.len() as u64;
    }
    let seed_seconds = began.elapsed().as_secs_f64();
    eprintln!(
        "offline: seeded {seeded} items and {} readings in {seed_seconds:.1} s",
        records.len()
    );

    let meter = Meter::start(target.dynamodb).await?;
    let metered = client_via(&meter).await;
    let clock = Clock::fixed(t0);
    let mut config = WatchdogConfig::new(table, "readings");
    config.offline_after_default = 0;
    config.clock = clock.clone();
    let pipeline = PassedAtOnce {
        client: direct.clone(),
        table: table.to_owned(),
        shards: shard_list.clone(),
    };
    let mut runs = Vec::new();
    let check = |i: u64| check_of(t0, i, watched, window_s);
    let plan: Vec<(String, Timestamp, u64)> = vec![
        ("steady, nothing due".into(), t0, 0),
        ("steady, nothing due (again)".into(), t0, 0),
        (format!("{first} fall due, silent"), check(first - 1), first),
        (
            format!("{second} fall due, silent"),
            check(first + second - 1),
            second,
        ),
        (
            format!("{postponed} fall due, a newer arrival on their readings"),
            check(cohort_end - 1),
            postponed,
        ),
        (
            "after them: nothing new due".into(),
            check(cohort_end - 1),
            0,
        ),
    ];
    let mut watchdog = Watchdog::new(DynamoWatch::new(metered.clone(), table), pipeline, config);
    for (label, at, expected_due) in plan {
        clock.set(at);
        // A fresh store per run: its unit counters start at zero.
        watchdog.store = DynamoWatch::new(metered.clone(), table);
        meter.take().await;
        let t = Instant::now();
        let r = watchdog
            .run(tokio::time::Instant::now() + Duration::from_secs(600))
            .await
            .map_err(|e| BenchError::Other(e.to_string()))?;
        let spent = Spent::of(&meter.take().await);
        let run = WatchRun {
            label,
            expected_due,
            due: r.due,
            opened: r.opened,
            postponed: r.postponed,
            lost: r.lost,
            failed: r.failed,
            report_rru: r.read_units,
            report_wru: r.write_units,
            spent,
            seconds: t.elapsed().as_secs_f64(),
        };
        eprintln!(
            "offline: watchdog run \"{}\": due {} (expected {}), opened {}, postponed {}, lost {}, failed {}; RRU {:.1} (report {:.1}), WRU {:.1} (report {:.1}); {:.1} s",
            run.label,
            run.due,
            run.expected_due,
            run.opened,
            run.postponed,
            run.lost,
            run.failed,
            run.spent.rru,
            run.report_rru,
            run.spent.wru,
            run.report_wru,
            run.seconds
        );
        runs.push(run);
    }
    // A postponement that failed: what DynamoDB said (the watchdog logs only the error's
    // kind), from the same call on one of those devices.
    let postpone_error = if runs.iter().any(|r| r.failed > 0) {
        let store = DynamoWatch::new(direct.clone(), table);
        let id = watched_id(first + second);
        match store.device(&id).await {
            Ok(Some(dev)) => {
                let arrived = dev.last_arrival_at.unwrap_or(t0);
                match store.postpone(&dev, arrived, t0).await {
                    Ok(done) => Some(format!("postponing {id} again: Ok({done})")),
                    Err(e) => Some(error_message(&e)),
                }
            }
            other => Some(format!("reading {id}: {other:?}")),
        }
    } else {
        None
    };
    let offline_after_runs = gsi2_count(&direct, table, keys::OFFLINE_GSI2PK).await?;
    let _ = tidemark_store::delete_table(&direct, table).await;
    Ok(WatchPart {
        watched,
        offline,
        window_s,
        shards,
        seeded_items: seeded,
        seed_seconds,
        heartbeat,
        runs,
        offline_after_runs,
        postpone_error,
    })
}

/// A store error with DynamoDB's own message where the SDK error carries one.
fn error_message(e: &tidemark_store::StoreError) -> String {
    let debug = format!("{e:?}");
    let message = debug
        .split("message: Some(\"")
        .nth(1)
        .and_then(|m| m.split('"').next());
    match message {
        Some(m) => format!("{e}: {m}"),
        None => e.to_string(),
    }
}

// ---------------------------------------------------------------------------------------
// Report

#[derive(Debug, Default, Serialize, Deserialize)]
struct Report {
    command: String,
    profile: String,
    upkeep: Vec<UpkeepRun>,
    watchdog: Option<WatchPart>,
}

fn usd_month_per_run(rru: f64, wru: f64) -> f64 {
    (rru * USD_PER_M_RRU + wru * USD_PER_M_WRU) * RUNS_PER_MONTH / 1e6
}

fn usd_per_thousand(rru: f64, wru: f64) -> f64 {
    (rru * USD_PER_M_RRU + wru * USD_PER_M_WRU) * 1000.0 / 1e6
}

/// 100000 as `100,000`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn window_label(w: u32) -> String {
    if w == 0 {
        "0 (off)".into()
    } else {
        format!("{w} s")
    }
}

/// The upkeep's extra write units per reading over the run with the window off.
fn upkeep_extra(rep: &Report, r: &UpkeepRun) -> Option<f64> {
    let base = rep.upkeep.iter().find(|b| b.offline_after_s == 0)?;
    Some(r.alerts_wru() - base.alerts_wru())
}

fn markdown(rep: &Report) -> String {
    let mut md = String::from("# Offline devices: what detection costs\n\n");
    md.push_str(&format!(
        "Produced by `{}` (`make bench` runs it with `--release`; this report came from a {} \
         build, which changes no unit). How it measures is in the example's doc comment \
         (`crates/bench/examples/offline.rs`). Every unit below is DynamoDB's own \
         `ConsumedCapacity` (DynamoDB Local, a fresh in-memory instance per part, \
         `ReturnConsumedCapacity: INDEXES` added by the metering proxy), measured in this run; \
         dollar figures are *scaled* from them. No figure here is a wall-clock measurement, \
         and nothing is asserted.\n\n\
         Prices assumed: on-demand, us-east-1: ${USD_PER_M_RRU:.2} per million read request \
         units (RRU), ${USD_PER_M_WRU:.2} per million write request units (WRU); a month is \
         30 days, {} watchdog runs at one a minute.\n\n",
        rep.command,
        rep.profile,
        thousands(RUNS_PER_MONTH as u64)
    ));
    md.push_str("## Targets\n\n| target | goal | measured | verdict |\n|---|---|---|---|\n");
    for r in rep.upkeep.iter().filter(|r| r.offline_after_s > 0) {
        let Some(extra) = upkeep_extra(rep, r) else {
            continue;
        };
        let gsi2 = r.per(r.alerts.wru_by_index.get("GSI2").copied().unwrap_or(0.0));
        let table = rep
            .upkeep
            .iter()
            .find(|b| b.offline_after_s == 0)
            .map_or(0.0, |b| {
                r.per(r.alerts.wru_table) - b.per(b.alerts.wru_table)
            });
        let verdict = if extra.abs() < 0.0005 {
            "met".to_owned()
        } else if table.abs() < 0.0005 {
            "**missed**: no extra item writes, but every key move is 2 GSI2 writes".to_owned()
        } else {
            "**missed**: extra item writes and key moves".to_owned()
        };
        md.push_str(&format!(
            "| Deadline upkeep, `OFFLINE_AFTER_SECONDS` = {} | 0 extra WRU per reading beyond \
             the device item the alerts role already writes | {extra:+.4} WRU/reading (table \
             {table:+.4}, GSI2 {gsi2:+.4}) | {verdict} |\n",
            r.offline_after_s
        ));
    }
    if let Some(w) = &rep.watchdog
        && let Some(s) = w.runs.iter().find(|r| r.expected_due == 0)
    {
        let device_reads: u64 = ["GetItem", "BatchGetItem"]
            .iter()
            .filter_map(|op| s.spent.by_operation.get(*op))
            .map(|(calls, _)| calls)
            .sum();
        md.push_str(&format!(
            "| Watchdog run with nothing due, {} devices ({} offline) | reads no device: its \
             cost grows with the devices falling silent, not with the fleet | {} device reads; \
             {} queries, {:.1} RRU as DynamoDB Local reports them, {:.1} with AWS's minimum \
             charges; {:.1} WRU: ${:.3} a month | {} |\n",
            thousands(w.watched + w.offline),
            thousands(w.offline),
            device_reads,
            s.spent.by_operation.get("Query").map_or(0, |(c, _)| *c),
            s.spent.rru,
            s.spent.rru_aws(),
            s.spent.wru,
            usd_month_per_run(s.spent.rru_aws(), s.spent.wru),
            if device_reads == 0 {
                "met"
            } else {
                "**missed**"
            }
        ));
    }
    if let Some(w) = &rep.watchdog
        && let Some(r) = w.runs.iter().find(|r| r.label.contains("newer arrival"))
    {
        md.push_str(&format!(
            "| Watchdog: a due device whose readings show a newer arrival is postponed | all {} \
             postponed | {} postponed, {} failed | {} |\n",
            r.expected_due,
            r.postponed,
            r.failed,
            if r.postponed == r.expected_due {
                "met"
            } else {
                "**missed** (a bug: Findings)"
            }
        ));
    }
    if !rep.upkeep.is_empty() {
        md.push_str(&upkeep_md(rep));
    }
    if let Some(w) = &rep.watchdog {
        md.push_str(&watchdog_md(w));
    }
    md.push_str(&findings_md(rep));
    md.push_str(
        "\n## Running it\n\n\
         ```sh\n\
         cargo run --release -p tidemark-bench --example offline            # both parts, writes bench/OFFLINE.md and bench/offline.json\n\
         cargo run -p tidemark-bench --example offline -- --quick --out /tmp  # 50 devices for 30 + 60 min, 10,000 devices\n\
         cargo run -p tidemark-bench --example offline -- --only upkeep --windows 0,3600\n\
         cargo run -p tidemark-bench --example offline -- --render           # the report again from offline.json\n\
         ```\n\n\
         It starts DynamoDB Local instances of its own (installed by `scripts/services.sh \
         start`); no Kinesis is needed.\n",
    );
    md
}

fn upkeep_md(rep: &Report) -> String {
    let mut md = String::from("\n## 1. Deadline upkeep: write units per stored reading\n\n");
    let Some(first) = rep.upkeep.first() else {
        return md;
    };
    md.push_str(&format!(
        "The standard fleet: {} devices, one reading a minute each (±{} s jitter, arriving 50 ms \
         to 1 s after its timestamp), through ingest and the alerts role (called in process) \
         with the template's 1 s batching windows, each opened by the first record that \
         arrives (not aligned to minutes or slots); the alerts mapping gets every record its \
         filter passes from the table's real stream, its own device writes included. \
         `DEVICE_REFRESH_SECONDS` = {}, no thresholds. {} simulated minutes of warm-up (every \
         device registered and watched), then {} measured; simulated time (Kinesis arrival \
         timestamps, the alerts role's fixed clock moved to each invocation).\n\n",
        first.devices,
        JITTER_MS / 1000,
        first.device_refresh_s,
        first.warmup_min,
        first.measured_min
    ));
    md.push_str(
        "| `OFFLINE_AFTER_SECONDS` | readings | alerts role WRU/reading | table | GSI1 | GSI2 | **upkeep: extra WRU/reading vs off** | device writes / device / h | watch-key moves / device / h | alerts role RRU/reading | ingest WRU/reading | alerts invocations (echo-only) | watched at end |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in &rep.upkeep {
        let gsi = |i: &str| r.per(r.alerts.wru_by_index.get(i).copied().unwrap_or(0.0));
        let hours = r.measured_min as f64 / 60.0;
        md.push_str(&format!(
            "| {} | {} | {:.4} | {:.4} | {:.4} | {:.4} | {} | {:.2} | {:.2} | {:.4} | {:.4} | {} ({}) | {} of {} |\n",
            window_label(r.offline_after_s),
            r.readings,
            r.alerts_wru(),
            r.per(r.alerts.wru_table),
            gsi("GSI1"),
            gsi("GSI2"),
            match (r.offline_after_s, upkeep_extra(rep, r)) {
                (0, _) => "baseline".to_owned(),
                (_, Some(x)) => format!("**{x:+.4}**"),
                (_, None) => "–".to_owned(),
            },
            r.device_writes_per_hour(),
            r.watch_key_moves as f64 / f64::from(r.devices) / hours,
            r.per(r.alerts.rru_aws()),
            r.per(r.ingest.wru),
            r.alerts_invocations,
            r.echo_invocations,
            r.watched_at_end,
            r.devices,
        ));
    }
    let failed: u64 = rep.upkeep.iter().map(|r| r.failed_batches).sum();
    if failed > 0 {
        md.push_str(&format!(
            "\n**{failed} batches failed** (reported as batch item failures) in these runs.\n"
        ));
    }
    md.push_str(
        "\n*Alerts role WRU/reading* is every write unit the role spent in the measured window \
         over the readings stored in it, table and each index apart; RRU are with AWS's minimum \
         charge for reads that find nothing (see Findings). *Device writes* and *watch-key \
         moves* are counted from the table's stream: the device items' records the role's \
         writes produced, and those whose `gsi2sk` differs from the old image's. GSI2 is \
         `KEYS_ONLY`: an item write that leaves its key alone costs GSI2 nothing, a key move is \
         a delete and a put in the index, 2 WRU.\n\n",
    );
    let base = rep.upkeep.iter().find(|r| r.offline_after_s == 0);
    if let Some(b) = base {
        md.push_str(&format!(
            "With the window off the role writes a device item only when `lastSeenAt` lags its \
             newest reading by {} s: {:.2} writes per device and hour, {:.4} WRU per reading. \
             With a window it also writes it when an arrival comes within a quarter window of \
             the stored check time (three quarters of a window after the arrival it was set \
             from), and that write moves the key:\n\n",
            b.device_refresh_s,
            b.device_writes_per_hour(),
            b.alerts_wru()
        ));
    }
    for r in rep.upkeep.iter().filter(|r| r.offline_after_s > 0) {
        let moved = tidemark_aggregator::offline::upkeep::moved_after(r.offline_after_s);
        let hours = r.measured_min as f64 / 60.0;
        let moves = r.watch_key_moves as f64 / f64::from(r.devices) / hours;
        let extra = upkeep_extra(rep, r).unwrap_or(0.0);
        let (more_writes, more_table) = base.map_or((0.0, 0.0), |b| {
            (
                r.device_writes_per_hour() - b.device_writes_per_hour(),
                r.per(r.alerts.wru_table) - b.per(b.alerts.wru_table),
            )
        });
        let gsi2 = r.per(r.alerts.wru_by_index.get("GSI2").copied().unwrap_or(0.0));
        if u64::from(moved) >= r.device_refresh_s {
            md.push_str(&format!(
                "- **{} s**: three quarters of the window ({} s) is at least the refresh ({} s), so the writes \
                 that move the key are writes the refresh would have made anyway: {:+.2} device \
                 writes per device and hour, {more_table:+.4} table WRU per reading. But each of \
                 the {moves:.2} key moves per device and hour costs 2 GSI2 WRU: \
                 {gsi2:+.4} WRU per reading, which is the whole upkeep ({extra:+.4}). The item \
                 part of the target is met; counting index writes (they are billed as writes), \
                 it is missed.\n",
                r.offline_after_s, moved, r.device_refresh_s, more_writes
            ));
        } else {
            md.push_str(&format!(
                "- **{} s**: three quarters of the window ({} s) is shorter than the refresh ({} s), so the \
                 device item is written about every {} s instead: {:.2} writes per device and \
                 hour ({more_writes:+.2} vs off, {more_table:+.4} table WRU per reading), each \
                 moving the key ({moves:.2} moves, {gsi2:.4} GSI2 WRU per reading). Upkeep \
                 {extra:+.4} WRU per reading: **missed**.\n",
                r.offline_after_s,
                moved,
                r.device_refresh_s,
                moved,
                r.device_writes_per_hour()
            ));
        }
    }
    md.push_str(
        "\nIn general, for a device sending every *i* seconds with window *W* (≥ 2 × \
         `DEVICE_REFRESH_SECONDS` × 4/3), the upkeep costs about 2 GSI2 WRU per 3*W*/4: \
         (8/3)·*i*/*W* WRU per reading (0.044 at *i* = 60 s, *W* = 3600 s); below that it adds \
         the item writes too. Not in these figures: the watchdog's heartbeats (a fixed cost per minute and \
         stream shard, paid with the window off too, since the watchdog runs whatever the \
         fleet default is: part 2) and the rollups role, which no window changes (it never \
         writes device items).\n",
    );
    md
}

fn watchdog_md(w: &WatchPart) -> String {
    let mut md = String::from("\n## 2. Watchdog runs: read and write units\n\n");
    md.push_str(&format!(
        "{} devices, seeded directly with `BatchWriteItem` (25 items a call, 8 calls in flight; \
         {} items with the offline devices' open alerts, plus the last readings of the devices \
         that fall due, through ingest; {:.0} s): {} watched with a {} s window, check times \
         spread evenly over the next {} s; {} offline (GSI2 `{}`, `offline` state set). The \
         real `Watchdog::run` with `DynamoWatch`, its client behind the metering proxy. \
         Heartbeats: {} stream shards, sent to a stand-in for Kinesis (a `Heartbeats` \
         implementation) that marks each shard's heartbeat item passed the moment it is sent, \
         as ingest and the alerts role would (their cost is measured apart, below); so the \
         watermark is the run's own time. The watchdog's clock is fixed and set so that \
         exactly the devices named below fall due; each of their last readings is stored, so \
         a run reads what it would in production.\n\n",
        thousands(w.watched + w.offline),
        thousands(w.seeded_items),
        w.seed_seconds,
        thousands(w.watched),
        w.window_s,
        w.window_s,
        thousands(w.offline),
        keys::OFFLINE_GSI2PK,
        w.shards
    ));
    md.push_str(
        "| run | due (expected) | opened | postponed | lost / failed | RRU, DynamoDB Local | RRU, AWS minimums incl. | WRU (table + GSI1 + GSI2) | RRU / due device | WRU / due device | `RunReport` RRU / WRU |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in &w.runs {
        let per = |v: f64| {
            if r.due == 0 {
                "–".to_owned()
            } else {
                format!("{:.2}", v / r.due as f64)
            }
        };
        let gsi = |i: &str| r.spent.wru_by_index.get(i).copied().unwrap_or(0.0);
        md.push_str(&format!(
            "| {} | {} ({}) | {} | {} | {} / {} | {:.1} | {:.1} | {:.1} ({:.1} + {:.1} + {:.1}) | {} | {} | {:.1} / {:.1} |\n",
            r.label,
            r.due,
            r.expected_due,
            r.opened,
            r.postponed,
            r.lost,
            r.failed,
            r.spent.rru,
            r.spent.rru_aws(),
            r.spent.wru,
            r.spent.wru_table,
            gsi("GSI1"),
            gsi("GSI2"),
            per(r.spent.rru_aws()),
            per(r.spent.wru),
            r.report_rru,
            r.report_wru,
        ));
    }
    md.push_str(&format!(
        "\nIn `{}` after the runs: {} devices (the {} seeded and those opened).\n\n\
         Calls by operation (calls / units as DynamoDB Local reported them):\n\n\
         | run | operations |\n|---|---|\n",
        keys::OFFLINE_GSI2PK,
        thousands(w.offline_after_runs),
        thousands(w.offline)
    ));
    for r in &w.runs {
        let ops: Vec<String> = r
            .spent
            .by_operation
            .iter()
            .map(|(op, (calls, units))| format!("{op} {calls} / {units:.1}"))
            .collect();
        md.push_str(&format!("| {} | {} |\n", r.label, ops.join(", ")));
    }
    md.push_str("\n### Scaled to a month\n\n");
    let steady = w.runs.iter().find(|r| r.expected_due == 0);
    let base_rru = steady.map_or(0.0, |s| s.spent.rru_aws());
    let base_wru = steady.map_or(0.0, |s| s.spent.wru);
    if let Some(s) = steady {
        md.push_str(&format!(
            "- **Nothing due** ({} watched, {} offline): {:.1} RRU (AWS minimums incl.) and \
             {:.1} WRU a run, {} RRU a month: **${:.3} a month**. One GSI2 query per watch \
             partition ({}) and one strongly consistent query of the heartbeat items, whatever \
             the fleet's size.\n",
            thousands(w.watched),
            thousands(w.offline),
            s.spent.rru_aws(),
            s.spent.wru,
            thousands((s.spent.rru_aws() * RUNS_PER_MONTH).round() as u64),
            usd_month_per_run(s.spent.rru_aws(), s.spent.wru),
            keys::OFFLINE_WATCH_PARTITIONS
        ));
    }
    for r in w.runs.iter().filter(|r| r.opened > 0) {
        let rru = (r.spent.rru_aws() - base_rru) / r.opened as f64;
        let wru = (r.spent.wru - base_wru) / r.opened as f64;
        md.push_str(&format!(
            "- **{} silent devices at once**: {:.2} RRU and {:.2} WRU per device above the \
             nothing-due run: ${:.4} per 1,000 offline alerts opened (once per silence, not per \
             minute; the alerts role's publishing of each `opened` event is not in it).\n",
            thousands(r.opened),
            rru,
            wru,
            usd_per_thousand(rru, wru)
        ));
    }
    if let Some(r) = w
        .runs
        .iter()
        .find(|r| r.label.contains("newer arrival") && r.due > 0)
    {
        let rru = (r.spent.rru_aws() - base_rru) / r.due as f64;
        let wru = (r.spent.wru - base_wru) / r.due as f64;
        if r.postponed == r.due {
            md.push_str(&format!(
                "- **A postponement** (due, but its readings show a newer arrival): {rru:.2} \
                 RRU and {wru:.2} WRU per device.\n"
            ));
        } else {
            md.push_str(&format!(
                "- **A due device whose readings show a newer arrival**: {rru:.2} RRU and \
                 {wru:.2} WRU per device and run; {} of {} were postponed, {} failed (see \
                 Findings), and a failed one is due again, and read again, at every run until \
                 its new deadline passes.\n",
                r.postponed, r.due, r.failed
            ));
        }
    }
    let h = &w.heartbeat;
    let beats = (h.rounds * h.shards as u64).max(1) as f64;
    let per_run_wru = (h.ingest.wru + h.alerts.wru) / h.rounds.max(1) as f64;
    let per_run_rru = (h.ingest.rru_aws() + h.alerts.rru_aws()) / h.rounds.max(1) as f64;
    md.push_str(&format!(
        "- **The heartbeats' way through the pipeline** (measured: {} rounds of heartbeat \
         records into each of {} shards, through the real ingest and alerts role on the same \
         table, the role's own marks echoed back): ingest {:.2} WRU, the alerts role {:.2} WRU \
         per heartbeat ({} ingest and {} alerts invocations in all): {:.1} WRU and {:.1} RRU \
         per run with {} shards, **${:.3} a month**, paid whatever the window (the watchdog \
         always runs). Lambda invocations (4 ingest + 2 alerts per run and 4 shards) are not \
         in it.\n",
        h.rounds,
        h.shards,
        h.ingest.wru / beats,
        h.alerts.wru / beats,
        h.ingest_invocations,
        h.alerts_invocations,
        per_run_wru,
        per_run_rru,
        h.shards,
        usd_month_per_run(per_run_rru, per_run_wru)
    ));
    md
}

fn findings_md(rep: &Report) -> String {
    let mut md = String::from("\n## Findings\n\n");
    if let Some(w) = &rep.watchdog {
        if let Some(err) = &w.postpone_error {
            let failed: Vec<String> = w
                .runs
                .iter()
                .filter(|r| r.failed > 0)
                .map(|r| format!("\"{}\": {} of {} due", r.label, r.failed, r.due))
                .collect();
            md.push_str(&format!(
                "- **Postponing a due device fails.** Runs with failed devices: {}. The same \
                 call (`DynamoWatch::postpone` on one of them) answers: `{err}`. \
                 `DynamoWatch::update_device` (crates/watchdog/src/dynamo.rs) binds `#ver`, \
                 `#arr`, `#g2pk` and `#g2sk` in every request, but `postpone`'s expression \
                 (`SET #arr = :arr, #g2sk = :check, #ver = :next`) never uses `#g2pk`, and \
                 DynamoDB refuses a request with an unused expression attribute name (AWS \
                 does, as DynamoDB Local does). So every due device whose readings show a newer \
                 arrival than its item (the usual case for a device that falls silent between \
                 two key moves: any reading after the last move) is counted `failed`, logged \
                 as a warning, and read again at every run until its true deadline passes; \
                 then it is opened (its alert is not late, as `open` works). `unwatch` uses \
                 both names and is not affected.\n",
                failed.join("; ")
            ));
        }
        let gaps: Vec<String> = w
            .runs
            .iter()
            .filter(|r| {
                (r.spent.rru - r.report_rru).abs() > 0.01
                    || (r.spent.wru - r.report_wru).abs() > 0.01
            })
            .map(|r| {
                format!(
                    "\"{}\": proxy {:.1} RRU / {:.1} WRU, `RunReport` {:.1} / {:.1}",
                    r.label, r.spent.rru, r.spent.wru, r.report_rru, r.report_wru
                )
            })
            .collect();
        if gaps.is_empty() {
            md.push_str(
                "- The watchdog's own unit counts (`RunReport.read_units`/`write_units`) agree \
                 with what DynamoDB Local reported to the proxy in every run. They share its \
                 blind spot, though: `DynamoWatch::newest_arrival` reads the device's layout \
                 history (`tidemark_store::layouts::device_history`, a strongly consistent \
                 `BatchGetItem` of the device's and the fleet's layout items) without asking \
                 for its capacity; DynamoDB Local reports nothing for items that do not exist, \
                 AWS bills 1 RRU per key, so on AWS `RunReport` undercounts by 2 RRU per due \
                 device where no layout items exist (the `BatchGetItem` row above).\n",
            );
        } else {
            md.push_str(&format!(
                "- The watchdog's own unit counts differ from the proxy's: {}.\n",
                gaps.join("; ")
            ));
        }
    }
    md.push_str(
        "- DynamoDB Local reports no capacity for a read that finds nothing (an empty `Query`, \
         a key of a `BatchGetItem` with no item), where AWS bills the minimum: 0.5 RRU \
         eventually consistent, 1 RRU strongly consistent, per request (`Query`) or per key \
         (`GetItem`, `BatchGetItem`). The proxy counts those apart (*AWS minimums incl.* \
         columns); every RRU figure scaled to dollars includes them.\n\
         - Transactions: DynamoDB Local reports 2 units per item written in \
         `TransactWriteItems`, table and index writes alike. The table's part is AWS's \
         documented price of a transactional write; the figures keep what DynamoDB Local \
         reports for the indexes.\n",
    );
    if let Some(r) = rep
        .watchdog
        .as_ref()
        .and_then(|w| w.runs.iter().find(|r| r.opened > 0 && r.postponed == 0))
    {
        let n = r.opened.max(1) as f64;
        let gsi = |i: &str| r.spent.wru_by_index.get(i).copied().unwrap_or(0.0) / n;
        md.push_str(&format!(
            "  An opened alert here: {:.1} WRU, of which table {:.1} (the alert item and the \
             device item, 2 each), GSI1 {:.1} (the alert's entry) and GSI2 {:.1} (the device \
             leaving its watch partition for `{}`: a delete and a put).\n",
            r.spent.wru / n,
            r.spent.wru_table / n,
            gsi("GSI1"),
            gsi("GSI2"),
            keys::OFFLINE_GSI2PK
        ));
    }
    md
}

fn save(rep: &Report, dir: &std::path::Path) -> Result<(), BenchError> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("offline.json"), serde_json::to_vec_pretty(rep)?)?;
    std::fs::write(dir.join("OFFLINE.md"), markdown(rep))?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BenchError> {
    // The functions' warnings (a device not decided, a batch failed) go to stderr.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let quick = args.iter().any(|a| a == "--quick");
    let only = arg("--only");
    let dir = arg("--out").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench"),
        std::path::PathBuf::from,
    );
    if args.iter().any(|a| a == "--render") {
        let rep: Report = serde_json::from_slice(&std::fs::read(dir.join("offline.json"))?)?;
        return save(&rep, &dir);
    }
    let mut rep = Report {
        command: format!(
            "cargo run{} -p tidemark-bench --example offline{}",
            if cfg!(debug_assertions) {
                ""
            } else {
                " --release"
            },
            if args.len() > 1 {
                format!(" -- {}", args[1..].join(" "))
            } else {
                String::new()
            }
        ),
        profile: if cfg!(debug_assertions) {
            "debug".into()
        } else {
            "release".into()
        },
        ..Report::default()
    };
    // One part only: the other is kept from the last report.
    if only.is_some()
        && let Ok(bytes) = std::fs::read(dir.join("offline.json"))
        && let Ok(last) = serde_json::from_slice::<Report>(&bytes)
    {
        rep.upkeep = last.upkeep;
        rep.watchdog = last.watchdog;
    }
    let (devices, warmup_min, measured_min) = if quick { (50, 30, 60) } else { (200, 30, 120) };
    let (watched, offline) = if quick { (9_900, 100) } else { (99_000, 1_000) };
    if only.as_deref().is_none_or(|o| o == "upkeep") {
        let local = LocalDynamo::start().await?;
        let target = Target {
            dynamodb: local.addr,
        };
        // Simulated time: the fleet starts 3 hours ago on the hour (ingest's time checks
        // read the system clock; the alerts role's clock follows the simulation).
        let start = Timestamp::now()
            .hour_start()
            .minus_millis(3 * 3_600_000)
            .unwrap_or(Timestamp::MIN);
        // `--windows 0,900`: some of them (while iterating).
        let windows: Vec<u32> = arg("--windows").map_or_else(
            || WINDOWS_S.to_vec(),
            |w| w.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
        );
        // The windows at once, each on its own table.
        let runs = futures::future::join_all(
            windows
                .iter()
                .map(|w| upkeep_run(&target, *w, devices, start, warmup_min, measured_min)),
        )
        .await;
        local.stop().await;
        rep.upkeep = runs.into_iter().collect::<Result<_, _>>()?;
        save(&rep, &dir)?;
    }
    if only.as_deref().is_none_or(|o| o == "watchdog") {
        let local = LocalDynamo::start().await?;
        let target = Target {
            dynamodb: local.addr,
        };
        let w = watchdog_part(&target, watched, offline, 900, 4).await;
        local.stop().await;
        rep.watchdog = Some(w?);
        save(&rep, &dir)?;
    }
    eprintln!("offline: wrote {}", dir.join("OFFLINE.md").display());
    Ok(())
}
