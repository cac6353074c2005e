//! What the series route costs a reader (`GET /devices/{id}/series`, docs/design.md §6):
//! read request units and the handler's time for a day of a 1 Hz packed device at 1-minute
//! buckets, and 30 days of it at 1-hour buckets, against reading the same raw readings
//! through `GET /devices/{id}/readings` (pages of 1,000). Writes `bench/SERIES.md`.
//!
//! The items are real: a 1 Hz device (packed:60, 60 s ingest windows) runs through ingest and
//! both aggregator roles on DynamoDB Local in simulated time over a steady hour, leaving a
//! closed hour's slot parts and its hourly rollup; both are copied to every hour of 30 days
//! (keys moved, sizes kept), and the hour summed 24 times into each day's rollup. Reads go
//! through the API handler behind the metering proxy. Each figure is the median of three
//! runs of the whole read (all its pages); times are this machine's, in a release build,
//! against DynamoDB Local (a deployed function adds the network, not the work).
//!
//! Percentiles: the source device has `percentiles: true`, so its hour keeps quantile
//! sketches. The 30 days are stored twice, in a table whose rollups have their sketches
//! removed (a device without the flag: percentiles come from the readings, exact) and in one
//! that keeps them (percentiles come from the sketches); the second's p50/p95/p99 of every
//! hour are compared with the first's exact ones.
//!
//! What sketches cost the writer: the standard fleet (packed:300, 300 s windows) and the
//! 1 Hz fleet (packed:60, 60 s windows) run through the whole pipeline over a steady hour,
//! as `bench/PACKING.md` runs them, once with `percentiles` off and once on: write request
//! units per stored reading, all in, and the size of their closed hourly rollup items.
//!
//!   cargo run --release -p tidemark-bench --example series_reads

use std::time::Instant;

use tidemark_api::{ApiConfig, App};
use tidemark_bench::BenchError;
use tidemark_bench::local_ddb::LocalDynamo;
use tidemark_bench::meter::Meter;
use tidemark_bench::run::{self, Design, DesignRun, Target, simulated_start};
use tidemark_bench::scenario::{Scenario, TEMPLATE_AGGREGATOR_BATCH};
use tidemark_schema::{
    AggregateItem, EntityKey, Layout, LayoutHistory, LayoutHistoryItem, Period, SlotLen, Timestamp,
    keys,
};
use tidemark_store::{ClientSettings, Item};

const HOUR_MS: i64 = 3_600_000;
const PERCENTILES: [&str; 3] = ["p50", "p95", "p99"];
const DAY_MS: i64 = 24 * HOUR_MS;
const DAYS: i64 = 30;

fn s(item: &Item, name: &str) -> String {
    match item.get(name) {
        Some(aws_sdk_dynamodb::types::AttributeValue::S(v)) => v.clone(),
        _ => String::new(),
    }
}

