//! Group rollups (docs/design.md §5 "Groups", `docs/decisions/0007-group-rollups.md`): a
//! group's closed buckets, recomputed from its members' readings, and the partials the rollups
//! role writes per batch so that a group's hour answers before it is recomputed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::aggregates::Stats;
use crate::ids::MetricName;
use crate::keys::{self, EntityKey};
use crate::tags::Tag;
use crate::time::{Bucket, Period, Timestamp};

/// How long a partial is kept: far past its hour's recompute (the export runs every five
/// minutes), so an export stopped for days still leaves the hours answering.
pub const GROUP_PARTIAL_TTL_DAYS: u32 = 7;

/// `GROUP#<key>:<value>` / `HOUR#<metric>#<hour>` or `DAY#<metric>#<day>`: one metric of a
/// group in one closed bucket, folded from every member's readings of the bucket, each reading
/// counted in the groups of its own time. Always sketched, so a group's percentiles come from
/// the merged sketch (within 1 %), whatever its members' `percentiles` flag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupBucketItem {
    pub pk: String,
    pub sk: String,
    pub tag: Tag,
    pub metric: MetricName,
    pub stats: Stats,
    /// Members with a reading of the metric in the bucket.
    pub devices: u64,
    /// When it was recomputed: partials of the hour written before then are in it.
    pub computed_at: Timestamp,
}

impl GroupBucketItem {
    pub fn new(
        tag: Tag,
        metric: MetricName,
        bucket: Bucket,
        stats: Stats,
        devices: u64,
        computed_at: Timestamp,
    ) -> Self {
        let key = EntityKey::GroupBucket {
            tag: tag.clone(),
            metric: metric.clone(),
            bucket,
        }
        .key();
        GroupBucketItem {
            pk: key.pk,
            sk: key.sk,
            tag,
            metric,
            stats,
            devices,
            computed_at,
        }
    }

    /// The bucket, from the sort key.
    pub fn bucket(&self) -> Option<Bucket> {
        match EntityKey::parse(&self.pk, &self.sk).ok()? {
            EntityKey::GroupBucket { bucket, .. } => Some(bucket),
            _ => None,
        }
    }
}

/// `GROUPPART#<key>:<value>#<hour>` / `<sequence>` (a partial too large for one item goes on in
/// `<sequence>.<n>`, n ≥ 1): what the records of one rollups-role batch
/// (named by its first record's sequence number) did to a group's hour: the values they
/// stored (`added`, new and replaced readings, sketched) and the values they replaced or
/// deleted (`removed`), and the same per minute of the hour (`addedMinutes`,
/// `removedMinutes`: count, sum, min, max), which group window rules fold
/// (docs/decisions/0015-group-rules-from-counts.md). A retried batch starts at the same record and
/// rewrites it whole, so a replay never counts twice (docs/decisions/0007-group-rollups.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupPartialItem {
    pub pk: String,
    pub sk: String,
    pub added: BTreeMap<MetricName, Stats>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub removed: BTreeMap<MetricName, Stats>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub added_minutes: BTreeMap<MetricName, Minutes>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub removed_minutes: BTreeMap<MetricName, Minutes>,
    pub ttl: i64,
}

/// A minute of the hour, 0 to 59; stored as two digits (`"07"`), a map key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Minute(u8);

impl Minute {
    /// The minute of the hour `at` falls in.
    pub fn of(at: Timestamp) -> Minute {
        let into_hour = at.epoch_millis() - at.hour_start().epoch_millis();
        Minute((into_hour / 60_000).clamp(0, 59) as u8)
    }

    /// Its start in the hour starting at `hour`.
    pub fn start(self, hour: Timestamp) -> Option<Timestamp> {
        hour.hour_start().plus_millis(i64::from(self.0) * 60_000)
    }
}

