//! Where "now" comes from. Every function takes one [`Clock`], injected, so a test can set
//! the time its bounds are judged against (future and retention limits, layout lead times,
//! the alerts' deadband clock, cursor ages) and the system clock is read in one place.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use crate::time::Timestamp;

/// The system clock, or a fixed one that says what it is told (tests, fixtures, replays of
/// recorded traffic). Clones of a fixed clock share its time: [`Clock::set`] moves them all.
#[derive(Debug, Clone, Default)]
pub struct Clock(Option<Arc<AtomicI64>>);

impl Clock {
    pub fn system() -> Self {
        Clock(None)
    }

    pub fn fixed(at: Timestamp) -> Self {
        Clock(Some(Arc::new(AtomicI64::new(at.epoch_micros()))))
    }

    pub fn is_system(&self) -> bool {
        self.0.is_none()
    }

    /// Moves a fixed clock (and its clones) to `at`; the system clock cannot be moved, so it
    /// is left alone and `false` returned.
    pub fn set(&self, at: Timestamp) -> bool {
        match &self.0 {
            Some(t) => {
                t.store(at.epoch_micros(), Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    pub fn now(&self) -> Timestamp {
        match &self.0 {
            None => Timestamp::now(),
            Some(t) => {
                Timestamp::from_epoch_micros(t.load(Ordering::Relaxed)).unwrap_or(Timestamp::MIN)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    #[test]
    fn a_fixed_clock_and_its_clones_say_what_they_are_told() {
        let c = Clock::fixed(ts("2026-04-20T14:00:00Z"));
        let copy = c.clone();
        assert_eq!(copy.now(), ts("2026-04-20T14:00:00Z"));
        assert!(c.set(ts("2026-04-20T15:00:00Z")));
        assert_eq!(copy.now(), ts("2026-04-20T15:00:00Z"));
    }

    #[test]
    fn the_system_clock_reads_the_time_and_cannot_be_set() {
        let c = Clock::system();
        let before = Timestamp::now();
        assert!(!c.set(ts("2000-01-01T00:00:00Z")));
        let now = c.now();
        assert!(
            now >= before && now <= Timestamp::now(),
            "{now} vs {before}"
        );
    }
}
