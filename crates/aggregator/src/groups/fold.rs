//! What a batch's finished records did to its groups' hours, as pure functions: each reading
//! change ([`crate::records`]) attributed to the groups of its device's tags at the reading's
//! own time, folded per (group, hour), and cut into items of at most
//! [`PIECE_BYTES`].

use std::collections::{BTreeMap, HashMap};

use tidemark_schema::keys::Key;
use tidemark_schema::{
    DeviceId, GroupBatchItem, GroupPartialItem, MetricName, Stats, Tag, TagHistory, TagKey,
    Timestamp, keys,
};
use tidemark_store::limits::value_size;

use crate::records::{Change, StreamChange};

/// A partial item is cut into `<sequence>.<n>` pieces before it would pass this many bytes
/// (DynamoDB's limit is 400 KB; the margin covers the keys and `ttl`).
pub const PIECE_BYTES: usize = 350_000;

/// What a batch did to one group's hour: values stored, values replaced or deleted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Share {
    pub added: BTreeMap<MetricName, Stats>,
    pub removed: BTreeMap<MetricName, Stats>,
}

impl Share {
    fn add(side: &mut BTreeMap<MetricName, Stats>, m: &MetricName, at: Timestamp, v: f64) {
        let s = Stats::at_sketched(at, v);
        match side.get_mut(m) {
            Some(acc) => acc.merge(&s),
            None => {
                side.insert(m.clone(), s);
            }
        }
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
                Share::add(&mut share.added, m, img.at, *v);
            }
            for (m, v) in &removed {
                Share::add(&mut share.removed, m, img.at, *v);
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
/// whole would pass [`PIECE_BYTES`] (each metric's `added` and `removed` whole in one piece;
/// readers fold every piece alike).
pub fn pieces(
    tag: &Tag,
    hour: Timestamp,
    share: Share,
    batch: &str,
    ttl: i64,
) -> Vec<GroupPartialItem> {
    pieces_within(tag, hour, share, batch, ttl, PIECE_BYTES)
}

fn stats_bytes(m: &MetricName, s: &Stats) -> usize {
    let v = serde_dynamo::to_attribute_value(s)
        .map(|v| value_size(&v))
        .unwrap_or(PIECE_BYTES);
    m.as_str().len() + v + 1
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
            ttl,
        }
    };
    let mut out = vec![new(0)];
    let mut used = 0usize;
    let Share { added, mut removed } = share;
    let mut entries: Vec<(MetricName, Option<Stats>, Option<Stats>)> = added
        .into_iter()
        .map(|(m, a)| {
            let r = removed.remove(&m);
            (m, Some(a), r)
        })
        .collect();
    entries.extend(removed.into_iter().map(|(m, r)| (m, None, Some(r))));
    for (m, a, r) in entries {
        let bytes = a.as_ref().map_or(0, |s| stats_bytes(&m, s))
            + r.as_ref().map_or(0, |s| stats_bytes(&m, s));
        if used > 0 && used + bytes > limit {
            out.push(new(out.len()));
            used = 0;
        }
        used += bytes;
        let Some(last) = out.last_mut() else {
            continue;
        };
        if let Some(a) = a {
            last.added.insert(m.clone(), a);
        }
        if let Some(r) = r {
            last.removed.insert(m, r);
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
    use tidemark_schema::{TagEpoch, TagValue, Tags, fold_partials};

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
        assert_eq!((a.added[&m("t")].count, a.added[&m("t")].sum), (1, 1.0));
        assert_eq!((b.added[&m("t")].count, b.added[&m("t")].sum), (1, 2.0));
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
        assert_eq!(s.added.keys().collect::<Vec<_>>(), [&m("q"), &m("t")]);
        assert_eq!(s.removed.keys().collect::<Vec<_>>(), [&m("p"), &m("t")]);
        assert_eq!(s.added[&m("t")].sum, 2.0);
        assert_eq!(s.removed[&m("t")].sum, 1.0);
    }

    #[test]
    fn a_share_too_large_for_one_item_goes_on_in_numbered_pieces_that_fold_alike() {
        let tag = Tag::parse("site:A").unwrap();
        let hour = ts("2026-04-20T10:00:00Z");
        let mut share = Share::default();
        for i in 0..40 {
            let name = m(&format!("m{i:02}"));
            for k in 0..50 {
                Share::add(&mut share.added, &name, hour, f64::from(k) * 1.37 + 1.0);
            }
            Share::add(&mut share.removed, &name, hour, 1.0);
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
        for i in [0, 17, 39] {
            let name = m(&format!("m{i:02}"));
            assert_eq!(
                fold_partials(&cut, &name).map(|f| f.stats.count),
                fold_partials(&whole, &name).map(|f| f.stats.count)
            );
        }
    }
}