impl TryFrom<String> for Minute {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        s.parse::<u8>()
            .ok()
            .filter(|m| *m < 60 && s.len() == 2)
            .map(Minute)
            .ok_or_else(|| format!("{s:?} is not a minute of the hour (00 to 59)"))
    }
}

impl From<Minute> for String {
    fn from(m: Minute) -> String {
        format!("{:02}", m.0)
    }
}

/// A metric's values in one minute, short-named: an hour of them is 60 small maps.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MinuteStats {
    #[serde(rename = "n")]
    pub count: u64,
    #[serde(rename = "s")]
    pub sum: f64,
    #[serde(rename = "lo")]
    pub min: f64,
    #[serde(rename = "hi")]
    pub max: f64,
}

impl MinuteStats {
    pub fn of(v: f64) -> MinuteStats {
        MinuteStats {
            count: 1,
            sum: v,
            min: v,
            max: v,
        }
    }

    pub fn merge(&mut self, o: &MinuteStats) {
        self.count += o.count;
        self.sum += o.sum;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }
}

/// A metric's minutes in one partial.
pub type Minutes = BTreeMap<Minute, MinuteStats>;

/// A metric's readings over a span of whole minutes, folded from partials: `count` and `sum`
/// are net of what was removed, so exact; `min` and `max` are of the values added (a value a
/// correction replaced stays in them, as in [`PartialStats`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowStats {
    pub count: u64,
    pub sum: f64,
    pub min: f64,
    pub max: f64,
}

/// Folds `metric`'s minutes starting in `[from, to)` of the partials (each given with its
/// hour); `None` when no reading is left in them.
pub fn fold_minutes<'a>(
    parts: impl IntoIterator<Item = (Timestamp, &'a GroupPartialItem)>,
    metric: &MetricName,
    from: Timestamp,
    to: Timestamp,
) -> Option<WindowStats> {
    let mut added: Option<MinuteStats> = None;
    let mut removed = (0u64, 0.0f64);
    let within = |hour: Timestamp, m: &Minute| m.start(hour).is_some_and(|t| t >= from && t < to);
    for (hour, p) in parts {
        for (m, s) in p.added_minutes.get(metric).into_iter().flatten() {
            if within(hour, m) {
                match &mut added {
                    Some(a) => a.merge(s),
                    None => added = Some(*s),
                }
            }
        }
        for (m, s) in p.removed_minutes.get(metric).into_iter().flatten() {
            if within(hour, m) {
                removed.0 += s.count;
                removed.1 += s.sum;
            }
        }
    }
    let a = added?;
    let count = a.count.checked_sub(removed.0).filter(|n| *n > 0)?;
    Some(WindowStats {
        count,
        sum: a.sum - removed.1,
        min: a.min,
        max: a.max,
    })
}

impl GroupPartialItem {
    /// The hour it is of, from its key.
    pub fn hour(&self) -> Option<Timestamp> {
        match EntityKey::parse(&self.pk, &self.sk).ok()? {
            EntityKey::GroupPartial { hour, .. } => Some(hour),
            _ => None,
        }
    }

    pub fn key(tag: &Tag, hour: Timestamp, batch: &str) -> keys::Key {
        EntityKey::GroupPartial {
            tag: tag.clone(),
            hour: hour.hour_start(),
            batch: batch.to_owned(),
        }
        .key()
    }
}

/// `GROUPBATCH#<sequence>` / `#MANIFEST`: the keys of the partials a batch starting at that
/// record wrote. Written before them (listing old and new), so a retry that touches fewer
/// hours or groups deletes the ones it no longer writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupBatchItem {
    pub pk: String,
    pub sk: String,
    pub parts: Vec<keys::Key>,
    pub ttl: i64,
}

/// A group's hour from its partials. `count`, `sum`, the mean and the spread are net of what
/// was removed, so exact; `min`, `max`, `first`, `last` and the sketch are of the values added,
/// so a value a correction replaced inside the hour stays in them until the hour is recomputed
/// (`settled` is then false).
#[derive(Debug, Clone, PartialEq)]
pub struct PartialStats {
    pub stats: Stats,
    pub settled: bool,
}

