//! Packed readings (docs/design.md §2) read back as the reading items they stand for.
//!
//! A packed partition holds slot parts (`SLOT#<start>#<part>`); the readings of one slot may
//! be spread over several parts that interleave in time, of its own and of the slot before
//! (a part may carry its next slot's readings, docs/design.md §4), and the metrics of one
//! reading over several parts, so a slot is read with every part of both (merged per
//! timestamp) before any of its readings is emitted. Each reading becomes the item a single
//! reading would be (`READING#<ts>` sort key, its metrics, the slot's `ttl`), so ordering,
//! cursor positions, expiry and rendering are the ones of single readings: a client cannot
//! tell the layouts apart (a packed reading's `metadata` is kept in its parts, see
//! [`SlotItem`]). A part that cannot be read ([`SlotItem::decode`] says which are readable) is
//! skipped, logged with its key and counted, never an error: one bad item must not hide the
//! rest of a device's history.

use std::collections::BTreeMap;

use crate::Item;
use tidemark_schema::table::attr;
use tidemark_schema::{ReadingItem, SlotItem, SlotLen, SlotPart, Timestamp, join_parts, keys};

use super::spec::{QuerySpec, SkRange};

/// Where a packed source stands: its slot length, the readings it wants (`[from, to]`), and
/// the instant a cursor resumes it after (it and every reading before it in the walk's
/// direction were dealt with).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packed {
    pub len: SlotLen,
    pub from: Timestamp,
    pub to: Timestamp,
    pub after: Option<Timestamp>,
}

impl Packed {
    /// The query for every part of every slot that may hold a reading of `[from, to]` not
    /// yet emitted: from the slot before that of the first such instant (its parts may carry
    /// readings of the next) to the slot of the last.
    pub fn query(&self, partition: String, forward: bool) -> QuerySpec {
        let (mut lo, mut hi) = (self.from, self.to);
        match self.after {
            Some(a) if forward => lo = lo.max(a.succ().unwrap_or(Timestamp::MAX)),
            Some(a) => hi = hi.min(a.pred().unwrap_or(Timestamp::MIN)),
            None => {}
        }
        let (first, last) =
            keys::slot_sk_between(self.len.first_holder(lo), self.len.start_of(hi.max(lo)));
        QuerySpec::table(partition, SkRange::Between(first, last), forward)
    }

    /// Whether a reading at `at` is one this source still has to emit.
    fn wants(&self, at: Timestamp, forward: bool) -> bool {
        let fresh = match self.after {
            None => true,
            Some(a) if forward => at > a,
            Some(a) => at < a,
        };
        fresh && self.from <= at && at <= self.to
    }

    /// The position after which nothing of the slot starting at `start` is left, in the
    /// walk's direction: its last instant going forward, its first going back, but never
    /// behind where the source resumed (the slot before the resumed one is read for what it
    /// carries, and its own readings were dealt with).
    pub fn settled_after(&self, start: Timestamp, forward: bool) -> Vec<String> {
        let at = match (forward, self.after) {
            (true, Some(a)) => self.len.last_of(start).max(a),
            (true, None) => self.len.last_of(start),
            (false, Some(a)) => start.min(a),
            (false, None) => start,
        };
        vec![keys::reading_sk(at)]
    }
}

/// The start of the slot whose key range an item of a packed query lies in
/// (`SLOT#<start>#…`), whether or not the rest of its key is a part's: a foreign item there
/// is grouped with that slot and skipped when the slot is read.
pub fn slot_start(item: &Item) -> Option<Timestamp> {
    keys::slot_start_of_sk(item.get(attr::SK).and_then(|v| v.as_s().ok())?)
}

fn text(item: &Item, a: &str) -> String {
    item.get(a)
        .and_then(|v| v.as_s().ok())
        .cloned()
        .unwrap_or_default()
}

/// Logs an item of a packed partition that cannot be read, with its key and why.
pub fn skip(item: &Item, why: &str) {
    tracing::warn!(pk = %text(item, attr::PK), sk = %text(item, attr::SK), reason = why,
        "unreadable slot part skipped");
}

/// The readable parts of one slot, as a packed query brought them (all of them).
#[derive(Debug, Clone)]
pub struct Group {
    pub start: Timestamp,
    parts: Vec<SlotPart>,
    ttl: Option<i64>,
    pk: String,
}

