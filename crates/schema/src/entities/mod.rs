//! The items of the table, as serde types. The store turns them into DynamoDB items with
//! `serde_dynamo`; attribute names are the camelCase field names below (keys excepted).
//!
//! Readings are kept small (keys, a metric map, optional metadata, `ttl`): they are most of
//! the writes, and an item under 1 KB costs one write unit.
//!
//! One file per group of entities; this module keeps what they share (attribute names, serde
//! helpers) and re-exports every entity, so `entities::X` is where each one lives.

use crate::time::Timestamp;

mod aggregates;
mod alerts;
mod callers;
mod devices;
mod export;
mod group_alerts;
mod groups;
mod pipeline;
mod quarantine;
mod readings;
mod tagging;
#[cfg(test)]
mod tests;

pub use aggregates::{
    AggregateItem, CLOSE_GRACE_SECONDS, Stats, bucket_is_open, closes_at, day_is_open,
};
pub use alerts::{AlertItem, AlertState};
pub use callers::{
    CALLER_RATE_KEEP_SECONDS, CallerRateItem, MAX_CALLER_RATE_LIMIT, seconds_left_in_minute,
};
pub use devices::{
    Connectivity, DEFAULT_MAX_METRICS_PER_DAY, DeviceIdentity, DeviceItem, DeviceType, GatewayFor,
    GatewayForError, LatestReading, MAX_GATEWAY_FOR, MAX_METRICS_PER_DAY, MAX_OFFLINE_WINDOW,
    METRIC_NAMES_KEEP_DAYS, MIN_OFFLINE_WINDOW, MetricNamesItem, OfflineState, RulePhase,
    RuleState, Threshold, fleet_offline_window,
};
pub use export::{ExportCursorItem, ExportDirtyItem, ExportJobItem};
pub use group_alerts::{GroupAlertItem, GroupMeasure, GroupRuleStateItem, fraction};
pub use groups::{
    GROUP_PARTIAL_TTL_DAYS, GroupBatchItem, GroupBucketItem, GroupPartialItem, Minute, MinuteStats,
    Minutes, PartialStats, WindowStats, fold_minutes, fold_partials, group_period,
};
pub use pipeline::{HeartbeatItem, LayoutHistoryItem, NotifyMarkerItem, RepairItem};
pub use quarantine::{
    QuarantineItem, QuarantinePartItem, QuarantineReason, QuarantineSource, QuarantinedRecord,
};
pub use readings::{
    MAX_METRIC_MAGNITUDE, MIN_METRIC_MAGNITUDE, Reading, ReadingItem, is_metric_value, number,
};
pub use tagging::{TagCountItem, TagHistoryItem, TagIndexItem};

