//! Paging over several partitions at once, in one global sort-key order.
//!
//! Used wherever one logical list lives in several partitions: a hot device's reading shards,
//! the day's quarantine partitions, alerts over every severity, devices over every status key.
//! It is a lazy k-way merge: each partition is queried (in parallel) only when its buffer runs
//! dry, and an item is emitted only when every partition that may still hold something has a
//! buffered head to compare with, so the output is in order whatever page sizes DynamoDB
//! returns (1 MB caps, filters). Each partition's position is the key of the last item taken
//! from it, so the next page resumes every partition exactly where this one stopped: every
//! item exactly once, in order, in both directions.

use std::cmp::Ordering;
use std::collections::VecDeque;

use futures::future::try_join_all;
use tidemark_store::{Item, StoreError};

use crate::store::{QuerySpec, QueryStore};

/// One partition of a merged list, with where to resume it.
#[derive(Debug, Clone)]
pub struct Source {
    /// Stable label of the partition, carried in the cursor.
    pub label: String,
    pub spec: QuerySpec,
    /// `None`: from the start of the range.
    pub after: Option<Vec<String>>,
}

/// One page of a merged list.
#[derive(Debug, Clone, Default)]
pub struct MergedPage {
    pub items: Vec<Item>,
    /// Partitions that may hold more, with their positions; empty when the list is done.
    pub rest: Vec<(String, Option<Vec<String>>)>,
}

/// Query rounds per page at most: a range full of skipped (expired) items ends a page early
/// with a cursor instead of holding the request open.
const MAX_ROUNDS: usize = 64;

struct State {
    source: Source,
    buffer: VecDeque<Item>,
    /// DynamoDB has more after `fetched_to`.
    more: bool,
    /// Position of the last item DynamoDB evaluated (the next query starts after it).
    fetched_to: Option<Vec<String>>,
}

/// Reads up to `limit` items in sort-key order (descending unless `spec.forward`) across
/// `sources`, dropping items for which `keep` is false (after the read; see the callers for
/// why that never discards most of a page).
pub async fn merged_page<S: QueryStore + Sync>(
    store: &S,
    sources: Vec<Source>,
    limit: usize,
    keep: impl Fn(&Item) -> bool,
) -> Result<MergedPage, StoreError> {
    let n = sources.len().max(1);
    // A lookahead of one item tells a single partition's last page apart from a full one.
    let chunk = (limit.div_ceil(n) + if n > 1 { 8 } else { 0 }).min(limit) + 1;
    let chunk = i32::try_from(chunk).unwrap_or(i32::MAX);
    let mut states: Vec<State> = sources
        .into_iter()
        .map(|s| State {
            fetched_to: s.after.clone(),
            source: s,
            buffer: VecDeque::new(),
            more: true,
        })
        .collect();
    let mut out = Vec::with_capacity(limit);
    let mut rounds = 0;
    while out.len() < limit {
        let dry: Vec<usize> = (0..states.len())
            .filter(|&i| states[i].buffer.is_empty() && states[i].more)
            .collect();
        if !dry.is_empty() {
            if rounds == MAX_ROUNDS {
                break;
            }
            rounds += 1;
            let pages = try_join_all(dry.iter().map(|&i| {
                let st = &states[i];
                let start = st
                    .fetched_to
                    .as_ref()
                    .and_then(|p| st.source.spec.start_key(p));
                store.query(&st.source.spec, start, chunk)
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
                st.buffer
                    .extend(page.items.into_iter().filter(|it| keep(it)));
                if st.buffer.is_empty() && st.fetched_to.is_some() {
                    st.source.after = st.fetched_to.clone();
                }
            }
            continue;
        }
        let Some(best) = pick(&states) else { break };
        let st = &mut states[best];
        let Some(item) = st.buffer.pop_front() else {
            break;
        };
        st.source.after = st.source.spec.position_of(&item);
        if st.buffer.is_empty() && st.more {
            // Everything fetched is consumed (or filtered): resume after what was evaluated.
            st.source.after = st.fetched_to.clone();
        }
        out.push(item);
    }
    let rest = states
        .into_iter()
        .filter(|st| !st.buffer.is_empty() || st.more)
        .map(|st| (st.source.label, st.source.after))
        .collect();
    Ok(MergedPage { items: out, rest })
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
