//! Buckets laid out for the client: one cell per bucket and metric, empty buckets filled as
//! asked, rendered as rows (`{"time", "metric", <aggregate>…}`) or as one wide object per
//! bucket (`{"time", "<metric>.<aggregate>"…}`, what Grafana's Infinity data source reads).
//!
//! A filled cell (`"filled": true`) has `count` 0 and no `sum` or `stddev` (there are no
//! readings to describe); its value aggregates (`avg`, `min`, `max`, `first`, `last`,
//! percentiles) are `null` (`fill=null`), the metric's last reading before the bucket
//! (`locf`), or the value at the bucket's start on the straight line between that reading and
//! the first one after the bucket (`linear`). Neighbours are readings, not buckets, and may
//! lie outside the range asked, so the edges are right; without one the value is `null`.
//!
//! A group's buckets (`GET /groups/series`) also say how many members they count
//! (`"devices"`, where known; `"<metric>.devices"` wide) and whether they are still open
//! (`"open": true`: answered from partials, not yet recomputed).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use tidemark_schema::{MetricName, Timestamp};

use super::stats::Acc;
use super::{Aggregate, Fill};

/// A reading of one metric: when, and its value.
pub type Point = (Timestamp, f64);

/// One bucket's cells.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketRow {
    pub start: Timestamp,
    pub cells: Vec<Cell>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    pub metric: MetricName,
    /// In the order the aggregates were asked.
    pub values: Vec<Option<f64>>,
    pub filled: bool,
    /// A group's bucket: its members with a reading, where known.
    pub devices: Option<u64>,
    /// A group's bucket not yet recomputed (answered from partials).
    pub open: bool,
}

/// What a page of buckets is laid out from.
pub struct Layout<'a> {
    /// Bucket starts, ascending, every bucket of the page (empty ones too).
    pub grid: Vec<Timestamp>,
    pub buckets: &'a BTreeMap<Timestamp, BTreeMap<MetricName, Acc>>,
    /// The metrics to lay out, ascending.
    pub metrics: &'a [MetricName],
    pub aggregates: &'a [Aggregate],
    pub fill: Fill,
    /// Each metric's last reading before the page, and first one after it.
    pub before: &'a BTreeMap<MetricName, Point>,
    pub after: &'a BTreeMap<MetricName, Point>,
}

impl Layout<'_> {
    /// The page's buckets in time order; with `fill=none` a bucket without readings is left
    /// out, and so is a metric without readings in a bucket.
    pub fn rows(&self) -> Vec<BucketRow> {
        let mut rows: Vec<BucketRow> = self
            .grid
            .iter()
            .map(|start| BucketRow {
                start: *start,
                cells: Vec::new(),
            })
            .collect();
        for m in self.metrics {
            let next = self.next_points(m);
            let mut prev = self.before.get(m).copied();
            for (i, row) in rows.iter_mut().enumerate() {
                match self.buckets.get(&row.start).and_then(|b| b.get(m)) {
                    Some(acc) => {
                        row.cells.push(Cell {
                            metric: m.clone(),
                            values: self.aggregates.iter().map(|a| acc.value(*a)).collect(),
                            filled: false,
                            devices: acc.devices(),
                            open: acc.is_open(),
                        });
                        prev = acc.last();
                    }
                    None if self.fill == Fill::None => {}
                    None => {
                        let value = match self.fill {
                            Fill::Locf => prev.map(|p| p.1),
                            Fill::Linear => interpolate(prev, next[i], row.start),
                            Fill::None | Fill::Null => None,
                        };
                        row.cells.push(Cell {
                            metric: m.clone(),
                            values: self
                                .aggregates
                                .iter()
                                .map(|a| match a {
                                    Aggregate::Count => Some(0.0),
                                    a if a.is_value() => value,
                                    _ => None,
                                })
                                .collect(),
                            filled: true,
                            devices: None,
                            open: false,
                        });
                    }
                }
            }
        }
        rows.retain(|r| !r.cells.is_empty());
        rows
    }

    /// For each bucket of the grid, the metric's first reading after it (`linear` only).
    fn next_points(&self, m: &MetricName) -> Vec<Option<Point>> {
        let mut out = vec![None; self.grid.len()];
        if self.fill != Fill::Linear {
            return out;
        }
        let mut next = self.after.get(m).copied();
        for (i, start) in self.grid.iter().enumerate().rev() {
            out[i] = next;
            if let Some(acc) = self.buckets.get(start).and_then(|b| b.get(m)) {
                next = acc.first();
            }
        }
        out
    }
}

