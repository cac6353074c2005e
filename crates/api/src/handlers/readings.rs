//! Reading reads (AP3, AP4, `GET /latest`), stitched across a device's layout history.
//!
//! A range is cut into segments where the layout changes ([`LayoutHistory::segments`]) and
//! walked one segment after another, in the order asked: each segment's partitions (its
//! shards) are merged by [`interleaved_page`], whether they hold single reading items or packed
//! slots ([`tidemark_store::read::readings`]); both come out as reading items, so clients see one list. A page
//! may end inside a segment (its cursor names an instant of the segment and every
//! partition's position) or at a segment's end (the next page starts the next segment).
//!
//! Expired readings: a reading's `ttl` is its time plus the retention, so every reading older
//! than `now - retention` is expired and every newer one is not. The key condition starts at
//! that instant, so DynamoDB never reads the expired ones; the check after the read only
//! catches readings written under a shorter retention, a small minority, which is why it is
//! not the "filter that throws most items away" docs/design.md §6 forbids. A packed reading carries
//! its slot's `ttl` (the slot's last instant plus the retention), and the range's start
//! leaves out its readings older than the retention.

use futures::{StreamExt, TryStreamExt};
use http::StatusCode;
use tidemark_schema::{DeviceId, LayoutHistory, Segment, Timestamp, keys};
use tidemark_store::Item;
use tidemark_store::emf::Metrics;
use tidemark_store::layouts::LayoutBook;
use tidemark_store::read::{PagedPartition, interleaved_page, readings};

use super::{
    HOUR_MS, LATEST_CONCURRENCY, Reply, bad_cursor, expired, list, parse_partition_label,
    partition_label, resume_at, resume_range,
};
use crate::App;
use crate::cursor::CursorState;
use crate::error::ApiError;
use crate::render;
use crate::request::Params;
use crate::store::Store;
#[allow(unused_imports)]
use crate::store::traits::*;
use crate::validate;

/// A partition label and the position it resumes after.
type Part = (String, Option<Vec<String>>);

/// Every partition of `seg`, from its start.
fn fresh(seg: &Segment) -> Vec<Part> {
    seg.partitions()
        .into_iter()
        .map(|s| (partition_label(s), None))
        .collect()
}

/// Every partition of `seg` when a walk enters it from the previous segment: placed just
/// before its first instant in the walk's direction rather than nowhere, so that should an
/// announced (not yet used) layout change be replaced before the next page, and `seg` then
/// start later, the segment that now holds that instant goes on from there instead of
/// starting over.
fn entering(seg: &Segment, forward: bool) -> Vec<Part> {
    let edge = if forward {
        seg.from.pred().unwrap_or(Timestamp::MIN)
    } else {
        seg.to.succ().unwrap_or(Timestamp::MAX)
    };
    seg.partitions()
        .into_iter()
        .map(|s| (partition_label(s), Some(vec![keys::reading_sk(edge)])))
        .collect()
}

/// Logs and counts (the `PackedItemsSkipped` metric, in EMF) the unreadable packed items a
/// read left out; each was logged with its key where it was found.
fn skipped(id: &DeviceId, n: usize) {
    if n > 0 {
        tracing::warn!(device = %id, skipped = n, "unreadable packed items left out of a read");
        Metrics::new("api")
            .count("PackedItemsSkipped", n as u64)
            .emit();
    }
}

/// The time of a reading position (`READING#<ts>`, a single item's sort key or a packed
/// reading's).
fn position_time(pos: &[String]) -> Result<Timestamp, ApiError> {
    readings::position_time(pos).map_err(|_| bad_cursor())
}

/// An instant of `[from, to]` where a walk with these partitions stands: the furthest
/// position in the walk's direction, or the stretch's first instant before any. It names
/// the segment on the next page even if announced layout changes cut the range anew then
/// (they only ever cut beyond every reading that can exist, so beyond any position).
fn frontier(from: Timestamp, to: Timestamp, parts: &[Part], forward: bool) -> Timestamp {
    let times = parts
        .iter()
        .filter_map(|(_, a)| a.as_deref().and_then(|a| position_time(a).ok()));
    let at = if forward {
        times.max().unwrap_or(from)
    } else {
        times.min().unwrap_or(to)
    };
    at.clamp(from, to)
}

