//! What one invocation did: logged, emitted as EMF, returned to tests and benchmarks.

use std::sync::atomic::{AtomicU64, Ordering};

use tidemark_store::emf::Metrics;

use crate::AggregatorError;

/// What one invocation did (logged, emitted as EMF, returned to tests and benchmarks).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    pub records_seen: u64,
    pub records_ignored: u64,
    /// New readings added to aggregates: INSERTs applied to their hourly item (replays and
    /// records already applied are not counted).
    pub readings_aggregated: u64,
    pub items_written: u64,
    pub conflicts_retried: u64,
    pub alerts_opened: u64,
    pub alerts_resolved: u64,
    /// Alert rules derived again from the stored readings (a reading that could change a
    /// state, a late one, a changed threshold): the alert role's reads beyond the batch.
    pub alert_derivations: u64,
    /// Devices whose item was left as it was: only `lastSeenAt`/`latest` would have moved,
    /// by less than [`crate::AggregatorConfig::device_refresh`].
    pub device_writes_deferred: u64,
    /// Items in the table that do not parse (written by another tool or an older version),
    /// and slot part records whose images do not decode (also in `records_ignored`): skipped
    /// and logged with their key; the rest of the batch goes on.
    pub unreadable_items: u64,
    /// Write request units DynamoDB reported for this invocation's writes.
    pub write_units: f64,
    pub failed_items: u64,
    /// Items or devices left for the next invocation because the deadline came first
    /// (also in `failed_items`).
    pub out_of_time: u64,
    /// Records set aside after failing the same way [`crate::setaside::SET_ASIDE_AFTER`]
    /// times: a repair item written for each, the batch gone on past it.
    pub set_aside: u64,
    /// Repairs done (their items deleted).
    pub repaired: u64,
    /// Alert notifications (the alerts role).
    pub notify: crate::NotifyReport,
}

impl Report {
    /// Adds another invocation's counts (records seen are the same records: the larger).
    pub fn merge(&mut self, o: &Report) {
        self.records_seen = self.records_seen.max(o.records_seen);
        self.records_ignored = self.records_ignored.min(o.records_ignored);
        self.readings_aggregated += o.readings_aggregated;
        self.items_written += o.items_written;
        self.conflicts_retried += o.conflicts_retried;
        self.alerts_opened += o.alerts_opened;
        self.alerts_resolved += o.alerts_resolved;
        self.alert_derivations += o.alert_derivations;
        self.device_writes_deferred += o.device_writes_deferred;
        self.unreadable_items += o.unreadable_items;
        self.write_units += o.write_units;
        self.failed_items += o.failed_items;
        self.out_of_time += o.out_of_time;
        self.set_aside += o.set_aside;
        self.repaired += o.repaired;
    }

    pub fn metrics(&self) -> Metrics {
        Metrics::new("aggregator")
            .count("RecordsSeen", self.records_seen)
            .count("RecordsIgnored", self.records_ignored)
            .count("ReadingsAggregated", self.readings_aggregated)
            .count("ItemsWritten", self.items_written)
            .count("ConflictsRetried", self.conflicts_retried)
            .count("AlertsOpened", self.alerts_opened)
            .count("AlertsResolved", self.alerts_resolved)
            .count("AlertDerivations", self.alert_derivations)
            .count("DeviceWritesDeferred", self.device_writes_deferred)
            .count("UnreadableItems", self.unreadable_items)
            .count("WriteUnits", self.write_units.ceil() as u64)
            .count("FailedItems", self.failed_items)
            .count("OutOfTime", self.out_of_time)
            .count("SetAside", self.set_aside)
            .count("Repaired", self.repaired)
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) readings_aggregated: AtomicU64,
    pub(crate) items_written: AtomicU64,
    pub(crate) conflicts_retried: AtomicU64,
    pub(crate) alerts_opened: AtomicU64,
    pub(crate) alerts_resolved: AtomicU64,
    pub(crate) alert_derivations: AtomicU64,
    pub(crate) device_writes_deferred: AtomicU64,
    pub(crate) unreadable_items: AtomicU64,
    /// Thousandths of a write unit.
    pub(crate) write_milli_units: AtomicU64,
    pub(crate) out_of_time: AtomicU64,
    pub(crate) set_aside: AtomicU64,
    pub(crate) repaired: AtomicU64,
}

impl Counters {
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
    pub(crate) fn written(&self, units: f64) {
        Self::add(&self.items_written, 1);
        Self::add(&self.write_milli_units, (units * 1000.0).round() as u64);
    }

    /// Counts and logs an unreadable item; `Ok` when `e` was one (the caller skips it).
    pub(crate) fn skip_unreadable(
        &self,
        e: AggregatorError,
        what: &str,
    ) -> Result<(), AggregatorError> {
        match e {
            AggregatorError::Store(s) if s.is_unreadable() => {
                Self::add(&self.unreadable_items, 1);
                tracing::warn!(error = %s, "{what} skipped: an item it needs is unreadable");
                Ok(())
            }
            other => Err(other),
        }
    }

    /// `work` unless `stop` comes first: then [`AggregatorError::OutOfTime`], counted. Dropping
    /// the work between two requests is safe: every write is conditional and idempotent, as
    /// after a crash.
    pub(crate) async fn until<T>(
        &self,
        stop: tokio::time::Instant,
        work: impl Future<Output = Result<T, AggregatorError>>,
    ) -> Result<T, AggregatorError> {
        match tokio::time::timeout_at(stop, work).await {
            Ok(r) => r,
            Err(_) => {
                Self::add(&self.out_of_time, 1);
                Err(AggregatorError::OutOfTime)
            }
        }
    }

    /// Copies the counts into `report`.
    pub(crate) fn fill(&self, report: &mut Report) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        report.readings_aggregated = get(&self.readings_aggregated);
        report.items_written = get(&self.items_written);
        report.conflicts_retried = get(&self.conflicts_retried);
        report.alerts_opened = get(&self.alerts_opened);
        report.alerts_resolved = get(&self.alerts_resolved);
        report.alert_derivations = get(&self.alert_derivations);
        report.device_writes_deferred = get(&self.device_writes_deferred);
        report.unreadable_items = get(&self.unreadable_items);
        report.write_units = get(&self.write_milli_units) as f64 / 1000.0;
        report.out_of_time = get(&self.out_of_time);
        report.set_aside = get(&self.set_aside);
        report.repaired = get(&self.repaired);
    }
}
