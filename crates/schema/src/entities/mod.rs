//! The items of the table, as serde types. The store turns them into DynamoDB items with
//! `serde_dynamo`; attribute names are the camelCase field names below (keys excepted).
//!
//! Readings are kept small (keys, a metric map, optional metadata, `ttl`): they are most of
//! the writes, and an item under 1 KB costs one write unit.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::history::LayoutHistory;
use crate::ids::{AlertId, AlertRule, DeviceId, DeviceStatus, EventId, MetricName, Severity};
use crate::keys::{self, EntityKey, KeyError};
use crate::marks::ItemMarks;
use crate::time::{Bucket, Day, Timestamp};

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
    /// The device's alert rule states ([`super::RuleState`]); the attribute keeps the name it
    /// was first stored under.
    pub const RULE_STATES: &str = "alertSlots";
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
    /// The device's newest known arrival (see [`super::DeviceItem::arrived_at`]).
    pub const LAST_ARRIVAL_AT: &str = "lastArrivalAt";
    /// The device's open offline alert ([`super::OfflineState`]).
    pub const OFFLINE: &str = "offline";
    pub const SENT_AT: &str = "sentAt";
    pub const STORED_AT: &str = "storedAt";
    pub const PASSED_AT: &str = "passedAt";
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

/// A reading as devices send it and the API returns it (after validation).
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    pub device_id: DeviceId,
    pub timestamp: Timestamp,
    pub metrics: BTreeMap<MetricName, f64>,
    pub metadata: Option<Map<String, Value>>,
}

impl Reading {
    /// The flat JSON shape of docs/design.md §6: `{"deviceId","timestamp",<metric>:n…,"metadata"?}`.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("deviceId".into(), Value::String(self.device_id.to_string()));
        m.insert(
            "timestamp".into(),
            Value::String(self.timestamp.to_string()),
        );
        for (k, v) in &self.metrics {
            m.insert(k.to_string(), number(*v));
        }
        if let Some(md) = &self.metadata {
            m.insert("metadata".into(), Value::Object(md.clone()));
        }
        Value::Object(m)
    }
}

/// A JSON number for a finite f64, integral values without a fraction (`45`, not `45.0`).
pub fn number(v: f64) -> Value {
    if v.fract() == 0.0 && v.abs() < 9.0e15 {
        Value::from(v as i64)
    } else {
        serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
    }
}

/// `DEVICE#<id>[#S<n>]` / `READING#<ts>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadingItem {
    pub pk: String,
    pub sk: String,
    pub metrics: BTreeMap<MetricName, f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// Epoch seconds after which DynamoDB may delete the item.
    pub ttl: i64,
    /// When the record that wrote it arrived ([`field::ARRIVED_AT`]; absent on items written
    /// before arrivals were kept).
    #[serde(
        default,
        with = "epoch_millis",
        skip_serializing_if = "Option::is_none"
    )]
    pub arrived_at: Option<Timestamp>,
}

impl ReadingItem {
    pub fn new(r: &Reading, shard: Option<u16>, retention_days: u32) -> Self {
        ReadingItem {
            pk: keys::reading_pk(&r.device_id, shard),
            sk: keys::reading_sk(r.timestamp),
            metrics: r.metrics.clone(),
            metadata: r.metadata.clone(),
            ttl: r.timestamp.ttl_after_days(retention_days),
            arrived_at: None,
        }
    }

    /// The reading back, with its device, shard and time taken from the key.
    pub fn to_reading(&self) -> Result<(Reading, Option<u16>), KeyError> {
        match EntityKey::parse(&self.pk, &self.sk)? {
            EntityKey::Reading { device, shard, at } => Ok((
                Reading {
                    device_id: device,
                    timestamp: at,
                    metrics: self.metrics.clone(),
                    metadata: self.metadata.clone(),
                },
                shard,
            )),
            _ => Err(KeyError {
                pk: self.pk.clone(),
                sk: self.sk.clone(),
                reason: "not a reading key".into(),
            }),
        }
    }

    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.ttl < now.epoch_seconds()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceType {
    Sensor,
    Gateway,
    Actuator,
}

/// The largest magnitude a metric value (or a threshold) may have. DynamoDB numbers stop
/// below 1e126; an hour or a day of one device holds at most 8.64e10 readings (one per
/// microsecond), so sums of values up to 1e100 can never leave DynamoDB's range.
pub const MAX_METRIC_MAGNITUDE: f64 = 1e100;
/// The smallest non-zero magnitude (DynamoDB's own floor is 1e-130; f64 goes far lower).
pub const MIN_METRIC_MAGNITUDE: f64 = 1e-100;

/// True for a value Tidemark stores as a metric: finite, and zero or a magnitude within
/// [`MIN_METRIC_MAGNITUDE`]..=[`MAX_METRIC_MAGNITUDE`], so every rollup of it stays storable.
pub fn is_metric_value(v: f64) -> bool {
    let a = v.abs();
    v.is_finite() && (v == 0.0 || (MIN_METRIC_MAGNITUDE..=MAX_METRIC_MAGNITUDE).contains(&a))
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
        }
    }
}

