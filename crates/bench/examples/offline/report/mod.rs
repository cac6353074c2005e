//! `bench/OFFLINE.md` and `bench/offline.json`: what the runs measured, the targets they are
//! held to, and the prices that scale units to dollars. Each part's section and the findings
//! are rendered by a module of their own.

mod findings;
mod upkeep;
mod watchdog;

use serde::{Deserialize, Serialize};
use tidemark_bench::BenchError;

use crate::upkeep::UpkeepRun;
use crate::watchdog::WatchPart;
use findings::findings_md;
use upkeep::upkeep_md;
use watchdog::watchdog_md;

/// On-demand prices assumed (us-east-1, USD per million request units).
const USD_PER_M_RRU: f64 = 0.25;
const USD_PER_M_WRU: f64 = 1.25;
/// Watchdog runs in a 30-day month at one a minute.
const RUNS_PER_MONTH: f64 = 30.0 * 24.0 * 60.0;

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Report {
    pub command: String,
    pub profile: String,
    pub upkeep: Vec<UpkeepRun>,
    pub watchdog: Option<WatchPart>,
}

fn usd_month_per_run(rru: f64, wru: f64) -> f64 {
    (rru * USD_PER_M_RRU + wru * USD_PER_M_WRU) * RUNS_PER_MONTH / 1e6
}

fn usd_per_thousand(rru: f64, wru: f64) -> f64 {
    (rru * USD_PER_M_RRU + wru * USD_PER_M_WRU) * 1000.0 / 1e6
}

use tidemark_bench::report::thousands;

/// The upkeep's extra write units per reading over the run with the window off.
fn upkeep_extra(rep: &Report, r: &UpkeepRun) -> Option<f64> {
    let base = rep.upkeep.iter().find(|b| b.offline_after_s == 0)?;
    Some(r.alerts_wru() - base.alerts_wru())
}

fn markdown(rep: &Report) -> String {
    let mut md = String::from("# Offline devices: what detection costs\n\n");
    md.push_str(&format!(
        "Produced by `{}` (`make bench` runs it with `--release`; this report came from a {} \
         build, which changes no unit). How it measures is in the example's doc comment \
         (`crates/bench/examples/offline/main.rs`). Every unit below is DynamoDB's own \
         `ConsumedCapacity` (DynamoDB Local, a fresh in-memory instance per part, \
         `ReturnConsumedCapacity: INDEXES` added by the metering proxy), measured in this run; \
         dollar figures are *scaled* from them. No figure here is a wall-clock measurement, \
         and nothing is asserted.\n\n\
         Prices assumed: on-demand, us-east-1: ${USD_PER_M_RRU:.2} per million read request \
         units (RRU), ${USD_PER_M_WRU:.2} per million write request units (WRU); a month is \
         30 days, {} watchdog runs at one a minute.\n\n",
        rep.command,
        rep.profile,
        thousands(RUNS_PER_MONTH as u64)
    ));
    md.push_str("## Targets\n\n| target | goal | measured | verdict |\n|---|---|---|---|\n");
    for r in rep.upkeep.iter().filter(|r| r.offline_after_s > 0) {
        let Some(extra) = upkeep_extra(rep, r) else {
            continue;
        };
        let gsi2 = r.per(r.alerts.wru_by_index.get("GSI2").copied().unwrap_or(0.0));
        let table = rep
            .upkeep
            .iter()
            .find(|b| b.offline_after_s == 0)
            .map_or(0.0, |b| {
                r.per(r.alerts.wru_table) - b.per(b.alerts.wru_table)
            });
        let floor = r.floor_wru();
        let verdict = if extra.abs() < 0.0005 {
            "met".to_owned()
        } else {
            format!(
                "**not reachable** (docs/decisions/0005-offline-upkeep-floor.md): the floor is \
                 one index move per window, {floor:.4} here; measured {:.2}× it",
                extra / floor
            )
        };
        md.push_str(&format!(
            "| Deadline upkeep, `OFFLINE_AFTER_SECONDS` = {} | 0 extra WRU per reading beyond \
             the device item the alerts role already writes | {extra:+.4} WRU/reading (table \
             {table:+.4}, GSI2 {gsi2:+.4}) | {verdict} |\n",
            r.offline_after_s
        ));
    }
    if let Some(w) = &rep.watchdog
        && let Some(s) = w.runs.iter().find(|r| r.expected_due == 0)
    {
        let device_reads: u64 = ["GetItem", "BatchGetItem"]
            .iter()
            .filter_map(|op| s.spent.by_operation.get(*op))
            .map(|(calls, _)| calls)
            .sum();
        md.push_str(&format!(
            "| Watchdog run with nothing due, {} devices ({} offline) | reads no device: its \
             cost grows with the devices falling silent, not with the fleet | {} device reads; \
             {} queries, {:.1} RRU as DynamoDB Local reports them, {:.1} with AWS's minimum \
             charges; {:.1} WRU: ${:.3} a month | {} |\n",
            thousands(w.watched + w.offline),
            thousands(w.offline),
            device_reads,
            s.spent.by_operation.get("Query").map_or(0, |(c, _)| *c),
            s.spent.rru,
            s.spent.rru_aws(),
            s.spent.wru,
            usd_month_per_run(s.spent.rru_aws(), s.spent.wru),
            if device_reads == 0 {
                "met"
            } else {
                "**missed**"
            }
        ));
    }
    if let Some(w) = &rep.watchdog
        && let Some(r) = w.runs.iter().find(|r| r.label.contains("newer arrival"))
    {
        md.push_str(&format!(
            "| Watchdog: a due device whose readings show a newer arrival is postponed | all {} \
             postponed | {} postponed, {} failed | {} |\n",
            r.expected_due,
            r.postponed,
            r.failed,
            if r.postponed == r.expected_due {
                "met"
            } else {
                "**missed** (a bug: Findings)"
            }
        ));
    }
    if !rep.upkeep.is_empty() {
        md.push_str(&upkeep_md(rep));
    }
    if let Some(w) = &rep.watchdog {
        md.push_str(&watchdog_md(w));
    }
    md.push_str(&findings_md(rep));
    md.push_str(
        "\n## Running it\n\n\
         ```sh\n\
         cargo run --release -p tidemark-bench --example offline            # both parts, writes bench/OFFLINE.md and bench/offline.json\n\
         cargo run -p tidemark-bench --example offline -- --quick --out /tmp  # 50 devices for 30 + 60 min, 10,000 devices\n\
         cargo run -p tidemark-bench --example offline -- --only upkeep --windows 0,3600\n\
         cargo run -p tidemark-bench --example offline -- --render           # the report again from offline.json\n\
         ```\n\n\
         It starts DynamoDB Local instances of its own (installed by `scripts/services.sh \
         start`); no Kinesis is needed.\n",
    );
    md
}

pub fn save(rep: &Report, dir: &std::path::Path) -> Result<(), BenchError> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("offline.json"), serde_json::to_vec_pretty(rep)?)?;
    std::fs::write(dir.join("OFFLINE.md"), markdown(rep))?;
    Ok(())
}