/// `table` holding 30 days of `hour` (its slot `parts` and its rollup, copied to every hour)
/// and each day's rollup summed from its hours, ending at `begin + DAYS`; `sketched`: the
/// rollups keep their quantile sketches. The items stored.
async fn fill(
    direct: &aws_sdk_dynamodb::Client,
    table: &str,
    hour: &AggregateItem,
    parts: &[(Timestamp, u16, Item)],
    begin: Timestamp,
    slot: Layout,
    sketched: bool,
) -> Result<(usize, usize), BenchError> {
    let device = match EntityKey::parse(&hour.pk, &hour.sk) {
        Ok(EntityKey::Aggregate { device, bucket }) => (device, bucket.start()),
        _ => return Err(BenchError::Other("an hourly key".into())),
    };
    let (device, hour_start) = device;
    let mut hour = hour.clone();
    if !sketched {
        hour.metrics.values_mut().for_each(|s| s.sketch = None);
    }
    tidemark_store::create_table(direct, table, &tidemark_schema::TABLE).await?;
    let history = LayoutHistory::default()
        .with_layout(begin.minus_millis(HOUR_MS).unwrap_or(begin), slot)
        .map_err(|e| BenchError::Other(e.to_string()))?;
    let mut out: Vec<Item> = vec![tidemark_store::to_item(
        &LayoutHistoryItem::default_layout(history),
    )?];
    let far = Timestamp::now().ttl_after_days(3650);
    let mut day_hours = Vec::new();
    let mut day_bytes = 0;
    for h in 0..DAYS * 24 {
        let at = begin.plus_millis(h * HOUR_MS).unwrap_or(begin);
        for (start, part, item) in parts {
            let offset = start.epoch_micros() - hour_start.epoch_micros();
            let moved = at.plus_micros(offset).unwrap_or(at);
            let mut i = item.clone();
            i.insert(
                "sk".into(),
                aws_sdk_dynamodb::types::AttributeValue::S(keys::slot_sk(moved, *part)),
            );
            i.insert(
                "ttl".into(),
                aws_sdk_dynamodb::types::AttributeValue::N(far.to_string()),
            );
            out.push(i);
        }
        let mut a = hour.clone();
        a.sk = keys::aggregate_sk(Period::Hourly.bucket(at));
        day_hours.push(a.clone());
        out.push(tidemark_store::to_item(&a)?);
        if day_hours.len() == 24 {
            let key = AggregateItem::key_for(&device, Period::Daily.bucket(at));
            let mut day = AggregateItem::day_of_hours(
                &AggregateItem::empty(&key),
                std::mem::take(&mut day_hours),
            );
            day.folded = (0..24).map(|h| (format!("{h:02}"), 2)).collect();
            let item = tidemark_store::to_item(&day)?;
            day_bytes = tidemark_store::limits::item_size(&item);
            out.push(item);
        }
    }
    let stored = out.len();
    tidemark_testkit::put_items(direct, table, out).await;
    Ok((stored, day_bytes))
}

/// One fleet through the whole pipeline with `percentiles` off or on, on a DynamoDB Local of
/// its own: the run, and the mean size of its closed hourly rollup items (bytes).
async fn write_cost(
    sc: &Scenario,
    first: Timestamp,
    percentiles: bool,
) -> Result<(DesignRun, f64), BenchError> {
    let sc = Scenario {
        percentiles,
        ..sc.clone()
    };
    let local = LocalDynamo::start().await?;
    let target = Target {
        dynamodb: local.addr,
    };
    let table = "sketches";
    let readings = sc.readings(first);
    let r = run::run(&target, &sc, Design::Tidemark, table, &readings, first).await;
    let items = tidemark_testkit::scan_table(&target.client().await, table).await;
    local.stop().await;
    let r = r?;
    let sizes: Vec<usize> = items
        .iter()
        .filter(|i| s(i, "sk").starts_with(keys::AGG_PREFIX) && s(i, "sk").contains("hourly"))
        .filter(|i| tidemark_store::from_item::<AggregateItem>((*i).clone()).is_ok_and(|a| !a.open))
        .map(tidemark_store::limits::item_size)
        .collect();
    let mean = sizes.iter().sum::<usize>() as f64 / sizes.len().max(1) as f64;
    eprintln!(
        "series_reads: {} percentiles {}: {:.4} WRU/reading ({:.4} ingest, {:.4} aggregator), hourly items {mean:.0} bytes ({} closed)",
        sc.name,
        if percentiles { "on" } else { "off" },
        r.wru_per_reading(),
        r.ingest_wru_per_reading(),
        r.aggregator_wru_per_reading(),
        sizes.len()
    );
    Ok((r, mean))
}

/// The largest relative difference between the percentiles of `approx` and `exact` rows
/// (the same buckets, in the same order), and the cells compared.
fn worst_error(approx: &[serde_json::Value], exact: &[serde_json::Value]) -> (f64, usize) {
    let mut worst = 0.0f64;
    let mut cells = 0;
    for (a, e) in approx.iter().zip(exact) {
        for p in PERCENTILES {
            if let (Some(a), Some(e)) = (a[p].as_f64(), e[p].as_f64()) {
                cells += 1;
                if e != 0.0 {
                    worst = worst.max((a - e).abs() / e.abs());
                }
            }
        }
    }
    (worst, cells)
}

