//! Paging over several partitions at once, in one global sort-key order.
//!
//! Used wherever one logical list lives in several partitions: a hot device's reading partitions,
//! the day's quarantine partitions, alerts over every severity, devices over every status key.
//! It is a lazy k-way merge: each partition is queried (in parallel) only when its buffer runs
//! dry, and an item is emitted only when every partition that may still hold something has a
//! buffered head to compare with, so the output is in order whatever page sizes DynamoDB
//! returns (1 MB caps, filters). Each partition's position is the key of the last item taken
//! from it, so the next page resumes every partition exactly where this one stopped: every
//! item exactly once, in order, in both directions.
//!
//! A partition of packed readings ([`super::packed`]) is a source too: its query reads slot
//! parts, a slot is unpacked once all its parts and those of the slot before are in (a page
//! of the query may end inside one: its parts wait for the next page; a part may carry its
//! next slot's readings), and its readings join the merge as reading items.
//! Its position is a reading's time, so a cursor can stop inside a slot: the next page
//! queries from that slot again and skips what was emitted.

use std::cmp::Ordering;
use std::collections::VecDeque;

use crate::{Item, StoreError};
use futures::future::try_join_all;
use tidemark_schema::Timestamp;

use super::packed::{self, Packed};
use super::spec::{QuerySpec, QueryStore};

/// One partition of a merged list, with where to resume it.
#[derive(Debug, Clone)]
pub struct PagedPartition {
    /// Stable label of the partition, carried in the cursor.
    pub label: String,
    pub spec: QuerySpec,
    /// `None`: from the start of the range.
    pub after: Option<Vec<String>>,
    /// Packed readings: `spec` reads their slots (built by [`Packed::query`]), and `after`
    /// is a reading's position (`READING#<ts>`), never a key to resume the query from.
    pub packed: Option<Packed>,
}

impl PagedPartition {
    pub fn new(label: String, spec: QuerySpec, after: Option<Vec<String>>) -> Self {
        PagedPartition {
            label,
            spec,
            after,
            packed: None,
        }
    }
}

/// One page of a merged list.
#[derive(Debug, Clone, Default)]
pub struct InterleavedPage {
    pub items: Vec<Item>,
    /// Partitions that may hold more, with their positions; empty when the list is done.
    pub rest: Vec<(String, Option<Vec<String>>)>,
    /// Packed parts or readings that could not be read (each was logged).
    pub skipped: usize,
}

/// Query rounds per page at most: a range full of skipped (expired) items ends a page early
/// with a cursor instead of holding the request open. Reading the rest of a slot whose first
/// parts are in does not count: a page ended there would start that slot again, and a slot
/// with more parts than the rounds allow would never be passed.
const MAX_ROUNDS: usize = 64;

struct State {
    source: PagedPartition,
    buffer: VecDeque<Item>,
    /// DynamoDB has more after `fetched_to`.
    more: bool,
    /// Position of the last item DynamoDB evaluated (the next query starts after it).
    fetched_to: Option<Vec<String>>,
    /// Where `after` moves once the buffer is drained: everything up to it was buffered or
    /// dropped (for items, `fetched_to`; for packed readings, the end of the last whole slot).
    settled: Option<Vec<String>>,
    /// Packed: parts of a slot the last query may have cut short, waiting for the rest.
    pending: Vec<Item>,
    /// Packed: the last whole slot read, with readings not yet emitted: of its next slot
    /// going forward, of its own going back (see [`State::group`]).
    carry: Option<packed::Group>,
    /// Packed: readings and parts seen, to size the next query.
    unpacked: (usize, usize),
}

impl State {
    /// Items to ask for: `chunk`, or for packed readings about as many parts as the
    /// readings still needed take, judging by the parts read so far (a page ends with the
    /// rest of a slot read and thrown away, so asking for more than needed costs), and at
    /// least twice the parts already waiting when a slot has many (so a slot of hundreds of
    /// parts takes a few rounds, not hundreds).
    fn query_limit(&self, chunk: usize, need: usize) -> i32 {
        let n = match self.source.packed {
            None => chunk,
            Some(_) => {
                let (readings, parts) = self.unpacked;
                let per_part = if parts == 0 {
                    need
                } else {
                    readings.div_ceil(parts)
                };
                (need.div_ceil(per_part.max(1)) + 1)
                    .clamp(2, chunk.max(2))
                    .max(2 * self.pending.len())
            }
        };
        i32::try_from(n).unwrap_or(i32::MAX)
    }

