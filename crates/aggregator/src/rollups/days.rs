//! A day's rollup follows its hours (docs/design.md §5): it is the sum of its 24 hourly
//! items, never built from stream records itself, so it needs no marks of its own (a day of
//! a busy device would have hundreds of thousands) and is exactly what its hours say.
//!
//! The daily item records, per hour, the version of the hourly item its content holds
//! (`folded`). After this batch wrote an hour from version `old` to `new`:
//! - the day holds `new` or later: nothing to do (a replay, or a faster writer);
//! - the day holds `old`: the hour's difference is added ([`merge`]), unless the hour lost
//!   an extreme or a first or last time (a correction or delete), which only a fold can
//!   find;
//! - otherwise (the day missed a write, e.g. a crash between an hour and its day, or the
//!   item predates this scheme): the day is folded from its hourly items, read strongly
//!   consistent after the day ([`fold`]).
//!
//! Every write of the day is conditional on its version as read, and every hour's write is
//! followed by its day's merge (retried with the batch until it lands), so the last write of
//! a day always holds its hours' last versions.
//!
//! **Only closed days are written so.** A day is open until a grace after its end, less the
//! role's clock margin (`rollups::closed`, the notion of "closed" its hours use too:
//! a day is folded only from hours closed by the same rule); while it is, its item is a placeholder (`open`) that
//! readers replace by the sum of its hours, written once, by the first batch that finds it
//! missing or holding content ([`step`] with `open`). So a device's batches write its hour and
//! not its day: one write per device per batch instead of two. The day is folded once it has
//! closed: by a batch writing one of its hours late, or by the device's first batch that
//! finds it open and closed ([`crate::rollups`]), and after that follows its hours as above.

use std::collections::BTreeMap;

use tidemark_schema::{AggregateItem, Bucket, Key, MetricName, Timestamp};

use crate::rollups::pages::{self, Recomputed};

/// What this batch did to one hour of a day: its content before and after (the same when the
/// batch applied nothing there), and whether it is paged.
#[derive(Debug, Clone, PartialEq)]
pub struct HourChange {
    pub hour: Bucket,
    pub old: Option<AggregateItem>,
    pub new: Option<AggregateItem>,
    pub old_version: u64,
    pub new_version: u64,
    pub paged: bool,
}

/// The hour's name in a day's `folded`.
pub fn hour_label(hour: Bucket) -> String {
    let s = hour.start().epoch_seconds();
    format!("{:02}", s.rem_euclid(86_400) / 3_600)
}

/// The version of an hour from its pages as read: any page's write raises it.
pub fn hour_version(pages: &[AggregateItem]) -> u64 {
    pages.iter().map(|p| p.version).sum()
}

/// What the day needs.
#[derive(Debug, Clone, PartialEq)]
pub enum DayStep {
    /// Already holds these hours.
    Nothing,
    /// This item, written on the version read.
    Write(AggregateItem),
    /// Fold it from its hourly items.
    Refold,
}

/// What the day `current` (as read; `None`: not written yet) needs after `hours` changed:
/// while the day is `open`, to be a placeholder; once closed, its hours merged in.
pub fn step(
    key: &Key,
    current: Option<&AggregateItem>,
    hours: &[HourChange],
    open: bool,
) -> DayStep {
    if open {
        if current.is_some_and(|c| c.open) {
            return DayStep::Nothing;
        }
        // The content, if any, stays as it is (readers do not look at it; a fold replaces it).
        let mut day = current
            .cloned()
            .unwrap_or_else(|| AggregateItem::empty(key));
        day.open = true;
        day.version = current.map_or(0, |c| c.version) + 1;
        return DayStep::Write(day);
    }
    merge(key, current, hours)
}

/// The closed day `current` (as read; `None`: not written yet) with `hours` merged in.
pub fn merge(key: &Key, current: Option<&AggregateItem>, hours: &[HourChange]) -> DayStep {
    // A placeholder holds no rollup to merge into.
    if current.is_some_and(|c| c.sealed || c.open) {
        return DayStep::Refold;
    }
    let mut day = current
        .cloned()
        .unwrap_or_else(|| AggregateItem::empty(key));
    let mut changed = false;
    for h in hours {
        let label = hour_label(h.hour);
        let held = day.folded.get(&label).copied().unwrap_or(0);
        if held >= h.new_version {
            continue;
        }
        // An hour that held readings before cannot be taken out of the day exactly (neither
        // its extremes nor its spread, first and last reading subtract): the day is folded
        // again. Only a late reading, a correction or a delete does that to a closed hour.
        let had = h
            .old
            .as_ref()
            .is_some_and(|o| o.metrics.values().any(|s| s.count > 0));
        if held != h.old_version || h.paged || had {
            return DayStep::Refold;
        }
        if day.metrics.is_empty() {
            // An emptied day's times are those of readings no longer there.
            (day.first_at, day.last_at) = (Timestamp::MAX, Timestamp::MIN);
        }
        if let Some(new) = &h.new {
            for (name, s) in new.metrics.iter().filter(|(_, s)| s.count > 0) {
                day.metrics
                    .entry(name.clone())
                    .and_modify(|d| d.merge(s))
                    .or_insert_with(|| s.clone());
            }
            if !new.metrics.values().all(|s| s.count == 0) {
                day.first_at = day.first_at.min(new.first_at);
                day.last_at = day.last_at.max(new.last_at);
            }
        }
        day.metrics.retain(|_, s| s.count > 0);
        day.folded.insert(label, h.new_version);
        changed = true;
    }
    if !changed {
        return DayStep::Nothing;
    }
    pages::settle(&mut day, current);
    DayStep::Write(day)
}

