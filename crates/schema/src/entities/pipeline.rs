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
