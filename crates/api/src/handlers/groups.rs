//! A group's series (`GET /groups/series`, docs/design.md §6 "Fleet reads"): the buckets of one
//! metric over every device holding a tag, from the group's own stored buckets, never from
//! its members (docs/decisions/0007-group-rollups.md).
//!
//! An hour comes from its `GROUP#<tag>` / `HOUR#<metric>#<hour>` item, recomputed by the
//! export from the members' readings; an hour without one that the export has not passed yet
//! (or marked to export again) from its partials (`GROUPPART#<tag>#<hour>`, folded with
//! [`fold_partials`]), flagged `open`; an hour the export has passed without an item had no
//! readings in the group. A day comes from its `DAY#` item, else from its hours merged.
//! Percentiles come from the merged quantile sketches every group bucket keeps (within
//! [`tidemark_schema::sketch::RELATIVE_ACCURACY`]). The rest is the device series' code:
//! parsing, layout, fill, rows or wide, cursors ([`super::series`]).

use std::collections::{BTreeMap, BTreeSet};

use futures::{StreamExt, TryStreamExt};
use tidemark_schema::{
    Bucket, DeviceId, EntityKey, ExportCursorItem, GROUP_PARTIAL_TTL_DAYS, GroupBucketItem,
    GroupPartialItem, MetricName, Period, Stats, Tag, TagKey, Timestamp, fold_partials, keys,
};
use tidemark_store::Item;
use tidemark_store::layouts::LayoutBook;
use tidemark_store::tags::index_page;

use super::series::{Buckets, Edges, Walk, page_end};
use super::{Reply, bad_cursor, expired, list};
use crate::App;
use crate::cursor::CursorState;
use crate::error::ApiError;
use crate::request::Params;
use crate::series::stats::Acc;
use crate::series::{Fill, Format, Resolution, SeriesQuery};
#[allow(unused_imports)]
use crate::store::traits::*;
use crate::store::{QuerySpec, SkRange, Store};
use crate::validate;

/// Hours one request reads from their partials at most: two days. The export recomputes each
/// closed hour within minutes, so normally only the last hour or two have no item; more means
/// the export is stopped or behind (the partials still answer for their
/// [`GROUP_PARTIAL_TTL_DAYS`]). Past the bound a page of rows ends (its cursor goes on from
/// there) and a wide answer is a 400, so no request makes more than this many partial reads.
pub const MAX_PARTIAL_HOURS: usize = 48;
/// Partitions of partials read at once.
const PARTIAL_CONCURRENCY: usize = 16;
/// Group bucket items a query asks for at a time.
const BUCKET_PAGE: i32 = 200;
const HOUR_MS: i64 = 3_600_000;

/// The one `tag` of a group request: present, well formed, of a key that keeps group rollups.
pub fn group_tag(p: &Params, group_keys: &[TagKey]) -> Result<Tag, ApiError> {
    let raw = match p.all("tag")[..] {
        [one] => one,
        [] => {
            return Err(ApiError::bad(
                "tag",
                "required: the group, as key:value (tag=site:A)",
            ));
        }
        _ => {
            return Err(ApiError::bad(
                "tag",
                "given more than once; a group series is of one tag",
            ));
        }
    };
    let tag = Tag::parse(raw).map_err(|e| ApiError::bad("tag", e.to_string()))?;
    if !group_keys.contains(&tag.key) {
        let kept: Vec<&str> = group_keys.iter().map(TagKey::as_str).collect();
        return Err(ApiError::bad(
            "tag",
            format!(
                "tag key {:?} keeps no group rollups; the setting GROUP_TAGS (template \
                 parameter GroupTags) lists the keys that do: {}",
                tag.key.as_str(),
                if kept.is_empty() {
                    "none".to_owned()
                } else {
                    kept.join(", ")
                }
            ),
        ));
    }
    Ok(tag)
}

