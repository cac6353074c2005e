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
use super::signal::Signal;
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
            quiet_since: None,
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

/// Where a fold begins: its signal fed the readings before its first, and its phase there.
#[derive(Debug, Clone)]
struct Start {
    anchor: Option<Timestamp>,
    signal: Signal,
    step_from: Timestamp,
    phase: Phase,
}

/// The anchor in a rule's readings before its `from` (`older`: newest first, every reading of
/// its metric from `fed_from` on; `complete`: there are none before): the newest reading
/// whose signal is settled and clear and whose run of such readings spans
/// `keepFiringForSeconds`, so the rule is normal after it whatever came before. The fold then
/// continues from it with its signal as it stands there.
fn anchor_in(
    rule: &Rule,
    older: &[(Timestamp, f64)],
    fed_from: Timestamp,
    complete: bool,
) -> Option<Start> {
    let mut signal = rule.signal();
    let mut run: Option<Timestamp> = None;
    let mut found: Option<usize> = None;
    for (i, (at, v)) in older.iter().rev().enumerate() {
        let class = rule.class_of(signal.push(*at, *v));
        if class == Class::Clear && signal.settled(fed_from, complete) {
            let since = *run.get_or_insert(*at);
            if at.epoch_micros() - since.epoch_micros() >= rule.keep_firing_micros() {
                found = Some(i);
            }
        } else {
            run = None;
        }
    }
    let found = found?;
    let mut signal = rule.signal();
    for (at, v) in older.iter().rev().take(found + 1) {
        signal.push(*at, *v);
    }
    let anchor = older[older.len() - 1 - found].0;
    Some(Start {
        anchor: Some(anchor),
        signal,
        step_from: anchor.succ().unwrap_or(Timestamp::MAX),
        phase: Phase::Normal,
    })
}

/// A resumed rule (a changed limit) continues from its stored phase at `resume_from`, with its
/// signal fed the readings before it (`older`, newest first, `resume_from`'s own included when
/// there is one), once the signal there is settled.
fn resume_in(
    n: &Need,
    resume_from: Timestamp,
    older: &[(Timestamp, f64)],
    fed_from: Timestamp,
    complete: bool,
) -> Option<Start> {
    let mut signal = n.rule.signal();
    for (at, v) in older.iter().rev().filter(|(at, _)| *at < resume_from) {
        signal.push(*at, *v);
    }
    let settled = match older.first().filter(|(at, _)| *at == resume_from) {
        Some((at, v)) => {
            let mut probe = signal.clone();
            probe.push(*at, *v);
            probe.settled(fed_from, complete)
        }
        None => true,
    };
    settled.then(|| Start {
        anchor: None,
        signal,
        step_from: resume_from,
        phase: phase_of(n.stored.as_ref()),
    })
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
    // Backwards: each rule's readings before where it starts (a resumed rule's own first
    // included), newest first, until its start is known.
    let below: Vec<Timestamp> = needs
        .iter()
        .zip(&resume_from)
        .map(|(n, r)| r.map_or(n.from, |r| r.succ().unwrap_or(Timestamp::MAX)))
        .collect();
    let mut older: Vec<Vec<(Timestamp, f64)>> = vec![Vec::new(); needs.len()];
    let mut starts: Vec<Option<Start>> = vec![None; needs.len()];
    let top = below.iter().copied().max().unwrap_or(Timestamp::MIN);
    let floor = top
        .minus_micros(limits.horizon_micros)
        .unwrap_or(Timestamp::MIN);
    let mut hi = top; // exclusive
    let mut scanned: u64 = 0;
    // The anchor is most often the reading just before: start with a small page and grow.
    let mut size = FIRST_PAGE.min(limits.page);
    let mut complete = false;
    while starts.iter().any(Option::is_none) {
        if scanned >= limits.max_back {
            break;
        }
        // Nothing older inside the horizon: every reading there has been seen.
        let last = hi.pred().filter(|l| *l >= floor);
        let page = match last {
            Some(last) => store.readings_page(device, floor, last, true, size).await?,
            None => Vec::new(),
        };
        scanned += page.len() as u64;
        for (at, metrics) in &page {
            for (i, n) in needs.iter().enumerate() {
                if starts[i].is_none()
                    && *at < below[i]
                    && let Some(v) = metrics.get(&n.rule.metric)
                {
                    older[i].push((*at, *v));
                }
            }
        }
        complete = last.is_none() || page.len() < size;
        if let Some((oldest, _)) = page.last() {
            hi = *oldest;
        }
        for (i, n) in needs.iter().enumerate() {
            if starts[i].is_some() {
                continue;
            }
            starts[i] = match resume_from[i] {
                Some(r) => resume_in(n, r, &older[i], hi, complete),
                None => anchor_in(&n.rule, &older[i], hi, complete),
            };
        }
        if complete {
            break;
        }
        size = (size * 4).min(limits.page);
    }
    // No start found: with every reading seen, the fold takes them all from the first;
    // otherwise (the budget ran out) it continues from the stored state at the oldest
    // reading read (the documented bound).
    let starts: Vec<Start> = starts
        .into_iter()
        .zip(&needs)
        .zip(&resume_from)
        .map(|((s, n), r)| {
            s.unwrap_or_else(|| match r {
                Some(r) => Start {
                    anchor: None,
                    signal: n.rule.signal(),
                    step_from: *r,
                    phase: phase_of(n.stored.as_ref()),
                },
                None if complete => Start {
                    anchor: None,
                    signal: n.rule.signal(),
                    step_from: floor,
                    phase: Phase::Normal,
                },
                None => Start {
                    anchor: None,
                    signal: n.rule.signal(),
                    step_from: hi,
                    phase: phase_of(n.stored.as_ref()),
                },
            })
        })
        .collect();
    let start = starts.iter().map(|s| s.step_from).min().unwrap_or(top);
    let mut folds: Vec<Fold> = needs
        .iter()
        .zip(&starts)
        .map(|(n, s)| Fold::warmed(n.rule.clone(), s.phase.clone(), s.signal.clone()))
        .collect();
    let mut reach: Vec<Option<Reach>> = vec![None; needs.len()];
    // Per rule, the first of the run of clear readings whose signal no change reaches.
    let mut quiet: Vec<Option<Timestamp>> = vec![None; needs.len()];
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
                if reach[i].is_some() || *at < starts[i].step_from {
                    continue;
                }
                let Some(v) = metrics.get(&n.rule.metric) else {
                    continue;
                };
                let class = f.step(*at, *v);
                // Past every change, clear readings whose signal no change reaches, for
                // `keepFiringForSeconds`: the old history from here on. (No stored rule
                // state is the normal state: nothing ever changed it.)
                if *at > n.until && class == Class::Clear && f.signal.independent_of(n.until) {
                    let q = *quiet[i].get_or_insert(*at);
                    if f.phase == Phase::Normal
                        && at.epoch_micros() - q.epoch_micros() >= n.rule.keep_firing_micros()
                    {
                        reach[i] = Some(Reach::Converged);
                    }
                } else {
                    quiet[i] = None;
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
        .zip(starts)
        .zip(folds)
        .zip(reach)
        .map(|(((need, start), fold), reach)| Derived {
            need,
            anchor: start.anchor,
            from: start.step_from,
            fold,
            reach: reach.unwrap_or(Reach::Newest),
        })
        .collect();
    // The device's newest reading, when the walk reached it.
    Ok((derived, newest.filter(|_| to_the_end)))
}
