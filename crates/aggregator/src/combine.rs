//! Combining a batch: every reading change of the batch folded into the aggregate items it
//! touches, so each item gets one conditional write per batch, never one per reading.
//!
//! Exactly once: an item keeps, per source item (a reading or a slot part), the sequence
//! number of the newest record it applied from it ([`tidemark_schema::marks`]), and applies a
//! record only if it is newer than its own item's mark. DynamoDB orders a stream's records per
//! item, whichever shard carries them, so replays, bisected and regrouped batches change
//! nothing even after a key's item collection is split over two partitions whose child shards
//! interleave (docs/decisions/0002-exactly-once-rollups.md). A per-partition floor (`applied`,
//! set by `tidemark-admin rebuild`) also refuses what it covers. An hour whose marks would
//! pass their cap is taken from the table instead (`from_table`, the rollups role). A packed slot
//! part's record changes several readings under one sequence number: each is a contribution
//! of its own, compared with the marks as read, so a record's readings in one item apply all
//! together or not at all.
//!
//! A MODIFY of a reading is either a record adding metrics to a reading with the same device
//! and timestamp (ingest merges them into one item) or a correction of a metric's value (the
//! later record wins): either way only the metrics whose value changed are moved, so each
//! metric of a reading is counted once.
//!
//! In a paged bucket ([`crate::pages`]) each page is such an item: a plan is cut down to the
//! metrics a page holds ([`restrict`]) and applied under that page's own marks, with
//! the same code; a metric a delete empties stays in its page with count 0 there
//! ([`apply_with`]), so it never moves to another page.
//!
//! Corrections and user deletes are applied as exact deltas on `count` and `sum`; only the
//! extremes they may have removed (`min`, `max`, `firstAt`, `lastAt`) are recomputed from the
//! raw readings. A full recompute of the bucket would not be exact: the table already holds
//! readings whose INSERT records are still ahead in the stream, and those would later be
//! counted a second time. Extremes are idempotent, so taking them from the table is safe.

use std::collections::{BTreeMap, BTreeSet};

use tidemark_schema::marks::{self, ItemMarks};
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
    /// The source item's name in this bucket's marks ([`marks::item_name`]).
    pub item: String,
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
    /// When the batch is applied (epoch seconds): what marks written now are dated.
    pub now: i64,
    /// The most marks the item may keep ([`marks::MAX_MARKS`]; tests lower it).
    pub max_marks: usize,
    /// The most marks of single reading items ([`marks::MAX_SINGLE_MARKS`]).
    pub max_single_marks: usize,
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
}