impl<S: Store> App<S> {
    /// One source for each partition of `parts` in `seg` (one layout over `[from, to]`):
    /// single reading items, or the slots packing them.
    fn reading_sources(
        &self,
        id: &DeviceId,
        seg: &Segment,
        parts: Vec<Part>,
        forward: bool,
        consistent: bool,
    ) -> Result<Vec<PagedPartition>, ApiError> {
        let mut out = Vec::with_capacity(parts.len());
        for (label, after) in parts {
            let shard = parse_partition_label(&label).ok_or_else(bad_cursor)?;
            let spec = readings::partition_query(id, seg, shard, forward, consistent);
            let Some(after) = resume_at(&spec, after)? else {
                continue;
            };
            out.push(readings::source(seg, label, spec, after).map_err(|_| bad_cursor())?);
        }
        Ok(out)
    }

    /// Readings of a range (AP3), across every layout and shard the device had over it.
    pub(super) async fn readings(&self, id: DeviceId, p: &Params) -> Result<Reply, ApiError> {
        let limit = validate::limit(p)?;
        let forward = validate::order(p, true)?;
        let scope = format!(
            "readings|{id}|{}|{}",
            validate::range_scope(p)?,
            if forward { "asc" } else { "desc" }
        );
        let now = self.now();
        let state = self.open(&scope, p)?;
        let (from, to, history) = match &state {
            Some(s) => {
                let (from, to) = resume_range(s)?;
                (from, to, self.history_of(&id).await?)
            }
            None => {
                let (from, to) = validate::range(p, now, HOUR_MS)?;
                (from, to, self.stored_layouts(&id).await?.history())
            }
        };
        let lo = from.max(self.config.retention_start(now));
        let mut segments = history.segments(from, to);
        if lo > to || segments.is_empty() {
            return Ok(list(Vec::new(), None));
        }
        if !forward {
            segments.reverse();
        }
        // The segment the walk stands in, and where its partitions stand.
        let (mut i, mut parts) = match state {
            None => (0, fresh(&segments[0])),
            Some(s) => {
                let at = match &s.at {
                    Some(a) => Timestamp::parse_canonical(a).map_err(|_| bad_cursor())?,
                    // A cursor of a release that read single items only.
                    None => frontier(from, to, &s.parts, forward),
                };
                let i = segments
                    .iter()
                    .position(|g| g.from <= at && at <= g.to)
                    .ok_or_else(bad_cursor)?;
                (i, s.parts)
            }
        };
        let range = Some((from.to_string(), to.to_string()));
        let mut items = Vec::new();
        let mut next: Option<CursorState> = None;
        loop {
            let seg = segments[i];
            let live = Segment {
                from: seg.from.max(lo),
                ..seg
            };
            if live.from <= live.to {
                let sources = self.reading_sources(&id, &live, parts, forward, false)?;
                let page = interleaved_page(&self.store, sources, limit - items.len(), |it| {
                    !expired(it, now)
                })
                .await?;
                skipped(&id, page.skipped);
                items.extend(page.items);
                if !page.rest.is_empty() {
                    let at = frontier(seg.from, seg.to, &page.rest, forward);
                    next = Some(CursorState {
                        range,
                        at: Some(at.to_string()),
                        parts: page.rest,
                        ..CursorState::default()
                    });
                    break;
                }
            } else if !forward {
                // This segment has expired, and every older one with it.
                break;
            }
            i += 1;
            let Some(seg) = segments.get(i) else {
                break;
            };
            parts = entering(seg, forward);
            if items.len() == limit {
                let at = if forward { seg.from } else { seg.to };
                next = Some(CursorState {
                    range,
                    at: Some(at.to_string()),
                    parts,
                    ..CursorState::default()
                });
                break;
            }
        }
        let cursor = next.map(|s| self.cursor_key().seal(&scope, &s));
        let items = items
            .into_iter()
            .map(render::reading)
            .collect::<Result<_, _>>()?;
        Ok(list(items, cursor))
    }

    /// The newest unexpired reading (AP4).
    pub(super) async fn latest_reading(&self, id: DeviceId) -> Result<Reply, ApiError> {
        let now = self.now();
        let history = self.stored_layouts(&id).await?.history();
        let newest = self
            .newest_reading(&id, &history, now, true)
            .await?
            .ok_or_else(|| {
                ApiError::NotFound(format!(
                    "device {id} has no readings in the last {} days",
                    self.config.retention_days
                ))
            })?;
        Ok((StatusCode::OK, render::reading(newest)?))
    }

