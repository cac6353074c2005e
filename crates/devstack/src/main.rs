use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tidemark_devstack::pipeline::{Functions, Pipeline, PipelineConfig};
use tidemark_devstack::simulator::{self, SimConfig, SimStats};
use tidemark_devstack::{DevstackError, LocalConfig, bootstrap};
use tokio::sync::watch;

const USAGE: &str = "usage: tidemark-devstack <command>

  run        the whole pipeline: table and stream, ingest and the aggregator (rollups and
             alerts roles) behind emulated event-source mappings, the HTTP API and a
             local EventBridge endpoint on 127.0.0.1, and a simulated fleet
             (TIDEMARK_SIM=0 turns the fleet off)
  simulate   only the simulated fleet, publishing to the Kinesis stream (any endpoint)
  bootstrap  only create the table and the stream, then print the endpoints
  event-bus [ADDR]
             only the local EventBridge PutEvents endpoint (default 127.0.0.1:3001), its
             events logged, appended to TIDEMARK_EVENTS_FILE (default .local/events.jsonl)
             and listed by GET /events (for `sam local invoke` of AlertFunction)
  events [DIR]
             write sample Lambda events dated now into DIR (default events/fresh/), for
             `sam local invoke` and `cargo lambda invoke`";

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,tidemark_devstack=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cfg = LocalConfig::from_env();
    let result = match std::env::args().nth(1).as_deref() {
        Some("bootstrap") => bootstrap(&cfg).await.map(|()| print_endpoints(&cfg)),
        Some("run") => run(cfg).await,
        Some("simulate") => simulate(cfg).await,
        Some("events") => write_events(std::env::args().nth(2)),
        Some("event-bus") => event_bus(std::env::args().nth(2)).await,
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tidemark-devstack: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn event_bus(addr: Option<String>) -> Result<(), DevstackError> {
    let addr = addr.unwrap_or_else(|| "127.0.0.1:3001".into());
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| DevstackError::Config(format!("cannot listen on {addr}: {e}")))?;
    let file =
        std::env::var("TIDEMARK_EVENTS_FILE").unwrap_or_else(|_| ".local/events.jsonl".into());
    eprintln!("PutEvents endpoint on http://{addr} (GET /events lists them; appended to {file})");
    let log = Arc::new(tidemark_devstack::event_bus::EventLog::new(Some(
        file.into(),
    )));
    let (_keep, stop) = stop_on_signal();
    tidemark_devstack::event_bus::serve(listener, log, stop).await;
    Ok(())
}

fn write_events(dir: Option<String>) -> Result<(), DevstackError> {
    let dir = std::path::PathBuf::from(dir.unwrap_or_else(|| "events/fresh".into()));
    let now = tidemark_schema::Timestamp::now();
    for path in tidemark_devstack::events::write_sample_events(&dir, now)? {
        println!("{}", path.display());
    }
    Ok(())
}

/// A receiver that turns true on Ctrl-C (or SIGTERM); a second one quits at once.
fn stop_on_signal() -> (watch::Sender<bool>, watch::Receiver<bool>) {
    let (tx, rx) = watch::channel(false);
    let signal = tx.clone();
    tokio::spawn(async move {
        interrupted().await;
        eprintln!("\nstopping… (Ctrl-C again to quit now)");
        let _ = signal.send(true);
        interrupted().await;
        eprintln!("quit.");
        std::process::exit(130);
    });
    (tx, rx)
}

async fn interrupted() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

fn sim_enabled() -> bool {
    !matches!(
        std::env::var("TIDEMARK_SIM").as_deref(),
        Ok("0" | "false" | "off" | "no")
    )
}

