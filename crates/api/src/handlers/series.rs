//! A device's readings in time buckets (`GET /devices/{id}/series`, [`crate::series`]).
//!
//! A page of rows is a run of whole buckets read from where the previous page stopped, in one
//! walk of the readings or one query of the rollups: with `fill=none` it stops once it holds
//! `limit` rows, otherwise it covers the buckets `limit` rows can hold. Its cursor names the
//! next bucket and, without `metrics`, the metrics seen so far, so later pages fill them too.
//! A wide answer is the whole range at once. The readings summarized are bounded by
//! [`crate::ApiConfig::series_max_readings`] ([`series::MAX_READINGS`] deployed): a page of
//! rows ends at the first bucket it starts past them.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};

use http::StatusCode;
use tidemark_schema::{DeviceId, EntityKey, LayoutHistory, MetricName, Period, Timestamp, keys};
use tidemark_store::read::walk_readings_while;

use super::{Reply, bad_cursor, device_not_found, list};
use crate::App;
use crate::cursor::CursorState;
use crate::error::ApiError;
use crate::request::Params;
use crate::series::stats::Acc;
use crate::series::table::{self, Layout, Point};
use crate::series::{self, Aggregate, Fill, Format, SeriesQuery};
#[allow(unused_imports)]
use crate::store::traits::*;
use crate::store::{QuerySpec, SkRange, Store};

/// Each metric's neighbouring reading before a page and after it (`locf`, `linear`).
pub(super) type Edges = (BTreeMap<MetricName, Point>, BTreeMap<MetricName, Point>);

pub(super) type Buckets = BTreeMap<Timestamp, BTreeMap<MetricName, Acc>>;

/// Rollup items a query asks for at a time.
const ROLLUP_PAGE: usize = 100;

/// One page's walk: its buckets, the metrics in them, and where it ended.
pub(super) struct Walk {
    pub(super) buckets: Buckets,
    pub(super) seen: BTreeSet<MetricName>,
    /// Exclusive: the walk covered readings before it.
    pub(super) end: Timestamp,
}

impl Walk {
    /// Counts a reading into `bucket`, the metrics asked for only.
    fn add(
        &mut self,
        q: &SeriesQuery,
        bucket: Timestamp,
        at: Timestamp,
        values: BTreeMap<MetricName, f64>,
        keep_values: bool,
    ) {
        for (m, v) in values {
            if q.metrics.as_ref().is_some_and(|ms| !ms.contains(&m)) {
                continue;
            }
            self.seen.insert(m.clone());
            match self.buckets.entry(bucket).or_default().entry(m) {
                Entry::Occupied(mut e) => e.get_mut().add(at, v),
                Entry::Vacant(e) => {
                    e.insert(Acc::new(at, v, keep_values));
                }
            }
        }
    }
}

impl<S: Store> App<S> {
    pub(super) async fn series(&self, id: DeviceId, p: &Params) -> Result<Reply, ApiError> {
        let q = SeriesQuery::parse(p)?;
        let scope = format!("series|{id}|{}", q.scope());
        let opened = self.open(&scope, p)?;
        let first_page = opened.is_none();
        let (start, carried) = match opened {
            Some(state) => {
                let at = state.at.as_deref().ok_or_else(bad_cursor)?;
                let at = Timestamp::parse_canonical(at).map_err(|_| bad_cursor())?;
                let names = state
                    .names
                    .iter()
                    .map(|n| MetricName::new(n).map_err(|_| bad_cursor()))
                    .collect::<Result<BTreeSet<_>, _>>()?;
                (at, names)
            }
            None => (q.from, BTreeSet::new()),
        };
        // The device is read on the first page (does it exist?) and whenever its rollups
        // could serve percentiles (do they keep sketches?).
        let sketched = if first_page || (q.wants_percentiles() && q.rollup_period(true).is_some()) {
            self.device_percentiles(&id)
                .await?
                .ok_or_else(|| device_not_found(&id))?
        } else {
            false
        };
        let history = self.history_of(&id).await?;
        let walk = match q.rollup_period(sketched) {
            Some(period) => {
                self.series_rollups(&id, &history, &q, start, carried.len(), period)
                    .await?
            }
            None => {
                self.series_walk(&id, &history, &q, start, carried.len())
                    .await?
            }
        };
        let metrics: Vec<MetricName> = match &q.metrics {
            Some(ms) => ms
                .iter()
                .cloned()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect(),
            None => carried.union(&walk.seen).cloned().collect(),
        };
        let edges = match q.fill {
            Fill::Locf | Fill::Linear => {
                let page_start = series_start(&q, start);
                self.edges(&id, &history, &metrics, page_start, walk.end, q.fill)
                    .await?
            }
            Fill::None | Fill::Null => Default::default(),
        };
        self.series_page(&scope, &q, start, &metrics, &walk, &edges)
    }

