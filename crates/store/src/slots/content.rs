//! What a slot part holds: packed readings and their metadata, how an incoming write merges
//! into them, and how they are read from an item (also by the API and the aggregator).

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::packed::{self, SlotReadings};
use tidemark_schema::{Timestamp, field};

use crate::{Item, StoreError};

/// A reading's metadata (a JSON object, as text) by reading time.
pub type SlotMetadata = BTreeMap<Timestamp, String>;

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

    /// The bytes this content takes in an item: its encoding and its metadata.
    pub(crate) fn size(&self, start: Timestamp) -> Result<usize, StoreError> {
        let meta: usize = self
            .metadata
            .values()
            .map(|m| m.len() + Timestamp::WIDTH)
            .sum();
        Ok(encoded(start, &self.readings)?.len() + meta)
    }
}

pub(crate) fn encoded(start: Timestamp, readings: &SlotReadings) -> Result<Vec<u8>, StoreError> {
    packed::encode(start, readings).map_err(|e| StoreError::Request {
        operation: "PutItem",
        message: e.to_string(),
    })
}

/// A part item's readings, metadata, version and seal, or why they cannot be read.
pub fn parse_content(start: Timestamp, item: &Item) -> Result<Content, String> {
    let bytes = match item.get(field::PACKED) {
        Some(AttributeValue::B(b)) => b.as_ref(),
        _ => return Err("no packed readings".into()),
    };
    let readings = packed::decode(start, bytes).map_err(|e| e.to_string())?;
    let mut metadata = SlotMetadata::new();
    match item.get(field::METADATA) {
        None => {}
        Some(AttributeValue::M(m)) => {
            for (at, v) in m {
                let at = Timestamp::parse_canonical(at).map_err(|e| e.to_string())?;
                let AttributeValue::S(json) = v else {
                    return Err(format!("metadata of {at} is not JSON text"));
                };
                metadata.insert(at, json.clone());
            }
        }
        Some(_) => return Err("metadata is not a map".into()),
    }
    Ok(Content { readings, metadata })
}