async fn run(cfg: LocalConfig) -> Result<(), DevstackError> {
    let pcfg = PipelineConfig::from_env(cfg.clone())?;
    let functions = pcfg.functions.clone();
    let watchdog = match (&pcfg.watchdog, &functions) {
        (Some(w), Functions::InProcess) => format!(
            "every {} s; devices offline after {} s without a reading (OFFLINE_AFTER_SECONDS); {} group rule(s) (GROUP_RULES)",
            w.period.as_secs(),
            pcfg.offline_after_default,
            w.group_rules.len()
        ),
        (Some(_), _) => "off (runs with in-process functions only)".to_owned(),
        (None, _) => "off (TIDEMARK_WATCHDOG_SECONDS=0)".to_owned(),
    };
    let export = match (&pcfg.export, &functions) {
        (Some(e), Functions::InProcess) => format!(
            "closed hours to s3://{}/{}/ on {} (moto), checked every {} s, in slices through moto's SQS queue `tidemark-export`; an hour goes out {} s after it closes (15 min after its end) and is sealed by the run after",
            e.bucket,
            e.prefix,
            tidemark_streams::LocalEndpoints::from_env().s3,
            e.period.as_secs(),
            e.grace.as_secs()
        ),
        (Some(_), _) => "off (runs with in-process functions only)".to_owned(),
        (None, _) => "off (TIDEMARK_EXPORT_SECONDS=0)".to_owned(),
    };
    let pipeline = Pipeline::start(pcfg).await?;
    let (_keep, mut stop) = stop_on_signal();

    let sim = sim_enabled().then(SimConfig::from_env);
    print_banner(
        &cfg,
        &pipeline,
        &functions,
        &[&watchdog, &export],
        sim.as_ref(),
    );

    let mut sim_task = None;
    if let Some(sim_cfg) = sim {
        let api = tidemark_api::App::new(
            cfg.dynamodb().await,
            tidemark_api::ApiConfig::new(cfg.table.clone()),
        );
        match simulator::register_fleet(&sim_cfg, &api).await {
            Ok(0) => {}
            Ok(n) => eprintln!(
                "registered {n} simulated devices with tags site ({}) and line (1-{}); their \
                 readings count in those groups from a few minutes on (GET /devices?tag=site:A)",
                simulator::SITES.join(", "),
                simulator::LINES_PER_SITE
            ),
            Err(e) => eprintln!("{e}; the devices register themselves without tags"),
        }
        let ingest = pipeline.ingest.clone();
        let progress: simulator::Progress = Arc::new(move || {
            Some((
                ingest.delivered(),
                ingest
                    .last_arrival_millis
                    .load(std::sync::atomic::Ordering::Relaxed),
            ))
        });
        let kinesis = cfg.kinesis().await;
        let stats = Arc::new(SimStats::default());
        let alerts = pipeline
            .events
            .clone()
            .map(|log| alert_latency(log, stats.clone(), stop.clone()));
        sim_task = Some(tokio::spawn(simulator::run(
            sim_cfg,
            kinesis,
            cfg.stream.clone(),
            stats,
            Some(progress),
            alerts,
            stop.clone(),
        )));
    }
    let _ = stop.wait_for(|s| *s).await;
    if let Some(t) = sim_task {
        match t.await {
            Ok(Err(e)) => eprintln!("simulator: {e}"),
            Err(e) => eprintln!("simulator: {e}"),
            Ok(Ok(())) => {}
        }
    }
    // Invocations in flight finish (their records are not checkpointed otherwise, so the next
    // run would replay them: harmless, the handlers are idempotent, but slower).
    if tokio::time::timeout(Duration::from_secs(30), pipeline.stop())
        .await
        .is_err()
    {
        eprintln!("gave up waiting for invocations in flight after 30 s; quit.");
        // Dropping the runtime under a still-running invocation only makes it log errors.
        std::process::exit(1);
    }
    eprintln!("stopped.");
    Ok(())
}

