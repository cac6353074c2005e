//! Items the pipeline keeps about its own running rather than about a device's data: shard
//! layout histories, heartbeats and notification markers.

use serde::{Deserialize, Serialize};

use crate::history::LayoutHistory;
use crate::ids::{DeviceId, EventId};
use crate::keys::EntityKey;
use crate::time::Timestamp;

/// `PIPELINE` / `HEARTBEAT#<shard>`: how far the pipeline has come, per ingest shard. The
/// watchdog sends a heartbeat record into the shard at `sentAt`; ingest, behind every record
/// that arrived before it, writes `sentAt` and `storedAt`; the alerts role, when it has seen
/// that write, copies `sentAt` to `passedAt`. Every reading that arrived before `passedAt`
/// has then been stored and seen by the alerts role. The rollups role does the same into
/// `rollupsPassedAt` once the group partials of every record before it are written: group
/// window rules judge up to there (docs/decisions/0015-group-rules-from-counts.md).
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollups_passed_at: Option<Timestamp>,
}

impl HeartbeatItem {
    /// The heartbeat of `shard` sent at `at` as it is once ingest has stored it and both roles
    /// have passed it, at once: what a stand-in for the pipeline writes (tests, benches).
    pub fn passed_at_once(shard: &crate::keys::ShardName, at: Timestamp) -> Self {
        let key = crate::EntityKey::Heartbeat(shard.clone()).key();
        HeartbeatItem {
            pk: key.pk,
            sk: key.sk,
            sent_at: at,
            stored_at: Some(at),
            passed_at: Some(at),
            rollups_passed_at: Some(at),
        }
    }
}

/// `CONFIG` / `SHARDS#<id>`: a device's shard-count history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LayoutHistoryItem {
    pub pk: String,
    pub sk: String,
    pub epochs: LayoutHistory,
    /// Bumped by every change, so two concurrent changes cannot both land (absent = 0).
    #[serde(default)]
    pub version: u64,
}

impl LayoutHistoryItem {
    pub fn new(device: &DeviceId, epochs: LayoutHistory) -> Self {
        Self::at(EntityKey::DeviceLayout(device.clone()), epochs)
    }

    /// The fleet's default layout history (same shape as a device's).
    pub fn default_layout(epochs: LayoutHistory) -> Self {
        Self::at(EntityKey::DefaultLayout, epochs)
    }

    fn at(key: EntityKey, epochs: LayoutHistory) -> Self {
        let k = key.key();
        LayoutHistoryItem {
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

/// `REPAIR#<role>` / `<set aside at>#<record>`: a table-stream record an aggregator role set
/// aside after it failed the same way three times (docs/design.md §5, "What is retried, what
/// is set aside"): the stream record, the device and the hours and days it touched, the
/// error and the function version. The role recomputes those hours and days, or re-derives
/// that device's alert rules, from the table, then deletes the item; `ttl` keeps a repair
/// that never succeeds from staying for ever (it is logged and alarmed when written).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RepairItem {
    pub pk: String,
    pub sk: String,
    /// `rollups` or `alerts`.
    pub role: String,
    pub event_id: String,
    pub sequence_number: String,
    /// The table key of the item the stream record is about.
    pub item_pk: String,
    pub item_sk: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_id: Option<DeviceId>,
    /// Starts of the hours and days to recompute (the alerts role re-derives from the first).
    #[serde(default)]
    pub hours: Vec<Timestamp>,
    #[serde(default)]
    pub days: Vec<Timestamp>,
    /// The error's kind (`validation`, `too-large`, `panic`, ...) and text.
    pub kind: String,
    pub error: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_version: Option<String>,
    pub set_aside_at: Timestamp,
    pub ttl: i64,
}

impl RepairItem {
    /// How long a repair is kept if it never succeeds.
    pub const TTL_SECONDS: i64 = 30 * 86_400;
}
