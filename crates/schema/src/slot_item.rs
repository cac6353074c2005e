//! One part of a packed slot as stored (issue 16): `SLOT#<start>#<part>` with its readings in
//! `packed` ([`crate::packed`]). Everything that reads slot parts (stream images, queries,
//! test checks) decodes them here, so "what is a readable part" has one answer: a slot key,
//! every attribute present with its type, bytes that decode, as many readings as
//! `readingCount` says, and every reading inside the hour of the slot's start (a slot never
//! straddles an hour, whatever its length).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

use crate::ids::DeviceId;
use crate::keys::EntityKey;
use crate::packed::{self, PackError, SlotReadings};
use crate::time::Timestamp;

/// The attributes of a slot part item (names as [`crate::field`] spells them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlotItem {
    pub pk: String,
    pub sk: String,
    #[serde(serialize_with = "bytes_out", deserialize_with = "bytes_in")]
    pub packed: Vec<u8>,
    pub reading_count: u64,
    pub version: u64,
    /// Epoch seconds after which DynamoDB may delete the part.
    pub ttl: i64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sealed: bool,
}

/// A readable slot part.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotPart {
    pub device: DeviceId,
    pub shard: Option<u16>,
    pub start: Timestamp,
    pub part: u16,
    pub readings: SlotReadings,
}

/// Why a slot part cannot be read.
#[derive(Debug, Error, PartialEq)]
pub enum SlotItemError {
    #[error("not a slot part key ({0})")]
    Key(String),
    #[error(transparent)]
    Packed(#[from] PackError),
    #[error("a reading at {at} is outside the hour of its slot starting {start}")]
    OutsideHour { at: Timestamp, start: Timestamp },
    #[error("readingCount says {stated} but the part holds {found} readings")]
    Count { stated: u64, found: usize },
}

impl SlotItem {
    /// The part's key and readings, checked (see the module docs).
    pub fn decode(&self) -> Result<SlotPart, SlotItemError> {
        let (device, shard, start, part) = match EntityKey::parse(&self.pk, &self.sk) {
            Ok(EntityKey::Slot {
                device,
                shard,
                start,
                part,
            }) => (device, shard, start, part),
            Ok(_) => return Err(SlotItemError::Key("another entity".into())),
            Err(e) => return Err(SlotItemError::Key(e.reason)),
        };
        let readings = packed::decode(start, &self.packed)?;
        let hour = start.hour_start();
        if let Some(at) = readings.keys().find(|at| at.hour_start() != hour) {
            return Err(SlotItemError::OutsideHour { at: *at, start });
        }
        if self.reading_count != readings.len() as u64 {
            return Err(SlotItemError::Count {
                stated: self.reading_count,
                found: readings.len(),
            });
        }
        Ok(SlotPart {
            device,
            shard,
            start,
            part,
            readings,
        })
    }
}

fn bytes_out<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_bytes(v)
}

/// A binary attribute (`B`): serde's `Vec<u8>` would ask for a list of numbers.
fn bytes_in<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    struct Bytes;
    impl<'de> serde::de::Visitor<'de> for Bytes {
        type Value = Vec<u8>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("binary data")
        }
        fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }
        fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(v)
        }
    }
    d.deserialize_bytes(Bytes)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::field;
    use crate::ids::MetricName;
    use crate::keys::{reading_pk, slot_sk};

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    fn item(start: Timestamp, readings: &SlotReadings) -> SlotItem {
        SlotItem {
            pk: reading_pk(&DeviceId::new("d").unwrap(), None),
            sk: slot_sk(start, 0),
            packed: packed::encode(start, readings).unwrap(),
            reading_count: readings.len() as u64,
            version: 1,
            ttl: 0,
            sealed: false,
        }
    }

    fn one(at: &str) -> SlotReadings {
        BTreeMap::from([(
            ts(at),
            BTreeMap::from([(MetricName::new("t").unwrap(), 1.5)]),
        )])
    }

    #[test]
    fn a_written_part_decodes_to_its_key_and_readings() {
        let start = ts("2026-04-20T14:10:00Z");
        let readings = one("2026-04-20T14:10:05Z");
        let part = item(start, &readings).decode().unwrap();
        assert_eq!((part.start, part.part, part.shard), (start, 0, None));
        assert_eq!(part.readings, readings);
    }

    #[test]
    fn a_reading_past_the_hour_a_wrong_count_or_a_foreign_key_is_unreadable() {
        let start = ts("2026-04-20T14:50:00Z");
        let late = item(start, &one("2026-04-20T15:00:00Z"));
        assert!(matches!(
            late.decode(),
            Err(SlotItemError::OutsideHour { .. })
        ));
        let mut counted = item(start, &one("2026-04-20T14:50:01Z"));
        counted.reading_count = 2;
        assert!(matches!(counted.decode(), Err(SlotItemError::Count { .. })));
        let mut foreign = item(start, &one("2026-04-20T14:50:01Z"));
        foreign.sk = "READING#2026-04-20T14:50:01.000000Z".into();
        assert!(matches!(foreign.decode(), Err(SlotItemError::Key(_))));
        let mut garbage = item(start, &one("2026-04-20T14:50:01Z"));
        garbage.packed = vec![9, 9];
        assert!(matches!(garbage.decode(), Err(SlotItemError::Packed(_))));
    }

    #[test]
    fn the_attribute_names_are_the_schema_fields() {
        let mut i = item(ts("2026-04-20T14:00:00Z"), &one("2026-04-20T14:00:00Z"));
        i.sealed = true;
        let v = serde_json::to_value(&i).unwrap();
        for name in [
            field::PACKED,
            field::READING_COUNT,
            field::VERSION,
            field::SEALED,
            crate::table::attr::TTL,
        ] {
            assert!(v.get(name).is_some(), "{name}");
        }
    }
}
