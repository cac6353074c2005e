//! Rollups: per-metric stats of an hour or a day, the aggregate item and its pages, and
//! when a day is still open.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::{DeviceId, MetricName};
use crate::keys::{self, EntityKey};
use crate::marks::ItemMarks;
use crate::sketch::Sketch;
use crate::time::{Bucket, Day, Timestamp};

/// A reading of one metric: when, and its value.
pub type Point = (Timestamp, f64);

/// One metric in one bucket: count, sum, min, max, and what the series route's `stddev`,
/// `first` and `last` need. All of it merges exactly (the spread by Chan et al.'s pairwise
/// update), so a day summed from its hours equals the day computed from its readings.
///
/// `m2`, `first` and `last` are absent from rollups written before they were kept: merging
/// with such a rollup leaves them absent, and readers answer `null` for what they feed
/// until `tidemark-admin rebuild` (or the bucket's next recompute) writes them. `sketch`
/// likewise, and it is kept only for devices with `percentiles: true`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub count: u64,
    pub sum: f64,
    pub min: f64,
    pub max: f64,
    /// Sum of squared deviations from the mean. Stored as a number when DynamoDB can hold it,
    /// else as its text ([`m2_repr`]).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "m2_repr")]
    pub m2: Option<f64>,
    /// The earliest reading.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<Point>,
    /// The latest reading.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<Point>,
    /// The readings' quantile sketch ([`Sketch`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sketch: Option<Sketch>,
}

/// How `m2` is stored. Metric values reach ±1e100 (readings.rs's
/// [`crate::MAX_METRIC_MAGNITUDE`], which keeps sums inside DynamoDB's numbers), but their
/// squared deviations do not: values of ±1e100 spread to ~1e200, values of ±1e-100 to
/// ~1e-200, and DynamoDB refuses a number of magnitude 1e126 or more, or below 1e-130 but
/// not zero. A rollup holding one would fail its write for good. So a spread outside that
/// range is stored as its text (`"2e200"`), which reads back as the same `f64`; any other is
/// the number it always was.
mod m2_repr {
    use serde::{Deserialize, Deserializer, Serializer};

    fn storable(v: f64) -> bool {
        v.is_finite() && (v == 0.0 || (1e-130..1e126).contains(&v.abs()))
    }

    pub fn serialize<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(x) if storable(*x) => s.serialize_some(x),
            Some(x) => s.serialize_some(&format!("{x:e}")),
            None => s.serialize_none(),
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Number(f64),
        Text(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
        match Option::<Repr>::deserialize(d)? {
            None => Ok(None),
            Some(Repr::Number(x)) => Ok(Some(x)),
            Some(Repr::Text(t)) => t
                .parse()
                .map(Some)
                .map_err(|_| serde::de::Error::custom(format!("m2 {t:?} is not a number"))),
        }
    }
}

impl Stats {
    /// One reading.
    pub fn at(at: Timestamp, v: f64) -> Self {
        Stats {
            count: 1,
            sum: v,
            min: v,
            max: v,
            m2: Some(0.0),
            first: Some((at, v)),
            last: Some((at, v)),
            sketch: None,
        }
    }

    /// One reading, sketched (a device with `percentiles: true`).
    pub fn at_sketched(at: Timestamp, v: f64) -> Self {
        Stats {
            sketch: Some(Sketch::of(v)),
            ..Stats::at(at, v)
        }
    }

    /// A metric whose readings are all gone (count 0): nothing to merge.
    pub const EMPTY: Stats = Stats {
        count: 0,
        sum: 0.0,
        min: 0.0,
        max: 0.0,
        m2: None,
        first: None,
        last: None,
        sketch: None,
    };

    pub fn merge(&mut self, o: &Stats) {
        if o.count == 0 {
            return;
        }
        if self.count == 0 {
            *self = o.clone();
            return;
        }
        let (na, nb) = (self.count as f64, o.count as f64);
        self.m2 = match (self.m2, o.m2) {
            (Some(a), Some(b)) => {
                let d = o.sum / nb - self.sum / na;
                Some(a + b + d * d * na * nb / (na + nb))
            }
            _ => None,
        };
        self.first = match (self.first, o.first) {
            (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
            _ => None,
        };
        self.last = match (self.last, o.last) {
            (Some(a), Some(b)) => Some(if b.0 >= a.0 { b } else { a }),
            _ => None,
        };
        match (&mut self.sketch, &o.sketch) {
            (Some(a), Some(b)) => a.merge(b),
            _ => self.sketch = None,
        }
        self.count += o.count;
        self.sum += o.sum;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }

    pub fn avg(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum / self.count as f64
        }
    }