/// A group series request: the device series' options, one metric, whole hours or days.
fn group_query(p: &Params) -> Result<(SeriesQuery, MetricName), ApiError> {
    let metric = p
        .get("metric")
        .ok_or_else(|| ApiError::bad("metric", "required: the metric to summarize"))?;
    let metric =
        MetricName::new(metric).map_err(|e| ApiError::bad("metric", format!("{metric:?}: {e}")))?;
    if let Some(r) = p.get("resolution")
        && Resolution::ALL
            .iter()
            .any(|res| res.as_str() == r && *res < Resolution::H1)
    {
        return Err(ApiError::bad(
            "resolution",
            format!("{r:?}: group series are kept per hour; one of: 1h, 1d, auto"),
        ));
    }
    let mut q = SeriesQuery::parse(p)?;
    // `auto` takes the finest resolution within maxPoints; a group's finest is the hour (fewer
    // buckets, so still within it).
    q.resolution = q.resolution.max(Resolution::H1);
    q.metrics = Some(vec![metric.clone()]);
    Ok((q, metric))
}

/// The export's position: hours up to `cursor` were recomputed, but those marked `dirty`.
struct Exported {
    cursor: Option<Timestamp>,
    dirty: BTreeSet<Timestamp>,
}

impl Exported {
    fn passed(&self, hour: Timestamp) -> bool {
        self.cursor.is_some_and(|c| hour <= c) && !self.dirty.contains(&hour)
    }
}

impl<S: Store> App<S> {
    pub(super) async fn group_series(&self, p: &Params) -> Result<Reply, ApiError> {
        let tag = group_tag(p, &self.config.group_tags)?;
        if !crate::access::Scope::caller().sees_group(&tag) {
            return Err(crate::error::ApiError::NotFound(format!(
                "no group {tag} among the groups this caller may read (its sites' groups)"
            )));
        }
        let (q, metric) = group_query(p)?;
        let scope = format!("group-series|{tag}|{}", q.scope());
        let start = match self.open(&scope, p)? {
            Some(state) => {
                let at = state.at.as_deref().ok_or_else(bad_cursor)?;
                Timestamp::parse_canonical(at).map_err(|_| bad_cursor())?
            }
            None => q.from,
        };
        let period = match q.resolution {
            Resolution::D1 => Period::Daily,
            _ => Period::Hourly,
        };
        let walk = self.group_walk(&tag, &metric, &q, start, period).await?;
        let metrics = [metric];
        let edges = match q.fill {
            Fill::Locf | Fill::Linear => {
                self.group_edges(&tag, &metrics[0], start.max(q.from), walk.end, q.fill)
                    .await?
            }
            Fill::None | Fill::Null => Default::default(),
        };
        self.series_page(&scope, &q, start, &metrics, &walk, &edges)
    }

