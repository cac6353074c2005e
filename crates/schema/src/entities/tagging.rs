//! A device's tag history and its entries in the tag index (docs/design.md §2 "Tags and
//! groups"). Both are written only by `PUT /devices/{id}`.

use serde::{Deserialize, Serialize};

use crate::ids::{DeviceId, DeviceStatus};
use crate::keys::{self, EntityKey};
use crate::tags::{Tag, TagHistory, Tags};

/// `CONFIG` / `TAGS#<id>`: the device's tags over time, replaced under an optimistic lock
/// (`version`) like a layout history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TagHistoryItem {
    pub pk: String,
    pub sk: String,
    pub epochs: TagHistory,
    #[serde(default)]
    pub version: u64,
}

impl TagHistoryItem {
    pub fn key(d: &DeviceId) -> keys::Key {
        EntityKey::TagHistory(d.clone()).key()
    }
}

/// `TAG#<key>:<value>#<n>` / `DEVICE#<id>`: the device holds the tag (its latest declared
/// tags). Carries what a listing shows without reading the device: its status (so
/// `?tag=…&status=…` needs no second read) and all its tags.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TagIndexItem {
    pub pk: String,
    pub sk: String,
    pub device_id: DeviceId,
    pub status: DeviceStatus,
    pub tags: Tags,
}

impl TagIndexItem {
    pub fn new(tag: &Tag, device: &DeviceId, status: DeviceStatus, tags: Tags) -> Self {
        let key = EntityKey::TagIndex {
            tag: tag.clone(),
            partition: keys::tag_index_partition(device),
            device: device.clone(),
        }
        .key();
        TagIndexItem {
            pk: key.pk,
            sk: key.sk,
            device_id: device.clone(),
            status,
            tags,
        }
    }
}
