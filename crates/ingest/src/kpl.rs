//! Records aggregated by the Kinesis Producer Library. By default the KPL packs many user
//! records into one Kinesis record: the magic bytes `F3 89 9A C2`, a protobuf
//! `AggregatedRecord`, and the MD5 of that protobuf. Each user record inside is a record of
//! its own to Tidemark: decoded on its own, with its own partition key and explicit hash key,
//! and quarantined alone when it is bad, while its siblings are stored.
//!
//! The message definitions are the KPL's (`aggregation-format.md` in its repository); a
//! record that starts with the magic bytes but whose MD5 does not match, or whose protobuf
//! does not parse, is corrupt as a whole (JSON never starts with those bytes, so nothing
//! else is mistaken for an aggregate). So is one past a limit Kinesis sets on records but
//! nothing enforces inside an aggregate: a partition key over 256 characters, an explicit
//! hash key that is not a decimal up to 2^128 - 1, or more than [`MAX_USER_RECORDS`] user
//! records. Each key of an aggregate is held once and shared by the user records naming
//! it, so the memory an aggregate takes is bounded by its size, whatever its keys.

use std::sync::Arc;

use md5::{Digest, Md5};
use prost::Message;
use tidemark_schema::QuarantineReason;

use crate::decode::Rejection;

pub const MAGIC: [u8; 4] = [0xF3, 0x89, 0x9A, 0xC2];
const MD5_LEN: usize = 16;

/// Kinesis's limit on a partition key, in Unicode characters (as Kinesis counts them). Kinesis
/// checks the key of the record it stores, never the keys inside an aggregate: ingest checks
/// those.
pub const MAX_PARTITION_KEY_CHARS: usize = 256;
/// Digits of the largest explicit hash key, 2^128 - 1 (Kinesis's hash keys are 128 bits).
pub const MAX_HASH_KEY_DIGITS: usize = 39;
/// User records an aggregate may hold. No aggregate of valid readings reaches it: a user
/// record costs 6 bytes of protobuf around its data (2 for the entry, 2 for its partition-key
/// index, 2 for its data's tag and length) and the shortest valid reading is over 10 bytes
/// (`[{"n":"a:b"}]`, 13), so each takes more than 16 bytes, and a Kinesis record of 1 MiB
/// holds fewer than 2^20 / 16 = 65,536 of them. (The KPL's own aggregates are far smaller:
/// 50 KB by default, `AggregationMaxSize`.) An aggregate past it is mostly user records too
/// short to be readings, each of which would become a quarantine item of its own: a few
/// bytes of input turned into a write of hundreds, tens of thousands of times a record.
pub const MAX_USER_RECORDS: usize = 65_536;

#[derive(Clone, PartialEq, Message)]
pub struct AggregatedRecord {
    #[prost(string, repeated, tag = "1")]
    pub partition_key_table: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    pub explicit_hash_key_table: Vec<String>,
    #[prost(message, repeated, tag = "3")]
    pub records: Vec<Record>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Record {
    #[prost(uint64, required, tag = "1")]
    pub partition_key_index: u64,
    #[prost(uint64, optional, tag = "2")]
    pub explicit_hash_key_index: Option<u64>,
    #[prost(bytes = "vec", required, tag = "3")]
    pub data: Vec<u8>,
    #[prost(message, repeated, tag = "4")]
    pub tags: Vec<Tag>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Tag {
    #[prost(string, required, tag = "1")]
    pub key: String,
    #[prost(string, optional, tag = "2")]
    pub value: Option<String>,
}

/// One user record of an aggregate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRecord {
    /// Its position in the aggregate, from 0.
    pub index: u32,
    /// Its partition key, shared with the aggregate's other user records naming it; a
    /// rejection when its key index points outside the aggregate's table (then it is
    /// quarantined alone).
    pub partition_key: Result<Arc<str>, Rejection>,
    pub explicit_hash_key: Option<Arc<str>>,
    pub data: Vec<u8>,
}

/// What a Kinesis record's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// Not an aggregate: one record of readings (JSON).
    Plain,
    /// The user records of a valid aggregate, in order.
    Aggregate(Vec<UserRecord>),
    /// Starts like an aggregate, but cannot be read: quarantined whole.
    Corrupt(Rejection),
}