/// The value at `t` on the line from `a` to `b` (`t` held between them).
fn interpolate(a: Option<Point>, b: Option<Point>, t: Timestamp) -> Option<f64> {
    let ((t0, v0), (t1, v1)) = (a?, b?);
    let span = (t1.epoch_micros() - t0.epoch_micros()) as f64;
    if span <= 0.0 {
        return Some(v1);
    }
    let t = t.clamp(t0, t1);
    Some(v0 + (v1 - v0) * (t.epoch_micros() - t0.epoch_micros()) as f64 / span)
}

/// The first buckets of `rows` that hold at most `limit` cells (at least one bucket, however
/// many metrics it has).
pub fn within(rows: &[BucketRow], limit: usize) -> usize {
    let mut cells = 0;
    for (i, r) in rows.iter().enumerate() {
        cells += r.cells.len();
        if cells > limit && i > 0 {
            return i;
        }
    }
    rows.len()
}

fn number(agg: Aggregate, v: Option<f64>) -> Value {
    match (agg, v) {
        (_, None) => Value::Null,
        (Aggregate::Count, Some(n)) => json!(n as u64),
        (_, Some(x)) => json!(x),
    }
}

/// `{"time", "metric", <aggregate>…, "filled"?}` per cell, by time then metric.
pub fn render_rows(rows: &[BucketRow], aggregates: &[Aggregate]) -> Vec<Value> {
    let mut out = Vec::new();
    for r in rows {
        for c in &r.cells {
            let mut o = Map::new();
            o.insert("time".into(), json!(r.start.to_string()));
            o.insert("metric".into(), json!(c.metric.as_str()));
            for (a, v) in aggregates.iter().zip(&c.values) {
                o.insert(a.name(), number(*a, *v));
            }
            if let Some(n) = c.devices {
                o.insert("devices".into(), json!(n));
            }
            if c.open {
                o.insert("open".into(), json!(true));
            }
            if c.filled {
                o.insert("filled".into(), json!(true));
            }
            out.push(Value::Object(o));
        }
    }
    out
}

