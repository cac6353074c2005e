//! The layout book (docs/design.md §2): how every function learns where a device's readings
//! are, from the `CONFIG` items (each device's own shard and layout epochs, and the fleet's
//! default). Replacing a history is `layout_change`'s, apart so that a function that
//! only reads layouts is not granted the write (the policy test follows module paths).

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use tidemark_schema::{DeviceId, EntityKey, Key, LayoutHistory, LayoutHistoryItem};

use crate::batch_get::{GetOptions, batch_get};
use crate::{Item, StoreError, from_item};

static NO_EPOCHS: LayoutHistory = LayoutHistory::EMPTY;

/// Where readings go: the layout histories of some devices (or, from one load of the whole
/// `CONFIG` partition, of the fleet), each over the fleet's default
/// ([`LayoutHistory::under`]). Every function turns `CONFIG` items into histories through
/// this one book, so they all follow the same ones.
#[derive(Debug, Clone, Default)]
pub struct LayoutBook {
    /// Devices' own histories as stored, with their items' versions.
    own: HashMap<DeviceId, (LayoutHistory, u64)>,
    /// The same, laid over the default.
    effective: HashMap<DeviceId, LayoutHistory>,
    default: LayoutHistory,
    /// The default item's version (0: none stored), for replacing it.
    default_version: u64,
}

impl LayoutBook {
    /// The keys to read for `devices`' histories: each one's own item, then the default.
    pub fn keys(devices: &[DeviceId]) -> Vec<Key> {
        devices
            .iter()
            .map(|d| EntityKey::DeviceLayout(d.clone()).key())
            .chain([EntityKey::DefaultLayout.key()])
            .collect()
    }

    /// The histories in `items` (`CONFIG` items as read), and how many were unreadable
    /// (skipped and logged: one bad item must not stop a function).
    pub fn from_items(
        items: impl IntoIterator<Item = Result<LayoutHistoryItem, StoreError>>,
    ) -> (Self, u64) {
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
                Ok(EntityKey::DeviceLayout(id)) => {
                    own.insert(id, (item.epochs, item.version));
                }
                Ok(EntityKey::DefaultLayout) => (default, version) = (item.epochs, item.version),
                _ => {
                    unreadable += 1;
                    tracing::warn!(pk = %item.pk, sk = %item.sk, "unknown configuration item skipped");
                }
            }
        }
        let book = LayoutBook {
            own,
            ..LayoutBook::default()
        };
        (book.with_default(default, version), unreadable)
    }

    /// [`LayoutBook::from_items`] of raw items.
    pub fn from_raw(items: impl IntoIterator<Item = Item>) -> (Self, u64) {
        LayoutBook::from_items(items.into_iter().map(from_item::<LayoutHistoryItem>))
    }

    /// One `BatchGetItem` of `devices`' histories and the default.
    pub async fn read(
        client: &Client,
        table: &str,
        devices: &[DeviceId],
        consistent: bool,
    ) -> Result<(Self, u64), StoreError> {
        let options = GetOptions {
            consistent,
            keys_only: false,
        };
        let items = batch_get(client, table, &LayoutBook::keys(devices), options).await?;
        Ok(LayoutBook::from_raw(items))
    }

    /// The same devices over another default history.
    pub fn with_default(mut self, default: LayoutHistory, version: u64) -> Self {
        self.effective = self
            .own
            .iter()
            .map(|(id, (h, _))| (id.clone(), h.under(&default)))
            .collect();
        self.default = default;
        self.default_version = version;
        self
    }

    /// The history of `device`'s readings.
    pub fn of(&self, device: &DeviceId) -> &LayoutHistory {
        self.effective.get(device).unwrap_or(&self.default)
    }

    /// `device`'s own history as stored and its item's version (0: none), for replacing it.
    pub fn own(&self, device: &DeviceId) -> (&LayoutHistory, u64) {
        self.own
            .get(device)
            .map_or((&NO_EPOCHS, 0), |(h, v)| (h, *v))
    }

    pub fn default_history(&self) -> (&LayoutHistory, u64) {
        (&self.default, self.default_version)
    }
}

/// A device's layout history as a reader must see it and its own item's version (0: none)
/// for replacing it: one `BatchGetItem` of both items.
pub async fn device_history(
    client: &Client,
    table: &str,
    device: &DeviceId,
    consistent: bool,
) -> Result<(LayoutHistory, u64), StoreError> {
    let (book, _) =
        LayoutBook::read(client, table, std::slice::from_ref(device), consistent).await?;
    Ok((book.of(device).clone(), book.own(device).1))
}
