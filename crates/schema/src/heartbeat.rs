//! The watchdog's heartbeat record, as it goes into the readings stream:
//! `{"tidemarkHeartbeat":"<RFC 3339>"}` under the partition key [`PARTITION_KEY`]. The
//! watchdog writes it and ingest recognises it, so its shape lives here. No reading can look
//! like it (a reading needs a `deviceId`).
//!
//! A heartbeat says "every record of this shard that arrived before my time is stored". That
//! is only true when its time is no later than its own arrival in Kinesis (ingest stores a
//! shard's records in order), so ingest takes a record as a heartbeat only when it carries the
//! reserved partition key and a time no later than its arrival plus [`MAX_SKEW_MILLIS`] (the
//! watchdog's clock against Kinesis's). Anything else shaped like one is an ordinary bad
//! record: a forged or replayed heartbeat can never move the watermark past the truth.

use crate::Timestamp;

pub const FIELD: &str = "tidemarkHeartbeat";

/// The partition key the watchdog puts its heartbeats under (each with the explicit hash key
/// of the shard it is for). No device's records may use it to pass as heartbeats.
pub const PARTITION_KEY: &str = "tidemark-heartbeat";

/// How far a heartbeat's time may be ahead of its Kinesis arrival: the watchdog's clock may
/// run this much ahead of Kinesis's.
pub const MAX_SKEW_MILLIS: i64 = 5_000;

/// The record of a heartbeat sent at `at`.
pub fn record(at: Timestamp) -> Vec<u8> {
    format!("{{\"{FIELD}\":\"{at}\"}}").into_bytes()
}

/// When the heartbeat in `data` was sent; `None` when `data` is not shaped like a heartbeat.
/// Says nothing of who sent it: [`accepted`] does.
pub fn sent_at(data: &[u8]) -> Option<Timestamp> {
    let rest = data.strip_prefix(format!("{{\"{FIELD}\":\"").as_bytes())?;
    let text = std::str::from_utf8(rest.strip_suffix(b"\"}")?).ok()?;
    Timestamp::parse_rfc3339(text).ok()
}

/// The time of a Kinesis record that is one of the watchdog's heartbeats: shaped like one,
/// under [`PARTITION_KEY`], dated no later than its arrival plus [`MAX_SKEW_MILLIS`].
pub fn accepted(data: &[u8], partition_key: &str, arrived: Timestamp) -> Option<Timestamp> {
    if partition_key != PARTITION_KEY {
        return None;
    }
    let sent = sent_at(data)?;
    let latest = arrived
        .plus_millis(MAX_SKEW_MILLIS)
        .unwrap_or(Timestamp::MAX);
    (sent <= latest).then_some(sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    #[test]
    fn a_heartbeat_round_trips_and_nothing_else_is_one() {
        let t = at("2026-04-20T14:00:00.123456Z");
        assert_eq!(sent_at(&record(t)), Some(t));
        assert_eq!(sent_at(br#"{"deviceId":"a","t":1}"#), None);
        assert_eq!(
            sent_at(br#"{"tidemarkHeartbeat":"2026-04-20T14:00:00Z","deviceId":"a"}"#),
            None
        );
        assert_eq!(sent_at(br#"{"tidemarkHeartbeat":"yesterday"}"#), None);
    }

    #[test]
    fn only_the_reserved_key_and_a_time_not_after_arrival_make_a_heartbeat() {
        let arrived = at("2026-04-20T14:00:10Z");
        let sent = at("2026-04-20T14:00:09Z");
        assert_eq!(accepted(&record(sent), PARTITION_KEY, arrived), Some(sent));
        assert_eq!(accepted(&record(sent), "sensor_01", arrived), None);
        let future = at("2099-01-01T00:00:00Z");
        assert_eq!(accepted(&record(future), PARTITION_KEY, arrived), None);
        let edge = arrived.plus_millis(MAX_SKEW_MILLIS).unwrap();
        assert_eq!(accepted(&record(edge), PARTITION_KEY, arrived), Some(edge));
        let past = edge.plus_millis(1).unwrap();
        assert_eq!(accepted(&record(past), PARTITION_KEY, arrived), None);
    }
}
