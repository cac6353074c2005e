//! The packed-readings measurements: what packed readings cost against single items and the textbook
//! design, for the 1 Hz fleet, the standard fleet and the 2 kHz device, at ingest batching
//! windows of 1, 10, 60 and 300 s. Writes `bench/PACKING.md` and `bench/packing.json`.
//!
//! - Writes: every run pushes the same readings through the whole pipeline (ingest →
//!   the table's stream → both aggregator roles, as `make bench` does), each on a freshly
//!   started DynamoDB Local, behind the metering proxy; write request units per stored
//!   reading, all in (ingest + aggregator + GSI), after a warm-up window.
//! - Storage: the reading and slot items left, by DynamoDB's item-size rules.
//! - Reads: one device's readings over a measured span, written by ingest in the layout, then
//!   read back through the API handler (`GET /devices/{id}/readings`, pages of 1,000, cursor
//!   to the end) behind the metering proxy; read request units of a one-hour and a seven-day
//!   read, scaled linearly from the measured span where it is shorter (a range read is billed
//!   by the bytes it reads, so its cost is linear in the span).
//!
//!   cargo run --release -p tidemark-bench --example packing [-- --quick] [--only 1hz] [--window 60] [--skip-reads | --reads-only | --render]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tidemark_api::{ApiConfig, App};
use tidemark_bench::BenchError;
use tidemark_bench::local_ddb::LocalDynamo;
use tidemark_bench::meter::Meter;
use tidemark_bench::run::{self, Design, DesignRun, Target, simulated_start};
use tidemark_bench::scenario::{Scenario, TEMPLATE_AGGREGATOR_BATCH, kinesis_event};
use tidemark_ingest::{Ingest, IngestConfig};
use tidemark_schema::{Layout, LayoutHistory, LayoutHistoryItem, SlotLen, Timestamp};
use tidemark_store::ClientSettings;

const WINDOWS_S: [i64; 4] = [1, 10, 60, 300];

/// The write-cost targets: (fleet, layout, ingest window s, what, goal WRU/reading, the same
/// figure measured before, as the report prints it).
const TARGETS: [(&str, &str, f64, &str, f64, &str); 5] = [
    (
        "standard",
        "packed:300",
        300.0,
        "standard fleet, packed:300, 300 s windows",
        0.25,
        "0.4333 (ingest 0.4000 + aggregator 0.0333), long run 0.4354; 0.5000 at d3003b6; 0.8727 at 8bd3903",
    ),
    (
        "standard",
        "packed:3600",
        300.0,
        "standard fleet, packed:3600 (hour slots), 300 s windows",
        0.25,
        "0.2500 (ingest 0.2167 + aggregator 0.0333), long run 0.2521; 0.3167 at d3003b6",
    ),
    (
        "1hz",
        "packed:60",
        60.0,
        "1 Hz fleet, packed:60, 60 s ingest window",
        0.035,
        "0.0339 (ingest 0.0333 + aggregator 0.0006); 0.0350 at d3003b6; 0.0756 at 8bd3903",
    ),
    (
        "hot",
        "packed:1",
        1.0,
        "2 kHz device, packed:1, no worse than before",
        0.0267,
        "0.0081 (ingest 0.0077 + aggregator 0.0003); 0.0267 with aligned windows at 4fa0114",
    ),
    (
        "standard",
        "single",
        300.0,
        "standard fleet, single items, no worse than before",
        1.4727,
        "1.0333 (ingest 1.0000 + aggregator 0.0333), long run 1.0354; 1.1000 at d3003b6; 1.4727 at 8bd3903",
    ),
];
/// Kinesis' largest batch: with packing, a batch should span its whole window.
const PACKED_BATCH: usize = 10_000;
const HOUR_MS: i64 = 3_600_000;
const WEEK_MS: i64 = 7 * 24 * HOUR_MS;

