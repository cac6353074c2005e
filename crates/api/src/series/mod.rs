//! `GET /devices/{id}/series`: a device's readings summarized in UTC-aligned time buckets
//! (docs/design.md §6). [`SeriesQuery`] is the request, checked whole before anything is
//! read; [`stats`] summarizes a bucket exactly; [`table`] lays the buckets out as rows or as
//! one wide object per bucket, filling empty buckets as asked.
//!
//! Buckets of an hour or a day come from the rollups ([`SeriesQuery::rollup_period`]);
//! every other bucket, any bucket the range cuts, and any request for a percentile of a
//! device whose rollups keep no quantile sketch is computed from the stored readings, read
//! with the same walk the rollups role summarizes
//! ([`tidemark_store::read::walk_readings_while`]). Each aggregate equals a recomputation
//! from the table, but percentiles from a sketch, which are within 1 % of it. The readings
//! one request summarizes are bounded ([`MAX_READINGS`]): a page of rows ends at a bucket
//! boundary past them, and a wide answer or a single bucket that needs more is a 400 that
//! says what to narrow.

pub mod stats;
pub mod table;

use tidemark_schema::{MetricName, Timestamp};

use crate::error::ApiError;
use crate::request::Params;
use crate::validate;

/// Readings a wide answer, or a single bucket, may summarize; a page of rows ends at the first
/// bucket it starts past them (so it reads at most twice as many). About a day and a quarter
/// of a 1 Hz device, read in about a second and a half (`bench/SERIES.md`), well inside the
/// API's deadline.
pub const MAX_READINGS: usize = 120_000;
/// `maxPoints` when not given, and its upper bound.
pub const DEFAULT_MAX_POINTS: usize = 1_000;
pub const MAX_MAX_POINTS: usize = 10_000;
/// Readings looked at before a page and after it for `fill=locf|linear` (per page, per
/// side): enough to find each metric's neighbour for devices that report their metrics
/// together; a metric not seen within them is not filled at that edge.
pub const EDGE_READINGS: usize = 1_000;

/// A bucket width.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Resolution {
    M1,
    M5,
    M15,
    H1,
    D1,
}

impl Resolution {
    pub const ALL: [Resolution; 5] = [
        Resolution::M1,
        Resolution::M5,
        Resolution::M15,
        Resolution::H1,
        Resolution::D1,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Resolution::M1 => "1m",
            Resolution::M5 => "5m",
            Resolution::M15 => "15m",
            Resolution::H1 => "1h",
            Resolution::D1 => "1d",
        }
    }

    pub fn micros(self) -> i64 {
        const MIN: i64 = 60_000_000;
        match self {
            Resolution::M1 => MIN,
            Resolution::M5 => 5 * MIN,
            Resolution::M15 => 15 * MIN,
            Resolution::H1 => 60 * MIN,
            Resolution::D1 => 1_440 * MIN,
        }
    }

    /// The start of the bucket holding `t` (buckets align to the epoch, so to UTC days).
    pub fn bucket_of(self, t: Timestamp) -> i64 {
        let us = t.epoch_micros();
        us - us.rem_euclid(self.micros())
    }

    /// Buckets that `[from, to)` touches (`from < to`).
    pub fn buckets(self, from: Timestamp, to: Timestamp) -> usize {
        let last = to.epoch_micros() - 1;
        let n = (last - last.rem_euclid(self.micros()) - self.bucket_of(from)) / self.micros();
        usize::try_from(n).map_or(usize::MAX, |n| n.saturating_add(1))
    }
}

/// A summary of a bucket's readings of one metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aggregate {
    Count,
    Sum,
    Avg,
    Min,
    Max,
    Stddev,
    First,
    Last,
    /// A quantile, in hundredths.
    P(u8),
}

impl Aggregate {
    pub const NAMES: &'static str =
        "count, sum, avg, min, max, stddev, first, last, p50, p90, p95, p99";