/// Attribute names used in update and condition expressions. A unit test checks they are the
/// names serde writes, so an expression can never name an attribute that does not exist.
pub mod field {
    pub const DEVICE_ID: &str = "deviceId";
    pub const STATUS: &str = "status";
    pub const CREATED_AT: &str = "createdAt";
    pub const UPDATED_AT: &str = "updatedAt";
    pub const LAST_SEEN_AT: &str = "lastSeenAt";
    pub const LATEST: &str = "latest";
    pub const THRESHOLDS: &str = "thresholds";
    pub const METRICS: &str = "metrics";
    pub const METADATA: &str = "metadata";
    pub const FIRST_AT: &str = "firstAt";
    pub const LAST_AT: &str = "lastAt";
    pub const APPLIED: &str = "applied";
    pub const MARKS: &str = "marks";
    pub const MARKED_AT: &str = "markedAt";
    pub const FOLDED: &str = "folded";
    pub const FROM_TABLE: &str = "fromTable";
    pub const VERSION: &str = "version";
    pub const STATE: &str = "state";
    pub const EPOCHS: &str = "epochs";
    pub const TAGS: &str = "tags";
    pub const TAGS_FROM: &str = "tagsFrom";
    /// The device's alert rule states ([`super::RuleState`]); the attribute keeps the name it
    /// was first stored under.
    pub const RULE_STATES: &str = "alertSlots";
    /// The device's alert rules over time ([`crate::rules::RuleSpec`]; absent: the fleet's).
    pub const RULES: &str = "rules";
    /// The rule of `rules` that raised an alert, on the alert item.
    pub const RULE_SPEC: &str = "ruleSpec";
    /// A slot item's readings, in [`crate::packed`]'s encoding (binary).
    pub const PACKED: &str = "packed";
    /// How many timestamps a slot item holds.
    pub const READING_COUNT: &str = "readingCount";
    /// A slot part that takes no new readings (the slot continues in the next part).
    pub const SEALED: &str = "sealed";
    /// A daily item of a day still open: a placeholder whose hours readers sum.
    pub const OPEN: &str = "open";
    /// A slot part that takes no new metric and no new metadata either, only corrections
    /// of the values it holds (what no longer fits goes to the slot's open part).
    pub const FULL: &str = "full";
    pub const VALUE: &str = "value";
    pub const BREACH_COUNT: &str = "breachCount";
    pub const LAST_BREACH_AT: &str = "lastBreachAt";
    pub const RESOLVED_AT: &str = "resolvedAt";
    pub const NAME: &str = "name";
    pub const TYPE: &str = "type";
    pub const LOCATION: &str = "location";
    pub const FIRMWARE: &str = "firmware";
    pub const ALERT_ID: &str = "alertId";
    pub const METRIC: &str = "metric";
    pub const RULE: &str = "rule";
    pub const SEVERITY: &str = "severity";
    pub const MESSAGE: &str = "message";
    pub const THRESHOLD: &str = "threshold";
    pub const OPENED_AT: &str = "openedAt";
    pub const ACKNOWLEDGED_AT: &str = "acknowledgedAt";
    pub const SNOOZED_UNTIL: &str = "snoozedUntil";
    /// When the record that last wrote a reading or slot part arrived in Kinesis (epoch
    /// milliseconds): what a device's silence is judged on.
    pub const ARRIVED_AT: &str = "arrivedAt";
    pub const OFFLINE_AFTER_SECONDS: &str = "offlineAfterSeconds";
    pub const OFFLINE_SEVERITY: &str = "offlineSeverity";
    /// Whether the device's rollups keep quantile sketches ([`super::DeviceItem::percentiles`]).
    pub const PERCENTILES: &str = "percentiles";
    /// The devices a gateway may send readings for ([`super::DeviceItem::gateway_for`]).
    pub const GATEWAY_FOR: &str = "gatewayFor";
    /// A device's own cap on metric names per day ([`super::DeviceItem::max_metrics_per_day`]).
    pub const MAX_METRICS_PER_DAY: &str = "maxMetricsPerDay";
    /// The string set of a [`super::MetricNamesItem`].
    pub const NAMES: &str = "names";
    /// A caller's requests in one minute ([`super::CallerRateItem`]).
    pub const REQUESTS: &str = "requests";
    /// The device's newest known arrival (see [`super::DeviceItem::last_arrival_at`]).
    pub const LAST_ARRIVAL_AT: &str = "lastArrivalAt";
    /// The device's open offline alert ([`super::OfflineState`]).
    pub const OFFLINE: &str = "offline";
    pub const MEMBERS: &str = "members";
    pub const OFFLINE_MEMBERS: &str = "offlineMembers";
    pub const READINGS: &str = "readings";
    pub const SENT_AT: &str = "sentAt";
    pub const STORED_AT: &str = "storedAt";
    pub const PASSED_AT: &str = "passedAt";
    pub const ROLLUPS_PASSED_AT: &str = "rollupsPassedAt";
    /// The export's dirty hours ([`super::ExportDirtyItem`]; also `markedAt`, `marks`).
    pub const HOUR: &str = "hour";
    /// A count of tag history changes (`CONFIG / #TAG_CHANGES#<n>`).
    pub const CHANGES: &str = "changes";
    /// An export job's generation ([`super::ExportJobItem`]).
    pub const GENERATION: &str = "generation";
}

/// An optional [`Timestamp`] stored as epoch milliseconds (a number: smaller than the text on
/// every reading item that carries it).
pub mod epoch_millis {
    use super::Timestamp;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &Option<Timestamp>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_i64(t.epoch_micros().div_euclid(1000)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Timestamp>, D::Error> {
        let ms: Option<i64> = Option::deserialize(d)?;
        ms.map(|ms| {
            ms.checked_mul(1000)
                .and_then(|us| Timestamp::from_epoch_micros(us).ok())
                .ok_or_else(|| serde::de::Error::custom(format!("arrival {ms} ms is out of range")))
        })
        .transpose()
    }
}
