//! Group rollups of closed buckets (docs/design.md §5 "Groups"): the hour export attributes
//! each reading it walks to the groups of its device's tags at the reading's own time (keys of
//! `GROUP_TAGS`) and folds, per (group, metric), a sketched [`Stats`] and the members with a
//! reading; one `GROUP#<tag>` / `HOUR#<metric>#<hour>` item per pair, recomputed whole at
//! every (re-)export, so exact by construction. The pairs an export writes are listed in the
//! hour's rollups manifest (`groups`), so the next export of the hour deletes the items of
//! pairs left without readings (a correction or delete since) at the cost of one manifest
//! read: the manifest is put listing the pairs written now and those listed before, then the
//! items are put and the stale ones deleted, then (only if some were) the manifest is put
//! again listing the pairs written, so an export stopped anywhere leaves every item it may
//! have written listed for the next. A day's items are merged from its 24 hour items (one Query per pair), the pairs
//! listed by its hours' manifests; a day's members are its distinct members with a reading,
//! from the hours' rollup rows (a device that moved inside an hour counts in the groups of
//! both spans of that hour, the one approximation). The registered devices' tag histories,
//! read when a tag changed, make the `devices` table ([`device_rows`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use tidemark_schema::{
    Bucket, DeviceId, GroupBucketItem, MetricName, Period, Stats, Tag, TagHistory, TagKey,
    Timestamp,
};

use crate::file::DeviceRow;

/// One (group, metric) an export wrote an item for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GroupPair {
    pub tag: Tag,
    pub metric: MetricName,
}

/// The fold of one bucket's group rollups.
#[derive(Debug, Default)]
pub struct GroupFold {
    folds: BTreeMap<GroupPair, (Stats, BTreeSet<DeviceId>)>,
}

impl GroupFold {
    /// Adds one reading of `device` at `at` to each of `groups`.
    pub fn add_reading(
        &mut self,
        device: &DeviceId,
        groups: impl IntoIterator<Item = Tag>,
        at: Timestamp,
        metrics: &BTreeMap<MetricName, f64>,
    ) {
        for tag in groups {
            for (metric, v) in metrics {
                self.add(
                    device,
                    GroupPair {
                        tag: tag.clone(),
                        metric: metric.clone(),
                    },
                    &Stats::at_sketched(at, *v),
                );
            }
        }
    }

    /// Adds a fold of readings of `device` to `pair`.
    pub fn add(&mut self, device: &DeviceId, pair: GroupPair, stats: &Stats) {
        let e = self
            .folds
            .entry(pair)
            .or_insert_with(|| (Stats::EMPTY, BTreeSet::new()));
        e.0.merge(stats);
        e.1.insert(device.clone());
    }

    /// Adds a fold of members' readings counted elsewhere ([`GroupFold::member`]).
    pub fn add_stats(&mut self, pair: GroupPair, stats: &Stats) {
        self.folds
            .entry(pair)
            .or_insert_with(|| (Stats::EMPTY, BTreeSet::new()))
            .0
            .merge(stats);
    }

    /// Adds everything `other` folded.
    pub fn absorb(&mut self, other: GroupFold) {
        for (pair, (stats, members)) in other.folds {
            let e = self
                .folds
                .entry(pair)
                .or_insert_with(|| (Stats::EMPTY, BTreeSet::new()));
            e.0.merge(&stats);
            e.1.extend(members);
        }
    }

    /// Counts `device` a member of `pair` in the bucket (its readings are folded elsewhere).
    pub fn member(&mut self, device: &DeviceId, pair: GroupPair) {
        self.folds
            .entry(pair)
            .or_insert_with(|| (Stats::EMPTY, BTreeSet::new()))
            .1
            .insert(device.clone());
    }

