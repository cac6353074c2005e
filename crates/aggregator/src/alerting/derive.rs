//! Deriving alert states again from the stored readings, in bounded memory.
//!
//! For each rule that must be derived from a time `from` on, the *anchor* is the newest
//! clear reading of its metric before `from` (after a clear reading every rule is normal, so
//! nothing older matters); the readings after the anchor are then folded in time order. Both
//! walks read pages of at most [`ScanLimits::page`] readings per partition, so a hot
//! device's long history is never in memory at once.
//!
//! The same property bounds the forward walk: the fold stops at the first clear reading after
//! every change the batch brings (`until`), where the new history rejoins the old one, so the
//! stored state holds from there on ([`Reach::Converged`]): a late reading from last month
//! reads the readings around it, not a month of them. A change whose effect runs on for more
//! than [`ScanLimits::max_forward`] readings (a breach or hold that long) is derived that far;
//! the rule is then derived again from its newest change, so its current state is exact, and
//! the episodes in between stay as they were decided (the documented bound).

use std::collections::BTreeMap;

use tidemark_schema::{DeviceId, MetricName, RulePhase, RuleState, Timestamp};
use tidemark_store::StoreError;

use super::rules::{Class, Episode, Fold, Phase, Rule};
use crate::store::ReadingStore;

/// A rule to derive, from the earliest reading that may change it.
#[derive(Debug, Clone)]
pub struct Need {
    pub rule: Rule,
    pub from: Timestamp,
    pub stored: Option<RuleState>,
    /// Continue from the stored state at the metric's newest reading instead of deriving from
    /// an anchor: a changed threshold applies from the newest reading on and never replays
    /// history.
    pub resume: bool,
    /// The newest change the batch brings to the rule's metric: the fold may stop at the
    /// first clear reading after it.
    pub until: Timestamp,
}

/// How far a derivation's fold went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Up to the newest reading: its phase is the rule's state.
    Newest,
    /// To a clear reading after every change: the stored state stands from there on.
    Converged,
    /// To [`ScanLimits::max_forward`] readings, twice (see the module docs): the stored
    /// state stands.
    Cut,
}

/// A rule derived: its fold over every reading after the anchor.
#[derive(Debug, Clone)]
pub struct Derived {
    pub need: Need,
    pub anchor: Option<Timestamp>,
    /// The first reading the fold took.
    pub from: Timestamp,
    pub fold: Fold,
    pub reach: Reach,
}

/// How far the walks go.
#[derive(Debug, Clone, Copy)]
pub struct ScanLimits {
    /// Readings looked at backwards before giving up on finding an anchor; the fold then
    /// starts from the stored state (documented bound: a breach or deadband hold longer than
    /// this many readings is continued from the stored state, not re-derived).
    pub max_back: u64,
    /// How far back to look for an anchor at all.
    pub horizon_micros: i64,
    /// Readings folded forwards before a change's effect is cut (see the module docs).
    pub max_forward: u64,
    /// Readings per page (per partition).
    pub page: usize,
}

impl Default for ScanLimits {
    fn default() -> Self {
        ScanLimits {
            max_back: 200_000,
            horizon_micros: 31 * 86_400 * 1_000_000,
            max_forward: 200_000,
            page: 2_000,
        }
    }
}

/// The first backward page: a few readings, since the anchor is usually among the newest.
const FIRST_PAGE: usize = 16;

/// The stored state as a fold's starting phase (when no anchor could be found, or the fold
/// resumes it).
fn phase_of(stored: Option<&RuleState>) -> Phase {
    match stored {
        Some(s) if s.mode == RulePhase::Pending => Phase::Pending {
            since: s.since.unwrap_or(s.at),
            peak: f64::NAN,
            breaches: 0,
            last: s.at,
        },
        Some(s) if s.mode == RulePhase::Open => Phase::Open(Episode {
            start: s.since.unwrap_or(s.at),
            opened_at: s.since.unwrap_or(s.at),
            peak: f64::NAN,
            breaches: 0,
            last_breach_at: s.at,
            resolved_at: None,
        }),
        _ => Phase::Normal,
    }
}