/// Tells an aggregate from a plain record, and opens it.
pub fn open(bytes: &[u8]) -> Payload {
    let Some(rest) = bytes.strip_prefix(&MAGIC) else {
        return Payload::Plain;
    };
    let corrupt = |why: String| {
        Payload::Corrupt(Rejection::new(
            QuarantineReason::CorruptAggregate,
            format!("a KPL aggregated record (it starts with F3 89 9A C2) that {why}"),
        ))
    };
    if rest.len() < MD5_LEN {
        return corrupt(format!(
            "is truncated: {} bytes after the magic, fewer than its 16-byte MD5",
            rest.len()
        ));
    }
    let (message, digest) = rest.split_at(rest.len() - MD5_LEN);
    if Md5::digest(message).as_slice() != digest {
        return corrupt(
            "fails its MD5 check (truncated or altered in transit; none of its user records \
             can be trusted)"
                .into(),
        );
    }
    let agg = match AggregatedRecord::decode(message) {
        Ok(a) => a,
        Err(e) => return corrupt(format!("does not parse as an AggregatedRecord: {e}")),
    };
    if let Err(why) = within_limits(&agg) {
        return corrupt(why);
    }
    // Each key once, shared by every user record naming it: an aggregate of many user
    // records naming one key never copies it per user record.
    let shared =
        |table: Vec<String>| -> Vec<Arc<str>> { table.into_iter().map(Arc::from).collect() };
    let partition_keys = shared(agg.partition_key_table);
    let hash_keys = shared(agg.explicit_hash_key_table);
    let key = |table: &[Arc<str>], at: u64| {
        usize::try_from(at)
            .ok()
            .and_then(|at| table.get(at))
            .cloned()
    };
    let records = agg
        .records
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let index = u32::try_from(i).unwrap_or(u32::MAX);
            let bad = |what: &str, at: u64, of: usize| {
                Rejection::new(
                    QuarantineReason::CorruptAggregate,
                    format!("user record {index} names {what} {at}, but the aggregate has {of}"),
                )
            };
            let explicit_hash_key = r.explicit_hash_key_index.and_then(|at| key(&hash_keys, at));
            let partition_key = match (
                key(&partition_keys, r.partition_key_index),
                r.explicit_hash_key_index,
            ) {
                (None, _) => Err(bad(
                    "partition key",
                    r.partition_key_index,
                    partition_keys.len(),
                )),
                (Some(_), Some(at)) if explicit_hash_key.is_none() => {
                    Err(bad("explicit hash key", at, hash_keys.len()))
                }
                (Some(pk), _) => Ok(pk),
            };
            UserRecord {
                index,
                partition_key,
                explicit_hash_key,
                data: r.data,
            }
        })
        .collect();
    Payload::Aggregate(records)
}

/// Kinesis's limits on what a record may carry, which nothing enforces inside an aggregate:
/// a user-record count past [`MAX_USER_RECORDS`], a partition key past
/// [`MAX_PARTITION_KEY_CHARS`], an explicit hash key that is not a 128-bit decimal. Any of
/// them makes the whole aggregate corrupt (the KPL never writes one). The message names the
/// limit and the sizes, never the key itself.
fn within_limits(agg: &AggregatedRecord) -> Result<(), String> {
    let n = agg.records.len();
    if n > MAX_USER_RECORDS {
        return Err(format!(
            "holds {n} user records, more than the {MAX_USER_RECORDS} an aggregate of readings \
             can hold in a Kinesis record"
        ));
    }
    for (at, pk) in agg.partition_key_table.iter().enumerate() {
        // Only a key of over 256 bytes can have over 256 characters.
        if pk.len() > MAX_PARTITION_KEY_CHARS && pk.chars().nth(MAX_PARTITION_KEY_CHARS).is_some() {
            return Err(format!(
                "has a partition key of {} characters (entry {at} of its table), past \
                 Kinesis's limit of {MAX_PARTITION_KEY_CHARS}",
                pk.chars().count()
            ));
        }
    }
    for (at, ehk) in agg.explicit_hash_key_table.iter().enumerate() {
        if !is_hash_key(ehk) {
            return Err(format!(
                "has an explicit hash key of {} bytes (entry {at} of its table) that is not a \
                 decimal from 0 to 2^128 - 1 (at most {MAX_HASH_KEY_DIGITS} digits), as \
                 Kinesis's hash keys are",
                ehk.len()
            ));
        }
    }
    Ok(())
}

