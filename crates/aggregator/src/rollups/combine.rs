//! Combining a batch: every reading change of the batch grouped by the aggregate items it
//! touches (the hour and the day of each reading), so each item is written at most once per
//! batch, never once per reading. What an item holds is not built from the records: a closed
//! hour is recomputed from the table and a day follows its hours ([`crate::rollups::hours`],
//! [`crate::rollups::days`]); the records say which items changed, and where a retry must start.
//!
//! A MODIFY of a reading is either a record adding metrics to a reading with the same device
//! and timestamp (ingest merges them into one item) or a correction of a metric's value (the
//! later record wins); a packed slot part's record is one change per reading its images differ
//! in ([`crate::records`]).

use std::collections::BTreeMap;

use tidemark_schema::{AggregateItem, Bucket, DeviceId, Key, MetricName, Period, Stats, Timestamp};

use crate::records::{Change, StreamChange, cmp_seq};

/// The raw readings of one bucket: time and metric values.
pub type BucketReadings = Vec<(Timestamp, BTreeMap<MetricName, f64>)>;

/// What one record does to one aggregate item.
#[derive(Debug, Clone, PartialEq)]
pub enum Delta {
    Add(BTreeMap<MetricName, f64>),
    Remove(BTreeMap<MetricName, f64>),
    Replace {
        old: BTreeMap<MetricName, f64>,
        new: BTreeMap<MetricName, f64>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Contribution {
    pub index: usize,
    pub source_pk: String,
    pub seq: String,
    pub at: Timestamp,
    pub delta: Delta,
}

/// Everything a batch does to one aggregate item.
#[derive(Debug, Clone, PartialEq)]
pub struct AggregatePlan {
    pub key: Key,
    pub device: DeviceId,
    pub bucket: Bucket,
    /// In stream order.
    pub contributions: Vec<Contribution>,
}

impl AggregatePlan {
    /// The first record of the batch behind this item (where a retry must start).
    pub fn first_index(&self) -> usize {
        self.contributions
            .iter()
            .map(|c| c.index)
            .min()
            .unwrap_or(0)
    }

    /// A plan for `bucket` of `device` with no records: what closing or folding it needs.
    pub fn bare(device: &DeviceId, bucket: Bucket) -> Self {
        AggregatePlan {
            key: AggregateItem::key_for(device, bucket),
            device: device.clone(),
            bucket,
            contributions: Vec::new(),
        }
    }
}

/// Groups the batch's changes by aggregate item (hourly and daily of each reading's time).
pub fn plan(changes: &[StreamChange]) -> Vec<AggregatePlan> {
    let mut plans: BTreeMap<Key, AggregatePlan> = BTreeMap::new();
    for sc in changes {
        let (img, delta) = match &sc.change {
            Change::Insert(i) => (i, Delta::Add(i.metrics.clone())),
            Change::Delete(i) => (i, Delta::Remove(i.metrics.clone())),
            Change::Correct { old, new } => (
                new,
                Delta::Replace {
                    old: old.metrics.clone(),
                    new: new.metrics.clone(),
                },
            ),
        };
        for period in [Period::Hourly, Period::Daily] {
            let bucket = period.bucket(img.at);
            let key = AggregateItem::key_for(&img.device, bucket);
            plans
                .entry(key)
                .or_insert_with(|| AggregatePlan::bare(&img.device, bucket))
                .contributions
                .push(Contribution {
                    index: sc.index,
                    source_pk: img.pk.clone(),
                    seq: sc.seq.clone(),
                    at: img.at,
                    delta: delta.clone(),
                });
        }
    }
    let mut out: Vec<_> = plans.into_values().collect();
    for p in &mut out {
        p.contributions.sort_by(|a, b| cmp_seq(&a.seq, &b.seq));
    }
    out
}

/// A metric of a page whose readings are all gone (count 0): kept so it never moves.
pub const EMPTIED: Stats = Stats::EMPTY;

/// A bucket's raw readings folded one reading at a time: per metric its rollup and the
/// first and last time of a reading carrying it (a page of a paged bucket spans the readings
/// with a metric in it). `sketched`: each metric's rollup keeps a quantile sketch (a device
/// with `percentiles: true`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BucketSummary {
    pub times: BTreeMap<MetricName, (Timestamp, Timestamp)>,
    pub stats: BTreeMap<MetricName, Stats>,
    pub sketched: bool,
}

impl BucketSummary {
    pub fn add(&mut self, at: Timestamp, metrics: &BTreeMap<MetricName, f64>) {
        let one = if self.sketched {
            Stats::at_sketched
        } else {
            Stats::at
        };
        for (name, v) in metrics {
            let t = self.times.entry(name.clone()).or_insert((at, at));
            *t = (t.0.min(at), t.1.max(at));
            self.stats
                .entry(name.clone())
                .and_modify(|s| s.merge(&one(at, *v)))
                .or_insert_with(|| one(at, *v));
        }
    }

