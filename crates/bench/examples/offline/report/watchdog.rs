//! The report's part 2 section: the watchdog runs' read and write units, and the same scaled
//! to a month.

use tidemark_schema::keys;

use super::{RUNS_PER_MONTH, thousands, usd_month_per_run, usd_per_thousand};
use crate::watchdog::WatchPart;

pub(super) fn watchdog_md(w: &WatchPart) -> String {
    let mut md = String::from("\n## 2. Watchdog runs: read and write units\n\n");
    md.push_str(&format!(
        "{} devices, seeded directly with `BatchWriteItem` (25 items a call, 8 calls in flight; \
         {} items with the offline devices' open alerts, plus the last readings of the devices \
         that fall due, through ingest; {:.0} s): {} watched with a {} s window, check times \
         spread evenly over the next {} s; {} offline (GSI2 `{}#<n>`, `offline` state set). The \
         real `Watchdog::run` with `DynamoWatch`, its client behind the metering proxy. \
         Heartbeats: {} stream shards, sent to a stand-in for Kinesis (a `Heartbeats` \
         implementation) that marks each shard's heartbeat item passed the moment it is sent, \
         as ingest and the alerts role would (their cost is measured apart, below); so the \
         watermark is the run's own time. The watchdog's clock is fixed and set so that \
         exactly the devices named below fall due; each of their last readings is stored, so \
         a run reads what it would in production.\n\n",
        thousands(w.watched + w.offline),
        thousands(w.seeded_items),
        w.seed_seconds,
        thousands(w.watched),
        w.window_s,
        w.window_s,
        thousands(w.offline),
        keys::OFFLINE_GSI2PK,
        w.shards
    ));
    md.push_str(
        "| run | due (expected) | opened | postponed | lost / failed | RRU, DynamoDB Local | RRU, AWS minimums incl. | WRU (table + GSI1 + GSI2) | RRU / due device | WRU / due device | `Report` RRU / WRU |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in &w.runs {
        let per = |v: f64| {
            if r.due == 0 {
                "–".to_owned()
            } else {
                format!("{:.2}", v / r.due as f64)
            }
        };
        let gsi = |i: &str| r.spent.wru_by_index.get(i).copied().unwrap_or(0.0);
        md.push_str(&format!(
            "| {} | {} ({}) | {} | {} | {} / {} | {:.1} | {:.1} | {:.1} ({:.1} + {:.1} + {:.1}) | {} | {} | {:.1} / {:.1} |\n",
            r.label,
            r.due,
            r.expected_due,
            r.opened,
            r.postponed,
            r.lost,
            r.failed,
            r.spent.rru,
            r.spent.rru_aws(),
            r.spent.wru,
            r.spent.wru_table,
            gsi("GSI1"),
            gsi("GSI2"),
            per(r.spent.rru_aws()),
            per(r.spent.wru),
            r.report_rru,
            r.report_wru,
        ));
    }
    md.push_str(&format!(
        "\nIn `{}#<n>` after the runs: {} devices (the {} seeded and those opened).\n\n\
         Calls by operation (calls / units as DynamoDB Local reported them):\n\n\
         | run | operations |\n|---|---|\n",
        keys::OFFLINE_GSI2PK,
        thousands(w.offline_after_runs),
        thousands(w.offline)
    ));
    for r in &w.runs {
        let ops: Vec<String> = r
            .spent
            .by_operation
            .iter()
            .map(|(op, (calls, units))| format!("{op} {calls} / {units:.1}"))
            .collect();
        md.push_str(&format!("| {} | {} |\n", r.label, ops.join(", ")));
    }
    md.push_str("\n### Scaled to a month\n\n");
    let steady = w.runs.iter().find(|r| r.expected_due == 0);
    let base_rru = steady.map_or(0.0, |s| s.spent.rru_aws());
    let base_wru = steady.map_or(0.0, |s| s.spent.wru);
    if let Some(s) = steady {
        md.push_str(&format!(
            "- **Nothing due** ({} watched, {} offline): {:.1} RRU (AWS minimums incl.) and \
             {:.1} WRU a run, {} RRU a month: **${:.3} a month**. One GSI2 query per watch \
             partition ({}) and one strongly consistent query of the heartbeat items, whatever \
             the fleet's size.\n",
            thousands(w.watched),
            thousands(w.offline),
            s.spent.rru_aws(),
            s.spent.wru,
            thousands((s.spent.rru_aws() * RUNS_PER_MONTH).round() as u64),
            usd_month_per_run(s.spent.rru_aws(), s.spent.wru),
            keys::OFFLINE_WATCH_PARTITIONS
        ));
    }
    for r in w.runs.iter().filter(|r| r.opened > 0) {
        let rru = (r.spent.rru_aws() - base_rru) / r.opened as f64;
        let wru = (r.spent.wru - base_wru) / r.opened as f64;
        md.push_str(&format!(
            "- **{} silent devices at once**: {:.2} RRU and {:.2} WRU per device above the \
             nothing-due run: ${:.4} per 1,000 offline alerts opened (once per silence, not per \
             minute; the alerts role's publishing of each `opened` event is not in it).\n",
            thousands(r.opened),
            rru,
            wru,
            usd_per_thousand(rru, wru)
        ));
    }
    if let Some(r) = w
        .runs
        .iter()
        .find(|r| r.label.contains("newer arrival") && r.due > 0)
    {
        let rru = (r.spent.rru_aws() - base_rru) / r.due as f64;
        let wru = (r.spent.wru - base_wru) / r.due as f64;
        if r.postponed == r.due {
            md.push_str(&format!(
                "- **A postponement** (due, but its readings show a newer arrival): {rru:.2} \
                 RRU and {wru:.2} WRU per device.\n"
            ));
        } else {
            md.push_str(&format!(
                "- **A due device whose readings show a newer arrival**: {rru:.2} RRU and \
                 {wru:.2} WRU per device and run; {} of {} were postponed, {} failed (see \
                 Findings), and a failed one is due again, and read again, at every run until \
                 its new deadline passes.\n",
                r.postponed, r.due, r.failed
            ));
        }
    }
    let h = &w.heartbeat;
    let beats = (h.rounds * h.shards as u64).max(1) as f64;
    let per_run_wru = (h.ingest.wru + h.alerts.wru) / h.rounds.max(1) as f64;
    let per_run_rru = (h.ingest.rru_aws() + h.alerts.rru_aws()) / h.rounds.max(1) as f64;
    md.push_str(&format!(
        "- **The heartbeats' way through the pipeline** (measured: {} rounds of heartbeat \
         records into each of {} shards, through the real ingest and alerts role on the same \
         table, the role's own marks echoed back): ingest {:.2} WRU, the alerts role {:.2} WRU \
         per heartbeat ({} ingest and {} alerts invocations in all): {:.1} WRU and {:.1} RRU \
         per run with {} shards, **${:.3} a month**, paid whatever the window (the watchdog \
         always runs). Lambda invocations (4 ingest + 2 alerts per run and 4 shards) are not \
         in it.\n",
        h.rounds,
        h.shards,
        h.ingest.wru / beats,
        h.alerts.wru / beats,
        h.ingest_invocations,
        h.alerts_invocations,
        per_run_wru,
        per_run_rru,
        h.shards,
        usd_month_per_run(per_run_rru, per_run_wru)
    ));
    md
}