    pub fn parse(s: &str) -> Option<Aggregate> {
        Some(match s {
            "count" => Aggregate::Count,
            "sum" => Aggregate::Sum,
            "avg" => Aggregate::Avg,
            "min" => Aggregate::Min,
            "max" => Aggregate::Max,
            "stddev" => Aggregate::Stddev,
            "first" => Aggregate::First,
            "last" => Aggregate::Last,
            "p50" => Aggregate::P(50),
            "p90" => Aggregate::P(90),
            "p95" => Aggregate::P(95),
            "p99" => Aggregate::P(99),
            _ => return None,
        })
    }

    pub fn name(self) -> String {
        match self {
            Aggregate::Count => "count".into(),
            Aggregate::Sum => "sum".into(),
            Aggregate::Avg => "avg".into(),
            Aggregate::Min => "min".into(),
            Aggregate::Max => "max".into(),
            Aggregate::Stddev => "stddev".into(),
            Aggregate::First => "first".into(),
            Aggregate::Last => "last".into(),
            Aggregate::P(q) => format!("p{q}"),
        }
    }

    /// Takes the value of a reading when its bucket is filled (`locf`, `linear`): what
    /// describes the readings' values rather than how many there were.
    pub fn is_value(self) -> bool {
        !matches!(self, Aggregate::Count | Aggregate::Sum | Aggregate::Stddev)
    }
}

/// What an empty bucket becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    None,
    Null,
    Locf,
    Linear,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Rows,
    Wide,
}

/// A checked `series` request.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesQuery {
    pub from: Timestamp,
    /// Exclusive.
    pub to: Timestamp,
    pub resolution: Resolution,
    /// `None`: every metric the device has in the range.
    pub metrics: Option<Vec<MetricName>>,
    pub aggregates: Vec<Aggregate>,
    pub fill: Fill,
    pub format: Format,
    /// Rows a page holds at most (whole buckets; at least one bucket).
    pub limit: usize,
}

fn keyword<T: Copy>(
    p: &Params,
    name: &str,
    default: T,
    table: &[(&str, T)],
) -> Result<T, ApiError> {
    let Some(v) = p.get(name) else {
        return Ok(default);
    };
    table
        .iter()
        .find(|(k, _)| *k == v)
        .map(|(_, t)| *t)
        .ok_or_else(|| {
            let names: Vec<&str> = table.iter().map(|(k, _)| *k).collect();
            ApiError::bad(name, format!("{v:?} is not one of: {}", names.join(", ")))
        })
}

/// A comma-separated list: no empty entries, duplicates once, in the order given.
fn list<'a>(name: &str, v: &'a str) -> Result<Vec<&'a str>, ApiError> {
    let mut out: Vec<&str> = Vec::new();
    for part in v.split(',') {
        if part.is_empty() {
            return Err(ApiError::bad(name, "an empty entry in the list"));
        }
        if !out.contains(&part) {
            out.push(part);
        }
    }
    Ok(out)
}

