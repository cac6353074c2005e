//! From derived folds to alert items and the device's rule states: what to write.

use std::collections::{BTreeMap, HashMap};

use tidemark_schema::{
    AlertId, AlertItem, AlertState, DeviceId, EntityKey, RulePhase, RuleState, Timestamp, keys,
    number,
};

use super::derive::{Derived, Reach};
use super::rules::{Episode, Phase, Rule};
pub use super::write::{AlertWrite, with_tags};

/// What one rule state becomes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SlotPlan {
    pub writes: Vec<AlertWrite>,
    /// `None`: the rule state is dropped (its threshold is gone).
    pub rule_state: Option<RuleState>,
}

pub fn alert_id(rule: &Rule, e: &Episode) -> AlertId {
    rule.alert_id(e.start)
}

/// The ID an episode goes by: the alert already stored for it, else one made from its start.
/// Late readings can move an episode's start earlier, never its alert: an alert of the rule
/// that opened inside the episode is that episode's, and keeps its ID, acknowledgement and
/// snooze (the earliest, should a late reading have joined two episodes into one). An
/// episode still open prefers an unresolved alert; failing one, a resolved alert inside it
/// is its own, reopened (a correction or late reading removed the end it was resolved at),
/// so the ID made from the episode's start never names a resolved alert left as it was.
pub fn episode_id(rule: &Rule, e: &Episode, known: &HashMap<AlertId, AlertItem>) -> AlertId {
    let end = e.resolved_at.unwrap_or(Timestamp::MAX);
    known
        .values()
        .filter(|a| rule.raised(a))
        .filter(|a| a.opened_at >= e.start && a.opened_at < end)
        .min_by_key(|a| {
            let passed_over = e.resolved_at.is_none() && a.state == AlertState::Resolved;
            (passed_over, a.opened_at, a.alert_id.clone())
        })
        .map_or_else(|| fresh_id(rule, e, known), |a| a.alert_id.clone())
}

/// The ID made from an episode's start, unless a stored alert that opened before the episode
/// has it: an earlier episode's, whose opening late readings moved back before a late clear
/// reading split this later part off (or whose readings a correction removed). Its ID keeps
/// naming that alert, so this episode takes the next microsecond whose ID is free.
fn fresh_id(rule: &Rule, e: &Episode, known: &HashMap<AlertId, AlertItem>) -> AlertId {
    let mut at = e.start;
    loop {
        let id = rule.alert_id(at);
        let earlier = known.get(&id).is_some_and(|a| a.opened_at < e.start);
        match at.succ() {
            Some(next) if earlier => at = next,
            _ => return id,
        }
    }
}

fn new_alert(device: &DeviceId, rule: &Rule, e: &Episode, id: &AlertId) -> AlertItem {
    let id = id.clone();
    let key = EntityKey::Alert {
        device: device.clone(),
        alert: id.clone(),
    }
    .key();
    let message = match &rule.spec {
        Some(spec) => spec.to_string(),
        None => {
            let side = if rule.above() { "above" } else { "below" };
            format!("{} {side} {}", rule.metric, number(rule.limit))
        }
    };
    let mut a = AlertItem {
        gsi1pk: Some(keys::severity_gsi1pk(rule.threshold.severity, &key.pk)),
        pk: key.pk,
        sk: key.sk,
        gsi1sk: Some(keys::alert_gsi1sk(&id)),
        device_id: device.clone(),
        alert_id: id,
        metric: Some(rule.metric.clone()),
        rule: rule.rule,
        rule_spec: rule.spec.clone(),
        severity: rule.threshold.severity,
        state: AlertState::Open,
        message,
        value: e.peak,
        threshold: rule.limit,
        breach_count: e.breaches,
        opened_at: e.opened_at,
        last_breach_at: e.last_breach_at,
        acknowledged_at: None,
        resolved_at: None,
        snoozed_until: None,
        tags: Default::default(),
    };
    if let Some(r) = e.resolved_at {
        resolve(&mut a, r);
    }
    a
}

/// A resolved alert open again: its resolution gone, its acknowledgement (if any) and snooze
/// kept, back in GSI1.
pub fn reopen(a: &mut AlertItem) {
    a.state = if a.acknowledged_at.is_some() {
        AlertState::Acknowledged
    } else {
        AlertState::Open
    };
    a.resolved_at = None;
    a.gsi1pk = Some(keys::severity_gsi1pk(a.severity, &a.pk));
    a.gsi1sk = Some(keys::alert_gsi1sk(&a.alert_id));
}

/// Resolution drops the index keys: GSI1 holds only alerts someone may still act on.
pub fn resolve(a: &mut AlertItem, at: Timestamp) {
    a.state = AlertState::Resolved;
    a.resolved_at = Some(at);
    a.gsi1pk = None;
    a.gsi1sk = None;
}

