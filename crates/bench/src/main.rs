//! `tidemark-bench`: runs every benchmark of docs/design.md §8 and writes `bench/REPORT.md` and
//! `bench/report.json`. `make bench` runs it in release mode; `--quick` runs small fleets.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use hyper::body::Bytes;
use tidemark_bench::artifacts::{self, FUNCTIONS, workspace_root};
use tidemark_bench::local_ddb::LocalDynamo;
use tidemark_bench::report::{self, BenchReport};
use tidemark_bench::run::{self, Design, Target};
use tidemark_bench::scenario::{Scenario, TEMPLATE_AGGREGATOR_BATCH};
use tidemark_bench::{BenchError, api, runtime};
use tidemark_schema::Timestamp;

const USAGE: &str = "tidemark-bench [--quick] [--skip-build] [--skip-criterion] [--skip-startup]
    [--standard-devices N] [--standard-minutes N] [--one-hz-minutes N] [--hot-millis N]
    [--baseline-max-readings N|all] [--api-requests N] [--only standard|1hz|hot]
    [--no-baseline] [--shared-dynamodb] [--keep-tables] [--binaries DIR] [--out DIR]

Runs the scenarios through Tidemark and the textbook baseline on a DynamoDB Local of its own
(started from .local/, in memory; --shared-dynamodb uses TIDEMARK_DYNAMODB_ENDPOINT or
127.0.0.1:8000 instead) and writes DIR/REPORT.md and DIR/report.json (DIR: bench/, or target/bench-quick/ with --quick,
so a quick run never overwrites the committed report).
Defaults follow docs/design.md §8: 1,000 devices for 60 simulated minutes, 50 devices at 1 Hz for 10,
one device at 2,000 readings/s for 5 s. Unless skipped it first runs `cargo build --release`
of the three functions and the ingest criterion bench. --quick: small fleets, no builds, no
criterion run (results already on disk are reported as such). BENCH_VERBOSE=1 logs windows.";

struct Args {
    quick: bool,
    build: bool,
    criterion: bool,
    startup: bool,
    baseline_max: Option<usize>,
    api_requests: usize,
    out: PathBuf,
    keep_tables: bool,
    only: Option<String>,
    baseline: bool,
    shared_dynamodb: bool,
    standard_devices: u32,
    standard_minutes: i64,
    one_hz_minutes: i64,
    hot_millis: i64,
    /// Where the function binaries for start-up measurements are (target/release).
    binaries: PathBuf,
}

fn parse_args() -> Result<Args, String> {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let quick = raw.iter().any(|a| a == "--quick");
    let mut a = Args {
        quick,
        build: !quick,
        criterion: !quick,
        startup: true,
        baseline_max: Some(if quick { 100 } else { 15_000 }),
        api_requests: if quick { 30 } else { 300 },
        // A quick run's small fleets say little about cost at scale: its report stays out of
        // the committed bench/ folder.
        out: if quick {
            artifacts::target_dir().join("bench-quick")
        } else {
            workspace_root().join("bench")
        },
        keep_tables: false,
        only: None,
        baseline: true,
        shared_dynamodb: false,
        standard_devices: if quick { 50 } else { 1_000 },
        standard_minutes: if quick { 10 } else { 60 },
        one_hz_minutes: if quick { 1 } else { 10 },
        hot_millis: if quick { 250 } else { 5_000 },
        binaries: artifacts::target_dir().join("release"),
    };
    let mut it = raw.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().cloned().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--quick" => {}
            "--skip-build" => a.build = false,
            "--skip-criterion" => a.criterion = false,
            "--skip-startup" => a.startup = false,
            "--keep-tables" => a.keep_tables = true,
            "--no-baseline" => a.baseline = false,
            "--shared-dynamodb" => a.shared_dynamodb = true,
            "--standard-devices" => a.standard_devices = num(&value(arg)?)?,
            "--standard-minutes" => a.standard_minutes = num(&value(arg)?)?,
            "--one-hz-minutes" => a.one_hz_minutes = num(&value(arg)?)?,
            "--hot-millis" => a.hot_millis = num(&value(arg)?)?,
            "--binaries" => a.binaries = PathBuf::from(value(arg)?),
            "--only" => a.only = Some(value(arg)?),
            "--baseline-max-readings" => {
                let v = value(arg)?;
                a.baseline_max = if v == "all" {
                    None
                } else {
                    Some(v.parse().map_err(|_| format!("bad number {v}"))?)
                };
            }
            "--api-requests" => {
                let v = value(arg)?;
                a.api_requests = v.parse().map_err(|_| format!("bad number {v}"))?;
            }
            "--out" => a.out = PathBuf::from(value(arg)?),
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other}\n\n{USAGE}")),
        }
    }
    Ok(a)
}

