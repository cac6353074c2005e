//! Arrivals and heartbeats in a batch of the table's stream, from its decoded records
//! ([`crate::records::decode`]). Pure: no clock, no I/O.

use std::collections::BTreeMap;

use tidemark_schema::{DeviceId, Timestamp};

use crate::records::Decoded;
pub use crate::records::Heartbeat;

/// The first and last arrival of one device's records in a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrivals {
    pub first: Timestamp,
    pub last: Timestamp,
}

impl Arrivals {
    fn add(this: &mut Option<Arrivals>, at: Timestamp) {
        *this = Some(match *this {
            None => Arrivals {
                first: at,
                last: at,
            },
            Some(a) => Arrivals {
                first: a.first.min(at),
                last: a.last.max(at),
            },
        });
    }
}

/// Per device, the position of its first record in `event` and the arrivals its readings' and
/// slot parts' writes show. A write that changed nothing but its arrival (an exact resend, of
/// a single reading or of packed ones, whose part is put back with it) is an arrival too; deletes are not. Items written before arrivals were
/// kept count at the record's creation.
pub fn arrivals(records: &[Decoded]) -> BTreeMap<DeviceId, (usize, Arrivals)> {
    let mut out: BTreeMap<DeviceId, (usize, Option<Arrivals>)> = BTreeMap::new();
    for (i, rec) in records.iter().enumerate() {
        let Decoded::Readings(r) = rec else { continue };
        if let (Some(device), Some(at)) = (r.device(), r.arrival) {
            let e = out.entry(device.clone()).or_insert((i, None));
            Arrivals::add(&mut e.1, at);
        }
    }
    out.into_iter()
        .filter_map(|(d, (i, a))| a.map(|a| (d, (i, a))))
        .collect()
}

/// The heartbeats ingest wrote in the batch that the alerts role has not marked yet (its own
/// mark is a write too, and is not one).
pub fn heartbeats(records: &[Decoded]) -> impl Iterator<Item = &Heartbeat> {
    records.iter().filter_map(|r| match r {
        Decoded::Heartbeat(h) => Some(h),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::decode_all;
    use crate::testing::{event, insert};
    use aws_lambda_events::event::dynamodb::{EventRecord, StreamRecord};
    use tidemark_schema::keys::ShardName;
    use tidemark_schema::{EntityKey, HeartbeatItem};

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    fn stamped(seq: u64, device: &str, at: &str, arrived: &str) -> EventRecord {
        let mut r = insert(seq, device, ts(at), "t", 1.0);
        r.change.new_image.insert(
            "arrivedAt".into(),
            serde_dynamo::AttributeValue::N(ts(arrived).epoch_millis().to_string()),
        );
        r
    }

    #[test]
    fn a_device_arrives_when_its_records_arrived_not_when_its_readings_say() {
        let e = event(vec![
            stamped(1, "d1", "2020-01-01T00:00:00Z", "2026-04-20T14:00:05Z"),
            stamped(2, "d1", "2026-04-20T13:00:00Z", "2026-04-20T14:00:01Z"),
            stamped(3, "d2", "2026-04-20T13:00:00Z", "2026-04-20T14:00:09Z"),
        ]);
        let a = arrivals(&decode_all(&e));
        let (first, d1) = a[&DeviceId::new("d1").unwrap()];
        assert_eq!(first, 0);
        assert_eq!(d1.first, ts("2026-04-20T14:00:01Z"));
        assert_eq!(d1.last, ts("2026-04-20T14:00:05Z"));
        assert_eq!(a.len(), 2);
    }

    #[test]
    fn a_slot_part_put_back_unchanged_with_a_later_arrival_is_an_arrival() {
        use crate::testing::{slot_item, slot_record};
        // An exact resend of packed readings: the part holding them put back as it was, but
        // for its arrival (what a single item's arrivedAt update is for single readings).
        let start = ts("2026-04-20T14:00:00Z");
        let mut old = slot_item("p1", start, 0, &[(5, 1.0)]);
        old.arrived_at = Some(ts("2026-04-20T14:00:06Z"));
        let mut new = old.clone();
        new.version += 1;
        new.arrived_at = Some(ts("2026-04-20T14:08:00Z"));
        let a = arrivals(&decode_all(&event(vec![slot_record(
            1,
            Some(&old),
            Some(&new),
        )])));
        assert_eq!(
            a[&DeviceId::new("p1").unwrap()].1.last,
            ts("2026-04-20T14:08:00Z")
        );
    }

    #[test]
    fn deletes_are_not_arrivals_and_unstamped_items_arrive_at_their_write() {
        let mut del = insert(1, "d1", ts("2026-04-20T13:00:00Z"), "t", 1.0);
        del.event_name = "REMOVE".into();
        del.change.old_image = std::mem::take(&mut del.change.new_image);
        let mut old = insert(2, "d2", ts("2026-04-20T13:00:00Z"), "t", 1.0);
        let timed: StreamRecord = serde_json::from_value(serde_json::json!(
            {"ApproximateCreationDateTime": ts("2026-04-20T14:00:00Z").epoch_seconds(), "SizeBytes": 1}
        ))
        .unwrap();
        old.change.approximate_creation_date_time = timed.approximate_creation_date_time;
        let a = arrivals(&decode_all(&event(vec![del, old])));
        assert_eq!(a.len(), 1);
        assert_eq!(
            a[&DeviceId::new("d2").unwrap()].1.last,
            ts("2026-04-20T14:00:00Z")
        );
    }

    #[test]
    fn a_stored_heartbeat_is_to_be_passed_once_by_each_role() {
        let shard = ShardName::new("shardId-000000000000").unwrap();
        let key = EntityKey::Heartbeat(shard.clone()).key();
        let mut h = HeartbeatItem {
            pk: key.pk,
            sk: key.sk,
            sent_at: ts("2026-04-20T14:00:00Z"),
            stored_at: Some(ts("2026-04-20T14:00:01Z")),
            passed_at: None,
            rollups_passed_at: None,
        };
        let rec = |h: &HeartbeatItem| {
            let mut r = crate::testing::change_record(1, None, Some(crate::testing::image(h)));
            r.event_name = "MODIFY".into();
            r
        };
        let first = rec(&h);
        h.passed_at = Some(h.sent_at);
        let marked = rec(&h);
        h.rollups_passed_at = Some(h.sent_at);
        let both = rec(&h);
        let decoded = decode_all(&event(vec![first, marked, both]));
        let found: Vec<Heartbeat> = heartbeats(&decoded).cloned().collect();
        let beat = |index, alerts_to_mark| Heartbeat {
            index,
            shard: shard.clone(),
            sent_at: ts("2026-04-20T14:00:00Z"),
            alerts_to_mark,
            rollups_to_mark: true,
        };
        // the alerts role's mark is a write the rollups role still has to mark; once both
        // have, the record is no heartbeat to either
        assert_eq!(found, vec![beat(0, true), beat(1, false)]);
    }
}
