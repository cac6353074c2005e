//! Offline-device detection, what it costs: measured with DynamoDB's own consumed capacity
//! (DynamoDB Local's `ConsumedCapacity`, table and GSI apart, through the metering proxy).
//! Writes `bench/OFFLINE.md` and `bench/offline.json`.
//!
//! 1. **Deadline upkeep** (the alerts role keeping `lastArrivalAt` and the GSI2 watch key on
//!    the device item). The standard fleet (200 devices, one reading a minute each, every
//!    reading jittered by up to ±10 s and arriving 50 ms to 1 s after its timestamp) goes
//!    through ingest and the alerts role, called in process, for each fleet window
//!    `OFFLINE_AFTER_SECONDS` = 0 (off: the baseline), 300, 900 and 3600, with
//!    `DEVICE_REFRESH_SECONDS` as the template has it (86400) and no thresholds. Batches are cut as the template's
//!    mappings cut them: a batching window of 1 s (ingest and alerts, the template defaults)
//!    opens at the first record that arrives, not on a minute or slot boundary; every record
//!    of the alerts mapping's filter (readings, device items, alert items, heartbeats) is read
//!    from the table's real DynamoDB stream, the alerts role's own device writes included (an
//!    echo batch of its own when no reading arrives within its window). Time is simulated:
//!    each record's `approximateArrivalTimestamp` is its simulated arrival, and the alerts
//!    role's clock ([`AggregatorConfig::clock`], fixed) is moved to each invocation's time.
//!    After a warm-up (every device registered and watched), write units per stored reading
//!    are summed over the measured hours; the upkeep cost is the difference to the run with
//!    the window off. The watchdog's heartbeats are left out here (a fixed cost per minute
//!    and shard, not per reading, measured in part 2, and paid with the window off too: the
//!    watchdog runs whatever the fleet default is).
//! 2. **Watchdog runs** over 100,000 devices of which 1 % are offline, seeded directly
//!    (`BatchWriteItem`, 25 items a call, 8 calls in flight): 99,000 watched with check times
//!    spread evenly over the next window, 1,000 offline (`CONNECTIVITY#offline#<n>`, with their
//!    open alerts). The real [`Watchdog::run`] over [`DynamoWatch`], whose client goes through
//!    the metering proxy; its heartbeats go to a stand-in ([`Heartbeats`]) that marks every
//!    shard's heartbeat item passed at the moment it is sent (what ingest and the alerts role
//!    do; their cost is measured apart, by sending heartbeat records through the real ingest
//!    and alerts role on the same table before seeding). The watchdog's clock is fixed and
//!    moved so that exactly 0, 100 and 1,000 watched devices fall due (plus 100 whose newer
//!    readings should postpone them). Read and write units per run and per due device, both
//!    as the watchdog counts them (`Report`) and as the proxy saw them, the latter also with
//!    AWS's minimum charge for reads that find nothing (which DynamoDB Local reports as 0).
//!
//! Benchmarks report; they never assert (and never on wall-clock speed).
//!
//!   cargo run --release -p tidemark-bench --example offline [-- --quick] [--only upkeep|watchdog]
//!       [--windows 0,300,900,3600] [--out DIR] [--render]
//!
//! The pieces: [`args`], the command line; [`fleet`], the devices; [`pipeline`] and
//! [`follower`], records delivered to ingest and the alerts role as their mappings would;
//! [`metering`], what each function spent; [`table`], direct (unmetered) seeding and counts;
//! [`upkeep`], part 1; [`watchdog`] and [`heartbeat`], part 2; [`report`], the report.
//!
//! [`AggregatorConfig::clock`]: tidemark_aggregator::AggregatorConfig::clock
//! [`Watchdog::run`]: tidemark_watchdog::Watchdog::run
//! [`DynamoWatch`]: tidemark_watchdog::DynamoWatch
//! [`Heartbeats`]: tidemark_watchdog::Heartbeats

mod args;
mod fleet;
mod follower;
mod heartbeat;
mod metering;
mod pipeline;
mod report;
mod table;
mod upkeep;
mod watchdog;

use tidemark_bench::BenchError;
use tidemark_bench::local_ddb::LocalDynamo;
use tidemark_bench::run::Target;
use tidemark_schema::Timestamp;

use args::Args;
use report::{Report, save};
use upkeep::upkeep_run;
use watchdog::watchdog_part;

#[tokio::main]
async fn main() -> Result<(), BenchError> {
    // The functions' warnings (a device not decided, a batch failed) go to stderr.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let dir = &args.dir;
    if args.render {
        let rep: Report = serde_json::from_slice(&std::fs::read(dir.join("offline.json"))?)?;
        return save(&rep, dir);
    }
    let mut rep = Report {
        command: args.command(),
        profile: if cfg!(debug_assertions) {
            "debug".into()
        } else {
            "release".into()
        },
        ..Report::default()
    };
    // One part only: the other is kept from the last report.
    if args.only.is_some()
        && let Ok(bytes) = std::fs::read(dir.join("offline.json"))
        && let Ok(last) = serde_json::from_slice::<Report>(&bytes)
    {
        rep.upkeep = last.upkeep;
        rep.watchdog = last.watchdog;
    }
    let (devices, warmup_min, measured_min) = if args.quick {
        (50, 30, 60)
    } else {
        (200, 30, 120)
    };
    let (watched, offline) = if args.quick {
        (9_900, 100)
    } else {
        (99_000, 1_000)
    };
    if args.runs("upkeep") {
        let local = LocalDynamo::start().await?;
        let target = Target {
            dynamodb: local.addr,
        };
        // Simulated time: the fleet starts 3 hours ago on the hour (ingest's time checks
        // read the system clock; the alerts role's clock follows the simulation).
        let start = Timestamp::now()
            .hour_start()
            .minus_millis(3 * 3_600_000)
            .unwrap_or(Timestamp::MIN);
        // The windows at once, each on its own table.
        let runs = futures::future::join_all(
            args.windows
                .iter()
                .map(|w| upkeep_run(&target, *w, devices, start, warmup_min, measured_min)),
        )
        .await;
        local.stop().await;
        rep.upkeep = runs.into_iter().collect::<Result<_, _>>()?;
        save(&rep, dir)?;
    }
    if args.runs("watchdog") {
        let local = LocalDynamo::start().await?;
        let target = Target {
            dynamodb: local.addr,
        };
        let w = watchdog_part(&target, watched, offline, 900, 4).await;
        local.stop().await;
        rep.watchdog = Some(w?);
        save(&rep, dir)?;
    }
    eprintln!("offline: wrote {}", dir.join("OFFLINE.md").display());
    Ok(())
}