fn num<T: std::str::FromStr>(v: &str) -> Result<T, String> {
    v.parse().map_err(|_| format!("bad number {v}"))
}

fn dynamodb_addr() -> Result<(String, SocketAddr), BenchError> {
    let endpoint = std::env::var(tidemark_store::settings::TIDEMARK_DYNAMODB_ENDPOINT.name)
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| {
            let port = std::env::var("TIDEMARK_DYNAMODB_PORT").unwrap_or_else(|_| "8000".into());
            format!("http://127.0.0.1:{port}")
        });
    let hostport = endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let addr = hostport
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| BenchError::Setup(format!("cannot resolve {endpoint}")))?;
    Ok((endpoint, addr))
}

fn table_name(label: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    format!("bench-{label}-{}-{nanos}", std::process::id())
}

fn event_file(name: &str, fallback: &str) -> (Bytes, String) {
    let p = workspace_root().join("events").join(name);
    match std::fs::read(&p) {
        Ok(b) => (Bytes::from(b), format!("events/{name}")),
        Err(_) => (Bytes::from(fallback.to_owned()), "built-in event".into()),
    }
}

const APIGW_FALLBACK: &str = r#"{"version":"2.0","routeKey":"GET /devices/{id}","rawPath":"/devices/sensor_01","rawQueryString":"","headers":{"host":"localhost","accept":"application/json"},"requestContext":{"accountId":"123456789012","apiId":"bench","domainName":"localhost","domainPrefix":"bench","http":{"method":"GET","path":"/devices/sensor_01","protocol":"HTTP/1.1","sourceIp":"127.0.0.1","userAgent":"bench"},"requestId":"bench-1","routeKey":"GET /devices/{id}","stage":"$default","time":"20/Apr/2026:14:00:00 +0000","timeEpoch":1776693600000},"pathParameters":{"id":"sensor_01"},"isBase64Encoded":false}"#;

