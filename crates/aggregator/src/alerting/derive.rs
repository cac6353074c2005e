//! Deriving alert states again from the stored readings, in bounded memory.
//!
//! For each rule that must be derived from a time `from` on, the *anchor* is the newest
//! clear reading of its metric before `from` (after a clear reading every rule is normal, so
//! nothing older matters); the readings after the anchor are then folded in time order up to
//! the newest. Both walks read pages of at most [`ScanLimits::page`] readings per shard
//! partition, so a hot device's long history is never in memory at once.

use std::collections::BTreeMap;

use tidemark_schema::{AlertSlot, DeviceId, MetricName, SlotMode, Timestamp};
use tidemark_store::StoreError;

use super::rules::{Class, Episode, Fold, Phase, Rule};
use crate::store::ReadingStore;

/// A rule to derive, from the earliest reading that may change it.
#[derive(Debug, Clone)]
pub struct Need {
    pub rule: Rule,
    pub from: Timestamp,
    pub stored: Option<AlertSlot>,
    /// Continue from the stored state at `from` instead of deriving from an anchor: a changed
    /// threshold applies from the newest reading on and never replays history.
    pub resume: bool,
}

/// A rule derived: its fold over every reading after the anchor.
#[derive(Debug, Clone)]
pub struct Derived {
    pub need: Need,
    pub anchor: Option<Timestamp>,
    pub fold: Fold,
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
    /// Readings per page (per shard partition).
    pub page: usize,
}

impl Default for ScanLimits {
    fn default() -> Self {
        ScanLimits {
            max_back: 200_000,
            horizon_micros: 31 * 86_400 * 1_000_000,
            page: 2_000,
        }
    }
}

/// The first backward page: a few readings, since the anchor is usually among the newest.
const FIRST_PAGE: usize = 16;

/// The stored state as a fold's starting phase (when no anchor could be found, or the fold
/// resumes it).
fn phase_of(stored: Option<&AlertSlot>) -> Phase {
    match stored {
        Some(s) if s.mode == SlotMode::Pending => Phase::Pending {
            since: s.since.unwrap_or(s.at),
            peak: f64::NAN,
            breaches: 0,
            last: s.at,
        },
        Some(s) if s.mode == SlotMode::Open => Phase::Open(Episode {
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
    if needs.is_empty() {
        return Ok((Vec::new(), None));
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
        .zip(&needs)
        .map(|(a, n)| match a {
            _ if n.resume => n.from,
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
    let mut newest: Newest = None;
    let mut lo = start; // inclusive
    loop {
        let page = store
            .readings_page(device, lo, Timestamp::MAX, false, limits.page)
            .await?;
        for (at, metrics) in &page {
            for ((f, n), from) in folds.iter_mut().zip(&needs).zip(&own_from) {
                if *at >= *from
                    && let Some(v) = metrics.get(&n.rule.metric)
                {
                    f.step(*at, *v);
                }
            }
        }
        let full = page.len() >= limits.page;
        if let Some((at, m)) = page.into_iter().next_back() {
            lo = match at.succ() {
                Some(next) => next,
                None => {
                    newest = Some((at, m));
                    break;
                }
            };
            newest = Some((at, m));
        }
        if !full {
            break;
        }
    }
    let derived = needs
        .into_iter()
        .zip(anchors)
        .zip(folds)
        .map(|((need, anchor), fold)| Derived { need, anchor, fold })
        .collect();
    Ok((derived, newest))
}
