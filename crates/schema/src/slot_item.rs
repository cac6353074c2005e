//! One part of a packed slot as stored (docs/design.md §2): `SLOT#<start>#<part>` with its readings in
//! `packed` ([`crate::packed`]). Everything that reads slot parts (stream images, queries,
//! test checks) decodes them here, so "what is a readable part" has one answer: a slot key,
//! every attribute present with its type, bytes that decode, as many readings as
//! `readingCount` says, every reading inside the hour of the slot's start or the next (a slot
//! never straddles an hour, whatever its length, and a part may also hold its next slot's
//! readings: docs/design.md §4), and metadata bitmaps that match the readings.
//!
//! A reading's `metadata` (free-form JSON) is kept in a part holding the reading: a map from
//! each distinct JSON text to a bitmap of the part's readings (in time order) carrying it, so a
//! device's unchanging metadata is stored once a part.
//!
//! The metrics of one timestamp may be spread over several parts, of its slot or of the slot
//! before (each (timestamp, metric) value is in exactly one, but for two writers racing on
//! one device), and so may copies of its metadata: readers merge a timestamp's metrics across
//! parts, the later part (by slot, then number) winning a value both hold, and take its
//! metadata from the latest readable part carrying metadata for it. A timestamp a part holds
//! without metrics is a reading without metrics (a keep-alive), or carries the metadata of a
//! reading whose metrics are in another part ([`SlotPart::readings`] keeps it, with no
//! metrics); joined, every timestamp of a readable part is a reading ([`join_parts`]).
//!
//! Size: no part is written whose [`item_bound`] passes [`MAX_PART_ITEM_BYTES`], well under
//! DynamoDB's 400 KB item limit: the worst case of its readings whatever their values
//! ([`packed::encoded_bound`]), plus its metadata and its other attributes.

use std::collections::BTreeMap;

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
    /// Takes only corrections of the values it holds ([`crate::field::FULL`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub full: bool,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, Bitmap>,
    /// When the newest record that wrote this part arrived ([`crate::field::ARRIVED_AT`]).
    #[serde(
        default,
        with = "crate::entities::epoch_millis",
        skip_serializing_if = "Option::is_none"
    )]
    pub arrived_at: Option<crate::Timestamp>,
}

/// The most a slot part item may take (DynamoDB's limit is 400 KB): every write keeps each
/// part's [`item_bound`] under it.
pub const MAX_PART_ITEM_BYTES: usize = 350 * 1024;
const _: () = assert!(
    MAX_PART_ITEM_BYTES + ITEM_OVERHEAD_BYTES <= crate::table::ITEM_LIMIT_BYTES - 32 * 1024,
    "well under DynamoDB's 400 KB item limit"
);

/// What a slot part item takes besides its packed readings and its metadata: its keys (a
/// device ID of at most 128 bytes, a shard, the slot's start and part number), the names of
/// its attributes and its numbers (at most 21 bytes each). Generous (about 300 at most).
pub const ITEM_OVERHEAD_BYTES: usize = 1024;

/// The bytes the `metadata` attribute of a part holding `readings` with `metadata` takes: per
/// distinct text, the text (the map key), its bitmap and DynamoDB's per-entry bytes.
pub fn metadata_bytes(readings: &SlotReadings, metadata: &SlotMetadata) -> usize {
    metadata_bitmaps(readings, metadata)
        .iter()
        .map(|(json, bits)| json.len() + bits.0.len() + 4)
        .sum()
}

/// The most bytes a part item holding `readings` with `metadata` can take, whatever values
/// later corrections write: [`packed::encoded_bound`] + [`metadata_bytes`] +
/// [`ITEM_OVERHEAD_BYTES`].
pub fn item_bound(
    start: Timestamp,
    readings: &SlotReadings,
    metadata: &SlotMetadata,
) -> Result<usize, PackError> {
    Ok(packed::encoded_bound(start, readings)?
        + metadata_bytes(readings, metadata)
        + ITEM_OVERHEAD_BYTES)
}

/// A bitmap over a part's readings in time order (bit `i % 8` of byte `i / 8`), stored as a
/// binary attribute.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Bitmap(pub Vec<u8>);

impl Serialize for Bitmap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        bytes_out(&self.0, s)
    }
}

impl<'de> Deserialize<'de> for Bitmap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        bytes_in(d).map(Bitmap)
    }
}

/// Each reading's metadata (JSON text) by time.
pub type SlotMetadata = BTreeMap<Timestamp, String>;

