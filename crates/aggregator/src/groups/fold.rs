//! What a batch's finished records did to its groups' hours, as pure functions: each reading
//! change ([`crate::records`]) attributed to the groups of its device's tags at the reading's
//! own time, folded per (group, hour), and cut into items of at most
//! [`PIECE_BYTES`].

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tidemark_schema::keys::Key;
use tidemark_schema::{
    DeviceId, GroupBatchItem, GroupPartialItem, MetricName, Minute, MinuteStats, Minutes, Stats,
    Tag, TagHistory, TagKey, Timestamp, keys,
};
use tidemark_store::limits::value_size;

use crate::records::{Change, StreamChange};

/// A partial item is cut into `<sequence>.<n>` pieces before it would pass this many bytes
/// (DynamoDB's limit is 400 KB; the margin covers the keys and `ttl`).
pub const PIECE_BYTES: usize = 350_000;

/// What a batch did to one group's hour: values stored, values replaced or deleted, over
/// the hour and per minute.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Share {
    pub added: Side,
    pub removed: Side,
}

/// One side of a share: each metric's values over the hour and per minute.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Side {
    pub hour: BTreeMap<MetricName, Stats>,
    pub minutes: BTreeMap<MetricName, Minutes>,
}

impl Side {
    fn add(&mut self, m: &MetricName, at: Timestamp, v: f64) {
        let s = Stats::at_sketched(at, v);
        match self.hour.get_mut(m) {
            Some(acc) => acc.merge(&s),
            None => {
                self.hour.insert(m.clone(), s);
            }
        }
        let one = MinuteStats::of(v);
        self.minutes
            .entry(m.clone())
            .or_default()
            .entry(Minute::of(at))
            .and_modify(|acc| acc.merge(&one))
            .or_insert(one);
    }

    /// Takes out one metric's hour and minutes.
    fn take(&mut self, m: &MetricName) -> Option<(Stats, Minutes)> {
        let hour = self.hour.remove(m)?;
        Some((hour, self.minutes.remove(m).unwrap_or_default()))
    }
}

/// The groups a device is in at `at`: its tags then, of the keys in `GROUP_TAGS`.
pub fn groups_at(
    histories: &HashMap<DeviceId, TagHistory>,
    keys: &[TagKey],
    device: &DeviceId,
    at: Timestamp,
) -> Vec<Tag> {
    histories
        .get(device)
        .map(|h| h.groups_at(at, keys))
        .unwrap_or_default()
}

/// Folds the changes per (group, hour): a new reading adds its values; a correction removes
/// each replaced value and adds its replacement (a metric it keeps unchanged is left out, a
/// metric it drops only removed, one it adds only added); a delete removes its values. Each
/// reading counts in the groups of its own time.
pub fn shares<'a>(
    changes: impl IntoIterator<Item = &'a StreamChange>,
    groups: impl Fn(&DeviceId, Timestamp) -> Vec<Tag>,
) -> BTreeMap<(Tag, Timestamp), Share> {
    let mut out: BTreeMap<(Tag, Timestamp), Share> = BTreeMap::new();
    for sc in changes {
        let img = sc.change.image();
        let tags = groups(&img.device, img.at);
        if tags.is_empty() {
            continue;
        }
        let hour = img.at.hour_start();
        let mut added: Vec<(&MetricName, f64)> = Vec::new();
        let mut removed: Vec<(&MetricName, f64)> = Vec::new();
        match &sc.change {
            Change::Insert(i) => added.extend(i.metrics.iter().map(|(m, v)| (m, *v))),
            Change::Delete(i) => removed.extend(i.metrics.iter().map(|(m, v)| (m, *v))),
            Change::Correct { old, new } => {
                for (m, v) in &old.metrics {
                    if new.metrics.get(m) != Some(v) {
                        removed.push((m, *v));
                    }
                }
                for (m, v) in &new.metrics {
                    if old.metrics.get(m) != Some(v) {
                        added.push((m, *v));
                    }
                }
            }
        }
        if added.is_empty() && removed.is_empty() {
            continue;
        }
        for tag in tags {
            let share = out.entry((tag, hour)).or_default();
            for (m, v) in &added {
                share.added.add(m, img.at, *v);
            }
            for (m, v) in &removed {
                share.removed.add(m, img.at, *v);
            }
        }
    }
    out
}

/// The key of piece `n` of a batch's partial: `<sequence>`, then `<sequence>.<n>`.
pub fn piece_name(batch: &str, n: usize) -> String {
    if n == 0 {
        batch.to_owned()
    } else {
        format!("{batch}.{n}")
    }
}

