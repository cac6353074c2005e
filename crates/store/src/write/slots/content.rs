//! What a slot part holds: packed readings and their metadata, how an incoming write merges
//! into them, and how a part is read from an item ([`tidemark_schema::SlotItem`] decides what
//! a readable part is, for every reader).

use tidemark_schema::packed::{self, SlotReadings};
use tidemark_schema::{SlotItem, SlotMetadata, SlotPart, Timestamp, item_bound, metadata_bytes};

use crate::{Item, StoreError, from_item};

/// What one part holds, or a write brings: readings and their metadata.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Content {
    pub readings: SlotReadings,
    pub metadata: SlotMetadata,
}

impl Content {
    /// `incoming` merged in (see [`packed::merge`]; metadata replaced per reading); `None`
    /// when nothing changes. A timestamp given metadata here and no metrics is kept without
    /// metrics, to carry it (see [`tidemark_schema::slot_item`]).
    pub(crate) fn merged(&self, incoming: &Content) -> Option<Content> {
        let merged = packed::merge(&self.readings, &incoming.readings);
        let mut changed = merged.is_some();
        let mut readings = merged.unwrap_or_else(|| self.readings.clone());
        let mut metadata = self.metadata.clone();
        for (at, m) in &incoming.metadata {
            if metadata.get(at) != Some(m) {
                metadata.insert(*at, m.clone());
                changed = true;
            }
            if !readings.contains_key(at) {
                readings.insert(*at, Default::default());
                changed = true;
            }
        }
        changed.then_some(Content { readings, metadata })
    }

    /// `incoming` merged in, or this content as it is when nothing changes.
    pub(crate) fn with(&self, incoming: &Content) -> Content {
        self.merged(incoming).unwrap_or_else(|| self.clone())
    }

    /// Whether nothing is in it: no reading (a reading without metrics is one) and no
    /// metadata.
    pub(crate) fn is_empty(&self) -> bool {
        self.readings.is_empty() && self.metadata.is_empty()
    }

    /// Every timestamp it says something about (a value or metadata).
    pub(crate) fn times(&self) -> impl Iterator<Item = &Timestamp> {
        self.readings.keys().chain(self.metadata.keys())
    }

    /// The readings (and their metadata) at the times `keep` says.
    pub(crate) fn only(&self, keep: impl Fn(&Timestamp) -> bool) -> Content {
        Content {
            readings: self
                .readings
                .iter()
                .filter(|(at, _)| keep(at))
                .map(|(at, m)| (*at, m.clone()))
                .collect(),
            metadata: self
                .metadata
                .iter()
                .filter(|(at, _)| keep(at))
                .map(|(at, m)| (*at, m.clone()))
                .collect(),
        }
    }

    /// The bytes this content takes in an item: its encoding and its metadata (encodes it).
    pub fn size(&self, start: Timestamp) -> Result<usize, StoreError> {
        Ok(encoded(start, &self.readings)?.len() + metadata_bytes(&self.readings, &self.metadata))
    }

    /// The most bytes an item holding this content can take, whatever values corrections
    /// later write ([`tidemark_schema::item_bound`]).
    pub fn bound(&self, start: Timestamp) -> Result<usize, StoreError> {
        item_bound(start, &self.readings, &self.metadata).map_err(pack_error)
    }
}

impl From<SlotPart> for Content {
    fn from(p: SlotPart) -> Self {
        Content {
            readings: p.readings,
            metadata: p.metadata,
        }
    }
}

fn pack_error(e: packed::PackError) -> StoreError {
    StoreError::Request {
        operation: "PutItem",
        message: e.to_string(),
    }
}

pub(crate) fn encoded(start: Timestamp, readings: &SlotReadings) -> Result<Vec<u8>, StoreError> {
    packed::encode(start, readings).map_err(pack_error)
}

/// A slot part item, decoded and checked, or why it cannot be read.
pub fn read_part(item: &Item) -> Result<SlotPart, String> {
    from_item::<SlotItem>(item.clone())
        .map_err(|e| e.to_string())?
        .decode()
        .map_err(|e| e.to_string())
}
