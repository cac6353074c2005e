//! Packed slot parts as ingest's `SlotWriter` keeps them, simulated for the property test:
//! each write merges readings into the part holding them, new ones into the open (last)
//! part, sealing it first when it is full; each part it changes is one stream record with
//! the part's old and new images.

use std::collections::BTreeMap;

use aws_lambda_events::event::dynamodb::EventRecord;
use tidemark_schema::packed::{self, SlotReadings};
use tidemark_schema::{DeviceId, EntityKey, ReadingItem, SlotItem, Timestamp};

use super::{StreamSim, reading_at};

/// A slot's partition and start.
pub type SlotAt = (DeviceId, Option<u16>, Timestamp);

#[derive(Default)]
pub struct SlotSim {
    /// Readings a part holds before it is sealed (small, so tests split slots).
    pub cap: usize,
    parts: BTreeMap<SlotAt, Vec<SlotItem>>,
}

fn readings(i: &SlotItem) -> SlotReadings {
    i.decode().unwrap().readings
}

fn part(at: &SlotAt, number: u16, r: &SlotReadings, version: u64, sealed: bool) -> SlotItem {
    let (device, shard, start) = at;
    let k = EntityKey::Slot {
        device: device.clone(),
        partition: *shard,
        start: *start,
        part: number,
    }
    .key();
    SlotItem {
        pk: k.pk,
        sk: k.sk,
        packed: packed::encode(*start, r).unwrap(),
        reading_count: r.len() as u64,
        version,
        ttl: 4_000_000_000,
        sealed,
        full: false,
        metadata: Default::default(),
        arrived_at: None,
    }
}

impl SlotSim {
    pub fn new(cap: usize) -> Self {
        SlotSim {
            cap,
            parts: BTreeMap::new(),
        }
    }

    /// Part `i` of `at` becomes `r` (sealed or not): its record, if anything changed.
    fn put(
        &mut self,
        stream: &mut StreamSim,
        at: &SlotAt,
        i: usize,
        r: &SlotReadings,
        sealed: bool,
    ) -> Option<EventRecord> {
        let parts = self.parts.entry(at.clone()).or_default();
        if i == parts.len() {
            let number = parts.last().map_or(0, |p| part_no(p) + 1);
            let new = part(at, number, r, 1, sealed);
            let rec = stream.slot(None, Some(&new));
            parts.push(new);
            return Some(rec);
        }
        let old = parts[i].clone();
        if readings(&old) == *r && old.sealed == sealed {
            return None;
        }
        let new = part(at, part_no(&old), r, old.version + 1, sealed);
        parts[i] = new.clone();
        Some(stream.slot(Some(&old), Some(&new)))
    }

    /// One ingest write of `incoming` into the slot `at`: the records it makes.
    pub fn write(
        &mut self,
        stream: &mut StreamSim,
        at: &SlotAt,
        incoming: &SlotReadings,
    ) -> Vec<EventRecord> {
        let mut out = Vec::new();
        let parts = self.parts.get(at).cloned().unwrap_or_default();
        let mut fresh = SlotReadings::new();
        let mut routed: BTreeMap<usize, SlotReadings> = BTreeMap::new();
        for (t, m) in incoming {
            match parts.iter().position(|p| readings(p).contains_key(t)) {
                Some(i) => routed.entry(i).or_default().insert(*t, m.clone()),
                None => fresh.insert(*t, m.clone()),
            };
        }
        for (i, batch) in routed {
            if let Some(merged) = packed::merge(&readings(&parts[i]), &batch) {
                out.extend(self.put(stream, at, i, &merged, parts[i].sealed));
            }
        }
        if fresh.is_empty() {
            return out;
        }
        // New readings: into the open part if they fit, else the open part is sealed and
        // they start new parts, each sealed before the next exists.
        let parts = self.parts.get(at).cloned().unwrap_or_default();
        let open = parts.len().checked_sub(1).filter(|i| !parts[*i].sealed);
        if let Some(i) = open {
            let mut r = readings(&parts[i]);
            if r.len() + fresh.len() <= self.cap {
                r.extend(fresh);
                out.extend(self.put(stream, at, i, &r, false));
                return out;
            }
            out.extend(self.put(stream, at, i, &r, true));
        }
        let fresh: Vec<_> = fresh.into_iter().collect();
        let chunks: Vec<_> = fresh.chunks(self.cap).collect();
        for (k, chunk) in chunks.iter().enumerate() {
            let i = self.parts.get(at).map_or(0, Vec::len);
            let r: SlotReadings = chunk.iter().cloned().collect();
            out.extend(self.put(stream, at, i, &r, k + 1 < chunks.len()));
        }
        out
    }

    /// A user's delete of the reading at `t`: its part rewritten without it, or removed when
    /// it was the part's last reading.
    pub fn delete(
        &mut self,
        stream: &mut StreamSim,
        at: &SlotAt,
        t: Timestamp,
    ) -> Vec<EventRecord> {
        let parts = self.parts.get(at).cloned().unwrap_or_default();
        let Some(i) = parts.iter().position(|p| readings(p).contains_key(&t)) else {
            return Vec::new();
        };
        let mut r = readings(&parts[i]);
        r.remove(&t);
        if r.is_empty() {
            let old = self.parts.get_mut(at).unwrap().remove(i);
            return vec![stream.slot(Some(&old), None)];
        }
        self.put(stream, at, i, &r, parts[i].sealed)
            .into_iter()
            .collect()
    }

    /// Every part as it stands (the table's final state).
    pub fn items(&self) -> Vec<SlotItem> {
        self.parts.values().flatten().cloned().collect()
    }

    /// Every reading the parts hold, as single reading items (for the recomputation).
    pub fn final_readings(&self) -> Vec<ReadingItem> {
        let mut out = Vec::new();
        for ((device, shard, _), parts) in &self.parts {
            for p in parts {
                for (t, m) in readings(p) {
                    out.push(reading_at(device, t, m, *shard));
                }
            }
        }
        out
    }
}

fn part_no(p: &SlotItem) -> u16 {
    p.decode().unwrap().part
}
