//! One bucket's readings of one metric, summarized exactly, from the readings themselves or
//! from a rollup.
//!
//! From readings, the sum is compensated (Neumaier) and the spread kept as Welford's running
//! mean and sum of squared deviations, so `sum`, `avg` and `stddev` stay within a few ulps of
//! a recomputation whatever the readings' order and magnitude. Percentiles are exact: the
//! bucket keeps its values only when a percentile is asked for. From a rollup
//! ([`Acc::from_stats`]), percentiles come from its quantile sketch (within
//! [`tidemark_schema::sketch::RELATIVE_ACCURACY`], clamped to the bucket's min and max), and
//! what the rollup does not hold (a sketch on a device without `percentiles: true`; the
//! spread, first and last of a rollup written before it kept them) has no value.

use tidemark_schema::{Sketch, Stats, Timestamp};

use super::Aggregate;

#[derive(Debug, Clone, PartialEq)]
pub struct Acc {
    count: u64,
    sum: f64,
    /// Neumaier's compensation for `sum`.
    carry: f64,
    min: f64,
    max: f64,
    mean: f64,
    /// Sum of squared deviations from the mean (Welford).
    m2: Option<f64>,
    first: Option<(Timestamp, f64)>,
    last: Option<(Timestamp, f64)>,
    values: Option<Vec<f64>>,
    sketch: Option<Sketch>,
    /// A group's bucket: its members with a reading, where known.
    devices: Option<u64>,
    /// A group's bucket answered from what the pipeline stored so far, not yet recomputed.
    open: bool,
}

impl Acc {
    /// A bucket holding one reading; `keep_values` when percentiles are asked for.
    pub fn new(at: Timestamp, v: f64, keep_values: bool) -> Acc {
        Acc {
            count: 1,
            sum: v,
            carry: 0.0,
            min: v,
            max: v,
            mean: v,
            m2: Some(0.0),
            first: Some((at, v)),
            last: Some((at, v)),
            values: keep_values.then(|| vec![v]),
            sketch: None,
            devices: None,
            open: false,
        }
    }

    /// A bucket as its rollup holds it.
    pub fn from_stats(s: &Stats) -> Acc {
        Acc {
            count: s.count,
            sum: s.sum,
            carry: 0.0,
            min: s.min,
            max: s.max,
            mean: s.avg(),
            m2: s.m2,
            first: s.first,
            last: s.last,
            values: None,
            sketch: s.sketch.clone(),
            devices: None,
            open: false,
        }
    }

    /// A group's bucket: how many members it has (where known), and whether it is still
    /// open (answered from partials, not yet recomputed).
    pub fn of_group(mut self, devices: Option<u64>, open: bool) -> Acc {
        self.devices = devices;
        self.open = open;
        self
    }

    pub fn devices(&self) -> Option<u64> {
        self.devices
    }

    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Adds a reading; readings come in time order, so the last one added is the latest.
    pub fn add(&mut self, at: Timestamp, v: f64) {
        self.count += 1;
        let t = self.sum + v;
        self.carry += if self.sum.abs() >= v.abs() {
            (self.sum - t) + v
        } else {
            (v - t) + self.sum
        };
        self.sum = t;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        let d = v - self.mean;
        self.mean += d / self.count as f64;
        if let Some(m2) = &mut self.m2 {
            *m2 += d * (v - self.mean);
        }
        if let Some(first) = self.first.as_mut().filter(|f| at < f.0) {
            *first = (at, v);
        }
        if let Some(last) = self.last.as_mut().filter(|l| at >= l.0) {
            *last = (at, v);
        }
        if let Some(values) = &mut self.values {
            values.push(v);
        }
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// Whether it can answer percentiles: it kept its values, or its rollup a sketch.
    pub fn has_quantiles(&self) -> bool {
        self.values.is_some() || self.sketch.is_some()
    }

    /// The latest reading in the bucket (what `locf` carries on).
    pub fn last(&self) -> Option<(Timestamp, f64)> {
        self.last
    }

    /// The earliest reading in the bucket (what `linear` interpolates towards).
    pub fn first(&self) -> Option<(Timestamp, f64)> {
        self.first
    }

    /// Sorts the kept values once, before percentiles are read.
    pub fn finish(&mut self) {
        if let Some(v) = &mut self.values {
            v.sort_by(f64::total_cmp);
        }
    }

    /// `agg` of the bucket: `None` where it has no value (`stddev` of one reading, a
    /// percentile of a bucket that did not keep its values).
    pub fn value(&self, agg: Aggregate) -> Option<f64> {
        let n = self.count as f64;
        Some(match agg {
            Aggregate::Count => n,
            Aggregate::Sum => self.sum + self.carry,
            Aggregate::Avg => (self.sum + self.carry) / n,
            Aggregate::Min => self.min,
            Aggregate::Max => self.max,
            Aggregate::Stddev if self.count < 2 => return None,
            Aggregate::Stddev => (self.m2? / (n - 1.0)).max(0.0).sqrt(),
            Aggregate::First => self.first?.1,
            Aggregate::Last => self.last?.1,
            Aggregate::P(q) => match (&self.values, &self.sketch) {
                (Some(v), _) => v[quantile_rank(q, v.len())],
                (None, Some(s)) => {
                    let rank = quantile_rank(q, usize::try_from(s.count()).ok()?);
                    s.value_at_rank(rank as u64)?.clamp(self.min, self.max)
                }
                (None, None) => return None,
            },
        })
    }
}

/// The rank of quantile `q` (hundredths) among `n` sorted values: the lower of the two around
/// `q·(n−1)`, the definition a quantile sketch's error is measured against.
pub fn quantile_rank(q: u8, n: usize) -> usize {
    (u64::from(q) * (n as u64).saturating_sub(1) / 100) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_epoch_millis(1_776_643_200_000 + s * 1000).unwrap()
    }

