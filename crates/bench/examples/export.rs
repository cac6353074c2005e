//! What the Parquet export costs and yields (issue: export to Parquet on S3): for the
//! standard fleet (packed:300, 300 s windows) and the 1 Hz fleet (packed:60, 60 s windows),
//! run through the whole pipeline over a steady hour in simulated time as
//! `bench/PACKING.md` runs them, one closed hour is exported from DynamoDB Local into memory,
//! and again through the S3 sink into moto's S3 (a Python server on this machine: a bound on
//! the code's own speed, no measure of S3's). Reported: readings exported per second of one
//! export (this machine, release build, DynamoDB Local; the median of three) into memory and
//! into moto, the Parquet bytes per reading, every S3 byte of the hour (readings, rollups,
//! manifests) per reading, the DynamoDB bytes per reading of the same hour's stored items
//! (DynamoDB's item-size rules), and the S3 arithmetic per million readings. Writes
//! `bench/EXPORT.md`.
//!
//!   cargo run --release -p tidemark-bench --example export

use std::time::Instant;

use tidemark_bench::BenchError;
use tidemark_bench::local_ddb::LocalDynamo;
use tidemark_bench::run::{self, Design, Target, simulated_start};
use tidemark_bench::scenario::{Scenario, TEMPLATE_AGGREGATOR_BATCH};
use tidemark_bench::storage::item_size;
use tidemark_exporter::dynamo::DynamoExportTable;
use tidemark_exporter::hour::export_hour;
use tidemark_exporter::s3::S3Sink;
use tidemark_exporter::sink::{MemorySink, Sink};
use tidemark_schema::{EntityKey, Layout, Period, SlotLen, Timestamp};

struct Row {
    fleet: String,
    readings: u64,
    rows: u64,
    per_second: f64,
    per_second_s3: f64,
    parquet_bytes: u64,
    /// Every object of the hour: readings and rollups files, both manifests.
    s3_bytes: u64,
    dynamo_bytes: u64,
}

async fn measure(sc: Scenario, first: Timestamp) -> Result<Row, BenchError> {
    let local = LocalDynamo::start().await?;
    let target = Target {
        dynamodb: local.addr,
    };
    let table = "export";
    let readings = sc.readings(first);
    let r = run::run(&target, &sc, Design::Tidemark, table, &readings, first).await;
    let client = target.client().await;
    let out = async {
        r?;
        // The run's first whole hour: closed, and fully written.
        let hour = Period::Hourly
            .bucket(first.plus_millis(3_600_000).unwrap_or(first))
            .start();
        let source = DynamoExportTable::new(client.clone(), table, 1);
        let memory = MemorySink::default();
        let moto = moto_sink().await?;
        // One export first, not timed: DynamoDB Local's first reads of the hour are slower.
        median_of_three(&source, &MemorySink::default(), hour).await?;
        let (rep, median) = median_of_three(&source, &memory, hour).await?;
        let (_, median_s3) = median_of_three(&source, &moto, hour).await?;
        let s3_bytes: u64 = memory.all().values().map(|b| b.len() as u64).sum();
        // The DynamoDB bytes of the hour's stored readings: its slot parts (or items).
        let items = tidemark_testkit::scan_table(&client, table).await;
        let dynamo_bytes: u64 = items
            .iter()
            .filter(|i| {
                let s = |n: &str| {
                    i.get(n)
                        .and_then(|v| v.as_s().ok())
                        .cloned()
                        .unwrap_or_default()
                };
                match EntityKey::parse(&s("pk"), &s("sk")) {
                    Ok(EntityKey::Slot { start, .. }) => start.hour_start() == hour,
                    Ok(EntityKey::Reading { at, .. }) => at.hour_start() == hour,
                    _ => false,
                }
            })
            .map(item_size)
            .sum();
        Ok::<_, BenchError>(Row {
            fleet: sc.description.clone(),
            readings: rep.readings,
            rows: rep.rows,
            per_second: rep.readings as f64 / median,
            per_second_s3: rep.readings as f64 / median_s3,
            parquet_bytes: rep.bytes(),
            s3_bytes,
            dynamo_bytes,
        })
    }
    .await;
    local.stop().await;
    out
}

/// The hour exported three times into `sink`: the last report and the median time (s).
async fn median_of_three<K: Sink>(
    source: &DynamoExportTable,
    sink: &K,
    hour: Timestamp,
) -> Result<(tidemark_exporter::objects::BucketExport, f64), BenchError> {
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..3 {
        let t = Instant::now();
        let rep = export_hour(source, sink, "bench", hour)
            .await
            .map_err(|e| BenchError::Other(e.to_string()))?;
        times.push(t.elapsed().as_secs_f64());
        last = Some(rep);
    }
    times.sort_by(f64::total_cmp);
    let rep = last.ok_or_else(|| BenchError::Other("no export".into()))?;
    Ok((rep, times[1]))
}