    /// A page's buckets laid out on its grid (every bucket from `start` to the walk's end
    /// unless `fill=none`), rendered wide or as rows with the cursor to the next page: the
    /// same for a device's series and a group's. Its values are charged to the request's
    /// budget before anything is laid out ([`crate::budget::MAX_CELLS`]).
    pub(super) fn series_page(
        &self,
        scope: &str,
        q: &SeriesQuery,
        start: Timestamp,
        metrics: &[MetricName],
        walk: &Walk,
        (before, after): &Edges,
    ) -> Result<Reply, ApiError> {
        let grid: Vec<Timestamp> = if q.fill == Fill::None {
            walk.buckets.keys().copied().collect()
        } else {
            grid(q, start, walk.end)
        };
        crate::budget::charge_cells(
            answer_cells(q, &grid, walk, metrics),
            "narrow with metrics=, a shorter from/to, a coarser resolution or fewer aggregates=",
        )?;
        let layout = Layout {
            grid,
            buckets: &walk.buckets,
            metrics,
            aggregates: &q.aggregates,
            fill: q.fill,
            before,
            after,
        };
        let rows = layout.rows();
        if q.format == Format::Wide {
            return Ok((
                StatusCode::OK,
                table::render_wide(&rows, metrics, &q.aggregates),
            ));
        }
        let cut = table::within(&rows, q.limit);
        let next = match rows.get(cut) {
            Some(r) => Some(r.start),
            None => (walk.end < q.to).then_some(walk.end),
        };
        let cursor = next.map(|at| {
            let state = CursorState {
                at: Some(at.to_string()),
                names: if q.metrics.is_none() && q.fill != Fill::None {
                    metrics.iter().map(|m| m.as_str().to_owned()).collect()
                } else {
                    Vec::new()
                },
                ..CursorState::default()
            };
            self.cursor_key().seal(scope, &state)
        });
        Ok(list(
            table::render_rows(&rows[..cut], &q.aggregates),
            cursor,
        ))
    }

    /// Reads the page's readings from `start` into buckets: to the end of the range for a
    /// wide answer, else as far as `limit` rows need.
    async fn series_walk(
        &self,
        id: &DeviceId,
        history: &LayoutHistory,
        q: &SeriesQuery,
        start: Timestamp,
        known_metrics: usize,
    ) -> Result<Walk, ApiError> {
        let res = q.resolution;
        let end = page_end(q, start, known_metrics);
        let max = self.config.series_max_readings;
        let rows = q.format == Format::Rows;
        let stop_early = rows && q.fill == Fill::None;
        let keep_values = q.aggregates.iter().any(|a| matches!(a, Aggregate::P(_)));
        let lo = self.config.retention_start(self.now()).max(start);
        let mut w = Walk {
            buckets: Buckets::new(),
            seen: BTreeSet::new(),
            end,
        };
        if lo >= end {
            return Ok(w);
        }
        // Cells of the buckets before the current one, and the current bucket.
        let mut done = 0usize;
        let mut current: Option<Timestamp> = None;
        let mut stopped_at = None;
        let (mut read, mut in_bucket, mut too_big) = (0usize, 0usize, false);
        // A wide answer reads the whole range, at most MAX_READINGS; a page of rows ends at
        // the first bucket it starts past them, so it reads at most twice that.
        let limit = if rows { 2 * max + 1 } else { max + 1 };
        let walked = self
            .walk_range(id, history, lo, end, limit, |at, values| {
                let Ok(bucket) = Timestamp::from_epoch_micros(res.bucket_of(at)) else {
                    return true;
                };
                if current != Some(bucket) {
                    if let Some(c) = current {
                        done += w.buckets.get(&c).map_or(0, BTreeMap::len);
                    }
                    // A page of rows ends at a bucket's start: once it holds its rows, or
                    // once it has read its share of readings.
                    if (stop_early && done >= q.limit) || (rows && read >= max) {
                        stopped_at = Some(bucket);
                        return false;
                    }
                    current = Some(bucket);
                    in_bucket = 0;
                }
                read += 1;
                in_bucket += 1;
                if in_bucket > max {
                    too_big = true;
                    return false;
                }
                w.add(q, bucket, at, values, keep_values);
                true
            })
            .await?;
        if too_big || (!rows && walked.readings > max) {
            return Err(too_many(q, max));
        }
        if let Some(b) = stopped_at {
            w.end = b;
        }
        if walked.unreadable > 0 {
            tracing::warn!(device = %id, skipped = walked.unreadable, "unreadable readings left out of a series");
        }
        for bucket in w.buckets.values_mut() {
            bucket.values_mut().for_each(Acc::finish);
        }
        Ok(w)
    }

