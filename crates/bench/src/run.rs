//! One scenario through one design: the fleet's readings → Kinesis events → ingest → the
//! table's stream → batching-window batches → aggregator, with each function's DynamoDB
//! client behind its own metering proxy and its handler time measured in process.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde::Serialize;
use tidemark_aggregator::{AggregatorConfig, BothRoles};
use tidemark_ingest::{Ingest, IngestConfig};
use tidemark_schema::{DeviceId, EntityKey, LayoutHistory, LayoutHistoryItem, Timestamp};
use tidemark_store::ClientSettings;

use crate::BenchError;
use crate::baseline::Baseline;
use crate::meter::{Meter, MeterTotals};
use crate::scenario::{Scenario, SimReading, kinesis_event};
use crate::storage::Storage;
use crate::stream::{StreamReader, batches};
use crate::windows;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Design {
    Tidemark,
    Baseline,
}

/// Units one function spent.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct Units {
    pub wru_table: f64,
    pub wru_gsi: f64,
    pub wru_total: f64,
    pub write_calls: u64,
    /// Failed conditional writes: no units reported by DynamoDB Local, ~1 WRU each on AWS.
    pub conditional_failures: u64,
    pub rru_total: f64,
    pub read_calls: u64,
    pub totals: MeterTotals,
}

impl Units {
    fn from(t: MeterTotals) -> Units {
        let (w, write_calls, conditional_failures) = t.writes();
        let (r, read_calls) = t.reads();
        Units {
            wru_table: w.table,
            wru_gsi: w.gsi,
            wru_total: w.total,
            write_calls,
            conditional_failures,
            rru_total: r.total,
            read_calls,
            totals: t,
        }
    }
}

/// What one function did over the run.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct Side {
    pub invocations: u64,
    /// Records delivered to the function (stream records include non-reading items).
    pub records: u64,
    /// Reading records among them.
    pub reading_records: u64,
    /// Wall time inside the handler, summed over invocations.
    pub handler_seconds: f64,
    pub units: Units,
}

impl Side {
    pub fn readings_per_second(&self) -> f64 {
        if self.handler_seconds > 0.0 {
            self.reading_records as f64 / self.handler_seconds
        } else {
            0.0
        }
    }
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct DesignRun {
    pub scenario: String,
    pub design: Design,
    pub devices: u32,
    pub aggregator_batch_size: usize,
    pub readings_sent: u64,
    /// Distinct reading keys among those sent (what the table stores).
    pub readings_stored: u64,
    /// Readings the aggregator applied to hourly aggregates (Tidemark) or aggregated
    /// (baseline): equal to `readings_stored` when nothing was lost or double counted.
    pub readings_aggregated: u64,
    pub aggregator_conflicts: u64,
    pub aggregator_items_written: u64,
    /// Readings one device sends per batching window (the k a window-long batch gives).
    pub readings_per_device_window: f64,
    /// (device, invocation) pairs: how often some item of a device was due for a write.
    pub device_batches: u64,
    pub failed_batches: u64,
    pub ingest: Side,
    pub aggregator: Side,
    pub seconds: f64,
    /// When the run has more than one batching window, the first is a warm-up (every
    /// aggregate and device item is created, every device registered in GSI1, caches
    /// filled) and every other figure covers the later windows only: the steady state a
    /// long-running fleet pays.
    pub warmup: Option<Warmup>,
    /// How the run stored readings: `single`, or `packed:<slot seconds>` (docs/design.md §2).
    #[serde(default)]
    pub layout: String,
    /// The ingest mapping's batching window, seconds.
    #[serde(default)]
    pub ingest_window_s: f64,
    /// Reading and slot items left in the table (all readings, warm-up included).
    #[serde(default)]
    pub storage: Storage,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Warmup {
    pub readings_stored: u64,
    pub ingest: Units,
    pub aggregator: Units,
}

impl DesignRun {
    fn per(&self, v: f64) -> f64 {
        if self.readings_stored == 0 {
            0.0
        } else {
            v / self.readings_stored as f64
        }
    }
    pub fn ingest_wru_per_reading(&self) -> f64 {
        self.per(self.ingest.units.wru_total)
    }
    pub fn aggregator_wru_per_reading(&self) -> f64 {
        self.per(self.aggregator.units.wru_total)
    }
    pub fn wru_per_reading(&self) -> f64 {
        self.per(self.ingest.units.wru_total + self.aggregator.units.wru_total)
    }
    pub fn gsi_wru_per_reading(&self) -> f64 {
        self.per(self.ingest.units.wru_gsi + self.aggregator.units.wru_gsi)
    }
    /// Including failed conditional writes at one unit each (what AWS would bill).
    pub fn billed_wru_per_reading(&self) -> f64 {
        self.per(
            self.ingest.units.wru_total
                + self.aggregator.units.wru_total
                + (self.ingest.units.conditional_failures
                    + self.aggregator.units.conditional_failures) as f64,
        )
    }
}

/// Where the run talks to.
#[derive(Debug, Clone)]
pub struct Target {
    pub dynamodb: SocketAddr,
}

impl Target {
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.dynamodb)
    }
    pub async fn client(&self) -> aws_sdk_dynamodb::Client {
        tidemark_store::dynamodb_client(&ClientSettings::local(self.endpoint())).await
    }
    pub async fn streams(&self) -> aws_sdk_dynamodbstreams::Client {
        tidemark_streams::local_streams::client(&self.endpoint()).await
    }
}