/// A fresh bucket in moto's S3 (the project's local services).
async fn moto_sink() -> Result<S3Sink, BenchError> {
    let endpoint = tidemark_testkit::services().s3_endpoint.clone();
    let client = tidemark_exporter::s3::client(&Default::default(), Some(&endpoint)).await;
    let bucket = tidemark_testkit::unique_name("bench-export").to_lowercase();
    client
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .map_err(|e| BenchError::Other(format!("moto: {e}")))?;
    Ok(S3Sink { client, bucket })
}

/// S3 Standard in us-east-1 (2026 list prices): storage per GB-month, PUT/LIST per 1,000.
const S3_GB_MONTH: f64 = 0.023;
const S3_PUT_PER_1000: f64 = 0.005;

#[tokio::main]
async fn main() -> Result<(), BenchError> {
    let agg = TEMPLATE_AGGREGATOR_BATCH;
    let first = simulated_start(Timestamp::now())
        .plus_millis(45 * 60_000)
        .unwrap_or(Timestamp::now());
    let mut rows = Vec::new();
    for (fleet, slot) in [
        (Scenario::standard(200, 104, agg), 300),
        (Scenario::one_hz(3, 104, agg), 60),
    ] {
        let layout = Layout::packed(SlotLen::new(slot).expect("divides an hour"));
        let sc = fleet.over_a_steady_hour(first).packed(layout, slot, 10_000);
        let row = measure(sc, first).await?;
        eprintln!(
            "export: {}: {} readings, {:.0} readings/s ({:.0} into moto), {:.1} Parquet bytes/reading, {:.1} DynamoDB bytes/reading",
            row.fleet,
            row.readings,
            row.per_second,
            row.per_second_s3,
            row.parquet_bytes as f64 / row.readings.max(1) as f64,
            row.dynamo_bytes as f64 / row.readings.max(1) as f64
        );
        rows.push(row);
    }
    let mut md = String::from(
        "# Export: Parquet against the table\n\n\
         Produced by `cargo run --release -p tidemark-bench --example export` (part of `make \
         bench`); how it measures is in the example's doc comment. One closed hour of each \
         fleet, exported from DynamoDB Local into memory, and into moto's S3 through the \
         function's S3 sink (moto is a Python server on this machine: its column bounds the \
         code, it does not measure S3), the median of three exports each.\n\n\
         | fleet | readings in the hour | rows (reading × metric) | readings/s, one export (memory) | readings/s, one export (moto S3) | Parquet bytes/reading | S3 bytes/reading, all objects | DynamoDB bytes/reading |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for r in &rows {
        let per = |b: u64| b as f64 / r.readings.max(1) as f64;
        md.push_str(&format!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} |\n",
            r.fleet,
            r.readings,
            r.rows,
            r.per_second,
            r.per_second_s3,
            per(r.parquet_bytes),
            per(r.s3_bytes),
            per(r.dynamo_bytes)
        ));
    }
    // What S3 charges: storage by the byte, and per request a fixed count an hour (two
    // Parquet files, two manifests, two listings of stale parts), whatever the fleet.
    md.push_str(
        "\n**S3 per million readings** (list prices: $0.023 per GB-month, $0.005 per 1,000 \
         PUT or LIST):\n\n| fleet | GB stored | storage $/month | requests/month (fleet) | requests $/month (fleet) |\n|---|---|---|---|---|\n",
    );
    for r in &rows {
        let gb = r.s3_bytes as f64 / r.readings.max(1) as f64 * 1e6 / 1e9;
        // 6 requests an hour, 24 hours, 30 days; a day adds a file, a manifest and a listing.
        let requests = 6.0 * 24.0 * 30.0 + 3.0 * 30.0;
        md.push_str(&format!(
            "| {} | {:.4} | {:.6} | {:.0} | {:.3} |\n",
            r.fleet,
            gb,
            gb * S3_GB_MONTH,
            requests,
            requests / 1000.0 * S3_PUT_PER_1000
        ));
    }
    md.push_str(
        "\nTarget (issue: export): measured and reported. Parquet bytes are the hour's \
         readings files; S3 bytes every object the hour writes (readings and hourly rollups \
         files, two manifests); the DynamoDB bytes are the hour's slot parts as stored. \
         Requests are per fleet, not per reading: a month of hourly exports is a few cents \
         whatever the fleet's size. The export reads the hour strongly \
         consistent: its read units are twice those of an eventually consistent read of the \
         same items, once per hour (and once more for an hour changed after its export).\n",
    );
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("EXPORT.md"), md)?;
    eprintln!("export: wrote bench/EXPORT.md");
    Ok(())
}
