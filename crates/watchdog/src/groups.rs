//! Group rules, judged at the end of each run (docs/design.md §5 "Group rules"): the group's
//! counts are the sums of its tag index partitions' counts, one batch read whatever the
//! group's size; a window is folded from the group partials' minutes, up to where the rollups
//! role has written them; the rule's state and any alert it opens or resolves are written
//! together, only when the standing changes.

use tidemark_schema::rules::Aggregate;
use tidemark_schema::{
    AlertId, GroupAlertItem, GroupMeasure, GroupRuleSpec, GroupRuleStateItem, TagCountItem,
    Timestamp, WindowStats,
};
use tidemark_store::{Item, StoreError, from_stored};

/// A group's counts: its members, and how many of them have an open offline alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupCounts {
    pub members: i64,
    pub offline: i64,
}

impl GroupCounts {
    /// The sums of a group's count items, as stored.
    pub fn of(items: Vec<Item>) -> Result<Self, StoreError> {
        let mut c = GroupCounts::default();
        for i in items {
            let n: TagCountItem = from_stored(i)?;
            c.members += n.members;
            c.offline += n.offline_members;
        }
        Ok(c)
    }
}

/// What a judgement changes: the rule's next state, and the alert it opens or resolves.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupStep {
    pub state: GroupRuleStateItem,
    pub open: Option<GroupAlertItem>,
    pub resolve: Option<AlertId>,
}

fn held_for(since: Timestamp, now: Timestamp, seconds: Option<u32>) -> bool {
    let needed = i64::from(seconds.unwrap_or(0)) * 1000;
    now.epoch_millis() - since.epoch_millis() >= needed
}

impl From<GroupCounts> for GroupMeasure {
    fn from(c: GroupCounts) -> GroupMeasure {
        GroupMeasure::Counts {
            members: c.members,
            offline: c.offline,
        }
    }
}

/// The whole minutes a window of `window_seconds` judges when the group partials hold
/// everything that arrived before `mark`: `[end - window, end)`, `end` the start of `mark`'s
/// minute (a minute still arriving is not judged half full).
pub fn window_span(window_seconds: u32, mark: Timestamp) -> Option<(Timestamp, Timestamp)> {
    let end = mark.minute_start();
    Some((end.plus_millis(-i64::from(window_seconds) * 1000)?, end))
}

/// The hours the span `[from, to)` touches.
pub fn hours_of(from: Timestamp, to: Timestamp) -> Vec<Timestamp> {
    let mut out = Vec::new();
    let mut h = from.hour_start();
    while h < to {
        out.push(h);
        match h.plus_millis(3_600_000) {
            Some(n) => h = n,
            None => break,
        }
    }
    out
}

/// The aggregate of a window's readings (`None`: no reading in it).
pub fn window_measure(aggregate: Aggregate, w: Option<WindowStats>) -> GroupMeasure {
    let Some(w) = w else {
        return GroupMeasure::Window {
            value: None,
            readings: 0,
        };
    };
    let value = match aggregate {
        Aggregate::Avg => w.sum / w.count as f64,
        Aggregate::Min => w.min,
        Aggregate::Max => w.max,
        Aggregate::Count => w.count as f64,
        Aggregate::Sum => w.sum,
        // Refused by the rule's parsing: no group keeps percentiles per minute.
        Aggregate::P95 => f64::NAN,
    };
    GroupMeasure::Window {
        value: value.is_finite().then_some(value),
        readings: w.count,
    }
}