/// Groups the batch's changes by aggregate item (hourly and daily of each reading's time),
/// applied at `now`.
pub fn plan(changes: &[StreamChange], now: Timestamp) -> Vec<AggregatePlan> {
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
                .entry(key.clone())
                .or_insert_with(|| AggregatePlan {
                    key,
                    device: img.device.clone(),
                    bucket,
                    contributions: Vec::new(),
                    now: now.epoch_seconds(),
                    max_marks: marks::MAX_MARKS,
                    max_single_marks: marks::MAX_SINGLE_MARKS,
                })
                .contributions
                .push(Contribution {
                    index: sc.index,
                    source_pk: img.pk.clone(),
                    item: marks::item_name(&img.pk, &img.sk, bucket.start()),
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
pub const EMPTIED: Stats = Stats {
    count: 0,
    sum: 0.0,
    min: 0.0,
    max: 0.0,
};

/// Which extremes must be taken from the raw readings after applying deltas.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recompute {
    pub metrics: BTreeSet<MetricName>,
    pub times: bool,
}

impl Recompute {
    pub fn is_empty(&self) -> bool {
        self.metrics.is_empty() && !self.times
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    pub item: AggregateItem,
    /// Records applied now (0: everything was already applied, nothing to write).
    pub applied: usize,
    /// Readings added (INSERTs), for metrics.
    pub readings_added: usize,
    /// Which readings those are (source partition, sequence number, time): a reading whose
    /// metrics are spread over several pages of a bucket is counted once.
    pub added: BTreeSet<(String, String, Timestamp)>,
    pub recompute: Recompute,
}

/// `current` with the plan's records newer than its marks (and floor) applied, `version` bumped.
pub fn apply(current: Option<&AggregateItem>, plan: &AggregatePlan) -> Applied {
    apply_with(current, plan, false)
}

/// [`apply`]; with `keep_emptied` a metric whose last value is removed stays, with count 0
/// (a page of a paged bucket: its metrics never move, see [`crate::pages`]; readers leave
/// such metrics out).
pub fn apply_with(
    current: Option<&AggregateItem>,
    plan: &AggregatePlan,
    keep_emptied: bool,
) -> Applied {
    let mut item = current
        .cloned()
        .unwrap_or_else(|| AggregateItem::empty(&plan.key));
    item.marks.expire(item.marked_at, plan.now);
    let mut applied = 0;
    let mut readings_added = 0;
    let mut added = BTreeSet::new();
    let mut recompute = Recompute::default();
    // The marks as read: one slot part's record brings several readings with the same
    // sequence number, and each of them is newer than what the item applied before. An item
    // taken from the table has none: every record is applied here, and the caller replaces
    // the result with the table's (`from_table`).
    let (floor, marks) = (item.applied.clone(), item.marks.clone());
    for c in &plan.contributions {
        if !item.from_table && !is_new(&floor, &marks, c) {
            continue;
        }
        applied += 1;
        match &c.delta {
            Delta::Add(m) => {
                readings_added += 1;
                added.insert((c.source_pk.clone(), c.seq.clone(), c.at));
                add(&mut item, m);
                item.first_at = item.first_at.min(c.at);
                item.last_at = item.last_at.max(c.at);
            }
            Delta::Remove(m) => {
                remove(&mut item, m, &mut recompute, keep_emptied);
                if c.at <= item.first_at || c.at >= item.last_at {
                    recompute.times = true;
                }
            }
            Delta::Replace { old, new } => {
                // Only the metrics whose value changed: a record that adds metrics to a reading
                // (same device and timestamp) leaves the others exactly as they were, and
                // needs no recompute of their extremes.
                let (gone, came) = changed(old, new);
                remove(&mut item, &gone, &mut recompute, keep_emptied);
                add(&mut item, &came);
            }
        }
        if !item.from_table {
            item.marks.set(&c.source_pk, c.item.clone(), c.seq.clone());
        }
    }
    if item.first_at > item.last_at {
        // Only removals reached an item we never saw: keep times meaningful.
        let at = plan.contributions.first().map_or(Timestamp::MIN, |c| c.at);
        item.first_at = at;
        item.last_at = at;
    }
    if applied > 0 {
        item.version = current.map_or(0, |c| c.version) + 1;
        item.marked_at = plan.now;
        if item.marks.len() > plan.max_marks || item.marks.singles() > plan.max_single_marks {
            // Past the cap: the hour is taken from the table from now on.
            item.from_table = true;
            item.marks = ItemMarks::default();
            tracing::info!(item = %format!("{}/{}", item.pk, item.sk), "hour taken from the table");
        }
    }
    Applied {
        item,
        applied,
        readings_added,
        added,
        recompute,
    }
}

/// Whether `c` is newer than what an item with this floor and these marks applied from its
/// source item.
pub fn is_new(floor: &BTreeMap<String, String>, marks: &ItemMarks, c: &Contribution) -> bool {
    let above = |w: Option<&str>| w.is_none_or(|w| cmp_seq(&c.seq, w).is_gt());
    above(floor.get(&c.source_pk).map(String::as_str)) && above(marks.get(&c.source_pk, &c.item))
}

/// The values `old` had and `new` no longer has, and the values `new` brings, per metric:
/// metrics with the same value in both are in neither.
fn changed(
    old: &BTreeMap<MetricName, f64>,
    new: &BTreeMap<MetricName, f64>,
) -> (BTreeMap<MetricName, f64>, BTreeMap<MetricName, f64>) {
    let same =
        |name: &MetricName, v: &f64| old.get(name).is_some_and(|o| o.to_bits() == v.to_bits());
    let came: BTreeMap<_, _> = new
        .iter()
        .filter(|(k, v)| !same(k, v))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    let gone: BTreeMap<_, _> = old
        .iter()
        .filter(|(k, v)| new.get(*k).is_none_or(|n| n.to_bits() != v.to_bits()))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    (gone, came)
}

fn add(item: &mut AggregateItem, m: &BTreeMap<MetricName, f64>) {
    for (name, v) in m {
        item.metrics
            .entry(name.clone())
            .and_modify(|s| {
                if s.count == 0 {
                    *s = Stats::of(*v);
                } else {
                    s.merge(&Stats::of(*v));
                }
            })
            .or_insert_with(|| Stats::of(*v));
    }
}

fn remove(
    item: &mut AggregateItem,
    m: &BTreeMap<MetricName, f64>,
    r: &mut Recompute,
    keep_emptied: bool,
) {
    for (name, v) in m {
        let Some(s) = item.metrics.get_mut(name) else {
            continue;
        };
        if s.count == 0 {
            continue;
        }
        if s.count <= 1 {
            if keep_emptied {
                *s = EMPTIED;
            } else {
                item.metrics.remove(name);
            }
            r.metrics.remove(name);
            continue;
        }
        s.count -= 1;
        s.sum -= v;
        if *v <= s.min || *v >= s.max {
            r.metrics.insert(name.clone());
        }
    }
}

/// Extremes and first/last times of a bucket's raw readings, folded one reading at a time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BucketSummary {
    pub extremes: BTreeMap<MetricName, (f64, f64)>,
    pub first: Option<Timestamp>,
    pub last: Option<Timestamp>,
    /// Per metric, the first and last time of a reading carrying it (a page of a paged
    /// bucket spans the readings with a metric in it).
    pub times: BTreeMap<MetricName, (Timestamp, Timestamp)>,
    /// Per metric, the whole rollup of the readings (an hour taken from the table).
    pub stats: BTreeMap<MetricName, Stats>,
}

impl BucketSummary {
    pub fn add(&mut self, at: Timestamp, metrics: &BTreeMap<MetricName, f64>) {
        for (name, v) in metrics {
            let e = self.extremes.entry(name.clone()).or_insert((*v, *v));
            *e = (e.0.min(*v), e.1.max(*v));
            let t = self.times.entry(name.clone()).or_insert((at, at));
            *t = (t.0.min(at), t.1.max(at));
            self.stats
                .entry(name.clone())
                .and_modify(|s| s.merge(&Stats::of(*v)))
                .or_insert_with(|| Stats::of(*v));
        }
        self.first = Some(self.first.map_or(at, |f| f.min(at)));
        self.last = Some(self.last.map_or(at, |l| l.max(at)));
    }

    pub fn of(readings: &[(Timestamp, BTreeMap<MetricName, f64>)]) -> Self {
        let mut s = BucketSummary::default();
        for (at, m) in readings {
            s.add(*at, m);
        }
        s
    }
}

/// A plan's contributions cut down to the metrics `keep` takes, for the page `key` (a
/// contribution left without any metric is dropped: it changes nothing in that page).
pub fn restrict(
    plan: &AggregatePlan,
    key: Key,
    keep: impl Fn(&Contribution, &MetricName) -> bool,
) -> AggregatePlan {
    let contributions = plan
        .contributions
        .iter()
        .filter_map(|c| {
            let only = |m: &BTreeMap<MetricName, f64>| -> BTreeMap<MetricName, f64> {
                m.iter()
                    .filter(|(k, _)| keep(c, k))
                    .map(|(k, v)| (k.clone(), *v))
                    .collect()
            };
            let delta = match &c.delta {
                Delta::Add(m) => Delta::Add(only(m)).nonempty()?,
                Delta::Remove(m) => Delta::Remove(only(m)).nonempty()?,
                Delta::Replace { old, new } => Delta::Replace {
                    old: only(old),
                    new: only(new),
                }
                .nonempty()?,
            };
            Some(Contribution { delta, ..c.clone() })
        })
        .collect();
    AggregatePlan {
        key,
        device: plan.device.clone(),
        bucket: plan.bucket,
        contributions,
        now: plan.now,
        max_marks: plan.max_marks,
        max_single_marks: plan.max_single_marks,
    }
}

impl Delta {
    fn nonempty(self) -> Option<Delta> {
        let empty = match &self {
            Delta::Add(m) | Delta::Remove(m) => m.is_empty(),
            Delta::Replace { old, new } => old.is_empty() && new.is_empty(),
        };
        (!empty).then_some(self)
    }

    /// Every metric the record names, with a value it brings (what may start a metric).
    pub fn brings(&self) -> impl Iterator<Item = &MetricName> {
        let m = match self {
            Delta::Add(m) | Delta::Replace { new: m, .. } => Some(m),
            Delta::Remove(_) => None,
        };
        m.into_iter().flat_map(|m| m.keys())
    }
}

/// [`fix_extremes`] for one page of a paged bucket: its first/last times are those of the
/// readings carrying one of its metrics.
pub fn fix_page_extremes(item: &mut AggregateItem, r: &Recompute, summary: &BucketSummary) {
    let times = BucketSummary {
        first: item
            .metrics
            .keys()
            .filter_map(|m| summary.times.get(m).map(|t| t.0))
            .min(),
        last: item
            .metrics
            .keys()
            .filter_map(|m| summary.times.get(m).map(|t| t.1))
            .max(),
        ..BucketSummary::default()
    };
    fix_extremes(
        item,
        &Recompute {
            times: false,
            ..r.clone()
        },
        summary,
    );
    fix_extremes(
        item,
        &Recompute {
            metrics: BTreeSet::new(),
            times: r.times,
        },
        &times,
    );
}

/// Sets the extremes `r` names from the bucket's raw readings (what the table holds now).
pub fn fix_extremes(item: &mut AggregateItem, r: &Recompute, summary: &BucketSummary) {
    for name in &r.metrics {
        if let (Some(s), Some((lo, hi))) = (item.metrics.get_mut(name), summary.extremes.get(name))
        {
            s.min = *lo;
            s.max = *hi;
        }
    }
    if r.times
        && let (Some(first), Some(last)) = (summary.first, summary.last)
    {
        item.first_at = first;
        item.last_at = last;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pages;
    use crate::records::Image;

    fn plan_now(changes: &[StreamChange]) -> Vec<AggregatePlan> {
        plan(changes, ts("2026-04-20T15:00:00Z"))
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
    fn stats(item: &AggregateItem) -> Stats {
        item.metrics[&MetricName::new("t").unwrap()]
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
        let daily = apply(None, &plans[0]);
        assert_eq!(daily.applied, 3);
        let s = stats(&daily.item);
        assert_eq!((s.count, s.sum, s.min, s.max), (3, 6.0, 1.0, 3.0));
        assert_eq!(daily.item.first_at, ts("2026-04-20T13:59:00Z"));
        assert_eq!(daily.item.last_at, ts("2026-04-20T14:01:00Z"));
        assert_eq!(daily.item.version, 1);
    }

    #[test]
    fn replayed_and_regrouped_records_apply_once() {
        let all = vec![
            insert(0, 10, "2026-04-20T14:00:00Z", 1.0),
            insert(1, 11, "2026-04-20T14:01:00Z", 2.0),
            insert(2, 12, "2026-04-20T14:02:00Z", 4.0),
        ];
        // first half, then the whole batch again (bisection then replay)
        let p1 = plan_now(&all[..2]);
        let a1 = apply(None, &p1[1]);
        let p2 = plan_now(&all);
        let a2 = apply(Some(&a1.item), &p2[1]);
        assert_eq!(a2.applied, 1);
        let a3 = apply(Some(&a2.item), &p2[1]);
        assert_eq!(a3.applied, 0, "a full replay changes nothing");
        let s = stats(&a2.item);
        assert_eq!((s.count, s.sum, s.min, s.max), (3, 7.0, 1.0, 4.0));
    }

    #[test]
    fn marks_compare_sequence_numbers_numerically_across_lengths() {
        let mut a = insert(0, 0, "2026-04-20T14:00:00Z", 1.0);
        a.seq = "99".into();
        let mut b = insert(1, 0, "2026-04-20T14:01:00Z", 2.0);
        b.seq = "100".into();
        let first = apply(None, &plan_now(&[a])[1]);
        let second = apply(Some(&first.item), &plan_now(&[b])[1]);
        assert_eq!(second.applied, 1, "100 is newer than 99");
    }

    #[test]
    fn a_correction_is_an_exact_delta_and_flags_a_lost_extreme() {
        let p = plan_now(&[
            insert(0, 1, "2026-04-20T14:00:00Z", 1.0),
            insert(1, 2, "2026-04-20T14:01:00Z", 9.0),
        ]);
        let base = apply(None, &p[1]).item;
        let fix = StreamChange {
            index: 0,
            seq: format!("{:021}", 3),
            change: Change::Correct {
                old: img("2026-04-20T14:01:00Z", 9.0),
                new: img("2026-04-20T14:01:00Z", 5.0),
            },
        };
        let a = apply(Some(&base), &plan_now(&[fix])[1]);
        let s = stats(&a.item);
        assert_eq!((s.count, s.sum), (2, 6.0));
        assert!(a.recompute.metrics.contains(&MetricName::new("t").unwrap()));
        assert!(!a.recompute.times, "a correction keeps the reading's time");
        let mut item = a.item;
        fix_extremes(
            &mut item,
            &a.recompute,
            &BucketSummary::of(&[
                (ts("2026-04-20T14:00:00Z"), m(&[("t", 1.0)])),
                (ts("2026-04-20T14:01:00Z"), m(&[("t", 5.0)])),
            ]),
        );
        let s = stats(&item);
        assert_eq!((s.min, s.max), (1.0, 5.0));
    }

    #[test]
    fn a_record_adding_metrics_to_a_reading_counts_each_metric_once_and_recomputes_nothing() {
        // GIVEN a reading with temperature only
        let p = plan_now(&[insert(0, 1, "2026-04-20T14:00:00Z", 22.4)]);
        let base = apply(None, &p[1]).item;
        // WHEN a second record of the same device and timestamp adds humidity
        let mut merged = img("2026-04-20T14:00:00Z", 22.4);
        merged.metrics.insert(MetricName::new("h").unwrap(), 45.0);
        let add_h = StreamChange {
            index: 0,
            seq: format!("{:021}", 2),
            change: Change::Correct {
                old: img("2026-04-20T14:00:00Z", 22.4),
                new: merged,
            },
        };
        let a = apply(Some(&base), &plan_now(&[add_h])[1]);
        // THEN temperature is still counted once and humidity once
        let s = stats(&a.item);
        assert_eq!((s.count, s.sum), (1, 22.4));
        let h = a.item.metrics[&MetricName::new("h").unwrap()];
        assert_eq!((h.count, h.sum), (1, 45.0));
        assert!(a.recompute.is_empty());
    }

    #[test]
    fn a_delete_of_the_last_reading_recomputes_last_at() {
        let p = plan_now(&[
            insert(0, 1, "2026-04-20T14:00:00Z", 1.0),
            insert(1, 2, "2026-04-20T14:05:00Z", 3.0),
        ]);
        let base = apply(None, &p[1]).item;
        let del = StreamChange {
            index: 0,
            seq: format!("{:021}", 3),
            change: Change::Delete(img("2026-04-20T14:05:00Z", 3.0)),
        };
        let a = apply(Some(&base), &plan_now(&[del])[1]);
        assert!(a.recompute.times);
        let mut item = a.item;
        fix_extremes(
            &mut item,
            &a.recompute,
            &BucketSummary::of(&[(ts("2026-04-20T14:00:00Z"), m(&[("t", 1.0)]))]),
        );
        let s = stats(&item);
        assert_eq!((s.count, s.sum, s.min, s.max), (1, 1.0, 1.0, 1.0));
        assert_eq!(item.last_at, ts("2026-04-20T14:00:00Z"));
    }

    #[test]
    fn marks_of_an_hour_at_rest_are_dropped_at_its_first_write_a_day_later() {
        let at = |t: &str| ts(t);
        let first = plan(
            &[insert(0, 5, "2026-04-20T14:01:00Z", 1.0)],
            at("2026-04-20T15:00:00Z"),
        );
        let a = apply(None, &first[1]);
        assert_eq!(
            a.item.marks.get("DEVICE#d1", "r60000000"),
            Some("000000000000000000005")
        );
        // a replay within the stream's retention is refused
        let replay = plan(
            &[insert(0, 5, "2026-04-20T14:01:00Z", 1.0)],
            at("2026-04-21T15:00:00Z"),
        );
        assert_eq!(apply(Some(&a.item), &replay[1]).applied, 0);
        // a new reading 26 h later is applied, and the old marks go
        let later = plan(
            &[insert(0, 9, "2026-04-20T14:02:00Z", 2.0)],
            at("2026-04-21T17:00:00Z"),
        );
        let b = apply(Some(&a.item), &later[1]);
        assert_eq!(b.applied, 1);
        assert_eq!(b.item.marks.len(), 1);
        assert_eq!(b.item.marks.get("DEVICE#d1", "r60000000"), None);
        assert_eq!(stats(&b.item).count, 2);
    }

    #[test]
    fn past_the_cap_an_hour_keeps_no_marks_and_is_taken_from_the_table() {
        use tidemark_schema::marks::MAX_MARKS;
        let changes: Vec<StreamChange> = (0..=MAX_MARKS)
            .map(|i| {
                let t = ts("2026-04-20T14:00:00Z").plus_millis(i as i64).unwrap();
                let mut image = img("2026-04-20T14:00:00Z", 1.0);
                image.at = t;
                image.sk = tidemark_schema::keys::reading_sk(t);
                StreamChange {
                    index: i,
                    seq: format!("{:021}", i + 1),
                    change: Change::Insert(image),
                }
            })
            .collect();
        let now = ts("2026-04-20T15:00:00Z");
        let plan_of = |c: &[StreamChange], singles: usize| {
            let mut p = plan(c, now).remove(1);
            p.max_single_marks = singles;
            p
        };
        let under = apply(None, &plan_of(&changes[..MAX_MARKS], usize::MAX));
        assert!(!under.item.from_table);
        assert_eq!(under.item.marks.len(), MAX_MARKS);
        let past = apply(None, &plan_of(&changes, usize::MAX));
        assert!(past.item.from_table);
        assert!(past.item.marks.is_empty());
        assert!(pages::size(&past.item).unwrap() < 2048);
        // single readings switch much sooner: their marks cost more than reading them back
        let singles = tidemark_schema::marks::MAX_SINGLE_MARKS;
        assert!(
            !apply(None, &plan_of(&changes[..singles], singles))
                .item
                .from_table
        );
        assert!(
            apply(None, &plan_of(&changes[..=singles], singles))
                .item
                .from_table
        );
    }
}