/// `PIPELINE` / `HEARTBEAT#<shard>`: how far the pipeline has come, per ingest shard. The
/// watchdog sends a heartbeat record into the shard at `sentAt`; ingest, behind every record
/// that arrived before it, writes `sentAt` and `storedAt`; the alerts role, when it has seen
/// that write, copies `sentAt` to `passedAt`. Every reading that arrived before `passedAt`
/// has then been stored and seen by the alerts role.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatItem {
    pub pk: String,
    pub sk: String,
    pub sent_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed_at: Option<Timestamp>,
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
    /// The newest arrival the alerts role wrote down: it may lag the true one by up to three
    /// quarters of the offline window (docs/design.md §5, "Offline devices"), never lead it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_arrival_at: Option<Timestamp>,
    /// The open offline alert, while the device is silent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offline: Option<OfflineState>,
    /// GSI2: the device's watch partition while watched, [`keys::OFFLINE_GSI2PK`] while
    /// offline, absent when not watched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gsi2pk: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gsi2sk: Option<String>,
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
    /// A fresh device with keys for `status` (unsharded status key).
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
            created_at,
            updated_at: None,
            last_seen_at: None,
            latest: None,
            rule_states: BTreeMap::new(),
            version: None,
            offline_after_seconds: None,
            offline_severity: None,
            last_arrival_at: None,
            offline: None,
            gsi2pk: None,
            gsi2sk: None,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AlertState {
    Open,
    Acknowledged,
    Resolved,
}

/// `DEVICE#<id>` / `ALERT#<alertId>`; while not resolved also in GSI1 under
/// `ALERT_SEVERITY#<severity>` / `ALERT#<alertId>` (AP6). Resolving removes the GSI1 keys, so
/// the index holds only alerts someone may still need to act on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AlertItem {
    pub pk: String,
    pub sk: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gsi1pk: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gsi1sk: Option<String>,
    pub device_id: DeviceId,
    pub alert_id: AlertId,
    /// The metric of a threshold alert; absent for an offline one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<MetricName>,
    pub rule: AlertRule,
    pub severity: Severity,
    pub state: AlertState,
    pub message: String,
    /// The most extreme breaching value. With `breach_count` and `last_breach_at`, written
    /// with the alert's state changes: it may lag while the alert stays open, and is exact
    /// once it resolves.
    pub value: f64,
    pub threshold: f64,
    pub breach_count: u64,
    pub opened_at: Timestamp,
    pub last_breach_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acknowledged_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<Timestamp>,
    /// No notifications for this alert until then (set by the API); its state still
    /// follows the readings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snoozed_until: Option<Timestamp>,
}

/// count, sum, min, max of one metric in one bucket; the average is derived.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub count: u64,
    pub sum: f64,
    pub min: f64,
    pub max: f64,
}

impl Stats {
    pub fn of(v: f64) -> Self {
        Stats {
            count: 1,
            sum: v,
            min: v,
            max: v,
        }
    }

    pub fn merge(&mut self, o: &Stats) {
        self.count += o.count;
        self.sum += o.sum;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }

    pub fn avg(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum / self.count as f64
        }
    }
}

