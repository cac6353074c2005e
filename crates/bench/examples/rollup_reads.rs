//! What reading rollups costs once a day is written only when it closes (docs/design.md §5):
//! read request units of `GET /devices/{id}/aggregates` for 7 days of hourly rollups and 90
//! days of daily rollups of one device, with every day stored whole (as before) and with the
//! newest day open (a placeholder the API replaces by the sum of its 24 hours). Writes
//! `bench/ROLLUP_READS.md`.
//!
//! The items are real: one hour of a standard device (a reading a minute, packed:300, 300 s
//! windows) goes through ingest and both aggregator roles on DynamoDB Local, and its hourly
//! and daily items are copied to every hour and day of the ranges (keys moved, sizes kept;
//! each day holding its 24 hours' versions, as a day of a device sending all day does).
//! Reads go through the API handler behind the metering proxy, pages of 100.
//!
//!   cargo run --release -p tidemark-bench --example rollup_reads

use tidemark_api::{ApiConfig, App};
use tidemark_bench::BenchError;
use tidemark_bench::local_ddb::LocalDynamo;
use tidemark_bench::meter::Meter;
use tidemark_bench::run::{self, Design, Target, simulated_start};
use tidemark_bench::scenario::{Scenario, TEMPLATE_AGGREGATOR_BATCH};
use tidemark_schema::{AggregateItem, Layout, Period, SlotLen, Timestamp, keys};
use tidemark_store::{ClientSettings, Item};

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;

async fn put_all(client: &aws_sdk_dynamodb::Client, table: &str, items: &[AggregateItem]) {
    for i in items {
        let item: Item = tidemark_store::to_item(i).expect("an aggregate item serialises");
        client
            .put_item()
            .table_name(table)
            .set_item(Some(item))
            .send()
            .await
            .expect("DynamoDB Local takes the item");
    }
}

fn moved(template: &AggregateItem, period: Period, at: Timestamp) -> AggregateItem {
    let mut a = template.clone();
    a.sk = keys::aggregate_sk(period.bucket(at));
    a
}

/// Read units of every page of `uri` (pages of 100), and the buckets read.
async fn read_all(app: &App, meter: &Meter, uri: &str) -> Result<(f64, u64), BenchError> {
    meter.take().await;
    let (buckets, _) = tidemark_bench::api::read_pages(app, &format!("{uri}&limit=100")).await?;
    Ok((meter.take().await.reads().0.total, buckets))
}

