//! Writing readings into a packed slot (docs/design.md §4) so that concurrent writers lose nothing.
//!
//! A slot is one or more part items (`SLOT#<start>#<part>`), each holding readings of the
//! device in one binary attribute ([`tidemark_schema::packed`]), so DynamoDB cannot merge into
//! them entry by entry as it does into a single reading's metrics map. Instead each write is
//! a read-merge-write under an optimistic lock:
//! 1. query the parts of the slot and of the slots on either side, strongly consistent;
//! 2. place each incoming value and metadata (below); if nothing changes (a replay, a
//!    resend) stop: nothing is written, unless the write brings a later arrival than any
//!    part of the slot and of the slot before holds (an exact resend from the device: a new
//!    record, arriving later), which is stamped on the smallest part holding its readings,
//!    its content as it was (so a resend is an arrival in every layout, as a single item's
//!    `arrivedAt` update makes it; a replay of records already written stamps nothing);
//! 3. put each changed part, in part order, on the condition that its `version` is still the
//!    one read (or, for a new part, that no item has its key), with `version` + 1.
//!
//! **Carried readings.** A write may bring readings of the slot after its own too (a batching
//! window opens when records come, so it almost always spans two slots): while that slot has
//! no part they go to this slot's parts, which *carry* them, so the window costs one write,
//! not two; once it has parts they go there. So a value may be in a part of its own slot or of
//! the slot before: a correction goes to every part holding it, in either, and metadata to the
//! slot's own parts (readers take the latest part's). The neighbours' parts are read strongly
//! consistent because a value in one of them missed by a stale read would be written again
//! here and no condition would fail; only two writers racing on one device (two stream shards)
//! can still leave a value in a part of each slot, and readers take the later part's
//! ([`tidemark_schema::join_parts`]).
//!
//! Two writers of one slot (two shards of the stream, a retry racing a late batch) both read
//! version *v*; one put succeeds, the other's condition fails, and it starts again from step 1
//! with the winner's readings in hand. So no write is ever based on readings it did not see,
//! and none is lost. A lost race is retried with the store's backoff until the deadline.
//!
//! **Size, bounded by construction.** Every part's worst case ([`Content::bound`]: its
//! readings' encoding whatever values corrections write, its metadata, the item's other
//! attributes) stays under [`MAX_PART_ITEM_BYTES`] (350 KB; DynamoDB refuses items over 400 KB, and
//! a refused write would stall the stream forever). Each value and each metadata change goes:
//! - a correction of a (timestamp, metric) a part holds: in place (it cannot raise the
//!   worst case);
//! - a new metric for a timestamp parts hold: to the lowest of them that is not *full*, if
//!   its worst case stays under the cap; otherwise that part is marked `full` and the new
//!   metrics go to the open part, as fresh entries at the same timestamps;
//! - new metadata for a timestamp: to the highest part carrying metadata for it (the one
//!   readers take), or with none to the part a new metric would go to, if it stays under the
//!   cap and that part is not full; otherwise to the open part (marking the part full), which
//!   holds the timestamp, without metrics if need be, to carry it. The stale copy stays where
//!   it was: readers take the highest part's, and the open part is after every other;
//! - a new timestamp: to the open part, the last one; a reading without metrics (a
//!   keep-alive) is a new timestamp with no metric, unless a part holds its time already.
//!
//! The open part is sealed (rewritten with `sealed`, which bumps its version) when what comes
//! would pass [`MAX_PART_BYTES`] of actual size or the cap in worst case, and the rest starts
//! a new part; it is also marked full when some of the rest is for a timestamp it holds. A
//! single timestamp too big for a part (more than ingest lets a reading carry) still goes
//! alone.
//!
//! So within a slot each (timestamp, metric) value is in exactly one part (a timestamp's
//! metrics may be spread over parts): a writer that would place a new value in part *p* conditions its put
//! on *p*'s version, and every decision to place it elsewhere is first written down in *p*
//! (`full`, `sealed`, conditioned likewise) and never undone. A writer that missed that mark
//! fails its condition on *p*; one that saw it places the value where the first writer did,
//! the open part, whose own version (or, for a new part, its absent key: a part is sealed
//! before the next one exists) serialises them. Writes of one batch to several parts are not
//! atomic: a crash between them leaves some values written and the batch is retried whole,
//! the written ones then being corrections of themselves (nothing).
//!
//! Bytes rewritten: every write of a part is billed by its whole size, so a write costs at
//! most the parts it changes, each at most [`MAX_PART_ITEM_BYTES`] (the open part at most
//! [`MAX_PART_BYTES`] plus what it adds; a sealed part can grow past it with added metrics).
//!
//! A reading's `metadata` (free-form JSON) is kept per part: a map from each distinct JSON
//! text to a bitmap of the part's readings carrying it, so a device's unchanging metadata is
//! stored once a part. As for single items, a later record's metadata replaces an earlier
//! one's, and a record without metadata keeps what is stored.
//!
//! A part that cannot be read (corrupt, or written by another tool) is left exactly as it is
//! and counted: it takes nothing (as if sealed and full), and the slot goes on in later
//! parts. Nothing it may hold is overwritten, and one bad item never stops ingest.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::keys;
use tidemark_schema::packed::SlotReadings;
use tidemark_schema::table::attr;
use tidemark_schema::{SlotItem, SlotLen, Timestamp, field, metadata_bitmaps};
use tokio::time::Instant;

mod content;