/// The partial items of one (group, hour)'s share: one item, or several pieces when the
/// whole would pass [`PIECE_BYTES`] (each metric's `added` and `removed`, with their minutes,
/// whole in one piece; readers fold every piece alike).
pub fn pieces(
    tag: &Tag,
    hour: Timestamp,
    share: Share,
    batch: &str,
    ttl: i64,
) -> Vec<GroupPartialItem> {
    pieces_within(tag, hour, share, batch, ttl, PIECE_BYTES)
}

/// A metric's stored size on one side: its hour and its minutes, each under the metric's name.
fn side_bytes(m: &MetricName, (hour, minutes): &(Stats, Minutes)) -> usize {
    let size = |v: Result<aws_sdk_dynamodb::types::AttributeValue, _>| v.map(|v| value_size(&v));
    let hour = size(serde_dynamo::to_attribute_value(hour)).unwrap_or(PIECE_BYTES);
    let minutes = size(serde_dynamo::to_attribute_value(minutes)).unwrap_or(PIECE_BYTES);
    2 * (m.as_str().len() + 1) + hour + minutes
}

pub(crate) fn pieces_within(
    tag: &Tag,
    hour: Timestamp,
    share: Share,
    batch: &str,
    ttl: i64,
    limit: usize,
) -> Vec<GroupPartialItem> {
    let new = |n: usize| {
        let key = GroupPartialItem::key(tag, hour, &piece_name(batch, n));
        GroupPartialItem {
            pk: key.pk,
            sk: key.sk,
            added: BTreeMap::new(),
            removed: BTreeMap::new(),
            added_minutes: BTreeMap::new(),
            removed_minutes: BTreeMap::new(),
            ttl,
        }
    };
    let mut out = vec![new(0)];
    let mut used = 0usize;
    let Share {
        mut added,
        mut removed,
    } = share;
    let metrics: BTreeSet<MetricName> = added
        .hour
        .keys()
        .chain(removed.hour.keys())
        .cloned()
        .collect();
    for m in metrics {
        let (a, r) = (added.take(&m), removed.take(&m));
        let bytes = a.as_ref().map_or(0, |s| side_bytes(&m, s))
            + r.as_ref().map_or(0, |s| side_bytes(&m, s));
        if used > 0 && used + bytes > limit {
            out.push(new(out.len()));
            used = 0;
        }
        used += bytes;
        let Some(last) = out.last_mut() else {
            continue;
        };
        if let Some((hour, minutes)) = a {
            last.added.insert(m.clone(), hour);
            last.added_minutes.insert(m.clone(), minutes);
        }
        if let Some((hour, minutes)) = r {
            last.removed.insert(m.clone(), hour);
            last.removed_minutes.insert(m, minutes);
        }
    }
    out
}

/// The batch's manifest listing `parts`.
pub fn manifest(batch: &str, parts: Vec<Key>, ttl: i64) -> GroupBatchItem {
    let key = tidemark_schema::EntityKey::GroupBatch(batch.to_owned()).key();
    GroupBatchItem {
        pk: key.pk,
        sk: key.sk,
        parts,
        ttl,
    }
}