/// Folds one metric of an hour's partials (none with the metric: `None`).
pub fn fold_partials<'a>(
    parts: impl IntoIterator<Item = &'a GroupPartialItem>,
    metric: &MetricName,
) -> Option<PartialStats> {
    let mut added = Stats::EMPTY;
    let mut removed = Stats::EMPTY;
    for p in parts {
        if let Some(s) = p.added.get(metric) {
            added.merge(s);
        }
        if let Some(s) = p.removed.get(metric) {
            removed.merge(s);
        }
    }
    if added.count == 0 {
        return None;
    }
    let settled = removed.count == 0;
    Some(PartialStats {
        stats: without(added, &removed)?,
        settled,
    })
}

/// `all` less `gone` (a sub-multiset of it): count, sum and spread by inverting Chan et al.'s
/// pairwise update; the rest stays `all`'s. `None` when nothing is left.
fn without(mut all: Stats, gone: &Stats) -> Option<Stats> {
    if gone.count == 0 {
        return Some(all);
    }
    let n = all.count.checked_sub(gone.count).filter(|n| *n > 0)?;
    let (nt, nb, na) = (all.count as f64, gone.count as f64, n as f64);
    let sum = all.sum - gone.sum;
    all.m2 = match (all.m2, gone.m2) {
        (Some(t), Some(b)) => {
            let d = gone.sum / nb - sum / na;
            Some((t - b - d * d * na * nb / nt).max(0.0))
        }
        _ => None,
    };
    all.count = n;
    all.sum = sum;
    Some(all)
}

