//! What window rules cost the alerts role: write and read units per stored reading
//! for a standard-fleet device (one reading a minute) with 2 window rules, against the same
//! fleet without rules, measured with DynamoDB's own consumed capacity (DynamoDB Local's
//! `ConsumedCapacity`, table and indexes apart, through the metering proxy). Writes
//! `bench/RULES.md`.
//!
//! ```sh
//! cargo run --release -p tidemark-bench --example rule_cost          # writes bench/RULES.md
//! cargo run -p tidemark-bench --example rule_cost -- --devices 20 --minutes 20 --out /tmp
//! ```
//!
//! The fleet and the delivery are the offline example's part 1 (`crates/bench/examples/offline/`,
//! whose modules this one includes): devices sending one reading a minute each (±10 s jitter,
//! arriving 50 ms to 1 s after its timestamp), through ingest and the alerts role called in
//! process, batches cut as the template's mappings cut them (a 1 s window opened by the
//! first record that arrives, never aligned to a minute or an hour), the alerts mapping fed
//! every record its filter passes from the table's real DynamoDB stream, the role's own
//! device writes included. Time is simulated: each record's Kinesis arrival is its simulated
//! arrival, and the alerts role's clock is moved to each invocation's time. No thresholds,
//! `OFFLINE_AFTER_SECONDS` 0, `DEVICE_REFRESH_SECONDS` the template's. Two runs, each on a
//! table of its own and at once: `DEFAULT_RULES` `[]` (the baseline) and [`RULES`]. After a
//! warm-up (every device registered, and each window full), units are summed over the
//! measured minutes and divided by the readings stored in them; what the rules add is the
//! difference between the runs. The fleet's readings never breach the rules, so this is the
//! steady state: a rule's state is written only when its phase changes (an alert opens or
//! resolves), which the report counts from the stream (device item writes).
//!
//! Benchmarks report; they never assert (and never on wall-clock speed). The report names the
//! build (debug or release) that produced it; no unit depends on it.

// The offline example's modules, shared as they are; this example uses part of them.
#[allow(dead_code)]
#[path = "offline/fleet.rs"]
mod fleet;
#[allow(dead_code)]
#[path = "offline/follower.rs"]
mod follower;
#[allow(dead_code)]
#[path = "offline/metering.rs"]
mod metering;
#[allow(dead_code)]
#[path = "offline/pipeline.rs"]
mod pipeline;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use aws_lambda_events::event::dynamodb::EventRecord;
use tidemark_aggregator::{Aggregator, AggregatorConfig, Role};
use tidemark_bench::BenchError;
use tidemark_bench::local_ddb::LocalDynamo;
use tidemark_bench::meter::Meter;
use tidemark_bench::run::Target;
use tidemark_bench::scenario::{
    KinesisRecord, TEMPLATE_ALERTS_WINDOW_MS, TEMPLATE_DEVICE_REFRESH_S, TEMPLATE_INGEST_BATCH,
    TEMPLATE_INGEST_WINDOW_MS, kinesis_records, reading_json,
};
use tidemark_ingest::{Ingest, IngestConfig};
use tidemark_schema::keys;
use tidemark_schema::rules::parse_rules;
use tidemark_schema::{Clock, Timestamp};

use fleet::{fleet, fleet_device};
use follower::Follower;
use metering::{Spent, client_via};
use pipeline::{alerts_filter, event_of, ingest, is_reading, key_attr};

/// The 2 window rules of the measured run: the issue's example (a 5-minute mean of
/// `temperature` above 30 for 10 minutes) and a 15-minute maximum of `humidity`. The fleet's
/// temperatures are 18–24 and humidities 35–55, so neither opens: the steady state.
const RULES: &str = r#"[{"metric":"temperature","aggregate":"avg","window":"5m","above":30,"forSeconds":600},{"metric":"humidity","aggregate":"max","window":"15m","above":90}]"#;

/// The goal: write units per reading the rules may add.
const GOAL_WRU: f64 = 0.01;

fn arg(name: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != name).nth(1)
}

/// What one run measured, over its measured minutes.
struct Run {
    readings: u64,
    ingest: Spent,
    alerts: Spent,
    /// Device items the alerts role wrote (their stream records).
    device_writes: u64,
    /// Alerts invocations, and those that failed a batch.
    alerts_invocations: u64,
    failed_batches: u64,
    seconds: f64,
}

impl Run {
    fn per(&self, v: f64) -> f64 {
        v / self.readings.max(1) as f64
    }
}

fn count_device_writes(records: &[EventRecord]) -> u64 {
    records
        .iter()
        .filter(|r| key_attr(r, "sk") == Some(keys::DEVICE_METADATA_SK))
        .count() as u64
}

