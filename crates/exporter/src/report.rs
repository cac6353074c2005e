//! What one scheduled run did ([`Report`]): returned to tests and `tidemark-admin`, logged
//! (a line per partition written) with its EMF metrics, and returned as the invocation's
//! result.

use tidemark_schema::Timestamp;
use tidemark_store::emf::Metrics;

use crate::paths;

/// What one scheduled run did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Hours exported for the first time (the cursor moved over them), oldest first.
    pub exported: Vec<Timestamp>,
    /// Hours marked as changed after their close and exported again.
    pub reexported: Vec<Timestamp>,
    /// Days whose daily rollups were written (their start).
    pub days: Vec<Timestamp>,
    pub readings: u64,
    /// Due hours left for the next run (deadline or `max_hours`).
    pub behind: usize,
    /// Slices sent to the queue (new hours' and missing ones sent again).
    pub sent: usize,
    /// Hours being exported in slices after the run (started, waiting on a slice, or on
    /// an earlier hour).
    pub working: usize,
}

impl Report {
    /// This run followed by `later` at the same time (a run with no queue,
    /// [`crate::schedule::run_inline`]): what both did, and where the later left things.
    pub fn absorb(&mut self, later: Report) {
        self.exported.extend(later.exported);
        self.reexported.extend(later.reexported);
        for d in later.days {
            if !self.days.contains(&d) {
                self.days.push(d);
            }
        }
        self.readings += later.readings;
        self.sent += later.sent;
        self.behind = later.behind;
        self.working = later.working;
    }

    /// The run's EMF metrics.
    pub fn metrics(&self) -> Metrics {
        Metrics::new("exporter")
            .count("HoursExported", self.exported.len() as u64)
            .count("HoursReexported", self.reexported.len() as u64)
            .count("DaysExported", self.days.len() as u64)
            .count("Readings", self.readings)
            .count("HoursBehind", self.behind as u64)
            .count("SlicesSent", self.sent as u64)
            .count("HoursWorking", self.working as u64)
    }

    /// Logs the run (a line per partition written to `bucket` under `prefix`, its EMF
    /// metrics) and returns it as the invocation's result.
    pub fn log(&self, bucket: &str, prefix: &str) -> serde_json::Value {
        for h in self.exported.iter().chain(&self.reexported) {
            tracing::info!(
                "export: hour {h} written to s3://{bucket}/{}",
                paths::readings_partition(prefix, *h)
            );
        }
        self.metrics().emit();
        let list = |v: &[Timestamp]| v.iter().map(ToString::to_string).collect::<Vec<_>>();
        serde_json::json!({
            "exported": list(&self.exported),
            "reexported": list(&self.reexported),
            "days": list(&self.days),
            "readings": self.readings,
            "behind": self.behind,
            "sent": self.sent,
            "working": self.working,
        })
    }
}
