//! A device's reading layout over time: its write shards (`/devices/{id}/shards`) and whether
//! its readings are single items or packed into slots (`/devices/{id}/layout`). Both routes
//! edit the one history ([`ShardHistory`]): a change takes effect no earlier than ingest
//! containers can have learnt of it ([`tidemark_schema::ShardLead`]), so every reading, in
//! flight or re-sent, keeps the item it was or will be written to, and nothing moves; reads
//! stitch the epochs. An announced change not yet in use is replaced; repeating a change is a
//! no-op; of two racing changes one gets a 409.

use http::StatusCode;
use tidemark_schema::table::attr;
use tidemark_schema::{
    DeviceId, EntityKey, Layout, ShardConfigItem, ShardHistory, ShardHistoryError, Timestamp,
};

use super::{Reply, device_not_found};
use crate::App;
use crate::error::ApiError;
use crate::render;
use crate::store::Store;
use crate::validate;

/// A device's stored shard history.
#[derive(Debug, Default)]
pub(super) struct Shards {
    pub history: ShardHistory,
    pub version: u64,
    pub exists: bool,
}

/// A planning error as the answer to a request whose shard count is the field `count_field`.
fn plan_error(e: ShardHistoryError, count_field: &str) -> ApiError {
    match e {
        ShardHistoryError::Count(_) => ApiError::bad(count_field, e.to_string()),
        ShardHistoryError::TooSoon { .. } => ApiError::bad("effectiveFrom", e.to_string()),
        ShardHistoryError::NotAfterLast { .. } => ApiError::Conflict(e.to_string()),
    }
}

impl<S: Store> App<S> {
    /// The shard history and whether the device is registered, in one BatchGetItem.
    pub(super) async fn shards_of(&self, id: &DeviceId) -> Result<Shards, ApiError> {
        let cfg_key = EntityKey::ShardConfig(id.clone()).key();
        let dev_key = EntityKey::Device(id.clone()).key();
        let items = self
            .store
            .batch_get(vec![cfg_key.clone(), dev_key.clone()])
            .await?;
        let mut out = Shards::default();
        for item in items {
            let sk = item.get(attr::SK).and_then(|v| v.as_s().ok());
            if sk == Some(&cfg_key.sk) {
                let c: ShardConfigItem = tidemark_store::from_item(item)?;
                out.history = c.epochs;
                out.version = c.version;
            } else if sk == Some(&dev_key.sk) {
                out.exists = true;
            }
        }
        if !out.exists {
            return Err(device_not_found(id));
        }
        Ok(out)
    }

    /// The layout history alone (one GetItem), for pages after the first.
    pub(super) async fn history_of(&self, id: &DeviceId) -> Result<ShardHistory, ApiError> {
        let key = EntityKey::ShardConfig(id.clone()).key();
        Ok(match self.store.get(key, false).await? {
            Some(item) => tidemark_store::from_item::<ShardConfigItem>(item)?.epochs,
            None => ShardHistory::default(),
        })
    }

    pub(super) async fn get_shards(&self, id: DeviceId) -> Result<Reply, ApiError> {
        let s = self.shards_of(&id).await?;
        Ok((StatusCode::OK, render::shards(&id, &s.history, self.now())))
    }

    pub(super) async fn get_layout(&self, id: DeviceId) -> Result<Reply, ApiError> {
        let s = self.shards_of(&id).await?;
        Ok((StatusCode::OK, render::layout(&id, &s.history, self.now())))
    }

    /// Schedules a shard-count change of a hot device, keeping its packing (see the module
    /// docs for when it takes effect).
    pub(super) async fn put_shards(&self, id: DeviceId, body: &[u8]) -> Result<Reply, ApiError> {
        let change = validate::shard_change(self.within_body_limit(body)?)?;
        let now = self.now();
        let lead = self.config.shard_lead;
        let from = change
            .effective_from
            .unwrap_or_else(|| lead.earliest_change(now));
        let current = self.shards_of(&id).await?;
        let next = current
            .history
            .planned(from, change.count, now, lead)
            .map_err(|e| plan_error(e, "count"))?;
        self.store_history(&id, &current, &next).await?;
        Ok((StatusCode::OK, render::shards(&id, &next, now)))
    }

    /// Schedules a layout change: single items or packed slots of `slotSeconds`, over
    /// `shards` partitions (default: the count in force then).
    pub(super) async fn put_layout(&self, id: DeviceId, body: &[u8]) -> Result<Reply, ApiError> {
        let change = validate::layout_change(self.within_body_limit(body)?)?;
        let now = self.now();
        let lead = self.config.shard_lead;
        let from: Timestamp = change
            .effective_from
            .unwrap_or_else(|| lead.earliest_change(now));
        let current = self.shards_of(&id).await?;
        let layout = Layout {
            shards: change
                .shards
                .unwrap_or_else(|| current.history.count_at(from)),
            slot: change.slot,
        };
        let next = current
            .history
            .planned_layout(from, layout, now, lead)
            .map_err(|e| plan_error(e, "shards"))?;
        self.store_history(&id, &current, &next).await?;
        Ok((StatusCode::OK, render::layout(&id, &next, now)))
    }

    /// Stores `next` unless it is what is stored; a 409 if another change landed since
    /// `current` was read.
    async fn store_history(
        &self,
        id: &DeviceId,
        current: &Shards,
        next: &ShardHistory,
    ) -> Result<(), ApiError> {
        if *next != current.history && !self.store.replace_shards(id, next, current.version).await?
        {
            return Err(ApiError::Conflict(format!(
                "the layout history of device {id} changed while this request ran; read it \
                 (GET /devices/{id}/layout) and try again"
            )));
        }
        Ok(())
    }
}
