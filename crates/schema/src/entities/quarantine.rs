//! Quarantine: records ingest could not take, kept with their raw bytes (split over parts
//! when too large for one item) and the reason. Every field taken from input is cut to a
//! bounded length, with a hash of the whole value, so every item fits in 400 KB whatever the
//! input.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

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
    /// A reading naming a device its record may not speak for under the deployment's
    /// `DEVICE_IDENTITY` ([`crate::DeviceIdentity`]): not the record's partition key nor a
    /// device its gateway lists (`partition-key`), or not the IoT thing that published it
    /// (`iot-thing`). The record's bytes are kept here; its other readings are stored.
    IdentityMismatch,
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
        QuarantineReason::IdentityMismatch,
    ];

    /// The reason named `s` ([`QuarantineReason::as_str`]).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|r| r.as_str() == s)
    }

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
            QuarantineReason::IdentityMismatch => "identity_mismatch",
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
    /// Why, for a person; its first [`QuarantineItem::MAX_MESSAGE_BYTES`] bytes when longer
    /// (then with `message_sha256`).
    pub message: String,
    /// SHA-256 (hex) of the whole message, present when `message` was cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_sha256: Option<String>,
    pub received_at: Timestamp,
    pub sequence_number: String,
    /// The user record's index inside the KPL aggregate the Kinesis record carried; absent
    /// for a plain record. Its payload is then that user record's data alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_record: Option<u32>,
    /// The record's partition key, or the user record's own; its first
    /// [`QuarantineItem::MAX_KEY_BYTES`] bytes when longer (then with
    /// `partition_key_sha256`).
    pub partition_key: String,
    /// SHA-256 (hex) of the whole partition key, present when `partition_key` was cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_key_sha256: Option<String>,
    /// The user record's own explicit hash key, when its producer set one (KPL); cut as the
    /// partition key is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explicit_hash_key: Option<String>,
    /// SHA-256 (hex) of the whole explicit hash key, present when it was cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explicit_hash_key_sha256: Option<String>,
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

const _: () = assert!(
    QuarantineItem::PART_BYTES + QuarantineItem::MAX_FIELDS_BYTES < crate::table::ITEM_LIMIT_BYTES
);

/// `value` cut to at most `max` bytes (at a character boundary), with the SHA-256 (hex) of the
/// whole value when it was cut.
fn cut(value: &str, max: usize) -> (String, Option<String>) {
    if value.len() <= max {
        return (value.to_owned(), None);
    }
    let mut end = max;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    let hash = Sha256::digest(value.as_bytes());
    (value[..end].to_owned(), Some(format!("{hash:x}")))
}

impl QuarantineItem {
    /// Bytes of payload per item. Every item stays under DynamoDB's 400 KB whatever the
    /// input: besides its payload an item holds at most [`QuarantineItem::MAX_FIELDS_BYTES`]
    /// (every field taken from input is cut), and a Kinesis record (at most 1 MiB) needs at
    /// most four items.
    pub const PART_BYTES: usize = 300 * 1024;
    /// The longest partition key and explicit hash key an item keeps, in bytes: a key within
    /// Kinesis's 256 characters (at most 1,024 bytes of UTF-8) is kept whole; a longer one
    /// (only a KPL aggregate's table can hold one) is cut, with its hash beside it.
    pub const MAX_KEY_BYTES: usize = 1024;
    /// The longest message an item keeps, in bytes (ingest writes at most 1,000 characters).
    pub const MAX_MESSAGE_BYTES: usize = 4096;
    /// A bound on what an item holds besides its payload: attribute names, keys (a Kinesis
    /// sequence number is at most 129 digits), the cut fields, their hashes, the function
    /// version (`$LATEST` or a number) and the numbers: under 8 KB, with room to spare.
    pub const MAX_FIELDS_BYTES: usize = 16 * 1024;
    pub const RETENTION_DAYS: u32 = 14;

