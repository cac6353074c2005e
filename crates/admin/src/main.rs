use std::path::PathBuf;
use std::process::ExitCode;

use tidemark_admin::files::{DONE_DIR, redrive_files};
use tidemark_admin::{AdminError, Rebuild, Rebuilder, Redriver};
use tidemark_schema::{DeviceId, Timestamp};
use tidemark_store::ClientSettings;
use tidemark_streams::LocalEndpoints;

const USAGE: &str = "usage: tidemark-admin [--local] <command>

  rebuild --device D --from T --to T
      recompute the device's hourly and daily rollups of the days from T to T (RFC 3339)
      exactly from its raw readings; safe while the pipeline runs
  redrive [PATH…]
      handle on-failure records again (files or folders of them; default .local/onfailure):
      ingest's are re-read from Kinesis and fed through ingest, the aggregator's become
      rebuilds of the devices they touched; handled files move to a redriven/ folder

  --local  use make run's local stack (TIDEMARK_DYNAMODB_PORT, TIDEMARK_KINESIS_PORT, …);
           otherwise the AWS account and region of your credentials
  TABLE_NAME names the table (default tidemark).";

struct Clients {
    ddb: aws_sdk_dynamodb::Client,
    streams: aws_sdk_dynamodbstreams::Client,
    kinesis: aws_sdk_kinesis::Client,
    table: String,
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
        };
    }
    let settings = ClientSettings::from_env();
    let shared = tidemark_store::sdk_config(&settings).await;
    Clients {
        ddb: tidemark_store::dynamodb_client(&settings).await,
        streams: aws_sdk_dynamodbstreams::Client::new(&shared),
        kinesis: aws_sdk_kinesis::Client::new(&shared),
        table,
    }
}

fn flag(args: &[String], name: &str) -> Result<String, AdminError> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .ok_or_else(|| AdminError::Input(format!("{name} is required")))
}

fn time(args: &[String], name: &str) -> Result<Timestamp, AdminError> {
    let v = flag(args, name)?;
    Timestamp::parse_rfc3339(&v).map_err(|e| AdminError::Input(format!("{name} {v:?}: {e}")))
}

async fn rebuild(c: Clients, args: &[String]) -> Result<(), AdminError> {
    let device = flag(args, "--device")?;
    let req = Rebuild {
        device: DeviceId::new(&device)
            .map_err(|e| AdminError::Input(format!("--device {device:?}: {e}")))?,
        from: time(args, "--from")?,
        to: time(args, "--to")?,
    };
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

async fn redrive(c: Clients, args: &[String]) -> Result<(), AdminError> {
    let mut paths: Vec<PathBuf> = args.iter().map(PathBuf::from).collect();
    if paths.is_empty() {
        paths.push(PathBuf::from(".local/onfailure"));
    }
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

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let local = args.first().is_some_and(|a| a == "--local");
    if local {
        args.remove(0);
    }
    let Some(command) = args.first().cloned() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let rest = &args[1..];
    let result = match command.as_str() {
        "rebuild" => rebuild(clients(local).await, rest).await,
        "redrive" => redrive(clients(local).await, rest).await,
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tidemark-admin: {e}");
            ExitCode::FAILURE
        }
    }
}