/// One run: the fleet through ingest and the alerts role with `DEFAULT_RULES` = `rules`.
async fn run(
    target: &Target,
    label: &str,
    rules: &'static str,
    devices: u32,
    start: Timestamp,
    warmup_min: i64,
    measured_min: i64,
) -> Result<Run, BenchError> {
    let began = Instant::now();
    let table = format!("rules-{label}");
    let direct = target.client().await;
    tidemark_store::create_table(&direct, &table, &tidemark_schema::TABLE).await?;
    let ingest_meter = Meter::start(target.dynamodb).await?;
    let alerts_meter = Meter::start(target.dynamodb).await?;
    let ingester = Ingest::new(client_via(&ingest_meter).await, IngestConfig::new(&table));
    let clock = Clock::fixed(start);
    let parsed = parse_rules(&serde_json::from_str(rules)?)
        .map_err(|(_, e)| BenchError::Setup(format!("rules: {e:?}")))?;
    let mut config = AggregatorConfig::new(&table)
        .with_role(Role::Alerts)
        .with_default_rules(parsed);
    config.device_refresh = Duration::from_secs(TEMPLATE_DEVICE_REFRESH_S);
    config.offline_after_default = 0;
    config.clock = clock.clone();
    let alerts = Aggregator::new(client_via(&alerts_meter).await, config);
    let mut reader = Follower::for_table(target, &table).await?;

    let sends = fleet(devices, start, warmup_min + measured_min);
    let warm_end = start
        .plus_millis(warmup_min * 60_000)
        .unwrap_or(Timestamp::MAX);
    let mut out = Run {
        readings: 0,
        ingest: Spent::default(),
        alerts: Spent::default(),
        device_writes: 0,
        alerts_invocations: 0,
        failed_batches: 0,
        seconds: 0.0,
    };
    let mut measuring = false;
    let mut produced_measuring = false;
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
            ingest_meter.take().await;
            alerts_meter.take().await;
            out.alerts_invocations = 0;
            out.failed_batches = 0;
            out.device_writes = 0;
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
        ingest(&ingester, &event).await?;
        if measuring {
            out.readings += (end - i) as u64;
        }
        i = end;
        let mut records: Vec<EventRecord> = reader.drain().await?;
        records.retain(alerts_filter);
        let (own, readings): (Vec<_>, Vec<_>) = records.into_iter().partition(|r| !is_reading(r));
        if produced_measuring {
            out.device_writes += count_device_writes(&own);
        }
        echoes.extend(own);
        let echo_close = echoed_at
            .plus_millis(TEMPLATE_ALERTS_WINDOW_MS)
            .unwrap_or(Timestamp::MAX);
        // The alerts window opens at the first record it gets: the echoes' if they came
        // first, else these readings' (written when ingest ran, at `close`).
        let batch_at = if !echoes.is_empty() && echo_close <= close {
            let (n, failed) = invoke(std::mem::take(&mut echoes), echo_close).await;
            out.alerts_invocations += n;
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
        let (n, failed) = invoke(batch, batch_at).await;
        out.alerts_invocations += n;
        out.failed_batches += failed;
        echoed_at = batch_at;
        produced_measuring = measuring;
    }
    let mut rest = reader.drain().await?;
    rest.retain(alerts_filter);
    out.device_writes += count_device_writes(&rest);
    echoes.extend(rest);
    if !echoes.is_empty() {
        let at = echoed_at
            .plus_millis(TEMPLATE_ALERTS_WINDOW_MS)
            .unwrap_or(Timestamp::MAX);
        let (n, failed) = invoke(std::mem::take(&mut echoes), at).await;
        out.alerts_invocations += n;
        out.failed_batches += failed;
    }
    out.ingest = Spent::of(&ingest_meter.take().await);
    out.alerts = Spent::of(&alerts_meter.take().await);
    let _ = tidemark_store::delete_table(&direct, &table).await;
    out.seconds = began.elapsed().as_secs_f64();
    eprintln!(
        "rule_cost: {label}: {} readings, alerts {:.4} WRU and {:.4} RRU per reading, {} device writes, {:.0} s",
        out.readings,
        out.per(out.alerts.wru),
        out.per(out.alerts.rru_aws()),
        out.device_writes,
        out.seconds
    );
    Ok(out)
}

/// Calls and units of one operation of the alerts role.
fn op(r: &Run, name: &str) -> (f64, f64) {
    r.alerts
        .by_operation
        .get(name)
        .map_or((0.0, 0.0), |(calls, units)| (*calls as f64, *units))
}

