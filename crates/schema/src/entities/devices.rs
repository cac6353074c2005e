//! The device item and what it carries: type, thresholds, latest reading, the alert
//! evaluator's rule states, and the offline watch (window, state, connectivity).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::{AlertId, AlertRule, DeviceId, DeviceStatus, MetricName, Severity};
use crate::keys;
use crate::tags::{Tag, Tags};
use crate::time::Timestamp;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceType {
    Sensor,
    Gateway,
    Actuator,
}

/// Alert bounds for one metric: below `min` or above `max` is a breach.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Threshold {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    pub severity: Severity,
    /// An open alert resolves only once a reading is back inside the limit by this margin
    /// (`max - deadband` or `min + deadband`, inclusive), so a value hovering at the limit
    /// does not flap. Zero or absent: the first reading inside the limit resolves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadband: Option<f64>,
    /// An alert opens only once consecutive breaching readings span this many seconds
    /// (measured on reading timestamps); absent or zero: the first breach opens it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_seconds: Option<u32>,
    /// An open alert resolves only once the reading has been clear for this many seconds
    /// (on reading timestamps), so a flapping signal stays one alert; absent or zero: the
    /// first clear reading resolves it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_firing_for_seconds: Option<u32>,
}

impl Threshold {
    /// Bounds with no deadband and no duration (tests, defaults).
    pub fn new(min: Option<f64>, max: Option<f64>, severity: Severity) -> Self {
        Threshold {
            min,
            max,
            severity,
            deadband: None,
            for_seconds: None,
            keep_firing_for_seconds: None,
        }
    }
}

/// The newest reading of a device, kept on its device item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LatestReading {
    pub timestamp: Timestamp,
    pub metrics: BTreeMap<MetricName, f64>,
}

/// `DEVICE#<id>` / `#METADATA`, indexed by status in GSI1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceItem {
    pub pk: String,
    pub sk: String,
    pub gsi1pk: String,
    pub gsi1sk: String,
    pub device_id: DeviceId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub device_type: Option<DeviceType>,
    pub status: DeviceStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub thresholds: BTreeMap<MetricName, Threshold>,
    /// Its alert rules over time (windows, rates, stuck values; [`crate::rules`]), set by
    /// the API. Absent: the fleet's `DEFAULT_RULES`; empty: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<Vec<crate::rules::RuleSpec>>,
    pub created_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest: Option<LatestReading>,
    /// Where each (metric, rule) stands, per [`DeviceItem::rule_state_key`]: the alert
    /// evaluator's state, written only by it, only when a state changes (or `lastSeenAt`
    /// is refreshed), under `version`. Stored as `alertSlots` ([`field::RULE_STATES`]).
    ///
    /// [`field::RULE_STATES`]: super::field::RULE_STATES
    #[serde(
        default,
        rename = "alertSlots",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub rule_states: BTreeMap<String, RuleState>,
    /// Bumped by every write of the alert evaluator: its optimistic lock (absent until the
    /// first one; the API's writes leave it alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    /// No reading arriving for this long opens an offline alert (set by the API; absent:
    /// the fleet default, 0: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offline_after_seconds: Option<u32>,
    /// The severity of its offline alerts (default `warning`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offline_severity: Option<Severity>,
    /// Its closed hours' rollups keep a quantile sketch per metric ([`crate::Sketch`]), so
    /// the series route answers percentiles of hours and days from them (set by the API;
    /// absent: false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub percentiles: bool,
    /// The latest declared tags (set by the API; in force from `tagsFrom`, which may still be
    /// a few minutes ahead). The history of its tags is `CONFIG` / `TAGS#<id>`
    /// ([`crate::TagHistoryItem`]); this copy is what events and the device route show.
    #[serde(default, skip_serializing_if = "Tags::is_empty")]
    pub tags: Tags,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags_from: Option<Timestamp>,
    /// The newest arrival the alerts role wrote down: it may lag the true one by up to three
    /// quarters of the offline window (docs/design.md §5, "Offline devices"), never lead it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_arrival_at: Option<Timestamp>,
    /// The open offline alert, while the device is silent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offline: Option<OfflineState>,
    /// GSI2: the device's watch partition while watched, its offline listing partition
    /// ([`keys::offline_gsi2pk`]) while offline, absent when not watched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gsi2pk: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gsi2sk: Option<String>,
    /// The devices this one may send readings for when the deployment's `DEVICE_IDENTITY` is
    /// `partition-key` (set by the API; absent: none but itself). Stored as `gatewayFor`
    /// ([`super::field::GATEWAY_FOR`]).
    #[serde(default, skip_serializing_if = "GatewayFor::is_empty")]
    pub gateway_for: GatewayFor,
    /// Its cap on distinct metric names per UTC day (set by the API, for gateways and other
    /// devices that carry many; absent: [`DEFAULT_MAX_METRICS_PER_DAY`]). Stored as
    /// `maxMetricsPerDay` ([`super::field::MAX_METRICS_PER_DAY`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_metrics_per_day: Option<u32>,
}

