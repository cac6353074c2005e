//! Alert notifications: every alert state change (opened, acknowledged, resolved, snoozed,
//! unsnoozed) becomes one Amazon EventBridge event, `source: tidemark`,
//! `detail-type: Alert State Change`, on the bus named by `EVENT_BUS_NAME`.
//!
//! The changes are read from the table stream's records of alert items ([`alert_changes`]),
//! so whatever writes an alert (the alerts role, the API's acknowledge and snooze) is
//! notified the same way. The `detail` is [`Detail`]:
//!
//! ```json
//! {"eventId":"…32 hex…","change":"opened","deviceId":"sensor_01",
//!  "alertId":"20260420T140000000000Z-temperature-max","kind":"threshold",
//!  "metric":"temperature","rule":"max",
//!  "severity":"critical","state":"open","value":41.5,"threshold":35,
//!  "message":"temperature 41.5 above 35","openedAt":"2026-04-20T14:00:00.000000Z",
//!  "acknowledgedAt":"…"?, "resolvedAt":"…"?, "snoozedUntil":"…"?,
//!  "changedAt":"2026-04-20T14:00:00.000000Z",
//!  "path":"/devices/sensor_01/alerts/20260420T140000000000Z-temperature-max",
//!  "tags":{"site":"A","line":"3"}}
//! ```
//!
//! An offline alert (`"kind":"offline"`, `"rule":"offline"`) has no `metric`; its `value` is
//! the seconds of silence it opened after and `threshold` the device's `offlineAfterSeconds`.
//!
//! `tags` is always an object: the device's tags as the alert item holds them, written by the
//! alerts role with every alert it opens or changes and by the watchdog with the offline
//! alerts it opens (the device item's latest declared tags then); `{}` for a device without
//! tags and for alerts written before tags existed. An acknowledgement or snooze keeps the
//! item's tags. A rule routes one site's alerts with `"detail":{"tags":{"site":["A"]}}`.
//!
//! **Once.** `eventId` is derived from the alert's key, the stream record's sequence number and
//! the change, so the same change always has the same ID. Before publishing, the notifier
//! reads a marker item per ID (`NOTIFIED#<eventId>`, strongly consistent) and publishes only
//! the unmarked; after `PutEvents` succeeds it writes the markers (TTL 48 h, past the
//! stream's 24 h retention). So a replayed or bisected batch publishes nothing twice, with
//! one exception: a crash (or a failed marker write) between `PutEvents` and the marker write
//! publishes the change again *with the same `eventId`*; consumers that must not act twice
//! dedupe on `detail.eventId`. Nothing is lost: an entry still failing after the retries fails
//! its record (the first such record is returned as not done), and Lambda retries from it.
//!
//! **Snooze.** `opened`, `acknowledged` and `resolved` of an alert whose `snoozedUntil` is
//! later than the change's time are not published (counted as suppressed); `snoozed` and
//! `unsnoozed` always are.

mod changes;
mod markers;
mod publish;

use aws_lambda_events::event::dynamodb::Event;
use tidemark_schema::{Clock, EventId};
use tidemark_store::ClientSettings;
use tidemark_store::emf::Metrics;
use tidemark_store::retry::RetryPolicy;

pub use changes::{AlertChange, ChangeKind, Detail, alert_changes, changes_of, event_id};
pub use markers::{DynamoMarkers, Markers};
pub use publish::{
    DETAIL_TYPE, EntryOutcomes, EventEntry, MAX_ATTEMPTS, MAX_ENTRIES, PublishOutcome, Publisher,
    SOURCE, SdkPublisher, publish_all,
};

use crate::{AggregatorConfig, AggregatorError};

/// What one batch did about notifications.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NotifyReport {
    /// Alert state changes found in the batch.
    pub changes: u64,
    /// Not published: the alert is snoozed.
    pub suppressed: u64,
    /// Not published again: a marker says an earlier attempt did.
    pub already_published: u64,
    pub published: u64,
    /// Still failing after the retries: their records are reported as not done.
    pub publish_failed: u64,
    /// Published but not marked: a replay of their record would publish them again.
    pub markers_failed: u64,
    pub put_events_calls: u64,
}

impl NotifyReport {
    pub fn metrics(&self) -> Metrics {
        Metrics::new("aggregator")
            .count("AlertChanges", self.changes)
            .count("AlertEventsSuppressed", self.suppressed)
            .count("AlertEventsAlreadyPublished", self.already_published)
            .count("AlertEventsPublished", self.published)
            .count("AlertEventsFailed", self.publish_failed)
            .count("AlertMarkersFailed", self.markers_failed)
    }

    pub fn log(&self) {
        tracing::info!(
            changes = self.changes,
            suppressed = self.suppressed,
            already_published = self.already_published,
            published = self.published,
            publish_failed = self.publish_failed,
            markers_failed = self.markers_failed,
            put_events_calls = self.put_events_calls,
            "alert notifications"
        );
    }
}

/// Publishes a batch's alert state changes once (see the module docs).
pub struct Notifier<P = SdkPublisher, M = DynamoMarkers> {
    publisher: P,
    markers: M,
    bus: String,
    retry: RetryPolicy,
    clock: Clock,
}

