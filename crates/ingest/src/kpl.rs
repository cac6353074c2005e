//! Records aggregated by the Kinesis Producer Library. By default the KPL packs many user
//! records into one Kinesis record: the magic bytes `F3 89 9A C2`, a protobuf
//! `AggregatedRecord`, and the MD5 of that protobuf. Each user record inside is a record of
//! its own to Tidemark: decoded on its own, with its own partition key and explicit hash key,
//! and quarantined alone when it is bad, while its siblings are stored.
//!
//! The message definitions are the KPL's (`aggregation-format.md` in its repository); a
//! record that starts with the magic bytes but whose MD5 does not match, or whose protobuf
//! does not parse, is corrupt as a whole (JSON never starts with those bytes, so nothing
//! else is mistaken for an aggregate).

use md5::{Digest, Md5};
use prost::Message;
use tidemark_schema::QuarantineReason;

use crate::decode::Rejection;

pub const MAGIC: [u8; 4] = [0xF3, 0x89, 0x9A, 0xC2];
const MD5_LEN: usize = 16;

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
    /// Its partition key; a rejection when its key index points outside the aggregate's
    /// table (then it is quarantined alone).
    pub partition_key: Result<String, Rejection>,
    pub explicit_hash_key: Option<String>,
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
    let key = |table: &[String], at: u64| {
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
            let explicit_hash_key = r
                .explicit_hash_key_index
                .and_then(|at| key(&agg.explicit_hash_key_table, at));
            let partition_key = match (
                key(&agg.partition_key_table, r.partition_key_index),
                r.explicit_hash_key_index,
            ) {
                (None, _) => Err(bad(
                    "partition key",
                    r.partition_key_index,
                    agg.partition_key_table.len(),
                )),
                (Some(_), Some(at)) if explicit_hash_key.is_none() => Err(bad(
                    "explicit hash key",
                    at,
                    agg.explicit_hash_key_table.len(),
                )),
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
