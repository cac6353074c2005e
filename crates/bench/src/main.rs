//! `tidemark-bench`: runs every benchmark of issue 9 and writes `bench/REPORT.md` and
//! `bench/report.json`. `make bench` runs it in release mode; `--quick` runs small fleets.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use hyper::body::Bytes;
use tidemark_bench::artifacts::{self, FUNCTIONS, workspace_root};
use tidemark_bench::local_ddb::LocalDynamo;
use tidemark_bench::report::{self, BenchReport};
use tidemark_bench::run::{self, Design, Target};
use tidemark_bench::scenario::{MAX_STREAM_BATCH, Scenario, TEMPLATE_AGGREGATOR_BATCH};
use tidemark_bench::{BenchError, api, runtime};
use tidemark_schema::Timestamp;

const USAGE: &str = "tidemark-bench [--quick] [--skip-build] [--skip-criterion] [--skip-startup]
    [--standard-devices N] [--standard-minutes N] [--one-hz-minutes N] [--hot-millis N]
    [--baseline-max-readings N|all] [--api-requests N] [--only standard|1hz|hot]
    [--no-baseline] [--shared-dynamodb] [--keep-tables] [--out DIR]

Runs the scenarios through Tidemark and the textbook baseline on a DynamoDB Local of its own
(started from .local/, in memory; --shared-dynamodb uses TIDEMARK_DYNAMODB_ENDPOINT or
127.0.0.1:8000 instead) and writes DIR/REPORT.md and DIR/report.json (DIR: bench/).
Defaults follow DESIGN §8: 1,000 devices for 60 simulated minutes, 50 devices at 1 Hz for 10,
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
        out: workspace_root().join("bench"),
        keep_tables: false,
        only: None,
        baseline: true,
        shared_dynamodb: false,
        standard_devices: if quick { 50 } else { 1_000 },
        standard_minutes: if quick { 10 } else { 60 },
        one_hz_minutes: if quick { 1 } else { 10 },
        hot_millis: if quick { 250 } else { 5_000 },
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
    let endpoint = std::env::var(tidemark_store::client::DYNAMODB_ENDPOINT_ENV)
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
            format!("make bench (runs: {})", direct.trim_end())
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
    let machine = artifacts::machine();
    let mut notes = Vec::new();

    if args.build {
        let mut cargs = vec!["build", "--release"];
        for f in FUNCTIONS {
            cargs.extend(["-p", f]);
        }
        artifacts::run_tool("cargo", &cargs)?;
    }
    let mut cpu_note = String::new();
    if args.criterion {
        match artifacts::run_tool(
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
            Ok(()) => {
                cpu_note = "`cargo bench -p tidemark-ingest --bench decode -- --warm-up-time 1 \
                            --measurement-time 3`, run by this benchmark; figures parsed from \
                            target/criterion (mean estimate)."
                    .into()
            }
            Err(e) => cpu_note = format!("criterion run failed: {e}"),
        }
    }
    let cpu = artifacts::criterion_results("ingest");
    if cpu_note.is_empty() {
        cpu_note = if cpu.is_empty() {
            "not measured: run `cargo bench -p tidemark-ingest --bench decode` (skipped here)"
                .into()
        } else {
            "from an earlier `cargo bench -p tidemark-ingest --bench decode` (not re-run by this \
             invocation); figures parsed from target/criterion"
                .into()
        };
    }

    // Scenarios: each with the template's aggregator BatchSize; the two fleets whose WRU
    // target depends on batching also with the largest BatchSize streams allow.
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
    let variants = vec![
        Scenario::standard(
            args.standard_devices,
            args.standard_minutes,
            MAX_STREAM_BATCH,
        ),
        Scenario::one_hz(one_hz_devices, args.one_hz_minutes, MAX_STREAM_BATCH),
    ];
    let start = run::simulated_start(Timestamp::now());
    let mut runs = Vec::new();
    let mut tables = Vec::new();
    let mut api_table = None;
    scenarios.retain(|s| args.only.as_deref().is_none_or(|o| o == s.name));
    let mut variants = variants;
    variants.retain(|s| args.only.as_deref().is_none_or(|o| o == s.name));
    for sc in scenarios.iter().chain(variants.iter()) {
        let readings = sc.readings(start);
        let label = format!("{}-b{}", sc.name, sc.aggregator_batch_size);
        let t = table_name(&format!("{label}-tidemark"));
        eprintln!("bench: {label} Tidemark: {} readings", readings.len());
        let r = run::run(&target, sc, Design::Tidemark, &t, &readings, start).await?;
        eprintln!(
            "bench:   {:.3} WRU/reading, ingest {:.0}/s, aggregator {:.0}/s, {:.1} s",
            r.wru_per_reading(),
            r.ingest.readings_per_second(),
            r.aggregator.readings_per_second(),
            r.seconds
        );
        log_ops(&r);
        if sc.name == "standard" && api_table.is_none() {
            api_table = Some((t.clone(), sc.clone()));
        }
        tables.push(t);
        runs.push(r);
        if args.baseline && sc.aggregator_batch_size == TEMPLATE_AGGREGATOR_BATCH {
            let n = args
                .baseline_max
                .map_or(readings.len(), |m| m.min(readings.len()));
            let t = table_name(&format!("{label}-baseline"));
            eprintln!("bench: {label} baseline: {n} readings");
            let r = run::run(&target, sc, Design::Baseline, &t, &readings[..n], start).await?;
            eprintln!(
                "bench:   {:.3} WRU/reading, ingest {:.0}/s, aggregator {:.0}/s, {:.1} s",
                r.wru_per_reading(),
                r.ingest.readings_per_second(),
                r.aggregator.readings_per_second(),
                r.seconds
            );
            log_ops(&r);
            tables.push(t);
            runs.push(r);
        }
    }
    scenarios.extend(variants);

    // API latency over the standard fleet's table.
    let mut api_results = Vec::new();
    let mut api_note = String::from("not measured");
    if let Some((t, sc)) = &api_table {
        let ids: Vec<String> = (0..sc.devices)
            .map(|i| sc.device_id(i).to_string())
            .collect();
        let to = start.plus_millis(sc.span_ms).unwrap_or(start);
        let cases = api::cases(ids, start, to);
        eprintln!("bench: API, {} requests per route", args.api_requests);
        api_results = api::measure(target.client().await, t, &cases, args.api_requests).await?;
        api_note = format!(
            "`App::handle` called in process, one request at a time ({} measured per route after 5 \
             warm-up requests), over the standard fleet's table ({} devices, {} readings, its \
             aggregates and device items); DynamoDB Local directly, no proxy. Device IDs rotate \
             over the fleet.",
            args.api_requests,
            sc.devices,
            runs.iter()
                .find(|r| r.design == Design::Tidemark && r.scenario == "standard")
                .map_or(0, |r| r.readings_stored)
        );
    }

    // Start-up and memory of the release binaries.
    let mut startup = Vec::new();
    let startup_note;
    if args.startup {
        let t = table_name("startup");
        tidemark_store::create_table(&target.client().await, &t, &tidemark_schema::TABLE).await?;
        tables.push(t.clone());
        let mut used = Vec::new();
        for f in FUNCTIONS {
            let bin = artifacts::target_dir().join("release").join(f);
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
                Ok(s) => startup.push(s),
                Err(e) => notes.push(format!("start-up of {f} not measured: {e}")),
            }
        }
        startup_note = if used.is_empty() {
            "not measured: no release binaries in target/release (run without --skip-build)".into()
        } else {
            format!(
                "Each binary spawned 5 times under a fake Runtime API on loopback, with Lambda's \
                 environment (AWS_LAMBDA_FUNCTION_NAME, MEMORY_SIZE 256, VERSION, LOG_GROUP/STREAM, \
                 AWS_LAMBDA_RUNTIME_API) and TABLE_NAME, CURSOR_SECRET, TIDEMARK_DYNAMODB_ENDPOINT \
                 pointing at DynamoDB Local. Ready = first `GET …/invocation/next` after spawn; \
                 peak RSS = VmHWM after the first response. Events: {}.",
                used.join(", ")
            )
        };
    } else {
        startup_note = "not measured (--skip-startup)".into();
    }

    if let Some(d) = own {
        d.stop().await;
    } else if !args.keep_tables {
        let client = target.client().await;
        for t in &tables {
            let _ = tidemark_store::delete_table(&client, t).await;
        }
    } else {
        notes.push(format!("tables kept: {}", tables.join(", ")));
    }

    if own_note(&args) {
        notes.push(
            "DynamoDB Local: a dedicated in-memory instance started by the benchmark (the shared \
             one on :8000 serves every test of the workspace); both designs ran on it."
                .into(),
        );
    }
    notes.push(
        "The metering proxy re-serialises each request to add ReturnConsumedCapacity, which \
         adds a little latency to both designs alike."
            .into(),
    );
    if let Some(h) = runs
        .iter()
        .find(|r| r.scenario == "hot" && r.design == Design::Tidemark)
    {
        notes.push(format!(
            "Hot device: at 2,000 readings/s two readings share each millisecond, and the key \
             has millisecond precision (DESIGN §2), so {} readings sent became {} stored items: \
             the later reading of a millisecond replaces the earlier (within one ingest batch the \
             batch writer keeps the last; across batches the second put overwrites, which the \
             aggregator sees as a corrected reading). A device that really samples faster than \
             1 kHz must batch its samples into one record per millisecond, or the key would need \
             sub-millisecond precision.",
            h.readings_sent, h.readings_stored
        ));
    }

    let mut rep = BenchReport {
        date_utc: Timestamp::now().to_string(),
        command,
        mode: if args.quick {
            "quick".into()
        } else {
            "full".into()
        },
        machine,
        dynamodb_endpoint: endpoint,
        scenarios,
        runs,
        baseline_max_readings: args.baseline_max,
        api: api_results,
        api_note,
        cpu,
        cpu_note,
        sizes_x86_64: artifacts::x86_64_sizes(),
        sizes_arm64: artifacts::arm64_sizes(),
        startup,
        startup_note,
        targets: Vec::new(),
        notes,
    };
    rep.targets = report::check_targets(&rep, TEMPLATE_AGGREGATOR_BATCH);
    std::fs::create_dir_all(&args.out)?;
    std::fs::write(
        args.out.join("report.json"),
        serde_json::to_vec_pretty(&rep)?,
    )?;
    std::fs::write(args.out.join("REPORT.md"), report::markdown(&rep))?;
    eprintln!("bench: wrote {}", args.out.join("REPORT.md").display());
    Ok(())
}

fn own_note(a: &Args) -> bool {
    !a.shared_dynamodb
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
    if let Err(e) = main_inner(args).await {
        eprintln!("tidemark-bench: {e}");
        std::process::exit(1);
    }
}