/// One object per bucket: `{"time", "<metric>.<aggregate>"…}`, every metric's keys present
/// (`null` where a metric has no cell), and `"filled": true` when no metric of the bucket
/// had readings. A group's answer also has `"<metric>.devices"` (members with a reading,
/// `null` where not known) and `"open": true` on a bucket not yet recomputed.
pub fn render_wide(rows: &[BucketRow], metrics: &[MetricName], aggregates: &[Aggregate]) -> Value {
    // Lookups by name, not scans: a bucket may hold tens of thousands of metrics.
    let counted: std::collections::BTreeSet<&MetricName> = rows
        .iter()
        .flat_map(|r| &r.cells)
        .filter(|c| c.devices.is_some())
        .map(|c| &c.metric)
        .collect();
    let out: Vec<Value> = rows
        .iter()
        .map(|r| {
            let mut o = Map::new();
            o.insert("time".into(), json!(r.start.to_string()));
            let cells: BTreeMap<&MetricName, &Cell> =
                r.cells.iter().map(|c| (&c.metric, c)).collect();
            for m in metrics {
                let cell = cells.get(m);
                for (i, a) in aggregates.iter().enumerate() {
                    let v = cell.and_then(|c| c.values[i]);
                    o.insert(format!("{}.{}", m.as_str(), a.name()), number(*a, v));
                }
                if counted.contains(m) {
                    let n = cell.and_then(|c| c.devices);
                    o.insert(format!("{}.devices", m.as_str()), json!(n));
                }
            }
            if r.cells.iter().any(|c| c.open) {
                o.insert("open".into(), json!(true));
            }
            if r.cells.iter().all(|c| c.filled) {
                o.insert("filled".into(), json!(true));
            }
            Value::Object(o)
        })
        .collect();
    Value::Array(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(min: i64) -> Timestamp {
        Timestamp::from_epoch_millis(1_776_643_200_000 + min * 60_000).unwrap()
    }

    fn m(s: &str) -> MetricName {
        MetricName::new(s).unwrap()
    }

    /// Minute buckets 0..6 with readings of `t` at 1:30 (10) and 4:30 (40); one reading
    /// before (at -2: 0) and one after (at 7: 70).
    fn layout_with(fill: Fill, f: impl FnOnce(&Layout)) {
        let mut buckets = BTreeMap::new();
        for (min, v) in [(1, 10.0), (4, 40.0)] {
            let t = at(min).plus_millis(30_000).unwrap();
            buckets.insert(at(min), BTreeMap::from([(m("t"), Acc::new(t, v, false))]));
        }
        let before = BTreeMap::from([(m("t"), (at(-2), 0.0))]);
        let after = BTreeMap::from([(m("t"), (at(7), 70.0))]);
        let metrics = [m("t")];
        let l = Layout {
            grid: (0..6).map(at).collect(),
            buckets: &buckets,
            metrics: &metrics,
            aggregates: &[Aggregate::Avg, Aggregate::Count, Aggregate::Sum],
            fill,
            before: &before,
            after: &after,
        };
        f(&l);
    }

    fn avgs(l: &Layout) -> Vec<(i64, Option<f64>, bool)> {
        l.rows()
            .iter()
            .map(|r| {
                let min = (r.start.epoch_millis() - 1_776_643_200_000) / 60_000;
                (min, r.cells[0].values[0], r.cells[0].filled)
            })
            .collect()
    }

    #[test]
    fn fill_none_leaves_empty_buckets_out() {
        layout_with(Fill::None, |l| {
            assert_eq!(avgs(l), [(1, Some(10.0), false), (4, Some(40.0), false)]);
        });
    }

    #[test]
    fn fill_null_marks_empty_buckets_with_no_values_and_a_zero_count() {
        layout_with(Fill::Null, |l| {
            let rows = l.rows();
            assert_eq!(rows.len(), 6);
            assert_eq!(rows[0].cells[0].values, [None, Some(0.0), None]);
            assert!(rows[0].cells[0].filled);
        });
    }

    #[test]
    fn locf_carries_the_last_reading_including_one_before_the_range() {
        layout_with(Fill::Locf, |l| {
            let got: Vec<Option<f64>> = avgs(l).iter().map(|r| r.1).collect();
            assert_eq!(
                got,
                [
                    Some(0.0),
                    Some(10.0),
                    Some(10.0),
                    Some(10.0),
                    Some(40.0),
                    Some(40.0)
                ]
            );
        });
    }

    #[test]
    fn linear_interpolates_between_neighbouring_readings_at_each_bucket_start() {
        layout_with(Fill::Linear, |l| {
            let got: Vec<Option<f64>> = avgs(l).iter().map(|r| r.1).collect();
            // 0:00 lies between (-2:00, 0) and (1:30, 10); 2:00 and 3:00 between (1:30, 10) and
            // (4:30, 40); 5:00 between (4:30, 40) and (7:00, 70).
            let want = [
                0.0 + 10.0 * 2.0 / 3.5,
                10.0,
                10.0 + 30.0 * 0.5 / 3.0,
                10.0 + 30.0 * 1.5 / 3.0,
                40.0,
                40.0 + 30.0 * 0.5 / 2.5,
            ];
            for (g, w) in got.iter().zip(want) {
                assert!((g.unwrap() - w).abs() < 1e-12, "{got:?}");
            }
        });
    }

    #[test]
    fn a_page_keeps_whole_buckets_within_its_limit() {
        layout_with(Fill::Null, |l| {
            let rows = l.rows();
            assert_eq!(within(&rows, 4), 4);
            assert_eq!(within(&rows, 0), 1);
            assert_eq!(within(&rows, 100), 6);
        });
    }

    #[test]
    fn wide_objects_name_each_metric_and_aggregate() {
        layout_with(Fill::Null, |l| {
            let v = render_wide(&l.rows(), l.metrics, l.aggregates);
            assert_eq!(v[1]["t.avg"], json!(10.0));
            assert_eq!(v[1]["t.count"], json!(1));
            assert_eq!(v[1].get("filled"), None);
            assert_eq!(v[0]["t.avg"], Value::Null);
            assert_eq!(v[0]["filled"], json!(true));
            assert_eq!(v[0]["time"], json!("2026-04-20T00:00:00.000000Z"));
        });
    }
}
