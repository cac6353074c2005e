//! What a slot part holds: packed readings and their metadata, how an incoming write merges
//! into them, and how a part is read from an item ([`tidemark_schema::SlotItem`] decides what
//! a readable part is, for every reader).

use tidemark_schema::packed::{self, SlotReadings};
use tidemark_schema::{SlotItem, SlotMetadata, SlotPart, Timestamp, metadata_bitmaps};

use crate::{Item, StoreError, from_item};

/// What one part holds, or a write brings: readings and their metadata.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Content {
    pub readings: SlotReadings,
    pub metadata: SlotMetadata,
}

impl Content {
    /// `incoming` merged in (see [`packed::merge`]; metadata replaced per reading); `None`
    /// when nothing changes.
    pub(crate) fn merged(&self, incoming: &Content) -> Option<Content> {
        let readings = packed::merge(&self.readings, &incoming.readings);
        let mut metadata = self.metadata.clone();
        let mut meta_changed = false;
        for (at, m) in &incoming.metadata {
            if metadata.get(at) != Some(m) {
                metadata.insert(*at, m.clone());
                meta_changed = true;
            }
        }
        if readings.is_none() && !meta_changed {
            return None;
        }
        Some(Content {
            readings: readings.unwrap_or_else(|| self.readings.clone()),
            metadata,
        })
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
        let meta: usize = metadata_bitmaps(&self.readings, &self.metadata)
            .iter()
            .map(|(json, bits)| json.len() + bits.0.len() + 2)
            .sum();
        Ok(encoded(start, &self.readings)?.len() + meta)
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

pub(crate) fn encoded(start: Timestamp, readings: &SlotReadings) -> Result<Vec<u8>, StoreError> {
    packed::encode(start, readings).map_err(|e| StoreError::Request {
        operation: "PutItem",
        message: e.to_string(),
    })
}

/// A slot part item, decoded and checked, or why it cannot be read.
pub fn read_part(item: &Item) -> Result<SlotPart, String> {
    from_item::<SlotItem>(item.clone())
        .map_err(|e| e.to_string())?
        .decode()
        .map_err(|e| e.to_string())
}
