//! Readings of devices whose layout packs them (docs/design.md §4): grouped by slot item, then merged
//! into it by [`tidemark_store::write::slots`] (read, merge, write under a version check).
//!
//! A device's readings of a batch are written as runs of at most two slots: a run starts at
//! the slot of its first reading and takes the next slot's readings too, which the first
//! slot's part carries (docs/design.md §4). A batching window opens when records come, not at
//! a slot's start, so a window as long as a slot almost always spans two: writing them as one
//! part makes it one write, not two. So a slot is written about once per batch whatever the
//! number of its readings: that is why a longer batching window costs less per reading. Inside a batch, records of one
//! reading merge as for single items (every metric kept, the later record winning a metric
//! both carry) before the slot is written.

use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt;
use tidemark_schema::{Reading, SlotLen, Timestamp, keys};
use tidemark_store::retry::RetryPolicy;
use tidemark_store::write::slots::{Content, SlotKey, SlotStore, Stamp};
use tokio::time::Instant;

/// The readings of one batch bound for packed slots.
#[derive(Debug, Default)]
pub struct SlotBatch {
    slots: BTreeMap<PendingKey, Pending>,
    readings: u64,
}

/// A pending slot: its partition, its length and its start. The length is part of the key:
/// across a layout change two slots of different lengths may start at the same instant (a
/// 300 s slot starting where a 60 s one does), and each must be written as a slot of its own
/// length, or the readings of one fall outside the other. Ordered by partition, then length,
/// then start, so the slots a run may join (same partition, same length, consecutive) are
/// neighbours.
type PendingKey = (String, SlotLen, Timestamp);

#[derive(Debug)]
struct Pending {
    content: Content,
    ttl: i64,
    /// The earliest record with a reading in this slot: reported if the write fails.
    first_tag: usize,
    /// Every record with a reading in it: blamed together if the slot is refused for good.
    tags: BTreeSet<usize>,
    /// The latest arrival among its records (stamped on the parts written).
    arrived: Timestamp,
}

/// What writing a batch's slots did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SlotReport {
    /// Readings routed to slots (after merging same-timestamp records).
    pub readings: u64,
    /// Slot writes that changed the table (an exact resend's arrival stamped on a part
    /// counts: docs/design.md §4).
    pub written: u64,
    /// Slots that already held every reading as sent, with an arrival as late (a replay):
    /// nothing written.
    pub unchanged: u64,
    /// Races lost to another writer of the same slot, each retried.
    pub conflicts: u64,
    /// Slot parts found unreadable: left as they were, the slot going on past them.
    pub unreadable_parts: u64,
    /// The earliest record of each slot that could not be written.
    pub failed_tags: Vec<usize>,
    pub last_error: Option<String>,
    /// Of the failed slots, those refused with an error no retry cures
    /// ([`tidemark_store::StoreError::is_permanent`]): every record with a reading in the
    /// slot, and the error.
    pub permanent: Vec<(BTreeSet<usize>, String)>,
}

/// The slots of a batch joined into runs of at most two: a slot whose previous slot (same
/// partition, same length) has readings and starts no run of two already joins it.
fn runs(slots: BTreeMap<PendingKey, Pending>) -> Vec<(PendingKey, Pending)> {
    let mut out: Vec<(PendingKey, Pending)> = Vec::with_capacity(slots.len());
    let mut joined = false;
    for ((pk, len, start), p) in slots {
        if let Some(((run_pk, run_len, run_start), run)) = out.last_mut()
            && !joined
            && *run_pk == pk
            && *run_len == len
            && run_len.next(*run_start) == start
        {
            run.content.readings.extend(p.content.readings);
            run.content.metadata.extend(p.content.metadata);
            run.ttl = run.ttl.max(p.ttl);
            run.first_tag = run.first_tag.min(p.first_tag);
            run.tags.extend(p.tags);
            run.arrived = run.arrived.max(p.arrived);
            joined = true;
            continue;
        }
        joined = false;
        out.push(((pk, len, start), p));
    }
    out
}

