//! What reading rollups costs once hours and days are written only when they close
//! (docs/design.md §5): read request units of `GET /devices/{id}/aggregates` for 7 days of
//! hourly rollups and 90 days of daily rollups of one device whose newest hour and day are
//! open (placeholders the API replaces by the hour's readings and the sum of the day's
//! hours), against the same ranges with every bucket closed.
//! Writes `bench/ROLLUP_READS.md`.
//!
//! The items are real: a standard device (a reading a minute, packed:300, 300 s windows)
//! runs through ingest and both aggregator roles on DynamoDB Local in simulated time over a
//! steady hour, leaving a closed hour, an open hour with its readings and an open day; the
//! closed hour is copied to the other hours of the 7 days and, summed 24 times, to the other
//! days of the 90 (keys moved, sizes kept). Reads go through the API handler behind the
//! metering proxy, pages of 100. Last, what `GET /devices/{id}` reads for the same device,
//! against its device item alone.
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

/// Read units of the device item alone (strongly consistent: what `GET /devices/{id}` read
/// before it took `lastSeenAt` from the readings) and of the route as it is now.
async fn device_reads(
    app: &App,
    meter: &Meter,
    device: &tidemark_schema::DeviceId,
    table: &str,
) -> Result<(f64, f64), BenchError> {
    let key = tidemark_schema::EntityKey::Device(device.clone()).key();
    let client = tidemark_store::dynamodb_client(&ClientSettings::local(meter.endpoint())).await;
    meter.take().await;
    client
        .get_item()
        .table_name(table)
        .set_key(Some(tidemark_store::batch_get::key_item(&key)))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| BenchError::Other(e.to_string()))?;
    let item = meter.take().await.reads().0.total;
    let req: lambda_http::Request = http::Request::builder()
        .uri(format!("/devices/{device}"))
        .body(lambda_http::Body::Empty)
        .map_err(|e| BenchError::Other(e.to_string()))?;
    let resp = app.handle(req).await;
    if !resp.status().is_success() {
        return Err(BenchError::Other(format!(
            "GET /devices/{device}: {}",
            resp.status()
        )));
    }
    Ok((item, meter.take().await.reads().0.total))
}