    /// The pairs with readings.
    pub fn pairs(&self) -> BTreeSet<GroupPair> {
        self.folds
            .iter()
            .filter(|(_, (s, _))| s.count > 0)
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// Each pair's fold and member count: what a slice of an hour hands its seal.
    pub fn sums(&self) -> Vec<GroupSum> {
        self.folds
            .iter()
            .map(|(p, (s, members))| GroupSum {
                pair: p.clone(),
                stats: s.clone(),
                members: members.len() as u64,
            })
            .collect()
    }

    /// One item per pair with readings.
    pub fn items(&self, bucket: Bucket, computed_at: Timestamp) -> Vec<GroupBucketItem> {
        self.folds
            .iter()
            .filter(|(_, (s, _))| s.count > 0)
            .map(|(p, (s, members))| {
                GroupBucketItem::new(
                    p.tag.clone(),
                    p.metric.clone(),
                    bucket,
                    s.clone(),
                    members.len() as u64,
                    computed_at,
                )
            })
            .collect()
    }
}

/// The groups `history` puts its device in at `t`.
pub fn groups_at(history: Option<&TagHistory>, keys: &[TagKey], t: Timestamp) -> Vec<Tag> {
    history.map(|h| h.groups_at(t, keys)).unwrap_or_default()
}

/// The groups `history` puts its device in at any time of `hour`.
pub fn groups_within(history: Option<&TagHistory>, keys: &[TagKey], hour: Bucket) -> Vec<Tag> {
    let Some(h) = history else {
        return Vec::new();
    };
    let all: BTreeSet<Tag> = h
        .spans(hour.start(), hour.end_exclusive())
        .into_iter()
        .flat_map(|(_, _, tags)| tags.groups(keys).collect::<Vec<_>>())
        .collect();
    all.into_iter().collect()
}

/// The devices table: one row per device and epoch of its tag history.
pub fn device_rows(histories: &HashMap<DeviceId, TagHistory>) -> Vec<DeviceRow> {
    let mut out = Vec::new();
    for (device, h) in histories {
        let epochs = h.epochs();
        for (i, e) in epochs.iter().enumerate() {
            let tags = serde_json::to_string(&e.tags).unwrap_or_else(|_| "{}".to_owned());
            out.push(DeviceRow {
                device: device.to_string(),
                tags,
                valid_from_us: e.from.epoch_micros(),
                valid_to_us: epochs.get(i + 1).map(|n| n.from.epoch_micros()),
            });
        }
    }
    out
}

/// The hours of the day `day`, as the sort-key range of one metric's hour items.
pub fn hours_of_day(day: Bucket) -> (Bucket, Bucket) {
    let first = Period::Hourly.bucket(day.start());
    let last = Period::Hourly.bucket(day.end_exclusive().minus_millis(1).unwrap_or(day.start()));
    (first, last)
}

/// A group's fold over a slice's members. Slices hold disjoint devices, so the hour's group
/// is the sum of its slices' sums, members included.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupSum {
    #[serde(flatten)]
    pub pair: GroupPair,
    pub stats: Stats,
    pub members: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_schema::{TagEpoch, TagValue, Tags};

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    #[test]
    fn a_device_history_is_a_row_per_epoch_each_valid_until_the_next() {
        let site = |v: &str| {
            Tags::new(
                [(TagKey::new("site").unwrap(), TagValue::new(v).unwrap())]
                    .into_iter()
                    .collect(),
            )
            .unwrap()
        };
        let h = TagHistory::from_epochs(vec![
            TagEpoch {
                from: ts("2026-04-20T00:00:00Z"),
                tags: site("A"),
            },
            TagEpoch {
                from: ts("2026-04-20T10:30:00Z"),
                tags: site("B"),
            },
        ]);
        let mut rows = device_rows(&HashMap::from([(DeviceId::new("d").unwrap(), h)]));
        rows.sort_by_key(|r| r.valid_from_us);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].tags, r#"{"site":"A"}"#);
        assert_eq!(rows[0].valid_to_us, Some(rows[1].valid_from_us));
        assert_eq!(rows[1].valid_to_us, None);
    }

    #[test]
    fn a_groups_members_are_the_devices_with_a_reading_of_the_metric() {
        let mut f = GroupFold::default();
        let a = Tag::parse("site:A").unwrap();
        let m = |s: &str| MetricName::new(s).unwrap();
        let t = ts("2026-04-20T10:00:00Z");
        for d in ["d1", "d2", "d1"] {
            let readings = BTreeMap::from([(m("t"), 1.0)]);
            f.add_reading(&DeviceId::new(d).unwrap(), [a.clone()], t, &readings);
        }
        let items = f.items(Period::Hourly.bucket(t), t);
        assert_eq!(items.len(), 1);
        assert_eq!((items[0].stats.count, items[0].devices), (3, 2));
        assert!(items[0].stats.sketch.is_some(), "always sketched");
    }
}
