//! What one ingest invocation did: the counts of its batch, its EMF metrics and its log line.
//! Each function crate doing batch work has its `Report` in `report.rs`, so a function's
//! metrics and log line are found in the same place.

use std::collections::BTreeMap;

use tidemark_schema::QuarantineReason;
use tidemark_store::emf::Metrics;

/// What one invocation did with its batch: counts logged as one line and emitted as EMF
/// ([`Report::metrics`]), returned to tests and benchmarks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub records: u64,
    /// User records found inside KPL aggregates (each decoded and quarantined on its own).
    pub user_records: u64,
    pub readings: u64,
    pub quarantined: u64,
    pub quarantined_by_reason: BTreeMap<QuarantineReason, u64>,
    /// Items (readings and quarantine) durably written.
    pub written: u64,
    /// Readings combined with an earlier one of the same device and timestamp in this batch
    /// (their metrics merged, the later record's value winning for a metric both carry).
    pub duplicates: u64,
    /// Readings whose device and timestamp the table already held: merged into it (a
    /// same-timestamp record of another batch, a correction, or a resend, which changes
    /// nothing).
    pub merged: u64,
    pub calls: u64,
    pub retries: u64,
    pub unprocessed: u64,
    pub throttled: u64,
    /// Items not written when the invocation gave up (their records are reported).
    pub failed_items: u64,
    /// The sequence number reported in `batchItemFailures`, if any.
    pub failed_from: Option<String>,
    /// Items of the table that do not parse (a `CONFIG` item written by another tool):
    /// skipped and logged with their key.
    pub unreadable_items: u64,
    /// Readings of packed layouts, merged into slot items rather than written one by one.
    pub packed: u64,
    /// Slot items written (each holding any number of the batch's readings, or, for an exact
    /// resend, only its arrival stamped on the smallest part holding it).
    pub slot_writes: u64,
    /// Slots that already held every reading sent (a replay): nothing written.
    pub slots_unchanged: u64,
    /// Races lost to a concurrent writer of the same slot (each retried, nothing lost).
    pub slot_conflicts: u64,
    /// The watchdog's heartbeat records this batch passed on ([`crate::heartbeat`]).
    pub heartbeats: u64,
    /// Records set aside after failing for good ([`crate::set_aside`]), quarantined as
    /// `unprocessable`.
    pub set_aside: u64,
}

impl Report {
    pub fn metrics(&self) -> Metrics {
        let mut m = Metrics::new("ingest")
            .count("Records", self.records)
            .count("UserRecords", self.user_records)
            .count("Readings", self.readings)
            .count("Quarantined", self.quarantined)
            .count("ItemsWritten", self.written)
            .count("Duplicates", self.duplicates)
            .count("Merged", self.merged)
            .count("WriteCalls", self.calls)
            .count("Retries", self.retries)
            .count("Unprocessed", self.unprocessed)
            .count("Throttled", self.throttled)
            .count("FailedItems", self.failed_items)
            .count("FailedBatches", u64::from(self.failed_from.is_some()))
            .count("UnreadableItems", self.unreadable_items)
            .count("PackedReadings", self.packed)
            .count("SlotWrites", self.slot_writes)
            .count("SlotsUnchanged", self.slots_unchanged)
            .count("SlotConflicts", self.slot_conflicts)
            .count("SetAside", self.set_aside);
        for (reason, n) in &self.quarantined_by_reason {
            m = m.count(&format!("Quarantined.{}", reason.as_str()), *n);
        }
        m
    }

    /// The invocation's log line: a warning naming where Kinesis resumes when part of the
    /// batch was not written, else one info line.
    pub(crate) fn log(&self, error: Option<&str>) {
        let by_reason: BTreeMap<&str, u64> = self
            .quarantined_by_reason
            .iter()
            .map(|(r, n)| (r.as_str(), *n))
            .collect();
        let by_reason = serde_json::to_string(&by_reason).unwrap_or_default();
        if let Some(seq) = &self.failed_from {
            tracing::warn!(
                records = self.records,
                readings = self.readings,
                written = self.written,
                duplicates = self.duplicates,
                merged = self.merged,
                quarantined = self.quarantined,
                quarantined_by_reason = %by_reason,
                retries = self.retries,
                unprocessed = self.unprocessed,
                throttled = self.throttled,
                failed_items = self.failed_items,
                failed_from = %seq,
                error = error.unwrap_or(""),
                "ingest batch partly written; Kinesis resumes at failed_from"
            );
        } else {
            tracing::info!(
                records = self.records,
                readings = self.readings,
                written = self.written,
                duplicates = self.duplicates,
                merged = self.merged,
                quarantined = self.quarantined,
                quarantined_by_reason = %by_reason,
                retries = self.retries,
                unprocessed = self.unprocessed,
                throttled = self.throttled,
                packed = self.packed,
                slot_writes = self.slot_writes,
                slot_conflicts = self.slot_conflicts,
                "ingest batch written"
            );
        }
    }
}