/// The period a group bucket item's sort key names (`HOUR#` or `DAY#`).
pub fn group_period(sk: &str) -> Option<Period> {
    if sk.starts_with(keys::GROUP_HOUR_PREFIX) {
        Some(Period::Hourly)
    } else if sk.starts_with(keys::GROUP_DAY_PREFIX) {
        Some(Period::Daily)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    fn stats(vs: &[f64]) -> Stats {
        let mut s = Stats::EMPTY;
        for (i, v) in vs.iter().enumerate() {
            s.merge(&Stats::at_sketched(
                ts("2026-04-20T10:00:00Z").plus_millis(i as i64).unwrap(),
                *v,
            ));
        }
        s
    }

    fn part(added: &[f64], removed: &[f64]) -> GroupPartialItem {
        let m = MetricName::new("temperature").unwrap();
        let key = GroupPartialItem::key(
            &Tag::parse("site:A").unwrap(),
            ts("2026-04-20T10:00:00Z"),
            "1",
        );
        GroupPartialItem {
            pk: key.pk,
            sk: key.sk,
            added: [(m.clone(), stats(added))].into(),
            removed: if removed.is_empty() {
                BTreeMap::new()
            } else {
                [(m, stats(removed))].into()
            },
            added_minutes: BTreeMap::new(),
            removed_minutes: BTreeMap::new(),
            ttl: 0,
        }
    }

    #[test]
    fn partials_of_readings_only_added_fold_exactly() {
        let m = MetricName::new("temperature").unwrap();
        let got = fold_partials(&[part(&[1.0, 2.0], &[]), part(&[3.0], &[])], &m).unwrap();
        assert!(got.settled);
        assert_eq!(got.stats.count, 3);
        assert_eq!(got.stats.sum, 6.0);
        assert_eq!(got.stats.min, 1.0);
        assert!((got.stats.m2.unwrap() - 2.0).abs() < 1e-12);
    }

    #[test]
    fn a_correction_leaves_count_sum_and_spread_exact() {
        let m = MetricName::new("temperature").unwrap();
        // 1, 2, 3 stored; then 3 corrected to 5: the partial adds 5 and removes 3.
        let got = fold_partials(&[part(&[1.0, 2.0, 3.0], &[]), part(&[5.0], &[3.0])], &m).unwrap();
        assert!(!got.settled);
        assert_eq!(got.stats.count, 3);
        assert_eq!(got.stats.sum, 8.0);
        let exact = stats(&[1.0, 2.0, 5.0]).m2.unwrap();
        assert!((got.stats.m2.unwrap() - exact).abs() < 1e-9);
        assert_eq!(got.stats.max, 5.0);
    }

    #[test]
    fn group_keys_round_trip() {
        let tag = Tag::parse("zone:eu:west/2").unwrap();
        let m = MetricName::new("temperature").unwrap();
        let hour = Bucket::Hourly(ts("2026-04-20T10:00:00Z"));
        let item = GroupBucketItem::new(
            tag.clone(),
            m,
            hour,
            stats(&[1.0]),
            1,
            ts("2026-04-20T11:20:00Z"),
        );
        assert_eq!(item.pk, "GROUP#zone:eu:west/2");
        assert_eq!(item.sk, "HOUR#temperature#2026-04-20T10:00:00Z");
        assert_eq!(item.bucket(), Some(hour));
        let p = GroupPartialItem::key(&tag, ts("2026-04-20T10:59:00Z"), "4960000000000000000001");
        assert_eq!(p.pk, "GROUPPART#zone:eu:west/2#2026-04-20T10:00:00Z");
        assert!(matches!(
            EntityKey::parse(&p.pk, &p.sk),
            Ok(EntityKey::GroupPartial { .. })
        ));
    }

    fn minutes(pairs: &[(u8, f64)]) -> Minutes {
        let mut out = Minutes::new();
        for (m, v) in pairs {
            let k = Minute::try_from(format!("{m:02}")).unwrap();
            out.entry(k)
                .and_modify(|s| s.merge(&MinuteStats::of(*v)))
                .or_insert(MinuteStats::of(*v));
        }
        out
    }

    #[test]
    fn a_window_folds_only_its_whole_minutes_net_of_corrections() {
        let m = MetricName::new("temperature").unwrap();
        let hour = ts("2026-04-20T10:00:00Z");
        let mut a = part(&[], &[]);
        a.added_minutes = [(
            m.clone(),
            minutes(&[(4, 100.0), (5, 20.0), (5, 30.0), (19, 40.0)]),
        )]
        .into();
        let mut b = part(&[], &[]);
        // a correction in minute 5: 30 replaced by 32
        b.added_minutes = [(m.clone(), minutes(&[(5, 32.0), (20, 1000.0)]))].into();
        b.removed_minutes = [(m.clone(), minutes(&[(5, 30.0)]))].into();
        let got = fold_minutes(
            [(hour, &a), (hour, &b)],
            &m,
            ts("2026-04-20T10:05:00Z"),
            ts("2026-04-20T10:20:00Z"),
        )
        .unwrap();
        assert_eq!((got.count, got.sum), (3, 92.0));
        assert_eq!((got.min, got.max), (20.0, 40.0));
        let none = fold_minutes(
            [(hour, &a)],
            &m,
            ts("2026-04-20T10:06:00Z"),
            ts("2026-04-20T10:19:00Z"),
        );
        assert_eq!(none, None);
        let stored = serde_json::to_value(&a).unwrap();
        assert_eq!(
            stored["addedMinutes"]["temperature"]["05"],
            serde_json::json!({"n":2,"s":50.0,"lo":20.0,"hi":30.0})
        );
        assert_eq!(
            serde_json::from_value::<GroupPartialItem>(stored).unwrap(),
            a
        );
        assert!(
            Minute::try_from("60".to_owned()).is_err() && Minute::try_from("7".to_owned()).is_err()
        );
        assert_eq!(
            Minute::of(ts("2026-04-20T10:59:59.999Z")),
            Minute::try_from("59".to_owned()).unwrap()
        );
    }
}
