//! A Lambda invocation's deadline as an [`Instant`]: every function stops its
//! work early enough to answer with what it has not finished (`batchItemFailures`) instead of
//! being killed, which would fail and retry the whole batch.

use std::time::{Duration, Instant};

/// How long is left until `deadline_epoch_ms` (a Lambda context's deadline), as an
/// [`Instant`]; a deadline already past gives now.
pub fn from_epoch_millis(deadline_epoch_ms: u64) -> Instant {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    Instant::now() + time_left(deadline_epoch_ms, now_ms)
}

/// Before 2001 in epoch milliseconds: no real deadline is that early.
const EARLIEST_EPOCH_DEADLINE_MS: u64 = 1_000_000_000_000;

/// Lambda sends the deadline as epoch milliseconds; `cargo lambda watch` (1.9) sends the
/// time budget itself (`600000`). Taken as an epoch time, that deadline would be 55 years
/// past and every write would be refused, so a value that small is read as a duration.
fn time_left(deadline_ms: u64, now_ms: u64) -> Duration {
    if deadline_ms < EARLIEST_EPOCH_DEADLINE_MS {
        Duration::from_millis(deadline_ms)
    } else {
        Duration::from_millis(deadline_ms.saturating_sub(now_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_776_693_600_000;

    #[test]
    fn an_epoch_deadline_leaves_the_difference() {
        assert_eq!(time_left(NOW + 30_000, NOW), Duration::from_secs(30));
        assert_eq!(time_left(NOW - 1, NOW), Duration::ZERO);
    }

    #[test]
    fn a_cargo_lambda_watch_budget_is_read_as_a_duration() {
        assert_eq!(time_left(600_000, NOW), Duration::from_secs(600));
    }
}