/// Whether `s` can name a batch (a stream sequence number).
pub fn valid_batch(s: &str) -> bool {
    keys::valid_sequence(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Image;
    use tidemark_schema::{TagEpoch, TagValue, Tags, fold_minutes, fold_partials};

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    fn m(s: &str) -> MetricName {
        MetricName::new(s).unwrap()
    }

    fn image(device: &str, at: &str, pairs: &[(&str, f64)]) -> Image {
        Image {
            pk: format!("DEVICE#{device}"),
            sk: String::new(),
            device: DeviceId::new(device).unwrap(),
            at: ts(at),
            metrics: pairs.iter().map(|(k, v)| (m(k), *v)).collect(),
        }
    }

    fn sc(change: Change) -> StreamChange {
        StreamChange {
            index: 0,
            seq: "1".into(),
            change,
        }
    }

    fn site(v: &str) -> Tags {
        Tags::new(
            [(TagKey::new("site").unwrap(), TagValue::new(v).unwrap())]
                .into_iter()
                .collect(),
        )
        .unwrap()
    }

    #[test]
    fn a_reading_counts_in_the_groups_of_its_own_time() {
        // GIVEN d moved from site A to site B at 10:30
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
        let histories = HashMap::from([(DeviceId::new("d").unwrap(), h)]);
        let keys = [TagKey::new("site").unwrap()];
        let changes = [
            sc(Change::Insert(image(
                "d",
                "2026-04-20T10:29:59Z",
                &[("t", 1.0)],
            ))),
            sc(Change::Insert(image(
                "d",
                "2026-04-20T10:30:00Z",
                &[("t", 2.0)],
            ))),
            sc(Change::Insert(image(
                "x",
                "2026-04-20T10:31:00Z",
                &[("t", 9.0)],
            ))),
        ];
        let got = shares(&changes, |d, t| groups_at(&histories, &keys, d, t));
        let hour = ts("2026-04-20T10:00:00Z");
        assert_eq!(got.len(), 2, "an untagged device is in no group: {got:?}");
        let a = &got[&(Tag::parse("site:A").unwrap(), hour)];
        let b = &got[&(Tag::parse("site:B").unwrap(), hour)];
        assert_eq!(
            (a.added.hour[&m("t")].count, a.added.hour[&m("t")].sum),
            (1, 1.0)
        );
        assert_eq!(
            (b.added.hour[&m("t")].count, b.added.hour[&m("t")].sum),
            (1, 2.0)
        );
        let minute = |s: &str| Minute::try_from(s.to_owned()).unwrap();
        assert_eq!(
            a.added.minutes[&m("t")][&minute("29")],
            MinuteStats::of(1.0)
        );
        assert_eq!(
            b.added.minutes[&m("t")][&minute("30")],
            MinuteStats::of(2.0)
        );
    }

    #[test]
    fn a_correction_removes_only_the_values_it_replaces() {
        let changes = [sc(Change::Correct {
            old: image(
                "d",
                "2026-04-20T10:00:00Z",
                &[("t", 1.0), ("h", 5.0), ("p", 3.0)],
            ),
            new: image(
                "d",
                "2026-04-20T10:00:00Z",
                &[("t", 2.0), ("h", 5.0), ("q", 4.0)],
            ),
        })];
        let tag = Tag::parse("site:A").unwrap();
        let got = shares(&changes, |_, _| vec![tag.clone()]);
        let s = &got[&(tag, ts("2026-04-20T10:00:00Z"))];
        assert_eq!(s.added.hour.keys().collect::<Vec<_>>(), [&m("q"), &m("t")]);
        assert_eq!(
            s.removed.hour.keys().collect::<Vec<_>>(),
            [&m("p"), &m("t")]
        );
        assert_eq!(s.added.hour[&m("t")].sum, 2.0);
        assert_eq!(s.removed.hour[&m("t")].sum, 1.0);
        assert_eq!(
            s.removed.minutes.keys().collect::<Vec<_>>(),
            [&m("p"), &m("t")]
        );
    }

    #[test]
    fn a_share_too_large_for_one_item_goes_on_in_numbered_pieces_that_fold_alike() {
        let tag = Tag::parse("site:A").unwrap();
        let hour = ts("2026-04-20T10:00:00Z");
        let mut share = Share::default();
        for i in 0..40 {
            let name = m(&format!("m{i:02}"));
            for k in 0..50 {
                let at = hour.plus_millis(i64::from(k) * 60_000).unwrap();
                share.added.add(&name, at, f64::from(k) * 1.37 + 1.0);
            }
            share.removed.add(&name, hour, 1.0);
        }
        let whole = pieces_within(&tag, hour, share.clone(), "42", 0, usize::MAX);
        assert_eq!(whole.len(), 1);
        assert_eq!(whole[0].sk, "42");
        let cut = pieces_within(&tag, hour, share, "42", 0, 2_000);
        assert!(cut.len() > 3, "{}", cut.len());
        assert_eq!(cut[2].sk, "42.2");
        for p in &cut {
            assert!(matches!(
                tidemark_schema::EntityKey::parse(&p.pk, &p.sk),
                Ok(tidemark_schema::EntityKey::GroupPartial { .. })
            ));
        }
        let end = ts("2026-04-20T11:00:00Z");
        for i in [0, 17, 39] {
            let name = m(&format!("m{i:02}"));
            assert_eq!(
                fold_partials(&cut, &name).map(|f| f.stats.count),
                fold_partials(&whole, &name).map(|f| f.stats.count)
            );
            let window = |parts: &[GroupPartialItem]| {
                fold_minutes(parts.iter().map(|p| (hour, p)), &name, hour, end)
            };
            assert_eq!(window(&cut), window(&whole));
            assert_eq!(window(&cut).map(|w| w.count), Some(49));
        }
    }
}