/// A device's distinct metric names per UTC day, unless its item sets its own
/// ([`DeviceItem::max_metrics_per_day`]). New names past the cap are quarantined as
/// `too_many_metrics` (docs/design.md §4, "Metric names per day").
pub const DEFAULT_MAX_METRICS_PER_DAY: u32 = 1000;

/// The largest cap a device may be given: the day's names live in one item
/// ([`MetricNamesItem`]), and 5,000 names of at most 64 bytes are 320 KB, under DynamoDB's
/// 400 KB.
pub const MAX_METRICS_PER_DAY: u32 = 5000;

/// Days a [`MetricNamesItem`] is kept after its day ends (its TTL): past any replay of the
/// day's records that Kinesis' default retention allows, and short enough to cost nothing.
pub const METRIC_NAMES_KEEP_DAYS: i64 = 3;

/// `DEVICE#<id>` / `METRICS#<day>`: the distinct metric names a device's readings of one UTC
/// day were admitted with (a string set, `names`), at most its cap; written only by ingest,
/// only when a batch brings a name its container has not seen admitted that day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricNamesItem {
    pub pk: String,
    pub sk: String,
    #[serde(default)]
    pub names: std::collections::BTreeSet<MetricName>,
    /// Epoch seconds: [`METRIC_NAMES_KEEP_DAYS`] after the day ends.
    pub ttl: i64,
}

impl MetricNamesItem {
    pub fn new(device: &DeviceId, day: crate::time::Day) -> Self {
        let key = keys::EntityKey::MetricNames {
            device: device.clone(),
            day,
        }
        .key();
        MetricNamesItem {
            pk: key.pk,
            sk: key.sk,
            names: std::collections::BTreeSet::new(),
            ttl: Self::expires(day),
        }
    }

    /// The TTL (epoch seconds) of a day's item.
    pub fn expires(day: crate::time::Day) -> i64 {
        i64::from(day.days_since_epoch() + 1) * 86_400 + METRIC_NAMES_KEEP_DAYS * 86_400
    }
}

/// The most devices one gateway may speak for: the list lives on its device item (at most
/// 1,000 ids of 128 bytes stay far below DynamoDB's 400 KB), which ingest caches.
pub const MAX_GATEWAY_FOR: usize = 1000;

/// The devices a gateway may send readings for ([`DeviceItem::gateway_for`]): distinct, at
/// most [`MAX_GATEWAY_FOR`], stored as a list of device ids.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<DeviceId>", into = "Vec<DeviceId>")]
pub struct GatewayFor(std::collections::BTreeSet<DeviceId>);

/// Why a list cannot be a gateway's [`GatewayFor`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GatewayForError {
    #[error("{0} devices; a gateway speaks for at most {MAX_GATEWAY_FOR}")]
    TooMany(usize),
}