async fn simulate(cfg: LocalConfig) -> Result<(), DevstackError> {
    let sim = SimConfig::from_env();
    // `TIDEMARK_KINESIS_ENDPOINT=aws`: the real service, with the usual credential chain.
    let kinesis = if cfg.kinesis_endpoint == "aws" {
        let shared = tidemark_store::sdk_config(&tidemark_store::ClientSettings::default()).await;
        aws_sdk_kinesis::Client::new(&shared)
    } else {
        cfg.kinesis().await
    };
    // Fail fast and clearly rather than warn on every send.
    kinesis
        .describe_stream_summary()
        .stream_name(&cfg.stream)
        .send()
        .await
        .map_err(|e| DevstackError::Kinesis {
            operation: "DescribeStreamSummary",
            message: format!(
                "stream {} on {}: {} (create it with `make bootstrap`)",
                cfg.stream,
                cfg.kinesis_endpoint,
                aws_sdk_kinesis::Error::from(e)
            ),
        })?;
    eprintln!(
        "simulating {} devices at {} readings/minute into {} on {} (Ctrl-C stops)",
        sim.devices, sim.readings_per_minute, cfg.stream, cfg.kinesis_endpoint
    );
    let (_keep, stop) = stop_on_signal();
    simulator::run(
        sim,
        kinesis,
        cfg.stream.clone(),
        Arc::new(SimStats::default()),
        None,
        None,
        stop,
    )
    .await
}

/// The alerts part of the simulator's progress line: alerts opened, and the time from a
/// breaching reading going into Kinesis to its `opened` event at the local endpoint (the
/// simulator's send instant against the event's arrival), over the last 200 alerts.
fn alert_latency(
    log: Arc<tidemark_devstack::event_bus::EventLog>,
    stats: Arc<SimStats>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> simulator::AlertProgress {
    let line: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    let out = line.clone();
    tokio::spawn(async move {
        let (mut seen, mut opened) = (0usize, 0u64);
        let mut recent: std::collections::VecDeque<f64> = Default::default();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
                _ = stop.changed() => return,
            }
            let new = log.since(seen).await;
            seen += new.len();
            for (arrived, e) in new {
                let d = &e["detail"];
                if d["change"] != "opened" {
                    continue;
                }
                opened += 1;
                let at = d["openedAt"]
                    .as_str()
                    .and_then(|t| tidemark_schema::Timestamp::parse_rfc3339(t).ok());
                let sent = at.and_then(|at| stats.sent_at(d["deviceId"].as_str()?, at));
                if let Some(sent) = sent {
                    recent.push_back(arrived.saturating_duration_since(sent).as_secs_f64());
                    if recent.len() > 200 {
                        recent.pop_front();
                    }
                }
            }
            let mut v: Vec<f64> = recent.iter().copied().collect();
            v.sort_by(f64::total_cmp);
            let pct = |p: f64| v[((p * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)];
            let text = if v.is_empty() {
                format!("alerts {opened} opened")
            } else {
                format!(
                    "alerts {opened} opened · breach→event p50 {:.1} s p99 {:.1} s",
                    pct(0.5),
                    pct(0.99)
                )
            };
            *line.lock().unwrap_or_else(|e| e.into_inner()) = Some(text);
        }
    });
    Arc::new(move || out.lock().unwrap_or_else(|e| e.into_inner()).clone())
}