    /// Whether the device keeps quantile sketches in its rollups (`None`: no such device).
    async fn device_percentiles(&self, id: &DeviceId) -> Result<Option<bool>, ApiError> {
        Ok(self.device_item(id, false).await?.map(|item| {
            item.get(tidemark_schema::field::PERCENTILES)
                .and_then(|v| v.as_bool().ok())
                .is_some_and(|b| *b)
        }))
    }

    /// A page of hourly or daily buckets from the rollups, read as `GET /aggregates` reads
    /// them (pages merged, an open hour from its readings, an open day from its hours). A
    /// bucket that `from` or `to` cuts, and one asked for percentiles whose rollup keeps no
    /// sketch (an open hour, a day with one, a rollup from before the device had
    /// `percentiles: true`), is taken from its readings inside the range.
    async fn series_rollups(
        &self,
        id: &DeviceId,
        history: &LayoutHistory,
        q: &SeriesQuery,
        start: Timestamp,
        known_metrics: usize,
        period: Period,
    ) -> Result<Walk, ApiError> {
        let max = self.config.series_max_readings;
        let bound = page_end(q, start, known_metrics);
        // Unfilled rows stop once they hold `limit` rows: a rollup item is one bucket, of as
        // many rows as it has metrics (asked for, or seen so far).
        let unfilled_rows = q.format == Format::Rows && q.fill == Fill::None;
        let mut width = q.metrics.as_ref().map_or(known_metrics, Vec::len);
        let most = |width: usize| unfilled_rows.then(|| (q.limit / width.max(1)).max(1));
        let spec = QuerySpec::table(
            keys::device_pk(id),
            SkRange::Between(
                keys::aggregate_sk(period.bucket(start)),
                keys::aggregate_sk(period.bucket(bound.pred().unwrap_or(bound))),
            ),
            true,
        );
        let mut items = Vec::new();
        let mut after = None;
        let mut more = false;
        loop {
            let room = most(width).map_or(ROLLUP_PAGE, |m| {
                m.saturating_sub(items.len()).clamp(1, ROLLUP_PAGE)
            });
            let page = self.store.query(&spec, after, room as i32).await?;
            if q.metrics.is_none() {
                width = width.max(page.items.iter().map(metric_count).max().unwrap_or(0));
            }
            items.extend(page.items);
            after = page.last_key;
            if after.is_none() {
                break;
            }
            if most(width).is_some_and(|m| items.len() >= m) {
                more = true;
                break;
            }
        }
        let mut w = Walk {
            buckets: Buckets::new(),
            seen: BTreeSet::new(),
            end: bound,
        };
        for item in items {
            let rollup = self.bucket_content(item).await?;
            let Ok(EntityKey::Aggregate { bucket, .. }) = EntityKey::parse(&rollup.pk, &rollup.sk)
            else {
                continue;
            };
            if more {
                w.end = bucket.end_exclusive();
            }
            for (m, s) in rollup.metrics {
                if s.count == 0 || q.metrics.as_ref().is_some_and(|ms| !ms.contains(&m)) {
                    continue;
                }
                w.seen.insert(m.clone());
                w.buckets
                    .entry(bucket.start())
                    .or_default()
                    .insert(m, Acc::from_stats(&s));
            }
        }
        // The buckets `from` and `to` cut hold only the readings inside the range.
        let first = period.bucket(q.from);
        let last = period.bucket(q.to.pred().unwrap_or(q.to));
        let page_first = period.bucket(start).start();
        let mut redo: BTreeSet<Timestamp> = [
            (first, first.start() < q.from),
            (last, q.to < last.end_exclusive()),
        ]
        .into_iter()
        .filter(|(b, cut)| *cut && b.start() >= page_first && b.start() < w.end)
        .map(|(b, _)| b.start())
        .collect();
        let percentiles = q.wants_percentiles();
        if percentiles {
            redo.extend(
                w.buckets
                    .iter()
                    .filter(|(_, ms)| ms.values().any(|a| !a.has_quantiles()))
                    .map(|(b, _)| *b),
            );
        }
        for b in &redo {
            w.buckets.remove(b);
        }
        // One walk per run of adjacent buckets, all of them within the request's bound.
        let mut read = 0usize;
        for run in runs(&redo, period) {
            let lo = run
                .0
                .max(q.from)
                .max(self.config.retention_start(self.now()));
            let hi = run.1.min(q.to);
            if lo >= hi {
                continue;
            }
            let walked = self
                .walk_range(id, history, lo, hi, max + 1 - read, |at, values| {
                    w.add(q, period.bucket(at).start(), at, values, percentiles);
                    true
                })
                .await?;
            read += walked.readings;
            if read > max {
                return Err(too_many(q, max));
            }
        }
        for b in &redo {
            if let Some(ms) = w.buckets.get_mut(b) {
                ms.values_mut().for_each(Acc::finish);
            }
        }
        Ok(w)
    }

