//! The report's part 1 section: write units per stored reading for each fleet window, and
//! what the upkeep adds over the window off.

use super::{Report, upkeep_extra};
use crate::fleet::JITTER_MS;

pub(super) fn upkeep_md(rep: &Report) -> String {
    let mut md = String::from("\n## 1. Deadline upkeep: write units per stored reading\n\n");
    let Some(first) = rep.upkeep.first() else {
        return md;
    };
    md.push_str(&format!(
        "The standard fleet: {} devices, one reading a minute each (±{} s jitter, arriving 50 ms \
         to 1 s after its timestamp), through ingest and the alerts role (called in process) \
         with the template's 1 s batching windows, each opened by the first record that \
         arrives (not aligned to minutes or slots); the alerts mapping gets every record its \
         filter passes from the table's real stream, its own device writes included. \
         `DEVICE_REFRESH_SECONDS` = {}, no thresholds. {} simulated minutes of warm-up (every \
         device registered and watched), then {} measured; simulated time (Kinesis arrival \
         timestamps, the alerts role's fixed clock moved to each invocation).\n\n",
        first.devices,
        JITTER_MS / 1000,
        first.device_refresh_s,
        first.warmup_min,
        first.measured_min
    ));
    md.push_str(
        "| `OFFLINE_AFTER_SECONDS` | readings | alerts role WRU/reading | table | GSI1 | GSI2 | **upkeep: extra WRU/reading vs off** | device writes / device / h | watch-key moves / device / h | alerts role RRU/reading | ingest WRU/reading | alerts invocations (echo-only) | watched at end |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in &rep.upkeep {
        let gsi = |i: &str| r.per(r.alerts.wru_by_index.get(i).copied().unwrap_or(0.0));
        let hours = r.measured_min as f64 / 60.0;
        md.push_str(&format!(
            "| {} | {} | {:.4} | {:.4} | {:.4} | {:.4} | {} | {:.2} | {:.2} | {:.4} | {:.4} | {} ({}) | {} of {} |\n",
            window_label(r.offline_after_s),
            r.readings,
            r.alerts_wru(),
            r.per(r.alerts.wru_table),
            gsi("GSI1"),
            gsi("GSI2"),
            match (r.offline_after_s, upkeep_extra(rep, r)) {
                (0, _) => "baseline".to_owned(),
                (_, Some(x)) => format!("**{x:+.4}**"),
                (_, None) => "–".to_owned(),
            },
            r.device_writes_per_hour(),
            r.watch_key_moves as f64 / f64::from(r.devices) / hours,
            r.per(r.alerts.rru_aws()),
            r.per(r.ingest.wru),
            r.alerts_invocations,
            r.echo_invocations,
            r.watched_at_end,
            r.devices,
        ));
    }
    let failed: u64 = rep.upkeep.iter().map(|r| r.failed_batches).sum();
    if failed > 0 {
        md.push_str(&format!(
            "\n**{failed} batches failed** (reported as batch item failures) in these runs.\n"
        ));
    }
    md.push_str(
        "\n*Alerts role WRU/reading* is every write unit the role spent in the measured window \
         over the readings stored in it, table and each index apart; RRU are with AWS's minimum \
         charge for reads that find nothing (see Findings). *Device writes* and *watch-key \
         moves* are counted from the table's stream: the device items' records the role's \
         writes produced, and those whose `gsi2sk` differs from the old image's. GSI2 is \
         `KEYS_ONLY`: an item write that leaves its key alone costs GSI2 nothing, a key move is \
         a delete and a put in the index, 2 WRU.\n\n",
    );
    let base = rep.upkeep.iter().find(|r| r.offline_after_s == 0);
    if let Some(b) = base {
        md.push_str(&format!(
            "With the window off the role writes a device item only when `lastSeenAt` lags its \
             newest reading by {} s: {:.2} writes per device and hour, {:.4} WRU per reading. \
             With a window it also writes it when an arrival comes within a quarter window of \
             the stored check time (three quarters of a window after the arrival it was set \
             from), and that write moves the key:\n\n",
            b.device_refresh_s,
            b.device_writes_per_hour(),
            b.alerts_wru()
        ));
    }
    for r in rep.upkeep.iter().filter(|r| r.offline_after_s > 0) {
        let moved = tidemark_aggregator::offline::upkeep::moved_after(r.offline_after_s);
        let hours = r.measured_min as f64 / 60.0;
        let moves = r.watch_key_moves as f64 / f64::from(r.devices) / hours;
        let extra = upkeep_extra(rep, r).unwrap_or(0.0);
        let (more_writes, more_table) = base.map_or((0.0, 0.0), |b| {
            (
                r.device_writes_per_hour() - b.device_writes_per_hour(),
                r.per(r.alerts.wru_table) - b.per(b.alerts.wru_table),
            )
        });
        let gsi2 = r.per(r.alerts.wru_by_index.get("GSI2").copied().unwrap_or(0.0));
        let floor = r.floor_wru();
        let ratio = extra / floor;
        if u64::from(moved) >= r.device_refresh_s {
            md.push_str(&format!(
                "- **{} s**: three quarters of the window ({} s) is at least the refresh ({} s), so the writes \
                 that move the key are writes the refresh would have made anyway: {:+.2} device \
                 writes per device and hour, {more_table:+.4} table WRU per reading. But each of \
                 the {moves:.2} key moves per device and hour costs 2 GSI2 WRU: \
                 {gsi2:+.4} WRU per reading, which is the whole upkeep ({extra:+.4}). The item \
                 part of the target is met; counting index writes (they are billed as writes), \
                 it is missed.\n",
                r.offline_after_s, moved, r.device_refresh_s, more_writes
            ));
        } else {
            md.push_str(&format!(
                "- **{} s**: three quarters of the window ({} s) is shorter than the refresh ({} s), so the \
                 device item is written about every {} s instead: {:.2} writes per device and \
                 hour ({more_writes:+.2} vs off, {more_table:+.4} table WRU per reading), each \
                 moving the key ({moves:.2} moves, {gsi2:.4} GSI2 WRU per reading). Upkeep \
                 {extra:+.4} WRU per reading, {ratio:.2}× the floor of one move per window \
                 ({floor:.4}).\n",
                r.offline_after_s,
                moved,
                r.device_refresh_s,
                moved,
                r.device_writes_per_hour()
            ));
        }
    }
    md.push_str(
        "\nIn general, for a device sending every *i* seconds with window *W* (under \
         `DEVICE_REFRESH_SECONDS` × 4/3), the upkeep costs about a device write and 2 GSI2 WRU \
         per 3*W*/4: 4·*i*/*W* WRU per reading (0.067 at *i* = 60 s, *W* = 3600 s). The floor, \
         one such move per window, is 3·*i*/*W* (docs/decisions/0005-offline-upkeep-floor.md: \
         a healthy device's index entry must move once per window, or the watchdog reads \
         healthy devices; no write made anyway can carry it). The measured minutes hold a \
         whole number of moves per device, and the devices move in step (they all register \
         in the warm-up's first minute), so a window whose three quarters do not divide the \
         measured time reads above 4/3 of the floor: at 3600 s each device moves at 45, 90 \
         and 135 minutes, 3 moves in the 120 measured (1.50×), where a long run makes 2.67. \
         Since the device item stopped being rewritten every 15 minutes \
         for `lastSeenAt` alone (`DEVICE_REFRESH_SECONDS` 86400, \
         docs/decisions/0003-write-cost-floors.md step 5), no key move rides along with a refresh \
         any more, so each is an item write of its own; what a watched device costs the role in \
         all still fell where the window is longer than the old refresh (3600 s: 0.0750 WRU per \
         reading, from 0.1167 at d3003b6) and is unchanged below it (300 and 900 s), while a \
         device not watched costs nothing (from 0.0667). Not in these figures: the watchdog's heartbeats (a fixed cost per minute and \
         stream shard, paid with the window off too, since the watchdog runs whatever the \
         fleet default is: part 2) and the rollups role, which no window changes (it never \
         writes device items).\n",
    );
    md
}

fn window_label(w: u32) -> String {
    if w == 0 {
        "0 (off)".into()
    } else {
        format!("{w} s")
    }
}
