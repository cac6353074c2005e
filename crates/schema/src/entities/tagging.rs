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

/// `TAG#<key>:<value>#<n>` / `#COUNT`: of the devices partition n of the tag's index holds,
/// how many there are (`members`, kept by `PUT /devices/{id}` in one transaction with the
/// index entry it creates or deletes) and how many have an open offline alert (`offlineMembers`,
/// kept by the watchdog when it opens one and by the alerts role when the device is back,
/// each in one transaction with the device item). A group's counts are the sums over its
/// partitions: what a group rule judges, with a fixed number of reads whatever its size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TagCountItem {
    pub pk: String,
    pub sk: String,
    #[serde(default)]
    pub members: i64,
    #[serde(default)]
    pub offline_members: i64,
}

impl TagCountItem {
    pub fn key(tag: &Tag, partition: u16) -> keys::Key {
        EntityKey::TagCount {
            tag: tag.clone(),
            partition,
        }
        .key()
    }

    /// The count partition of a device: the one its index entries live in.
    pub fn key_of(tag: &Tag, device: &DeviceId) -> keys::Key {
        Self::key(tag, keys::tag_index_partition(device))
    }

    /// Every partition's key of `tag`, in order.
    pub fn keys(tag: &Tag) -> Vec<keys::Key> {
        (0..keys::TAG_INDEX_PARTITIONS)
            .map(|n| Self::key(tag, n))
            .collect()
    }
}