/// A group read: its parts, and what could not be read.
#[derive(Debug)]
pub struct Decoded {
    pub group: Group,
    /// Parts (and readings past their slot's next) that could not be read; each was logged.
    pub skipped: usize,
    /// Readings its parts hold (how full they are).
    pub readings: usize,
}

/// Reads every part of the slot starting at `start` (all its parts, any order). A part holds
/// readings of its slot and may hold its next slot's (docs/design.md §4); one past that is
/// left out, and logged and counted if `p` wants its time (a part of a slot of another length
/// shares the key range across a layout change, with readings the range leaves out).
pub fn decode(start: Timestamp, items: &[Item], p: &Packed) -> Decoded {
    let mut out = Decoded {
        group: Group {
            start,
            parts: Vec::with_capacity(items.len()),
            ttl: None,
            pk: String::new(),
        },
        skipped: 0,
        readings: 0,
    };
    let last = p.len.last_of(p.len.next(start));
    for item in items {
        let read = crate::from_item::<SlotItem>(item.clone())
            .map_err(|e| e.to_string())
            .and_then(|s| Ok((s.decode().map_err(|e| e.to_string())?, s.ttl, s.pk)));
        match read {
            Ok((mut part, t, k)) if part.start == start => {
                let past = part
                    .readings
                    .keys()
                    .filter(|at| **at > last && p.from <= **at && **at <= p.to)
                    .count();
                part.readings.retain(|at, _| *at <= last);
                if past > 0 {
                    // Emitting them would break the order.
                    tracing::warn!(pk = %k, %start, "packed readings past the next slot skipped");
                    out.skipped += past;
                }
                out.readings += part.readings.len();
                let g = &mut out.group;
                g.ttl = Some(g.ttl.map_or(t, |old| old.max(t)));
                g.pk = k;
                g.parts.push(part);
            }
            Ok(_) => {
                skip(item, "not a part of this slot");
                out.skipped += 1;
            }
            Err(e) => {
                skip(item, &e);
                out.skipped += 1;
            }
        }
    }
    out
}

/// The readings of one slot, as reading items in the walk's order.
#[derive(Debug, Default)]
pub struct Unpacked {
    pub items: Vec<Item>,
    /// Readings that could not be turned into items; each was logged.
    pub skipped: usize,
}

