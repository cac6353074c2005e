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

    /// The bytes this content takes in an item: its encoding and its metadata (encodes it).
    pub fn size(&self, start: Timestamp) -> Result<usize, StoreError> {
        let meta: usize = self
            .metadata_groups()
            .iter()
            .map(|(json, bits)| json.len() + bits.len() + 2)
            .sum();
        Ok(encoded(start, &self.readings)?.len() + meta)
    }

    /// Each distinct metadata text with a bitmap of the readings (in time order) carrying it:
    /// a device's metadata rarely changes, so a slot stores it about once.
    fn metadata_groups(&self) -> BTreeMap<&str, Vec<u8>> {
        let mut groups: BTreeMap<&str, Vec<u8>> = BTreeMap::new();
        let n = self.readings.len();
        for (i, at) in self.readings.keys().enumerate() {
            if let Some(json) = self.metadata.get(at) {
                let bits = groups
                    .entry(json.as_str())
                    .or_insert_with(|| vec![0; n.div_ceil(8)]);
                bits[i / 8] |= 1 << (i % 8);
            }
        }
        groups
    }

    /// The `metadata` attribute: JSON text → bitmap (`None` when no reading has metadata).
    pub(crate) fn metadata_attr(&self) -> Option<AttributeValue> {
        let groups = self.metadata_groups();
        (!groups.is_empty()).then(|| {
            AttributeValue::M(
                groups
                    .into_iter()
                    .map(|(json, bits)| {
                        (
                            json.to_owned(),
                            AttributeValue::B(aws_sdk_dynamodb::primitives::Blob::new(bits)),
                        )
                    })
                    .collect(),
            )
        })
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
            let times: Vec<Timestamp> = readings.keys().copied().collect();
            for (json, bits) in m {
                let AttributeValue::B(bits) = bits else {
                    return Err("metadata readings are not a bitmap".into());
                };
                let bits = bits.as_ref();
                if bits.len() != times.len().div_ceil(8) {
                    return Err("metadata bitmap does not match the readings".into());
                }
                for (i, at) in times.iter().enumerate() {
                    if bits[i / 8] & (1 << (i % 8)) != 0
                        && metadata.insert(*at, json.clone()).is_some()
                    {
                        return Err(format!("reading {at} has two metadata"));
                    }
                }
            }
        }
        Some(_) => return Err("metadata is not a map".into()),
    }
    Ok(Content { readings, metadata })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_schema::MetricName;

    #[test]
    fn metadata_is_stored_once_per_distinct_text_and_read_back_per_reading() {
        let start = Timestamp::parse_rfc3339("2026-04-20T14:00:00Z").unwrap();
        let at = |i: i64| start.plus_micros(i * 1_000_000).unwrap();
        let mut c = Content::default();
        for i in 0..10 {
            c.readings.insert(
                at(i),
                BTreeMap::from([(MetricName::new("t").unwrap(), i as f64)]),
            );
        }
        for i in [0, 3, 9] {
            c.metadata.insert(at(i), r#"{"fw":"1"}"#.into());
        }
        c.metadata.insert(at(4), r#"{"fw":"2"}"#.into());
        let Some(AttributeValue::M(m)) = c.metadata_attr() else {
            panic!("a map")
        };
        assert_eq!(m.len(), 2, "one entry per distinct text");
        let item = Item::from([
            (
                field::PACKED.to_owned(),
                AttributeValue::B(aws_sdk_dynamodb::primitives::Blob::new(
                    encoded(start, &c.readings).unwrap(),
                )),
            ),
            (field::METADATA.to_owned(), AttributeValue::M(m)),
        ]);
        assert_eq!(parse_content(start, &item).unwrap(), c);
        // A bitmap of the wrong length is refused, not guessed at.
        let mut bad = item.clone();
        bad.insert(
            field::METADATA.to_owned(),
            AttributeValue::M(std::collections::HashMap::from([(
                "{}".to_owned(),
                AttributeValue::B(aws_sdk_dynamodb::primitives::Blob::new(vec![1])),
            )])),
        );
        assert!(parse_content(start, &bad).is_err());
    }
}
