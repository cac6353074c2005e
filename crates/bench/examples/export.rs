//! What the Parquet export costs and yields (issue: export to Parquet on S3): for the
//! standard fleet (packed:300, 300 s windows) and the 1 Hz fleet (packed:60, 60 s windows),
//! run through the whole pipeline over a steady hour in simulated time as
//! `bench/PACKING.md` runs them, one closed hour is exported from DynamoDB Local into memory
//! (the S3 write is not timed: moto is no measure of S3). Reported: readings exported per
//! second of one export (this machine, release build, DynamoDB Local; the median of three),
//! the Parquet bytes per reading, and the DynamoDB bytes per reading of the same hour's
//! stored items (DynamoDB's item-size rules). Writes `bench/EXPORT.md`.
//!
//!   cargo run --release -p tidemark-bench --example export

use std::time::Instant;

use tidemark_bench::BenchError;
use tidemark_bench::local_ddb::LocalDynamo;
use tidemark_bench::run::{self, Design, Target, simulated_start};
use tidemark_bench::scenario::{Scenario, TEMPLATE_AGGREGATOR_BATCH};
use tidemark_bench::storage::item_size;
use tidemark_exporter::hour::export_hour;
use tidemark_exporter::sink::MemorySink;
use tidemark_exporter::source::DynamoSource;
use tidemark_schema::{EntityKey, Layout, Period, SlotLen, Timestamp};

struct Row {
    fleet: String,
    readings: u64,
    rows: u64,
    per_second: f64,
    parquet_bytes: u64,
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
        let source = DynamoSource::new(client.clone(), table, 1);
        let mut times = Vec::new();
        let mut last = None;
        for _ in 0..3 {
            let sink = MemorySink::default();
            let t = Instant::now();
            let rep = export_hour(&source, &sink, "bench", hour)
                .await
                .map_err(|e| BenchError::Other(e.to_string()))?;
            times.push(t.elapsed().as_secs_f64());
            last = Some(rep);
        }
        times.sort_by(f64::total_cmp);
        let rep = last.ok_or_else(|| BenchError::Other("no export".into()))?;
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
            per_second: rep.readings as f64 / times[1],
            parquet_bytes: rep.bytes(),
            dynamo_bytes,
        })
    }
    .await;
    local.stop().await;
    out
}

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
            "export: {}: {} readings, {:.0} readings/s, {:.1} Parquet bytes/reading, {:.1} DynamoDB bytes/reading",
            row.fleet,
            row.readings,
            row.per_second,
            row.parquet_bytes as f64 / row.readings.max(1) as f64,
            row.dynamo_bytes as f64 / row.readings.max(1) as f64
        );
        rows.push(row);
    }
    let mut md = String::from(
        "# Export: Parquet against the table\n\n\
         Produced by `cargo run --release -p tidemark-bench --example export` (part of `make \
         bench`); how it measures is in the example's doc comment. One closed hour of each \
         fleet, exported from DynamoDB Local into memory (the S3 writes are not timed), the \
         median of three exports.\n\n\
         | fleet | readings in the hour | rows (reading × metric) | readings/s, one export | Parquet bytes/reading | DynamoDB bytes/reading |\n\
         |---|---|---|---|---|---|\n",
    );
    for r in &rows {
        md.push_str(&format!(
            "| {} | {} | {} | {:.0} | {:.1} | {:.1} |\n",
            r.fleet,
            r.readings,
            r.rows,
            r.per_second,
            r.parquet_bytes as f64 / r.readings.max(1) as f64,
            r.dynamo_bytes as f64 / r.readings.max(1) as f64
        ));
    }
    md.push_str(
        "\nTarget (issue: export): measured and reported. Parquet bytes include the hour's \
         readings files only (its rollups file and manifest are a few KB more); the DynamoDB \
         bytes are the hour's slot parts as stored. The export reads the hour strongly \
         consistent: its read units are twice those of an eventually consistent read of the \
         same items, once per hour (and once more for an hour changed after its export).\n",
    );
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("EXPORT.md"), md)?;
    eprintln!("export: wrote bench/EXPORT.md");
    Ok(())
}
