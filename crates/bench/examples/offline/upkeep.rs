//! Part 1, the deadline upkeep: the standard fleet through ingest and the alerts role with a
//! fleet window set, and what the alerts role's device writes and watch-key moves cost per
//! stored reading.

use std::time::{Duration, Instant};

use aws_lambda_events::event::dynamodb::EventRecord;
use serde::{Deserialize, Serialize};
use tidemark_aggregator::{Aggregator, AggregatorConfig, Role};
use tidemark_bench::BenchError;
use tidemark_bench::meter::Meter;
use tidemark_bench::run::Target;
use tidemark_bench::scenario::{
    KinesisRecord, TEMPLATE_ALERTS_WINDOW_MS, TEMPLATE_DEVICE_REFRESH_S, TEMPLATE_INGEST_BATCH,
    TEMPLATE_INGEST_WINDOW_MS, kinesis_records, reading_json,
};
use tidemark_ingest::{Ingest, IngestConfig};
use tidemark_schema::keys;
use tidemark_schema::{Clock, Timestamp};

use crate::fleet::{fleet, fleet_device};
use crate::follower::Follower;
use crate::metering::{Spent, client_via};
use crate::pipeline::{alerts_filter, event_of, ingest, is_reading, key_attr};
use crate::table::watched;

/// `DEVICE_REFRESH_SECONDS`, the template's default.
const REFRESH_S: u64 = TEMPLATE_DEVICE_REFRESH_S;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UpkeepRun {
    pub offline_after_s: u32,
    pub device_refresh_s: u64,
    pub devices: u32,
    pub warmup_min: i64,
    pub measured_min: i64,
    /// Readings stored in the measured window.
    pub readings: u64,
    pub ingest_invocations: u64,
    pub alerts_invocations: u64,
    /// Alerts invocations that held only the role's own device writes (no reading).
    pub echo_invocations: u64,
    pub failed_batches: u64,
    pub ingest: Spent,
    pub alerts: Spent,
    /// Device items written by the alerts role (their stream records), and of those, how many
    /// moved the GSI2 watch key (or set it the first time).
    pub device_writes: u64,
    pub watch_key_moves: u64,
    /// Devices with a watch key at the end.
    pub watched_at_end: u64,
    pub seconds: f64,
}

impl UpkeepRun {
    pub fn per(&self, v: f64) -> f64 {
        v / self.readings.max(1) as f64
    }
    pub fn alerts_wru(&self) -> f64 {
        self.per(self.alerts.wru)
    }
    /// The least deadline upkeep can cost per stored reading with this window
    /// (docs/decisions/0005-offline-upkeep-floor.md): one move per window and device, a device
    /// write and the keys-only entry's delete and put, 3 WRU.
    pub fn floor_wru(&self) -> f64 {
        let windows = f64::from(self.devices) * self.measured_min as f64 * 60.0
            / f64::from(self.offline_after_s);
        self.per(3.0 * windows)
    }
    /// Device item writes per device per hour.
    pub fn device_writes_per_hour(&self) -> f64 {
        self.device_writes as f64 / f64::from(self.devices) / (self.measured_min as f64 / 60.0)
    }
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

pub async fn upkeep_run(
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
        let records: Vec<KinesisRecord> = sends[i..end]
            .iter()
            .map(|s| {
                let id = fleet_device(s.device);
                KinesisRecord {
                    key: id.to_string(),
                    data: reading_json(&id, s.at, s.device, s.n),
                    arrived: s.arrived,
                }
            })
            .collect();
        let event = kinesis_records(&records, "shardId-000000000000", seq)?;
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