/// The `metadata` attribute of a part holding `readings` with `metadata`: each distinct text
/// once, with the bitmap of the readings carrying it (metadata of a time without a reading is
/// left out: it has nothing to describe).
pub fn metadata_bitmaps(
    readings: &SlotReadings,
    metadata: &SlotMetadata,
) -> BTreeMap<String, Bitmap> {
    let mut out: BTreeMap<String, Bitmap> = BTreeMap::new();
    let n = readings.len();
    for (i, at) in readings.keys().enumerate() {
        if let Some(json) = metadata.get(at) {
            let bits = out
                .entry(json.clone())
                .or_insert_with(|| Bitmap(vec![0; n.div_ceil(8)]));
            bits.0[i / 8] |= 1 << (i % 8);
        }
    }
    out
}

/// A readable slot part.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotPart {
    pub device: DeviceId,
    pub partition: Option<u16>,
    pub start: Timestamp,
    pub part: u16,
    pub readings: SlotReadings,
    pub metadata: SlotMetadata,
    pub version: u64,
    pub sealed: bool,
    pub full: bool,
}

/// The readings and metadata of parts of one slot and the slot before (which may carry its
/// next slot's readings), in any order: the one joining rule every reader of packed readings
/// uses (the API, alert derivations, rollup extremes, rebuild). A timestamp's metrics may be
/// spread over parts (a metric added when its part was full goes to a later one): it gets the
/// metrics of all of them, and where a value is in two parts (only two writers racing on one
/// device put it there) the later part's wins, by slot start and then number; its metadata
/// comes from the latest part carrying some, where the writer puts the latest. Every timestamp
/// a readable part holds is a reading: one with no metric in any part is a reading without
/// metrics (a device's keep-alive, stored as single items store it; or, should the part with
/// its metrics be unreadable, the reading that part held, known by its time and metadata).
pub fn join_parts(mut parts: Vec<SlotPart>) -> (SlotReadings, SlotMetadata) {
    parts.sort_by_key(|p| (p.start, p.part));
    let mut readings = SlotReadings::new();
    let mut metadata = SlotMetadata::new();
    for part in parts {
        for (at, metrics) in part.readings {
            readings.entry(at).or_default().extend(metrics);
        }
        metadata.extend(part.metadata);
    }
    (readings, metadata)
}