/// `DEVICE#<id>` / `AGG#hourly#<hour>` or `AGG#daily#<day>`: a bucket's rollup, or page 0
/// of it when it outgrew one item. The other pages (`AGGPAGE#<period>#<bucket>#<n>`,
/// [`EntityKey::AggregatePage`]) have the same shape, each with its own metrics (a metric is
/// in exactly one page), watermarks and version; `firstAt`/`lastAt` of a page are those of
/// the readings with a metric in it. [`AggregateItem::merge_page`] puts them together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AggregateItem {
    pub pk: String,
    pub sk: String,
    pub metrics: BTreeMap<MetricName, Stats>,
    pub first_at: Timestamp,
    pub last_at: Timestamp,
    /// Per source partition key, a floor: a stream sequence number at or below which every
    /// record of that partition is in this item (decimal string; compare as integers). Set by
    /// `tidemark-admin rebuild` at its fences.
    #[serde(default)]
    pub applied: BTreeMap<String, String>,
    /// Hourly items: per source item, the newest record applied (above the floor), what makes
    /// replays harmless however the source partitions split ([`crate::marks`]).
    #[serde(default, skip_serializing_if = "ItemMarks::is_empty")]
    pub marks: ItemMarks,
    /// When `marks` were last written (epoch seconds): they expire a day later.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub marked_at: i64,
    /// Hourly items past [`crate::marks::MAX_MARKS`] source items: no marks; every batch that
    /// touches the hour recomputes it from the stored readings (docs/design.md §5).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub from_table: bool,
    /// Daily items: per hour of the day (`"00"` … `"23"`), the version of the hourly item
    /// whose content this day holds (docs/design.md §5: a day follows its hours).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub folded: BTreeMap<String, u64>,
    /// Optimistic-concurrency counter for conditional writes.
    #[serde(default)]
    pub version: u64,
    /// The page takes no new metrics (only updates of those it holds): the bucket goes on
    /// in a later page. Page 0 is sealed exactly when the bucket has overflow pages. Absent
    /// (false) on every ordinary item.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sealed: bool,
    /// Daily items: the day is still open ([`day_is_open`]) and this item only marks that
    /// it has hours. Its content is not kept: readers sum its hourly items
    /// ([`AggregateItem::day_of_hours`]), and the rollups role folds them into it once the
    /// day closes (docs/design.md §5).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub open: bool,
}

/// How long past its end a day stays open: batches of its last hour still arriving (a
/// 300 s aggregator window behind a 300 s ingest window) add to its hours without a day write.
pub const DAY_CLOSE_GRACE_SECONDS: i64 = 900;

