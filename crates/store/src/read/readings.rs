//! A device's stored readings, across its layout history (docs/design.md §2): a range is cut
//! where the layout changes ([`LayoutHistory::segments`]), and each segment's partitions (its
//! shards) are merged in time order ([`super::interleave`]), whether they hold single reading
//! items (`READING#<ts>`) or packed slot parts (`SLOT#<start>#<part>`, read back as the
//! reading items they stand for by [`super::packed`], whose parts are joined by the one rule
//! every reader uses, [`tidemark_schema::join_parts`]).
//!
//! The API pages these sources for clients (with cursors); [`walk_readings`] hands every
//! reading of a range to a visitor, for the aggregator (extremes, alert derivations) and
//! `tidemark-admin rebuild`. Both read the same items the same way. An unreadable item is
//! skipped, logged with its key and counted: one bad item must not hide the rest of a
//! device's history.

use std::collections::BTreeMap;

use tidemark_schema::{
    DeviceId, LayoutHistory, MetricName, Reading, ReadingItem, Segment, Timestamp, keys,
};

use super::interleave::{Interleave, PagedPartition};
use super::packed::Packed;
use super::spec::{BadPosition, QuerySpec, QueryStore, SkRange};
use crate::{StoreError, from_stored};

/// Readings a walk asks for at a time: bounds its memory to about a query page per
/// partition, and its queries' `Limit` (a few hundred KB of single items, so rounding read
/// units per call costs next to nothing).
const WALK_PAGE: usize = 1000;

/// The query of `device`'s readings in partition `shard` over `seg`.
pub fn partition_query(
    device: &DeviceId,
    seg: &Segment,
    shard: Option<u16>,
    forward: bool,
    consistent: bool,
) -> QuerySpec {
    QuerySpec {
        consistent,
        ..QuerySpec::table(
            keys::reading_pk(device, shard),
            SkRange::Between(keys::reading_sk(seg.from), keys::reading_sk(seg.to)),
            forward,
        )
    }
}

/// The time of a reading position (`READING#<ts>`: a single item's sort key, or a packed
/// reading's).
pub fn position_time(pos: &[String]) -> Result<Timestamp, BadPosition> {
    pos.first()
        .and_then(|p| p.strip_prefix(keys::READING_PREFIX))
        .and_then(|t| Timestamp::parse_canonical(t).ok())
        .ok_or(BadPosition)
}

/// The source reading partition `spec` (from [`partition_query`]) of `seg` after `after` (a
/// reading position, already placed by [`QuerySpec::resume`]): its items as they are, or,
/// packed, the slots holding them read whole and unpacked.
pub fn source(
    seg: &Segment,
    label: String,
    spec: QuerySpec,
    after: Option<Vec<String>>,
) -> Result<PagedPartition, BadPosition> {
    let at = match (seg.layout.slot, &after) {
        (Some(_), Some(a)) => Some(position_time(a)?),
        _ => None,
    };
    Ok(placed(seg, label, spec, after, at))
}

/// [`source`], with the time of its position already known.
fn placed(
    seg: &Segment,
    label: String,
    spec: QuerySpec,
    after: Option<Vec<String>>,
    at: Option<Timestamp>,
) -> PagedPartition {
    let Some(len) = seg.layout.slot else {
        return PagedPartition::new(label, spec, after);
    };
    let packed = Packed {
        len,
        from: seg.from,
        to: seg.to,
        after: at,
    };
    PagedPartition {
        label,
        spec: QuerySpec {
            consistent: spec.consistent,
            ..packed.query(spec.partition, spec.forward)
        },
        after,
        packed: Some(packed),
    }
}

/// What a walk saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Walked {
    /// Readings handed to the visitor.
    pub readings: usize,
    /// Items skipped because they do not parse (single readings or slot parts).
    pub unreadable: u64,
    /// The visitor ended the walk ([`walk_readings_while`]).
    pub stopped: bool,
}

/// Hands the readings of `device` in `[from, to]` under `history` to `visit`, in time order
/// (newest first if asked), at most `limit` of them; reads are strongly consistent (the
/// aggregator reads what the stream just told it was written).
#[allow(clippy::too_many_arguments)]
pub async fn walk_readings<S: QueryStore + Sync>(
    store: &S,
    device: &DeviceId,
    history: &LayoutHistory,
    from: Timestamp,
    to: Timestamp,
    newest_first: bool,
    limit: Option<usize>,
    mut visit: impl FnMut(Timestamp, BTreeMap<MetricName, f64>),
) -> Result<Walked, StoreError> {
    walk_readings_while(
        store,
        device,
        history,
        from,
        to,
        newest_first,
        limit,
        true,
        |at, m| {
            visit(at, m);
            true
        },
    )
    .await
}

/// [`walk_readings`] that stops as soon as `visit` returns `false` (the reading it was given
/// counts as handed over), reading strongly consistent or not: a reader that pages by
/// buckets stops at the first reading past its page instead of reading on to its limit, and
/// an API read pays half the read units.
#[allow(clippy::too_many_arguments)]
pub async fn walk_readings_while<S: QueryStore + Sync>(
    store: &S,
    device: &DeviceId,
    history: &LayoutHistory,
    from: Timestamp,
    to: Timestamp,
    newest_first: bool,
    limit: Option<usize>,
    consistent: bool,
    mut visit: impl FnMut(Timestamp, BTreeMap<MetricName, f64>) -> bool,
) -> Result<Walked, StoreError> {
    walk_whole_readings_while(
        store,
        device,
        history,
        from,
        to,
        newest_first,
        limit,
        consistent,
        |r| visit(r.timestamp, r.metrics),
    )
    .await
}

/// [`walk_readings_while`] handing over whole readings, metadata included (the export).
#[allow(clippy::too_many_arguments)]
pub async fn walk_whole_readings_while<S: QueryStore + Sync>(
    store: &S,
    device: &DeviceId,
    history: &LayoutHistory,
    from: Timestamp,
    to: Timestamp,
    newest_first: bool,
    limit: Option<usize>,
    consistent: bool,
    mut visit: impl FnMut(Reading) -> bool,
) -> Result<Walked, StoreError> {
    let forward = !newest_first;
    let mut left = limit.unwrap_or(usize::MAX);
    let mut segments = history.segments(from, to);
    if newest_first {
        segments.reverse();
    }
    let mut walked = Walked::default();
    for seg in segments {
        if left == 0 {
            break;
        }
        let sources = seg
            .partitions()
            .into_iter()
            .map(|shard| {
                let spec = partition_query(device, &seg, shard, forward, consistent);
                placed(&seg, String::new(), spec, None, None)
            })
            .collect();
        let mut merge = Interleave::new(sources, left.min(WALK_PAGE));
        while left > 0 {
            let Some(item) = merge
                .next(store, left.min(WALK_PAGE), None, &|_| true)
                .await?
            else {
                break;
            };
            match from_stored::<ReadingItem>(item).map(|r| r.to_reading()) {
                Ok(Ok((reading, _))) => {
                    let go_on = visit(reading);
                    walked.readings += 1;
                    left -= 1;
                    if !go_on {
                        walked.stopped = true;
                        return Ok(walked);
                    }
                }
                Ok(Err(e)) => {
                    tracing::warn!(key = %format!("{}/{}", e.pk, e.sk), "unreadable reading skipped");
                    walked.unreadable += 1;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "unreadable reading skipped");
                    walked.unreadable += 1;
                }
            }
        }
        walked.unreadable += merge.skipped as u64;
    }
    Ok(walked)
}