/// When the fleets start: three hours ago, so readings (of runs up to two and a half hours
/// long) pass ingest's time checks, and [`START_PHASE_MS`] past the hour, so the first
/// batching window (which opens at the first record) lines up with no slot and no hour, as
/// it would not on AWS.
pub fn simulated_start(now: Timestamp) -> Timestamp {
    let hour = now.hour_start();
    let start = hour.minus_millis(3 * 3_600_000).unwrap_or(hour);
    // Keep the run inside one UTC day (a day change would add a daily bucket).
    let start = if start.day() != hour.day() || start.day() != now.day() {
        start.day().start()
    } else {
        start
    };
    start.plus_micros(START_PHASE_MS * 1_000).unwrap_or(start)
}

/// How far past a whole hour the fleets start: 1 min 37.3 s, a divisor of no slot length.
pub const START_PHASE_MS: i64 = 97_300;

enum Functions {
    Tidemark {
        ingest: Box<Ingest>,
        /// Both stream readers (rollups and alerts), as the template runs them.
        aggregator: Box<BothRoles>,
    },
    Baseline(Baseline),
}

/// Creates a fresh table named `table` and runs `readings` of `scenario` through `design`.
pub async fn run(
    target: &Target,
    scenario: &Scenario,
    design: Design,
    table: &str,
    readings: &[SimReading],
    start: Timestamp,
) -> Result<DesignRun, BenchError> {
    let began = Instant::now();
    let direct = target.client().await;
    tidemark_store::create_table(&direct, table, &tidemark_schema::TABLE).await?;
    // In force from an hour before the first reading (docs/design.md §4: announced ahead).
    let from = start.minus_millis(3_600_000).unwrap_or(start);
    let setup = |e: tidemark_schema::LayoutHistoryError| BenchError::Setup(e.to_string());
    if let (Some(layout), Design::Tidemark) = (scenario.layout, design) {
        let history = LayoutHistory::default()
            .with_layout(from, layout)
            .map_err(setup)?;
        put_config(&direct, table, &LayoutHistoryItem::default_layout(history)).await?;
    }
    if let (Some(n), Design::Tidemark) = (scenario.hot_partitions, design) {
        let history = LayoutHistory::default()
            .with_change(from, n)
            .map_err(setup)?;
        let item = LayoutHistoryItem::new(&scenario.device_id(0), history);
        put_config(&direct, table, &item).await?;
    }
    if let (true, Design::Tidemark) = (scenario.percentiles, design) {
        for i in 0..scenario.devices {
            let mut d = tidemark_schema::DeviceItem::new(
                scenario.device_id(i),
                tidemark_schema::DeviceStatus::Active,
                from,
            );
            d.percentiles = true;
            direct
                .put_item()
                .table_name(table)
                .set_item(Some(tidemark_store::to_item(&d)?))
                .send()
                .await
                .map_err(|e| {
                    BenchError::Setup(aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string())
                })?;
        }
    }
    let ingest_meter = Meter::start(target.dynamodb).await?;
    let agg_meter = Meter::start(target.dynamodb).await?;
    let via = |m: &Meter| {
        if std::env::var_os("BENCH_NO_METER").is_some() {
            target.endpoint()
        } else {
            m.endpoint()
        }
    };
    let ingest_client =
        tidemark_store::dynamodb_client(&ClientSettings::local(via(&ingest_meter))).await;
    let agg_client = tidemark_store::dynamodb_client(&ClientSettings::local(via(&agg_meter))).await;
    // The aggregator runs in simulated time: each round at its window's close, so hours and
    // days open and close as they would for a live fleet.
    let clock = tidemark_schema::Clock::fixed(start);
    let functions = match design {
        Design::Tidemark => Functions::Tidemark {
            ingest: Box::new(Ingest::new(ingest_client, IngestConfig::new(table))),
            aggregator: Box::new(BothRoles::new(agg_client, {
                let mut c = AggregatorConfig::new(table);
                c.clock = clock.clone();
                c
            })),
        },
        Design::Baseline => Functions::Baseline(Baseline::new(ingest_client, agg_client, table)),
    };
    let mut reader = StreamReader::for_table(&direct, target.streams().await, table).await?;

    let stored: BTreeSet<(u32, Timestamp)> = readings.iter().map(|r| (r.device, r.at)).collect();
    let mut out = DesignRun {
        scenario: scenario.name.to_owned(),
        design,
        devices: scenario.devices,
        aggregator_batch_size: scenario.aggregator_batch_size,
        readings_sent: readings.len() as u64,
        readings_stored: stored.len() as u64,
        readings_aggregated: 0,
        aggregator_conflicts: 0,
        aggregator_items_written: 0,
        readings_per_device_window: scenario.window_ms as f64 * 1_000.0
            / scenario.interval_us as f64,
        device_batches: 0,
        failed_batches: 0,
        ingest: Side::default(),
        aggregator: Side::default(),
        seconds: 0.0,
        warmup: None,
        layout: match scenario.layout.and_then(|l| l.slot) {
            Some(len) => format!("packed:{}", len.seconds()),
            None => "single".into(),
        },
        ingest_window_s: scenario.ingest_window_ms.unwrap_or(scenario.window_ms) as f64 / 1000.0,
        storage: Storage::default(),
    };

    let mut seq = 1u64;
    // Both mappings batch as Lambda does (crate::windows): ingest's windows open at the first
    // record to arrive, the aggregator's at the first stream record ingest's writes make, so
    // neither lines up with a slot or an hour. Each round is one aggregator window: the ingest
    // batches delivered in it, then the stream records they made. The last round drains the
    // aggregator's own echoes (its writes are stream records too, which it must read and ignore).
    let arrivals: Vec<i64> = readings.iter().map(|r| r.at.epoch_millis()).collect();
    let ingest_batches = windows::batches(
        &arrivals,
        scenario.ingest_window_ms.unwrap_or(scenario.window_ms),
        scenario.ingest_batch_size,
    );
    let rounds = windows::downstream(&ingest_batches, scenario.window_ms);
    // When a round's aggregator window opens, and (measured scenarios) where the warm-up ends
    // and the run stops, in those times.
    let opens = |r: &std::ops::Range<usize>| ingest_batches[r.start].closed_ms;
    let first_ms = arrivals.first().copied().unwrap_or(0);
    let (measure_from, measure_to) = match scenario.measured {
        Some((from, to)) => (Some(first_ms + from), first_ms + to),
        None => (None, i64::MAX),
    };
    let mut rounds = rounds
        .into_iter()
        .take_while(|r| opens(r) < measure_to)
        .peekable();
    let (mut first_measured, mut processed_end) = (0, 0);
    let mut drained_last = false;
    while !drained_last {
        let round = rounds.next().unwrap_or_else(|| {
            drained_last = true;
            0..0
        });
        if !round.is_empty() {
            let closes = opens(&round) + scenario.window_ms;
            clock.set(Timestamp::from_epoch_millis(closes).unwrap_or(start));
        }
        let end = ingest_batches[..round.end]
            .last()
            .map_or(readings.len(), |b| b.records.end);
        if !round.is_empty() {
            processed_end = end;
        }
        for batch in &ingest_batches[round] {
            let chunk = &readings[batch.records.clone()];
            let event = kinesis_event(scenario, chunk, seq)?;
            seq += chunk.len() as u64;
            let t = Instant::now();
            match &functions {
                Functions::Tidemark { ingest, .. } => {
                    let (resp, stats) = ingest
                        .process(&event, Instant::now() + Duration::from_secs(60))
                        .await
                        .map_err(|e| BenchError::Function(e.to_string()))?;
                    out.failed_batches += u64::from(!resp.batch_item_failures.is_empty());
                    out.ingest.reading_records += stats.readings;
                }
                Functions::Baseline(b) => {
                    out.ingest.reading_records += b.ingest(&event, Timestamp::now()).await?;
                }
            }
            out.ingest.handler_seconds += t.elapsed().as_secs_f64();
            out.ingest.invocations += 1;
            out.ingest.records += chunk.len() as u64;
        }
        let t = Instant::now();
        let mut records = reader.drain().await?;
        if design == Design::Tidemark {
            // template.yaml's FilterCriteria on the aggregator mapping: only readings are
            // delivered (the aggregator's own writes never come back to it). The textbook
            // design has no filter and is invoked for its own writes too.
            records.retain(|r| {
                key_attr(r, "sk").is_some_and(|s| {
                    s.starts_with(tidemark_schema::keys::READING_PREFIX)
                        || s.starts_with(tidemark_schema::keys::SLOT_PREFIX)
                })
            });
        }
        if verbose() {
            eprintln!(
                "bench:     window to {end}: ingest {:.1} s so far, drained {} records in {:.1} s",
                out.ingest.handler_seconds,
                records.len(),
                t.elapsed().as_secs_f64()
            );
        }
        for event in batches(records, scenario.aggregator_batch_size) {
            let n = event.records.len() as u64;
            // Readings of the batch by device (a hot device's partitions are one device).
            let devices: Vec<DeviceId> = event
                .records
                .iter()
                .filter_map(
                    |r| match EntityKey::parse(key_attr(r, "pk")?, key_attr(r, "sk")?) {
                        Ok(EntityKey::Reading { device, .. } | EntityKey::Slot { device, .. }) => {
                            Some(device)
                        }
                        _ => None,
                    },
                )
                .collect();
            let reading_records = devices.len() as u64;
            let devices: BTreeSet<DeviceId> = devices.into_iter().collect();
            out.device_batches += devices.len() as u64;
            let t = Instant::now();
            match &functions {
                Functions::Tidemark { aggregator, .. } => {
                    let (resp, report) = aggregator.process(&event).await;
                    out.failed_batches += u64::from(!resp.batch_item_failures.is_empty());
                    out.readings_aggregated += report.readings_aggregated;
                    out.aggregator_conflicts += report.conflicts_retried;
                    out.aggregator_items_written += report.items_written;
                }
                Functions::Baseline(b) => {
                    out.readings_aggregated += b.aggregate(&event).await?;
                }
            }
            out.aggregator.handler_seconds += t.elapsed().as_secs_f64();
            out.aggregator.invocations += 1;
            out.aggregator.records += n;
            out.aggregator.reading_records += reading_records;
        }
        // The warm-up ends after the first round, or (measured) before the first round
        // opening in the measured span.
        let warm = match measure_from {
            None => scenario.warmup_window,
            Some(from) => rounds.peek().is_some_and(|r| opens(r) >= from),
        };
        if warm && out.warmup.is_none() && !drained_last && end < readings.len() {
            first_measured = end;
            // The first window was the warm-up: keep its units apart, measure the rest.
            out.warmup = Some(Warmup {
                readings_stored: count(&readings[..end]),
                ingest: Units::from(ingest_meter.take().await),
                aggregator: Units::from(agg_meter.take().await),
            });
            out.readings_sent = (readings.len() - end) as u64;
            out.readings_stored = count(&readings[end..]);
            out.readings_aggregated = 0;
            out.aggregator_conflicts = 0;
            out.aggregator_items_written = 0;
            out.device_batches = 0;
            out.ingest = Side::default();
            out.aggregator = Side::default();
        }
    }
    if scenario.measured.is_some() {
        // Readings the run stopped before are not sent at all.
        let measured = &readings[first_measured..processed_end.max(first_measured)];
        out.readings_sent = measured.len() as u64;
        out.readings_stored = count(measured);
    }
    out.ingest.units = Units::from(ingest_meter.take().await);
    out.aggregator.units = Units::from(agg_meter.take().await);
    out.storage = crate::storage::readings_stored(&direct, table).await?;
    out.seconds = began.elapsed().as_secs_f64();
    Ok(out)
}

/// Distinct readings (device, time) among `rs`: what is stored of them.
fn count(rs: &[SimReading]) -> u64 {
    rs.iter()
        .map(|r| (r.device, r.at))
        .collect::<BTreeSet<_>>()
        .len() as u64
}

/// Stores a layout history (a device's, or the fleet default) before a run.
pub async fn put_config(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    item: &LayoutHistoryItem,
) -> Result<(), BenchError> {
    client
        .put_item()
        .table_name(table)
        .set_item(Some(tidemark_store::to_item(item)?))
        .send()
        .await
        .map_err(|e| {
            BenchError::Setup(aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string())
        })?;
    Ok(())
}

/// `BENCH_VERBOSE=1` logs every window.
fn verbose() -> bool {
    std::env::var_os("BENCH_VERBOSE").is_some()
}

fn key_attr<'a>(
    r: &'a aws_lambda_events::event::dynamodb::EventRecord,
    name: &str,
) -> Option<&'a str> {
    match r.change.keys.get(name) {
        Some(serde_dynamo::AttributeValue::S(s)) => Some(s.as_str()),
        _ => None,
    }
}
