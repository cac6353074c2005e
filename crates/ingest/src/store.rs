//! The reads ingest's logic runs over, one small trait each, and the helpers that read a
//! device item's settings. Writes go through [`tidemark_store::write::batch::BatchWriteApi`] and
//! [`tidemark_store::write::slots::SlotStore`]. Implemented for DynamoDB by
//! [`crate::dynamo::DynamoLookups`], and over the one in-memory test engine by
//! [`crate::memory::MemoryStore`]: the logic is tested without a table.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::future::Future;

use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::{
    Day, DeviceId, GatewayFor, LayoutHistory, LayoutHistoryItem, MAX_METRICS_PER_DAY, MetricName,
    field,
};
use tidemark_store::{Item, StoreError};

/// Layout histories: the whole `CONFIG` partition, the fleet's default layout and the
/// devices with a partition count or layout of their own. Only those devices have an item there,
/// so one cached query answers for the whole fleet and an ordinary device costs no read at
/// all. Each item comes back parsed or as [`StoreError::Unreadable`]: one bad item must not
/// stop ingest.
pub trait LayoutHistorySource: Send + Sync {
    fn load_layout_histories(
        &self,
    ) -> impl Future<Output = Result<Vec<Result<LayoutHistoryItem, StoreError>>, StoreError>> + Send;

    /// Replaces the fleet's default layout history if its version is still `version` (0: none
    /// stored); `Ok(false)` when another container changed it first.
    fn replace_default_layout(
        &self,
        history: &LayoutHistory,
        version: u64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// A day's metric names.
pub type Names = BTreeSet<MetricName>;

/// The condition a write of names is made under: the set is absent, or holds at most (or
/// exactly) this many names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Room {
    /// `attribute_not_exists(names) OR size(names) <= n`: every name added still fits.
    AtMost(usize),
    /// `attribute_not_exists(names) OR size(names) = n`: the set is the one just read.
    Exactly(usize),
}

impl Room {
    /// Whether a set of `held` names meets the condition (`None`: no set).
    pub fn holds(self, held: Option<usize>) -> bool {
        match (self, held) {
            (_, None) => true,
            (Room::AtMost(n), Some(h)) => h <= n,
            (Room::Exactly(n), Some(h)) => h == n,
        }
    }
}

/// Which devices are registered (only asked with `UNKNOWN_DEVICES=quarantine`), and which
/// devices a gateway speaks for (only asked with `DEVICE_IDENTITY=partition-key`, for a
/// record naming a device other than its partition key).
pub trait DeviceDirectory: Send + Sync {
    fn existing_devices(
        &self,
        ids: &[DeviceId],
    ) -> impl Future<Output = Result<HashSet<DeviceId>, StoreError>> + Send;

    /// The `gatewayFor` of each of `ids` that is registered with one (absent: none). The
    /// default knows of no gateway.
    fn gateway_lists(
        &self,
        ids: &[DeviceId],
    ) -> impl Future<Output = Result<HashMap<DeviceId, GatewayFor>, StoreError>> + Send {
        let _ = ids;
        async { Ok(HashMap::new()) }
    }

    /// The `maxMetricsPerDay` of each of `ids` that sets one (absent: the default cap). The
    /// default sets none.
    fn metric_caps(
        &self,
        ids: &[DeviceId],
    ) -> impl Future<Output = Result<HashMap<DeviceId, u32>, StoreError>> + Send {
        let _ = ids;
        async { Ok(HashMap::new()) }
    }

    /// Adds `new` to the device's metric names of `day` if the set meets `room`
    /// ([`crate::metric_cap`]); the whole set afterwards, or `None` when the condition failed.
    /// The default keeps no set: every write succeeds, holding what it adds.
    fn add_metric_names(
        &self,
        device: &DeviceId,
        day: Day,
        new: &Names,
        room: Room,
    ) -> impl Future<Output = Result<Option<Names>, StoreError>> + Send {
        let _ = (device, day, room);
        let all = new.clone();
        async { Ok(Some(all)) }
    }

    /// The device's metric names of `day`, read strongly consistent (empty: none).
    fn read_metric_names(
        &self,
        device: &DeviceId,
        day: Day,
    ) -> impl Future<Output = Result<Names, StoreError>> + Send {
        let _ = (device, day);
        async { Ok(Names::new()) }
    }
}

/// A device item's `maxMetricsPerDay`, when it is a number in 1..=[`MAX_METRICS_PER_DAY`]
/// (another value, written by another tool, counts as none).
pub fn metric_cap(item: &Item) -> Option<u32> {
    let n = item.get(field::MAX_METRICS_PER_DAY)?.as_n().ok()?;
    n.parse::<u32>()
        .ok()
        .filter(|n| (1..=MAX_METRICS_PER_DAY).contains(n))
}

/// A device item's `gatewayFor`, read leniently: ids that do not parse are skipped, and a
/// list past [`tidemark_schema::MAX_GATEWAY_FOR`] (written by another tool) counts as none.
pub fn gateway_list(item: &Item) -> GatewayFor {
    let Some(AttributeValue::L(ids)) = item.get(field::GATEWAY_FOR) else {
        return GatewayFor::default();
    };
    let ids = ids
        .iter()
        .filter_map(|v| v.as_s().ok())
        .filter_map(|s| DeviceId::new(s).ok());
    GatewayFor::new(ids).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "a device's gatewayFor is unreadable; it speaks for no other");
        GatewayFor::default()
    })
}