impl GatewayFor {
    /// The distinct devices of `ids`; more than [`MAX_GATEWAY_FOR`] is an error.
    pub fn new(ids: impl IntoIterator<Item = DeviceId>) -> Result<Self, GatewayForError> {
        let set: std::collections::BTreeSet<DeviceId> = ids.into_iter().collect();
        if set.len() > MAX_GATEWAY_FOR {
            return Err(GatewayForError::TooMany(set.len()));
        }
        Ok(GatewayFor(set))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn contains(&self, id: &DeviceId) -> bool {
        self.0.contains(id)
    }

    pub fn iter(&self) -> impl Iterator<Item = &DeviceId> {
        self.0.iter()
    }
}

impl TryFrom<Vec<DeviceId>> for GatewayFor {
    type Error = GatewayForError;

    fn try_from(ids: Vec<DeviceId>) -> Result<Self, GatewayForError> {
        GatewayFor::new(ids)
    }
}

impl From<GatewayFor> for Vec<DeviceId> {
    fn from(g: GatewayFor) -> Self {
        g.0.into_iter().collect()
    }
}

/// Who a reading may name as its device: the deployment's `DEVICE_IDENTITY` (template
/// parameter `DeviceIdentity`), enforced by ingest (docs/design.md §3, "Device identity").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum DeviceIdentity {
    /// Whatever the payload says: any producer that can put records may write any device.
    Payload,
    /// A reading's device is the record's partition key (a KPL user record's own), or a
    /// device the partition key's device lists in its [`DeviceItem::gateway_for`].
    #[default]
    PartitionKey,
    /// The IoT topic rule adds the publishing thing's name (from the topic) to the message
    /// ([`DeviceIdentity::THING_FIELD`]); every reading must name that device, and one
    /// naming none takes it.
    IotThing,
}

impl DeviceIdentity {
    pub const ALL: [DeviceIdentity; 3] = [
        DeviceIdentity::Payload,
        DeviceIdentity::PartitionKey,
        DeviceIdentity::IotThing,
    ];

    /// The field the IoT rule puts the thing name in (`topic(2) AS tidemarkThing`).
    pub const THING_FIELD: &'static str = "tidemarkThing";

    /// The mode named `s` (case and surrounding blanks ignored).
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim().to_ascii_lowercase();
        Self::ALL.into_iter().find(|m| m.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DeviceIdentity::Payload => "payload",
            DeviceIdentity::PartitionKey => "partition-key",
            DeviceIdentity::IotThing => "iot-thing",
        }
    }
}

impl std::fmt::Display for DeviceIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The shortest offline window: the watchdog runs once a minute.
pub const MIN_OFFLINE_WINDOW: u32 = 60;
/// The longest: a month of silence is no longer news.
pub const MAX_OFFLINE_WINDOW: u32 = 30 * 86_400;

/// The fleet's offline window from its setting (`OFFLINE_AFTER_SECONDS`, the template's
/// `OfflineAfterSeconds`): 0 is off, 1 to 59 count as 60; `None` past the longest.
pub fn fleet_offline_window(seconds: u32) -> Option<u32> {
    match seconds {
        0 => Some(0),
        s if s > MAX_OFFLINE_WINDOW => None,
        s => Some(s.max(MIN_OFFLINE_WINDOW)),
    }
}

/// A device's open offline alert: which one, and since when the device has been silent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OfflineState {
    pub alert: AlertId,
    /// The last arrival before the silence.
    pub since: Timestamp,
    /// The tags whose offline counts ([`crate::entities::TagCountItem`]) the watchdog added
    /// the device to when it opened the alert: the ones the alerts role takes it out of when
    /// the device is back, whatever its tags are by then.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub counted: Vec<Tag>,
}

/// What `GET /devices/{id}` says of a device's connectivity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Connectivity {
    Online,
    Offline,
    /// Never seen, or not watched (no `offlineAfterSeconds`).
    Unknown,
}