/// The readings `p` still wants of the slot starting at `slot`, from `groups`: its own
/// parts and those of the slot before, which may carry some of its readings, joined by
/// [`tidemark_schema::join_parts`].
pub fn unpack(slot: Timestamp, groups: &[&Group], p: &Packed, forward: bool) -> Unpacked {
    let mut out = Unpacked::default();
    let parts: Vec<SlotPart> = groups.iter().flat_map(|g| g.parts.clone()).collect();
    let ttl = groups.iter().filter_map(|g| g.ttl).max();
    let pk = groups.iter().map(|g| g.pk.as_str()).find(|k| !k.is_empty());
    let pk = pk.unwrap_or_default().to_owned();
    let (readings, metadata) = join_parts(parts);
    let last = p.len.last_of(slot);
    let mut emit = |at: Timestamp, metrics: BTreeMap<_, _>| {
        if at < slot || at > last || !p.wants(at, forward) {
            return;
        }
        let metadata = metadata.get(&at).and_then(|text| {
            serde_json::from_str(text)
                .inspect_err(|e| tracing::warn!(%pk, %at, error = %e, "packed metadata left out"))
                .ok()
        });
        let item = ReadingItem {
            pk: pk.clone(),
            sk: keys::reading_sk(at),
            metrics,
            metadata,
            ttl: ttl.unwrap_or(i64::MAX),
            arrived_at: None,
        };
        match crate::to_item(&item) {
            Ok(i) => out.items.push(i),
            Err(e) => {
                tracing::warn!(%pk, %at, error = %e, "packed reading not convertible");
                out.skipped += 1;
            }
        }
    };
    if forward {
        readings.into_iter().for_each(|(at, m)| emit(at, m));
    } else {
        readings.into_iter().rev().for_each(|(at, m)| emit(at, m));
    }
    out
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::primitives::Blob;
    use aws_sdk_dynamodb::types::AttributeValue;
    use tidemark_schema::packed::{self, SlotReadings};
    use tidemark_schema::{MetricName, field};

    use super::*;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    fn part(start: Timestamp, n: u16, secs: &[i64]) -> Item {
        let readings: SlotReadings = secs
            .iter()
            .map(|s| {
                let at = start.plus_millis(s * 1000).unwrap();
                (at, [(MetricName::new("s").unwrap(), *s as f64)].into())
            })
            .collect();
        Item::from([
            (attr::PK.into(), AttributeValue::S("DEVICE#d".into())),
            (attr::SK.into(), AttributeValue::S(keys::slot_sk(start, n))),
            (
                field::PACKED.into(),
                AttributeValue::B(Blob::new(packed::encode(start, &readings).unwrap())),
            ),
            (attr::TTL.into(), AttributeValue::N("99".into())),
            (
                field::READING_COUNT.into(),
                AttributeValue::N(readings.len().to_string()),
            ),
            (field::VERSION.into(), AttributeValue::N("1".into())),
        ])
    }

    /// One slot read from its own parts alone: what it emits, skips and decodes.
    struct Read {
        items: Vec<Item>,
        skipped: usize,
        decoded: usize,
    }

    fn unpack(start: Timestamp, parts: &[Item], p: &Packed, forward: bool) -> Read {
        let d = decode(start, parts, p);
        let u = super::unpack(start, &[&d.group], p, forward);
        Read {
            items: u.items,
            skipped: d.skipped + u.skipped,
            decoded: d.readings,
        }
    }

    fn secs(u: &Read, start: Timestamp) -> Vec<i64> {
        u.items
            .iter()
            .map(|i| {
                let r: ReadingItem = crate::from_item(i.clone()).unwrap();
                assert_eq!(r.ttl, 99);
                let at = Timestamp::parse_canonical(&r.sk[keys::READING_PREFIX.len()..]).unwrap();
                (at.epoch_millis() - start.epoch_millis()) / 1000
            })
            .collect()
    }

    #[test]
    fn interleaved_parts_come_out_as_one_ordered_slot_after_the_cursor() {
        let start = ts("2026-04-20T14:00:00Z");
        let parts = [part(start, 1, &[1, 4, 5]), part(start, 0, &[0, 2, 3, 59])];
        let p = Packed {
            len: SlotLen::new(60).unwrap(),
            from: ts("2026-04-20T14:00:01Z"),
            to: ts("2026-04-20T14:00:58Z"),
            after: None,
        };
        let u = unpack(start, &parts, &p, true);
        assert_eq!(
            (secs(&u, start), u.skipped, u.decoded),
            (vec![1, 2, 3, 4, 5], 0, 7)
        );
        let after = Packed {
            after: Some(ts("2026-04-20T14:00:03Z")),
            ..p
        };
        assert_eq!(secs(&unpack(start, &parts, &after, true), start), [4, 5]);
        assert_eq!(secs(&unpack(start, &parts, &after, false), start), [2, 1]);
    }

    #[test]
    fn unreadable_and_foreign_parts_are_counted_and_the_rest_is_read() {
        let start = ts("2026-04-20T14:00:00Z");
        let mut garbage = part(start, 2, &[7]);
        garbage.insert(
            field::PACKED.into(),
            AttributeValue::B(Blob::new(vec![9, 9])),
        );
        let mut no_bytes = part(start, 3, &[8]);
        no_bytes.remove(field::PACKED);
        let other_slot = part(ts("2026-04-20T14:01:00Z"), 0, &[1]);
        let parts = [part(start, 0, &[1, 2]), garbage, no_bytes, other_slot];
        let p = Packed {
            len: SlotLen::new(60).unwrap(),
            from: start,
            to: ts("2026-04-20T15:00:00Z"),
            after: None,
        };
        let u = unpack(start, &parts, &p, true);
        assert_eq!((secs(&u, start), u.skipped), (vec![1, 2], 3));
    }

    #[test]
    fn a_slots_readings_come_from_its_parts_and_the_previous_slots_past_the_next_slot_none() {
        let len = SlotLen::new(60).unwrap();
        let (prev, start) = (ts("2026-04-20T14:00:00Z"), ts("2026-04-20T14:01:00Z"));
        // A 14:00 part carrying 14:01:10, the 14:01 part with 14:01:20 and 14:02:30, and a
        // foreign-length part at 14:00 holding 14:03:00, past the slot after its own.
        let carrier = [part(prev, 0, &[5, 70]), part(prev, 1, &[180])];
        let own = [part(start, 0, &[20, 90])];
        let wanting = |from: &str| Packed {
            len,
            from: ts(from),
            to: ts("2026-04-20T15:00:00Z"),
            after: None,
        };
        let p = wanting("2026-04-20T14:01:00Z");
        let (c, o) = (decode(prev, &carrier, &p), decode(start, &own, &p));
        assert_eq!((c.skipped, c.readings, o.skipped), (1, 2, 0));
        let slot = super::unpack(start, &[&c.group, &o.group], &p, true);
        let read = Read {
            items: slot.items,
            skipped: slot.skipped,
            decoded: 0,
        };
        assert_eq!(secs(&read, prev), [70, 80]);
        // A range that leaves the foreign reading out does not count it.
        assert_eq!(
            decode(prev, &carrier, &wanting("2026-04-20T14:04:00Z")).skipped,
            0
        );
    }

    #[test]
    fn a_timestamps_metrics_spread_over_parts_merge_and_the_highest_parts_metadata_wins() {
        use tidemark_schema::{DeviceId, SlotMetadata, metadata_bitmaps};
        let start = ts("2026-04-20T14:00:00Z");
        let at = start.plus_millis(4000).unwrap();
        let m = |k: &str| MetricName::new(k).unwrap();
        let item = |n: u16, readings: SlotReadings, meta: &str| {
            let metadata = SlotMetadata::from([(at, meta.to_owned())]);
            crate::to_item(&SlotItem {
                pk: keys::reading_pk(&DeviceId::new("d").unwrap(), None),
                sk: keys::slot_sk(start, n),
                packed: packed::encode(start, &readings).unwrap(),
                reading_count: readings.len() as u64,
                version: 1,
                ttl: 99,
                sealed: n < 2,
                full: n < 2,
                metadata: metadata_bitmaps(&readings, &metadata),
                arrived_at: None,
            })
            .unwrap()
        };
        // Part 0 holds t, part 1 the metric h added later, part 2 only newer metadata.
        let parts = [
            item(2, [(at, BTreeMap::new())].into(), r#"{"fw":"3"}"#),
            item(0, [(at, [(m("t"), 1.5)].into())].into(), r#"{"fw":"1"}"#),
            item(1, [(at, [(m("h"), 40.0)].into())].into(), r#"{"fw":"2"}"#),
        ];
        let p = Packed {
            len: SlotLen::new(60).unwrap(),
            from: start,
            to: ts("2026-04-20T14:00:59Z"),
            after: None,
        };
        let u = unpack(start, &parts, &p, true);
        assert_eq!((u.items.len(), u.skipped, u.decoded), (1, 0, 3));
        let r: ReadingItem = crate::from_item(u.items[0].clone()).unwrap();
        assert_eq!(r.metrics, [(m("t"), 1.5), (m("h"), 40.0)].into());
        assert_eq!(
            r.metadata.map(serde_json::Value::Object),
            Some(serde_json::json!({"fw": "3"}))
        );
        // Without the part carrying it, the metadata of part 1 wins; a timestamp with no
        // metrics in any readable part is a reading without metrics (a keep-alive), with its
        // metadata.
        let u = unpack(start, &parts[1..], &p, true);
        let r: ReadingItem = crate::from_item(u.items[0].clone()).unwrap();
        assert_eq!(
            r.metadata.map(serde_json::Value::Object),
            Some(serde_json::json!({"fw": "2"}))
        );
        let alone = unpack(start, &parts[..1], &p, true);
        assert_eq!(alone.items.len(), 1);
        let r: ReadingItem = crate::from_item(alone.items[0].clone()).unwrap();
        assert!(r.metrics.is_empty());
        assert_eq!(
            r.metadata.map(serde_json::Value::Object),
            Some(serde_json::json!({"fw": "3"}))
        );
    }
}
