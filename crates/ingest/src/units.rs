//! A batch's records as units of decoding: a plain Kinesis record is one unit, a KPL
//! aggregate one unit per user record ([`crate::kpl`]). A unit is stored or quarantined as a
//! whole, so a bad user record is quarantined alone while its siblings are stored; every unit
//! remembers its Kinesis record, whose sequence number is what a partial-batch failure
//! reports (Lambda checkpoints whole Kinesis records, so a replay starts at the aggregate
//! again, and rewrites of what it stored are no-ops).

use std::borrow::Cow;
use std::ops::Deref;
use std::sync::Arc;

use aws_lambda_events::event::kinesis::KinesisEventRecord;
use tidemark_schema::{DeviceId, QuarantineSource, Reading, Timestamp};

use crate::config::IngestConfig;
use crate::decode::{Message, Rejection, decode_message};
use crate::event::arrival_time;
use crate::kpl::{self, Payload};

/// One unit: where it came from and its bytes.
#[derive(Debug, Clone)]
pub struct Unit<'a> {
    /// Index of its Kinesis record in the batch.
    pub record: usize,
    pub received: Timestamp,
    pub sequence: &'a str,
    pub sub_record: Option<u32>,
    pub partition_key: Key<'a>,
    pub explicit_hash_key: Option<Arc<str>>,
    pub data: Cow<'a, [u8]>,
    /// The IoT thing that published it, when the IoT rule forwarded it
    /// ([`crate::decode::THING_FIELD`]).
    pub thing: Option<DeviceId>,
}

/// A unit's partition key: its Kinesis record's, or a user record's, shared with the other
/// user records of its aggregate that name it (never copied per user record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key<'a> {
    Record(&'a str),
    Shared(Arc<str>),
}

impl Deref for Key<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        match self {
            Key::Record(k) => k,
            Key::Shared(k) => k,
        }
    }
}

impl Unit<'_> {
    pub fn source(&self) -> QuarantineSource<'_> {
        QuarantineSource {
            received: self.received,
            sequence: self.sequence,
            sub_record: self.sub_record,
            partition_key: &self.partition_key,
            explicit_hash_key: self.explicit_hash_key.as_deref(),
        }
    }
}

/// The batch's units in record order (so the earliest failed unit belongs to the earliest
/// failed record), each with its decoded readings or its rejection.
pub fn units<'a>(
    records: &'a [KinesisEventRecord],
    now: Timestamp,
    config: &IngestConfig,
) -> (Vec<Unit<'a>>, Vec<Result<Vec<Reading>, Rejection>>) {
    let mut units = Vec::with_capacity(records.len());
    let mut decoded = Vec::with_capacity(records.len());
    for (i, r) in records.iter().enumerate() {
        let k = &r.kinesis;
        let whole = Unit {
            record: i,
            received: arrival_time(r),
            sequence: &k.sequence_number,
            sub_record: None,
            partition_key: Key::Record(k.partition_key.as_str()),
            explicit_hash_key: None,
            data: Cow::Borrowed(&k.data),
            thing: None,
        };
        match kpl::open(&k.data) {
            Payload::Plain => {
                let (d, thing) = split(decode_message(&k.data, now, whole.received, config));
                decoded.push(d);
                units.push(Unit { thing, ..whole });
            }
            Payload::Corrupt(rejection) => {
                decoded.push(Err(rejection));
                units.push(whole);
            }
            Payload::Aggregate(users) => {
                for u in users {
                    let (partition_key, (readings, thing)) = match u.partition_key {
                        Ok(pk) => {
                            let d =
                                decode_message(&u.data, now, whole.received, config).map_err(|r| {
                                    Rejection::new(
                                        r.reason,
                                        format!(
                                            "user record {} of an aggregate: {}",
                                            u.index, r.message
                                        ),
                                    )
                                });
                            (Key::Shared(pk), split(d))
                        }
                        Err(rejection) => (whole.partition_key.clone(), (Err(rejection), None)),
                    };
                    decoded.push(readings);
                    units.push(Unit {
                        sub_record: Some(u.index),
                        partition_key,
                        explicit_hash_key: u.explicit_hash_key,
                        data: Cow::Owned(u.data),
                        thing,
                        ..whole.clone()
                    });
                }
            }
        }
    }
    (units, decoded)
}

/// A decoded message as the readings (or rejection) and the thing.
fn split(m: Result<Message, Rejection>) -> (Result<Vec<Reading>, Rejection>, Option<DeviceId>) {
    match m {
        Ok(m) => (Ok(m.readings), m.thing),
        Err(r) => (Err(r), None),
    }
}