    /// The page's buckets from `start`: stored hours or days, the rest from their hours and
    /// partials.
    async fn group_walk(
        &self,
        tag: &Tag,
        metric: &MetricName,
        q: &SeriesQuery,
        start: Timestamp,
        period: Period,
    ) -> Result<Walk, ApiError> {
        let first = period.bucket(start);
        let mut end = page_end(q, start, 1);
        // Unfilled rows stop once they hold `limit` rows (one a bucket: one metric).
        let most = (q.format == Format::Rows && q.fill == Fill::None).then_some(q.limit);
        let (stored, more) = self
            .group_buckets(tag, metric, period, first.start(), end, most)
            .await?;
        if more && let Some(last) = stored.keys().next_back() {
            end = period.bucket(*last).end_exclusive();
        }
        // Each bucket's stats, members (where known) and whether it is still open.
        let mut buckets: BTreeMap<Timestamp, (Stats, Option<u64>, bool)> = stored
            .into_iter()
            .filter(|(b, _)| *b < end)
            .map(|(b, item)| (b, (item.stats, Some(item.devices), false)))
            .collect();
        // What the stored buckets leave out: hours without an item (inside days without one).
        let missing_days: Vec<Timestamp> = buckets_within(period, first.start(), end)
            .into_iter()
            .filter(|b| !buckets.contains_key(b))
            .collect();
        let mut hours: BTreeMap<Timestamp, (Stats, bool)> = BTreeMap::new();
        let mut wanted: Vec<Timestamp> = Vec::new();
        match period {
            Period::Hourly => wanted = missing_days,
            Period::Daily => {
                if let (Some(lo), Some(hi)) = (missing_days.first(), missing_days.last()) {
                    let hi = Period::Daily.bucket(*hi).end_exclusive();
                    let (stored_hours, _) = self
                        .group_buckets(tag, metric, Period::Hourly, *lo, hi, None)
                        .await?;
                    for day in &missing_days {
                        let day_end = Period::Daily.bucket(*day).end_exclusive();
                        for h in buckets_within(Period::Hourly, *day, day_end) {
                            match stored_hours.get(&h) {
                                Some(item) => {
                                    hours.insert(h, (item.stats.clone(), false));
                                }
                                None => wanted.push(h),
                            }
                        }
                    }
                }
            }
        }
        let candidates = self.unexported(&wanted).await?;
        let reading = if candidates.len() > MAX_PARTIAL_HOURS {
            let past = candidates[MAX_PARTIAL_HOURS];
            if q.format == Format::Wide {
                return Err(ApiError::bad(
                    "to",
                    format!(
                        "more than {MAX_PARTIAL_HOURS} hours of the range are not recomputed \
                         by the export yet (is it stopped or behind?), more than one request \
                         reads from their partials; narrow from/to or page with format=rows"
                    ),
                ));
            }
            // The page ends at the bucket holding the first hour past the bound.
            end = period
                .bucket(past)
                .start()
                .max(period.bucket(start).end_exclusive());
            buckets.retain(|b, _| *b < end);
            hours.retain(|h, _| *h < end);
            &candidates[..MAX_PARTIAL_HOURS]
        } else {
            &candidates[..]
        };
        let reading: Vec<Timestamp> = reading.iter().copied().filter(|h| *h < end).collect();
        for (h, folded) in self.partial_hours(tag, metric, &reading).await? {
            hours.insert(h, folded);
        }
        for (h, (stats, open)) in hours {
            let b = period.bucket(h).start();
            let cell = buckets.entry(b).or_insert((Stats::EMPTY, None, false));
            cell.0.merge(&stats);
            cell.2 |= open;
        }
        let mut w = Walk {
            buckets: Buckets::new(),
            seen: BTreeSet::new(),
            end,
        };
        for (b, (stats, devices, open)) in buckets {
            if stats.count == 0 {
                continue;
            }
            w.seen.insert(metric.clone());
            w.buckets.entry(b).or_default().insert(
                metric.clone(),
                Acc::from_stats(&stats).of_group(devices, open),
            );
        }
        Ok(w)
    }

    /// The group's stored buckets of `period` whose start lies in `[from, to)`, by start; at
    /// most about `most` of them (then `true`: there may be more).
    async fn group_buckets(
        &self,
        tag: &Tag,
        metric: &MetricName,
        period: Period,
        from: Timestamp,
        to: Timestamp,
        most: Option<usize>,
    ) -> Result<(BTreeMap<Timestamp, GroupBucketItem>, bool), ApiError> {
        let mut out = BTreeMap::new();
        let Some(last) = to.pred().filter(|l| *l >= from) else {
            return Ok((out, false));
        };
        let spec = QuerySpec::table(
            keys::group_pk(tag),
            SkRange::Between(
                keys::group_bucket_sk(metric, period.bucket(from)),
                keys::group_bucket_sk(metric, period.bucket(last)),
            ),
            true,
        );
        let mut after = None;
        loop {
            let room = most.map_or(BUCKET_PAGE, |m| {
                i32::try_from(m.saturating_sub(out.len()).clamp(1, BUCKET_PAGE as usize))
                    .unwrap_or(BUCKET_PAGE)
            });
            let page = self.store.query(&spec, after, room).await?;
            for item in page.items {
                let item: GroupBucketItem = tidemark_store::from_item(item)?;
                if let Some(b) = item.bucket() {
                    out.insert(b.start(), item);
                }
            }
            after = page.last_key;
            if after.is_none() {
                return Ok((out, false));
            }
            if most.is_some_and(|m| out.len() >= m) {
                return Ok((out, true));
            }
        }
    }