/// The rule's standing at `now` given what it measured: `None` when nothing changes (the run
/// writes nothing). An alert opens once the condition has held `forSeconds` (at once
/// without), and resolves once it has not held for `keepFiringForSeconds`. A window without
/// readings is not breached.
pub fn judge(
    rule: &GroupRuleSpec,
    state: &GroupRuleStateItem,
    measure: GroupMeasure,
    now: Timestamp,
) -> Option<GroupStep> {
    let breached = measure.value().is_some_and(|v| rule.breached(v));
    let mut next = state.clone();
    let mut open = None;
    let mut resolve = None;
    match (&state.alert, breached) {
        (None, true) => {
            let since = state.breach_since.unwrap_or(now);
            if held_for(since, now, rule.for_seconds) {
                let alert = GroupAlertItem::open(rule, now, measure);
                next.alert = Some(alert.alert_id.clone());
                next.breach_since = None;
                open = Some(alert);
            } else {
                next.breach_since = Some(since);
            }
        }
        (None, false) => next.breach_since = None,
        (Some(_), true) => next.quiet_since = None,
        (Some(alert), false) => {
            let quiet = state.quiet_since.unwrap_or(now);
            if held_for(quiet, now, rule.keep_firing_for_seconds) {
                resolve = Some(alert.clone());
                next.alert = None;
                next.quiet_since = None;
            } else {
                next.quiet_since = Some(quiet);
            }
        }
    }
    (next != *state).then_some(GroupStep {
        state: next,
        open,
        resolve,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(v: serde_json::Value) -> GroupRuleSpec {
        GroupRuleSpec::from_value(&v).unwrap()
    }
    fn at(s: i64) -> Timestamp {
        Timestamp::from_epoch_millis(1_776_693_600_000 + s * 1000).unwrap()
    }
    fn counts(members: i64, offline: i64) -> GroupCounts {
        GroupCounts { members, offline }
    }

    /// The states and alerts of a rule judged at each `(second, members, offline)`.
    fn run(r: &GroupRuleSpec, steps: &[(i64, i64, i64)]) -> Vec<(i64, &'static str)> {
        let mut state = GroupRuleStateItem::new(r);
        let mut out = Vec::new();
        for (s, m, o) in steps {
            if let Some(step) = judge(r, &state, counts(*m, *o).into(), at(*s)) {
                if step.open.is_some() {
                    out.push((*s, "opened"));
                }
                if step.resolve.is_some() {
                    out.push((*s, "resolved"));
                }
                state = step.state;
            }
        }
        out
    }

    #[test]
    fn more_than_a_tenth_of_the_group_offline_opens_one_alert_and_it_resolves_when_back() {
        let r = rule(json!({"group":"site:A","offlineFraction":{"above":0.1}}));
        // 500 members: 50 offline is a tenth (not above it), 51 is above.
        let seen = run(
            &r,
            &[
                (0, 500, 0),
                (60, 500, 50),
                (120, 500, 51),
                (180, 500, 400),
                (240, 500, 10),
            ],
        );
        assert_eq!(seen, vec![(120, "opened"), (240, "resolved")]);
    }

    #[test]
    fn for_seconds_waits_and_keep_firing_for_holds_a_flapping_group_as_one_alert() {
        let r = rule(
            json!({"group":"site:A","offlineFraction":{"above":0.1},"forSeconds":120,"keepFiringForSeconds":180}),
        );
        let seen = run(
            &r,
            &[
                (0, 10, 5),   // breached: counting
                (60, 10, 5),  // 60 s: not yet
                (120, 10, 5), // 120 s: opens
                (180, 10, 0), // quiet: counting
                (240, 10, 5), // back: the same alert
                (300, 10, 0), // quiet again
                (420, 10, 0), // 120 s quiet: still firing
                (480, 10, 0), // 180 s quiet: resolves
            ],
        );
        assert_eq!(seen, vec![(120, "opened"), (480, "resolved")]);
    }

    #[test]
    fn a_breach_shorter_than_for_seconds_opens_nothing() {
        let r = rule(json!({"group":"site:A","offlineFraction":{"above":0.1},"forSeconds":300}));
        let seen = run(&r, &[(0, 10, 5), (240, 10, 5), (250, 10, 0), (600, 10, 5)]);
        assert!(seen.is_empty(), "{seen:?}");
    }

    #[test]
    fn an_unchanged_standing_writes_nothing_and_an_empty_group_is_never_offline() {
        let r = rule(json!({"group":"site:A","offlineFraction":{"above":0.0}}));
        let state = GroupRuleStateItem::new(&r);
        assert_eq!(judge(&r, &state, counts(0, 0).into(), at(0)), None);
        assert_eq!(judge(&r, &state, counts(100, 0).into(), at(0)), None);
        assert!(judge(&r, &state, counts(100, 1).into(), at(0)).is_some_and(|s| s.open.is_some()));
    }

    fn window(count: u64, sum: f64, min: f64, max: f64) -> Option<WindowStats> {
        Some(WindowStats {
            count,
            sum,
            min,
            max,
        })
    }

    #[test]
    fn a_window_rule_opens_on_the_aggregate_and_an_empty_window_is_not_breached() {
        let r = rule(
            json!({"group":"site:A","metric":"temperature","aggregate":"avg","window":"15m","above":28}),
        );
        let state = GroupRuleStateItem::new(&r);
        // a spike to 40 among 26s: the mean is 27.4, under the limit
        let calm = window_measure(Aggregate::Avg, window(10, 9.0 * 26.0 + 40.0, 26.0, 40.0));
        assert_eq!(judge(&r, &state, calm, at(0)), None);
        let hot = window_measure(Aggregate::Avg, window(4, 4.0 * 28.5, 28.0, 29.0));
        let step = judge(&r, &state, hot, at(60)).unwrap();
        let alert = step.open.unwrap();
        assert_eq!(
            (alert.value, alert.readings, alert.members),
            (28.5, Some(4), None)
        );
        let empty = window_measure(Aggregate::Avg, None);
        assert_eq!(empty.value(), None);
        assert_eq!(judge(&r, &state, empty, at(0)), None);
        let below = rule(
            json!({"group":"site:A","metric":"temperature","aggregate":"count","window":"5m","below":1}),
        );
        assert_eq!(
            judge(&below, &GroupRuleStateItem::new(&below), empty, at(0)),
            None
        );
    }

    #[test]
    fn each_aggregate_of_a_window() {
        let w = window(4, 10.0, 1.0, 4.0);
        let v = |a| window_measure(a, w).value().unwrap();
        assert_eq!(
            [
                v(Aggregate::Avg),
                v(Aggregate::Min),
                v(Aggregate::Max),
                v(Aggregate::Count),
                v(Aggregate::Sum)
            ],
            [2.5, 1.0, 4.0, 4.0, 10.0]
        );
    }

    #[test]
    fn a_window_judges_the_whole_minutes_before_the_mark_across_an_hour() {
        let ts = |s: &str| Timestamp::parse_rfc3339(s).unwrap();
        let (from, to) = window_span(900, ts("2026-04-20T11:07:42Z")).unwrap();
        assert_eq!(from, ts("2026-04-20T10:52:00Z"));
        assert_eq!(to, ts("2026-04-20T11:07:00Z"));
        assert_eq!(
            hours_of(from, to),
            [ts("2026-04-20T10:00:00Z"), ts("2026-04-20T11:00:00Z")]
        );
        let on_the_hour = ts("2026-04-20T11:00:30Z");
        let (f, t) = window_span(600, on_the_hour).unwrap();
        assert_eq!(
            hours_of(f, t).len(),
            1,
            "[10:50, 11:00) is the 10:00 hour only"
        );
    }
}
