//! What a rule judges at each reading of its metric: the reading itself (a threshold), or a
//! value computed from the readings before it in time order (a rule of `rules`: a trailing
//! window's aggregate, the rate from the previous reading, how long the value has not
//! changed).
//!
//! A [`Signal`] is fed the metric's readings in time order and keeps only what its next value
//! needs: the window's readings, the previous reading, or the start of the current run of
//! equal values. Two questions make deriving it again from the table exact and bounded
//! ([`super::derive`]):
//! - [`Signal::settled`]: does the value at the last reading fed depend only on readings fed?
//!   (A derivation that starts feeding at some reading must know when its values are true.)
//! - [`Signal::independent_of`]: does it depend on no reading at or before a time? (After
//!   every change a batch brings, values that do not see the change are as they were.)

use std::collections::VecDeque;

use tidemark_schema::{Aggregate, RuleSpec, Timestamp};

const MICROS: i64 = 1_000_000;

/// The state of one rule's signal over the readings fed so far.
#[derive(Debug, Clone, PartialEq)]
pub enum Signal {
    /// A threshold: the reading's own value.
    Value { last: Option<Timestamp> },
    Window {
        aggregate: Aggregate,
        micros: i64,
        /// The readings in the window of the last one fed, oldest first.
        readings: VecDeque<(Timestamp, f64)>,
    },
    Rate {
        per_seconds: f64,
        /// The last reading fed.
        prev: Option<(Timestamp, f64)>,
        /// The reading before it: what the last value was taken from.
        from: Option<Timestamp>,
    },
    Stuck {
        /// The run of equal values the last reading ends: its value and first reading.
        run: Option<(f64, Timestamp)>,
        /// The reading before the run's first, when fed (its value differs).
        before_run: Option<Timestamp>,
        last: Option<Timestamp>,
    },
}

impl Signal {
    pub fn value() -> Signal {
        Signal::Value { last: None }
    }

    pub fn of(spec: &RuleSpec) -> Signal {
        match spec.signal {
            tidemark_schema::Signal::Window {
                aggregate,
                window_seconds,
            } => Signal::Window {
                aggregate,
                micros: i64::from(window_seconds) * MICROS,
                readings: VecDeque::new(),
            },
            tidemark_schema::Signal::Rate { per } => Signal::Rate {
                per_seconds: f64::from(per.seconds()),
                prev: None,
                from: None,
            },
            tidemark_schema::Signal::Stuck => Signal::Stuck {
                run: None,
                before_run: None,
                last: None,
            },
        }
    }

    /// Feeds the next reading (no older than the last one fed) and returns the signal's value
    /// at it; `None` where there is none yet (a rate's first reading), which judges clear.
    pub fn push(&mut self, at: Timestamp, v: f64) -> Option<f64> {
        match self {
            Signal::Value { last } => {
                *last = Some(at);
                Some(v)
            }
            Signal::Window {
                aggregate,
                micros,
                readings,
            } => {
                readings.push_back((at, v));
                let start = at.epoch_micros() - *micros; // exclusive
                while readings
                    .front()
                    .is_some_and(|(t, _)| t.epoch_micros() <= start)
                {
                    readings.pop_front();
                }
                Some(aggregate_of(*aggregate, readings))
            }
            Signal::Rate {
                per_seconds,
                prev,
                from,
            } => {
                *from = prev.map(|(t, _)| t);
                let out = prev.map(|(t, p)| {
                    let secs = (at.epoch_micros() - t.epoch_micros()) as f64 / MICROS as f64;
                    (v - p) / secs * *per_seconds
                });
                *prev = Some((at, v));
                out
            }
            Signal::Stuck {
                run,
                before_run,
                last,
            } => {
                match run {
                    Some((value, _)) if *value == v => {}
                    _ => {
                        *before_run = *last;
                        *run = Some((v, at));
                    }
                }
                *last = Some(at);
                run.map(|(_, since)| {
                    (at.epoch_micros() - since.epoch_micros()) as f64 / MICROS as f64
                })
            }
        }
    }

    /// Whether the value at the last reading fed is what the whole history gives, when the
    /// readings fed are every reading of the metric from `fed_from` on (`complete`: and
    /// there are none before).
    pub fn settled(&self, fed_from: Timestamp, complete: bool) -> bool {
        complete
            || match self {
                Signal::Value { last } => last.is_some(),
                Signal::Window {
                    micros, readings, ..
                } => readings
                    .back()
                    .is_some_and(|(t, _)| t.epoch_micros() - *micros >= fed_from.epoch_micros()),
                Signal::Rate { from, .. } => from.is_some(),
                Signal::Stuck { before_run, .. } => before_run.is_some(),
            }
    }

