//! What fails an ingest batch ([`IngestError`]), and whether a retry could cure it.

use thiserror::Error;
use tidemark_store::StoreError;

use crate::metric_cap::CapError;

#[derive(Debug, Error)]
pub enum IngestError {
    /// The hot-device partition counts could not be read and none are cached: writing now could
    /// put a reading in the wrong partition, so the batch is retried instead.
    #[error("could not read the layout histories: {0}")]
    LayoutHistory(#[source] StoreError),
    #[error("could not check which devices are registered: {0}")]
    DeviceLookup(#[source] StoreError),
    /// A device's metric names of a day could not be read or written (docs/design.md §4,
    /// "Metric names per day"): retried with the batch.
    #[error("{0}")]
    MetricNames(#[source] CapError),
    /// An item could not be converted (a bug, never input: input is validated first).
    #[error("could not build an item: {0}")]
    Item(#[source] StoreError),
    /// Processing panicked (a bug of ours): Lambda bisects the batch down to the record.
    #[error("processing panicked: {0}")]
    Panicked(String),
}

impl IngestError {
    /// Whether the same batch would fail the same way again (docs/design.md §4, "What is
    /// retried, what is set aside"). Reading the layouts or the device registry fails with
    /// the table, not with a record, so it is retried whatever DynamoDB said.
    pub fn is_permanent(&self) -> bool {
        matches!(self, IngestError::Item(_) | IngestError::Panicked(_))
    }
}