/// Whether `day` is open at `now`: its daily item is then a placeholder, not a rollup.
pub fn day_is_open(day: Day, now: Timestamp) -> bool {
    let closes = Bucket::Daily(day)
        .end_exclusive()
        .plus_millis(DAY_CLOSE_GRACE_SECONDS * 1000)
        .unwrap_or(Timestamp::MAX);
    now < closes
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

impl AggregateItem {
    /// A bucket's item before anything was applied to it.
    pub fn empty(key: &keys::Key) -> Self {
        AggregateItem {
            pk: key.pk.clone(),
            sk: key.sk.clone(),
            metrics: BTreeMap::new(),
            first_at: Timestamp::MAX,
            last_at: Timestamp::MIN,
            applied: BTreeMap::new(),
            marks: ItemMarks::default(),
            marked_at: 0,
            from_table: false,
            folded: BTreeMap::new(),
            version: 0,
            sealed: false,
            open: false,
        }
    }

    /// An open day as readers see it: `day` (its key and version) with the sum of `hours`,
    /// each one hour's rollup as [`AggregateItem::merge_pages`] gives it. The same sum the
    /// rollups role folds into the day when it closes.
    pub fn day_of_hours(day: &AggregateItem, hours: Vec<AggregateItem>) -> AggregateItem {
        let mut out = AggregateItem::empty(&keys::Key {
            pk: day.pk.clone(),
            sk: day.sk.clone(),
        });
        out.version = day.version;
        for h in hours {
            let mut held = false;
            for (name, s) in h.metrics.into_iter().filter(|(_, s)| s.count > 0) {
                held = true;
                out.metrics
                    .entry(name)
                    .and_modify(|d| d.merge(&s))
                    .or_insert(s);
            }
            if held {
                out.first_at = out.first_at.min(h.first_at);
                out.last_at = out.last_at.max(h.last_at);
            }
        }
        out
    }

    pub fn key_for(device: &DeviceId, bucket: Bucket) -> keys::Key {
        EntityKey::Aggregate {
            device: device.clone(),
            bucket,
        }
        .key()
    }

    /// Page `page` of the bucket's rollup: page 0 is [`AggregateItem::key_for`].
    pub fn page_key(device: &DeviceId, bucket: Bucket, page: u16) -> keys::Key {
        if page == 0 {
            return Self::key_for(device, bucket);
        }
        EntityKey::AggregatePage {
            device: device.clone(),
            bucket,
            page,
        }
        .key()
    }

    /// A reader's view of a whole bucket from its pages (page 0 first): metrics unioned,
    /// `firstAt` the earliest and `lastAt` the latest of the pages holding metrics (a page
    /// emptied by deletes keeps times of readings no longer there), metrics with count 0
    /// (emptied by deletes, kept in their page) left out. Key, watermarks,
    /// version and `sealed` are page 0's: the merged item is for reading, never written back.
    /// One page is returned as it is.
    pub fn merge_pages(mut pages: Vec<AggregateItem>) -> Option<AggregateItem> {
        for p in &mut pages {
            // A page's metric whose readings are all gone stays there with count 0.
            p.metrics.retain(|_, s| s.count > 0);
        }
        if pages.len() <= 1 {
            return pages.pop();
        }
        let held: Vec<(Timestamp, Timestamp)> = pages
            .iter()
            .filter(|p| !p.metrics.is_empty())
            .map(|p| (p.first_at, p.last_at))
            .collect();
        let mut rest = pages.split_off(1);
        let mut out = pages.pop()?;
        for p in &mut rest {
            for (m, s) in std::mem::take(&mut p.metrics) {
                out.metrics.entry(m).or_insert(s);
            }
        }
        if let (Some(first), Some(last)) = (
            held.iter().map(|h| h.0).min(),
            held.iter().map(|h| h.1).max(),
        ) {
            out.first_at = first;
            out.last_at = last;
        }
        Some(out)
    }
}

/// Why a Kinesis record was quarantined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuarantineReason {
    NotJson,
    NotObjectOrArray,
    InvalidDeviceId,
    InvalidTimestamp,
    TimestampInFuture,
    TimestampTooOld,
    InvalidMetric,
    TooManyMetrics,
    ArrayTooLong,
    PayloadTooLarge,
    UnknownDevice,
    /// `metadata` is not an object, or too large or too deep to store (DynamoDB refuses
    /// items over 400 KB and nesting over 32 levels; one bad item would fail a whole batch).
    InvalidMetadata,
    /// Valid on its own, but its reading (the device's metrics at one timestamp, merged over
    /// records) would pass DynamoDB's 400 KB item limit: every record of it in the batch is
    /// kept here, since a write DynamoDB refuses for good would stall the stream shard.
    ReadingTooLarge,
    /// A KPL aggregated record (it starts with the KPL's magic bytes) whose MD5 does not
    /// match or whose protobuf does not parse: none of its user records can be trusted.
    CorruptAggregate,
}

impl QuarantineReason {
    pub const ALL: &'static [QuarantineReason] = &[
        QuarantineReason::NotJson,
        QuarantineReason::NotObjectOrArray,
        QuarantineReason::InvalidDeviceId,
        QuarantineReason::InvalidTimestamp,
        QuarantineReason::TimestampInFuture,
        QuarantineReason::TimestampTooOld,
        QuarantineReason::InvalidMetric,
        QuarantineReason::TooManyMetrics,
        QuarantineReason::ArrayTooLong,
        QuarantineReason::PayloadTooLarge,
        QuarantineReason::UnknownDevice,
        QuarantineReason::InvalidMetadata,
        QuarantineReason::ReadingTooLarge,
        QuarantineReason::CorruptAggregate,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            QuarantineReason::NotJson => "not_json",
            QuarantineReason::NotObjectOrArray => "not_object_or_array",
            QuarantineReason::InvalidDeviceId => "invalid_device_id",
            QuarantineReason::InvalidTimestamp => "invalid_timestamp",
            QuarantineReason::TimestampInFuture => "timestamp_in_future",
            QuarantineReason::TimestampTooOld => "timestamp_too_old",
            QuarantineReason::InvalidMetric => "invalid_metric",
            QuarantineReason::TooManyMetrics => "too_many_metrics",
            QuarantineReason::ArrayTooLong => "array_too_long",
            QuarantineReason::PayloadTooLarge => "payload_too_large",
            QuarantineReason::UnknownDevice => "unknown_device",
            QuarantineReason::InvalidMetadata => "invalid_metadata",
            QuarantineReason::ReadingTooLarge => "reading_too_large",
            QuarantineReason::CorruptAggregate => "corrupt_aggregate",
        }
    }
}