    /// Whether the value at the last reading fed depends on no reading at or before `t`
    /// (so a change there leaves it as it was).
    pub fn independent_of(&self, t: Timestamp) -> bool {
        match self {
            Signal::Value { last } => last.is_some_and(|l| l > t),
            Signal::Window {
                micros, readings, ..
            } => readings
                .back()
                .is_some_and(|(l, _)| l.epoch_micros() - *micros >= t.epoch_micros()),
            // The rate at the first reading depends on there being none before it.
            Signal::Rate { from, .. } => from.is_some_and(|f| f > t),
            Signal::Stuck { before_run, .. } => before_run.is_some_and(|b| b > t),
        }
    }
}

/// A window's aggregate; p95 is the nearest-rank 95th percentile (the value at rank
/// ⌈0.95·n⌉ of the sorted readings), exact.
fn aggregate_of(aggregate: Aggregate, readings: &VecDeque<(Timestamp, f64)>) -> f64 {
    let values = readings.iter().map(|(_, v)| *v);
    match aggregate {
        Aggregate::Count => readings.len() as f64,
        Aggregate::Sum => values.sum(),
        Aggregate::Avg => values.sum::<f64>() / readings.len() as f64,
        Aggregate::Min => values.fold(f64::INFINITY, f64::min),
        Aggregate::Max => values.fold(f64::NEG_INFINITY, f64::max),
        Aggregate::P95 => {
            let mut v: Vec<f64> = values.collect();
            v.sort_by(f64::total_cmp);
            let rank = (0.95 * v.len() as f64).ceil() as usize;
            v[rank.clamp(1, v.len()) - 1]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_epoch_micros(1_776_000_000_000_000 + s * MICROS).unwrap()
    }
    fn signal(v: serde_json::Value) -> Signal {
        Signal::of(&RuleSpec::from_value(&v).unwrap())
    }

    #[test]
    fn a_window_holds_the_readings_of_its_trailing_span_and_knows_when_it_has_them_all() {
        let mut s = signal(json!({"metric":"t","aggregate":"avg","window":"60s","above":1}));
        assert_eq!(s.push(t(0), 10.0), Some(10.0));
        assert_eq!(s.push(t(30), 20.0), Some(15.0));
        // (60 - 60, 60]: the reading at 0 is out
        assert_eq!(s.push(t(60), 30.0), Some(25.0));
        // fed from 0: the window of 60 reaches back to 0, all read
        assert!(s.settled(t(0), false));
        assert!(!s.settled(t(1), false));
        assert!(s.independent_of(t(0)));
        assert!(
            !s.independent_of(t(1)),
            "the reading at 30 is in the window"
        );
    }

    #[test]
    fn a_rate_is_the_change_from_the_previous_reading_per_unit() {
        let mut s = signal(json!({"metric":"t","rate":"per_minute","above":1}));
        assert_eq!(s.push(t(0), 1.0), None);
        assert!(
            !s.settled(t(0), false),
            "a first reading fed may not be the first"
        );
        assert!(s.settled(t(0), true));
        assert_eq!(s.push(t(30), 2.0), Some(2.0));
        assert!(s.settled(t(0), false));
        assert!(s.independent_of(t(-1)) && !s.independent_of(t(0)));
    }

    #[test]
    fn a_stuck_run_starts_at_its_first_equal_value_and_knows_the_reading_before_it() {
        let mut s = signal(json!({"metric":"t","unchangedForSeconds":60}));
        assert_eq!(s.push(t(0), 5.0), Some(0.0));
        assert!(!s.settled(t(0), false), "the run may have begun before");
        assert_eq!(s.push(t(10), 7.0), Some(0.0));
        assert_eq!(s.push(t(40), 7.0), Some(30.0));
        assert!(s.settled(t(0), false));
        // the run depends on the reading at 0 being different
        assert!(!s.independent_of(t(0)) && s.independent_of(t(-1)));
    }

    #[test]
    fn p95_is_the_nearest_rank_value() {
        let mut s = signal(json!({"metric":"t","aggregate":"p95","window":"1h","above":1}));
        let mut last = None;
        for i in 1..=20 {
            last = s.push(t(i), f64::from(i as i32));
        }
        // rank ⌈0.95 · 20⌉ = 19
        assert_eq!(last, Some(19.0));
    }
}