/// A day's content folded from its hours' pages (each hour's pages as read, strongly
/// consistent): per metric its stats and the span of the hour pages holding it, and per
/// hour the version folded.
pub fn fold(
    hours: &[(Bucket, Vec<AggregateItem>)],
) -> (BTreeMap<MetricName, Recomputed>, BTreeMap<String, u64>) {
    let mut target: BTreeMap<MetricName, Recomputed> = BTreeMap::new();
    let mut folded = BTreeMap::new();
    for (hour, pages) in hours {
        if pages.is_empty() {
            continue;
        }
        folded.insert(hour_label(*hour), hour_version(pages));
        for p in pages {
            for (name, s) in p.metrics.iter().filter(|(_, s)| s.count > 0) {
                target
                    .entry(name.clone())
                    .and_modify(|r| {
                        r.stats.merge(s);
                        r.first = r.first.min(p.first_at);
                        r.last = r.last.max(p.last_at);
                    })
                    .or_insert(Recomputed {
                        stats: s.clone(),
                        first: p.first_at,
                        last: p.last_at,
                    });
            }
        }
    }
    (target, folded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_schema::{DeviceId, Period, Stats};

    fn t(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    fn hour(h: &str, version: u64, vals: &[f64]) -> AggregateItem {
        let at = t(&format!("2026-04-20T{h}:00:00Z"));
        let mut item = AggregateItem::empty(&AggregateItem::key_for(
            &DeviceId::new("d").unwrap(),
            Period::Hourly.bucket(at),
        ));
        let mut s: Option<Stats> = None;
        for (i, v) in vals.iter().enumerate() {
            let one = Stats::at(at.plus_millis(i as i64 * 60_000).unwrap(), *v);
            match &mut s {
                Some(s) => s.merge(&one),
                None => s = Some(one),
            }
        }
        if let Some(s) = s {
            item.metrics.insert(MetricName::new("t").unwrap(), s);
            item.first_at = at;
            item.last_at = at.plus_millis(vals.len() as i64 * 60_000 - 60_000).unwrap();
        }
        item.version = version;
        item
    }

    fn day_key() -> Key {
        AggregateItem::key_for(
            &DeviceId::new("d").unwrap(),
            Period::Daily.bucket(t("2026-04-20T00:00:00Z")),
        )
    }

    fn change(h: &str, old: Option<AggregateItem>, new: AggregateItem) -> HourChange {
        HourChange {
            hour: Period::Hourly.bucket(t(&format!("2026-04-20T{h}:00:00Z"))),
            old_version: old.as_ref().map_or(0, |o| o.version),
            new_version: new.version,
            old,
            new: Some(new),
            paged: false,
        }
    }

    fn stats(d: &AggregateItem) -> (u64, f64, f64, f64) {
        let s = &d.metrics[&MetricName::new("t").unwrap()];
        (s.count, s.sum, s.min, s.max)
    }

    #[test]
    fn a_new_hour_adds_to_its_day_and_a_replay_of_it_changes_nothing() {
        let c = change("14", None, hour("14", 1, &[1.0, 3.0]));
        let DayStep::Write(day) = merge(&day_key(), None, std::slice::from_ref(&c)) else {
            panic!("a new day is written")
        };
        assert_eq!(stats(&day), (2, 4.0, 1.0, 3.0));
        assert_eq!(day.folded["14"], 1);
        assert_eq!(merge(&day_key(), Some(&day), &[c]), DayStep::Nothing);
    }

    #[test]
    fn hours_added_one_by_one_give_the_day_their_sum_and_a_changed_hour_a_fold() {
        let h1 = hour("14", 1, &[1.0, 3.0]);
        let DayStep::Write(day) = merge(&day_key(), None, &[change("14", None, h1.clone())]) else {
            panic!()
        };
        let DayStep::Write(day) = merge(
            &day_key(),
            Some(&day),
            &[change("15", None, hour("15", 1, &[7.0]))],
        ) else {
            panic!()
        };
        assert_eq!(stats(&day), (3, 11.0, 1.0, 7.0));
        let t = &day.metrics[&MetricName::new("t").unwrap()];
        // 1, 3, 7: mean 11/3, sample variance (64/9 + 4/9 + 100/9) / 2 = 28/3
        assert!((t.stddev().unwrap() - (28.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!(t.first.map(|f| f.1), Some(1.0));
        assert_eq!(t.last.map(|l| l.1), Some(7.0));
        assert_eq!(day.version, 2);
        // A late reading into hour 14: the day is folded, not patched.
        let h2 = hour("14", 2, &[1.0, 3.0, 0.5]);
        assert_eq!(
            merge(&day_key(), Some(&day), &[change("14", Some(h1), h2)]),
            DayStep::Refold
        );
    }

    #[test]
    fn a_day_that_missed_a_write_of_the_hour_or_lost_an_extreme_is_folded() {
        let h1 = hour("14", 1, &[1.0, 3.0]);
        let DayStep::Write(day) = merge(&day_key(), None, &[change("14", None, h1.clone())]) else {
            panic!()
        };
        // version 2 was written by a batch that never reached the day
        let h2 = hour("14", 2, &[1.0, 3.0, 4.0]);
        let h3 = hour("14", 3, &[1.0, 3.0, 4.0, 5.0]);
        assert_eq!(
            merge(&day_key(), Some(&day), &[change("14", Some(h2), h3)]),
            DayStep::Refold
        );
        // a correction lowered the hour's maximum
        let lowered = hour("14", 2, &[1.0, 2.0]);
        assert_eq!(
            merge(&day_key(), Some(&day), &[change("14", Some(h1), lowered)]),
            DayStep::Refold
        );
    }

    #[test]
    fn a_day_emptied_by_deletes_takes_the_times_of_its_next_reading() {
        let h1 = hour("14", 1, &[1.0]);
        let DayStep::Write(day) = merge(&day_key(), None, &[change("14", None, h1)]) else {
            panic!()
        };
        let (target, folded) = fold(&[(
            Period::Hourly.bucket(t("2026-04-20T14:00:00Z")),
            vec![hour("14", 2, &[])],
        )]);
        let mut emptied = pages::one_item(&day_key(), Some(&day), &target);
        emptied.folded = folded;
        assert!(emptied.metrics.is_empty());
        let DayStep::Write(day) = merge(
            &day_key(),
            Some(&emptied),
            &[change("16", None, hour("16", 1, &[2.0]))],
        ) else {
            panic!()
        };
        assert_eq!(day.first_at, t("2026-04-20T16:00:00Z"));
        assert_eq!(day.last_at, t("2026-04-20T16:00:00Z"));
    }

    #[test]
    fn an_open_day_is_a_placeholder_written_once_and_folded_when_it_closes() {
        let c = change("14", None, hour("14", 1, &[1.0, 3.0]));
        // Open: a placeholder, whatever the hours did.
        let DayStep::Write(placeholder) = step(&day_key(), None, std::slice::from_ref(&c), true)
        else {
            panic!("a missing open day gets its placeholder")
        };
        assert!(placeholder.open);
        assert!(placeholder.metrics.is_empty());
        assert_eq!(placeholder.version, 1);
        // The next batches of the open day write no day at all.
        let later = change("15", None, hour("15", 1, &[7.0]));
        assert_eq!(
            step(
                &day_key(),
                Some(&placeholder),
                std::slice::from_ref(&later),
                true
            ),
            DayStep::Nothing
        );
        // Closed: a placeholder holds nothing to merge into, so the day is folded.
        assert_eq!(
            step(&day_key(), Some(&placeholder), &[later], false),
            DayStep::Refold
        );
        // A day written with content (before days had placeholders) becomes one while open.
        let DayStep::Write(day) = merge(&day_key(), None, &[c]) else {
            panic!()
        };
        let DayStep::Write(again) = step(&day_key(), Some(&day), &[], true) else {
            panic!("content of an open day is replaced by a placeholder")
        };
        assert!(again.open);
        assert_eq!(again.version, day.version + 1);
    }

    #[test]
    fn a_fold_sums_the_hours_and_records_their_versions() {
        let hours = vec![
            (
                Period::Hourly.bucket(t("2026-04-20T14:00:00Z")),
                vec![hour("14", 4, &[1.0, 3.0])],
            ),
            (Period::Hourly.bucket(t("2026-04-20T15:00:00Z")), vec![]),
            (
                Period::Hourly.bucket(t("2026-04-20T16:00:00Z")),
                vec![hour("16", 2, &[9.0])],
            ),
        ];
        let (target, folded) = fold(&hours);
        let mut day = pages::one_item(&day_key(), None, &target);
        day.folded = folded;
        assert_eq!(stats(&day), (3, 13.0, 1.0, 9.0));
        assert_eq!(day.first_at, t("2026-04-20T14:00:00Z"));
        assert_eq!(day.last_at, t("2026-04-20T16:00:00Z"));
        assert_eq!(
            day.folded,
            BTreeMap::from([("14".into(), 4), ("16".into(), 2)])
        );
        assert!(!pages::differs(Some(&day), &day));
    }
}