    pub fn new(sketched: bool) -> Self {
        BucketSummary {
            sketched,
            ..BucketSummary::default()
        }
    }

    pub fn of(readings: &[(Timestamp, BTreeMap<MetricName, f64>)], sketched: bool) -> Self {
        let mut s = BucketSummary::new(sketched);
        for (at, m) in readings {
            s.add(*at, m);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Image;

    fn plan_now(changes: &[StreamChange]) -> Vec<AggregatePlan> {
        plan(changes)
    }

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }
    fn m(pairs: &[(&str, f64)]) -> BTreeMap<MetricName, f64> {
        pairs
            .iter()
            .map(|(k, v)| (MetricName::new(k).unwrap(), *v))
            .collect()
    }
    fn img(at: &str, t: f64) -> Image {
        Image {
            pk: "DEVICE#d1".into(),
            sk: tidemark_schema::keys::reading_sk(ts(at)),
            device: DeviceId::new("d1").unwrap(),
            at: ts(at),
            metrics: m(&[("t", t)]),
        }
    }
    fn insert(i: usize, seq: u64, at: &str, t: f64) -> StreamChange {
        StreamChange {
            index: i,
            seq: format!("{seq:021}"),
            change: Change::Insert(img(at, t)),
        }
    }

    #[test]
    fn a_batch_becomes_one_plan_per_touched_item() {
        // GIVEN readings in two hours of one day WHEN planned THEN 2 hourly + 1 daily items
        let changes = vec![
            insert(0, 1, "2026-04-20T13:59:00Z", 1.0),
            insert(1, 2, "2026-04-20T14:00:00Z", 2.0),
            insert(2, 3, "2026-04-20T14:01:00Z", 3.0),
        ];
        let plans = plan_now(&changes);
        let sks: Vec<_> = plans.iter().map(|p| p.key.sk.as_str()).collect();
        assert_eq!(
            sks,
            [
                "AGG#daily#2026-04-20",
                "AGG#hourly#2026-04-20T13:00:00Z",
                "AGG#hourly#2026-04-20T14:00:00Z"
            ]
        );
        assert_eq!(plans[0].contributions.len(), 3);
        assert_eq!(plans[2].contributions.len(), 2);
        assert_eq!(plans[2].first_index(), 1);
    }

    #[test]
    fn a_summary_folds_stats_and_times_per_metric() {
        let readings = [
            (ts("2026-04-20T14:10:00Z"), m(&[("t", 3.0)])),
            (ts("2026-04-20T14:00:00Z"), m(&[("t", 1.0), ("h", 5.0)])),
        ];
        let s = BucketSummary::of(&readings, false);
        let t = &s.stats[&MetricName::new("t").unwrap()];
        assert_eq!((t.count, t.sum, t.min, t.max), (2, 4.0, 1.0, 3.0));
        assert_eq!(t.sketch, None);
        let sketched = BucketSummary::of(&readings, true);
        let t = &sketched.stats[&MetricName::new("t").unwrap()];
        let sketch = t.sketch.as_ref().unwrap();
        assert_eq!(sketch.count(), 2);
        assert!((sketch.value_at_rank(1).unwrap() - 3.0).abs() <= 0.03);
        assert_eq!(
            s.times[&MetricName::new("h").unwrap()],
            (ts("2026-04-20T14:00:00Z"), ts("2026-04-20T14:00:00Z"))
        );
    }
}
