//! Quarantine: records ingest could not take, kept with their raw bytes (split over parts
//! when too large for one item) and the reason.

use serde::{Deserialize, Serialize};

use crate::keys::{self, EntityKey};
use crate::time::{Day, Timestamp};

/// Why a Kinesis record was quarantined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuarantineReason {
    NotJson,
    NotObjectOrArray,
    InvalidDeviceId,
    InvalidTimestamp,
    TimestampInFuture,
    TimestampTooOld,
    InvalidMetric,
    TooManyMetrics,
    ArrayTooLong,
    PayloadTooLarge,
    UnknownDevice,
    /// `metadata` is not an object, or too large or too deep to store (DynamoDB refuses
    /// items over 400 KB and nesting over 32 levels; one bad item would fail a whole batch).
    InvalidMetadata,
    /// Valid on its own, but its reading (the device's metrics at one timestamp, merged over
    /// records) would pass DynamoDB's 400 KB item limit: every record of it in the batch is
    /// kept here, since a write DynamoDB refuses for good would stall the stream shard.
    ReadingTooLarge,
    /// A KPL aggregated record (it starts with the KPL's magic bytes) whose MD5 does not
    /// match or whose protobuf does not parse: none of its user records can be trusted.
    CorruptAggregate,
    /// A record that failed the same way, past its retries, with an error that no retry can
    /// cure (a limit we missed, a bug of ours, a panic): set aside so that its shard moves on
    /// (docs/design.md §4, "What is retried, what is set aside"). `tidemark-admin redrive
    /// --set-aside` replays it after a fix.
    Unprocessable,
}

impl QuarantineReason {
    pub const ALL: &'static [QuarantineReason] = &[
        QuarantineReason::NotJson,
        QuarantineReason::NotObjectOrArray,
        QuarantineReason::InvalidDeviceId,
        QuarantineReason::InvalidTimestamp,
        QuarantineReason::TimestampInFuture,
        QuarantineReason::TimestampTooOld,
        QuarantineReason::InvalidMetric,
        QuarantineReason::TooManyMetrics,
        QuarantineReason::ArrayTooLong,
        QuarantineReason::PayloadTooLarge,
        QuarantineReason::UnknownDevice,
        QuarantineReason::InvalidMetadata,
        QuarantineReason::ReadingTooLarge,
        QuarantineReason::CorruptAggregate,
        QuarantineReason::Unprocessable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            QuarantineReason::NotJson => "not_json",
            QuarantineReason::NotObjectOrArray => "not_object_or_array",
            QuarantineReason::InvalidDeviceId => "invalid_device_id",
            QuarantineReason::InvalidTimestamp => "invalid_timestamp",
            QuarantineReason::TimestampInFuture => "timestamp_in_future",
            QuarantineReason::TimestampTooOld => "timestamp_too_old",
            QuarantineReason::InvalidMetric => "invalid_metric",
            QuarantineReason::TooManyMetrics => "too_many_metrics",
            QuarantineReason::ArrayTooLong => "array_too_long",
            QuarantineReason::PayloadTooLarge => "payload_too_large",
            QuarantineReason::UnknownDevice => "unknown_device",
            QuarantineReason::InvalidMetadata => "invalid_metadata",
            QuarantineReason::ReadingTooLarge => "reading_too_large",
            QuarantineReason::CorruptAggregate => "corrupt_aggregate",
            QuarantineReason::Unprocessable => "unprocessable",
        }
    }
}

/// `QUARANTINE#<day>#<n>` / `<received>#<sequence>`: a bad record, kept with its raw bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuarantineItem {
    pub pk: String,
    pub sk: String,
    pub reason: QuarantineReason,
    pub message: String,
    pub received_at: Timestamp,
    pub sequence_number: String,
    /// The user record's index inside the KPL aggregate the Kinesis record carried; absent
    /// for a plain record. Its payload is then that user record's data alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_record: Option<u32>,
    pub partition_key: String,
    /// The user record's own explicit hash key, when its producer set one (KPL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explicit_hash_key: Option<String>,
    /// The version of the function that set the record aside (`unprocessable` only): which
    /// code failed on it, so an operator knows whether a deployed fix covers it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_version: Option<String>,
    /// Size of the original record in bytes.
    pub size: u64,
    /// The record's first [`QuarantineItem::PART_BYTES`] bytes; the rest, if any, is in
    /// `parts - 1` [`QuarantinePartItem`]s under the same partition.
    #[serde(with = "serde_bytes_as_binary")]
    pub payload: Vec<u8>,
    /// How many pieces the payload is stored in, this item's included.
    #[serde(default = "one")]
    pub parts: u16,
    pub ttl: i64,
}

fn one() -> u16 {
    1
}

/// The sequence a quarantine key names: the record's, or `<sequence>.<index>` for a user
/// record of an aggregate (after its record's, before the next record's).
fn key_sequence(sequence: &str, sub_record: Option<u32>) -> String {
    match sub_record {
        Some(i) => format!("{sequence}.{i}"),
        None => sequence.to_owned(),
    }
}

