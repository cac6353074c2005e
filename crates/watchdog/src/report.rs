//! What one watchdog run did ([`Report`]): returned to tests and benchmarks, logged as one
//! line with its EMF metrics ([`log`]), and returned as the invocation's result.

use tidemark_schema::Timestamp;
use tidemark_store::emf::Metrics;

/// What one run did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Shards the heartbeat went into.
    pub shards: usize,
    /// Everything that arrived before it is on the device items; `None`: the pipeline has not
    /// confirmed a heartbeat on every shard yet, and nothing was decided.
    pub watermark: Option<Timestamp>,
    /// Whether this run's own heartbeats passed in time (else an older watermark was used).
    pub heartbeat_passed: bool,
    /// Everything that arrived before it is in the group partials (the rollups role's mark
    /// on every shard): group window rules judge the whole minutes before it. `None`: not on
    /// every shard yet, and no window rule was judged.
    pub rollups_watermark: Option<Timestamp>,
    pub due: u64,
    pub opened: u64,
    pub postponed: u64,
    pub unwatched: u64,
    /// Decided by someone else first (another run, the alerts role): looked at again next run.
    pub lost: u64,
    pub failed: u64,
    /// Group rules' alerts opened and resolved, and judgements lost to another run.
    pub group_opened: u64,
    pub group_resolved: u64,
    pub group_lost: u64,
    pub read_units: f64,
    pub write_units: f64,
}

impl Report {
    pub fn metrics(&self, sent: Timestamp) -> Metrics {
        let lag = self.watermark.map_or(0, |w| {
            (sent.epoch_millis() - w.epoch_millis()).max(0) as u64
        });
        Metrics::new("watchdog")
            .count("DevicesDue", self.due)
            .count("OfflineOpened", self.opened)
            .count("Postponed", self.postponed)
            .count("Unwatched", self.unwatched)
            .count("Lost", self.lost)
            .count("Failed", self.failed)
            .count("GroupAlertsOpened", self.group_opened)
            .count("GroupAlertsResolved", self.group_resolved)
            .count("WatermarkLagMs", lag)
            .count("NoWatermark", u64::from(self.watermark.is_none()))
            .count(
                "RollupsWatermarkLagMs",
                self.rollups_watermark.map_or(0, |w| {
                    (sent.epoch_millis() - w.epoch_millis()).max(0) as u64
                }),
            )
    }
}

/// Logs the run (one line, and its EMF metrics) and returns it as the invocation's result.
pub fn log(r: &Report, now: Timestamp) -> serde_json::Value {
    tracing::info!(
        shards = r.shards,
        watermark = ?r.watermark.map(|w| w.to_string()),
        heartbeat_passed = r.heartbeat_passed,
        rollups_watermark = ?r.rollups_watermark.map(|w| w.to_string()),
        group_opened = r.group_opened,
        group_resolved = r.group_resolved,
        due = r.due,
        opened = r.opened,
        postponed = r.postponed,
        unwatched = r.unwatched,
        lost = r.lost,
        failed = r.failed,
        read_units = r.read_units,
        write_units = r.write_units,
        "watchdog run"
    );
    r.metrics(now).emit();
    serde_json::json!({
        "shards": r.shards,
        "watermark": r.watermark.map(|w| w.to_string()),
        "heartbeatPassed": r.heartbeat_passed,
        "rollupsWatermark": r.rollups_watermark.map(|w| w.to_string()),
        "groupOpened": r.group_opened,
        "groupResolved": r.group_resolved,
        "due": r.due,
        "opened": r.opened,
        "postponed": r.postponed,
        "unwatched": r.unwatched,
        "lost": r.lost,
        "failed": r.failed,
        "readUnits": r.read_units,
        "writeUnits": r.write_units,
    })
}