async fn main_inner(args: Args) -> Result<(), BenchError> {
    let command = {
        let rest: Vec<String> = std::env::args().skip(1).collect();
        let via_make = std::env::var_os("MAKELEVEL").is_some();
        let release = if cfg!(debug_assertions) {
            ""
        } else {
            "--release "
        };
        let direct = format!("cargo run {release}-p tidemark-bench -- {}", rest.join(" "));
        if via_make {
            // `make bench-quick` is the debug build's `--quick`; `make bench` the release run.
            let target = if args.quick && release.is_empty() {
                "bench-quick"
            } else {
                "bench"
            };
            format!("make {target} (runs: {})", direct.trim_end())
        } else {
            direct.trim_end().to_owned()
        }
    };
    let (own, (endpoint, ddb)) = if args.shared_dynamodb {
        (None, dynamodb_addr()?)
    } else {
        let d = LocalDynamo::start().await?;
        let a = d.addr;
        (Some(d), (format!("http://{a}"), a))
    };
    let target = Target { dynamodb: ddb };
    let mut rep = BenchReport {
        date_utc: Timestamp::now().to_string(),
        command,
        mode: if args.quick {
            "quick".into()
        } else {
            "full".into()
        },
        machine: artifacts::machine(),
        dynamodb_endpoint: endpoint.clone(),
        scenarios: Vec::new(),
        runs: Vec::new(),
        baseline_max_readings: args.baseline_max,
        api: Vec::new(),
        api_note: "not measured".into(),
        cpu: Vec::new(),
        cpu_note: String::new(),
        sizes_x86_64: Vec::new(),
        sizes_arm64: Vec::new(),
        startup: Vec::new(),
        startup_note: "not measured (yet)".into(),
        targets: Vec::new(),
        notes: Vec::new(),
    };
    if own.is_some() {
        rep.notes.push(
            "DynamoDB Local: in-memory instances started by the benchmark, a fresh one per \
             run (the shared one on :8000 serves every test of the workspace, and DynamoDB \
             Local's write path slows down as its streams grow); same jar, same settings, \
             for both designs."
                .into(),
        );
    }
    rep.notes.push(
        "The metering proxy re-serialises each request to add ReturnConsumedCapacity, which \
         adds a little latency to both designs alike."
            .into(),
    );
    let mut tables = Vec::new();

    // Phase 1: the scenarios, Tidemark and the baseline (the figures that matter most come
    // first; the report is rewritten after every phase, so an interrupted run still leaves
    // an honest partial report).
    let one_hz_devices = if args.quick { 5 } else { 50 };
    let mut scenarios = vec![
        Scenario::standard(
            args.standard_devices,
            args.standard_minutes,
            TEMPLATE_AGGREGATOR_BATCH,
        ),
        Scenario::one_hz(
            one_hz_devices,
            args.one_hz_minutes,
            TEMPLATE_AGGREGATOR_BATCH,
        ),
        Scenario::hot(args.hot_millis, TEMPLATE_AGGREGATOR_BATCH),
    ];
    scenarios.retain(|s| args.only.as_deref().is_none_or(|o| o == s.name));
    let start = run::simulated_start(Timestamp::now());
    let mut api_table = None;
    for sc in &scenarios {
        let readings = sc.readings(start);
        let label = format!("{}-b{}", sc.name, sc.aggregator_batch_size);
        let t = table_name(&format!("{label}-tidemark"));
        eprintln!("bench: {label} Tidemark: {} readings", readings.len());
        // The standard fleet's table stays for the API phase, on the main instance; every
        // other run gets a fresh DynamoDB Local: it writes every stream record after looking
        // up the stream's description, which slows down as the database's streams grow.
        let keep = sc.name == "standard" && api_table.is_none();
        let (inst, tgt) = instance(&args, &target, keep).await?;
        let r = run::run(&tgt, sc, Design::Tidemark, &t, &readings, start).await?;
        log_run(&r);
        if keep {
            api_table = Some((
                t.clone(),
                sc.clone(),
                r.readings_stored + r.warmup.as_ref().map_or(0, |w| w.readings_stored),
            ));
            tables.push(t);
        } else {
            release(inst, &tgt, &t, &args).await;
        }
        rep.runs.push(r);
        if args.baseline && sc.aggregator_batch_size == TEMPLATE_AGGREGATOR_BATCH {
            // The baseline's per-item calls make whole fleets take long: it gets a subset of
            // the devices over the whole span (same per-device pattern and windows), or, for
            // a single device, a prefix of its readings.
            let max = args.baseline_max.unwrap_or(usize::MAX);
            let mut bsc = sc.clone();
            let per_device = readings.len() / sc.devices.max(1) as usize;
            if readings.len() > max && sc.devices > 1 {
                bsc.devices = u32::try_from((max / per_device.max(1)).max(1)).unwrap_or(1);
            }
            let breadings = bsc.readings(start);
            let n = breadings.len().min(max);
            let t = table_name(&format!("{label}-baseline"));
            eprintln!(
                "bench: {label} baseline: {} devices, {n} readings",
                bsc.devices
            );
            let (inst, tgt) = instance(&args, &target, false).await?;
            let r = run::run(&tgt, &bsc, Design::Baseline, &t, &breadings[..n], start).await?;
            log_run(&r);
            release(inst, &tgt, &t, &args).await;
            rep.runs.push(r);
        }
        rep.scenarios.push(sc.clone());
        save(&mut rep, &args.out)?;
    }
    if let Some(h) = rep
        .runs
        .iter()
        .find(|r| r.scenario == "hot" && r.design == Design::Tidemark)
    {
        let note = format!(
            "Hot device: at 2,000 readings/s a reading every 500 µs; keys keep microseconds \
             (docs/design.md §2), so {} readings sent became {} stored items.",
            h.readings_sent, h.readings_stored
        );
        rep.notes.push(note);
    }

    // Phase 2: API latency over the standard fleet's table.
    if let Some((t, sc, stored)) = &api_table {
        let ids: Vec<String> = (0..sc.devices)
            .map(|i| sc.device_id(i).to_string())
            .collect();
        let to = start.plus_millis(sc.span_ms).unwrap_or(start);
        let cases = api::cases(ids, start, to);
        eprintln!("bench: API, {} requests per route", args.api_requests);
        rep.api = api::measure(target.client().await, t, &cases, args.api_requests).await?;
        rep.api_note = format!(
            "`App::handle` called in process, one request at a time ({} measured per route after 5 \
             warm-up requests), over the standard fleet's table ({} devices, {stored} readings, \
             its aggregates and device items); DynamoDB Local directly, no proxy. Device IDs \
             rotate over the fleet.",
            args.api_requests, sc.devices
        );
        save(&mut rep, &args.out)?;
    }

    // Phase 3: release binaries and their sizes.
    if args.build {
        let mut cargs = vec!["build", "--release"];
        for f in FUNCTIONS {
            cargs.extend(["-p", f]);
        }
        if let Err(e) = artifacts::run_tool("cargo", &cargs) {
            rep.notes.push(format!("release build failed: {e}"));
        }
    }
    save(&mut rep, &args.out)?;

    // Phase 4: start-up and memory of the release binaries.
    if args.startup {
        let t = table_name("startup");
        tidemark_store::create_table(&target.client().await, &t, &tidemark_schema::TABLE).await?;
        tables.push(t.clone());
        let mut used = Vec::new();
        for f in FUNCTIONS {
            let bin = args.binaries.join(f);
            if !bin.exists() {
                continue;
            }
            let (event, source) = match f {
                "tidemark-ingest" => event_file("kinesis-readings.json", "{\"Records\":[]}"),
                "tidemark-aggregator" => event_file("ddb-stream-readings.json", "{\"Records\":[]}"),
                _ => event_file("apigw-get-device.json", APIGW_FALLBACK),
            };
            used.push(format!("{f}: {source}"));
            eprintln!("bench: cold starts of {f}");
            let env = runtime::lambda_env(f, &t, &endpoint);
            match runtime::startup(f, &bin, &env, event, 5).await {
                Ok(s) => rep.startup.push(s),
                Err(e) => rep.notes.push(format!("start-up of {f} not measured: {e}")),
            }
        }
        rep.startup_note = if used.is_empty() {
            "not measured: no release binaries in target/release (run without --skip-build)".into()
        } else {
            format!(
                "Binaries from {}, each spawned 5 times under a fake Runtime API on loopback, with Lambda's \
                 environment (AWS_LAMBDA_FUNCTION_NAME, MEMORY_SIZE 256, VERSION, LOG_GROUP/STREAM, \
                 AWS_LAMBDA_RUNTIME_API) and TABLE_NAME, TIDEMARK_LOCAL, TIDEMARK_DYNAMODB_ENDPOINT \
                 pointing at DynamoDB Local. Ready = first `GET …/invocation/next` after spawn; \
                 peak RSS = VmHWM after the first response. Events: {}.",
                args.binaries.display(),
                used.join(", ")
            )
        };
    } else {
        rep.startup_note = "not measured (--skip-startup)".into();
    }

    save(&mut rep, &args.out)?;

    if let Some(d) = own {
        d.stop().await;
    } else if !args.keep_tables {
        let client = target.client().await;
        for t in &tables {
            let _ = tidemark_store::delete_table(&client, t).await;
        }
    } else {
        rep.notes
            .push(format!("tables kept: {}", tables.join(", ")));
    }

    // Phase 5, last (it compiles criterion with the release profile): CPU per reading from
    // the ingest criterion bench.
    if args.criterion {
        rep.cpu_note = match artifacts::run_tool(
            "cargo",
            &[
                "bench",
                "-p",
                "tidemark-ingest",
                "--bench",
                "decode",
                "--",
                "--warm-up-time",
                "1",
                "--measurement-time",
                "3",
            ],
        ) {
            Ok(()) => "`cargo bench -p tidemark-ingest --bench decode -- --warm-up-time 1 \
                       --measurement-time 3`, run by this benchmark; figures parsed from \
                       target/criterion (mean estimate)."
                .into(),
            Err(e) => format!("criterion run failed: {e}"),
        };
    }
    save(&mut rep, &args.out)?;
    eprintln!("bench: wrote {}", args.out.join("REPORT.md").display());
    Ok(())
}