/// `QUARANTINE#<day>#<n>` / `<received>#<sequence>#<part>`: a further piece of a quarantined
/// payload too large for one item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuarantinePartItem {
    pub pk: String,
    pub sk: String,
    #[serde(with = "serde_bytes_as_binary")]
    pub payload: Vec<u8>,
    pub ttl: i64,
}

/// Where a quarantined payload came from: a Kinesis record, or one user record of a KPL
/// aggregate inside it (then its own partition key and explicit hash key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuarantineSource<'a> {
    pub received: Timestamp,
    pub sequence: &'a str,
    pub sub_record: Option<u32>,
    pub partition_key: &'a str,
    pub explicit_hash_key: Option<&'a str>,
}

/// A quarantined record as items: the record's own item, then its payload's further parts.
#[derive(Debug, Clone, PartialEq)]
pub struct QuarantinedRecord {
    pub record: QuarantineItem,
    pub parts: Vec<QuarantinePartItem>,
}

impl QuarantineItem {
    /// Bytes of payload per item: every item stays well under DynamoDB's 400 KB, and a
    /// Kinesis record (at most 1 MiB) needs at most four.
    pub const PART_BYTES: usize = 300 * 1024;
    pub const RETENTION_DAYS: u32 = 14;

    /// Builds the items of a quarantined record, its whole payload split over as many as it
    /// needs. Everything comes from the arguments, so a replay rebuilds the same items.
    pub fn split(
        source: QuarantineSource<'_>,
        reason: QuarantineReason,
        message: String,
        data: &[u8],
    ) -> QuarantinedRecord {
        let received = source.received;
        let sequence = &key_sequence(source.sequence, source.sub_record);
        let key = Self::key_for(received.day(), received, sequence);
        let ttl = received.ttl_after_days(Self::RETENTION_DAYS);
        let mut chunks = data.chunks(Self::PART_BYTES);
        let first = chunks.next().unwrap_or_default().to_vec();
        let parts: Vec<QuarantinePartItem> = chunks
            .enumerate()
            .map(|(i, chunk)| {
                let k = EntityKey::QuarantinePart {
                    day: received.day(),
                    partition: Self::partition_for(sequence),
                    received,
                    sequence: sequence.to_owned(),
                    part: (i + 1) as u16,
                }
                .key();
                QuarantinePartItem {
                    pk: k.pk,
                    sk: k.sk,
                    payload: chunk.to_vec(),
                    ttl,
                }
            })
            .collect();
        QuarantinedRecord {
            record: QuarantineItem {
                pk: key.pk,
                sk: key.sk,
                reason,
                message,
                received_at: received,
                sequence_number: source.sequence.to_owned(),
                sub_record: source.sub_record,
                partition_key: source.partition_key.to_owned(),
                explicit_hash_key: source.explicit_hash_key.map(str::to_owned),
                function_version: None,
                size: data.len() as u64,
                payload: first,
                parts: 1 + parts.len() as u16,
                ttl,
            },
            parts,
        }
    }

    /// The keys of this record's further parts, in order.
    pub fn part_keys(&self) -> Vec<keys::Key> {
        let sequence = key_sequence(&self.sequence_number, self.sub_record);
        (1..self.parts)
            .map(|part| {
                EntityKey::QuarantinePart {
                    day: self.received_at.day(),
                    partition: Self::partition_for(&sequence),
                    received: self.received_at,
                    sequence: sequence.clone(),
                    part,
                }
                .key()
            })
            .collect()
    }

    /// Which of the day's partitions a record goes to (stable for the same sequence number,
    /// so a replay rewrites the same item).
    pub fn partition_for(sequence: &str) -> u16 {
        let h = sequence
            .bytes()
            .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
        (h % u32::from(keys::QUARANTINE_PARTITIONS)) as u16
    }

    pub fn key_for(day: Day, received: Timestamp, sequence: &str) -> keys::Key {
        EntityKey::Quarantine {
            day,
            partition: Self::partition_for(sequence),
            received,
            sequence: sequence.to_owned(),
        }
        .key()
    }
}

/// Binary (`B`) attribute for raw bytes rather than a list of numbers.
mod serde_bytes_as_binary {
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(b)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Vec<u8>, A::Error> {
                let mut out = Vec::new();
                while let Some(b) = a.next_element::<u8>()? {
                    out.push(b);
                }
                Ok(out)
            }
        }
        d.deserialize_bytes(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quarantine_partition_is_stable_and_in_range() {
        let seq = "49590338271490256608559692538361571095921575989136588898";
        let p = QuarantineItem::partition_for(seq);
        assert!(p < keys::QUARANTINE_PARTITIONS);
        assert_eq!(p, QuarantineItem::partition_for(seq));
    }
}