/// The newest reading seen by a derivation (for the device's `latest`).
pub type Newest = Option<(Timestamp, BTreeMap<MetricName, f64>)>;

pub async fn derive<S: ReadingStore>(
    store: &S,
    device: &DeviceId,
    needs: Vec<Need>,
    limits: &ScanLimits,
) -> Result<(Vec<Derived>, Newest), StoreError> {
    let (mut derived, newest) = derive_once(store, device, needs, limits).await?;
    // A change whose effect outran the budget: derive the rule again from its newest change.
    let again: Vec<Need> = derived
        .iter()
        .filter(|d| d.reach == Reach::Cut && !d.need.resume)
        .filter(|d| d.fold.newest.is_none_or(|n| n < d.need.until))
        .map(|d| Need {
            from: d.need.until,
            ..d.need.clone()
        })
        .collect();
    if again.is_empty() {
        return Ok((derived, newest));
    }
    let (second, newer) = derive_once(store, device, again, limits).await?;
    for s in second {
        let Some(d) = derived
            .iter_mut()
            .find(|d| d.need.rule == s.need.rule && d.reach == Reach::Cut)
        else {
            continue;
        };
        // The first walk's episodes that ended before the second one starts are exact; the
        // second walk's fold is the rule's state.
        let mut closed: Vec<Episode> = d
            .fold
            .closed
            .drain(..)
            .filter(|e| e.resolved_at.is_some_and(|r| r < s.from))
            .collect();
        closed.extend(s.fold.closed);
        d.fold = Fold { closed, ..s.fold };
        d.reach = s.reach;
    }
    Ok((derived, newer.or(newest)))
}

/// The newest reading of `n`'s metric at or after `n.from` (bounded by `max_back`).
async fn newest_of_metric<S: ReadingStore>(
    store: &S,
    device: &DeviceId,
    n: &Need,
    limits: &ScanLimits,
) -> Result<Option<Timestamp>, StoreError> {
    let mut hi = Timestamp::MAX; // inclusive
    let mut size = FIRST_PAGE.min(limits.page);
    let mut scanned: u64 = 0;
    while scanned < limits.max_back {
        let page = store.readings_page(device, n.from, hi, true, size).await?;
        scanned += page.len() as u64;
        if let Some((at, _)) = page.iter().find(|(_, m)| m.contains_key(&n.rule.metric)) {
            return Ok(Some(*at));
        }
        match page.last().and_then(|(oldest, _)| oldest.pred()) {
            Some(next) if page.len() >= size => {
                hi = next;
                size = (size * 4).min(limits.page);
            }
            _ => break,
        }
    }
    Ok(None)
}