    /// Buffers what a query page brought: items as they are (those `keep` accepts), slot
    /// parts once their slot is whole. Returns how many packed items were skipped.
    fn take(&mut self, items: Vec<Item>, keep: &impl Fn(&Item) -> bool) -> usize {
        let Some(p) = self.source.packed else {
            self.settled = self.fetched_to.clone();
            self.buffer.extend(items.into_iter().filter(|it| keep(it)));
            return 0;
        };
        self.pending.extend(items);
        // A slot is whole unless the query may go on inside it.
        let open = if self.more {
            self.pending.last().and_then(packed::slot_start)
        } else {
            None
        };
        let mut skipped = 0;
        let mut rest = Vec::new();
        let mut slot: Option<(Timestamp, Vec<Item>)> = None;
        for item in std::mem::take(&mut self.pending) {
            let Some(start) = packed::slot_start(&item) else {
                packed::skip(&item, "not a slot part");
                skipped += 1;
                continue;
            };
            if Some(start) == open {
                rest.push(item);
                continue;
            }
            match &mut slot {
                Some((s, parts)) if *s == start => parts.push(item),
                _ => {
                    if let Some((s, parts)) = slot.take() {
                        skipped += self.group(&p, s, &parts, keep);
                    }
                    slot = Some((start, vec![item]));
                }
            }
        }
        if let Some((s, parts)) = slot {
            skipped += self.group(&p, s, &parts, keep);
        }
        self.pending = rest;
        if !self.more && self.pending.is_empty() {
            // The query is done: nothing else holds the carried group's slot.
            if let Some(c) = self.carry.take() {
                let slot = if self.source.spec.forward {
                    p.len.next(c.start)
                } else {
                    c.start
                };
                skipped += self.emit(&p, slot, &[&c], keep);
            }
        }
        skipped
    }

    /// Takes one whole slot's parts. A slot's readings are in its parts and its previous
    /// slot's, so each is emitted once both are in: going forward, a slot's readings come out
    /// with its group and the one kept before it, and the group is kept for its next slot;
    /// going back, a group is kept until the one before it is read. Returns how many parts or
    /// readings were skipped.
    fn group(
        &mut self,
        p: &Packed,
        start: Timestamp,
        parts: &[Item],
        keep: &impl Fn(&Item) -> bool,
    ) -> usize {
        let d = packed::decode(start, parts, p);
        self.unpacked.0 += d.readings;
        self.unpacked.1 += parts.len();
        let mut skipped = d.skipped;
        let g = d.group;
        let forward = self.source.spec.forward;
        match self.carry.take() {
            Some(c) if forward && p.len.next(c.start) == g.start => {
                skipped += self.emit(p, g.start, &[&c, &g], keep);
            }
            Some(c) if !forward && p.len.next(g.start) == c.start => {
                skipped += self.emit(p, c.start, &[&g, &c], keep);
            }
            Some(c) if forward => {
                skipped += self.emit(p, p.len.next(c.start), &[&c], keep);
                skipped += self.emit(p, g.start, &[&g], keep);
            }
            Some(c) => {
                skipped += self.emit(p, c.start, &[&c], keep);
                skipped += self.emit(p, p.len.next(g.start), &[&g], keep);
            }
            None if forward => skipped += self.emit(p, g.start, &[&g], keep),
            None => skipped += self.emit(p, p.len.next(g.start), &[&g], keep),
        }
        self.carry = Some(g);
        skipped
    }

    /// Buffers the wanted readings of the slot starting at `slot` from `groups` (its own and
    /// the one before); returns how many were skipped.
    fn emit(
        &mut self,
        p: &Packed,
        slot: Timestamp,
        groups: &[&packed::Group],
        keep: &impl Fn(&Item) -> bool,
    ) -> usize {
        let forward = self.source.spec.forward;
        let u = packed::unpack(slot, groups, p, forward);
        self.buffer
            .extend(u.items.into_iter().filter(|it| keep(it)));
        self.settled = Some(p.settled_after(slot, forward));
        u.skipped
    }
}

/// A merge in progress: every source's buffer and position. Pulled item by item
/// ([`Interleave::next`]), so a page stops at its limit ([`interleaved_page`]) and a walk holds one
/// query page per partition, never the whole range ([`super::readings::walk_readings`]).
pub struct Interleave {
    states: Vec<State>,
    /// Items asked for per query of a single-item partition.
    chunk: usize,
    /// Query rounds spent on new items (see [`MAX_ROUNDS`]).
    rounds: usize,
    /// Packed parts or readings that could not be read (each was logged).
    pub skipped: usize,
}

impl Interleave {
    /// A merge of `sources` that expects to be asked for about `limit` items (it sizes the
    /// queries: a lookahead of one item tells a single partition's last page apart from a
    /// full one).
    pub fn new(sources: Vec<PagedPartition>, limit: usize) -> Self {
        let n = sources.len().max(1);
        let limit = limit.max(1);
        let chunk = (limit.div_ceil(n) + if n > 1 { 8 } else { 0 }).min(limit) + 1;
        let states = sources
            .into_iter()
            .map(|s| State {
                fetched_to: s.packed.is_none().then(|| s.after.clone()).flatten(),
                settled: None,
                source: s,
                buffer: VecDeque::new(),
                more: true,
                pending: Vec::new(),
                carry: None,
                unpacked: (0, 0),
            })
            .collect();
        Interleave {
            states,
            chunk,
            rounds: 0,
            skipped: 0,
        }
    }