    /// The sample standard deviation (n − 1): `None` below two readings or without `m2`.
    pub fn stddev(&self) -> Option<f64> {
        let m2 = self.m2.filter(|_| self.count > 1)?;
        Some((m2 / (self.count - 1) as f64).max(0.0).sqrt())
    }
}

/// `DEVICE#<id>` / `AGG#hourly#<hour>` or `AGG#daily#<day>`: a bucket's rollup, or page 0
/// of it when it outgrew one item. The other pages (`AGGPAGE#<period>#<bucket>#<n>`,
/// [`EntityKey::AggregatePage`]) have the same shape, each with its own metrics (a metric is
/// in exactly one page), watermarks and version; `firstAt`/`lastAt` of a page are those of
/// the readings with a metric in it. [`AggregateItem::merge_pages`] puts them together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AggregateItem {
    pub pk: String,
    pub sk: String,
    pub metrics: BTreeMap<MetricName, Stats>,
    pub first_at: Timestamp,
    pub last_at: Timestamp,
    /// Per source partition key, a floor: a stream sequence number at or below which every
    /// record of that partition is in this item (decimal string; compare as integers). Set by
    /// `tidemark-admin rebuild` at its fences.
    #[serde(default)]
    pub applied: BTreeMap<String, String>,
    /// Hourly items: per source item, the newest record applied (above the floor), what makes
    /// replays harmless however the source partitions split ([`crate::marks`]).
    #[serde(default, skip_serializing_if = "ItemMarks::is_empty")]
    pub marks: ItemMarks,
    /// When `marks` were last written (epoch seconds): they expire a day later.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub marked_at: i64,
    /// Hourly items past [`crate::marks::MAX_MARKS`] source items: no marks; every batch that
    /// touches the hour recomputes it from the stored readings (docs/design.md §5).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub from_table: bool,
    /// Daily items: per hour of the day (`"00"` … `"23"`), the version of the hourly item
    /// whose content this day holds (docs/design.md §5: a day follows its hours).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub folded: BTreeMap<String, u64>,
    /// Optimistic-concurrency counter for conditional writes.
    #[serde(default)]
    pub version: u64,
    /// The page takes no new metrics (only updates of those it holds): the bucket goes on
    /// in a later page. Page 0 is sealed exactly when the bucket has overflow pages. Absent
    /// (false) on every ordinary item.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sealed: bool,
    /// The bucket is still open ([`bucket_is_open`]) and this item only marks that it has
    /// readings. Its content is not kept: readers take an open hour from its readings
    /// ([`AggregateItem::add_reading`]) and an open day as the sum of its hours
    /// ([`AggregateItem::day_of_hours`]); the rollups role writes the content once the bucket
    /// closes (docs/design.md §5).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub open: bool,
}

/// How long past its end an hour or a day stays open: the batches of its last minutes still
/// arriving (a 300 s aggregator window behind a 300 s ingest window) cost no rollup write.
pub const CLOSE_GRACE_SECONDS: i64 = 900;

/// When `bucket` closes: its end plus [`CLOSE_GRACE_SECONDS`].
pub fn closes_at(bucket: Bucket) -> Timestamp {
    bucket
        .end_exclusive()
        .plus_millis(CLOSE_GRACE_SECONDS * 1000)
        .unwrap_or(Timestamp::MAX)
}

/// Whether `bucket` is open at `now`: its item is then a placeholder, not a rollup.
pub fn bucket_is_open(bucket: Bucket, now: Timestamp) -> bool {
    now < closes_at(bucket)
}