impl SeriesQuery {
    pub fn parse(p: &Params) -> Result<SeriesQuery, ApiError> {
        let required = |name: &str| {
            validate::time(p, name)?
                .ok_or_else(|| ApiError::bad(name, "required (RFC 3339 or epoch milliseconds)"))
        };
        let from = required("from")?;
        let to = required("to")?;
        if from >= to {
            return Err(ApiError::bad(
                "from",
                format!("from ({from}) must be before to ({to}), which is exclusive"),
            ));
        }
        let max_points = match p.get("maxPoints") {
            None => DEFAULT_MAX_POINTS,
            Some(s) => s
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=MAX_MAX_POINTS).contains(n))
                .ok_or_else(|| {
                    ApiError::bad(
                        "maxPoints",
                        format!("{s:?} is not a whole number from 1 to {MAX_MAX_POINTS}"),
                    )
                })?,
        };
        let format = keyword(
            p,
            "format",
            Format::Rows,
            &[("rows", Format::Rows), ("wide", Format::Wide)],
        )?;
        let resolution = match p.get("resolution") {
            None | Some("auto") => Resolution::ALL
                .into_iter()
                .find(|r| r.buckets(from, to) <= max_points)
                .ok_or_else(|| {
                    ApiError::bad(
                        "maxPoints",
                        format!(
                            "even daily buckets over this range are more than {max_points}; \
                             raise maxPoints or narrow from/to"
                        ),
                    )
                })?,
            Some(s) => Resolution::ALL
                .into_iter()
                .find(|r| r.as_str() == s)
                .ok_or_else(|| {
                    ApiError::bad(
                        "resolution",
                        format!("{s:?} is not one of: 1m, 5m, 15m, 1h, 1d, auto"),
                    )
                })?,
        };
        if format == Format::Wide {
            let n = resolution.buckets(from, to);
            if n > max_points {
                return Err(ApiError::bad(
                    "maxPoints",
                    format!(
                        "{n} buckets of {} are more than maxPoints ({max_points}); format=wide \
                         is not paged: use a coarser resolution, a narrower range or a larger \
                         maxPoints",
                        resolution.as_str()
                    ),
                ));
            }
            for name in ["cursor", "limit"] {
                if p.get(name).is_some() {
                    return Err(ApiError::bad(name, "format=wide is not paged"));
                }
            }
        }
        let metrics = p
            .get("metrics")
            .map(|v| {
                list("metrics", v)?
                    .into_iter()
                    .map(|m| {
                        MetricName::new(m)
                            .map_err(|e| ApiError::bad("metrics", format!("{m:?}: {e}")))
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        let aggregates = match p.get("aggregates") {
            None => vec![
                Aggregate::Avg,
                Aggregate::Min,
                Aggregate::Max,
                Aggregate::Count,
            ],
            Some(v) => list("aggregates", v)?
                .into_iter()
                .map(|a| {
                    Aggregate::parse(a).ok_or_else(|| {
                        ApiError::bad(
                            "aggregates",
                            format!("{a:?} is not one of: {}", Aggregate::NAMES),
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()?,
        };
        let fill = keyword(
            p,
            "fill",
            Fill::None,
            &[
                ("none", Fill::None),
                ("null", Fill::Null),
                ("locf", Fill::Locf),
                ("linear", Fill::Linear),
            ],
        )?;
        Ok(SeriesQuery {
            from,
            to,
            resolution,
            metrics,
            aggregates,
            fill,
            format,
            limit: validate::limit(p)?,
        })
    }

    /// Whether a percentile is asked for.
    pub fn wants_percentiles(&self) -> bool {
        self.aggregates.iter().any(|a| matches!(a, Aggregate::P(_)))
    }

    /// The rollups that serve this query's buckets: hours and days, unless a percentile is
    /// asked for of a device whose rollups keep no quantile sketch (`sketched`: it has
    /// `percentiles: true`); those buckets come from readings.
    pub fn rollup_period(&self, sketched: bool) -> Option<tidemark_schema::Period> {
        if self.wants_percentiles() && !sketched {
            return None;
        }
        match self.resolution {
            Resolution::H1 => Some(tidemark_schema::Period::Hourly),
            Resolution::D1 => Some(tidemark_schema::Period::Daily),
            _ => None,
        }
    }

    /// What a cursor of this query is bound to: everything but the cursor itself.
    pub fn scope(&self) -> String {
        let metrics = self.metrics.as_ref().map_or_else(
            || "*".to_owned(),
            |ms| ms.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(","),
        );
        let aggregates: Vec<String> = self.aggregates.iter().map(|a| a.name()).collect();
        format!(
            "{}|{}|{}|{metrics}|{}|{:?}|{:?}|{}",
            self.from,
            self.to,
            self.resolution.as_str(),
            aggregates.join(","),
            self.fill,
            self.format,
            self.limit
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    fn query(q: &[(&str, &str)]) -> Result<SeriesQuery, ApiError> {
        let pairs = q.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
        let p = Params::new(
            pairs,
            crate::routes::query_parameters(&http::Method::GET, "/devices/{id}/series").unwrap(),
        )?;
        SeriesQuery::parse(&p)
    }

    fn param_of(e: ApiError) -> String {
        match e {
            ApiError::BadRequest { param, .. } => param,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn buckets_count_every_aligned_bucket_the_range_touches() {
        let r = Resolution::M15;
        assert_eq!(
            r.buckets(t("2026-04-20T14:00:00Z"), t("2026-04-20T15:00:00Z")),
            4
        );
        assert_eq!(
            r.buckets(t("2026-04-20T14:05:00Z"), t("2026-04-20T15:00:00.000001Z")),
            5
        );
        assert_eq!(
            Resolution::D1.buckets(t("2026-04-20T23:59:00Z"), t("2026-04-21T00:01:00Z")),
            2
        );
    }

    #[test]
    fn auto_takes_the_finest_resolution_within_max_points() {
        let q = query(&[
            ("from", "2026-04-20T00:00:00Z"),
            ("to", "2026-04-21T00:00:00Z"),
        ])
        .unwrap();
        assert_eq!(q.resolution, Resolution::M5); // 288 buckets; 1m would be 1,440
        let q = query(&[
            ("from", "1776643200000"),
            ("to", "1776729600000"),
            ("maxPoints", "1440"),
        ])
        .unwrap();
        assert_eq!(q.resolution, Resolution::M1);
        assert_eq!(q.from, t("2026-04-20T00:00:00Z"));
    }

    #[test]
    fn every_bad_parameter_is_named() {
        let day = [
            ("from", "2026-04-20T00:00:00Z"),
            ("to", "2026-04-21T00:00:00Z"),
        ];
        let with = |extra: (&str, &str)| {
            let mut q = day.to_vec();
            q.push(extra);
            param_of(query(&q).unwrap_err())
        };
        assert_eq!(param_of(query(&day[..1]).unwrap_err()), "to");
        assert_eq!(
            param_of(
                query(&[
                    ("from", "2026-04-21T00:00:00Z"),
                    ("to", "2026-04-21T00:00:00Z")
                ])
                .unwrap_err()
            ),
            "from"
        );
        assert_eq!(with(("resolution", "2m")), "resolution");
        assert_eq!(with(("aggregates", "avg,median")), "aggregates");
        assert_eq!(with(("aggregates", "avg,,max")), "aggregates");
        assert_eq!(with(("metrics", "temp,bad name")), "metrics");
        assert_eq!(with(("fill", "previous")), "fill");
        assert_eq!(with(("format", "csv")), "format");
        assert_eq!(with(("maxPoints", "0")), "maxPoints");
        assert_eq!(with(("limit", "0")), "limit");
        // A day of minutes is 1,440 points, over the default 1,000, and wide is not paged.
        let mut q = day.to_vec();
        q.extend([("format", "wide"), ("resolution", "1m")]);
        assert_eq!(param_of(query(&q).unwrap_err()), "maxPoints");
        let mut q = day.to_vec();
        q.extend([("format", "wide"), ("limit", "10")]);
        assert_eq!(param_of(query(&q).unwrap_err()), "limit");
    }

    #[test]
    fn lists_keep_their_order_and_drop_repeats() {
        let q = query(&[
            ("from", "2026-04-20T00:00:00Z"),
            ("to", "2026-04-21T00:00:00Z"),
            ("aggregates", "p95,count,p95"),
            ("metrics", "b,a,b"),
        ])
        .unwrap();
        assert_eq!(q.aggregates, vec![Aggregate::P(95), Aggregate::Count]);
        let names: Vec<&str> = q
            .metrics
            .as_ref()
            .unwrap()
            .iter()
            .map(|m| m.as_str())
            .collect();
        assert_eq!(names, ["b", "a"]);
    }
}