    /// Of `hours` (starts, ascending), those that may hold readings the export has not
    /// recomputed yet: not passed by its cursor (or marked dirty), within the partials' TTL
    /// and not further ahead than a reading can be.
    async fn unexported(&self, hours: &[Timestamp]) -> Result<Vec<Timestamp>, ApiError> {
        let now = self.now();
        let oldest = now
            .minus_millis(i64::from(GROUP_PARTIAL_TTL_DAYS) * 24 * HOUR_MS + HOUR_MS)
            .unwrap_or(Timestamp::MIN)
            .max(self.config.retention_start(now))
            .hour_start();
        let newest = self.config.layout_lead.settled_until(now);
        let hours: Vec<Timestamp> = hours
            .iter()
            .copied()
            .filter(|h| *h >= oldest && *h <= newest)
            .collect();
        let (Some(lo), Some(hi)) = (hours.first(), hours.last()) else {
            return Ok(hours);
        };
        let exported = self.exported(*lo, *hi).await?;
        Ok(hours.into_iter().filter(|h| !exported.passed(*h)).collect())
    }

    /// The export's cursor, and its dirty hours in `[lo, hi]` (only read when the cursor
    /// passed `lo`).
    async fn exported(&self, lo: Timestamp, hi: Timestamp) -> Result<Exported, ApiError> {
        let cursor = match self.store.get(EntityKey::ExportCursor.key(), false).await? {
            Some(item) => Some(tidemark_store::from_item::<ExportCursorItem>(item)?.hour),
            None => None,
        };
        let mut dirty = BTreeSet::new();
        if let Some(c) = cursor.filter(|c| *c >= lo) {
            let spec = QuerySpec::table(
                keys::EXPORT_PK.to_owned(),
                SkRange::Between(
                    EntityKey::ExportDirty(lo).key().sk,
                    EntityKey::ExportDirty(hi.min(c)).key().sk,
                ),
                true,
            );
            for item in self.query_all(&spec).await? {
                if let Ok(EntityKey::ExportDirty(h)) = parse_key(&item) {
                    dirty.insert(h);
                }
            }
        }
        Ok(Exported { cursor, dirty })
    }

    /// Each of `hours` folded from its partials, those that have any of `metric`; `true`:
    /// open (not yet recomputed).
    async fn partial_hours(
        &self,
        tag: &Tag,
        metric: &MetricName,
        hours: &[Timestamp],
    ) -> Result<Vec<(Timestamp, (Stats, bool))>, ApiError> {
        let now = self.now();
        let reads = hours.iter().copied().map(|h| async move {
            let spec = QuerySpec::table(keys::group_partial_pk(tag, h), SkRange::All, true);
            let parts = self
                .query_all(&spec)
                .await?
                .into_iter()
                .filter(|i| !expired(i, now))
                .map(tidemark_store::from_item::<GroupPartialItem>)
                .collect::<Result<Vec<_>, _>>()?;
            Ok::<_, ApiError>(fold_partials(&parts, metric).map(|f| (h, (f.stats, true))))
        });
        let folded: Vec<Option<_>> = futures::stream::iter(reads)
            .buffered(PARTIAL_CONCURRENCY)
            .try_collect()
            .await?;
        Ok(folded.into_iter().flatten().collect())
    }

    /// The group's last reading before `start` and first from `end` on (`linear`), from its
    /// nearest recomputed hours: what `locf` and `linear` fill with.
    async fn group_edges(
        &self,
        tag: &Tag,
        metric: &MetricName,
        start: Timestamp,
        end: Timestamp,
        fill: Fill,
    ) -> Result<Edges, ApiError> {
        let lo = self.config.retention_start(self.now());
        let nearest = |from: Timestamp, to: Timestamp, forward: bool| async move {
            if from > to {
                return Ok::<_, ApiError>(None);
            }
            let spec = QuerySpec::table(
                keys::group_pk(tag),
                SkRange::Between(
                    keys::group_bucket_sk(metric, Period::Hourly.bucket(from)),
                    keys::group_bucket_sk(metric, Period::Hourly.bucket(to)),
                ),
                forward,
            );
            let page = self.store.query(&spec, None, 1).await?;
            Ok(match page.items.into_iter().next() {
                Some(item) => {
                    let item: GroupBucketItem = tidemark_store::from_item(item)?;
                    if forward {
                        item.stats.first
                    } else {
                        item.stats.last
                    }
                }
                None => None,
            })
        };
        let mut before = BTreeMap::new();
        if let Some(last) = Period::Hourly.bucket(start).start().pred()
            && let Some(p) = nearest(lo, last, false).await?
        {
            before.insert(metric.clone(), p);
        }
        let mut after = BTreeMap::new();
        if fill == Fill::Linear
            && let Some(p) = nearest(end, Timestamp::MAX, true).await?
        {
            after.insert(metric.clone(), p);
        }
        Ok((before, after))
    }
}