/// Read units, the handler's time (ms) and the items returned of every page of `uri`; the
/// median of three.
async fn measure(app: &App, meter: &Meter, uri: &str) -> Result<(f64, f64, u64), BenchError> {
    let mut runs = Vec::new();
    for _ in 0..3 {
        meter.take().await;
        let t = Instant::now();
        let (items, _) = tidemark_bench::api::read_pages(app, uri).await?;
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        runs.push((meter.take().await.reads().0.total, ms, items));
    }
    runs.sort_by(|a, b| a.1.total_cmp(&b.1));
    Ok(runs[1])
}

#[tokio::main]
async fn main() -> Result<(), BenchError> {
    let local = LocalDynamo::start().await?;
    let target = Target {
        dynamodb: local.addr,
    };
    let direct = target.client().await;

    // A real 1 Hz device, packed:60 with 60 s windows, over a steady hour in simulated time.
    let first = simulated_start(Timestamp::now())
        .plus_millis(45 * 60_000)
        .unwrap_or(Timestamp::now());
    let slot = Layout::packed(SlotLen::new(60).expect("60 divides an hour"));
    let sc = Scenario {
        percentiles: true,
        ..Scenario::one_hz(1, 104, TEMPLATE_AGGREGATOR_BATCH)
            .packed(slot, 60, 10_000)
            .over_a_steady_hour(first)
    };
    let readings = sc.readings(first);
    run::run(&target, &sc, Design::Tidemark, "source", &readings, first).await?;
    let device = sc.device_id(0);
    let items = tidemark_testkit::scan_table(&direct, "source").await;
    // The fullest closed hour: its rollup and its slot parts.
    let hour: AggregateItem = items
        .iter()
        .filter(|i| s(i, "sk").starts_with(keys::AGG_PREFIX) && s(i, "sk").contains("hourly"))
        .filter_map(|i| tidemark_store::from_item::<AggregateItem>(i.clone()).ok())
        .filter(|a| !a.open)
        .max_by_key(|a| a.metrics.values().map(|s| s.count).sum::<u64>())
        .ok_or_else(|| BenchError::Other("the run closed no hour".into()))?;
    let Ok(EntityKey::Aggregate { bucket, .. }) = EntityKey::parse(&hour.pk, &hour.sk) else {
        return Err(BenchError::Other("an hourly key".into()));
    };
    let hour_start = bucket.start();
    let parts: Vec<(Timestamp, u16, Item)> = items
        .iter()
        .filter_map(|i| match EntityKey::parse(&s(i, "pk"), &s(i, "sk")) {
            Ok(EntityKey::Slot { start, part, .. }) if start.hour_start() == hour_start => {
                Some((start, part, i.clone()))
            }
            _ => None,
        })
        .collect();
    let per_hour = hour.metrics.values().map(|s| s.count).max().unwrap_or(0);
    let mut bare = hour.clone();
    bare.metrics.values_mut().for_each(|s| s.sketch = None);
    let hour_bytes = [&bare, &hour]
        .map(|h| tidemark_store::to_item(h).map_or(0, |i| tidemark_store::limits::item_size(&i)));

    // 30 days of that hour, ending at today's start: without sketches and with them.
    let end = Timestamp::now().day().start();
    let begin = end.minus_millis(DAYS * DAY_MS).unwrap_or(end);
    let (stored, day_plain) = fill(&direct, "series", &hour, &parts, begin, slot, false).await?;
    // Each table on a DynamoDB Local of its own: its stream records slow every later write.
    let local_p = LocalDynamo::start().await?;
    let target_p = Target {
        dynamodb: local_p.addr,
    };
    let direct_p = target_p.client().await;
    let (_, day_sketched) = fill(&direct_p, "series-p", &hour, &parts, begin, slot, true).await?;

    let meter = Meter::start(target.dynamodb).await?;
    let client = tidemark_store::dynamodb_client(&ClientSettings::local(meter.endpoint())).await;
    let app = App::new(client.clone(), ApiConfig::new("series").with_now(end));
    tidemark_bench::api::register(&app, &device).await?;
    let meter_p = Meter::start(target_p.dynamodb).await?;
    let client_p =
        tidemark_store::dynamodb_client(&ClientSettings::local(meter_p.endpoint())).await;
    let app_p = App::new(client_p, ApiConfig::new("series-p").with_now(end));
    tidemark_bench::api::register_as(&app_p, &device, r#"{"name":"bench","percentiles":true}"#)
        .await?;
    let last_day = end.minus_millis(DAY_MS).unwrap_or(end);
    let series = |from: Timestamp, res: &str, extra: &str| {
        format!(
            "/devices/{device}/series?from={from}&to={end}&resolution={res}&aggregates=avg,min,max,count{extra}&limit=1000"
        )
    };
    let raw = |from: Timestamp| {
        let to = end.pred().unwrap_or(end);
        format!("/devices/{device}/readings?from={from}&to={to}&limit=1000")
    };
    let cases = [
        (
            "a day at 1m (from readings)",
            series(last_day, "1m", ""),
            raw(last_day),
            1.0,
        ),
        (
            "a day at 1m with stddev and p95 (from readings)",
            series(last_day, "1m", ",stddev,p95"),
            raw(last_day),
            1.0,
        ),
        (
            "30 days at 1h (from the rollups)",
            series(begin, "1h", ",stddev,first,last"),
            raw(last_day),
            DAYS as f64,
        ),
        (
            "30 days at 1d (from the rollups)",
            series(begin, "1d", ",stddev"),
            raw(last_day),
            DAYS as f64,
        ),
    ];
    let mut rows = Vec::new();
    for (label, uri, raw_uri, scale) in cases {
        let (rru, ms, n) = measure(&app, &meter, &uri).await?;
        let (raw_rru, raw_ms, raw_n) = measure(&app, &meter, &raw_uri).await?;
        eprintln!(
            "series_reads: {label}: {rru:.1} RRU {ms:.0} ms ({n} rows); raw {:.1} RRU {:.0} ms ({} readings)",
            raw_rru * scale,
            raw_ms * scale,
            raw_n as f64 * scale
        );
        rows.push((
            label,
            rru,
            ms,
            n,
            raw_rru * scale,
            raw_ms * scale,
            raw_n as f64 * scale,
            scale > 1.0,
        ));
    }
    // Percentiles of 30 days at 1h and 1d: from the readings on the device without sketches,
    // from the rollups' sketches on the one with them, the latter checked against the former.
    let pcts = format!(",{}", PERCENTILES.join(","));
    let mut prows = Vec::new();
    for (label, app, meter, res) in [
        (
            "30 days at 1h, p50/p95/p99, percentiles off (from readings)",
            &app,
            &meter,
            "1h",
        ),
        (
            "30 days at 1h, p50/p95/p99, percentiles on (from the sketches)",
            &app_p,
            &meter_p,
            "1h",
        ),
        (
            "30 days at 1d, p50/p95/p99, percentiles on (from the sketches)",
            &app_p,
            &meter_p,
            "1d",
        ),
    ] {
        let (rru, ms, n) = measure(app, meter, &series(begin, res, &pcts)).await?;
        eprintln!("series_reads: {label}: {rru:.1} RRU {ms:.0} ms ({n} rows)");
        prows.push((label, rru, ms, n));
    }
    let (approx, _) = tidemark_bench::api::read_rows(&app_p, &series(begin, "1h", &pcts)).await?;
    let (exact, _) = tidemark_bench::api::read_rows(&app, &series(begin, "1h", &pcts)).await?;
    let (worst, cells) = worst_error(&approx, &exact);
    eprintln!(
        "series_reads: sketch percentiles vs exact: worst {:.3} % over {cells} cells",
        worst * 100.0
    );

    local.stop().await;
    local_p.stop().await;

    // What sketches cost the writer, all in: two fleets with percentiles off and on.
    let agg = TEMPLATE_AGGREGATOR_BATCH;
    let mut costs = Vec::new();
    for (fleet, slot_s) in [
        (Scenario::standard(200, 104, agg), 300),
        (Scenario::one_hz(3, 104, agg), 60),
    ] {
        let layout = Layout::packed(SlotLen::new(slot_s).expect("divides an hour"));
        let sc = fleet
            .over_a_steady_hour(first)
            .packed(layout, slot_s, 10_000);
        let off = write_cost(&sc, first, false).await?;
        let on = write_cost(&sc, first, true).await?;
        costs.push((sc.name, slot_s, off, on));
    }

    let mut md = format!(
        "# Series reads: buckets against raw readings\n\n\
         Produced by `cargo run --release -p tidemark-bench --example series_reads` (part of \
         `make bench`); how it measures is in the example's doc comment. One 1 Hz device \
         stored packed:60 ({per_hour} readings an hour, 4 metrics; {stored} items for {DAYS} \
         days), read through the API handler on DynamoDB Local: read request units (eventually \
         consistent queries, as billed) and the handler's time for the whole answer (every \
         page), median of three runs.\n\n\
         | query | series: RRU | series: ms | rows | raw readings: RRU | raw: ms | readings |\n\
         |---|---|---|---|---|---|---|\n"
    );
    for (label, rru, ms, n, raw_rru, raw_ms, raw_n, scaled) in &rows {
        let mark = if *scaled { " *scaled from 1 day*" } else { "" };
        md.push_str(&format!(
            "| {label} | {rru:.1} | {ms:.0} | {n} | {raw_rru:.1}{mark} | {raw_ms:.0}{mark} | {raw_n:.0} |\n"
        ));
    }
    md.push_str(
        "\nBuckets finer than an hour read the same slot parts the raw read does, so they cost \
         about what it costs and return a sixtieth of the rows; hours and days read one small \
         item per bucket. The rows above are paged 1,000 at a time.\n\n\
         ## Percentiles\n\n\
         | query | RRU | ms | rows |\n|---|---|---|---|\n",
    );
    for (label, rru, ms, n) in &prows {
        md.push_str(&format!("| {label} | {rru:.1} | {ms:.0} | {n} |\n"));
    }
    md.push_str(&format!(
        "\nAccuracy: over the {cells} hourly p50/p95/p99 cells of the 30 days, the sketches' \
         answer is at most {:.3} % from the exact quantile (the sketch's bound: {:.0} %).\n\n\
         ## What sketches cost the writer\n\n\
         Both fleets as `bench/PACKING.md` runs them (steady hour, windows starting at the \
         first record), percentiles off and on. Items are billed per started KB, so a sketch \
         costs nothing while the hourly item stays under 1,024 bytes.\n\n\
         | fleet | WRU/reading, off | WRU/reading, on | closed hourly item, off | on |\n\
         |---|---|---|---|---|\n",
        worst * 100.0,
        tidemark_schema::sketch::RELATIVE_ACCURACY * 100.0
    ));
    for (name, slot_s, (off, off_bytes), (on, on_bytes)) in &costs {
        md.push_str(&format!(
            "| {name}, packed:{slot_s} | {:.4} | {:.4} | {off_bytes:.0} B | {on_bytes:.0} B |\n",
            off.wru_per_reading(),
            on.wru_per_reading()
        ));
    }
    md.push_str(&format!(
        "\nThe 1 Hz device of the read table: its closed hourly item is {} B without sketches \
         and {} B with them (3,600 readings of 4 metrics), its daily item {day_plain} B and \
         {day_sketched} B. Target (issue: analytics on read): a sketch must not double the \
         rollups' writes; measured above against the same runs without it.\n",
        hour_bytes[0], hour_bytes[1]
    ));
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("SERIES.md"), md)?;
    eprintln!("series_reads: wrote bench/SERIES.md");
    Ok(())
}