/// The episode's news for an alert that exists: statistics only grow (an episode folded
/// from a stored state has no peak of its own). A resolved alert changes only when its
/// episode is open again ([`reopen`]); one resolved as its episode is stays as it was.
fn moved_on(rule: &Rule, before: &AlertItem, e: &Episode) -> Option<AlertItem> {
    if before.state == AlertState::Resolved && e.resolved_at.is_some() {
        return None;
    }
    let mut a = before.clone();
    if before.state == AlertState::Resolved {
        reopen(&mut a);
    }
    if !e.peak.is_nan() {
        a.value = if rule.above() {
            a.value.max(e.peak)
        } else {
            a.value.min(e.peak)
        };
    }
    a.breach_count = a.breach_count.max(e.breaches);
    a.last_breach_at = a.last_breach_at.max(e.last_breach_at);
    a.opened_at = a.opened_at.min(e.opened_at);
    if let Some(r) = e.resolved_at {
        resolve(&mut a, r);
    }
    (a != *before).then_some(a)
}

/// What an episode writes: its alert created, or moved on (nothing when already as it is).
fn episode_write(
    device: &DeviceId,
    rule: &Rule,
    e: &Episode,
    id: &AlertId,
    known: &HashMap<AlertId, AlertItem>,
) -> Option<AlertWrite> {
    match known.get(id) {
        None => Some(AlertWrite::Create(Box::new(new_alert(device, rule, e, id)))),
        Some(before) => moved_on(rule, before, e).map(|after| {
            let (before, after) = (Box::new(before.clone()), Box::new(after));
            if before.state == AlertState::Resolved {
                AlertWrite::Reopen { before, after }
            } else {
                AlertWrite::Update { before, after }
            }
        }),
    }
}

/// The writes and the new rule state of one derived rule. `known` holds the stored alerts of the
/// episodes and of the rule state's open alert.
pub fn plan_derived(
    device: &DeviceId,
    d: &Derived,
    known: &HashMap<AlertId, AlertItem>,
) -> SlotPlan {
    let rule = &d.fold.rule;
    let mut plan = SlotPlan::default();
    let mut episodes: Vec<&Episode> = d.fold.closed.iter().collect();
    // A fold that stopped short of the newest reading: the stored state stands (see
    // [`Reach`]); only the episodes it closed are news.
    let stands = d.reach != Reach::Newest;
    if stands {
        for (e, id) in episodes.iter().map(|e| (e, episode_id(rule, e, known))) {
            plan.writes
                .extend(episode_write(device, rule, e, &id, known));
        }
        plan.rule_state = d.need.stored.clone();
        return plan;
    }
    if let Phase::Open(e) = &d.fold.phase {
        episodes.push(e);
    }
    let ids: Vec<AlertId> = episodes
        .iter()
        .map(|e| episode_id(rule, e, known))
        .collect();
    for (e, id) in episodes.iter().zip(&ids) {
        plan.writes
            .extend(episode_write(device, rule, e, id, known));
    }
    let at = d
        .fold
        .newest
        .or(d.need.stored.as_ref().map(|s| s.at))
        .or(d.anchor)
        .unwrap_or(d.need.from);
    // The stored open alert, if the readings no longer show it open, ends here.
    let open_now = match &d.fold.phase {
        Phase::Open(_) => ids.last().cloned(),
        _ => None,
    };
    if let Some(stale) = d.need.stored.as_ref().and_then(|s| s.alert.as_ref())
        && Some(stale) != open_now.as_ref()
        && !ids.contains(stale)
    {
        plan.writes.extend(resolve_write(known.get(stale), at));
    }
    let (mode, since) = match &d.fold.phase {
        Phase::Normal => (RulePhase::Normal, None),
        Phase::Pending { since, .. } => (RulePhase::Pending, Some(*since)),
        Phase::Open(e) => (RulePhase::Open, Some(e.start)),
    };
    let state = RuleState {
        mode,
        since,
        alert: open_now,
        at,
        threshold: rule.threshold.clone(),
    };
    // A rule of `rules` is derived at every reading of its metric: its state is written only
    // when it changes, not to move its time on (which only a threshold's skipping needs).
    plan.rule_state = match &d.need.stored {
        Some(s)
            if rule.spec.is_some()
                && (s.mode, s.since, &s.alert, &s.threshold)
                    == (state.mode, state.since, &state.alert, &state.threshold) =>
        {
            Some(s.clone())
        }
        _ => Some(state),
    };
    plan
}

/// Resolves an unresolved stored alert at `at` (nothing when it is gone or resolved).
pub fn resolve_write(stored: Option<&AlertItem>, at: Timestamp) -> Option<AlertWrite> {
    let before = stored.filter(|a| a.state != AlertState::Resolved)?;
    let mut after = before.clone();
    resolve(&mut after, at.max(before.last_breach_at));
    Some(AlertWrite::Update {
        before: Box::new(before.clone()),
        after: Box::new(after),
    })
}

/// The rule states' open alerts (the episodes' own are found by
/// [`crate::store::AlertStore::alerts_since`]).
pub fn rule_state_alerts(rule_states: &BTreeMap<String, RuleState>) -> Vec<AlertId> {
    let mut ids: Vec<AlertId> = rule_states
        .values()
        .filter_map(|s| s.alert.clone())
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// Where the derived episodes start at the earliest: every alert they may already have
/// opened at or after it.
pub fn episodes_from(derived: &[Derived]) -> Option<Timestamp> {
    derived
        .iter()
        .flat_map(|d| {
            let open = match &d.fold.phase {
                Phase::Open(e) => Some(e.start),
                _ => None,
            };
            d.fold.closed.iter().map(|e| e.start).chain(open)
        })
        .min()
}