impl SlotBatch {
    /// Adds `reading` (of record `tag`, which arrived at `arrived`) to its slot in partition
    /// `shard`.
    pub fn add(
        &mut self,
        tag: usize,
        reading: &Reading,
        shard: Option<u16>,
        len: SlotLen,
        retention_days: u32,
        arrived: Timestamp,
    ) {
        let start = len.start_of(reading.timestamp);
        let pk = keys::reading_pk(&reading.device_id, shard);
        let pending = self
            .slots
            .entry((pk, len, start))
            .or_insert_with(|| Pending {
                content: Content::default(),
                // A part lives as long as the last reading it may hold (its next slot's: see the
                // module docs); reads drop expired ones.
                ttl: len.last_of(len.next(start)).ttl_after_days(retention_days),
                first_tag: tag,
                tags: BTreeSet::new(),
                arrived,
            });
        pending.first_tag = pending.first_tag.min(tag);
        pending.tags.insert(tag);
        pending.arrived = pending.arrived.max(arrived);
        // A reading without metrics (a keep-alive) is a reading: its time is kept, with no
        // metric, and stored (docs/design.md §4).
        let readings = &mut pending.content.readings;
        if !readings.contains_key(&reading.timestamp) {
            self.readings += 1;
        }
        let row = readings.entry(reading.timestamp).or_default();
        row.extend(reading.metrics.iter().map(|(k, v)| (k.clone(), *v)));
        if let Some(m) = &reading.metadata {
            // Checked by decoding (an object of bounded size): it serialises.
            let json = serde_json::to_string(m).unwrap_or_default();
            pending.content.metadata.insert(reading.timestamp, json);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Writes every slot, `max_in_flight` at a time, each until `deadline`.
    pub async fn write<A: SlotStore>(
        self,
        api: &A,
        table: &str,
        retry: RetryPolicy,
        max_in_flight: usize,
        deadline: Instant,
    ) -> SlotReport {
        let mut report = SlotReport {
            readings: self.readings,
            ..SlotReport::default()
        };
        let writes = runs(self.slots)
            .into_iter()
            .map(|((pk, len, start), p)| async move {
                let key = SlotKey { pk, start, len };
                let out = api
                    .write_slot(
                        table,
                        retry,
                        &key,
                        &p.content,
                        Stamp {
                            ttl: p.ttl,
                            arrived: Some(p.arrived),
                        },
                        deadline,
                    )
                    .await;
                (key, p.first_tag, p.tags, out)
            });
        let mut results = futures::stream::iter(writes).buffer_unordered(max_in_flight.max(1));
        while let Some((key, tag, tags, out)) = results.next().await {
            match out {
                Ok(w) => {
                    report.conflicts += u64::from(w.conflicts);
                    report.unreadable_parts += w.unreadable_parts as u64;
                    if w.written {
                        report.written += 1;
                    } else {
                        report.unchanged += 1;
                    }
                }
                Err(e) => {
                    tracing::warn!(pk = %key.pk, slot = %key.start, error = %e, "slot write failed");
                    report.failed_tags.push(tag);
                    report.last_error = Some(e.to_string());
                    if e.is_permanent() {
                        report.permanent.push((tags, e.to_string()));
                    }
                }
            }
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use tidemark_schema::{DeviceId, MetricName};

    use super::*;

    fn reading(device: &str, at: &str) -> Reading {
        Reading {
            device_id: DeviceId::new(device).unwrap(),
            timestamp: Timestamp::parse_rfc3339(at).unwrap(),
            metrics: [(MetricName::new("t").unwrap(), 1.0)].into(),
            metadata: None,
        }
    }

    /// The (device partition, slot length, start, readings) of each run a batch is written
    /// as.
    fn runs_of(readings: &[(&str, &str, u32)]) -> Vec<(String, u32, String, usize)> {
        let mut batch = SlotBatch::default();
        let arrived = Timestamp::parse_rfc3339("2026-04-20T15:00:00Z").unwrap();
        for (i, (device, at, len)) in readings.iter().enumerate() {
            let len = SlotLen::new(i64::from(*len)).unwrap();
            batch.add(i, &reading(device, at), None, len, 30, arrived);
        }
        runs(batch.slots)
            .into_iter()
            .map(|((pk, len, start), p)| {
                let n = p.content.readings.len();
                (pk, len.seconds(), start.to_string(), n)
            })
            .collect()
    }

    fn run(pk: &str, len: u32, start: &str, n: usize) -> (String, u32, String, usize) {
        (pk.to_owned(), len, start.to_owned(), n)
    }

    #[test]
    fn a_devices_readings_are_written_in_runs_of_two_slots_from_the_first() {
        assert_eq!(
            runs_of(&[
                // A window from 14:03 to 14:13 over three slots: 14:00 with 14:05, then 14:10.
                ("a", "2026-04-20T14:03:00Z", 300),
                ("a", "2026-04-20T14:06:00Z", 300),
                ("a", "2026-04-20T14:08:00Z", 300),
                ("a", "2026-04-20T14:12:00Z", 300),
                // Another device's slots join only each other.
                ("b", "2026-04-20T14:09:00Z", 300),
                // Slots with a gap between them do not join.
                ("c", "2026-04-20T14:01:00Z", 300),
                ("c", "2026-04-20T14:11:00Z", 300),
                // Nor do slots of another length (a layout change between them).
                ("d", "2026-04-20T14:04:00Z", 300),
                ("d", "2026-04-20T14:05:30Z", 60),
            ]),
            [
                run("DEVICE#a", 300, "2026-04-20T14:00:00.000000Z", 3),
                run("DEVICE#a", 300, "2026-04-20T14:10:00.000000Z", 1),
                run("DEVICE#b", 300, "2026-04-20T14:05:00.000000Z", 1),
                run("DEVICE#c", 300, "2026-04-20T14:00:00.000000Z", 1),
                run("DEVICE#c", 300, "2026-04-20T14:10:00.000000Z", 1),
                run("DEVICE#d", 60, "2026-04-20T14:05:00.000000Z", 1),
                run("DEVICE#d", 300, "2026-04-20T14:00:00.000000Z", 1),
            ]
        );
    }

    #[test]
    fn slots_of_two_lengths_starting_at_one_instant_are_written_apart_and_each_joins_its_own() {
        // A change from 60 s to 300 s slots at 14:03:20: 14:00:37 is in the 60 s slot of
        // 14:00, 14:03:37 in the 300 s slot of 14:00, which starts at the same instant.
        // Whatever order the records come in, each slot keeps its own readings, and the
        // 60 s slots still join in runs of two.
        for order in [[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2]] {
            let readings = [
                ("e", "2026-04-20T14:00:37Z", 60),
                ("e", "2026-04-20T14:01:10Z", 60),
                ("e", "2026-04-20T14:03:37Z", 300),
                ("e", "2026-04-20T14:02:20Z", 60),
            ];
            let batch: Vec<_> = order.iter().map(|i| readings[*i]).collect();
            assert_eq!(
                runs_of(&batch),
                [
                    run("DEVICE#e", 60, "2026-04-20T14:00:00.000000Z", 2),
                    run("DEVICE#e", 60, "2026-04-20T14:02:00.000000Z", 1),
                    run("DEVICE#e", 300, "2026-04-20T14:00:00.000000Z", 1),
                ],
                "{order:?}"
            );
        }
    }
}