    /// At most `limit` readings of `[lo, end)`, oldest first, eventually consistent.
    async fn walk_range(
        &self,
        id: &DeviceId,
        history: &LayoutHistory,
        lo: Timestamp,
        end: Timestamp,
        limit: usize,
        visit: impl FnMut(Timestamp, BTreeMap<MetricName, f64>) -> bool,
    ) -> Result<tidemark_store::read::Walked, ApiError> {
        let last = end.pred().unwrap_or(end);
        let limit = Some(limit);
        Ok(walk_readings_while(
            &self.store,
            id,
            history,
            lo,
            last,
            false,
            limit,
            false,
            visit,
        )
        .await?)
    }

    /// Each metric's last reading before `start` (`locf`, `linear`) and first one from `end`
    /// on (`linear`), looking at most [`series::EDGE_READINGS`] readings each way.
    async fn edges(
        &self,
        id: &DeviceId,
        history: &LayoutHistory,
        metrics: &[MetricName],
        start: Timestamp,
        end: Timestamp,
        fill: Fill,
    ) -> Result<(BTreeMap<MetricName, Point>, BTreeMap<MetricName, Point>), ApiError> {
        let lo = self.config.retention_start(self.now());
        let nearest = |from: Timestamp, to: Timestamp, newest_first: bool| async move {
            let mut found: BTreeMap<MetricName, Point> = BTreeMap::new();
            if from > to || metrics.is_empty() {
                return Ok::<_, ApiError>(found);
            }
            walk_readings_while(
                &self.store,
                id,
                history,
                from,
                to,
                newest_first,
                Some(series::EDGE_READINGS),
                false,
                |at, values| {
                    for (m, v) in values {
                        if metrics.contains(&m) {
                            found.entry(m).or_insert((at, v));
                        }
                    }
                    found.len() < metrics.len()
                },
            )
            .await?;
            Ok(found)
        };
        let before = match start.pred() {
            Some(last) if last >= lo => nearest(lo, last, true).await?,
            _ => BTreeMap::new(),
        };
        let after = if fill == Fill::Linear {
            nearest(end.max(lo), Timestamp::MAX, false).await?
        } else {
            BTreeMap::new()
        };
        Ok((before, after))
    }
}