/// Whether `day` is open at `now` ([`bucket_is_open`]).
pub fn day_is_open(day: Day, now: Timestamp) -> bool {
    bucket_is_open(Bucket::Daily(day), now)
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

impl AggregateItem {
    /// A bucket's item before anything was applied to it.
    pub fn empty(key: &keys::Key) -> Self {
        AggregateItem {
            pk: key.pk.clone(),
            sk: key.sk.clone(),
            metrics: BTreeMap::new(),
            first_at: Timestamp::MAX,
            last_at: Timestamp::MIN,
            applied: BTreeMap::new(),
            marks: ItemMarks::default(),
            marked_at: 0,
            from_table: false,
            folded: BTreeMap::new(),
            version: 0,
            sealed: false,
            open: false,
        }
    }

    /// Counts one stored reading in: how a reader (and the rollups role, at the close) takes
    /// a bucket from its readings.
    pub fn add_reading(&mut self, at: Timestamp, metrics: &BTreeMap<MetricName, f64>) {
        if metrics.is_empty() {
            return;
        }
        self.first_at = self.first_at.min(at);
        self.last_at = self.last_at.max(at);
        for (m, v) in metrics {
            self.metrics
                .entry(m.clone())
                .and_modify(|s| s.merge(&Stats::at(at, *v)))
                .or_insert_with(|| Stats::at(at, *v));
        }
    }

    /// An open day as readers see it: `day` (its key and version) with the sum of `hours`,
    /// each one hour's rollup as [`AggregateItem::merge_pages`] gives it. The same sum the
    /// rollups role folds into the day when it closes.
    pub fn day_of_hours(day: &AggregateItem, hours: Vec<AggregateItem>) -> AggregateItem {
        let mut out = AggregateItem::empty(&keys::Key {
            pk: day.pk.clone(),
            sk: day.sk.clone(),
        });
        out.version = day.version;
        for h in hours {
            let mut held = false;
            for (name, s) in h.metrics.into_iter().filter(|(_, s)| s.count > 0) {
                held = true;
                out.metrics
                    .entry(name)
                    .and_modify(|d| d.merge(&s))
                    .or_insert(s);
            }
            if held {
                out.first_at = out.first_at.min(h.first_at);
                out.last_at = out.last_at.max(h.last_at);
            }
        }
        out
    }

    pub fn key_for(device: &DeviceId, bucket: Bucket) -> keys::Key {
        EntityKey::Aggregate {
            device: device.clone(),
            bucket,
        }
        .key()
    }

    /// The GSI2 keys an hourly rollup item's first page is stored with (`None` for any other
    /// item): its hour's activity partition and its device ([`keys::ACTIVE_PREFIX`]). Added
    /// by every writer of the item (`tidemark_store::aggregates::to_stored`), so the item and
    /// its index entry exist together; the index projects keys only, so rewriting the item
    /// never writes the index again.
    pub fn activity_index(&self) -> Option<(String, String)> {
        match EntityKey::parse(&self.pk, &self.sk).ok()? {
            EntityKey::Aggregate {
                device,
                bucket: bucket @ Bucket::Hourly(_),
            } => Some((
                keys::active_gsi2pk(bucket, &device),
                keys::active_gsi2sk(&device),
            )),
            _ => None,
        }
    }

    /// Page `page` of the bucket's rollup: page 0 is [`AggregateItem::key_for`].
    pub fn page_key(device: &DeviceId, bucket: Bucket, page: u16) -> keys::Key {
        if page == 0 {
            return Self::key_for(device, bucket);
        }
        EntityKey::AggregatePage {
            device: device.clone(),
            bucket,
            page,
        }
        .key()
    }

    /// A reader's view of a whole bucket from its pages (page 0 first): metrics unioned,
    /// `firstAt` the earliest and `lastAt` the latest of the pages holding metrics (a page
    /// emptied by deletes keeps times of readings no longer there), metrics with count 0
    /// (emptied by deletes, kept in their page) left out. Key, watermarks,
    /// version and `sealed` are page 0's: the merged item is for reading, never written back.
    /// One page is returned as it is.
    pub fn merge_pages(mut pages: Vec<AggregateItem>) -> Option<AggregateItem> {
        for p in &mut pages {
            // A page's metric whose readings are all gone stays there with count 0.
            p.metrics.retain(|_, s| s.count > 0);
        }
        if pages.len() <= 1 {
            return pages.pop();
        }
        let held: Vec<(Timestamp, Timestamp)> = pages
            .iter()
            .filter(|p| !p.metrics.is_empty())
            .map(|p| (p.first_at, p.last_at))
            .collect();
        let mut rest = pages.split_off(1);
        let mut out = pages.pop()?;
        for p in &mut rest {
            for (m, s) in std::mem::take(&mut p.metrics) {
                out.metrics.entry(m).or_insert(s);
            }
        }
        if let (Some(first), Some(last)) = (
            held.iter().map(|h| h.0).min(),
            held.iter().map(|h| h.1).max(),
        ) {
            out.first_at = first;
            out.last_at = last;
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    #[test]
    fn merged_pages_union_metrics_and_span_the_pages_holding_metrics() {
        let t = |s: &str| Timestamp::parse_rfc3339(s).unwrap();
        let page = |n: u16, m: &str, first: &str, last: &str| AggregateItem {
            pk: "DEVICE#d".into(),
            sk: format!("p{n}"),
            metrics: BTreeMap::from([(MetricName::new(m).unwrap(), Stats::at(t(first), n as f64))]),
            first_at: t(first),
            last_at: t(last),
            applied: BTreeMap::new(),
            marks: Default::default(),
            marked_at: 0,
            from_table: false,
            folded: Default::default(),
            version: 1,
            sealed: n < 2,
            open: false,
        };
        let mut emptied = page(3, "z", "2026-04-20T14:00:00Z", "2026-04-20T14:59:00Z");
        emptied.metrics.clear();
        let merged = AggregateItem::merge_pages(vec![
            page(0, "a", "2026-04-20T14:10:00Z", "2026-04-20T14:20:00Z"),
            page(1, "b", "2026-04-20T14:05:00Z", "2026-04-20T14:15:00Z"),
            page(2, "c", "2026-04-20T14:12:00Z", "2026-04-20T14:30:00Z"),
            emptied,
        ])
        .unwrap();
        assert_eq!(merged.sk, "p0");
        assert_eq!(merged.metrics.len(), 3);
        assert_eq!(merged.first_at, t("2026-04-20T14:05:00Z"));
        assert_eq!(merged.last_at, t("2026-04-20T14:30:00Z"));
        let one = page(0, "a", "2026-04-20T14:10:00Z", "2026-04-20T14:20:00Z");
        assert_eq!(AggregateItem::merge_pages(vec![one.clone()]), Some(one));
    }

    #[test]
    fn stats_merge_and_average() {
        let at = t("2026-04-20T14:00:00Z");
        let mut s = Stats::at(at, 1.0);
        s.merge(&Stats::at(at.plus_millis(1000).unwrap(), 3.0));
        assert_eq!(
            (s.count, s.sum, s.min, s.max, s.avg()),
            (2, 4.0, 1.0, 3.0, 2.0)
        );
    }

    #[test]
    fn a_merge_of_parts_equals_the_whole_in_spread_first_and_last() {
        let at = |i: usize| {
            t("2026-04-20T14:00:00Z")
                .plus_millis(i as i64 * 1000)
                .unwrap()
        };
        let values: Vec<f64> = (0..50)
            .map(|i| 1e6 + ((i * 37) % 11) as f64 * 0.25)
            .collect();
        let of = |range: std::ops::Range<usize>| {
            let mut s = Stats::EMPTY;
            for i in range {
                s.merge(&Stats::at(at(i), values[i]));
            }
            s
        };
        // Parts merged out of time order, as a day's hours may be.
        let mut parts = of(30..50);
        parts.merge(&of(0..7));
        parts.merge(&of(7..30));
        let mean = values.iter().sum::<f64>() / 50.0;
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 49.0;
        let sd = parts.stddev().unwrap();
        assert!(((sd - var.sqrt()) / var.sqrt()).abs() < 1e-9, "{sd}");
        assert_eq!(parts.first, Some((at(0), values[0])));
        assert_eq!(parts.last, Some((at(49), values[49])));
        assert_eq!(parts.count, 50);
        assert_eq!(Stats::at(at(0), 5.0).stddev(), None);
    }

    #[test]
    fn a_rollup_from_before_the_spread_was_kept_reads_and_merges_without_it() {
        let old: Stats =
            serde_json::from_str(r#"{"count":2,"sum":3.0,"min":1.0,"max":2.0}"#).unwrap();
        assert_eq!((old.m2, old.first, old.last), (None, None, None));
        let mut s = Stats::at(t("2026-04-20T14:00:00Z"), 4.0);
        s.merge(&old);
        assert_eq!((s.count, s.stddev(), s.first), (3, None, None));
    }
}
