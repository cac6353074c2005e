use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use tidemark_admin::cli::{Cli, Command};
use tidemark_admin::files::{DONE_DIR, redrive_files};
use tidemark_admin::{AdminError, Rebuild, Rebuilder, Redriver};
use tidemark_schema::Timestamp;
use tidemark_store::ClientSettings;
use tidemark_streams::LocalEndpoints;

struct Clients {
    ddb: aws_sdk_dynamodb::Client,
    streams: aws_sdk_dynamodbstreams::Client,
    kinesis: aws_sdk_kinesis::Client,
    table: String,
    /// A local S3 (`--local`, or `TIDEMARK_S3_ENDPOINT`); `None`: AWS.
    s3_endpoint: Option<String>,
}

async fn clients(local: bool) -> Clients {
    let table = std::env::var(tidemark_store::settings::TABLE_NAME.name)
        .unwrap_or_else(|_| tidemark_schema::TABLE.default_name.to_owned());
    if local {
        let local = LocalEndpoints::from_env();
        return Clients {
            ddb: local.dynamodb().await,
            streams: local.dynamodb_streams().await,
            kinesis: local.kinesis().await,
            table,
            s3_endpoint: Some(local.s3.clone()),
        };
    }
    let settings = ClientSettings::from_env();
    let shared = tidemark_store::sdk_config(&settings).await;
    Clients {
        ddb: tidemark_store::dynamodb_client(&settings).await,
        streams: aws_sdk_dynamodbstreams::Client::new(&shared),
        kinesis: aws_sdk_kinesis::Client::new(&shared),
        table,
        s3_endpoint: std::env::var(tidemark_exporter::s3::S3_ENDPOINT)
            .ok()
            .filter(|e| !e.is_empty()),
    }
}

async fn rebuild(c: Clients, req: Rebuild) -> Result<(), AdminError> {
    let device = req.device.clone();
    let r = Rebuilder::new(c.ddb, c.streams, c.table)
        .rebuild(&req)
        .await?;
    println!(
        "rebuilt {device}: {} readings over {} partition(s), {} aggregate items written ({} redone after a race with the aggregator)",
        r.readings, r.partitions, r.written, r.conflicts
    );
    if r.sketched {
        println!("the device has percentiles on: its closed hours and days keep quantile sketches");
    }
    if r.left_open > 0 {
        println!(
            "{} of the hours and days are still open: left placeholders, which readers take from their readings and hours and the aggregator writes when they close",
            r.left_open
        );
    }
    if r.unreadable > 0 {
        println!(
            "{} unreadable item(s) skipped (their keys are in the log): their readings are not in the rollups",
            r.unreadable
        );
    }
    Ok(())
}

async fn export(
    c: Clients,
    from: Timestamp,
    to: Timestamp,
    bucket: String,
    prefix: String,
) -> Result<(), AdminError> {
    use tidemark_exporter::hour::{export_range, hours_of};
    use tidemark_exporter::s3::{S3Sink, client};
    let env = tidemark_store::settings::Env::new(|k| std::env::var(k).ok());
    let shards = env
        .status_partitions()
        .map_err(|e| AdminError::Input(e.to_string()))?
        .unwrap_or(1);
    // The deployed exporter's GROUP_TAGS: the backfill rewrites (and deletes) the same groups'
    // closed buckets.
    let group_tags = env
        .group_tags()
        .map_err(|e| AdminError::Input(e.to_string()))?;
    // A backfill walks every registered device's hour as well as those the rollups role
    // recorded: hours older than the activity index have no entries in it.
    let source = tidemark_exporter::dynamo::DynamoExportTable::new(c.ddb, &c.table, shards)
        .with_group_tags(group_tags)
        .walking_registered();
    let s3 = client(&ClientSettings::from_env(), c.s3_endpoint.as_deref()).await;
    if c.s3_endpoint.is_some() {
        // A local S3 starts empty: the bucket is made on first use (AWS: the template's).
        let _ = s3.create_bucket().bucket(&bucket).send().await;
    }
    let sink = S3Sink {
        client: s3,
        bucket: bucket.clone(),
    };
    let bar = indicatif::ProgressBar::new(hours_of(from, to).len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} hours {msg}")
            .map_err(|e| AdminError::Input(e.to_string()))?,
    );
    let r = export_range(&source, &sink, &prefix, from, to, Timestamp::now(), |h| {
        bar.set_message(format!("{} ({} readings)", h.start, h.readings));
        bar.inc(1);
    })
    .await?;
    bar.finish_and_clear();
    println!(
        "exported {} hour(s) and {} day(s) of daily rollups to s3://{bucket}/{}/: {} readings, {} rows, {} bytes of Parquet",
        r.hours,
        r.days,
        prefix.trim_matches('/'),
        r.readings,
        r.rows,
        r.bytes
    );
    if r.open > 0 {
        println!(
            "{} hour(s) of the range are still open and were left out: export them once they close",
            r.open
        );
    }
    Ok(())
}