use content::encoded;
pub use content::{Content, read_part};

use crate::retry::RetryPolicy;
use crate::{Item, StoreError, to_item};

/// The encoded size at which the open part is sealed. Every write of a part is billed by its
/// whole size, so this bounds what adding new readings costs (64 WCU).
pub const MAX_PART_BYTES: usize = 64 * 1024;
const _: () = assert!(
    MAX_PART_BYTES < MAX_PART_ITEM_BYTES / 4,
    "well under the item cap"
);

/// The cap on every part's worst-case size (see the module docs).
pub use tidemark_schema::MAX_PART_ITEM_BYTES;

/// Where a slot lives, when it starts (its readings are encoded relative to the start) and
/// how long its slots are (a write may carry readings of the next slot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotKey {
    pub pk: String,
    pub start: Timestamp,
    pub len: SlotLen,
}

impl SlotKey {
    /// The slot after this one, in the same partition.
    fn next(&self) -> SlotKey {
        SlotKey {
            start: self.len.next(self.start),
            ..self.clone()
        }
    }
}

/// What a slot write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotWrite {
    /// False when the slot already held every reading as sent: nothing was written.
    pub written: bool,
    /// Races lost to another writer before this write went through.
    pub conflicts: u32,
    /// Readings (timestamps, with or without metrics) in the slot after the write.
    pub readings: usize,
    /// Part items the slot has after the write.
    pub parts: usize,
    /// Parts that could not be read: left as they were (see the module docs).
    pub unreadable_parts: usize,
}

/// Writes packed slots: the client, table and retry policy of one function. The client is
/// DynamoDB's, or the in-memory test engine ([`crate::memory::MemTable`]): a slot write needs
/// only the two operations of [`PartTable`].
#[derive(Debug, Clone)]
pub struct SlotWriter<C = Client> {
    pub client: C,
    pub table: String,
    pub retry: RetryPolicy,
    /// [`MAX_PART_BYTES`] except in tests of splitting.
    pub part_bytes: usize,
    /// [`MAX_PART_ITEM_BYTES`] except in tests of the cap.
    pub item_bytes: usize,
    /// When the records this write carries arrived: stamped on every part it writes
    /// ([`tidemark_schema::field::ARRIVED_AT`]), what a device's silence is judged on,
    /// unless the part holds a later one already (a stamp never goes back).
    pub arrived: Option<Timestamp>,
}

/// Where ingest writes packed slots: DynamoDB (through a [`SlotWriter`]), or a test's fake.
pub trait SlotStore: Send + Sync {
    fn write_slot(
        &self,
        table: &str,
        retry: RetryPolicy,
        key: &SlotKey,
        incoming: &Content,
        stamp: Stamp,
        deadline: Instant,
    ) -> impl std::future::Future<Output = Result<SlotWrite, StoreError>> + Send;
}

/// What a slot write stamps on the parts it writes besides their content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// Epoch seconds after which DynamoDB may delete the part.
    pub ttl: i64,
    /// When the records it carries arrived ([`tidemark_schema::field::ARRIVED_AT`]).
    pub arrived: Option<Timestamp>,
}

/// The two table operations a slot write makes: read the parts of a range of slots, strongly
/// consistent, and put one part on the condition of its version.
pub trait PartTable: Send + Sync {
    /// Every item of partition `pk` with a sort key in `[lo, hi]`, in key order, strongly
    /// consistent (all pages).
    fn slot_items(
        &self,
        table: &str,
        pk: &str,
        lo: &str,
        hi: &str,
    ) -> impl std::future::Future<Output = Result<Vec<Item>, StoreError>> + Send;
    /// Puts `item` if its `version` is still `expected` (`None`: if no item has its key).
    /// `Ok(false)`: the condition failed.
    fn put_part(
        &self,
        table: &str,
        item: Item,
        expected: Option<u64>,
    ) -> impl std::future::Future<Output = Result<bool, StoreError>> + Send;
}

impl PartTable for Client {
    async fn slot_items(
        &self,
        table: &str,
        pk: &str,
        lo: &str,
        hi: &str,
    ) -> Result<Vec<Item>, StoreError> {
        let mut pages = self
            .query()
            .table_name(table)
            .consistent_read(true)
            .key_condition_expression("#pk = :pk AND #sk BETWEEN :lo AND :hi")
            .expression_attribute_names("#pk", attr::PK)
            .expression_attribute_names("#sk", attr::SK)
            .expression_attribute_values(":pk", AttributeValue::S(pk.to_owned()))
            .expression_attribute_values(":lo", AttributeValue::S(lo.to_owned()))
            .expression_attribute_values(":hi", AttributeValue::S(hi.to_owned()))
            .into_paginator()
            .items()
            .send();
        let mut out = Vec::new();
        while let Some(item) = pages.next().await {
            out.push(item.map_err(StoreError::sdk("Query"))?);
        }
        Ok(out)
    }