    /// The next item in sort-key order (descending unless the sources go forward) that
    /// `keep` accepts, querying the partitions whose buffers ran dry; `need` is about how
    /// many more the caller wants (it sizes packed queries). `None` when every source is
    /// done, or when `max_rounds` query rounds have been spent ([`Interleave::rest`] tells which).
    pub async fn next<S: QueryStore + Sync>(
        &mut self,
        store: &S,
        need: usize,
        max_rounds: Option<usize>,
        keep: &impl Fn(&Item) -> bool,
    ) -> Result<Option<Item>, StoreError> {
        let need = need.max(1);
        loop {
            let states = &mut self.states;
            let dry: Vec<usize> = (0..states.len())
                .filter(|&i| states[i].buffer.is_empty() && states[i].more)
                .collect();
            if !dry.is_empty() {
                if dry.iter().all(|&i| states[i].pending.is_empty()) {
                    if max_rounds.is_some_and(|m| self.rounds >= m) {
                        return Ok(None);
                    }
                    self.rounds += 1;
                }
                let chunk = self.chunk;
                let pages = try_join_all(dry.iter().map(|&i| {
                    let st = &states[i];
                    let start = st
                        .fetched_to
                        .as_ref()
                        .and_then(|p| st.source.spec.start_key(p));
                    store.query(&st.source.spec, start, st.query_limit(chunk, need))
                }))
                .await?;
                for (i, page) in dry.into_iter().zip(pages) {
                    let st = &mut states[i];
                    let last_item_pos = page
                        .items
                        .last()
                        .and_then(|it| st.source.spec.position_of(it));
                    st.more = page.last_key.is_some();
                    st.fetched_to = match &page.last_key {
                        Some(k) => st.source.spec.position_of(k).or(last_item_pos),
                        None => last_item_pos.or(st.fetched_to.take()),
                    };
                    if st.more && st.fetched_to.is_none() {
                        // A LastEvaluatedKey we cannot resume from: stop rather than loop.
                        st.more = false;
                    }
                    self.skipped += st.take(page.items, keep);
                    if st.buffer.is_empty() && st.settled.is_some() {
                        st.source.after = st.settled.clone();
                    }
                }
                continue;
            }
            let Some(best) = pick(states) else {
                return Ok(None);
            };
            let st = &mut states[best];
            let Some(item) = st.buffer.pop_front() else {
                return Ok(None);
            };
            st.source.after = st.source.spec.position_of(&item);
            if st.buffer.is_empty() && st.more {
                // Everything fetched is consumed (or filtered): resume after what was
                // evaluated.
                if st.settled.is_some() {
                    st.source.after = st.settled.clone();
                }
            }
            return Ok(Some(item));
        }
    }

    /// Partitions that may hold more, with their positions; empty when the list is done.
    pub fn rest(self) -> Vec<(String, Option<Vec<String>>)> {
        self.states
            .into_iter()
            .filter(|st| !st.buffer.is_empty() || st.more)
            .map(|st| (st.source.label, st.source.after))
            .collect()
    }
}

/// Reads up to `limit` items in sort-key order (descending unless `spec.forward`) across
/// `sources`, dropping items for which `keep` is false (after the read; see the callers for
/// why that never discards most of a page).
pub async fn interleaved_page<S: QueryStore + Sync>(
    store: &S,
    sources: Vec<PagedPartition>,
    limit: usize,
    keep: impl Fn(&Item) -> bool,
) -> Result<InterleavedPage, StoreError> {
    let mut merge = Interleave::new(sources, limit);
    let mut out = Vec::with_capacity(limit);
    while out.len() < limit {
        match merge
            .next(store, limit - out.len(), Some(MAX_ROUNDS), &keep)
            .await?
        {
            Some(item) => out.push(item),
            None => break,
        }
    }
    let skipped = merge.skipped;
    Ok(InterleavedPage {
        items: out,
        rest: merge.rest(),
        skipped,
    })
}

/// The partition whose head comes next (ties go to the earlier partition, consistently).
fn pick(states: &[State]) -> Option<usize> {
    let mut best: Option<(usize, &str)> = None;
    for (i, st) in states.iter().enumerate() {
        let Some(head) = st.buffer.front() else {
            continue;
        };
        let k = sort_key(st, head);
        let better = match best {
            None => true,
            Some((_, bk)) => {
                let ord = k.cmp(bk);
                if st.source.spec.forward {
                    ord == Ordering::Less
                } else {
                    ord == Ordering::Greater
                }
            }
        };
        if better {
            best = Some((i, k));
        }
    }
    best.map(|(i, _)| i)
}

fn sort_key<'a>(st: &State, item: &'a Item) -> &'a str {
    item.get(st.source.spec.sort_attr())
        .and_then(|v| v.as_s().ok())
        .map_or("", String::as_str)
}
