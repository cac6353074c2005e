//! What fleet reads cost (docs/design.md §6 "Fleet reads"): a group series over 10,000 devices, 7
//! days at 1h (`GET /groups/series`), and fleet latest of 5,000 devices in one tag in 5 pages
//! of 1,000 (`GET /latest?tag=`). Writes the "## Reads" section of `bench/FLEETS.md` (the
//! group rollups' writes have their own section, kept as it is).
//!
//! Group series: the items are those the export and the rollups role store for a group of
//! 10,000 devices reading `temperature` once a minute: 168 recomputed hours of 600,000
//! readings each (each hour's sketch built from all of them, from 24 diurnal shapes: devices
//! spread over 5 °C, a 6 °C swing over the day), the 7 day items, and the export's cursor.
//! Measured twice: the whole week recomputed, and the same week ending in an open hour (the
//! current one, half gone: 24 partials, 6 rollups batches of 4 stream shards) after an hour
//! the export has not reached yet (48 partials: 12 batches of 4 shards).
//!
//! Fleet latest: 5,000 devices tagged `site:A` (their tag index entries, device items, and
//! three readings each as single items of the default layout), listed 1,000 a page.
//!
//! Reads go through the API handler behind the metering proxy on a DynamoDB Local of the
//! bench's own; read units are as billed (eventually consistent), including the minimum AWS
//! bills for a read that finds nothing, which DynamoDB Local reports as 0. Times are the
//! handler's, median of three runs (a release build under `make bench`; a deployed function
//! adds the network, not the work).
//!
//!   cargo run --release -p tidemark-bench --example fleet_reads

use std::time::Instant;

use tidemark_api::{ApiConfig, App};
use tidemark_bench::BenchError;
use tidemark_bench::local_ddb::LocalDynamo;
use tidemark_bench::meter::Meter;
use tidemark_bench::run::Target;
use tidemark_schema::{
    Bucket, DeviceId, DeviceItem, DeviceStatus, ExportCursorItem, GroupBucketItem,
    GroupPartialItem, MetricName, Period, Reading, ReadingItem, Sketch, Stats, Tag, TagIndexItem,
    Tags, Timestamp,
};
use tidemark_store::{ClientSettings, Item};

const HOUR_MS: i64 = 3_600_000;
const GROUP_DEVICES: usize = 10_000;
const LATEST_DEVICES: usize = 5_000;
const DAYS: i64 = 7;

