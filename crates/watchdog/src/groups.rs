//! Group rules, judged at the end of each run (docs/design.md §5 "Group rules"): the group's
//! counts are the sums of its tag index partitions' counts, one batch read whatever the
//! group's size; the rule's state and any alert it opens or resolves are written together,
//! only when the standing changes.

use tidemark_schema::{
    AlertId, GroupAlertItem, GroupRuleSpec, GroupRuleStateItem, TagCountItem, Timestamp, fraction,
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

/// The rule's standing at `now` given the counts: `None` when nothing changes (the run
/// writes nothing). An alert opens once the condition has held `forSeconds` (at once
/// without), and resolves once it has not held for `keepFiringForSeconds`.
pub fn judge(
    rule: &GroupRuleSpec,
    state: &GroupRuleStateItem,
    counts: GroupCounts,
    now: Timestamp,
) -> Option<GroupStep> {
    let breached = rule.breached(fraction(counts.members, counts.offline));
    let mut next = state.clone();
    let mut open = None;
    let mut resolve = None;
    match (&state.alert, breached) {
        (None, true) => {
            let since = state.breach_since.unwrap_or(now);
            if held_for(since, now, rule.for_seconds) {
                let alert = GroupAlertItem::open(rule, now, counts.members, counts.offline);
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
            if let Some(step) = judge(r, &state, counts(*m, *o), at(*s)) {
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
        assert_eq!(judge(&r, &state, counts(0, 0), at(0)), None);
        assert_eq!(judge(&r, &state, counts(100, 0), at(0)), None);
        assert!(judge(&r, &state, counts(100, 1), at(0)).is_some_and(|s| s.open.is_some()));
    }
}
