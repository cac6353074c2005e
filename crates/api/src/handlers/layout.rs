//! A device's reading layout over time: its write partitions (`/devices/{id}/shards`) and whether
//! its readings are single items or packed into slots (`/devices/{id}/layout`). Both routes
//! edit the one history ([`LayoutHistory`]): a change takes effect no earlier than ingest
//! containers can have learnt of it ([`tidemark_schema::LayoutLead`]), so every reading, in
//! flight or re-sent, keeps the item it was or will be written to, and nothing moves; reads
//! stitch the epochs. An announced change not yet in use is replaced; repeating a change is a
//! no-op; of two racing changes one gets a 409.

use http::StatusCode;
use tidemark_schema::table::attr;
use tidemark_schema::{DeviceId, EntityKey, Layout, LayoutHistory, LayoutHistoryError, Timestamp};
use tidemark_store::layouts::LayoutBook;

use super::{Reply, device_not_found};
use crate::App;
use crate::error::ApiError;
use crate::render;
use crate::store::Store;
#[allow(unused_imports)]
use crate::store::traits::*;
use crate::validate;

/// A device's stored layout history, and the fleet's default it is laid over.
#[derive(Debug, Default)]
pub(super) struct StoredLayouts {
    /// The device's own epochs, as stored.
    pub own: LayoutHistory,
    pub version: u64,
    pub default: LayoutHistory,
    pub exists: bool,
}

impl StoredLayouts {
    /// What the device's readings follow: the default until its own first epoch, then its
    /// own ([`LayoutHistory::under`]).
    pub fn history(&self) -> LayoutHistory {
        self.own.under(&self.default)
    }
}

/// A planning error as the answer to a request whose partition count is the field `count_field`.
fn plan_error(e: LayoutHistoryError, count_field: &str) -> ApiError {
    match e {
        LayoutHistoryError::Count(_) => ApiError::bad(count_field, e.to_string()),
        LayoutHistoryError::TooSoon { .. } => ApiError::bad("effectiveFrom", e.to_string()),
        LayoutHistoryError::NotAfterLast { .. } => ApiError::Conflict(e.to_string()),
    }
}

impl<S: Store> App<S> {
    /// The layout histories (the device's own and the fleet's default) and, if `device`,
    /// whether the device is registered, in one BatchGetItem.
    async fn read_layouts(&self, id: &DeviceId, device: bool) -> Result<StoredLayouts, ApiError> {
        let dev_key = EntityKey::Device(id.clone()).key();
        let mut keys = LayoutBook::keys(std::slice::from_ref(id));
        if device {
            keys.push(dev_key.clone());
        }
        let mut exists = false;
        let mut config = Vec::new();
        for item in self.store.batch_get(keys).await? {
            if item.get(attr::SK).and_then(|v| v.as_s().ok()) == Some(&dev_key.sk) {
                exists = true;
            } else {
                config.push(item);
            }
        }
        let (book, _) = LayoutBook::from_raw(config);
        let (own, version) = book.own(id);
        Ok(StoredLayouts {
            own: own.clone(),
            version,
            default: book.default_history().0.clone(),
            exists,
        })
    }

    /// The layout histories of a registered device (a 404 otherwise).
    pub(super) async fn stored_layouts(&self, id: &DeviceId) -> Result<StoredLayouts, ApiError> {
        let out = self.read_layouts(id, true).await?;
        if !out.exists {
            return Err(device_not_found(id));
        }
        Ok(out)
    }

    /// The history a device's readings follow, without the registration check (pages after
    /// the first).
    pub(super) async fn history_of(&self, id: &DeviceId) -> Result<LayoutHistory, ApiError> {
        Ok(self.read_layouts(id, false).await?.history())
    }

    pub(super) async fn get_shards(&self, id: DeviceId) -> Result<Reply, ApiError> {
        let s = self.stored_layouts(&id).await?;
        Ok((
            StatusCode::OK,
            render::shards(&id, &s.history(), self.now()),
        ))
    }

    pub(super) async fn get_layout(&self, id: DeviceId) -> Result<Reply, ApiError> {
        let s = self.stored_layouts(&id).await?;
        Ok((
            StatusCode::OK,
            render::layout(&id, &s.history(), self.now()),
        ))
    }

    /// Schedules a shard-count change of a hot device, keeping its packing (see the module
    /// docs for when it takes effect).
    pub(super) async fn put_shards(&self, id: DeviceId, body: &[u8]) -> Result<Reply, ApiError> {
        let change = validate::partition_count_change(self.within_body_limit(body)?)?;
        let now = self.now();
        let lead = self.config.layout_lead;
        let from = change
            .effective_from
            .unwrap_or_else(|| lead.earliest_change(now));
        let current = self.stored_layouts(&id).await?;
        let layout = Layout {
            partitions: change.count,
            ..current.history().layout_at(from)
        };
        let next = self.plan(&id, &current, from, layout, "count").await?;
        Ok((StatusCode::OK, render::shards(&id, &next, now)))
    }

    /// Schedules a layout change: single items or packed slots of `slotSeconds`, over
    /// `shards` partitions (default: the count in force then).
    pub(super) async fn put_layout(&self, id: DeviceId, body: &[u8]) -> Result<Reply, ApiError> {
        let change = validate::layout_change(self.within_body_limit(body)?)?;
        let now = self.now();
        let lead = self.config.layout_lead;
        let from: Timestamp = change
            .effective_from
            .unwrap_or_else(|| lead.earliest_change(now));
        let current = self.stored_layouts(&id).await?;
        let layout = Layout {
            partitions: change
                .shards
                .unwrap_or_else(|| current.history().count_at(from)),
            slot: change.slot,
        };
        let next = self.plan(&id, &current, from, layout, "shards").await?;
        Ok((StatusCode::OK, render::layout(&id, &next, now)))
    }

    /// Plans "`layout` from `from` on" into the device's own epochs (which override the
    /// fleet's default from the first of them on), stores them unless unchanged, and returns
    /// the history the device then follows; a 409 if another change landed since `current`
    /// was read. `count_field` names the partition count in the request, for a 400.
    async fn plan(
        &self,
        id: &DeviceId,
        current: &StoredLayouts,
        from: Timestamp,
        layout: Layout,
        count_field: &str,
    ) -> Result<LayoutHistory, ApiError> {
        let next = current
            .own
            .planned_layout(from, layout, self.now(), self.config.layout_lead)
            .map_err(|e| plan_error(e, count_field))?;
        if next != current.own
            && !self
                .store
                .replace_layouts(id, &next, current.version)
                .await?
        {
            return Err(ApiError::Conflict(format!(
                "the layout history of device {id} changed while this request ran; read it \
                 (GET /devices/{id}/layout) and try again"
            )));
        }
        Ok(next.under(&current.default))
    }
}