impl Notifier {
    /// The notifier of a deployed function: the bus and the EventBridge endpoint from
    /// `config` (`EVENT_BUS_NAME`, required in the alerts role), markers in its table.
    pub async fn new(
        dynamodb: aws_sdk_dynamodb::Client,
        config: &AggregatorConfig,
    ) -> Result<Self, AggregatorError> {
        let bus = config.event_bus_name.clone().ok_or_else(|| {
            AggregatorError::Config(format!(
                "{} is required when {}=alerts",
                tidemark_store::settings::EVENT_BUS_NAME.name,
                tidemark_store::settings::AGGREGATOR_ROLE.name
            ))
        })?;
        let client = eventbridge_client(config.eventbridge_endpoint.as_deref()).await;
        let mut n = Notifier::with_parts(
            SdkPublisher(client),
            DynamoMarkers::new(dynamodb, config.table_name.clone()),
            bus,
        );
        n.clock = config.clock.clone();
        Ok(n)
    }
}

/// An EventBridge client; with `endpoint` (a local stand-in) it uses a default region and
/// dummy credentials, as the DynamoDB client does against DynamoDB Local.
pub async fn eventbridge_client(endpoint: Option<&str>) -> aws_sdk_eventbridge::Client {
    let settings = match endpoint {
        Some(e) => ClientSettings::local(e),
        None => ClientSettings::default(),
    };
    let shared = tidemark_store::sdk_config(&settings).await;
    let mut b = aws_sdk_eventbridge::config::Builder::from(&shared);
    if let Some(e) = endpoint {
        b = b.endpoint_url(e);
    }
    aws_sdk_eventbridge::Client::from_conf(b.build())
}

impl<P: Publisher, M: Markers> Notifier<P, M> {
    pub fn with_parts(publisher: P, markers: M, bus: impl Into<String>) -> Self {
        Notifier {
            publisher,
            markers,
            bus: bus.into(),
            retry: RetryPolicy::default(),
            clock: Clock::system(),
        }
    }

    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    pub fn publisher(&self) -> &P {
        &self.publisher
    }

    /// Publishes the batch's alert changes not published before. Returns the index of the
    /// first record with a change still unpublished (Lambda must retry from it), if any.
    pub async fn process(&self, event: &Event) -> (Option<usize>, NotifyReport) {
        self.publish_changes(alert_changes(&event.records)).await
    }

    /// [`Notifier::process`] of the changes a batch's decoded records show ([`changes_of`]).
    pub async fn publish_changes(
        &self,
        changes: Vec<AlertChange>,
    ) -> (Option<usize>, NotifyReport) {
        let mut report = NotifyReport {
            changes: changes.len() as u64,
            ..Default::default()
        };
        let (suppressed, live): (Vec<_>, Vec<_>) = changes.into_iter().partition(|c| c.suppressed);
        report.suppressed = suppressed.len() as u64;
        if live.is_empty() {
            return (None, report);
        }
        let ids: Vec<EventId> = live.iter().map(|c| c.event_id().clone()).collect();
        let marked = match self.markers.marked(&ids).await {
            Ok(m) => m,
            Err(e) => {
                tracing::error!(error = %e, "reading notification markers failed");
                report.publish_failed = live.len() as u64;
                return (live.iter().map(|c| c.index).min(), report);
            }
        };
        let (done, todo): (Vec<_>, Vec<_>) = live
            .into_iter()
            .partition(|c| marked.contains(c.event_id()));
        report.already_published = done.len() as u64;
        let mut entries = Vec::with_capacity(todo.len());
        let mut sendable = Vec::with_capacity(todo.len());
        for c in &todo {
            match serde_json::to_string(&c.detail) {
                Ok(detail) => {
                    entries.push(EventEntry {
                        bus: self.bus.clone(),
                        detail_type: DETAIL_TYPE,
                        detail,
                        time_millis: c.detail.changed_at.epoch_millis(),
                    });
                    sendable.push(c);
                }
                // Cannot happen with the types above; retrying could never help.
                Err(e) => {
                    tracing::error!(event_id = %c.event_id(), error = %e, "detail not serialisable")
                }
            }
        }
        let outcome = publish_all(&self.publisher, &entries, self.retry).await;
        report.put_events_calls = outcome.calls;
        report.published = outcome.published.len() as u64;
        report.publish_failed = outcome.failed.len() as u64;
        let published: Vec<EventId> = outcome
            .published
            .iter()
            .map(|&i| sendable[i].event_id().clone())
            .collect();
        for &i in &outcome.published {
            let d = &sendable[i].detail;
            tracing::info!(event_id = %d.event_id, change = d.change.as_str(), device = ?d.device_id, group = ?d.group, alert = %d.alert_id, "alert event published");
        }
        for (i, e) in &outcome.failed {
            tracing::error!(event_id = %sendable[*i].event_id(), error = %e, "alert event not published");
        }
        if !published.is_empty() {
            report.markers_failed = self.markers.mark(&published, self.clock.now()).await as u64;
        }
        let first = outcome.failed.iter().map(|(i, _)| sendable[*i].index).min();
        (first, report)
    }
}

#[cfg(test)]
mod tests;