fn operations(s: &Spent) -> String {
    s.by_operation
        .iter()
        .map(|(op, (calls, units))| format!("{op} {calls} / {units:.1}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn render(
    base: &Run,
    rules: &Run,
    devices: u32,
    warmup_min: i64,
    measured_min: i64,
    command: &str,
) -> String {
    let build = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let added_wru = rules.per(rules.alerts.wru) - base.per(base.alerts.wru);
    let added_rru = rules.per(rules.alerts.rru_aws()) - base.per(base.alerts.rru_aws());
    let added_rru_local = rules.per(rules.alerts.rru) - base.per(base.alerts.rru);
    let verdict = if added_wru <= GOAL_WRU && rules.failed_batches == 0 {
        "met"
    } else {
        "**missed**"
    };
    let row = |name: &str, r: &Run| {
        format!(
            "| {name} | {} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {} | {} ({} failed) |\n",
            r.readings,
            r.per(r.alerts.wru),
            r.per(r.alerts.wru_table),
            r.per(r.alerts.wru_gsi),
            r.per(r.alerts.rru),
            r.per(r.alerts.rru_aws()),
            r.per(r.ingest.wru),
            r.device_writes,
            r.alerts_invocations,
            r.failed_batches,
        )
    };
    let reads_per = |r: &Run| r.per(r.alerts.read_calls as f64);
    format!(
        "# Alert rules: what window rules cost\n\n\
         Generated by `{command}` (`make bench` runs it with `--release`); nothing is edited by \
         hand. **Build:** {build} (no unit depends on it). How it measures is in the example's \
         doc comment (`crates/bench/examples/rule_cost.rs`). Every unit below is DynamoDB's own \
         `ConsumedCapacity` (DynamoDB Local, a fresh in-memory instance, \
         `ReturnConsumedCapacity: INDEXES` added by the metering proxy), measured in this run; \
         nothing is asserted.\n\n\
         - **Date (UTC):** {date}\n\
         - **Fleet:** the standard fleet's device, one reading a minute (bench/README.md; \
         here {devices} devices: every figure is per reading, and a device's cost does not \
         depend on the others), ±10 s jitter, arriving 50 ms to 1 s after its timestamp, \
         through ingest and the alerts role in process with the template's 1 s batching \
         windows, each opened by the first record that arrives (never aligned to a minute or \
         an hour). {warmup_min} simulated minutes of warm-up (devices registered, the \
         15-minute window full), then {measured_min} measured. No thresholds, \
         `OFFLINE_AFTER_SECONDS` 0, `DEVICE_REFRESH_SECONDS` {refresh}.\n\
         - **Rules** (`DEFAULT_RULES`): baseline `[]`; measured `{RULES}`. The fleet's \
         temperatures are 18–24 and humidities 35–55: no rule opens, the steady state.\n\n\
         ## Target\n\n\
         | target | goal | measured | verdict |\n|---|---|---|---|\n\
         | write units per reading the alerts role adds for a standard-fleet device with 2 \
         window rules | ≤ {GOAL_WRU} WRU/reading | {added_wru:+.4} WRU/reading | {verdict} |\n\n\
         ## Units per stored reading, alerts role\n\n\
         | `DEFAULT_RULES` | readings | WRU | table | GSIs | RRU as DynamoDB Local reports | RRU with AWS's minimum for empty reads | ingest WRU | device item writes | alerts invocations |\n\
         |---|---|---|---|---|---|---|---|---|---|\n\
         {base_row}{rules_row}\n\
         **Added by the 2 rules:** {added_wru:+.4} WRU per reading, {added_rru_local:+.4} RRU \
         per reading as DynamoDB Local reports them ({added_rru:+.4} with AWS's minimum charge \
         for reads that find nothing). Read calls per reading: {base_reads:.2} without rules, \
         {rule_reads:.2} with.\n\n\
         Calls by operation (calls / units as DynamoDB Local reported them):\n\n\
         | `DEFAULT_RULES` | alerts role | ingest |\n|---|---|---|\n\
         | `[]` | {base_ops} | {base_ing} |\n\
         | 2 window rules | {rule_ops} | {rule_ing} |\n\n\
         ## The arithmetic\n\n\
         - **What state a window rule keeps, and where:** none of the window. The window's \
         readings are the device's stored readings; the alerts role derives the aggregate \
         from them at each reading of the rule's metric (docs/design.md §5 \"Alert rules\", \
         docs/decisions/0014-rules-derived-from-readings.md). What it keeps is the rule's \
         *state* on the device item (`rule_states`: phase, start, open alert), as a \
         threshold's.\n\
         - **When it is written:** only when the rule's phase, start or alert changes (an \
         episode opens, becomes pending, or resolves), never to move its time on. A device \
         whose readings never breach writes it never: {rule_writes} device item writes in \
         the measured {measured_min} minutes with the rules against {base_writes} without. \
         So in the steady state the rules add 0 WRU per reading by construction, and \
         {added_wru:+.4} measured.\n\
         - **When an episode does happen** (not measured here): it writes what a \
         threshold's does, the device item's rule state and the alert item at its opening \
         and again at its resolution. If an episode costs *E* WRU in all, the rules stay \
         under {GOAL_WRU} WRU per reading while episodes are rarer than one per {per_wru} × \
         *E* readings: at *E* = 10, one per {episode_readings} readings, about one every \
         {episode_hours:.0} hours for a device sending a reading a minute.\n\
         - **What it costs instead: reads.** Every reading of a rule's metric derives the \
         rule again from the stored readings (queries of the window before it: 5 minutes of a \
         device sending once a minute is about 5 readings, 15 minutes about 15, a few hundred \
         bytes each, 1 read unit per strongly consistent query in DynamoDB's 4 KB steps). \
         Measured: {added_rru_local:+.4} RRU per reading ({base_rru:.4} without rules, \
         {rule_rru:.4} with): {queries:+.2} queries per reading at {per_query:.2} RRU each, \
         and {empty_gets:+.2} `BatchGetItem` calls per reading that DynamoDB Local reports \
         as 0 units (reads that find nothing, which AWS bills at its minimum: \
         {added_rru:+.4} RRU per reading in all with those).\n",
        date = Timestamp::now(),
        refresh = TEMPLATE_DEVICE_REFRESH_S,
        base_row = row("`[]`", base),
        rules_row = row("2 window rules", rules),
        base_reads = reads_per(base),
        rule_reads = reads_per(rules),
        base_ops = operations(&base.alerts),
        rule_ops = operations(&rules.alerts),
        base_ing = operations(&base.ingest),
        rule_ing = operations(&rules.ingest),
        rule_writes = rules.device_writes,
        base_writes = base.device_writes,
        per_wru = (1.0 / GOAL_WRU) as u64,
        episode_readings = (10.0 / GOAL_WRU) as u64,
        episode_hours = 10.0 / GOAL_WRU / 60.0,
        queries = rules.per(op(rules, "Query").0) - base.per(op(base, "Query").0),
        per_query = {
            let (q, u) = (
                op(rules, "Query").0 - op(base, "Query").0,
                op(rules, "Query").1 - op(base, "Query").1,
            );
            if q > 0.0 { u / q } else { 0.0 }
        },
        empty_gets = rules.per(op(rules, "BatchGetItem").0) - base.per(op(base, "BatchGetItem").0),
        base_rru = base.per(base.alerts.rru),
        rule_rru = rules.per(rules.alerts.rru),
    )
}

#[tokio::main]
async fn main() -> Result<(), BenchError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let devices: u32 = arg("--devices").and_then(|v| v.parse().ok()).unwrap_or(100);
    let warmup_min: i64 = arg("--warmup").and_then(|v| v.parse().ok()).unwrap_or(20);
    let measured_min: i64 = arg("--minutes").and_then(|v| v.parse().ok()).unwrap_or(60);
    let dir = arg("--out").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench"),
        PathBuf::from,
    );
    let given: Vec<String> = std::env::args().skip(1).collect();
    let command = format!(
        "cargo run{} -p tidemark-bench --example rule_cost{}",
        if cfg!(debug_assertions) {
            ""
        } else {
            " --release"
        },
        if given.is_empty() {
            String::new()
        } else {
            format!(" -- {}", given.join(" "))
        }
    );
    let local = LocalDynamo::start().await?;
    let target = Target {
        dynamodb: local.addr,
    };
    // Simulated time: the fleet starts 3 hours ago (ingest's time checks read the system
    // clock; the alerts role's clock follows the simulation). The devices' phases spread
    // over the minute, so no batch lines up with a minute.
    let start = Timestamp::now()
        .minus_millis(3 * 3_600_000)
        .unwrap_or(Timestamp::MIN);
    let (base, rules) = futures::join!(
        run(
            &target,
            "none",
            "[]",
            devices,
            start,
            warmup_min,
            measured_min
        ),
        run(
            &target,
            "two",
            RULES,
            devices,
            start,
            warmup_min,
            measured_min
        ),
    );
    local.stop().await;
    let (base, rules) = (base?, rules?);
    let report = render(&base, &rules, devices, warmup_min, measured_min, &command);
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("RULES.md");
    std::fs::write(&path, &report)?;
    print!("{report}");
    eprintln!("rule_cost: wrote {}", path.display());
    Ok(())
}