/// `QUARANTINE#<day>#<n>` / `<received>#<sequence>`: a bad record, kept with its raw bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuarantineItem {
    pub pk: String,
    pub sk: String,
    pub reason: QuarantineReason,
    pub message: String,
    pub received_at: Timestamp,
    pub sequence_number: String,
    /// The user record's index inside the KPL aggregate the Kinesis record carried; absent
    /// for a plain record. Its payload is then that user record's data alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_record: Option<u32>,
    pub partition_key: String,
    /// The user record's own explicit hash key, when its producer set one (KPL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explicit_hash_key: Option<String>,
    /// Size of the original record in bytes.
    pub size: u64,
    /// The record's first [`QuarantineItem::PART_BYTES`] bytes; the rest, if any, is in
    /// `parts - 1` [`QuarantinePartItem`]s under the same partition.
    #[serde(with = "serde_bytes_as_binary")]
    pub payload: Vec<u8>,
    /// How many pieces the payload is stored in, this item's included.
    #[serde(default = "one")]
    pub parts: u16,
    pub ttl: i64,
}

fn one() -> u16 {
    1
}

/// The sequence a quarantine key names: the record's, or `<sequence>.<index>` for a user
/// record of an aggregate (after its record's, before the next record's).
fn key_sequence(sequence: &str, sub_record: Option<u32>) -> String {
    match sub_record {
        Some(i) => format!("{sequence}.{i}"),
        None => sequence.to_owned(),
    }
}

/// `QUARANTINE#<day>#<n>` / `<received>#<sequence>#<part>`: a further piece of a quarantined
/// payload too large for one item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuarantinePartItem {
    pub pk: String,
    pub sk: String,
    #[serde(with = "serde_bytes_as_binary")]
    pub payload: Vec<u8>,
    pub ttl: i64,
}

/// Where a quarantined payload came from: a Kinesis record, or one user record of a KPL
/// aggregate inside it (then its own partition key and explicit hash key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuarantineSource<'a> {
    pub received: Timestamp,
    pub sequence: &'a str,
    pub sub_record: Option<u32>,
    pub partition_key: &'a str,
    pub explicit_hash_key: Option<&'a str>,
}

/// A quarantined record as items: the record's own item, then its payload's further parts.
#[derive(Debug, Clone, PartialEq)]
pub struct QuarantinedRecord {
    pub record: QuarantineItem,
    pub parts: Vec<QuarantinePartItem>,
}

impl QuarantineItem {
    /// Bytes of payload per item: every item stays well under DynamoDB's 400 KB, and a
    /// Kinesis record (at most 1 MiB) needs at most four.
    pub const PART_BYTES: usize = 300 * 1024;
    pub const RETENTION_DAYS: u32 = 14;

    /// Builds the items of a quarantined record, its whole payload split over as many as it
    /// needs. Everything comes from the arguments, so a replay rebuilds the same items.
    pub fn split(
        source: QuarantineSource<'_>,
        reason: QuarantineReason,
        message: String,
        data: &[u8],
    ) -> QuarantinedRecord {
        let received = source.received;
        let sequence = &key_sequence(source.sequence, source.sub_record);
        let key = Self::key_for(received.day(), received, sequence);
        let ttl = received.ttl_after_days(Self::RETENTION_DAYS);
        let mut chunks = data.chunks(Self::PART_BYTES);
        let first = chunks.next().unwrap_or_default().to_vec();
        let parts: Vec<QuarantinePartItem> = chunks
            .enumerate()
            .map(|(i, chunk)| {
                let k = EntityKey::QuarantinePart {
                    day: received.day(),
                    partition: Self::partition_for(sequence),
                    received,
                    sequence: sequence.to_owned(),
                    part: (i + 1) as u16,
                }
                .key();
                QuarantinePartItem {
                    pk: k.pk,
                    sk: k.sk,
                    payload: chunk.to_vec(),
                    ttl,
                }
            })
            .collect();
        QuarantinedRecord {
            record: QuarantineItem {
                pk: key.pk,
                sk: key.sk,
                reason,
                message,
                received_at: received,
                sequence_number: source.sequence.to_owned(),
                sub_record: source.sub_record,
                partition_key: source.partition_key.to_owned(),
                explicit_hash_key: source.explicit_hash_key.map(str::to_owned),
                size: data.len() as u64,
                payload: first,
                parts: 1 + parts.len() as u16,
                ttl,
            },
            parts,
        }
    }