#[derive(Debug, Serialize, Deserialize)]
struct ReadCost {
    scenario: String,
    layout: String,
    /// The span actually written and read.
    measured_ms: i64,
    readings: u64,
    pages: u64,
    rru: f64,
    rru_hour: f64,
    rru_week: f64,
    /// The spans actually read for the hour and the week figures (shorter: scaled).
    #[serde(default)]
    hour_from_ms: i64,
    #[serde(default)]
    week_from_ms: i64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Report {
    runs: Vec<DesignRun>,
    reads: Vec<ReadCost>,
    notes: Vec<String>,
}

/// The slot length a fleet is packed in at an ingest window: the window itself, so each slot
/// is written about once (a longer slot is rewritten, whole, by every batch while it fills);
/// the 2 kHz device keeps 1 s slots, so no write carries more than a second of its readings.
fn slot_for(scenario: &Scenario, window_s: i64) -> SlotLen {
    let secs = if scenario.name == "hot" { 1 } else { window_s };
    SlotLen::new(secs).expect("1, 60 and 300 divide an hour")
}

async fn fresh() -> Result<(LocalDynamo, Target), BenchError> {
    let d = LocalDynamo::start().await?;
    let t = Target { dynamodb: d.addr };
    Ok((d, t))
}

async fn write_run(
    scenario: &Scenario,
    design: Design,
    start: Timestamp,
) -> Result<DesignRun, BenchError> {
    let (local, target) = fresh().await?;
    let readings = scenario.readings(start);
    let r = run::run(&target, scenario, design, "packing", &readings, start).await;
    local.stop().await;
    let r = r?;
    eprintln!(
        "packing: {} {:?} {} window {} s: {:.4} WRU/reading ({:.4} ingest, {:.4} aggregator), {:.1} bytes/reading, {:.1} s",
        r.scenario,
        r.design,
        r.layout,
        r.ingest_window_s,
        r.wru_per_reading(),
        r.ingest_wru_per_reading(),
        r.aggregator_wru_per_reading(),
        r.storage.bytes as f64 / r.readings_stored.max(1) as f64,
        r.seconds
    );
    Ok(r)
}

/// Writes one device of `scenario` for `span_ms` in `layout` (through ingest), then reads the
/// whole span back through the API and meters what the reads cost.
async fn read_cost(
    scenario: &Scenario,
    layout: Layout,
    span_ms: i64,
    now: Timestamp,
) -> Result<ReadCost, BenchError> {
    let (local, target) = fresh().await?;
    let table = "reads";
    let direct = target.client().await;
    tidemark_store::create_table(&direct, table, &tidemark_schema::TABLE).await?;
    let start = now
        .minus_millis(span_ms + 2 * HOUR_MS)
        .unwrap_or(Timestamp::MIN)
        .hour_start();
    let history = LayoutHistory::default()
        .with_layout(start.minus_millis(HOUR_MS).unwrap_or(start), layout)
        .map_err(|e| BenchError::Setup(e.to_string()))?;
    run::put_config(&direct, table, &LayoutHistoryItem::default_layout(history)).await?;
    let one = Scenario {
        devices: 1,
        span_ms,
        ..scenario.clone()
    };
    let readings = one.readings(start);
    let ingest = Ingest::new(direct.clone(), IngestConfig::new(table));
    let window_ms = 60_000;
    let mut seq = 1u64;
    for w in readings.chunk_by(|a, b| {
        (a.at.epoch_millis() - start.epoch_millis()) / window_ms
            == (b.at.epoch_millis() - start.epoch_millis()) / window_ms
    }) {
        for chunk in w.chunks(PACKED_BATCH) {
            let event = kinesis_event(&one, chunk, seq)?;
            seq += chunk.len() as u64;
            let (resp, _) = ingest
                .process(&event, Instant::now() + Duration::from_secs(120))
                .await
                .map_err(|e| BenchError::Function(e.to_string()))?;
            if !resp.batch_item_failures.is_empty() {
                return Err(BenchError::Function("ingest failed a batch".into()));
            }
        }
    }
    let meter = Meter::start(target.dynamodb).await?;
    let client = tidemark_store::dynamodb_client(&ClientSettings::local(meter.endpoint())).await;
    let app = App::new(client, ApiConfig::new(table));
    let id = one.device_id(0);
    // The readings routes answer for registered devices (the aggregator would register it).
    tidemark_bench::api::register(&app, &id).await?;
    meter.take().await;
    // The span's last instant: a 2 kHz device's last reading is 500 µs before its end.
    let to = start.plus_micros(span_ms * 1000 - 1).unwrap_or(start);
    let (got, pages) = tidemark_bench::api::read_pages(
        &app,
        &format!("/devices/{id}/readings?from={start}&to={to}&limit=1000"),
    )
    .await?;
    let rru = meter.take().await.reads().0.total;
    local.stop().await;
    let stored = readings.len() as u64;
    if got != stored {
        return Err(BenchError::Other(format!(
            "{} {}: read {got} readings of {stored}",
            scenario.name,
            layout_label(layout)
        )));
    }
    let scale = |target: i64| rru * target as f64 / span_ms as f64;
    let c = ReadCost {
        scenario: scenario.name.to_owned(),
        layout: layout_label(layout),
        measured_ms: span_ms,
        readings: got,
        pages,
        rru,
        rru_hour: if span_ms == HOUR_MS {
            rru
        } else {
            scale(HOUR_MS)
        },
        rru_week: if span_ms == WEEK_MS {
            rru
        } else {
            scale(WEEK_MS)
        },
        hour_from_ms: span_ms,
        week_from_ms: span_ms,
    };
    eprintln!(
        "packing: reads {} {}: {} readings over {} s in {} pages, {:.1} RRU",
        c.scenario,
        c.layout,
        got,
        span_ms / 1000,
        pages,
        rru
    );
    Ok(c)
}

fn layout_label(l: Layout) -> String {
    match l.slot {
        Some(s) => format!("packed:{}", s.seconds()),
        None => "single".into(),
    }
}

/// Writes each device costs once a day, outside the steady hour measured: its day's
/// placeholder and close, and the device item's rewrite for `lastSeenAt` alone
/// (`DeviceRefreshSeconds`, a day).
const DAILY_WRITES: f64 = 3.0;

/// `r`'s write units per reading in a long run: what it measured plus [`DAILY_WRITES`] over
/// a device's readings of a day (arithmetic, not measured).
fn long_run(r: &DesignRun) -> f64 {
    let interval_us = match r.scenario.as_str() {
        "1hz" => Scenario::one_hz(1, 1, 1).interval_us,
        "standard" => Scenario::standard(1, 1, 1).interval_us,
        _ => Scenario::hot(1, 1).interval_us,
    };
    r.wru_per_reading() + DAILY_WRITES * interval_us as f64 / 86_400e6
}

fn markdown(rep: &Report) -> String {
    let mut md = String::from(
        "# Packed readings: write, read and storage cost\n\n\
         Produced by `cargo run --release -p tidemark-bench --example packing` (part of `make \
         bench`). How it measures is in the example's doc comment; every figure below is \
         measured in this run unless marked *scaled*.\n\n",
    );
    md.push_str(
        "## Targets\n\nAll in: ingest + rollups + alerts role + device item + GSI, billed write \
         units per stored reading, with batching windows that open at the first record \
         (docs/decisions/0003-write-cost-floors.md), over a steady hour of the 1 Hz and standard \
         fleets (each device's hour written as in a long run) and after the first window of the \
         2 kHz device; *long run* adds what a device costs once a day outside that hour (its \
         day's placeholder and close, and the device item's daily rewrite for `lastSeenAt`: \
         3 writes over its readings of a day, arithmetic), and the verdict is on it. *Before* is the code before a slot's part carried the next slot's readings \
         (commit df08edc), then where given before the device item stopped being rewritten \
         every 15 minutes for `lastSeenAt` alone (commit d3003b6) and before packed values took \
         the decimal mode (commit 8bd3903).\n\n\
         | target | goal | before | measured | long run | verdict |\n|---|---|---|---|---|---|\n",
    );
    let find = |scenario: &str, layout: &str, window: f64| {
        rep.runs.iter().find(|r| {
            r.scenario == scenario
                && r.design == Design::Tidemark
                && r.layout == layout
                && (r.ingest_window_s - window).abs() < 1e-9
        })
    };
    let verdict = |ok: bool| if ok { "met" } else { "**missed**" };
    let split = |r: &DesignRun| {
        format!(
            "{:.4} (ingest {:.4} + aggregator {:.4}; {})",
            r.wru_per_reading(),
            r.ingest_wru_per_reading(),
            r.aggregator_wru_per_reading(),
            r.layout
        )
    };
    for (scenario, layout, window, label, goal, before) in TARGETS {
        if let Some(r) = find(scenario, layout, window) {
            md.push_str(&format!(
                "| {label} | ≤ {goal} | {before} | {} | {:.4} | {} |\n",
                split(r),
                long_run(r),
                verdict(long_run(r) <= goal)
            ));
        }
    }
    if let Some(r) = find("hot", "packed:1", 1.0) {
        md.push_str(&format!(
            "| 2 kHz device stored whole, packed, no write partitioning | all readings, 1 key | – | {} of {} stored in {} slot items on one key | – | {} |\n",
            r.readings_stored,
            r.readings_sent,
            r.storage.items,
            verdict(r.readings_stored == r.readings_sent)
        ));
    }
    let cpu = tidemark_bench::artifacts::criterion_results("ingest");
    match cpu.iter().find(|f| f.id.contains("decode_validate_pack")) {
        Some(f) => md.push_str(&format!(
            "| ingest CPU per packed reading (decode, validate, merge into its slot, encode) | ≤ 3 µs | – | {:.2} µs (criterion `{}`) | – | {} |\n",
            f.ns_per_reading / 1000.0,
            f.id,
            verdict(f.ns_per_reading <= 3000.0)
        )),
        None => md.push_str(
            "| ingest CPU per packed reading | ≤ 3 µs | – | not measured: run `cargo bench -p tidemark-ingest --bench decode` first (`make bench` does) | – | – |\n",
        ),
    }
    if let Some(r) = find("standard", "packed:300", 300.0) {
        md.push_str(&format!(
            "\nWhat the standard fleet pays (docs/decisions/0003-write-cost-floors.md has the \
             arithmetic): a 300 s window that opens at its first record holds the end of one \
             slot and the start of the next, and the first slot's part carries the second's \
             readings, so ingest writes each device about once per window: {:.4} per reading \
             for its 5 readings in `packed:300` ({} in `packed:3600`; two writes a window, 0.40, \
             before parts carried). The rollups role writes each device's hour twice (its \
             placeholder, and its rollup once it closes: 2/60 = 0.033 per reading) and its day \
             twice a day (0.0014); the alerts role writes the device item once a day for \
             `lastSeenAt` alone (`DeviceRefreshSeconds` 86400: 0.0007): {:.4} over the steady \
             hour, {:.4} in a long run.\n",
            r.ingest_wru_per_reading(),
            find("standard", "packed:3600", 300.0).map_or("about 0.20".to_owned(), |h| format!(
                "{:.4}",
                h.ingest_wru_per_reading()
            )),
            r.aggregator_wru_per_reading(),
            long_run(r) - r.ingest_wru_per_reading(),
        ));
    }
    md.push_str(
        "\n## Writes and storage\n\nWRU per stored reading, all in (ingest + aggregator, GSI \
         included), measured after the warm-up window; bytes per reading are the reading and \
         slot items left (all windows).\n\n\
         | scenario | design | layout | ingest window | readings | ingest WRU/r | aggregator WRU/r | **total WRU/r** | GSI WRU/r | billed WRU/r | items stored | bytes/reading |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in &rep.runs {
        md.push_str(&format!(
            "| {} | {:?} | {} | {} s | {} | {:.4} | {:.4} | **{:.4}** | {:.4} | {:.4} | {} | {:.1} |\n",
            r.scenario,
            r.design,
            r.layout,
            r.ingest_window_s,
            r.readings_stored,
            r.ingest_wru_per_reading(),
            r.aggregator_wru_per_reading(),
            r.wru_per_reading(),
            r.gsi_wru_per_reading(),
            r.billed_wru_per_reading(),
            r.storage.items,
            r.storage.bytes as f64
                / (r.readings_stored + r.warmup.as_ref().map_or(0, |w| w.readings_stored)).max(1)
                    as f64
        ));
    }
    md.push_str(
        "\n## Range reads\n\nRead request units of `GET /devices/{id}/readings` over the whole \
         span, pages of 1,000 (eventually consistent queries). The textbook design stores \
         readings as single items too: its reads cost what `single` costs.\n\n\
         | scenario | layout | readings / pages / RRU of the first read | RRU, 1 h | RRU, 7 d |\n\
         |---|---|---|---|---|\n",
    );
    for c in &rep.reads {
        let figure = |rru: f64, read_ms: i64, want_ms: i64| {
            if read_ms == want_ms {
                format!("{rru:.1}")
            } else {
                format!("{rru:.1} *scaled from {} s*", read_ms / 1000)
            }
        };
        md.push_str(&format!(
            "| {} | {} | {} / {} / {:.1} over {} s | {} | {} |\n",
            c.scenario,
            c.layout,
            c.readings,
            c.pages,
            c.rru,
            c.measured_ms / 1000,
            figure(c.rru_hour, c.hour_from_ms, HOUR_MS),
            figure(c.rru_week, c.week_from_ms, WEEK_MS),
        ));
    }
    if !rep.notes.is_empty() {
        md.push_str("\n## Notes\n\n");
        for n in &rep.notes {
            md.push_str(&format!("- {n}\n"));
        }
    }
    md
}

fn save(rep: &Report) -> Result<(), BenchError> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("packing.json"), serde_json::to_vec_pretty(rep)?)?;
    std::fs::write(dir.join("PACKING.md"), markdown(rep))?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BenchError> {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    // `--only 1hz|standard|hot`: one fleet (while iterating; the report then has only it).
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .cloned();
    // `--window 1|10|60|300`: one ingest window (while iterating, as `--only`).
    let window: Option<i64> = args
        .iter()
        .position(|a| a == "--window")
        .and_then(|i| args.get(i + 1))
        .and_then(|w| w.parse().ok());
    let now = Timestamp::now();
    let start = simulated_start(now);
    let agg = TEMPLATE_AGGREGATOR_BATCH;
    // About 12,000 readings each (half with --quick): costs per reading do not depend on the
    // fleet's size, only on each device's rate and the windows.
    let k = if quick { 2 } else { 1 };
    // The 1 Hz and standard fleets are measured over a steady hour (each device's hour
    // written as in a long run: its placeholder and its close), starting 45 minutes into an
    // hour so that hour comes sooner; the 1 Hz fleet with 3 devices then still sends about
    // 19,000 readings. The textbook design keeps the short runs.
    let steady_start = start.plus_millis(45 * 60_000).unwrap_or(start);
    let fleets: Vec<Scenario> = [
        Scenario::one_hz(3, 104, agg),
        Scenario::standard(200 / k, 104, agg),
        Scenario::hot(6_000 / i64::from(k), agg),
    ]
    .into_iter()
    .filter(|s| only.as_deref().is_none_or(|o| o == s.name))
    .collect();
    let mut rep = Report {
        runs: Vec::new(),
        reads: Vec::new(),
        notes: vec![format!(
            "Fleets: {}. Single items and the textbook design write once per reading \
                 whatever the window; packed fleets use slots as long as the window (the 2 kHz \
                 device: 1 s slots). Batches hold at most {PACKED_BATCH} records, which the \
                 2 kHz device fills in 5 s: its windows of 10 s and more give the same batches. \
                 Its one key's write units per second: `make heat HEAT_ARGS=\"--slot 1 --window \
                 5\"`.",
            fleets
                .iter()
                .map(|s| match s.name {
                    "hot" => s.clone(),
                    _ => s.over_a_steady_hour(steady_start),
                })
                .map(|s| format!("{} ({})", s.name, s.description))
                .collect::<Vec<_>>()
                .join("; ")
        )],
    };
    // `--render`: write the report again from the last packing.json, measuring nothing.
    if args.iter().any(|a| a == "--render") {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench");
        let mut last: Report = serde_json::from_slice(&std::fs::read(dir.join("packing.json"))?)?;
        last.notes = rep.notes;
        return save(&last);
    }
    // `--reads-only`: keep the write runs of the last report, measure the reads again.
    let reads_only = args.iter().any(|a| a == "--reads-only");
    if reads_only {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench");
        let last: Report = serde_json::from_slice(&std::fs::read(dir.join("packing.json"))?)?;
        rep.runs = last.runs;
    }
    for sc in fleets.iter().filter(|_| !reads_only) {
        let mut base = match sc.name {
            "1hz" => Scenario::one_hz(10 / k, 20, agg),
            "standard" => Scenario::standard(200 / k, 60, agg),
            _ => sc.clone(),
        };
        let (sc, start) = match sc.name {
            "hot" => (sc.clone(), start),
            _ => (sc.over_a_steady_hour(steady_start), steady_start),
        };
        let sc = &sc;
        // The textbook design's per-item calls are slow: it gets the first 3,000 readings' worth.
        if base.devices > 1 {
            base.devices = (base.devices / 4).max(1);
        } else {
            base.span_ms /= 4;
        }
        rep.runs
            .push(write_run(&base, Design::Baseline, start).await?);
        save(&rep)?;
        for w in WINDOWS_S
            .into_iter()
            .filter(|w| window.is_none_or(|o| o == *w))
        {
            let single = sc.packed(Layout::SINGLE, w, PACKED_BATCH);
            let single = Scenario {
                hot_partitions: sc.hot_partitions,
                ..single
            };
            rep.runs
                .push(write_run(&single, Design::Tidemark, start).await?);
            let packed = sc.packed(Layout::packed(slot_for(sc, w)), w, PACKED_BATCH);
            rep.runs
                .push(write_run(&packed, Design::Tidemark, start).await?);
            if sc.name == "standard" && w == 300 {
                // Hour-long slots: a window touches one slot, now and then two, and an hour
                // of a reading a minute still fits one write unit
                // (docs/decisions/0003-write-cost-floors.md).
                let hour = SlotLen::new(3600).expect("an hour divides an hour");
                let packed = sc.packed(Layout::packed(hour), w, PACKED_BATCH);
                rep.runs
                    .push(write_run(&packed, Design::Tidemark, start).await?);
            }
            save(&rep)?;
        }
    }
    if args.iter().any(|a| a == "--skip-reads") {
        save(&rep)?;
        return Ok(());
    }
    // Reads: one device per fleet, single and packed in the slots of the window its target
    // is set at (1 Hz: 60 s, standard: 300 s; the 2 kHz device: 1 s).
    let spans: BTreeMap<&str, (i64, i64)> = BTreeMap::from([
        // (span for the 1 h figure, span for the 7 d figure)
        ("1hz", (HOUR_MS, 6 * HOUR_MS)),
        ("standard", (HOUR_MS, WEEK_MS)),
        ("hot", (6_000, 6_000)),
    ]);
    for sc in &fleets {
        let (hour, week) = spans[sc.name];
        let window = match sc.name {
            "standard" => 300,
            "hot" => 1,
            _ => 60,
        };
        for layout in [Layout::SINGLE, Layout::packed(slot_for(sc, window))] {
            let mut spans = vec![hour];
            if week != hour {
                spans.push(week);
            }
            let mut costs = Vec::new();
            for s in spans {
                costs.push(read_cost(sc, layout, s, now).await?);
            }
            // The hour figure from the hour run, the week figure from the longest one.
            let mut c = costs.remove(0);
            if let Some(w) = costs.pop() {
                c.rru_week = w.rru_week;
                c.week_from_ms = w.week_from_ms;
            }
            rep.reads.push(c);
            save(&rep)?;
        }
    }
    save(&rep)?;
    eprintln!("packing: wrote bench/PACKING.md");
    Ok(())
}