/// Refreshes what is read from disk, checks the targets and writes both report files.
fn save(rep: &mut BenchReport, out: &std::path::Path) -> Result<(), BenchError> {
    rep.cpu = artifacts::criterion_results("ingest");
    if rep.cpu_note.is_empty() {
        rep.cpu_note = if rep.cpu.is_empty() {
            "not measured: run `cargo bench -p tidemark-ingest --bench decode` (skipped here)"
                .into()
        } else {
            "from an earlier `cargo bench -p tidemark-ingest --bench decode` (not re-run by this \
             invocation); figures parsed from target/criterion"
                .into()
        };
    }
    rep.sizes_x86_64 = artifacts::x86_64_sizes();
    rep.sizes_arm64 = artifacts::arm64_sizes();
    rep.targets = report::check_targets(rep, TEMPLATE_AGGREGATOR_BATCH);
    std::fs::create_dir_all(out)?;
    std::fs::write(out.join("report.json"), serde_json::to_vec_pretty(&*rep)?)?;
    std::fs::write(out.join("REPORT.md"), report::markdown(rep))?;
    Ok(())
}

/// The DynamoDB Local a run uses: the main one when shared or `keep`, else a fresh one.
async fn instance(
    args: &Args,
    main: &Target,
    keep: bool,
) -> Result<(Option<LocalDynamo>, Target), BenchError> {
    if args.shared_dynamodb || keep {
        return Ok((None, main.clone()));
    }
    let d = LocalDynamo::start().await?;
    let t = Target { dynamodb: d.addr };
    Ok((Some(d), t))
}