async fn derive_once<S: ReadingStore>(
    store: &S,
    device: &DeviceId,
    needs: Vec<Need>,
    limits: &ScanLimits,
) -> Result<(Vec<Derived>, Newest), StoreError> {
    if needs.is_empty() {
        return Ok((Vec::new(), None));
    }
    // A resumed rule starts at its metric's newest reading.
    let mut resume_from: Vec<Option<Timestamp>> = vec![None; needs.len()];
    for (i, n) in needs.iter().enumerate() {
        if n.resume {
            resume_from[i] = Some(
                newest_of_metric(store, device, n, limits)
                    .await?
                    .unwrap_or(n.from),
            );
        }
    }
    // Backwards: one anchor per need.
    let mut anchors: Vec<Option<Timestamp>> = vec![None; needs.len()];
    let mut open: Vec<bool> = needs.iter().map(|n| !n.resume).collect();
    let top = needs.iter().map(|n| n.from).max().unwrap_or(Timestamp::MIN);
    let floor = top
        .minus_micros(limits.horizon_micros)
        .unwrap_or(Timestamp::MIN);
    let mut hi = top; // exclusive
    let mut scanned: u64 = 0;
    // The anchor is most often the reading just before: start with a small page and grow.
    let mut size = FIRST_PAGE.min(limits.page);
    let mut truncated = false;
    while open.iter().any(|o| *o) {
        if scanned >= limits.max_back {
            truncated = true;
            break;
        }
        let Some(last) = hi.pred().filter(|l| *l >= floor) else {
            break;
        };
        let page = store.readings_page(device, floor, last, true, size).await?;
        scanned += page.len() as u64;
        for (at, metrics) in &page {
            for (i, n) in needs.iter().enumerate() {
                if !open[i] || *at >= n.from {
                    continue;
                }
                if let Some(v) = metrics.get(&n.rule.metric)
                    && n.rule.class(*v) == Class::Clear
                {
                    anchors[i] = Some(*at);
                    open[i] = false;
                }
            }
        }
        match page.last() {
            Some((oldest, _)) if page.len() >= size => {
                hi = *oldest;
                size = (size * 4).min(limits.page);
            }
            _ => {
                // Nothing older: the walk reached the first reading (or the horizon).
                break;
            }
        }
    }
    // Forwards from the oldest anchor, each fold taking only what follows its own (or, with
    // none found, everything from where the backward walk stopped).
    let own_from: Vec<Timestamp> = anchors
        .iter()
        .zip(&resume_from)
        .map(|(a, r)| match a {
            _ if r.is_some() => r.unwrap_or(Timestamp::MIN),
            Some(a) => a.succ().unwrap_or(Timestamp::MAX),
            None if truncated => hi,
            None => floor,
        })
        .collect();
    let start = own_from.iter().copied().min().unwrap_or(top);
    let mut folds: Vec<Fold> = needs
        .iter()
        .zip(&anchors)
        .map(|(n, a)| {
            let phase = if n.resume || (a.is_none() && truncated) {
                phase_of(n.stored.as_ref())
            } else {
                Phase::Normal
            };
            Fold::new(n.rule.clone(), phase)
        })
        .collect();
    let mut reach: Vec<Option<Reach>> = vec![None; needs.len()];
    let mut newest: Newest = None;
    let mut lo = start; // inclusive
    let mut folded: u64 = 0;
    let mut to_the_end = false;
    loop {
        let page = store
            .readings_page(device, lo, Timestamp::MAX, false, limits.page)
            .await?;
        folded += page.len() as u64;
        for (at, metrics) in &page {
            for (i, (f, n)) in folds.iter_mut().zip(&needs).enumerate() {
                if reach[i].is_some() || *at < own_from[i] {
                    continue;
                }
                let Some(v) = metrics.get(&n.rule.metric) else {
                    continue;
                };
                f.step(*at, *v);
                // Past every change, a clear reading: the old history from here on.
                // (No stored rule state is the normal state: nothing ever changed it.)
                if *at > n.until && f.phase == Phase::Normal && n.rule.class(*v) == Class::Clear {
                    reach[i] = Some(Reach::Converged);
                }
            }
        }
        let full = page.len() >= limits.page;
        if let Some((at, m)) = page.into_iter().next_back() {
            newest = Some((at, m));
            match at.succ() {
                Some(next) => lo = next,
                None => {
                    to_the_end = true;
                    break;
                }
            }
        }
        if !full {
            to_the_end = true;
            break;
        }
        if reach.iter().all(Option::is_some) {
            break;
        }
        if folded >= limits.max_forward {
            for r in reach.iter_mut().filter(|r| r.is_none()) {
                *r = Some(Reach::Cut);
            }
            break;
        }
    }
    let derived = needs
        .into_iter()
        .zip(anchors)
        .zip(own_from)
        .zip(folds)
        .zip(reach)
        .map(|((((need, anchor), from), fold), reach)| Derived {
            need,
            anchor,
            from,
            fold,
            reach: reach.unwrap_or(Reach::Newest),
        })
        .collect();
    // The device's newest reading, when the walk reached it.
    Ok((derived, newest.filter(|_| to_the_end)))
}
