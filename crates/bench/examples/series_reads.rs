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
//!   cargo run --release -p tidemark-bench --example series_reads

use std::time::Instant;

use tidemark_api::{ApiConfig, App};
use tidemark_bench::BenchError;
use tidemark_bench::local_ddb::LocalDynamo;
use tidemark_bench::meter::Meter;
use tidemark_bench::run::{self, Design, Target, simulated_start};
use tidemark_bench::scenario::{Scenario, TEMPLATE_AGGREGATOR_BATCH};
use tidemark_schema::{
    AggregateItem, EntityKey, Layout, LayoutHistory, Period, ShardConfigItem, SlotLen, Timestamp,
    keys,
};
use tidemark_store::{ClientSettings, Item};

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;
const DAYS: i64 = 30;

fn s(item: &Item, name: &str) -> String {
    match item.get(name) {
        Some(aws_sdk_dynamodb::types::AttributeValue::S(v)) => v.clone(),
        _ => String::new(),
    }
}

async fn put_all(client: &aws_sdk_dynamodb::Client, table: &str, items: Vec<Item>) {
    for chunk in items.chunks(25) {
        let mut requests: Vec<_> = chunk
            .iter()
            .map(|i| {
                aws_sdk_dynamodb::types::WriteRequest::builder()
                    .put_request(
                        aws_sdk_dynamodb::types::PutRequest::builder()
                            .set_item(Some(i.clone()))
                            .build()
                            .expect("an item"),
                    )
                    .build()
            })
            .collect();
        while !requests.is_empty() {
            let out = client
                .batch_write_item()
                .request_items(table, requests)
                .send()
                .await
                .expect("DynamoDB Local takes the items");
            requests = out
                .unprocessed_items
                .and_then(|mut u| u.remove(table))
                .unwrap_or_default();
        }
    }
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
    let sc = Scenario::one_hz(1, 104, TEMPLATE_AGGREGATOR_BATCH)
        .packed(slot, 60, 10_000)
        .over_a_steady_hour(first);
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

    // 30 days of that hour, in a table of their own, ending at today's start.
    let end = Timestamp::now().day().start();
    let begin = end.minus_millis(DAYS * DAY_MS).unwrap_or(end);
    tidemark_store::create_table(&direct, "series", &tidemark_schema::TABLE).await?;
    let history = LayoutHistory::default()
        .with_layout(begin.minus_millis(HOUR_MS).unwrap_or(begin), slot)
        .map_err(|e| BenchError::Other(e.to_string()))?;
    let mut out: Vec<Item> = vec![tidemark_store::to_item(&ShardConfigItem::default_layout(
        history,
    ))?];
    let far = Timestamp::now().ttl_after_days(3650);
    let mut day_hours = Vec::new();
    for h in 0..DAYS * 24 {
        let at = begin.plus_millis(h * HOUR_MS).unwrap_or(begin);
        for (start, part, item) in &parts {
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
            out.push(tidemark_store::to_item(&day)?);
        }
    }
    let stored = out.len();
    put_all(&direct, "series", out).await;

    let meter = Meter::start(target.dynamodb).await?;
    let client = tidemark_store::dynamodb_client(&ClientSettings::local(meter.endpoint())).await;
    let app = App::new(client, ApiConfig::new("series").with_now(end));
    tidemark_bench::api::register(&app, &device).await?;
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
    // What asking a percentile of 30 days at 1h costs while rollups hold no sketch: the
    // buckets come from the readings, a page of rows per 120,000 of them.
    let (p_rru, p_ms, p_n) = measure(&app, &meter, &series(begin, "1h", ",p95")).await?;
    eprintln!("series_reads: 30 days at 1h with p95: {p_rru:.1} RRU {p_ms:.0} ms ({p_n} rows)");
    local.stop().await;

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
    md.push_str(&format!(
        "| 30 days at 1h with p95 (from readings: rollups hold no quantile sketch yet) | {p_rru:.1} | {p_ms:.0} | {p_n} | | | |\n\n\
         Buckets finer than an hour read the same slot parts the raw read does, so they cost \
         about what it costs and return a sixtieth of the rows; hours and days read one small \
         item per bucket. The rows above are paged 1,000 at a time. Target (issue: analytics \
         on read): measured and reported; the rollups' own write cost is in `bench/PACKING.md`.\n"
    ));
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("SERIES.md"), md)?;
    eprintln!("series_reads: wrote bench/SERIES.md");
    Ok(())
}