async fn redrive(c: Clients, paths: Vec<PathBuf>) -> Result<(), AdminError> {
    let ingest_cfg =
        tidemark_ingest::IngestConfig::from_env().map_err(|e| AdminError::Input(e.to_string()))?;
    let ingest_cfg = tidemark_ingest::IngestConfig {
        table_name: c.table.clone(),
        ..ingest_cfg
    };
    let r = Redriver {
        kinesis: c.kinesis,
        streams: c.streams.clone(),
        ingest: tidemark_ingest::Ingest::new(c.ddb.clone(), ingest_cfg),
        rebuilder: Rebuilder::new(c.ddb, c.streams, c.table),
    };
    let report = redrive_files(&r, &paths).await;
    if report.handled.is_empty() && report.failed.is_empty() {
        println!("no on-failure records under {paths:?}");
    }
    for (file, rep) in &report.handled {
        println!(
            "{}: {} records re-ingested, {} devices rebuilt; moved to {DONE_DIR}/",
            file.display(),
            rep.records,
            rep.rebuilt.len()
        );
    }
    for (file, e) in &report.failed {
        eprintln!("{}: {e}", file.display());
    }
    if !report.failed.is_empty() {
        return Err(AdminError::Input(format!(
            "{} on-failure record(s) not re-driven",
            report.failed.len()
        )));
    }
    Ok(())
}

async fn redrive_set_aside(c: Clients, days: u32) -> Result<(), AdminError> {
    let ingest_cfg =
        tidemark_ingest::IngestConfig::from_env().map_err(|e| AdminError::Input(e.to_string()))?;
    let ingest_cfg = tidemark_ingest::IngestConfig {
        table_name: c.table.clone(),
        ..ingest_cfg
    };
    let ingest = tidemark_ingest::Ingest::new(c.ddb.clone(), ingest_cfg);
    let days: Vec<_> = std::iter::successors(Some(Timestamp::now().day()), |d| d.prev())
        .take(days as usize)
        .collect();
    let r = tidemark_admin::set_aside::redrive_set_aside(&c.ddb, &c.table, &ingest, &days).await?;
    println!(
        "{} set-aside record(s) found, {} stored and removed from the quarantine, {} rejected by ingest (now quarantined with their reason)",
        r.found, r.stored, r.rejected
    );
    if !r.still_failing.is_empty() {
        return Err(AdminError::Ingest(format!(
            "{} record(s) still fail and stay set aside: {}",
            r.still_failing.len(),
            r.still_failing.join(", ")
        )));
    }
    Ok(())
}

async fn count_members(c: Clients, group: tidemark_schema::Tag) -> Result<(), AdminError> {
    let counts = tidemark_admin::members::count_members(&c.ddb, &c.table, &group).await?;
    let (was, now) = counts
        .iter()
        .fold((0, 0), |(w, n), r| (w + r.was, n + r.now));
    println!("{group}: {now} member(s) over the index's partitions (the counts said {was})");
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let c = clients(cli.local).await;
    let result = match cli.command {
        Command::Rebuild { device, from, to } => rebuild(c, Rebuild { device, from, to }).await,
        Command::Redrive {
            set_aside: true,
            days,
            ..
        } => redrive_set_aside(c, days).await,
        Command::Redrive { paths, .. } => redrive(c, paths).await,
        Command::Export {
            from,
            to,
            bucket,
            prefix,
        } => export(c, from, to, bucket, prefix).await,
        Command::CountMembers { group } => count_members(c, group).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tidemark-admin: {e}");
            ExitCode::FAILURE
        }
    }
}