    fn acc(values: &[f64]) -> Acc {
        let mut a = Acc::new(at(0), values[0], true);
        for (i, v) in values.iter().enumerate().skip(1) {
            a.add(at(i as i64), *v);
        }
        a.finish();
        a
    }

    #[test]
    fn every_aggregate_matches_its_textbook_definition() {
        let a = acc(&[4.0, 8.0, 15.0, 16.0, 23.0, 42.0]);
        let v = |g| a.value(g).unwrap();
        assert_eq!(v(Aggregate::Count), 6.0);
        assert_eq!(v(Aggregate::Sum), 108.0);
        assert_eq!(v(Aggregate::Avg), 18.0);
        assert_eq!((v(Aggregate::Min), v(Aggregate::Max)), (4.0, 42.0));
        assert_eq!((v(Aggregate::First), v(Aggregate::Last)), (4.0, 42.0));
        // Sample variance: squared deviations 196+100+9+4+25+576 = 910, over n-1 = 5.
        assert!((v(Aggregate::Stddev) - (910.0f64 / 5.0).sqrt()).abs() < 1e-12);
        // Ranks floor(q·5): p50 → 2, p90 → 4, p99 → 4.
        assert_eq!(v(Aggregate::P(50)), 15.0);
        assert_eq!(v(Aggregate::P(90)), 23.0);
        assert_eq!(v(Aggregate::P(99)), 23.0);
    }

    #[test]
    fn one_reading_has_no_standard_deviation() {
        let a = acc(&[7.5]);
        assert_eq!(a.value(Aggregate::Stddev), None);
        assert_eq!(a.value(Aggregate::P(95)), Some(7.5));
    }

    #[test]
    fn large_offsets_do_not_cost_the_spread_its_precision() {
        // Values around 1e9 with a spread of 1: naive sum-of-squares loses it entirely.
        let values: Vec<f64> = (0..1000).map(|i| 1e9 + (i % 3) as f64).collect();
        let a = acc(&values);
        let mean = values.iter().sum::<f64>() / 1000.0;
        let exact = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 999.0).sqrt();
        let got = a.value(Aggregate::Stddev).unwrap();
        assert!(((got - exact) / exact).abs() < 1e-9, "{got} vs {exact}");
    }

    #[test]
    fn a_rollup_without_the_spread_answers_what_it_holds() {
        let old = Stats {
            count: 2,
            sum: 3.0,
            min: 1.0,
            max: 2.0,
            ..Stats::EMPTY
        };
        let a = Acc::from_stats(&old);
        assert_eq!(a.value(Aggregate::Avg), Some(1.5));
        assert_eq!(a.value(Aggregate::Stddev), None);
        assert_eq!(a.value(Aggregate::First), None);
        let mut new = Stats::at(at(0), 1.0);
        new.merge(&Stats::at(at(1), 2.0));
        let a = Acc::from_stats(&new);
        assert_eq!(a.value(Aggregate::Stddev), Some(0.5f64.sqrt()));
        assert_eq!(a.value(Aggregate::Last), Some(2.0));
        assert_eq!(a.value(Aggregate::P(50)), None);
    }

    #[test]
    fn a_sketched_rollup_answers_percentiles_within_the_sketch_accuracy() {
        let values: Vec<f64> = (0..3600)
            .map(|i| 15.0 + ((i * 7919) % 1000) as f64 / 50.0)
            .collect();
        let mut s = Stats::at_sketched(at(0), values[0]);
        for (i, v) in values.iter().enumerate().skip(1) {
            s.merge(&Stats::at_sketched(at(i as i64), *v));
        }
        let from_rollup = Acc::from_stats(&s);
        let exact = acc(&values);
        assert!(from_rollup.has_quantiles());
        for q in [50, 90, 95, 99] {
            let (got, want) = (
                from_rollup.value(Aggregate::P(q)).unwrap(),
                exact.value(Aggregate::P(q)).unwrap(),
            );
            assert!(
                (got - want).abs() <= tidemark_schema::sketch::RELATIVE_ACCURACY * want,
                "p{q}: {got} vs {want}"
            );
        }
        // Clamped to the bucket's extremes: p99 of a constant is the constant.
        let mut c = Stats::at_sketched(at(0), 20.0);
        c.merge(&Stats::at_sketched(at(1), 20.0));
        assert_eq!(Acc::from_stats(&c).value(Aggregate::P(99)), Some(20.0));
    }

    #[test]
    fn percentiles_are_absent_unless_values_were_kept() {
        let a = Acc::new(at(0), 1.0, false);
        assert_eq!(a.value(Aggregate::P(50)), None);
        assert_eq!(a.value(Aggregate::Avg), Some(1.0));
    }
}