/// Why a slot part cannot be read.
#[derive(Debug, Error, PartialEq)]
pub enum SlotItemError {
    #[error("not a slot part key ({0})")]
    Key(String),
    #[error(transparent)]
    Packed(#[from] PackError),
    #[error("a reading at {at} is past the hour after that of its slot starting {start}")]
    OutsideHour { at: Timestamp, start: Timestamp },
    #[error("readingCount says {stated} but the part holds {found} readings")]
    Count { stated: u64, found: usize },
    #[error("metadata: {0}")]
    Metadata(String),
}

impl SlotItem {
    /// The part's key and readings, checked (see the module docs).
    pub fn decode(&self) -> Result<SlotPart, SlotItemError> {
        let (device, shard, start, part) = match EntityKey::parse(&self.pk, &self.sk) {
            Ok(EntityKey::Slot {
                device,
                partition: shard,
                start,
                part,
            }) => (device, shard, start, part),
            Ok(_) => return Err(SlotItemError::Key("another entity".into())),
            Err(e) => return Err(SlotItemError::Key(e.reason)),
        };
        let readings = packed::decode(start, &self.packed)?;
        // A part holds its slot's readings and may hold its next slot's: within the slot's
        // hour or the next.
        let hour = start.hour_start();
        let next = hour.plus_micros(3_600_000_000).unwrap_or(Timestamp::MAX);
        if let Some(at) = readings.keys().find(|at| {
            let h = at.hour_start();
            h != hour && h != next
        }) {
            return Err(SlotItemError::OutsideHour { at: *at, start });
        }
        if self.reading_count != readings.len() as u64 {
            return Err(SlotItemError::Count {
                stated: self.reading_count,
                found: readings.len(),
            });
        }
        let mut metadata = SlotMetadata::new();
        let times: Vec<Timestamp> = readings.keys().copied().collect();
        for (json, bits) in &self.metadata {
            if bits.0.len() != times.len().div_ceil(8) {
                return Err(SlotItemError::Metadata(
                    "a bitmap does not match the readings".into(),
                ));
            }
            for (i, at) in times.iter().enumerate() {
                if bits.0[i / 8] & (1 << (i % 8)) != 0
                    && metadata.insert(*at, json.clone()).is_some()
                {
                    return Err(SlotItemError::Metadata(format!(
                        "the reading at {at} has two"
                    )));
                }
            }
        }
        Ok(SlotPart {
            device,
            partition: shard,
            start,
            part,
            readings,
            metadata,
            version: self.version,
            sealed: self.sealed,
            full: self.full,
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
            full: false,
            metadata: BTreeMap::new(),
            arrived_at: None,
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
        assert_eq!((part.start, part.part, part.partition), (start, 0, None));
        assert_eq!(part.readings, readings);
    }

    #[test]
    fn a_reading_past_the_next_hour_a_wrong_count_or_a_foreign_key_is_unreadable() {
        let start = ts("2026-04-20T14:50:00Z");
        let carried = item(start, &one("2026-04-20T15:59:59Z"));
        assert_eq!(carried.decode().unwrap().readings.len(), 1);
        let late = item(start, &one("2026-04-20T16:00:00Z"));
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
    fn metadata_is_stored_once_per_distinct_text_and_read_back_per_reading() {
        let start = ts("2026-04-20T14:00:00Z");
        let at = |i: i64| start.plus_micros(i * 1_000_000).unwrap();
        let readings: SlotReadings = (0..10)
            .map(|i| {
                (
                    at(i),
                    BTreeMap::from([(MetricName::new("t").unwrap(), i as f64)]),
                )
            })
            .collect();
        let mut metadata = SlotMetadata::new();
        for i in [0, 3, 9] {
            metadata.insert(at(i), r#"{"fw":"1"}"#.into());
        }
        metadata.insert(at(4), r#"{"fw":"2"}"#.into());
        let mut i = item(start, &readings);
        i.metadata = metadata_bitmaps(&readings, &metadata);
        assert_eq!(i.metadata.len(), 2, "one entry per distinct text");
        assert_eq!(i.decode().unwrap().metadata, metadata);
        // A bitmap of the wrong length is refused, not guessed at.
        i.metadata = BTreeMap::from([("{}".to_owned(), Bitmap(vec![1]))]);
        assert!(matches!(i.decode(), Err(SlotItemError::Metadata(_))));
    }

    #[test]
    fn a_part_item_takes_at_most_its_bound_whatever_its_keys_and_numbers() {
        // The longest device ID, a shard, the last part number, the largest numbers.
        let device = DeviceId::new(&"d".repeat(DeviceId::MAX_LEN)).unwrap();
        let start = ts("2026-04-20T14:59:59.999999Z");
        let readings = one("2026-04-20T14:59:59.999999Z");
        let metadata = SlotMetadata::from([(
            ts("2026-04-20T14:59:59.999999Z"),
            format!(r#"{{"note":"{}"}}"#, "x".repeat(1000)),
        )]);
        let i = SlotItem {
            pk: reading_pk(&device, Some(u16::MAX)),
            sk: slot_sk(start, u16::MAX),
            packed: packed::encode(start, &readings).unwrap(),
            reading_count: u64::MAX,
            version: u64::MAX,
            ttl: i64::MIN,
            sealed: true,
            full: true,
            arrived_at: Some(Timestamp::MAX),
            metadata: metadata_bitmaps(&readings, &metadata),
        };
        // DynamoDB's sizes: names and strings by their bytes, binaries by their length, a
        // number at most 21, a boolean 1, a map 3 and 1 per entry.
        let v = serde_json::to_value(&i).unwrap();
        let mut size = 0;
        for (name, value) in v.as_object().unwrap() {
            size += name.len();
            size += match name.as_str() {
                field::PACKED => i.packed.len(),
                field::METADATA => {
                    3 + i
                        .metadata
                        .iter()
                        .map(|(k, b)| k.len() + b.0.len() + 1)
                        .sum::<usize>()
                }
                _ => match value {
                    serde_json::Value::String(s) => s.len(),
                    serde_json::Value::Number(_) => 21,
                    serde_json::Value::Bool(_) => 1,
                    other => panic!("{name}: {other}"),
                },
            };
        }
        let bound = item_bound(start, &readings, &metadata).unwrap();
        assert!(size <= bound, "{size} > {bound}");
        let overhead = size - i.packed.len() - metadata_bytes(&readings, &metadata);
        assert!(
            overhead * 2 < ITEM_OVERHEAD_BYTES,
            "{overhead} bytes of keys and numbers"
        );
    }

    #[test]
    fn the_attribute_names_are_the_schema_fields() {
        let mut i = item(ts("2026-04-20T14:00:00Z"), &one("2026-04-20T14:00:00Z"));
        i.sealed = true;
        i.full = true;
        i.metadata = BTreeMap::from([("{}".to_owned(), Bitmap(vec![1]))]);
        let v = serde_json::to_value(&i).unwrap();
        for name in [
            field::PACKED,
            field::METADATA,
            field::READING_COUNT,
            field::VERSION,
            field::SEALED,
            field::FULL,
            crate::table::attr::TTL,
        ] {
            assert!(v.get(name).is_some(), "{name}");
        }
    }

    #[test]
    fn a_timestamp_without_metrics_in_any_part_is_a_reading_without_metrics() {
        let start = ts("2026-04-20T14:00:00Z");
        let (t1, t2) = (ts("2026-04-20T14:00:01Z"), ts("2026-04-20T14:00:02Z"));
        let part = |n: u16, readings: SlotReadings| SlotPart {
            device: DeviceId::new("d").unwrap(),
            partition: None,
            start,
            part: n,
            readings,
            metadata: SlotMetadata::new(),
            version: 1,
            sealed: false,
            full: false,
        };
        // A keep-alive at t2 (no metrics), and t1 with a metric in one part and none in
        // the other.
        let t = MetricName::new("t").unwrap();
        let (readings, _) = join_parts(vec![
            part(
                0,
                BTreeMap::from([(t1, BTreeMap::from([(t.clone(), 1.0)]))]),
            ),
            part(
                1,
                BTreeMap::from([(t1, BTreeMap::new()), (t2, BTreeMap::new())]),
            ),
        ]);
        assert_eq!(
            readings,
            BTreeMap::from([(t1, BTreeMap::from([(t, 1.0)])), (t2, BTreeMap::new())])
        );
        // A part of only keep-alives decodes to them.
        let alive = BTreeMap::from([(t2, BTreeMap::new())]);
        assert_eq!(item(start, &alive).decode().unwrap().readings, alive);
    }

    #[test]
    fn parts_join_in_part_order_whatever_order_they_come_in() {
        let start = Timestamp::parse_rfc3339("2026-04-20T14:00:00Z").unwrap();
        let t1 = start.plus_millis(1_000).unwrap();
        let t2 = start.plus_millis(2_000).unwrap();
        let m = |pairs: &[(&str, f64)]| -> BTreeMap<MetricName, f64> {
            pairs
                .iter()
                .map(|(k, v)| (MetricName::new(k).unwrap(), *v))
                .collect()
        };
        let part = |n: u16, readings: SlotReadings, metadata: SlotMetadata| SlotPart {
            device: DeviceId::new("d").unwrap(),
            partition: None,
            start,
            part: n,
            readings,
            metadata,
            version: 1,
            sealed: false,
            full: false,
        };
        // part 0: t1 with a and b; part 1: t1's c (added when part 0 was full) and a value of
        // b it never holds in practice; part 2: only t2's metadata (its metrics unreadable)
        let p0 = part(
            0,
            BTreeMap::from([(t1, m(&[("a", 1.0), ("b", 2.0)]))]),
            BTreeMap::from([(t1, "{\"fw\":1}".to_owned())]),
        );
        let p1 = part(
            1,
            BTreeMap::from([(t1, m(&[("b", 9.0), ("c", 3.0)]))]),
            BTreeMap::from([(t1, "{\"fw\":2}".to_owned())]),
        );
        let p2 = part(
            2,
            BTreeMap::from([(t2, m(&[]))]),
            BTreeMap::from([(t2, "{}".to_owned())]),
        );
        for order in [
            vec![p0.clone(), p1.clone(), p2.clone()],
            vec![p2.clone(), p1.clone(), p0.clone()],
            vec![p1.clone(), p2.clone(), p0.clone()],
        ] {
            let (readings, metadata) = join_parts(order);
            // t2, whose metrics are in no readable part, is known by its time and metadata:
            // a reading without metrics.
            assert_eq!(
                readings,
                BTreeMap::from([(t1, m(&[("a", 1.0), ("b", 9.0), ("c", 3.0)])), (t2, m(&[]))])
            );
            assert_eq!(
                metadata,
                BTreeMap::from([(t1, "{\"fw\":2}".to_owned()), (t2, "{}".to_owned())])
            );
        }
    }
}