#[tokio::main]
async fn main() -> Result<(), BenchError> {
    let local = LocalDynamo::start().await?;
    let target = Target {
        dynamodb: local.addr,
    };
    let direct = target.client().await;

    // A real standard device (a reading a minute, packed:300, 300 s windows) run over a
    // steady hour, in simulated time: at its end one hour is closed and written whole, the
    // next open (a placeholder and 30 readings), and its day open.
    let first = simulated_start(Timestamp::now())
        .plus_millis(45 * 60_000)
        .unwrap_or(Timestamp::now());
    let sc = Scenario::standard(1, 60, TEMPLATE_AGGREGATOR_BATCH)
        .packed(
            Layout::packed(SlotLen::new(300).expect("300 divides an hour")),
            300,
            10_000,
        )
        .over_a_steady_hour(first);
    let readings = sc.readings(first);
    run::run(&target, &sc, Design::Tidemark, "source", &readings, first).await?;
    let end = sc
        .measured
        .and_then(|(_, to)| first.plus_millis(to))
        .unwrap_or(first);
    let aggs: Vec<AggregateItem> = tidemark_testkit::scan_table(&direct, "source")
        .await
        .into_iter()
        .filter(|i| {
            matches!(i.get("sk"), Some(aws_sdk_dynamodb::types::AttributeValue::S(s)) if s.starts_with(keys::AGG_PREFIX))
        })
        .map(|i| tidemark_store::from_item(i).expect("an aggregate item"))
        .collect();
    // The fullest closed hour, and a closed day as a whole day of sending leaves it.
    let hour = aggs
        .iter()
        .filter(|a| a.sk.contains("hourly") && !a.open)
        .max_by_key(|a| a.metrics.values().map(|s| s.count).sum::<u64>())
        .cloned()
        .ok_or_else(|| BenchError::Other("the run closed no hour".into()))?;
    let today = Period::Daily.bucket(end);
    let mut day = AggregateItem::day_of_hours(
        &AggregateItem::empty(&AggregateItem::key_for(&sc.device_id(0), today)),
        vec![hour.clone(); 24],
    );
    day.version = 25;
    day.folded = (0..24).map(|h| (format!("{h:02}"), 2)).collect();

    if std::env::var_os("BENCH_VERBOSE").is_some() {
        eprintln!("rollup_reads: hour template {hour:?}\nrollup_reads: day template {day:?}");
    }
    let stored: std::collections::BTreeSet<String> = aggs.iter().map(|a| a.sk.clone()).collect();
    let end_hour = Period::Hourly.bucket(end).start();
    let first_hour = end_hour
        .minus_millis(7 * DAY_MS - HOUR_MS)
        .unwrap_or(end_hour);
    let first_day = today
        .start()
        .minus_millis(89 * DAY_MS)
        .unwrap_or(today.start());
    let hours: Vec<AggregateItem> = (0..7 * 24)
        .filter_map(|h| first_hour.plus_millis(h * HOUR_MS))
        .map(|t| moved(&hour, Period::Hourly, t))
        .filter(|a| !stored.contains(&a.sk))
        .collect();
    let days: Vec<AggregateItem> = (0..89)
        .filter_map(|d| first_day.plus_millis(d * DAY_MS))
        .map(|t| moved(&day, Period::Daily, t))
        .collect();
    put_all(&direct, "source", &hours).await;
    put_all(&direct, "source", &days).await;
    let to = end.pred().unwrap_or(end);
    let device = sc.device_id(0);
    // The same ranges with nothing open: every hour and day a closed item of the same size
    // (what the reads would cost if every bucket were written whole), the baseline.
    tidemark_store::create_table(&direct, "whole", &tidemark_schema::TABLE).await?;
    let all_hours: Vec<AggregateItem> = (0..7 * 24)
        .filter_map(|h| first_hour.plus_millis(h * HOUR_MS))
        .map(|t| moved(&hour, Period::Hourly, t))
        .collect();
    let all_days: Vec<AggregateItem> = (0..90)
        .filter_map(|d| first_day.plus_millis(d * DAY_MS))
        .map(|t| moved(&day, Period::Daily, t))
        .collect();
    put_all(&direct, "whole", &all_hours).await;
    put_all(&direct, "whole", &all_days).await;
    let mut rows = Vec::new();
    let mut device_route = None;
    for (label, table) in [
        ("every hour and day closed (the baseline)", "whole"),
        ("the newest hour and day open (as served now)", "source"),
    ] {
        let meter = Meter::start(target.dynamodb).await?;
        let client =
            tidemark_store::dynamodb_client(&ClientSettings::local(meter.endpoint())).await;
        let app = App::new(client, ApiConfig::new(table).with_now(end));
        if table == "whole" {
            tidemark_bench::api::register(&app, &device).await?;
        }
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
        if table == "source" {
            device_route = Some(device_reads(&app, &meter, &device, table).await?);
        }
    }
    local.stop().await;

    let item_bytes = |a: &AggregateItem| {
        tidemark_store::to_item(a)
            .map(|i| tidemark_store::limits::item_size(&i))
            .unwrap_or(0)
    };
    let mut md = String::from(
        "# Reading rollups: what open hours and days cost\n\n\
         Produced by `cargo run --release -p tidemark-bench --example rollup_reads` (part of \
         `make bench`); how it measures is in the example's doc comment. An hour and a day are \
         written once they close (docs/design.md §5), so the newest hour of a device is a \
         placeholder the API replaces by its readings, and the newest day one it replaces by \
         the sum of its hours; this is what that costs the reader, against the same ranges \
         with every bucket closed.\n\n\
         | rollups stored | hourly, 7 days: RRU (buckets) | daily, 90 days: RRU (buckets) |\n|---|---|---|\n",
    );
    for (label, h, hn, d, dn) in &rows {
        md.push_str(&format!("| {label} | {h:.1} ({hn}) | {d:.1} ({dn}) |\n"));
    }
    if let [(_, h0, _, d0, _), (_, h1, _, d1, _)] = rows.as_slice() {
        let verdict = |r: f64| if r <= 2.0 { "met" } else { "**missed**" };
        md.push_str(&format!(
            "\nTarget: each at most 2× what it costs with every bucket closed. Hourly: {:.2}× ({}); daily: {:.2}× ({}).\n\n\
             Before hours were written only when they close (41f0f71) this example measured 17.5 \
             RRU for the hours (items of 787 bytes, with their marks) and 6.0 for the days, with \
             a day template that held no metrics (the run's open day placeholder): its days were \
             a third of the size of a real closed day.\n",
            h1 / h0.max(f64::MIN_POSITIVE),
            verdict(h1 / h0.max(f64::MIN_POSITIVE)),
            d1 / d0.max(f64::MIN_POSITIVE),
            verdict(d1 / d0.max(f64::MIN_POSITIVE)),
        ));
    }
    md.push_str(&format!(
        "\nItem sizes: a closed hourly item {} bytes (no marks any more), a daily item {} bytes \
         (DynamoDB's item-size rules). The open hour is read from its readings: here {} \
         readings in packed:300 slots; a 1 Hz packed:60 device's open hour is up to 75 parts \
         of about 1 KB. The open day's hours are read in one query. An hour or a day left open \
         because its device fell silent costs the same until the device's next batch closes \
         it.\n",
        item_bytes(&hour),
        item_bytes(&day),
        readings
            .iter()
            .filter(|r| Period::Hourly.bucket(r.at) == Period::Hourly.bucket(end))
            .count(),
    ));
    if let Some((item, route)) = device_route {
        md.push_str(&format!(
            "\n## The device route\n\n`GET /devices/{{id}}` of the same device reads {route:.1} \
             RRU: the device item (strongly consistent), its layouts (one BatchGetItem) and its \
             newest reading (one newest-first query), since it takes `lastSeenAt` and `latest` \
             from the readings instead of having the alerts role rewrite the item every 15 \
             minutes (docs/decisions/0003-write-cost-floors.md, step 5). The item alone, all it \
             read before, is {item:.1} RRU.\n"
        ));
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("ROLLUP_READS.md"), md)?;
    eprintln!("rollup_reads: wrote bench/ROLLUP_READS.md");
    Ok(())
}
