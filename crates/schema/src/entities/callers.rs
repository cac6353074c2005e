//! Per-caller rate limits of the API (docs/design.md §6 "Rate limits per caller"): one item
//! per caller and UTC minute counts the caller's requests, and a request that would pass the
//! limit is refused.

use serde::{Deserialize, Serialize};

use crate::keys::{CallerHash, EntityKey};
use crate::time::Timestamp;

/// The largest `CALLER_RATE_LIMIT` (requests per caller per minute): a caller at the limit
/// writes its own counter `limit / 60` times a second, and 60,000 a minute is the 1,000
/// writes a second one DynamoDB partition takes.
pub const MAX_CALLER_RATE_LIMIT: u32 = 60_000;

// A partition takes 1,000 write units a second, and one count (a small item) is one unit.
const _: () = assert!(MAX_CALLER_RATE_LIMIT / 60 <= 1_000);

/// Seconds a minute's count is kept after the minute ends (its TTL): long enough that no
/// clock skew between containers reopens a minute, short enough to cost nothing.
pub const CALLER_RATE_KEEP_SECONDS: i64 = 300;

/// `CALLER#<hash>` / `RATE#<minute>`: how many requests a caller made in one UTC minute.
/// Written only by the API, one `ADD` per request, and only while a limit is set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallerRateItem {
    pub pk: String,
    pub sk: String,
    /// Requests counted in the minute ([`super::field::REQUESTS`]).
    pub requests: u32,
    /// Epoch seconds: [`CALLER_RATE_KEEP_SECONDS`] after the minute ends.
    pub ttl: i64,
}

impl CallerRateItem {
    /// The count, still at zero, of `caller`'s requests in the minute holding `now`.
    pub fn new(caller: &str, now: Timestamp) -> Self {
        let minute = now.minute_start();
        let key = EntityKey::CallerRate {
            caller: CallerHash::of(caller),
            minute,
        }
        .key();
        CallerRateItem {
            pk: key.pk,
            sk: key.sk,
            requests: 0,
            ttl: Self::expires(minute),
        }
    }

    /// The TTL (epoch seconds) of the count of the minute holding `at`.
    pub fn expires(at: Timestamp) -> i64 {
        at.minute_start().epoch_seconds() + 60 + CALLER_RATE_KEEP_SECONDS
    }
}

/// Whole seconds until the minute holding `now` ends, rounded up (1..=60): what a refused
/// caller is told to wait (`Retry-After`).
pub fn seconds_left_in_minute(now: Timestamp) -> u64 {
    let next = now.minute_start().epoch_micros() + 60_000_000;
    let left = u64::try_from(next - now.epoch_micros()).unwrap_or(0);
    left.div_ceil(1_000_000).clamp(1, 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    #[test]
    fn a_minutes_count_is_keyed_by_the_minute_and_expires_minutes_after_it() {
        let a = CallerRateItem::new("user-1", ts("2026-04-20T11:59:59.5Z"));
        let b = CallerRateItem::new("user-1", ts("2026-04-20T11:59:00Z"));
        let next = CallerRateItem::new("user-1", ts("2026-04-20T12:00:00Z"));
        assert_eq!((&a.pk, &a.sk), (&b.pk, &b.sk));
        assert_eq!(a.pk, next.pk, "one partition per caller");
        assert_ne!(a.sk, next.sk, "a new minute is a new count");
        assert_eq!(a.requests, 0);
        assert_eq!(a.ttl, ts("2026-04-20T12:05:00Z").epoch_seconds());
        assert_ne!(
            a.pk,
            CallerRateItem::new("user-2", ts("2026-04-20T11:59:00Z")).pk
        );
    }

    #[test]
    fn a_refused_caller_waits_for_the_rest_of_the_minute_rounded_up() {
        assert_eq!(seconds_left_in_minute(ts("2026-04-20T11:59:59Z")), 1);
        assert_eq!(seconds_left_in_minute(ts("2026-04-20T11:59:59.999Z")), 1);
        assert_eq!(seconds_left_in_minute(ts("2026-04-20T11:59:00Z")), 60);
        assert_eq!(seconds_left_in_minute(ts("2026-04-20T11:59:30.2Z")), 30);
    }
}