impl Connectivity {
    pub fn as_str(self) -> &'static str {
        match self {
            Connectivity::Online => "online",
            Connectivity::Offline => "offline",
            Connectivity::Unknown => "unknown",
        }
    }
}

/// The phase of one (metric, rule) of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RulePhase {
    /// Inside the limit (or never evaluated).
    Normal,
    /// Breaching since `since`, for less than the threshold's `forSeconds` so far.
    Pending,
    /// An alert is open (or acknowledged): `alert`.
    Open,
}

/// The alert evaluator's state of one (metric, rule) of a device: enough to tell, from one
/// new reading, whether the state could change (then it is derived again from the stored
/// readings; otherwise nothing is written).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleState {
    pub mode: RulePhase,
    /// Start of the breach (pending or open).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Timestamp>,
    /// The open alert.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert: Option<AlertId>,
    /// The newest reading of the metric this state was derived from.
    pub at: Timestamp,
    /// The metric's threshold it was derived with: another one derives it again.
    pub threshold: Threshold,
}

impl DeviceItem {
    /// A fresh device with keys for `status` (the single status key).
    pub fn new(device_id: DeviceId, status: DeviceStatus, created_at: Timestamp) -> Self {
        DeviceItem {
            pk: keys::device_pk(&device_id),
            sk: keys::DEVICE_METADATA_SK.to_owned(),
            gsi1pk: keys::status_gsi1pk(status, None),
            gsi1sk: keys::device_gsi1sk(&device_id),
            device_id,
            name: None,
            device_type: None,
            status,
            location: None,
            firmware: None,
            thresholds: BTreeMap::new(),
            rules: None,
            created_at,
            updated_at: None,
            last_seen_at: None,
            latest: None,
            rule_states: BTreeMap::new(),
            version: None,
            offline_after_seconds: None,
            offline_severity: None,
            percentiles: false,
            tags: Tags::empty(),
            tags_from: None,
            last_arrival_at: None,
            offline: None,
            gsi2pk: None,
            gsi2sk: None,
            gateway_for: GatewayFor::default(),
            max_metrics_per_day: None,
        }
    }

    /// `lastSeenAt` and `latest` brought up to `newest`, a stored reading, when it is newer
    /// than what the item holds: the pipeline writes the item when something on it changes,
    /// not for every reading (docs/decisions/0003-write-cost-floors.md), so readers of one
    /// device take these two from its readings.
    pub fn seen(&mut self, newest: LatestReading) {
        if self.last_seen_at.is_none_or(|l| newest.timestamp > l) {
            self.last_seen_at = Some(newest.timestamp);
            self.latest = Some(newest);
        }
    }

    /// Its offline window: its own `offlineAfterSeconds`, else the fleet's; `None` when
    /// either says 0.
    pub fn offline_after(&self, fleet_default: u32) -> Option<u32> {
        Some(self.offline_after_seconds.unwrap_or(fleet_default)).filter(|s| *s > 0)
    }

    /// When its silence needs checking: the GSI2 sort key, while it is in its watch
    /// partition (not offline, watched).
    pub fn watch_check(&self) -> Option<Timestamp> {
        (self.gsi2pk.as_deref() == Some(keys::watch_gsi2pk(&self.device_id).as_str()))
            .then(|| Timestamp::parse_canonical(self.gsi2sk.as_deref()?).ok())
            .flatten()
    }

    /// Online, offline, or unknown (never seen, or not watched).
    pub fn connectivity(&self, fleet_default: u32) -> Connectivity {
        if self.offline.is_some() {
            Connectivity::Offline
        } else if self.offline_after(fleet_default).is_none() || self.last_arrival_at.is_none() {
            Connectivity::Unknown
        } else {
            Connectivity::Online
        }
    }

    /// The rule-state map key of a (metric, rule): `temperature-max`.
    pub fn rule_state_key(metric: &MetricName, rule: AlertRule) -> String {
        format!("{metric}-{rule}")
    }
}