#[tokio::main]
async fn main() -> Result<(), BenchError> {
    let local = LocalDynamo::start().await?;
    let target = Target {
        dynamodb: local.addr,
    };
    let direct = target.client().await;

    // One real hour of a standard device.
    let start = simulated_start(Timestamp::now());
    let sc = Scenario::standard(1, 60, TEMPLATE_AGGREGATOR_BATCH).packed(
        Layout::packed(SlotLen::new(300).expect("300 divides an hour")),
        300,
        10_000,
    );
    let readings = sc.readings(start);
    run::run(&target, &sc, Design::Tidemark, "source", &readings, start).await?;
    let aggs: Vec<AggregateItem> = tidemark_testkit::scan_table(&direct, "source")
        .await
        .into_iter()
        .filter(|i| {
            matches!(i.get("sk"), Some(aws_sdk_dynamodb::types::AttributeValue::S(s)) if s.starts_with(keys::AGG_PREFIX))
        })
        .map(|i| tidemark_store::from_item(i).expect("an aggregate item"))
        .collect();
    // The fullest hour (the run spans two) and a day as a whole day of sending leaves it.
    let hour = aggs
        .iter()
        .filter(|a| a.sk.contains("hourly"))
        .max_by_key(|a| a.metrics.values().map(|s| s.count).sum::<u64>())
        .cloned()
        .ok_or_else(|| BenchError::Other("the run stored no hourly item".into()))?;
    let mut day = aggs
        .iter()
        .find(|a| a.sk.contains("daily"))
        .cloned()
        .ok_or_else(|| BenchError::Other("the run stored no daily item".into()))?;
    day.open = false;
    day.folded = (0..24).map(|h| (format!("{h:02}"), 12)).collect();

    let now = Timestamp::now();
    let today = Period::Daily.bucket(now).start();
    let first_day = today.minus_millis(89 * DAY_MS).unwrap_or(today);
    let first_hour = today.minus_millis(6 * DAY_MS).unwrap_or(today);
    let hours: Vec<AggregateItem> = (0..7 * 24)
        .filter_map(|h| first_hour.plus_millis(h * HOUR_MS))
        .map(|t| moved(&hour, Period::Hourly, t))
        .collect();
    let days: Vec<AggregateItem> = (0..90)
        .filter_map(|d| first_day.plus_millis(d * DAY_MS))
        .map(|t| moved(&day, Period::Daily, t))
        .collect();
    let to = today.plus_millis(DAY_MS - 1).unwrap_or(today);
    let device = sc.device_id(0);
    let mut rows = Vec::new();
    for (label, today_open) in [
        ("every day stored whole (before)", false),
        ("the newest day open (after)", true),
    ] {
        let table = if today_open { "after" } else { "before" };
        tidemark_store::create_table(&direct, table, &tidemark_schema::TABLE).await?;
        let mut ds = days.clone();
        if today_open {
            if let Some(last) = ds.last_mut() {
                *last = AggregateItem::empty(&AggregateItem::key_for(
                    &device,
                    Period::Daily.bucket(today),
                ));
                last.open = true;
                last.version = 1;
            }
        }
        put_all(&direct, table, &hours).await;
        put_all(&direct, table, &ds).await;
        let meter = Meter::start(target.dynamodb).await?;
        let client =
            tidemark_store::dynamodb_client(&ClientSettings::local(meter.endpoint())).await;
        let app = App::new(client, ApiConfig::new(table).with_now(now));
        tidemark_bench::api::register(&app, &device).await?;
        let (hourly_rru, hourly_n) = read_all(
            &app,
            &meter,
            &format!("/devices/{device}/aggregates?period=hourly&from={first_hour}&to={to}"),
        )
        .await?;
        let (daily_rru, daily_n) = read_all(
            &app,
            &meter,
            &format!("/devices/{device}/aggregates?period=daily&from={first_day}&to={to}"),
        )
        .await?;
        eprintln!(
            "rollup_reads: {label}: hourly 7 d {hourly_rru:.1} RRU ({hourly_n} buckets), daily 90 d {daily_rru:.1} RRU ({daily_n} buckets)"
        );
        rows.push((label, hourly_rru, hourly_n, daily_rru, daily_n));
    }
    local.stop().await;

    let item_bytes = |a: &AggregateItem| {
        tidemark_store::to_item(a)
            .map(|i| tidemark_store::limits::item_size(&i))
            .unwrap_or(0)
    };
    let mut md = String::from(
        "# Reading rollups: what an open day costs\n\n\
         Produced by `cargo run --release -p tidemark-bench --example rollup_reads` (part of \
         `make bench`); how it measures is in the example's doc comment. A day is written once \
         it closes (docs/design.md §5), so the newest day of a device is a placeholder the API \
         replaces by the sum of its hours; this is what that costs the reader.\n\n\
         | rollups stored | hourly, 7 days: RRU (buckets) | daily, 90 days: RRU (buckets) |\n|---|---|---|\n",
    );
    for (label, h, hn, d, dn) in &rows {
        md.push_str(&format!("| {label} | {h:.1} ({hn}) | {d:.1} ({dn}) |\n"));
    }
    if let [(_, h0, _, d0, _), (_, h1, _, d1, _)] = rows.as_slice() {
        let verdict = |r: f64| if r <= 2.0 { "met" } else { "**missed**" };
        md.push_str(&format!(
            "\nTarget: each at most 2× what it cost before. Hourly: {:.2}× ({}); daily: {:.2}× ({}).\n",
            h1 / h0.max(f64::MIN_POSITIVE),
            verdict(h1 / h0.max(f64::MIN_POSITIVE)),
            d1 / d0.max(f64::MIN_POSITIVE),
            verdict(d1 / d0.max(f64::MIN_POSITIVE)),
        ));
    }
    md.push_str(&format!(
        "\nItem sizes: an hourly item {} bytes, a daily item {} bytes (DynamoDB's item-size rules). \
         The open day's hours are read in one query, here all 24 (the worst case: a whole day \
         not closed yet). A day left open because its device fell silent before the close \
         costs the same again until a later batch of the device folds it.\n",
        item_bytes(&hour),
        item_bytes(&day)
    ));
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("ROLLUP_READS.md"), md)?;
    eprintln!("rollup_reads: wrote bench/ROLLUP_READS.md");
    Ok(())
}