    /// The keys of this record's further parts, in order.
    pub fn part_keys(&self) -> Vec<keys::Key> {
        let sequence = key_sequence(&self.sequence_number, self.sub_record);
        (1..self.parts)
            .map(|part| {
                EntityKey::QuarantinePart {
                    day: self.received_at.day(),
                    partition: Self::partition_for(&sequence),
                    received: self.received_at,
                    sequence: sequence.clone(),
                    part,
                }
                .key()
            })
            .collect()
    }

    /// Which of the day's partitions a record goes to (stable for the same sequence number,
    /// so a replay rewrites the same item).
    pub fn partition_for(sequence: &str) -> u16 {
        let h = sequence
            .bytes()
            .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
        (h % u32::from(keys::QUARANTINE_PARTITIONS)) as u16
    }

    pub fn key_for(day: Day, received: Timestamp, sequence: &str) -> keys::Key {
        EntityKey::Quarantine {
            day,
            partition: Self::partition_for(sequence),
            received,
            sequence: sequence.to_owned(),
        }
        .key()
    }
}

/// Binary (`B`) attribute for raw bytes rather than a list of numbers.
mod serde_bytes_as_binary {
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(b)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Vec<u8>, A::Error> {
                let mut out = Vec::new();
                while let Some(b) = a.next_element::<u8>()? {
                    out.push(b);
                }
                Ok(out)
            }
        }
        d.deserialize_bytes(V)
    }
}

/// `CONFIG` / `SHARDS#<id>`: a device's shard-count history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardConfigItem {
    pub pk: String,
    pub sk: String,
    pub epochs: LayoutHistory,
    /// Bumped by every change, so two concurrent changes cannot both land (absent = 0).
    #[serde(default)]
    pub version: u64,
}

impl ShardConfigItem {
    pub fn new(device: &DeviceId, epochs: LayoutHistory) -> Self {
        Self::at(EntityKey::ShardConfig(device.clone()), epochs)
    }

    /// The fleet's default layout history (same shape as a device's).
    pub fn default_layout(epochs: LayoutHistory) -> Self {
        Self::at(EntityKey::DefaultLayout, epochs)
    }

    fn at(key: EntityKey, epochs: LayoutHistory) -> Self {
        let k = key.key();
        ShardConfigItem {
            pk: k.pk,
            sk: k.sk,
            epochs,
            version: 0,
        }
    }
}

/// `NOTIFIED#<eventId>` / `#MARKER`: an alert notification that was published. Written after
/// the publish, read before it, so a replayed stream record does not notify twice; `ttl`
/// outlives the table stream's 24 h retention (no record can be replayed after it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NotifyMarkerItem {
    pub pk: String,
    pub sk: String,
    pub event_id: EventId,
    pub published_at: Timestamp,
    pub ttl: i64,
}

impl NotifyMarkerItem {
    /// How long a marker is kept: twice the stream's retention, so TTL's own delay aside no
    /// replay can outlive it.
    pub const TTL_SECONDS: i64 = 48 * 3600;

