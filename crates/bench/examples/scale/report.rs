//! `bench/SCALE.md` from what the parts measured.

use std::fmt::Write;

use tidemark_bench::report::thousands;

use crate::keys::{self, HotKey, KeysPart, Source};

/// DynamoDB's write limit on one partition key (table or index), units a second.
const KEY_LIMIT: u64 = 1_000;

fn source(s: Source) -> &'static str {
    match s {
        Source::Ingest => "ingest",
        Source::Rollups => "rollups role",
        Source::Alerts => "alerts role",
        Source::Watchdog => "watchdog",
    }
}

fn verdict(over: bool) -> &'static str {
    if over { "**over**" } else { "under" }
}

fn row(out: &mut String, h: &HotKey) {
    let _ = writeln!(
        out,
        "| {} | `{}` | {} | {} | {} | {} | {} | {} | {} |",
        h.index,
        h.pattern,
        source(h.source),
        if h.shared { "fleet" } else { "one device" },
        h.partitions,
        h.peak_units,
        h.at.get(11..19).unwrap_or(&h.at),
        h.scaled_units,
        verdict(h.scaled_units > KEY_LIMIT),
    );
}

/// The keys of a phase the roles wrote (the watchdog's are modelled apart).
fn of_phase<'a>(k: &'a KeysPart, phase: &'a str) -> impl Iterator<Item = &'a HotKey> {
    k.hottest
        .iter()
        .filter(move |h| h.phase == phase && h.source != Source::Watchdog)
}