/// Stops a run's own instance, or deletes its table from the shared one.
async fn release(inst: Option<LocalDynamo>, target: &Target, table: &str, args: &Args) {
    match inst {
        Some(d) => d.stop().await,
        None if !args.keep_tables => {
            let _ = tidemark_store::delete_table(&target.client().await, table).await;
        }
        None => {}
    }
}

fn log_run(r: &run::DesignRun) {
    eprintln!(
        "bench:   {:.3} WRU/reading, ingest {:.0}/s, aggregator {:.0}/s, {:.1} s",
        r.wru_per_reading(),
        r.ingest.readings_per_second(),
        r.aggregator.readings_per_second(),
        r.seconds
    );
    log_ops(r);
}

fn log_ops(r: &run::DesignRun) {
    for (side, u) in [
        ("ingest", &r.ingest.units),
        ("aggregator", &r.aggregator.units),
    ] {
        for (op, s) in &u.totals.by_operation {
            eprintln!(
                "bench:     {side} {op}: {} calls, {:.1} units, {:.1} ms/call, {} failed conditions, {} errors",
                s.calls,
                s.capacity.total,
                s.upstream_ms / s.calls.max(1) as f64,
                s.conditional_failures,
                s.other_errors
            );
        }
    }
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("{msg}");
            std::process::exit(2);
        }
    };
    let outcome = tokio::select! {
        r = main_inner(args) => r,
        why = stop_signal() => Err(BenchError::Other(format!(
            "{why}: stopped the DynamoDB Local and binaries this run started; the report \
             holds the phases that finished"
        ))),
    };
    if let Err(e) = outcome {
        eprintln!("tidemark-bench: {e}");
        std::process::exit(1);
    }
}

/// Ctrl-C or SIGTERM. Returning drops the run, and with it the DynamoDB Local and function
/// binaries it started (their handles kill on drop), so none is left running.
async fn stop_signal() -> &'static str {
    #[cfg(unix)]
    if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    {
        tokio::select! {
            r = tokio::signal::ctrl_c() => if r.is_ok() { return "interrupted" },
            _ = term.recv() => return "terminated",
        }
    }
    if tokio::signal::ctrl_c().await.is_ok() {
        return "interrupted";
    }
    std::future::pending().await
}