/// Adjacent buckets of `period` (by start) as `[start, end)` runs.
fn runs(starts: &BTreeSet<Timestamp>, period: Period) -> Vec<(Timestamp, Timestamp)> {
    let mut out: Vec<(Timestamp, Timestamp)> = Vec::new();
    for s in starts {
        let end = period.bucket(*s).end_exclusive();
        match out.last_mut() {
            Some(run) if run.1 == *s => run.1 = end,
            _ => out.push((*s, end)),
        }
    }
    out
}

/// The metrics a rollup item holds (as stored, before its pages are merged).
fn metric_count(item: &tidemark_store::Item) -> usize {
    item.get(tidemark_schema::field::METRICS)
        .and_then(|v| v.as_m().ok())
        .map_or(0, |m| m.len())
}

/// Where a page ends at most: the range's end, or for filled rows as many buckets as
/// `limit` rows of the metrics known so far take (one at least).
pub(super) fn page_end(q: &SeriesQuery, start: Timestamp, known_metrics: usize) -> Timestamp {
    let res = q.resolution;
    match (q.format, q.fill) {
        (Format::Rows, Fill::Null | Fill::Locf | Fill::Linear) => {
            let width = q.metrics.as_ref().map_or(known_metrics, Vec::len).max(1);
            let buckets = (q.limit / width).max(1) as i64;
            Timestamp::from_epoch_micros(res.bucket_of(start) + buckets * res.micros())
                .map_or(q.to, |t| t.min(q.to))
        }
        _ => q.to,
    }
}

/// Values a page's answer holds, counted before it is laid out: a wide answer writes every
/// metric's aggregates for every bucket of `grid`; rows hold one cell per metric of a bucket
/// (every metric when filled), for the buckets a page keeps ([`table::within`]: whole
/// buckets up to `limit` rows, one at least), each of as many values as aggregates.
fn answer_cells(q: &SeriesQuery, grid: &[Timestamp], walk: &Walk, metrics: &[MetricName]) -> u64 {
    let aggregates = q.aggregates.len() as u64;
    if q.format == Format::Wide {
        return (grid.len() as u64)
            .saturating_mul(metrics.len() as u64)
            .saturating_mul(aggregates);
    }
    let mut rows = 0usize;
    for (i, b) in grid.iter().enumerate() {
        let n = if q.fill == Fill::None {
            walk.buckets.get(b).map_or(0, BTreeMap::len)
        } else {
            metrics.len()
        };
        if rows + n > q.limit && i > 0 && rows > 0 {
            break;
        }
        rows += n;
    }
    (rows as u64).saturating_mul(aggregates)
}

/// Where a page's readings start: the range's `from` on the first page (which may lie inside
/// a bucket), a bucket's start after that.
fn series_start(q: &SeriesQuery, start: Timestamp) -> Timestamp {
    start.max(q.from)
}

/// Every bucket start from the one holding `start` up to `end` (exclusive).
fn grid(q: &SeriesQuery, start: Timestamp, end: Timestamp) -> Vec<Timestamp> {
    let res = q.resolution;
    let mut out = Vec::new();
    let mut b = res.bucket_of(start);
    while b < end.epoch_micros() {
        match Timestamp::from_epoch_micros(b) {
            Ok(t) => out.push(t),
            Err(_) => break,
        }
        b += res.micros();
    }
    out
}

fn too_many(q: &SeriesQuery, max: usize) -> ApiError {
    let (param, what) = match q.format {
        Format::Wide => ("to", "the range"),
        Format::Rows => ("resolution", "one bucket"),
    };
    ApiError::bad(
        param,
        format!(
            "{what} holds more than {} readings to summarize in one request; narrow from/to{}",
            max,
            if q.format == Format::Rows {
                " or choose a finer resolution"
            } else {
                " or page with format=rows"
            }
        ),
    )
}
