//! Publishing events with `PutEvents`: 10 entries a call (EventBridge's limit), entries the
//! service reports as failed re-sent after a [`RetryPolicy`] wait, a bounded number of times.
//! The call sits behind [`Publisher`] so the notifier's logic is tested with a fake.

use std::future::Future;

use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use tidemark_store::retry::RetryPolicy;

/// EventBridge's limit of entries in one `PutEvents` call.
pub const MAX_ENTRIES: usize = 10;
/// Calls per entry before it counts as not published (its record is then retried by Lambda).
pub const MAX_ATTEMPTS: u32 = 5;
/// `source` of every Tidemark event.
pub const SOURCE: &str = "tidemark";
/// `detail-type` of alert state changes.
pub const DETAIL_TYPE: &str = "Alert State Change";

/// One event to put on the bus.
#[derive(Debug, Clone, PartialEq)]
pub struct EventEntry {
    pub bus: String,
    pub detail_type: &'static str,
    /// JSON.
    pub detail: String,
    /// Epoch milliseconds: the event's `time`.
    pub time_millis: i64,
}

/// Per entry, in order: `None` published, `Some(error)` not.
pub type EntryOutcomes = Vec<Option<String>>;

/// The one call the notifier makes.
pub trait Publisher: Send + Sync {
    /// Puts at most [`MAX_ENTRIES`] entries; `Err` when the whole call failed (after the
    /// SDK's own retries), else one outcome per entry.
    fn put_events(
        &self,
        entries: &[EventEntry],
    ) -> impl Future<Output = Result<EntryOutcomes, String>> + Send;
}

/// [`Publisher`] over the AWS SDK (EventBridge, or devstack's local endpoint).
#[derive(Debug, Clone)]
pub struct SdkPublisher(pub aws_sdk_eventbridge::Client);

impl Publisher for SdkPublisher {
    async fn put_events(&self, entries: &[EventEntry]) -> Result<EntryOutcomes, String> {
        let req = entries
            .iter()
            .map(|e| {
                PutEventsRequestEntry::builder()
                    .source(SOURCE)
                    .detail_type(e.detail_type)
                    .detail(&e.detail)
                    .event_bus_name(&e.bus)
                    .time(aws_sdk_eventbridge::primitives::DateTime::from_millis(
                        e.time_millis,
                    ))
                    .build()
            })
            .collect();
        let out = self
            .0
            .put_events()
            .set_entries(Some(req))
            .send()
            .await
            .map_err(|e| aws_sdk_eventbridge::error::DisplayErrorContext(e).to_string())?;
        let results = out.entries();
        Ok((0..entries.len())
            .map(|i| match results.get(i) {
                Some(r) if r.error_code().is_none() && r.event_id().is_some() => None,
                Some(r) => Some(format!(
                    "{}: {}",
                    r.error_code().unwrap_or("NoEventId"),
                    r.error_message().unwrap_or_default()
                )),
                None => Some("no result entry".to_owned()),
            })
            .collect())
    }
}

/// What happened to each entry of [`publish_all`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublishOutcome {
    /// Positions (in the input) of the entries published.
    pub published: Vec<usize>,
    /// Positions of the entries not published, with the last error.
    pub failed: Vec<(usize, String)>,
    pub calls: u64,
}

/// Publishes every entry, in order, 10 a call; failed entries are re-sent (in their own
/// calls) up to [`MAX_ATTEMPTS`] calls each.
pub async fn publish_all<P: Publisher>(
    publisher: &P,
    entries: &[EventEntry],
    retry: RetryPolicy,
) -> PublishOutcome {
    let mut outcome = PublishOutcome::default();
    let mut pending: Vec<usize> = (0..entries.len()).collect();
    let mut attempt = 0u32;
    while !pending.is_empty() {
        attempt += 1;
        let mut again = Vec::new();
        for chunk in pending.chunks(MAX_ENTRIES) {
            let batch: Vec<EventEntry> = chunk.iter().map(|&i| entries[i].clone()).collect();
            outcome.calls += 1;
            let results = match publisher.put_events(&batch).await {
                Ok(r) => r,
                Err(e) => vec![Some(e); chunk.len()],
            };
            for (&i, r) in chunk.iter().zip(
                results
                    .into_iter()
                    .chain(std::iter::repeat(Some("missing outcome".to_owned()))),
            ) {
                match r {
                    None => outcome.published.push(i),
                    Some(e) => again.push((i, e)),
                }
            }
        }
        if again.is_empty() {
            break;
        }
        if attempt >= MAX_ATTEMPTS {
            outcome.failed = again;
            break;
        }
        tracing::warn!(
            failed = again.len(),
            error = %again[0].1,
            attempt,
            "PutEvents entries failed; retrying"
        );
        tokio::time::sleep(retry.delay(attempt)).await;
        pending = again.into_iter().map(|(i, _)| i).collect();
    }
    outcome
}
