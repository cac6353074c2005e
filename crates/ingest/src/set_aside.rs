//! Records ingest cannot store, ever: set aside so that their shard moves on (docs/design.md
//! §4, "What is retried, what is set aside").
//!
//! A failure no retry cures (an item DynamoDB refuses for good, an item we cannot build, a
//! panic) is counted per record ([`tidemark_store::failures`]); on the
//! [`SET_ASIDE_AFTER`]-th such failure the record goes to the quarantine with reason
//! `unprocessable`, the error and the function's version, its bytes whole (split over items
//! that each fit), and the batch reports it done. Everything transient (throttling, 5xx,
//! timeouts, the deadline, a lost race, a denied grant) is retried as before, for as long as
//! it takes, and never counted. `tidemark-admin redrive --set-aside` sends a set-aside record
//! back through ingest after a fix.

use std::collections::{BTreeMap, BTreeSet};

use tidemark_schema::keys::FailedRecord;
use tidemark_schema::{QuarantineReason, QuarantineSource, Timestamp};
use tidemark_store::failures::{COUNT_TTL_SECONDS, SET_ASIDE_AFTER, function_version};
use tidemark_store::write::batch::{BatchWriteApi, BatchWriter, PendingWrite};

use crate::error::IngestError;
use crate::rejection::{Rejection, quarantine_items};

/// The function name failure counts are kept under.
pub const FUNCTION: &str = "ingest";

/// One thing ingest failed on for good: where it came from, its bytes, and why.
pub struct Failed<'a> {
    pub source: QuarantineSource<'a>,
    pub data: &'a [u8],
    pub error: String,
}

impl Failed<'_> {
    /// Its ID in the failure counts: the Kinesis sequence number, with `.<index>` for a user
    /// record of a KPL aggregate.
    fn record(&self) -> Option<FailedRecord> {
        let id = match self.source.sub_record {
            Some(i) => format!("{}.{i}", self.source.sequence),
            None => self.source.sequence.to_owned(),
        };
        FailedRecord::new(FUNCTION, &id)
    }
}

/// Counts each failure (keyed by the caller's tag) and sets aside those counted
/// [`SET_ASIDE_AFTER`] times or more. Returns the tags durably set aside; every other one is
/// still failed, and retried. A count that cannot be written is a transient failure: its
/// record is retried, not set aside.
pub async fn settle<W: BatchWriteApi>(
    writer: &BatchWriter<W>,
    failed: BTreeMap<usize, Failed<'_>>,
    now: Timestamp,
    write_by: tokio::time::Instant,
) -> Result<BTreeSet<usize>, IngestError> {
    let ttl = now.epoch_seconds().saturating_add(COUNT_TTL_SECONDS);
    let mut due = Vec::new();
    for (tag, f) in &failed {
        let Some(record) = f.record() else {
            tracing::warn!(sequence_number = %f.source.sequence, "no failure count for this record ID; retried");
            continue;
        };
        let count = tokio::time::timeout_at(
            write_by,
            writer
                .api()
                .count_failure(writer.table(), &record, &f.error, ttl),
        )
        .await;
        match count {
            Ok(Ok(n)) if n >= SET_ASIDE_AFTER => due.push((*tag, n)),
            Ok(Ok(n)) => tracing::warn!(
                sequence_number = %f.source.sequence, sub_record = ?f.source.sub_record,
                failures = n, error = %f.error,
                "record failed for good; retried until it has failed {SET_ASIDE_AFTER} times"
            ),
            Ok(Err(e)) => tracing::warn!(
                sequence_number = %f.source.sequence, error = %e.error,
                "could not count a record's failure; it is retried"
            ),
            Err(_) => break,
        }
    }
    let version = function_version();
    let mut puts = Vec::new();
    for (tag, n) in &due {
        let f = &failed[tag];
        let rejection = Rejection::new(
            QuarantineReason::Unprocessable,
            format!(
                "set aside after failing {n} times with an error no retry cures; replay it \
                 with `tidemark-admin redrive --set-aside` once fixed: {}",
                f.error
            ),
        );
        let items = quarantine_items(f.source, f.data, &rejection, version.as_deref())
            .map_err(IngestError::Item)?;
        tracing::error!(
            sequence_number = %f.source.sequence, sub_record = ?f.source.sub_record,
            partition_key = %tidemark_store::failures::cut(f.source.partition_key),
            error = %f.error, "record set aside (quarantine reason unprocessable); the shard moves on"
        );
        puts.extend(items.into_iter().map(|i| PendingWrite::put(*tag, i)));
    }
    if puts.is_empty() {
        return Ok(BTreeSet::new());
    }
    let report = writer.write_all(puts, write_by).await;
    let not_written: BTreeSet<usize> = report.failed_tags.iter().copied().collect();
    Ok(due
        .into_iter()
        .map(|(t, _)| t)
        .filter(|t| !not_written.contains(t))
        .collect())
}