    /// Builds the items of a quarantined record, its whole payload split over as many as it
    /// needs, its keys and message cut to a bounded length (each with the hash of the whole
    /// value when cut), so every item fits in DynamoDB's 400 KB whatever the input.
    /// Everything comes from the arguments, so a replay rebuilds the same items.
    pub fn split(
        source: QuarantineSource<'_>,
        reason: QuarantineReason,
        message: String,
        data: &[u8],
    ) -> QuarantinedRecord {
        let (message, message_sha256) = cut(&message, Self::MAX_MESSAGE_BYTES);
        let (partition_key, partition_key_sha256) = cut(source.partition_key, Self::MAX_KEY_BYTES);
        let explicit_hash_key = source
            .explicit_hash_key
            .map(|k| cut(k, Self::MAX_KEY_BYTES));
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
                message_sha256,
                received_at: received,
                sequence_number: source.sequence.to_owned(),
                sub_record: source.sub_record,
                partition_key,
                partition_key_sha256,
                explicit_hash_key: explicit_hash_key.as_ref().map(|(k, _)| k.clone()),
                explicit_hash_key_sha256: explicit_hash_key.and_then(|(_, h)| h),
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

    fn source<'a>(
        partition_key: &'a str,
        explicit_hash_key: Option<&'a str>,
    ) -> QuarantineSource<'a> {
        QuarantineSource {
            received: Timestamp::parse_rfc3339("2026-04-20T14:04:00Z").unwrap(),
            sequence: "4959",
            sub_record: Some(3),
            partition_key,
            explicit_hash_key,
        }
    }

    fn sha256(s: &str) -> String {
        format!("{:x}", Sha256::digest(s.as_bytes()))
    }

    #[test]
    fn keys_within_kinesiss_limits_are_kept_whole_without_a_hash() {
        // 256 four-byte characters: the longest key Kinesis takes, 1,024 bytes.
        let pk = "𝄞".repeat(256);
        let ehk = "340282366920938463463374607431768211455";
        let q = QuarantineItem::split(
            source(&pk, Some(ehk)),
            QuarantineReason::NotJson,
            "not JSON".into(),
            b"x",
        );
        assert_eq!(q.record.partition_key, pk);
        assert_eq!(q.record.partition_key_sha256, None);
        assert_eq!(q.record.explicit_hash_key.as_deref(), Some(ehk));
        assert_eq!(q.record.explicit_hash_key_sha256, None);
        assert_eq!(q.record.message_sha256, None);
    }

    #[test]
    fn a_longer_key_or_message_is_cut_at_a_character_and_hashed_whole() {
        let pk = "é".repeat(300_000);
        let ehk = "9".repeat(5000);
        let message = "ü".repeat(10_000);
        let q = QuarantineItem::split(
            source(&pk, Some(&ehk)),
            QuarantineReason::CorruptAggregate,
            message.clone(),
            b"x",
        );
        let r = &q.record;
        assert_eq!(
            r.partition_key,
            "é".repeat(QuarantineItem::MAX_KEY_BYTES / 2)
        );
        assert_eq!(r.partition_key_sha256, Some(sha256(&pk)));
        assert_eq!(
            r.explicit_hash_key.as_deref(),
            Some(&ehk[..QuarantineItem::MAX_KEY_BYTES])
        );
        assert_eq!(r.explicit_hash_key_sha256, Some(sha256(&ehk)));
        assert_eq!(r.message, "ü".repeat(QuarantineItem::MAX_MESSAGE_BYTES / 2));
        assert_eq!(r.message_sha256, Some(sha256(&message)));
        // A cut at a multi-byte character ends before it.
        let odd = format!("a{}", "é".repeat(600));
        let q = QuarantineItem::split(
            source(&odd, None),
            QuarantineReason::NotJson,
            "m".into(),
            b"",
        );
        assert_eq!(
            q.record.partition_key.len(),
            QuarantineItem::MAX_KEY_BYTES - 1
        );
        assert!(odd.starts_with(&q.record.partition_key));
    }

    #[test]
    fn quarantine_partition_is_stable_and_in_range() {
        let seq = "49590338271490256608559692538361571095921575989136588898";
        let p = QuarantineItem::partition_for(seq);
        assert!(p < keys::QUARANTINE_PARTITIONS);
        assert_eq!(p, QuarantineItem::partition_for(seq));
    }
}
