//! The watchdog's heartbeat record, as it goes into the readings stream:
//! `{"tidemarkHeartbeat":"<RFC 3339>"}`. The watchdog writes it and ingest recognises it, so
//! its shape lives here. No reading can look like it (a reading needs a `deviceId`).

use crate::Timestamp;

pub const FIELD: &str = "tidemarkHeartbeat";

/// The record of a heartbeat sent at `at`.
pub fn record(at: Timestamp) -> Vec<u8> {
    format!("{{\"{FIELD}\":\"{at}\"}}").into_bytes()
}

/// When the heartbeat in `data` was sent; `None` when `data` is not a heartbeat.
pub fn sent_at(data: &[u8]) -> Option<Timestamp> {
    let rest = data.strip_prefix(format!("{{\"{FIELD}\":\"").as_bytes())?;
    let text = std::str::from_utf8(rest.strip_suffix(b"\"}")?).ok()?;
    Timestamp::parse_rfc3339(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heartbeat_round_trips_and_nothing_else_is_one() {
        let t = Timestamp::parse_rfc3339("2026-04-20T14:00:00.123456Z").unwrap();
        assert_eq!(sent_at(&record(t)), Some(t));
        assert_eq!(sent_at(br#"{"deviceId":"a","t":1}"#), None);
        assert_eq!(
            sent_at(br#"{"tidemarkHeartbeat":"2026-04-20T14:00:00Z","deviceId":"a"}"#),
            None
        );
        assert_eq!(sent_at(br#"{"tidemarkHeartbeat":"yesterday"}"#), None);
    }
}
