//! The "already published" markers (`NOTIFIED#<eventId>` / `#MARKER`): read before publishing,
//! written after, through the store crate's batch get and batch writer.

use std::collections::HashSet;
use std::future::Future;

use tidemark_schema::{EntityKey, EventId, NotifyMarkerItem, Timestamp};
use tidemark_store::batch_get::{GetOptions, batch_get};
use tidemark_store::write::batch::{BatchWriter, PendingWrite, RetryPolicy};
use tidemark_store::{StoreError, from_stored, to_item};

/// How long writing the markers of one batch may take (then the unwritten ones are reported).
const MARK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Where markers live.
pub trait Markers: Send + Sync {
    /// The IDs among `ids` that have a marker.
    fn marked(
        &self,
        ids: &[EventId],
    ) -> impl Future<Output = Result<HashSet<EventId>, StoreError>> + Send;

    /// Writes a marker per ID; returns how many could not be written.
    fn mark(&self, ids: &[EventId], now: Timestamp) -> impl Future<Output = usize> + Send;
}

/// Markers in the table.
#[derive(Debug, Clone)]
pub struct DynamoMarkers {
    client: aws_sdk_dynamodb::Client,
    writer: BatchWriter<aws_sdk_dynamodb::Client>,
}

impl DynamoMarkers {
    pub fn new(client: aws_sdk_dynamodb::Client, table: impl Into<String>) -> Self {
        let writer = BatchWriter::new(client.clone(), table, 4, RetryPolicy::default());
        DynamoMarkers { client, writer }
    }
}

impl Markers for DynamoMarkers {
    async fn marked(&self, ids: &[EventId]) -> Result<HashSet<EventId>, StoreError> {
        let keys: Vec<_> = ids
            .iter()
            .map(|e| EntityKey::NotifyMarker(e.clone()).key())
            .collect();
        // Strongly consistent: a marker written by the previous attempt a moment ago must be
        // seen. An expired marker not yet deleted by TTL still counts: it can only be older
        // than any record the stream can replay.
        let options = GetOptions {
            consistent: true,
            keys_only: false,
        };
        let items = batch_get(&self.client, self.writer.table(), &keys, options).await?;
        let mut out = HashSet::with_capacity(items.len());
        for item in items {
            match from_stored::<NotifyMarkerItem>(item) {
                Ok(m) => {
                    out.insert(m.event_id);
                }
                Err(e) => tracing::warn!(error = %e, "unreadable notification marker ignored"),
            }
        }
        Ok(out)
    }

    async fn mark(&self, ids: &[EventId], now: Timestamp) -> usize {
        let mut writes = Vec::with_capacity(ids.len());
        let mut bad = 0;
        for (i, id) in ids.iter().enumerate() {
            match to_item(&NotifyMarkerItem::new(id.clone(), now)) {
                Ok(item) => writes.push(PendingWrite::put(i, item)),
                Err(e) => {
                    tracing::error!(error = %e, "notification marker not convertible");
                    bad += 1;
                }
            }
        }
        let report = self
            .writer
            .write_all(writes, tokio::time::Instant::now() + MARK_TIMEOUT)
            .await;
        if let Some(e) = &report.last_error {
            tracing::warn!(error = %e, failed = report.failed_tags.len(), "writing notification markers");
        }
        bad + report.failed_tags.len()
    }
}