    async fn put_part(
        &self,
        table: &str,
        item: Item,
        expected: Option<u64>,
    ) -> Result<bool, StoreError> {
        let req = self.put_item().table_name(table).set_item(Some(item));
        let req = match expected {
            None => req
                .condition_expression("attribute_not_exists(#pk)")
                .expression_attribute_names("#pk", attr::PK),
            Some(v) => req
                .condition_expression("#v = :v")
                .expression_attribute_names("#v", field::VERSION)
                .expression_attribute_values(":v", AttributeValue::N(v.to_string())),
        };
        match req.send().await.map_err(StoreError::sdk("PutItem")) {
            Ok(_) => Ok(true),
            Err(e) if e.is_conditional_check_failed() => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl SlotStore for Client {
    async fn write_slot(
        &self,
        table: &str,
        retry: RetryPolicy,
        key: &SlotKey,
        incoming: &Content,
        stamp: Stamp,
        deadline: Instant,
    ) -> Result<SlotWrite, StoreError> {
        SlotWriter::new(self.clone(), table, retry)
            .arrived(stamp.arrived)
            .write_content(key, incoming, stamp.ttl, deadline)
            .await
    }
}

/// The parts of a slot and of the slots on either side, as one strongly consistent query
/// read them (each in part order).
#[derive(Debug, Default)]
struct Around {
    prev: Vec<Part>,
    own: Vec<Part>,
    next: Vec<Part>,
}

/// One part as stored; `content` is `None` for an unreadable part.
#[derive(Debug, Clone)]
struct Part {
    number: u16,
    content: Option<Content>,
    version: u64,
    sealed: bool,
    full: bool,
    /// The arrival stamped on it ([`tidemark_schema::field::ARRIVED_AT`]), if any.
    arrived: Option<Timestamp>,
}

/// One conditional put of a step 3.
#[derive(Debug)]
struct Put {
    /// The slot of the part: the one written, or the one before for a correction there.
    start: Timestamp,
    number: u16,
    content: Content,
    /// `None`: a new part.
    expected: Option<u64>,
    sealed: bool,
    full: bool,
    /// The arrival the part has now (`None` for a new part): a put never lowers it, or a
    /// write of records that arrived earlier (another stream shard, a slot of another
    /// length starting at the same instant) would make a replay of the later ones write
    /// again and a device's last arrival go back.
    arrived: Option<Timestamp>,
}

/// What one write brings to one stored part: corrections of the values it holds, and
/// additions (new metrics for its timestamps, new metadata) it takes only if they fit.
#[derive(Debug, Default)]
struct ForPart {
    corrections: Content,
    additions: Content,
}

/// A part of the slot starting at `start` in partition `pk`: `None` when its sort key is not
/// one of ours (a foreign item under the slot's prefix, which no write of ours can collide
/// with).
fn parse_part(pk: &str, start: Timestamp, item: &Item) -> Option<Part> {
    let sk = item.get(attr::SK).and_then(|v| v.as_s().ok())?;
    let number = sk
        .strip_prefix(&keys::slot_sk_prefix(start))
        .and_then(|n| n.parse::<u16>().ok())?;
    let arrived = item
        .get(field::ARRIVED_AT)
        .and_then(|v| v.as_n().ok())
        .and_then(|ms| ms.parse::<i64>().ok())
        .and_then(|ms| Timestamp::from_epoch_millis(ms).ok());
    Some(match read_part(item) {
        Ok(p) => Part {
            number,
            version: p.version,
            sealed: p.sealed,
            full: p.full,
            content: Some(p.into()),
            arrived,
        },
        Err(message) => {
            tracing::warn!(%pk, sk = %sk, error = %message, "unreadable slot part left as it is");
            Part {
                number,
                content: None,
                version: 0,
                sealed: true,
                full: true,
                arrived,
            }
        }
    })
}

impl<C: PartTable> SlotWriter<C> {
    pub fn new(client: C, table: impl Into<String>, retry: RetryPolicy) -> Self {
        SlotWriter {
            client,
            table: table.into(),
            retry,
            part_bytes: MAX_PART_BYTES,
            item_bytes: MAX_PART_ITEM_BYTES,
            arrived: None,
        }
    }

    /// This writer, stamping `arrived` on the parts it writes.
    pub fn arrived(mut self, arrived: Option<Timestamp>) -> Self {
        self.arrived = arrived;
        self
    }

    /// Step 1: the parts of the slot and of its neighbours, strongly consistent (a value in
    /// a neighbour's part missed by a stale read would be written twice, and no condition
    /// would fail).
    async fn read(&self, key: &SlotKey) -> Result<Around, StoreError> {
        let (prev, next) = (key.len.first_holder(key.start), key.len.next(key.start));
        let (lo, hi) = keys::slot_sk_between(prev, next);
        let items = self
            .client
            .slot_items(&self.table, &key.pk, &lo, &hi)
            .await?;
        let mut around = Around::default();
        for item in items {
            let Some(start) = item
                .get(attr::SK)
                .and_then(|v| v.as_s().ok())
                .and_then(|sk| keys::slot_start_of_sk(sk))
            else {
                continue;
            };
            let group = match start {
                s if s == prev => &mut around.prev,
                s if s == key.start => &mut around.own,
                s if s == next => &mut around.next,
                _ => continue,
            };
            group.extend(parse_part(&key.pk, start, &item));
        }
        for g in [&mut around.prev, &mut around.own, &mut around.next] {
            g.sort_by_key(|p| p.number);
        }
        Ok(around)
    }

    /// What `incoming` does to the parts of the slot before, which may hold some of its
    /// readings (carried): corrections of the values they hold, in place; and what is left
    /// for the slot's own parts. Metadata goes to the slot's own parts (readers take the
    /// latest part's), unless the latest part carrying some for its timestamp is one of those
    /// and holds the same already.
    fn carried(
        key: &SlotKey,
        prev: &[Part],
        own: &[Part],
        incoming: &Content,
    ) -> (Vec<Put>, Content) {
        let start = key.len.first_holder(key.start);
        let readable: Vec<(&Part, &Content)> = prev
            .iter()
            .filter_map(|p| p.content.as_ref().map(|c| (p, c)))
            .collect();
        let mut rest = incoming.clone();
        let mut to: BTreeMap<u16, Content> = BTreeMap::new();
        for (at, metrics) in &incoming.readings {
            for (name, v) in metrics {
                let held = readable
                    .iter()
                    .filter(|(_, c)| c.readings.get(at).is_some_and(|m| m.contains_key(name)));
                let mut any = false;
                for (p, _) in held {
                    any = true;
                    let c = to.entry(p.number).or_default();
                    c.readings.entry(*at).or_default().insert(name.clone(), *v);
                }
                // Held here and not in the slot's own parts: not new there. (Held in both,
                // after a race: the plan corrects the own copy too.)
                let own_holds = own
                    .iter()
                    .filter_map(|p| p.content.as_ref())
                    .any(|c| c.readings.get(at).is_some_and(|m| m.contains_key(name)));
                if any
                    && !own_holds
                    && let Some(row) = rest.readings.get_mut(at)
                {
                    row.remove(name);
                }
            }
        }
        for (at, json) in &incoming.metadata {
            let own_carrier = own
                .iter()
                .filter_map(|p| p.content.as_ref())
                .any(|c| c.metadata.contains_key(at));
            let latest = readable.iter().rev().find_map(|(_, c)| c.metadata.get(at));
            if !own_carrier && latest == Some(json) {
                rest.metadata.remove(at);
            }
        }
        // A reading left without metrics stays only if it has metadata to carry or is a
        // reading without metrics (a keep-alive) that no part of the slot before holds.
        let held_before =
            |at: &Timestamp| readable.iter().any(|(_, c)| c.readings.contains_key(at));
        rest.readings
            .retain(|at, m| !m.is_empty() || rest.metadata.contains_key(at) || !held_before(at));
        let mut puts = Vec::new();
        for (part, stored) in readable {
            let Some(corrections) = to.remove(&part.number) else {
                continue;
            };
            let mut changed = false;
            let content = merge_into(stored, &corrections, &mut changed);
            if changed {
                puts.push(Put {
                    start,
                    number: part.number,
                    content,
                    expected: Some(part.version),
                    sealed: part.sealed,
                    full: part.full,
                    arrived: part.arrived,
                });
            }
        }
        (puts, rest)
    }

    /// For a write that changes no value (an exact resend): the put that stamps its arrival
    /// on one part holding its readings, the smallest (of the slot or of the slot before,
    /// which carries some), its content as it is, on its version. `None` when the writer has
    /// no arrival, or a part of the slot or of the slot before already has one as late (a
    /// replay of records already written: nothing is written).
    fn arrival_put(
        &self,
        key: &SlotKey,
        prev: &[Part],
        own: &[Part],
        incoming: &Content,
    ) -> Result<Option<Put>, StoreError> {
        let Some(arrived) = self.arrived else {
            return Ok(None);
        };
        let before = key.len.first_holder(key.start);
        let parts = || {
            prev.iter()
                .map(move |p| (before, p))
                .chain(own.iter().map(|p| (key.start, p)))
        };
        if parts().any(|(_, p)| p.arrived.is_some_and(|a| a >= arrived)) {
            return Ok(None);
        }
        let mut smallest: Option<(usize, Timestamp, &Part, &Content)> = None;
        for (start, p) in parts() {
            let Some(c) = &p.content else { continue };
            if !incoming.times().any(|at| c.readings.contains_key(at)) {
                continue;
            }
            let size = c.size(start)?;
            if smallest.as_ref().is_none_or(|(s, ..)| size < *s) {
                smallest = Some((size, start, p, c));
            }
        }
        Ok(smallest.map(|(_, start, p, c)| Put {
            start,
            number: p.number,
            content: c.clone(),
            expected: Some(p.version),
            sealed: p.sealed,
            full: p.full,
            arrived: p.arrived,
        }))
    }

    /// Whether `content` may be a part's: its worst case under the cap and, for the open
    /// part, its actual size under the part size.
    fn fits(&self, key: &SlotKey, content: &Content, open: bool) -> Result<bool, StoreError> {
        Ok(content.bound(key.start)? <= self.item_bytes
            && (!open || content.size(key.start)? <= self.part_bytes))
    }

    /// Step 2: the puts that merge `incoming` into `parts` (empty: nothing changes). See the
    /// module docs for where each value and each metadata change goes.
    fn plan(
        &self,
        key: &SlotKey,
        parts: &[Part],
        incoming: &Content,
    ) -> Result<Vec<Put>, StoreError> {
        let open = parts.last().filter(|p| !p.sealed).map(|p| p.number);
        let readable: Vec<(&Part, &Content)> = parts
            .iter()
            .filter_map(|p| p.content.as_ref().map(|c| (p, c)))
            .collect();
        let mut to: BTreeMap<u16, ForPart> = BTreeMap::new();
        // What goes to the open part as new (or to new parts when it is full).
        let mut fresh = Content::default();
        // The part a new metric or metadata of `at` is offered to: the lowest non-full one
        // holding `at`.
        let candidate = |at: &Timestamp| {
            readable
                .iter()
                .find(|(p, c)| !p.full && c.readings.contains_key(at))
                .map(|(p, _)| p.number)
        };
        for (at, metrics) in &incoming.readings {
            // A reading without metrics (a keep-alive) is a new timestamp unless a part holds
            // its time already, with metrics or without.
            if metrics.is_empty() && !readable.iter().any(|(_, c)| c.readings.contains_key(at)) {
                fresh.readings.entry(*at).or_default();
            }
            for (name, v) in metrics {
                let holders: Vec<u16> = readable
                    .iter()
                    .filter(|(_, c)| c.readings.get(at).is_some_and(|m| m.contains_key(name)))
                    .map(|(p, _)| p.number)
                    .collect();
                // A correction stays where the value is (in every part holding it, should a
                // value ever be in two).
                for n in &holders {
                    let c = &mut to.entry(*n).or_default().corrections;
                    c.readings.entry(*at).or_default().insert(name.clone(), *v);
                }
                if !holders.is_empty() {
                    continue;
                }
                let into = match candidate(at) {
                    Some(n) => &mut to.entry(n).or_default().additions,
                    None => &mut fresh,
                };
                into.readings
                    .entry(*at)
                    .or_default()
                    .insert(name.clone(), *v);
            }
        }
        for (at, json) in &incoming.metadata {
            // Readers take a timestamp's metadata from the highest part carrying it.
            let carrier = readable
                .iter()
                .rev()
                .find(|(_, c)| c.metadata.contains_key(at));
            let into = match carrier {
                Some((_, c)) if c.metadata[at] == *json => continue,
                Some((p, _)) if !p.full => &mut to.entry(p.number).or_default().additions,
                Some(_) => &mut fresh,
                None => match candidate(at) {
                    Some(n) => &mut to.entry(n).or_default().additions,
                    None => &mut fresh,
                },
            };
            into.metadata.insert(*at, json.clone());
        }
        let mut puts = Vec::new();
        // Parts before the open one: corrections always, additions only within the cap. A
        // part that refuses additions is marked full first (so that no writer adds to it
        // after this one sent them elsewhere), and they go to the open part.
        for (part, stored) in &readable {
            if Some(part.number) == open {
                continue;
            }
            let Some(f) = to.remove(&part.number) else {
                continue;
            };
            let (mut changed, mut full) = (false, part.full);
            let corrected = merge_into(stored, &f.corrections, &mut changed);
            let mut added = changed;
            let mut content = merge_into(&corrected, &f.additions, &mut added);
            if !f.additions.is_empty() && !self.fits(key, &content, false)? {
                full = true;
                content = corrected;
                fresh = fresh.with(&f.additions);
            } else {
                changed = added;
            }
            if changed || full != part.full {
                puts.push(Put {
                    start: key.start,
                    number: part.number,
                    content,
                    expected: Some(part.version),
                    sealed: part.sealed,
                    full,
                    arrived: part.arrived,
                });
            }
        }
        let open_part = readable.iter().find(|(p, _)| Some(p.number) == open);
        if let Some((part, stored)) = open_part {
            let f = to.remove(&part.number).unwrap_or_default();
            let mut changed = false;
            let corrected = merge_into(stored, &f.corrections, &mut changed);
            let mut added = changed;
            let mut base = merge_into(&corrected, &f.additions, &mut added);
            let mut full = false;
            if !f.additions.is_empty() && !self.fits(key, &base, true)? {
                full = true;
                base = corrected;
                fresh = fresh.with(&f.additions);
            } else {
                changed = added;
            }
            let mut grown = changed;
            let with_fresh = merge_into(&base, &fresh, &mut grown);
            if !full && (fresh.is_empty() || self.fits(key, &with_fresh, true)?) {
                if grown {
                    puts.push(Put {
                        start: key.start,
                        number: part.number,
                        content: with_fresh,
                        expected: Some(part.version),
                        sealed: false,
                        full: false,
                        arrived: part.arrived,
                    });
                }
                return Ok(puts);
            }
            // Too big with the rest: sealed with only its own changes; full too when
            // something for a timestamp it holds goes elsewhere. The rest starts a new part.
            let full = full || fresh.times().any(|at| stored.readings.contains_key(at));
            puts.push(Put {
                start: key.start,
                number: part.number,
                content: base,
                expected: Some(part.version),
                sealed: true,
                full,
                arrived: part.arrived,
            });
        }
        if fresh.is_empty() {
            return Ok(puts);
        }
        let mut number = parts.last().map_or(Some(0), |p| p.number.checked_add(1));
        let chunks = self.chunks(key, Content::default().with(&fresh))?;
        let last = chunks.len() - 1;
        for (i, content) in chunks.into_iter().enumerate() {
            let n = number.ok_or_else(|| StoreError::Request {
                operation: "PutItem",
                message: format!("slot {}/{} has too many parts", key.pk, key.start),
            })?;
            // Created in order, each sealed before the next exists (see the module docs).
            puts.push(Put {
                start: key.start,
                number: n,
                content,
                expected: None,
                sealed: i < last,
                full: false,
                arrived: None,
            });
            number = n.checked_add(1);
        }
        Ok(puts)
    }

    /// New readings cut into runs that each fit in a part (a single timestamp always goes
    /// alone: it cannot be cut).
    fn chunks(&self, key: &SlotKey, content: Content) -> Result<Vec<Content>, StoreError> {
        if content.readings.len() <= 1 || self.fits(key, &content, true)? {
            return Ok(vec![content]);
        }
        let middle = *content
            .readings
            .keys()
            .nth(content.readings.len() / 2)
            .expect("more than one reading");
        let mut out = self.chunks(key, content.only(|at| *at < middle))?;
        out.extend(self.chunks(key, content.only(|at| *at >= middle))?);
        Ok(out)
    }

    fn item(&self, key: &SlotKey, put: &Put, ttl: i64) -> Result<Item, StoreError> {
        let c = &put.content;
        to_item(&SlotItem {
            pk: key.pk.clone(),
            sk: keys::slot_sk(put.start, put.number),
            packed: encoded(put.start, &c.readings)?,
            reading_count: c.readings.len() as u64,
            version: put.expected.map_or(1, |v| v + 1),
            ttl,
            sealed: put.sealed,
            full: put.full,
            metadata: metadata_bitmaps(&c.readings, &c.metadata),
            arrived_at: self.arrived.max(put.arrived),
        })
    }

    /// Step 3 for one part. `Ok(false)`: another writer changed it first.
    async fn put(&self, key: &SlotKey, put: &Put, ttl: i64) -> Result<bool, StoreError> {
        let item = self.item(key, put, ttl)?;
        self.client.put_part(&self.table, item, put.expected).await
    }

    /// Merges `incoming` readings into the slot `key` (see the module docs).
    pub async fn write(
        &self,
        key: &SlotKey,
        incoming: &SlotReadings,
        ttl: i64,
        deadline: Instant,
    ) -> Result<SlotWrite, StoreError> {
        let content = Content {
            readings: incoming.clone(),
            metadata: Default::default(),
        };
        self.write_content(key, &content, ttl, deadline).await
    }

    /// Merges `incoming` readings and metadata into the slot `key` (see the module docs).
    pub async fn write_content(
        &self,
        key: &SlotKey,
        incoming: &Content,
        ttl: i64,
        deadline: Instant,
    ) -> Result<SlotWrite, StoreError> {
        let next = key.len.next(key.start);
        if let Some(at) = incoming
            .times()
            .find(|at| **at < key.start || **at > key.len.last_of(next))
        {
            return Err(StoreError::Request {
                operation: "PutItem",
                message: format!(
                    "a reading at {at} is outside the slot {}/{} and the next",
                    key.pk, key.start
                ),
            });
        }
        let around = self.read(key).await?;
        if around.next.is_empty() || incoming.times().all(|at| *at < next) {
            return self
                .write_within(key, incoming, ttl, deadline, Some(around), true)
                .await;
        }
        // The next slot has parts already (a replay, late readings): its readings go there,
        // where later writes look for them first.
        let later = self
            .write_within(
                &key.next(),
                &incoming.only(|at| *at >= next),
                ttl,
                deadline,
                None,
                true,
            )
            .await?;
        let mine = incoming.only(|at| *at < next);
        let own = self
            .write_within(key, &mine, ttl, deadline, None, !later.written)
            .await?;
        Ok(SlotWrite {
            written: own.written || later.written,
            conflicts: own.conflicts + later.conflicts,
            unreadable_parts: own.unreadable_parts + later.unreadable_parts,
            ..own
        })
    }

    /// Steps 1 to 3 for readings of the slot `key` (and of the next, carried in its parts),
    /// until they land or the deadline passes; `first` is a read already made. With `stamp`,
    /// an exact resend stamps its arrival ([`Self::arrival_put`]).
    async fn write_within(
        &self,
        key: &SlotKey,
        incoming: &Content,
        ttl: i64,
        deadline: Instant,
        mut first: Option<Around>,
        stamp: bool,
    ) -> Result<SlotWrite, StoreError> {
        let mut conflicts = 0u32;
        let mut written = false;
        loop {
            let around = match first.take() {
                Some(a) => a,
                None => self.read(key).await?,
            };
            let (mut puts, rest) = Self::carried(key, &around.prev, &around.own, incoming);
            let parts = around.own;
            puts.extend(self.plan(key, &parts, &rest)?);
            if puts.is_empty() && stamp {
                puts.extend(self.arrival_put(key, &around.prev, &parts, incoming)?);
            }
            let mut lost = false;
            for put in &puts {
                if self.put(key, put, ttl).await? {
                    written = true;
                } else {
                    lost = true;
                    break;
                }
            }
            if !lost {
                let own = puts.iter().filter(|p| p.start == key.start);
                let (readings, count) = counts(&parts, own);
                return Ok(SlotWrite {
                    written,
                    conflicts,
                    readings,
                    parts: count,
                    unreadable_parts: parts.iter().filter(|p| p.content.is_none()).count(),
                });
            }
            conflicts += 1;
            let wait = self.retry.delay(conflicts);
            if Instant::now() + wait >= deadline {
                return Err(StoreError::Request {
                    operation: "PutItem",
                    message: format!(
                        "slot {}/{} still contended after {conflicts} tries",
                        key.pk, key.start
                    ),
                });
            }
            tokio::time::sleep(wait).await;
        }
    }
}

/// `base` with `incoming` merged in; `changed` set when that changes anything.
fn merge_into(base: &Content, incoming: &Content, changed: &mut bool) -> Content {
    match base.merged(incoming) {
        Some(c) => {
            *changed = true;
            c
        }
        None => base.clone(),
    }
}

/// (timestamps with a value in readable parts, parts) of the slot once `puts` landed on
/// `parts`.
fn counts<'a>(parts: &[Part], puts: impl IntoIterator<Item = &'a Put>) -> (usize, usize) {
    let mut contents: BTreeMap<u16, Option<&Content>> = parts
        .iter()
        .map(|p| (p.number, p.content.as_ref()))
        .collect();
    for p in puts {
        contents.insert(p.number, Some(&p.content));
    }
    let times: std::collections::BTreeSet<&Timestamp> = contents
        .values()
        .flatten()
        .flat_map(|c| c.readings.keys())
        .collect();
    (times.len(), contents.len())
}

#[cfg(test)]
mod tests {
    use tidemark_schema::{ITEM_OVERHEAD_BYTES, MetricName, SlotMetadata};

    use super::*;

    fn start() -> Timestamp {
        Timestamp::parse_rfc3339("2026-04-20T14:00:00Z").unwrap()
    }

    fn key() -> SlotKey {
        SlotKey {
            pk: "DEVICE#d".into(),
            start: start(),
            len: SlotLen::new(3600).unwrap(),
        }
    }

    fn at(s: i64) -> Timestamp {
        start().plus_micros(s * 1_000_000).unwrap()
    }

    fn m(s: &str) -> MetricName {
        MetricName::new(s).unwrap()
    }

    /// A writer (whose client never sends anything here) with the cap `cap`.
    fn writer(cap: usize) -> SlotWriter {
        let conf = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .build();
        SlotWriter {
            item_bytes: cap,
            ..SlotWriter::new(Client::from_conf(conf), "t", RetryPolicy::default())
        }
    }

    /// A reading a second over `secs`, each with `metrics` (value 1.0 each).
    fn content(secs: std::ops::Range<i64>, metrics: &[&str]) -> Content {
        Content {
            readings: secs
                .map(|s| (at(s), metrics.iter().map(|n| (m(n), 1.0)).collect()))
                .collect(),
            metadata: SlotMetadata::new(),
        }
    }

    fn part(number: u16, content: Content, sealed: bool) -> Part {
        Part {
            number,
            content: Some(content),
            version: 3,
            sealed,
            full: false,
            arrived: None,
        }
    }

    fn bound(c: &Content) -> usize {
        c.bound(start()).unwrap()
    }

    /// Part 0 sealed with `a` at 0..10 s, part 1 open with `a` at 10..20 s; the cap fits two
    /// metrics over ten timestamps, not three.
    fn slot() -> (Vec<Part>, usize) {
        let two = bound(&content(0..10, &["a", "b"]));
        let cap = (two + bound(&content(0..10, &["a", "b", "c"]))) / 2;
        let parts = vec![
            part(0, content(0..10, &["a"]), true),
            part(1, content(10..20, &["a"]), false),
        ];
        (parts, cap)
    }

    #[test]
    fn a_new_metric_for_a_sealed_reading_stays_in_its_part_while_the_worst_case_fits() {
        let (parts, cap) = slot();
        let puts = writer(cap)
            .plan(&key(), &parts, &content(0..10, &["b"]))
            .unwrap();
        assert_eq!(puts.len(), 1);
        let p = &puts[0];
        assert_eq!(
            (p.number, p.sealed, p.full, p.expected),
            (0, true, false, Some(3))
        );
        assert_eq!(p.content, content(0..10, &["a", "b"]));
        assert!(bound(&p.content) <= cap);
    }

    #[test]
    fn a_new_metric_past_the_cap_marks_the_part_full_and_goes_to_the_open_part() {
        let (mut parts, cap) = slot();
        parts[0].content = Some(content(0..10, &["a", "b"]));
        let incoming = content(0..10, &["c"]);
        let puts = writer(cap).plan(&key(), &parts, &incoming).unwrap();
        // Part 0 is rewritten as it was, but full, before part 1 takes the new metric.
        assert_eq!(puts.len(), 2);
        assert_eq!(
            (puts[0].number, puts[0].sealed, puts[0].full),
            (0, true, true)
        );
        assert_eq!(puts[0].content, content(0..10, &["a", "b"]));
        assert_eq!(
            (puts[1].number, puts[1].sealed, puts[1].full),
            (1, false, false)
        );
        let mut want = content(10..20, &["a"]);
        want.readings.extend(incoming.readings.clone());
        assert_eq!(puts[1].content, want);
        // A full part takes corrections in place and nothing new: a later metric goes to the
        // open part directly, and part 0 is not written.
        parts[0].full = true;
        let mut fix = content(0..10, &["d"]);
        fix.readings.get_mut(&at(3)).unwrap().insert(m("a"), -1.0);
        let puts = writer(cap).plan(&key(), &parts, &fix).unwrap();
        assert_eq!(puts.len(), 2);
        assert_eq!((puts[0].number, puts[0].full), (0, true));
        assert_eq!(puts[0].content.readings[&at(3)][&m("a")], -1.0);
        assert!(!puts[0].content.readings[&at(3)].contains_key(&m("d")));
        assert!(puts[1].content.readings[&at(3)].contains_key(&m("d")));
    }

    #[test]
    fn the_open_part_is_sealed_when_its_worst_case_would_pass_the_cap() {
        let (parts, cap) = slot();
        // Two metrics for its timestamps fit; new timestamps on top do not.
        let mut incoming = content(10..20, &["b"]);
        incoming.readings.extend(content(20..30, &["a"]).readings);
        let puts = writer(cap).plan(&key(), &parts, &incoming).unwrap();
        assert_eq!(puts.len(), 2);
        assert_eq!(
            (puts[0].number, puts[0].sealed, puts[0].full),
            (1, true, false)
        );
        assert_eq!(puts[0].content, content(10..20, &["a", "b"]));
        assert_eq!(
            (puts[1].number, puts[1].expected, puts[1].sealed),
            (2, None, false)
        );
        assert_eq!(puts[1].content, content(20..30, &["a"]));
        assert!(puts.iter().all(|p| bound(&p.content) <= cap));
    }

    #[test]
    fn metadata_past_the_cap_goes_to_the_open_part_carried_by_a_timestamp_without_metrics() {
        let (mut parts, _) = slot();
        let old = r#"{"fw":"1"}"#.to_owned();
        parts[1].content = Some(content(10..12, &["a"]));
        let c = parts[0].content.as_mut().unwrap();
        c.metadata = (0..10).map(|s| (at(s), old.clone())).collect();
        let cap = bound(c) + 40;
        // WHEN reading 4 gets metadata too long for part 0
        let new = format!(r#"{{"note":"{}"}}"#, "x".repeat(40));
        let incoming = Content {
            readings: SlotReadings::new(),
            metadata: SlotMetadata::from([(at(4), new.clone())]),
        };
        let puts = writer(cap).plan(&key(), &parts, &incoming).unwrap();
        // THEN part 0 is marked full (its metadata as it was) and part 1 carries the new
        // metadata on a timestamp without metrics, which readers take (highest part wins)
        assert_eq!(puts.len(), 2);
        assert!(puts[0].full);
        assert_eq!(puts[0].content.metadata[&at(4)], old);
        assert_eq!(puts[1].number, 1);
        assert_eq!(puts[1].content.metadata[&at(4)], new);
        assert!(puts[1].content.readings[&at(4)].is_empty());
        // AND short metadata that fits stays where the timestamp's metadata is
        let short = Content {
            readings: SlotReadings::new(),
            metadata: SlotMetadata::from([(at(5), r#"{"fw":"2"}"#.to_owned())]),
        };
        let puts = writer(cap).plan(&key(), &parts, &short).unwrap();
        assert_eq!((puts.len(), puts[0].number, puts[0].full), (1, 0, false));
        assert_eq!(puts[0].content.metadata[&at(5)], r#"{"fw":"2"}"#);
        assert!(ITEM_OVERHEAD_BYTES < cap);
    }

    /// Readings without metrics (keep-alives) at `secs`.
    fn alive(secs: &[i64]) -> Content {
        Content {
            readings: secs.iter().map(|s| (at(*s), BTreeMap::new())).collect(),
            metadata: SlotMetadata::new(),
        }
    }

    #[test]
    fn a_reading_without_metrics_is_a_new_timestamp_of_the_open_part_and_a_resend_writes_nothing() {
        let (parts, cap) = slot();
        // WHEN keep-alives come for a new time and for times parts hold with metrics
        let puts = writer(cap)
            .plan(&key(), &parts, &alive(&[3, 15, 30]))
            .unwrap();
        // THEN only the new time is written, to the open part, with no metrics
        assert_eq!(puts.len(), 1, "{puts:?}");
        assert_eq!((puts[0].number, puts[0].sealed), (1, false));
        let mut want = content(10..20, &["a"]);
        want.readings.insert(at(30), BTreeMap::new());
        assert_eq!(puts[0].content, want);
        assert_eq!(counts(&parts, &puts), (21, 2));
        // AND sent again, it writes nothing
        let mut stored = parts.clone();
        stored[1].content = Some(want);
        let puts = writer(cap)
            .plan(&key(), &stored, &alive(&[3, 15, 30]))
            .unwrap();
        assert!(puts.is_empty(), "{puts:?}");
        // AND metrics later sent for its time join it in its part
        let puts = writer(cap)
            .plan(&key(), &stored, &content(30..31, &["b"]))
            .unwrap();
        assert_eq!((puts.len(), puts[0].number), (1, 1));
        assert_eq!(puts[0].content.readings[&at(30)].len(), 1);
    }

    #[test]
    fn a_reading_without_metrics_carried_by_the_slot_before_is_not_written_again() {
        // GIVEN the 14:00 slot of an hour-long... a 60 s slot at 14:01 whose readings the
        // 14:00 slot's part carries, a keep-alive among them
        let len = SlotLen::new(60).unwrap();
        let k = SlotKey {
            pk: "DEVICE#d".into(),
            start: at(60),
            len,
        };
        let mut carrier = content(0..2, &["a"]);
        carrier.readings.insert(at(70), BTreeMap::new());
        let prev = vec![part(0, carrier, false)];
        // WHEN the keep-alive is sent again, with a new one
        let (puts, rest) = SlotWriter::<Client>::carried(&k, &prev, &[], &alive(&[70, 80]));
        // THEN only the new one is left for the slot's own parts
        assert!(puts.is_empty());
        assert_eq!(rest, alive(&[80]));
    }

    #[test]
    fn a_replay_of_values_already_spread_over_parts_writes_nothing() {
        let (mut parts, cap) = slot();
        parts[0].full = true;
        let mut open = content(10..20, &["a"]);
        open.readings.extend(content(0..10, &["c"]).readings);
        parts[1].content = Some(open);
        let puts = writer(cap)
            .plan(&key(), &parts, &content(0..10, &["a", "c"]))
            .unwrap();
        assert!(puts.is_empty(), "{puts:?}");
        assert_eq!(counts(&parts, &puts), (20, 2));
    }
}