pub fn render(k: &KeysPart) -> String {
    let s = &k.setup;
    let fleet = thousands(u64::from(s.devices) * u64::from(s.shards));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Scale: what {fleet} devices do to the table's keys\n\n\
         Produced by `cargo run --release -p tidemark-bench --example scale` (`make bench` runs it). \
         How it measures is in the example's doc comments (`crates/bench/examples/scale/`). \
         Nothing here is a wall-clock measurement (a debug build gives the same figures), and nothing is asserted.\n\n\
         ## Targets\n\n\
         | target | goal | measured | verdict |\n|---|---|---|---|"
    );
    for phase in keys::PHASES {
        let top = of_phase(k, phase).max_by_key(|h| h.scaled_units);
        let over = top.is_some_and(|h| h.scaled_units > KEY_LIMIT);
        let _ = writeln!(
            out,
            "| {phase}, {fleet} devices | no partition key (table or index) over {KEY_LIMIT} write units a second | hottest: {} | {} |",
            top.map_or("none".to_owned(), |h| format!(
                "{} `{}` ({}), {} units/s",
                h.index,
                h.pattern,
                source(h.source),
                h.scaled_units
            )),
            if over { "**not met**" } else { "met" }
        );
    }
    let worst = k
        .watchdog_units_per_decision
        .iter()
        .filter(|(key, _)| !key.starts_with("table DEVICE#"))
        .map(|(key, u)| (key, u * k.watchdog_decisions_per_second))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    if let Some((key, rate)) = worst {
        let _ = writeln!(
            out,
            "| The watchdog opening a 1 % outage's alerts, {fleet} devices | no partition key over {KEY_LIMIT} write units a second | hottest: `{key}`, {rate:.0} units/s (modelled) | {} |",
            if rate > KEY_LIMIT as f64 {
                "**not met**"
            } else {
                "met"
            }
        );
    }
    let _ = writeln!(
        out,
        "\n## 1. Keys at the top of the hour, and in an outage and a storm\n\n\
         One stream shard's devices, {} of them, each sending two metrics once a minute (a phase of its own in the minute, \
         arriving 50 ms to 1 s after its timestamp), tagged with one of {} sites (`GROUP_TAGS` `site`), watched with a {} s window, \
         from {} to {}; writes before {} (every device's registration by the alerts role and its first hour) are not counted. In it, in turn:\n\n\
         - an outage of 1 % of the devices (all at one site, as an outage is) from {} to {}, found by the watchdog, then their kept readings flushed within {} s (all their alerts resolve at once);\n\
         - the top of the hour at {}, a midnight too (every device's new hour and new day);\n\
         - a threshold storm: every tenth device above a `temperature` threshold from {} to {} (alerts open, are updated by every breaching reading, and resolve).\n\n\
         The real rollups role (300 s windows, 10,000 records) and alerts role (1 s windows, 1,000 records), both with batches as \
         Lambda forms them (`tidemark_bench::windows`: a window opens at its first record, never on a round time), and the watchdog \
         (a run a minute, at :07 past), run over one in-memory table that logs each write's partition key in the table and in each index \
         (`tidemark_store::write_log`: an index entry moved is a delete and a put; one kept costs nothing unless a projected attribute \
         changed; units are whole kilobytes). Modelled: an invocation's writes are spread from its start at 16 concurrent requests \
         (`WRITE_CONCURRENCY`) of {} ms each (AWS's single-digit milliseconds).\n\n\
         **Scaling to {fleet} devices.** A million devices sending a reading a minute are about 16,700 readings a second; the table \
         takes about 2.4 write units a reading in all, about 40,000 a second, over at least 40 partitions, which DynamoDB splits in \
         powers of two: about {} partitions, so {} stream shards, each feeding its own invocations of both roles. A device's own keys \
         see the same rate at any fleet size. A key the fleet shares gets every shard's writes in the same second, as if every \
         shard's busiest second were the same one: for an outage's return and a storm, events that reach every shard at once, \
         near the truth; for the top of the hour an upper bound, since each shard's 300 s windows open at their own times. A key \
         of its own kind (a group's partial) takes {} times its busiest second. A kind a hash spreads over several keys (watch, \
         activity, listing and tag count partitions) is counted whole: its busiest second in the shard, times {}, spread again \
         over its keys (λ each), and its busiest key taken as λ + 3√λ (the hash's spread of that many writes). The watchdog is one \
         function for the whole fleet; its keys are modelled from its rate below.\n",
        s.devices,
        s.sites,
        s.window_s,
        keys::START,
        keys::END,
        keys::MEASURED_FROM,
        keys::OUTAGE.0,
        keys::OUTAGE.1,
        keys::FLUSH_MS / 1000,
        keys::CLOSE,
        keys::STORM.0,
        keys::STORM.1,
        s.write_ms,
        s.shards,
        s.shards,
        s.shards,
        s.shards,
    );
    let _ = writeln!(
        out,
        "Simulated: {} readings, {} rollups batches, {} alerts batches, {} watchdog runs, {} offline alerts opened.\n",
        k.readings, k.batches_rollups, k.batches_alerts, k.watchdog_runs, k.opened
    );
    for phase in keys::PHASES {
        let _ = writeln!(
            out,
            "**{phase}.** The hottest key of each kind, by its busiest second (write units):\n\n\
             | index | key | written by | whose | keys of the kind | busiest second, one shard, all of them | at | busiest key at {fleet} devices | against {KEY_LIMIT} |\n\
             |---|---|---|---|---|---|---|---|---|"
        );
        for h in of_phase(k, phase) {
            row(&mut out, h);
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(
        out,
        "**The watchdog.** At {fleet} devices a 1 % outage is {} devices falling due in one run; a run decides at most {} \
         (`max_devices`), at most {:.0} a second ({} at a time, four requests of {} ms each). Its write units per decision \
         (an alert opened or a device postponed; {} decisions in the simulation) on the busiest key of each kind, in the \
         run that decided the most (the outage's), and at that rate:\n\n\
         | index and key | units per decision | units a second at {:.0} decisions/s | against {KEY_LIMIT} |\n|---|---|---|---|",
        thousands(u64::from(s.devices) * u64::from(s.shards) / 100),
        k.watchdog_max_devices,
        k.watchdog_decisions_per_second,
        16,
        s.write_ms,
        k.watchdog_decisions,
        k.watchdog_decisions_per_second,
    );
    for (key, units) in &k.watchdog_units_per_decision {
        let per_second = units * k.watchdog_decisions_per_second;
        let shared = !key.starts_with("table DEVICE#");
        let rate = if shared {
            format!("{per_second:.0}")
        } else {
            "one device's".to_owned()
        };
        let _ = writeln!(
            out,
            "| `{key}` | {units:.2} | {rate} | {} |",
            verdict(shared && per_second > KEY_LIMIT as f64)
        );
    }
    let _ = writeln!(
        out,
        "\nWrites in all (counted from {}): {}.\n",
        keys::MEASURED_FROM,
        k.writes
            .iter()
            .map(|(s, (n, u))| format!("{} {n} writes, {u} units", source(*s)))
            .collect::<Vec<_>>()
            .join("; ")
    );
    out
}