/// A small deterministic generator.
struct Lcg(u64);
impl Lcg {
    fn unit(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A reading a minute of `minutes` from each of `devices`: the group's stats of them (exact
/// count, sum, spread, extremes; a sketch of every value).
fn group_stats(
    hour: Timestamp,
    hour_of_day: i64,
    devices: usize,
    minutes: std::ops::Range<i64>,
    rng: &mut Lcg,
) -> Stats {
    let (mut count, mut mean, mut m2, mut sum) = (0u64, 0.0f64, 0.0f64, 0.0f64);
    let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut sketch: Option<Sketch> = None;
    let swing = 3.0 * (std::f64::consts::TAU * hour_of_day as f64 / 24.0).sin();
    for d in 0..devices {
        let base = 18.0 + (d % 50) as f64 * 0.1 + swing;
        for _ in minutes.clone() {
            let v = ((base + rng.unit() * 0.4) * 100.0).round() / 100.0;
            count += 1;
            sum += v;
            let delta = v - mean;
            mean += delta / count as f64;
            m2 += delta * (v - mean);
            min = min.min(v);
            max = max.max(v);
            match &mut sketch {
                Some(s) => s.add(v),
                None => sketch = Some(Sketch::of(v)),
            }
        }
    }
    let first = hour.plus_millis(minutes.start * 60_000).unwrap_or(hour);
    let last = hour.plus_millis(minutes.end * 60_000 - 1).unwrap_or(hour);
    Stats {
        count,
        sum,
        min,
        max,
        m2: Some(m2),
        first: Some((first, 18.0 + swing)),
        last: Some((last, 18.0 + swing)),
        sketch,
    }
}

/// An item's size as DynamoDB bills it, near enough: names and values, strings and numbers.
fn item_size(item: &Item) -> usize {
    fn value(v: &aws_sdk_dynamodb::types::AttributeValue) -> usize {
        use aws_sdk_dynamodb::types::AttributeValue as A;
        match v {
            A::S(s) | A::N(s) => s.len(),
            A::B(b) => b.as_ref().len(),
            A::L(l) => 3 + l.iter().map(|v| 1 + value(v)).sum::<usize>(),
            A::M(m) => 3 + m.iter().map(|(k, v)| 1 + k.len() + value(v)).sum::<usize>(),
            A::Ns(l) | A::Ss(l) => l.iter().map(String::len).sum(),
            _ => 1,
        }
    }
    item.iter().map(|(k, v)| k.len() + value(v)).sum()
}

/// One page of `uri` through the handler: (read units as billed, ms, items, cursor).
async fn page(
    app: &App,
    meter: &Meter,
    uri: &str,
) -> Result<(f64, f64, usize, Option<String>), BenchError> {
    meter.take().await;
    let req: lambda_http::Request = http::Request::builder()
        .uri(uri)
        .body(lambda_http::Body::Empty)
        .map_err(|e| BenchError::Other(e.to_string()))?;
    let t = Instant::now();
    let resp = app.handle(req).await;
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    let totals = meter.take().await;
    let rru = totals.reads().0.total + totals.unreported_read_minimum();
    let body: serde_json::Value = match resp.body() {
        lambda_http::Body::Text(t) => serde_json::from_str(t)?,
        lambda_http::Body::Binary(b) => serde_json::from_slice(b)?,
        _ => serde_json::Value::Null,
    };
    if !resp.status().is_success() {
        return Err(BenchError::Other(format!("{uri}: {body}")));
    }
    let items = match &body {
        serde_json::Value::Array(a) => a.len(),
        v => v["items"].as_array().map_or(0, Vec::len),
    };
    Ok((rru, ms, items, body["cursor"].as_str().map(str::to_owned)))
}

/// The median of three runs of one page, by time.
async fn median(
    app: &App,
    meter: &Meter,
    uri: &str,
) -> Result<(f64, f64, usize, Option<String>), BenchError> {
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(page(app, meter, uri).await?);
    }
    runs.sort_by(|a, b| a.1.total_cmp(&b.1));
    Ok(runs.swap_remove(1))
}

/// Replaces (or adds) the `## Reads` section of `bench/FLEETS.md`, keeping the rest.
fn write_section(section: &str) -> Result<(), BenchError> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("FLEETS.md");
    let old = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| "# Fleets: what group rollups and fleet reads cost\n\n".to_owned());
    let out = match old.find("\n## Reads") {
        Some(at) => {
            let rest = &old[at + 1..];
            let end = rest[3..].find("\n## ").map(|i| i + 4);
            let mut s = old[..at + 1].to_owned();
            s.push_str(section);
            if let Some(e) = end {
                s.push('\n');
                s.push_str(&rest[e..]);
            }
            s
        }
        None => {
            let mut s = old.trim_end().to_owned();
            s.push_str("\n\n");
            s.push_str(section);
            s
        }
    };
    std::fs::write(&path, out)?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BenchError> {
    let local = LocalDynamo::start().await?;
    let target = Target {
        dynamodb: local.addr,
    };
    let direct = target.client().await;
    let now = Timestamp::now()
        .hour_start()
        .plus_millis(30 * 60_000)
        .unwrap_or(Timestamp::now());
    let open_hour = now.hour_start();
    let begin = open_hour
        .minus_millis(DAYS * 24 * HOUR_MS - HOUR_MS)
        .unwrap_or(open_hour)
        .hour_start();
    let tag = Tag::parse("site:A").map_err(|e| BenchError::Other(e.to_string()))?;
    let metric = MetricName::new("temperature").map_err(|e| BenchError::Other(e.to_string()))?;

    // The group's stored week: 24 diurnal shapes of 600,000 readings, one per hour of the day.
    eprintln!("fleet_reads: building the group's hours");
    let mut rng = Lcg(48);
    let shapes: Vec<Stats> = (0..24)
        .map(|h| group_stats(begin, h, GROUP_DEVICES, 0..60, &mut rng))
        .collect();
    let mut closed: Vec<Item> = Vec::new();
    let mut item_bytes = 0usize;
    let mut days: std::collections::BTreeMap<Timestamp, Stats> = Default::default();
    for h in 0..DAYS * 24 {
        let at = begin.plus_millis(h * HOUR_MS).unwrap_or(begin);
        let hod = (at.epoch_millis() / HOUR_MS).rem_euclid(24) as usize;
        let mut stats = shapes[hod].clone();
        stats.first = stats.first.map(|(_, v)| (at, v));
        stats.last = stats
            .last
            .map(|(_, v)| (at.plus_millis(HOUR_MS - 1).unwrap_or(at), v));
        days.entry(at.day().start())
            .or_insert(Stats::EMPTY)
            .merge(&stats);
        let item = GroupBucketItem::new(
            tag.clone(),
            metric.clone(),
            Bucket::Hourly(at),
            stats,
            GROUP_DEVICES as u64,
            at.plus_millis(HOUR_MS + 600_000).unwrap_or(at),
        );
        let item = tidemark_store::to_item(&item)?;
        item_bytes = item_bytes.max(item_size(&item));
        closed.push(item);
    }
    for (day, stats) in days {
        let item = GroupBucketItem::new(
            tag.clone(),
            metric.clone(),
            Period::Daily.bucket(day),
            stats,
            GROUP_DEVICES as u64,
            now,
        );
        closed.push(tidemark_store::to_item(&item)?);
    }
    let series_uri = format!(
        "/groups/series?tag=site:A&metric=temperature&from={}&to={}&resolution=1h&aggregates=count,avg,min,max,p95&limit=1000",
        begin.epoch_millis(),
        open_hour
            .plus_millis(HOUR_MS)
            .unwrap_or(open_hour)
            .epoch_millis()
    );

    // Table 1: every hour recomputed (the export's cursor on the last one).
    tidemark_store::create_table(&direct, "recomputed", &tidemark_schema::TABLE).await?;
    let mut all = closed.clone();
    all.push(tidemark_store::to_item(&ExportCursorItem::new(open_hour))?);
    tidemark_testkit::put_items(&direct, "recomputed", all).await;
    // Table 2: the last closed hour not exported yet and the current hour open, both from
    // partials (12 batches of 4 stream shards each).
    tidemark_store::create_table(&direct, "open", &tidemark_schema::TABLE).await?;
    let waiting = open_hour.minus_millis(HOUR_MS).unwrap_or(open_hour);
    let mut all: Vec<Item> = closed
        .iter()
        .filter(|i| {
            tidemark_store::from_item::<GroupBucketItem>((*i).clone())
                .ok()
                .and_then(|g| g.bucket())
                .is_none_or(|b| b.start() < waiting || b.period() == Period::Daily)
        })
        .cloned()
        .collect();
    all.push(tidemark_store::to_item(&ExportCursorItem::new(
        waiting.minus_millis(HOUR_MS).unwrap_or(waiting),
    ))?);
    let mut partials = 0;
    for (hour, batches) in [(waiting, 12i64), (open_hour, 6)] {
        for b in 0..batches {
            for shard in 0..4 {
                let minutes = (b * 5)..(b * 5 + 5);
                // A shard's batch holds a quarter of the devices' readings.
                let stats = group_stats(hour, 0, GROUP_DEVICES / 4, minutes.clone(), &mut rng);
                // The rollups role's per-minute statistics beside them, the batch's readings
                // spread evenly over its minutes.
                let per = minutes.clone().count().max(1) as u64;
                let by_minute: tidemark_schema::Minutes = minutes
                    .filter_map(|m| hour.plus_millis(m * 60_000))
                    .map(|at| {
                        let one = tidemark_schema::MinuteStats {
                            count: stats.count / per,
                            sum: stats.sum / per as f64,
                            min: stats.min,
                            max: stats.max,
                        };
                        (tidemark_schema::Minute::of(at), one)
                    })
                    .collect();
                let key = GroupPartialItem::key(&tag, hour, &format!("49600{shard}{b:04}"));
                let p = GroupPartialItem {
                    pk: key.pk,
                    sk: key.sk,
                    added: [(metric.clone(), stats)].into(),
                    removed: Default::default(),
                    added_minutes: [(metric.clone(), by_minute)].into(),
                    removed_minutes: Default::default(),
                    ttl: now.epoch_seconds() + 7 * 86_400,
                };
                all.push(tidemark_store::to_item(&p)?);
                partials += 1;
            }
        }
    }
    tidemark_testkit::put_items(&direct, "open", all).await;

    // Fleet latest: 5,000 devices at site:A.
    eprintln!("fleet_reads: registering {LATEST_DEVICES} tagged devices");
    tidemark_store::create_table(&direct, "latest", &tidemark_schema::TABLE).await?;
    let tags: Tags = serde_json::from_value(serde_json::json!({"site": "A", "line": "3"}))?;
    let mut fleet: Vec<Item> = Vec::new();
    for d in 0..LATEST_DEVICES {
        let id =
            DeviceId::new(&format!("dev{d:05}")).map_err(|e| BenchError::Other(e.to_string()))?;
        let mut device = DeviceItem::new(id.clone(), DeviceStatus::Active, begin);
        device.tags = tags.clone();
        fleet.push(tidemark_store::to_item(&device)?);
        for t in tags.iter() {
            fleet.push(tidemark_store::to_item(&TagIndexItem::new(
                &t,
                &id,
                DeviceStatus::Active,
                tags.clone(),
            ))?);
        }
        for i in 0..3 {
            let r = Reading {
                device_id: id.clone(),
                timestamp: now.minus_millis(i * 60_000 + d as i64).unwrap_or(now),
                metrics: [(metric.clone(), 20.0 + i as f64)].into(),
                metadata: None,
            };
            fleet.push(tidemark_store::to_item(&ReadingItem::new(&r, None, 30))?);
        }
    }
    tidemark_testkit::put_items(&direct, "latest", fleet).await;

    let meter = Meter::start(target.dynamodb).await?;
    let client = tidemark_store::dynamodb_client(&ClientSettings::local(meter.endpoint())).await;
    let app = |table: &str| App::new(client.clone(), ApiConfig::new(table).with_now(now));

    let (rec_rru, rec_ms, rec_rows, _) = median(&app("recomputed"), &meter, &series_uri).await?;
    let (open_rru, open_ms, open_rows, _) = median(&app("open"), &meter, &series_uri).await?;
    let wide = format!("{}&format=wide", series_uri.replace("&limit=1000", ""));
    let (wide_rru, wide_ms, wide_rows, _) = median(&app("recomputed"), &meter, &wide).await?;

    let latest = app("latest");
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let uri = match &cursor {
            None => "/latest?tag=site:A&limit=1000".to_owned(),
            Some(c) => format!("/latest?tag=site:A&limit=1000&cursor={c}"),
        };
        let (rru, ms, n, next) = median(&latest, &meter, &uri).await?;
        pages.push((rru, ms, n));
        cursor = next;
        if cursor.is_none() || pages.len() > 10 {
            break;
        }
    }

    let mut md = String::from("## Reads\n\n");
    md.push_str(&format!(
        "Produced by `cargo run --release -p tidemark-bench --example fleet_reads` (part of \
         `make bench`); how it measures is in the example's doc comment. Read request units \
         as billed (eventually consistent, with the minimum AWS bills for a read that finds \
         nothing) and the API handler's time against DynamoDB Local, median of three{}.\n\n\
         ### A group series: 10,000 devices, 7 days at 1h\n\n\
         `GET /groups/series?tag=site:A&metric=temperature&resolution=1h` over the 168 hours \
         ending with the current one; each hour of the group is one stored item of about \
         {item_bytes} B (600,000 readings, sketched), whatever the number of members.\n\n\
         | stored | RRU | ms | buckets | target |\n|---|---|---|---|---|\n\
         | every hour recomputed by the export, rows | {rec_rru:.1} | {rec_ms:.0} | {rec_rows} | ≤ 50 RRU |\n\
         | every hour recomputed by the export, wide | {wide_rru:.1} | {wide_ms:.0} | {wide_rows} | ≤ 50 RRU |\n\
         | last closed hour not exported yet and the current hour open ({partials} partials) | {open_rru:.1} | {open_ms:.0} | {open_rows} | ≤ 50 RRU |\n\n\
         The cost follows the buckets: one Query of the hours (about {item_bytes} B each), the \
         export's cursor, and one Query per hour not recomputed yet (its partials); no member \
         is read.\n\n\
         ### Fleet latest: 5,000 devices in one tag, pages of 1,000\n\n\
         `GET /latest?tag=site:A&limit=1000`: the tag index page (one Query per partition \
         reached), one BatchGetItem of the page's layouts (1,000 keys: 10 calls; a device \
         without its own layout is a key found missing, billed at the minimum) and a \
         newest-first Query per device, 16 at a time.\n\n\
         | page | RRU | ms | readings |\n|---|---|---|---|\n",
        if cfg!(debug_assertions) {
            " (this run: a debug build, several times slower than `make bench`'s release build)"
        } else {
            ""
        }
    ));
    for (i, (rru, ms, n)) in pages.iter().enumerate() {
        md.push_str(&format!("| {} | {rru:.1} | {ms:.0} | {n} |\n", i + 1));
    }
    let total: f64 = pages.iter().map(|p| p.0).sum();
    md.push_str(&format!(
        "\nIn all {total:.1} RRU for {LATEST_DEVICES} devices ({:.3} a device): what \
         `GET /latest?ids=` costs for the same devices (half of it the layouts' BatchGetItem, \
         a key each), plus the index pages. A page that ends exactly at the last member cannot \
         know it is the last, so its cursor leads to one more, empty, request.\n",
        total / LATEST_DEVICES as f64
    ));
    write_section(&md)?;
    eprintln!("fleet_reads: wrote the Reads section of bench/FLEETS.md");
    local.stop().await;
    Ok(())
}