fn print_banner(
    cfg: &LocalConfig,
    p: &Pipeline,
    functions: &Functions,
    [watchdog, export]: &[&str; 2],
    sim: Option<&SimConfig>,
) {
    let api = format!("http://{}", p.api_addr);
    let functions = match functions {
        Functions::InProcess => "in process".to_owned(),
        Functions::Invoke { url, .. } => format!("via the Invoke API at {url}"),
    };
    let events = match p.events_addr {
        Some(a) => format!("http://{a}/events   (PutEvents endpoint; also .local/events.jsonl)"),
        None => "off (the alerts mapping runs with in-process functions only)".to_owned(),
    };
    let fleet = match sim {
        Some(s) => {
            let quiet = match s.silence {
                Some(q) => format!(
                    "; {}{:03} goes quiet from minute {} to {} of every {}",
                    s.device_prefix,
                    s.devices,
                    q.from.as_secs() / 60,
                    q.until.as_secs() / 60,
                    q.every.as_secs() / 60
                ),
                None => String::new(),
            };
            format!(
                "{} devices ({}001…), {} readings/minute each{quiet}",
                s.devices, s.device_prefix, s.readings_per_minute
            )
        }
        None => "off (TIDEMARK_SIM=0)".to_owned(),
    };
    let device = sim
        .map(|s| format!("{}001", s.device_prefix))
        .unwrap_or_else(|| "sensor_01".into());
    println!(
        "Tidemark is running. Dashboard: {api}/\n\
         \n  dashboard        {api}/   (refreshes every few seconds)\
         \n  API              {api}\
         \n  DynamoDB Local   {ddb}   table  {table}\
         \n  Kinesis (mock)   {kin}   stream {stream} ({shards} shards)\
         \n  functions        ingest, aggregator (rollups), alerts {functions}\
         \n  alert events     {events}\
         \n  watchdog         {watchdog}\
         \n  Parquet export   {export}\
         \n  simulated fleet  {fleet}\
         \n\nTry:\
         \n  curl {api}/devices/{device}/readings/latest\
         \n  curl '{api}/devices/{device}/readings?limit=5&order=desc'\
         \n  curl '{api}/devices/{device}/aggregates?period=hourly'\
         \n  curl '{api}/devices/{device}/series?from={hour_ago}&to={hour_on}&resolution=1m&aggregates=avg,stddev,p95&fill=locf'\
         \n  curl -X PUT {api}/devices/{device} -d '{{\"percentiles\":true}}'   # hours closing from now on keep quantile sketches\
         \n  curl '{api}/alerts?severity=critical&state=open'\
         \n  curl '{api}/devices?connectivity=offline'\
         \n  curl '{api}/devices?tag=site:A&tag=line:1'   # the simulated fleet's sites A-C, lines 1-2\
         \n  curl '{api}/latest?ids={device},{device2}'\
         \n  curl {api}/quarantine\
         \n\nPublish your own readings with any AWS SDK or CLI (dummy credentials, us-east-1):\
         \n  aws kinesis put-record --endpoint-url {kin} --stream-name {stream} \\\
         \n      --partition-key sensor_01 --cli-binary-format raw-in-base64-out \\\
         \n      --data '{{\"deviceId\":\"sensor_01\",\"timestamp\":\"'$(date -u +%FT%TZ)'\",\"temperature\":22.4}}'\
         \n\nCtrl-C stops.\n",
        ddb = cfg.dynamodb_endpoint,
        kin = cfg.kinesis_endpoint,
        table = cfg.table,
        stream = cfg.stream,
        shards = cfg.stream_shards,
        device2 = sim
            .map(|s| format!("{}002", s.device_prefix))
            .unwrap_or_else(|| "sensor_02".into()),
        // The series route takes epoch milliseconds (as Grafana sends them) or RFC 3339.
        hour_ago = tidemark_schema::Timestamp::now().epoch_millis() - 3_600_000,
        hour_on = tidemark_schema::Timestamp::now().epoch_millis() + 3_600_000,
    );
}

fn print_endpoints(cfg: &LocalConfig) {
    println!(
        "Tidemark local stack is up.\n\
         \n  DynamoDB Local   {ddb}   table  {table}\
         \n  Kinesis (mock)   {kin}   stream {stream} ({shards} shards)\
         \n\nReach them with any AWS SDK or CLI (dummy credentials, region us-east-1), e.g.:\
         \n  aws dynamodb scan --endpoint-url {ddb} --table-name {table}\
         \n  aws kinesis put-record --endpoint-url {kin} --stream-name {stream} \\\
         \n      --partition-key sensor_01 --cli-binary-format raw-in-base64-out \\\
         \n      --data '{{\"deviceId\":\"sensor_01\",\"timestamp\":\"2026-04-20T14:00:00Z\",\"temperature\":22.4}}'",
        ddb = cfg.dynamodb_endpoint,
        kin = cfg.kinesis_endpoint,
        table = cfg.table,
        stream = cfg.stream,
        shards = cfg.stream_shards,
    );
}