    pub fn new(event_id: EventId, published_at: Timestamp) -> Self {
        let k = EntityKey::NotifyMarker(event_id.clone()).key();
        NotifyMarkerItem {
            pk: k.pk,
            sk: k.sk,
            event_id,
            published_at,
            ttl: published_at.epoch_seconds() + Self::TTL_SECONDS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    fn sample_reading() -> Reading {
        Reading {
            device_id: DeviceId::new("sensor_01").unwrap(),
            timestamp: ts("2026-04-20T14:00:00Z"),
            metrics: [("temperature", 22.4), ("humidity", 45.0), ("battery", 87.0)]
                .into_iter()
                .map(|(k, v)| (MetricName::new(k).unwrap(), v))
                .collect(),
            metadata: None,
        }
    }

    #[test]
    fn reading_item_matches_the_sample_row_of_design_9() {
        let item = ReadingItem::new(&sample_reading(), None, 30);
        assert_eq!(item.pk, "DEVICE#sensor_01");
        assert_eq!(item.sk, "READING#2026-04-20T14:00:00.000000Z");
        assert_eq!(
            item.ttl,
            ts("2026-04-20T14:00:00Z").epoch_seconds() + 30 * 86_400
        );
        let (back, shard) = item.to_reading().unwrap();
        assert_eq!(back, sample_reading());
        assert_eq!(shard, None);
    }

    #[test]
    fn reading_json_is_flat_with_normalised_time() {
        assert_eq!(
            sample_reading().to_json(),
            json!({"deviceId":"sensor_01","timestamp":"2026-04-20T14:00:00.000000Z",
                   "temperature":22.4,"humidity":45,"battery":87})
        );
    }

    #[test]
    fn field_constants_are_the_serialised_names() {
        let mut d = DeviceItem::new(
            DeviceId::new("sensor_01").unwrap(),
            DeviceStatus::Active,
            ts("2026-04-20T14:00:00Z"),
        );
        d.updated_at = Some(d.created_at);
        d.last_seen_at = Some(d.created_at);
        d.latest = Some(LatestReading {
            timestamp: d.created_at,
            metrics: BTreeMap::new(),
        });
        d.rule_states.insert(
            DeviceItem::rule_state_key(&MetricName::new("temperature").unwrap(), AlertRule::Max),
            RuleState {
                mode: RulePhase::Open,
                since: Some(d.created_at),
                alert: Some(AlertId::for_breach(
                    d.created_at,
                    &MetricName::new("temperature").unwrap(),
                    AlertRule::Max,
                )),
                at: d.created_at,
                threshold: Threshold::new(None, Some(30.0), Severity::Critical),
            },
        );
        d.thresholds.insert(
            MetricName::new("temperature").unwrap(),
            Threshold::new(None, Some(30.0), Severity::Critical),
        );
        let v = serde_json::to_value(&d).unwrap();
        for f in [
            field::DEVICE_ID,
            field::STATUS,
            field::CREATED_AT,
            field::UPDATED_AT,
            field::LAST_SEEN_AT,
            field::LATEST,
            field::THRESHOLDS,
            field::RULE_STATES,
        ] {
            assert!(v.get(f).is_some(), "device item has no {f}: {v}");
        }
        let a = AggregateItem {
            pk: String::new(),
            sk: String::new(),
            metrics: BTreeMap::new(),
            first_at: d.created_at,
            last_at: d.created_at,
            applied: BTreeMap::new(),
            marks: Default::default(),
            marked_at: 0,
            from_table: false,
            folded: Default::default(),
            version: 0,
            sealed: false,
            open: false,
        };
        let v = serde_json::to_value(&a).unwrap();
        assert!(
            v.get(field::SEALED).is_none(),
            "unsealed items write no sealed"
        );
        assert!(v.get(field::OPEN).is_none(), "closed days write no open");
        let open = serde_json::to_value(AggregateItem {
            open: true,
            ..a.clone()
        })
        .unwrap();
        assert_eq!(open[field::OPEN], serde_json::json!(true));
        for f in [
            field::METRICS,
            field::FIRST_AT,
            field::LAST_AT,
            field::APPLIED,
            field::VERSION,
        ] {
            assert!(v.get(f).is_some(), "aggregate item has no {f}: {v}");
        }
        let s = serde_json::to_value(ShardConfigItem::new(
            &DeviceId::new("x").unwrap(),
            LayoutHistory::default(),
        ))
        .unwrap();
        assert!(s.get(field::EPOCHS).is_some());
    }

    #[test]
    fn merged_pages_union_metrics_and_span_the_pages_holding_metrics() {
        let t = |s: &str| Timestamp::parse_rfc3339(s).unwrap();
        let page = |n: u16, m: &str, first: &str, last: &str| AggregateItem {
            pk: "DEVICE#d".into(),
            sk: format!("p{n}"),
            metrics: BTreeMap::from([(MetricName::new(m).unwrap(), Stats::of(n as f64))]),
            first_at: t(first),
            last_at: t(last),
            applied: BTreeMap::new(),
            marks: Default::default(),
            marked_at: 0,
            from_table: false,
            folded: Default::default(),
            version: 1,
            sealed: n < 2,
            open: false,
        };
        let mut emptied = page(3, "z", "2026-04-20T14:00:00Z", "2026-04-20T14:59:00Z");
        emptied.metrics.clear();
        let merged = AggregateItem::merge_pages(vec![
            page(0, "a", "2026-04-20T14:10:00Z", "2026-04-20T14:20:00Z"),
            page(1, "b", "2026-04-20T14:05:00Z", "2026-04-20T14:15:00Z"),
            page(2, "c", "2026-04-20T14:12:00Z", "2026-04-20T14:30:00Z"),
            emptied,
        ])
        .unwrap();
        assert_eq!(merged.sk, "p0");
        assert_eq!(merged.metrics.len(), 3);
        assert_eq!(merged.first_at, t("2026-04-20T14:05:00Z"));
        assert_eq!(merged.last_at, t("2026-04-20T14:30:00Z"));
        let one = page(0, "a", "2026-04-20T14:10:00Z", "2026-04-20T14:20:00Z");
        assert_eq!(AggregateItem::merge_pages(vec![one.clone()]), Some(one));
    }

    #[test]
    fn alert_field_constants_are_the_serialised_names() {
        let t = ts("2026-04-20T14:00:00Z");
        let m = MetricName::new("temperature").unwrap();
        let a = AlertItem {
            pk: String::new(),
            sk: String::new(),
            gsi1pk: None,
            gsi1sk: None,
            device_id: DeviceId::new("sensor_01").unwrap(),
            alert_id: AlertId::for_breach(t, &m, AlertRule::Max),
            metric: Some(m),
            rule: AlertRule::Max,
            severity: Severity::Critical,
            state: AlertState::Open,
            message: String::new(),
            value: 31.0,
            threshold: 30.0,
            breach_count: 1,
            opened_at: t,
            last_breach_at: t,
            acknowledged_at: None,
            resolved_at: Some(t),
            snoozed_until: Some(t),
        };
        let v = serde_json::to_value(&a).unwrap();
        for f in [
            field::STATE,
            field::VALUE,
            field::BREACH_COUNT,
            field::LAST_BREACH_AT,
            field::RESOLVED_AT,
            field::SNOOZED_UNTIL,
        ] {
            assert!(v.get(f).is_some(), "alert item has no {f}: {v}");
        }
    }

    #[test]
    fn every_gsi1_projected_attribute_is_a_device_or_alert_field() {
        let mut d = DeviceItem::new(
            DeviceId::new("sensor_01").unwrap(),
            DeviceStatus::Active,
            ts("2026-04-20T14:00:00Z"),
        );
        d.name = Some("Warehouse Temp A".into());
        d.device_type = Some(DeviceType::Sensor);
        d.location = Some(json!("aisle 3"));
        d.firmware = Some("2.1.0".into());
        d.updated_at = Some(d.created_at);
        let m = MetricName::new("temperature").unwrap();
        let a = AlertItem {
            pk: String::new(),
            sk: String::new(),
            gsi1pk: None,
            gsi1sk: None,
            device_id: d.device_id.clone(),
            alert_id: AlertId::for_breach(d.created_at, &m, AlertRule::Max),
            metric: Some(m),
            rule: AlertRule::Max,
            severity: Severity::Critical,
            state: AlertState::Open,
            message: "temperature above 30".into(),
            value: 31.0,
            threshold: 30.0,
            breach_count: 1,
            opened_at: d.created_at,
            last_breach_at: d.created_at,
            acknowledged_at: Some(d.created_at),
            resolved_at: None,
            snoozed_until: Some(d.created_at),
        };
        let dv = serde_json::to_value(&d).unwrap();
        let av = serde_json::to_value(&a).unwrap();
        for f in crate::table::TABLE.global_secondary_indexes[0].non_key_attributes {
            assert!(
                dv.get(f).is_some() || av.get(f).is_some(),
                "{f} is on no item"
            );
        }
        // What changes on every batch must stay out of the index, or each device update
        // pays a second write unit for the index copy.
        for f in [field::LAST_SEEN_AT, field::LATEST] {
            assert!(
                !crate::table::TABLE.global_secondary_indexes[0]
                    .non_key_attributes
                    .contains(&f)
            );
        }
    }

    #[test]
    fn stats_merge_and_average() {
        let mut s = Stats::of(1.0);
        s.merge(&Stats::of(3.0));
        assert_eq!(
            (s.count, s.sum, s.min, s.max, s.avg()),
            (2, 4.0, 1.0, 3.0, 2.0)
        );
    }

    #[test]
    fn quarantine_partition_is_stable_and_in_range() {
        let seq = "49590338271490256608559692538361571095921575989136588898";
        let p = QuarantineItem::partition_for(seq);
        assert!(p < keys::QUARANTINE_PARTITIONS);
        assert_eq!(p, QuarantineItem::partition_for(seq));
    }
}