/// The starts of the buckets of `period` that start in `[from, to)`.
fn buckets_within(period: Period, from: Timestamp, to: Timestamp) -> Vec<Timestamp> {
    let mut out = Vec::new();
    let first: Bucket = period.bucket(from);
    let mut t = if first.start() < from {
        first.end_exclusive()
    } else {
        first.start()
    };
    while t < to {
        out.push(t);
        let next = period.bucket(t).end_exclusive();
        if next <= t {
            break;
        }
        t = next;
    }
    out
}

fn parse_key(item: &Item) -> Result<EntityKey, ()> {
    let text = |a: &str| match item.get(a) {
        Some(aws_sdk_dynamodb::types::AttributeValue::S(s)) => Ok(s.as_str()),
        _ => Err(()),
    };
    EntityKey::parse(
        text(tidemark_schema::table::attr::PK)?,
        text(tidemark_schema::table::attr::SK)?,
    )
    .map_err(|_| ())
}

/// Index entries one page of `GET /latest?tag=` evaluates at most when it filters by further
/// tags: a page may then be short, and its cursor goes on.
const LATEST_MAX_EVALUATED: usize = 2_000;

impl<S: Store> App<S> {
    /// The latest reading of every device holding all of `tag` (`GET /latest?tag=`), a page
    /// of `limit` members at a time: the first tag's index (`TAG#<tag>#<n>`, 16 partitions
    /// one after another, in device ID order within each), the others filtered from its
    /// entries, then each member's newest reading as `GET /latest?ids=` reads it. A member
    /// without an unexpired reading is left out, so a page may be short; the cursor goes on.
    pub(super) async fn latest_of_tag(&self, p: &Params) -> Result<Reply, ApiError> {
        let tags = validate::tag_filters(p)?;
        let limit = validate::limit(p)?;
        let names: Vec<String> = tags.iter().map(Tag::to_string).collect();
        let scope = format!("latest|{}|{limit}", names.join(","));
        let from = match self.open(&scope, p)? {
            None => None,
            Some(state) => Some(super::tagging::index_position(&state)?),
        };
        let (first, rest) = tags.split_first().ok_or_else(|| {
            ApiError::bad(
                "tag",
                "required: key:value (tag=site:A), repeated to match all",
            )
        })?;
        let caller = crate::access::Scope::caller();
        let page = index_page(
            &self.store,
            first,
            from,
            limit,
            LATEST_MAX_EVALUATED.max(limit),
            |entry| entry.tags.has_all(rest) && caller.sees(&entry.tags),
        )
        .await?;
        if page.unreadable > 0 {
            tracing::warn!(tag = %first, skipped = page.unreadable, "unreadable tag index entries left out of /latest");
        }
        let mut ids: Vec<DeviceId> = page.items.into_iter().map(|e| e.device_id).collect();
        if caller != crate::access::Scope::All {
            // The index lags a request that failed half-way: the device item decides.
            let devices = self.device_items(&ids).await?;
            ids.retain(|id| {
                devices
                    .get(id)
                    .is_some_and(|d| caller.sees(&super::tagging::stored_tags(d)))
            });
        }
        let (book, _) = LayoutBook::from_raw(self.store.batch_get(LayoutBook::keys(&ids)).await?);
        let items = self.newest_of(&ids, &book).await?;
        let cursor = page.next.map(|pos| {
            let state = CursorState {
                parts: vec![(pos.partition.to_string(), pos.after.map(|sk| vec![sk]))],
                ..CursorState::default()
            };
            self.cursor_key().seal(&scope, &state)
        });
        Ok(list(items, cursor))
    }
}