    /// The newest unexpired reading of the device: its layout segments newest first, each
    /// one's partitions (single items or packed slots) merged newest-first for one reading,
    /// until one has any. Usually the newest segment answers, in one query per shard.
    pub(super) async fn newest_reading(
        &self,
        id: &DeviceId,
        history: &LayoutHistory,
        now: Timestamp,
        consistent: bool,
    ) -> Result<Option<Item>, ApiError> {
        let lo = self.config.retention_start(now);
        for seg in history.segments(lo, Timestamp::MAX).iter().rev() {
            let sources = self.reading_sources(id, seg, fresh(seg), false, consistent)?;
            let page = interleaved_page(&self.store, sources, 1, |it| !expired(it, now)).await?;
            skipped(id, page.skipped);
            if let Some(item) = page.items.into_iter().next() {
                return Ok(Some(item));
            }
        }
        Ok(None)
    }

    /// Latest reading of up to 100 devices, read from their reading partitions (so as
    /// fresh as ingest): one BatchGetItem for their layout histories, then
    /// [`Self::newest_reading`] per device, [`LATEST_CONCURRENCY`] devices at a time.
    pub(super) async fn latest_of_devices(&self, p: &Params) -> Result<Reply, ApiError> {
        if !p.all("tag").is_empty() {
            if p.get("ids").is_some() {
                return Err(ApiError::bad("ids", "give ids or tag, not both"));
            }
            return self.latest_of_tag(p).await;
        }
        for name in ["limit", "cursor"] {
            if p.get(name).is_some() {
                return Err(ApiError::bad(
                    name,
                    "only with tag: a list of ids is answered whole",
                ));
            }
        }
        let raw = p.get("ids").ok_or_else(|| {
            ApiError::bad(
                "ids",
                "required (or tag): a comma-separated list of device IDs",
            )
        })?;
        let mut ids: Vec<DeviceId> = Vec::new();
        for part in raw.split(',') {
            let id = DeviceId::new(part).map_err(|e| ApiError::bad("ids", e.to_string()))?;
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        if ids.len() > validate::MAX_IDS {
            return Err(ApiError::bad(
                "ids",
                format!("{} IDs; at most {} at once", ids.len(), validate::MAX_IDS),
            ));
        }
        // A scoped caller's ids keep to its devices; the others are left out as devices
        // without a reading are (one BatchGetItem of the device items).
        let caller = crate::access::Scope::caller();
        if caller != crate::access::Scope::All {
            let devices = self.device_items(&ids).await?;
            ids.retain(|id| {
                devices
                    .get(id)
                    .is_some_and(|d| caller.sees(&super::tagging::stored_tags(d)))
            });
        }
        // Their own layouts and the fleet's default, in one BatchGetItem (101 keys at most;
        // the store splits it into calls of 100).
        let (book, _) = LayoutBook::from_raw(self.store.batch_get(LayoutBook::keys(&ids)).await?);
        let lo = self.config.retention_start(self.now());
        let queries: usize = ids
            .iter()
            .map(|id| {
                book.of(id)
                    .segments(lo, Timestamp::MAX)
                    .iter()
                    .map(|s| s.partitions().len())
                    .sum::<usize>()
            })
            .sum();
        let most = self.config.budget.latest_partitions;
        if queries as u64 > most {
            return Err(ApiError::TooMuch {
                limit: crate::budget::Limit::Partitions,
                message: format!(
                    "these {} devices span {queries} partitions (their shards and layouts); at \
                     most {most} can be read in one request: ask for fewer ids",
                    ids.len(),
                ),
            });
        }
        Ok(list(self.newest_of(&ids, &book).await?, None))
    }

    /// The newest reading of each of `ids` (their layouts in `book`), in their order, devices
    /// without one left out: [`Self::newest_reading`] per device, [`LATEST_CONCURRENCY`] at a
    /// time, each rendered as `GET /devices/{id}/readings/latest` renders it.
    pub(super) async fn newest_of(
        &self,
        ids: &[DeviceId],
        book: &LayoutBook,
    ) -> Result<Vec<serde_json::Value>, ApiError> {
        let now = self.now();
        let reads: Vec<_> = ids
            .iter()
            .map(|id| self.newest_reading(id, book.of(id), now, false))
            .collect();
        let newest: Vec<Option<Item>> = futures::stream::iter(reads)
            .buffered(LATEST_CONCURRENCY)
            .try_collect()
            .await?;
        newest
            .into_iter()
            .flatten()
            .map(render::reading)
            .collect::<Result<_, _>>()
    }
}
