//! Readings of devices whose layout packs them (docs/design.md §4): grouped by slot item, then merged
//! into it by [`tidemark_store::slots`] (read, merge, write under a version check).
//!
//! A slot is written once per batch that has readings for it, whatever their number: that
//! is why a longer batching window costs less per reading. Inside a batch, records of one
//! reading merge as for single items (every metric kept, the later record winning a metric
//! both carry) before the slot is written.

use std::collections::BTreeMap;

use futures::StreamExt;
use tidemark_schema::{Reading, SlotLen, Timestamp, keys};
use tidemark_store::retry::RetryPolicy;
use tidemark_store::slots::{Content, SlotKey, SlotStore, Stamp};
use tokio::time::Instant;

/// The readings of one batch bound for packed slots.
#[derive(Debug, Default)]
pub struct SlotBatch {
    slots: BTreeMap<(String, Timestamp), Pending>,
    readings: u64,
}

#[derive(Debug)]
struct Pending {
    content: Content,
    ttl: i64,
    /// The earliest record with a reading in this slot: reported if the write fails.
    first_tag: usize,
    /// The latest arrival among its records (stamped on the parts written).
    arrived: Timestamp,
}

/// What writing a batch's slots did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SlotReport {
    /// Readings routed to slots (after merging same-timestamp records).
    pub readings: u64,
    /// Slot writes that changed the table.
    pub written: u64,
    /// Slots that already held every reading as sent (a replay): nothing written.
    pub unchanged: u64,
    /// Races lost to another writer of the same slot, each retried.
    pub conflicts: u64,
    /// Slot parts found unreadable: left as they were, the slot going on past them.
    pub unreadable_parts: u64,
    /// The earliest record of each slot that could not be written.
    pub failed_tags: Vec<usize>,
    pub last_error: Option<String>,
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
        let pending = self.slots.entry((pk, start)).or_insert_with(|| Pending {
            content: Content::default(),
            // The slot lives as long as its last possible reading; reads drop expired ones.
            ttl: len.last_of(start).ttl_after_days(retention_days),
            first_tag: tag,
            arrived,
        });
        pending.first_tag = pending.first_tag.min(tag);
        pending.arrived = pending.arrived.max(arrived);
        let row = pending
            .content
            .readings
            .entry(reading.timestamp)
            .or_default();
        if row.is_empty() {
            self.readings += 1;
        }
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
        let writes = self.slots.into_iter().map(|((pk, start), p)| async move {
            let key = SlotKey { pk, start };
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
            (key, p.first_tag, out)
        });
        let mut results = futures::stream::iter(writes).buffer_unordered(max_in_flight.max(1));
        while let Some((key, tag, out)) = results.next().await {
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
                }
            }
        }
        report
    }
}
