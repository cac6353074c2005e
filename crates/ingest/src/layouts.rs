//! The layout histories ingest writes with (docs/design.md §4): each device's own shard and layout
//! epochs over the fleet's default, from one cached query of the `CONFIG` partition.

use std::collections::HashMap;

use tidemark_schema::{DeviceId, EntityKey, LayoutHistory, ShardConfigItem};
use tidemark_store::StoreError;

/// Where every reading of the fleet goes, as of one load of the `CONFIG` partition.
#[derive(Debug, Clone, Default)]
pub struct Layouts {
    /// Devices' own histories, as stored.
    own: HashMap<DeviceId, LayoutHistory>,
    /// The same, laid over the default ([`LayoutHistory::under`]).
    effective: HashMap<DeviceId, LayoutHistory>,
    default: LayoutHistory,
    /// The default item's version (0: none stored), for replacing it.
    default_version: u64,
}

impl Layouts {
    /// The histories in `items`, and how many items were unreadable (skipped and logged: one
    /// bad item must not stop ingest).
    pub fn from_items(items: Vec<Result<ShardConfigItem, StoreError>>) -> (Self, u64) {
        let mut unreadable = 0;
        let mut own = HashMap::new();
        let (mut default, mut version) = (LayoutHistory::default(), 0);
        for item in items {
            let item = match item {
                Ok(i) => i,
                Err(e) => {
                    unreadable += 1;
                    tracing::warn!(error = %e, "unreadable layout configuration skipped");
                    continue;
                }
            };
            match EntityKey::parse(&item.pk, &item.sk) {
                Ok(EntityKey::ShardConfig(id)) => {
                    own.insert(id, item.epochs);
                }
                Ok(EntityKey::DefaultLayout) => (default, version) = (item.epochs, item.version),
                _ => {
                    unreadable += 1;
                    tracing::warn!(pk = %item.pk, sk = %item.sk, "unknown configuration item skipped");
                }
            }
        }
        let layouts = Layouts {
            own,
            ..Layouts::default()
        };
        (layouts.with_default(default, version), unreadable)
    }

    /// The same devices over another default history.
    pub fn with_default(mut self, default: LayoutHistory, version: u64) -> Self {
        self.effective = self
            .own
            .iter()
            .map(|(id, h)| (id.clone(), h.under(&default)))
            .collect();
        self.default = default;
        self.default_version = version;
        self
    }

    /// The history of `device`'s readings.
    pub fn of(&self, device: &DeviceId) -> &LayoutHistory {
        self.effective.get(device).unwrap_or(&self.default)
    }

    pub fn default_history(&self) -> (&LayoutHistory, u64) {
        (&self.default, self.default_version)
    }
}