/// Whether `s` is a hash key Kinesis could take: ASCII digits (leading zeros allowed, as the
/// KPL parses keys as numbers) of at most 2^128 - 1.
fn is_hash_key(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_HASH_KEY_DIGITS
        && s.bytes().all(|b| b.is_ascii_digit())
        && s.parse::<u128>().is_ok()
}

/// An aggregate as the KPL writes it (tests and the local simulator).
pub fn aggregate(records: &[(&str, Option<&str>, &[u8])]) -> Vec<u8> {
    let mut agg = AggregatedRecord::default();
    let index = |table: &mut Vec<String>, k: &str| {
        let at = table.iter().position(|t| t == k).unwrap_or_else(|| {
            table.push(k.to_owned());
            table.len() - 1
        });
        at as u64
    };
    for (pk, ehk, data) in records {
        let partition_key_index = index(&mut agg.partition_key_table, pk);
        let explicit_hash_key_index = ehk.map(|e| index(&mut agg.explicit_hash_key_table, e));
        agg.records.push(Record {
            partition_key_index,
            explicit_hash_key_index,
            data: data.to_vec(),
            tags: Vec::new(),
        });
    }
    let message = agg.encode_to_vec();
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&message);
    out.extend_from_slice(&Md5::digest(&message));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn json_is_never_an_aggregate() {
        assert_eq!(open(br#"{"deviceId":"a"}"#), Payload::Plain);
        assert_eq!(open(b""), Payload::Plain);
    }

    #[test]
    fn an_aggregate_opens_into_its_user_records_with_their_own_keys() {
        let bytes = aggregate(&[
            ("dev_a", None, b"one"),
            ("dev_b", Some("1234"), b"two"),
            ("dev_a", None, b"three"),
        ]);
        let Payload::Aggregate(rs) = open(&bytes) else {
            panic!("not opened")
        };
        assert_eq!(rs.len(), 3);
        assert_eq!(
            (rs[1].index, rs[1].partition_key.as_deref()),
            (1, Ok("dev_b"))
        );
        assert_eq!(rs[1].explicit_hash_key.as_deref(), Some("1234"));
        assert_eq!(rs[2].data, b"three");
        assert_eq!(rs[2].partition_key.as_deref(), Ok("dev_a"));
    }

    #[test]
    fn a_bad_digest_or_a_truncation_makes_the_whole_aggregate_corrupt() {
        let good = aggregate(&[("dev_a", None, b"one")]);
        let mut altered = good.clone();
        let at = altered.len() - 20;
        altered[at] ^= 1;
        for bad in [&altered[..], &good[..good.len() - 1], &good[..10]] {
            let Payload::Corrupt(r) = open(bad) else {
                panic!("{bad:?} not corrupt")
            };
            assert_eq!(r.reason, QuarantineReason::CorruptAggregate);
        }
    }

    #[test]
    fn a_key_index_out_of_its_table_rejects_that_user_record_alone() {
        let mut agg = AggregatedRecord {
            partition_key_table: vec!["dev_a".into()],
            ..Default::default()
        };
        for (pk, data) in [(0, b"ok"), (5, b"no")] {
            agg.records.push(Record {
                partition_key_index: pk,
                explicit_hash_key_index: None,
                data: data.to_vec(),
                tags: vec![],
            });
        }
        let message = agg.encode_to_vec();
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&message);
        bytes.extend_from_slice(&Md5::digest(&message));
        let Payload::Aggregate(rs) = open(&bytes) else {
            panic!()
        };
        assert!(rs[0].partition_key.is_ok());
        let e = rs[1].partition_key.as_ref().unwrap_err();
        assert_eq!(e.reason, QuarantineReason::CorruptAggregate);
        assert!(e.message.contains("user record 1"), "{e}");
        assert_eq!(rs[1].data, b"no");
    }

    /// The bytes of a Kinesis record carrying `agg`: magic, protobuf, MD5.
    fn sealed(agg: &AggregatedRecord) -> Vec<u8> {
        let message = agg.encode_to_vec();
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&message);
        bytes.extend_from_slice(&Md5::digest(&message));
        bytes
    }

    /// An aggregate of `n` user records with empty data, all naming key 0 of the tables.
    fn of_many(pk: &str, ehk: Option<&str>, n: usize) -> Vec<u8> {
        let agg = AggregatedRecord {
            partition_key_table: vec![pk.to_owned()],
            explicit_hash_key_table: ehk.into_iter().map(str::to_owned).collect(),
            records: vec![
                Record {
                    partition_key_index: 0,
                    explicit_hash_key_index: ehk.map(|_| 0),
                    data: Vec::new(),
                    tags: vec![],
                };
                n
            ],
        };
        sealed(&agg)
    }

    fn corrupt_because(bytes: &[u8]) -> String {
        match open(bytes) {
            Payload::Corrupt(r) => {
                assert_eq!(r.reason, QuarantineReason::CorruptAggregate);
                r.message
            }
            other => panic!("not corrupt: {}", describe(&other)),
        }
    }

    fn describe(p: &Payload) -> String {
        match p {
            Payload::Plain => "plain".into(),
            Payload::Corrupt(r) => format!("corrupt: {r}"),
            Payload::Aggregate(rs) => format!("an aggregate of {} user records", rs.len()),
        }
    }

    #[test]
    fn a_partition_key_over_kinesiss_256_characters_makes_the_whole_aggregate_corrupt() {
        // Kinesis counts characters, not bytes: 256 two-byte characters are a valid key.
        let longest = "é".repeat(MAX_PARTITION_KEY_CHARS);
        let ok = aggregate(&[(&longest, None, br#"{"deviceId":"a"}"#)]);
        assert!(matches!(open(&ok), Payload::Aggregate(_)));

        let too_long = "é".repeat(MAX_PARTITION_KEY_CHARS + 1);
        let bad = aggregate(&[("dev_a", None, b"one"), (&too_long, None, b"not json")]);
        let message = corrupt_because(&bad);
        assert!(message.contains("257 characters"), "{message}");
        assert!(message.contains("256"), "{message}");
        assert!(
            !message.contains("éé"),
            "the key is never copied into the message"
        );
    }

    #[test]
    fn an_unused_long_partition_key_in_the_table_is_as_corrupt_as_a_used_one() {
        let agg = AggregatedRecord {
            partition_key_table: vec!["dev_a".into(), "k".repeat(300)],
            explicit_hash_key_table: vec![],
            records: vec![Record {
                partition_key_index: 0,
                explicit_hash_key_index: None,
                data: b"{}".to_vec(),
                tags: vec![],
            }],
        };
        assert!(corrupt_because(&sealed(&agg)).contains("300 characters"));
    }

    #[test]
    fn an_explicit_hash_key_that_is_not_a_128_bit_decimal_makes_the_whole_aggregate_corrupt() {
        // 2^128 - 1, the largest hash key: 39 digits.
        let largest = "340282366920938463463374607431768211455";
        for good in ["0", "1234", largest, "007"] {
            let bytes = aggregate(&[("dev_a", Some(good), b"one")]);
            assert!(
                matches!(open(&bytes), Payload::Aggregate(_)),
                "{good} is a valid hash key"
            );
        }
        let huge = "9".repeat(500_000);
        for bad in [
            "340282366920938463463374607431768211456",  // 2^128
            "1000000000000000000000000000000000000000", // 40 digits
            "",
            "12a",
            "+5",
            "-1",
            " 5",
            "１２", // full-width digits are not ASCII digits
            &huge,
        ] {
            let bytes = aggregate(&[("dev_a", None, b"one"), ("dev_b", Some(bad), b"two")]);
            let message = corrupt_because(&bytes);
            assert!(message.contains("explicit hash key"), "{message}");
            assert!(message.contains("2^128"), "{message}");
            assert!(message.len() < 400, "the key is never copied: {message}");
        }
    }

    #[test]
    fn more_user_records_than_the_bound_make_the_whole_aggregate_corrupt() {
        let most = of_many("dev_a", None, MAX_USER_RECORDS);
        assert!(
            matches!(open(&most), Payload::Aggregate(rs) if rs.len() == MAX_USER_RECORDS),
            "the bound itself is allowed"
        );
        let message = corrupt_because(&of_many("dev_a", None, MAX_USER_RECORDS + 1));
        assert!(message.contains("65537 user records"), "{message}");
        assert!(message.contains("65536"), "{message}");
    }

    #[test]
    fn an_aggregate_of_80000_user_records_sharing_a_500_kb_key_is_corrupt_as_a_whole() {
        // The issue's aggregate: it fits in a Kinesis record (a user record costs 6 bytes of
        // protobuf), and copying its key per user record would take 40 GB.
        let bytes = of_many(&"k".repeat(500 * 1024), None, 80_000);
        assert!(bytes.len() < 1024 * 1024, "{}", bytes.len());
        let message = corrupt_because(&bytes);
        assert!(message.contains("80000 user records"), "{message}");
    }

    #[test]
    fn user_records_share_their_keys_rather_than_copying_them() {
        let pk = "p".repeat(MAX_PARTITION_KEY_CHARS);
        let ehk = "340282366920938463463374607431768211455";
        let bytes = of_many(&pk, Some(ehk), 1000);
        let Payload::Aggregate(rs) = open(&bytes) else {
            panic!("not opened")
        };
        let first = rs[0].partition_key.as_ref().unwrap();
        let first_ehk = rs[0].explicit_hash_key.as_ref().unwrap();
        assert_eq!(&**first, pk);
        for r in &rs {
            assert!(Arc::ptr_eq(first, r.partition_key.as_ref().unwrap()));
            assert!(Arc::ptr_eq(
                first_ehk,
                r.explicit_hash_key.as_ref().unwrap()
            ));
        }
    }

    proptest! {
        #[test]
        fn any_bytes_open_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..600),
                                            magic in any::<bool>()) {
            let mut b = if magic { MAGIC.to_vec() } else { Vec::new() };
            b.extend(bytes);
            let _ = open(&b);
        }

        #[test]
        fn every_user_record_of_a_valid_aggregate_comes_back(
            records in proptest::collection::vec(
                ("[a-z0-9_]{1,20}", proptest::option::of("[0-9]{1,38}"),
                 proptest::collection::vec(any::<u8>(), 0..200)),
                1..40),
        ) {
            let input: Vec<(&str, Option<&str>, &[u8])> = records
                .iter()
                .map(|(p, e, d)| (p.as_str(), e.as_deref(), d.as_slice()))
                .collect();
            let Payload::Aggregate(out) = open(&aggregate(&input)) else {
                panic!("a valid aggregate did not open")
            };
            prop_assert_eq!(out.len(), input.len());
            for (i, (r, (p, e, d))) in out.into_iter().zip(&input).enumerate() {
                prop_assert_eq!(r.index as usize, i);
                prop_assert_eq!(r.partition_key.as_deref(), Ok(*p));
                prop_assert_eq!(r.explicit_hash_key.as_deref(), *e);
                prop_assert_eq!(r.data.as_slice(), *d);
            }
        }

        #[test]
        fn a_changed_byte_in_an_aggregate_never_passes_as_other_records(
            data in proptest::collection::vec(any::<u8>(), 1..200),
            flip in any::<prop::sample::Index>(),
        ) {
            let good = aggregate(&[("dev", None, &data)]);
            let mut bad = good.clone();
            let at = 4 + flip.index(bad.len() - 4);
            bad[at] ^= 0x40;
            prop_assert!(matches!(open(&bad), Payload::Corrupt(_)));
        }
    }
}
