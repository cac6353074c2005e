//! Timestamps and rollup buckets.
//!
//! A [`Timestamp`] is a UTC instant with microsecond precision between 1970-01-01 and
//! 9999-12-31. It always prints as 27 fixed-width characters (`2026-04-20T14:00:00.000000Z`),
//! so the string order of keys is the time order of readings, and a device sampling faster
//! than 1 kHz keeps every reading (docs/design.md §2).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

const US_PER_MS: i64 = 1_000;
const US_PER_SECOND: i64 = 1_000_000;
const US_PER_MINUTE: i64 = 60 * US_PER_SECOND;
const US_PER_HOUR: i64 = 60 * US_PER_MINUTE;
const US_PER_DAY: i64 = 24 * US_PER_HOUR;
/// 9999-12-31T23:59:59.999999Z: the last instant with a four-digit year.
const MAX_MICROS: i64 = 253_402_300_799_999_999;
/// The last millisecond with a four-digit year.
const MAX_MILLIS: i64 = MAX_MICROS / US_PER_MS;

/// Why a timestamp was rejected; every variant names the offending input.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TimestampError {
    #[error(
        "timestamp {value:?} is not RFC 3339 with an offset \
         (YYYY-MM-DDTHH:MM:SS[.ffffff](Z|+HH:MM|-HH:MM)): {detail}"
    )]
    Format { value: String, detail: &'static str },
    #[error("timestamp {value:?} has {field} {got}, outside {range}")]
    Field {
        value: String,
        field: &'static str,
        got: u32,
        range: &'static str,
    },
    #[error(
        "timestamp {value:?} is outside the supported range \
         1970-01-01T00:00:00.000000Z to 9999-12-31T23:59:59.999999Z"
    )]
    OutOfRange { value: String },
}

/// A UTC instant, microsecond precision, 1970..=9999. Cannot hold any other value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    pub const MIN: Timestamp = Timestamp(0);
    pub const MAX: Timestamp = Timestamp(MAX_MICROS);
    /// Length of the canonical form, `2026-04-20T14:00:00.000000Z`.
    pub const WIDTH: usize = 27;

    /// Epoch milliseconds (what devices may send); negative values and years past 9999 are
    /// rejected.
    pub fn from_epoch_millis(ms: i64) -> Result<Self, TimestampError> {
        if (0..=MAX_MILLIS).contains(&ms) {
            Ok(Timestamp(ms * US_PER_MS))
        } else {
            Err(TimestampError::OutOfRange {
                value: ms.to_string(),
            })
        }
    }

    /// Epoch microseconds; negative values and years past 9999 are rejected.
    pub fn from_epoch_micros(us: i64) -> Result<Self, TimestampError> {
        if (0..=MAX_MICROS).contains(&us) {
            Ok(Timestamp(us))
        } else {
            Err(TimestampError::OutOfRange {
                value: us.to_string(),
            })
        }
    }

    /// Whole milliseconds since the epoch (the sub-millisecond part truncated).
    pub fn epoch_millis(self) -> i64 {
        self.0 / US_PER_MS
    }

    pub fn epoch_micros(self) -> i64 {
        self.0
    }

    /// Whole seconds since the epoch (what DynamoDB's TTL attribute holds).
    pub fn epoch_seconds(self) -> i64 {
        self.0 / US_PER_SECOND
    }

    /// The current time, for the few places that need one (handlers inject it elsewhere).
    pub fn now() -> Self {
        let us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_micros()).unwrap_or(MAX_MICROS))
            .unwrap_or(0);
        Timestamp(us.clamp(0, MAX_MICROS))
    }

    /// Parses RFC 3339 with any offset (`Z`, `+05:30`, lowercase `t`/`z` as RFC 3339 allows).
    /// Up to nine fractional digits; finer than a microsecond is truncated. Leap seconds and a
    /// missing offset are rejected.
    pub fn parse_rfc3339(s: &str) -> Result<Self, TimestampError> {
        let fmt_err = |detail| TimestampError::Format {
            value: s.to_owned(),
            detail,
        };
        let b = s.as_bytes();
        if b.len() < 19 {
            return Err(fmt_err("too short"));
        }
        if b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
            return Err(fmt_err("separators must be YYYY-MM-DDTHH:MM:SS"));
        }
        if b[10] != b'T' && b[10] != b't' {
            return Err(fmt_err("date and time must be separated by 'T'"));
        }
        let year = digits(&b[0..4]).ok_or_else(|| fmt_err("year must be four digits"))?;
        let month = digits(&b[5..7]).ok_or_else(|| fmt_err("month must be two digits"))?;
        let day = digits(&b[8..10]).ok_or_else(|| fmt_err("day must be two digits"))?;
        let hour = digits(&b[11..13]).ok_or_else(|| fmt_err("hour must be two digits"))?;
        let minute = digits(&b[14..16]).ok_or_else(|| fmt_err("minute must be two digits"))?;
        let second = digits(&b[17..19]).ok_or_else(|| fmt_err("second must be two digits"))?;

        let mut i = 19;
        let mut micros = 0u32;
        if b.get(i) == Some(&b'.') {
            i += 1;
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                if i - start < 6 {
                    micros = micros * 10 + u32::from(b[i] - b'0');
                }
                i += 1;
            }
            let n = i - start;
            if n == 0 {
                return Err(fmt_err("a '.' must be followed by digits"));
            }
            if n > 9 {
                return Err(fmt_err("at most nine fractional digits"));
            }
            for _ in n..6 {
                micros *= 10;
            }
        }
        let offset_minutes: i64 = match b.get(i) {
            Some(b'Z' | b'z') if i + 1 == b.len() => 0,
            Some(sign @ (b'+' | b'-')) if b.len() == i + 6 && b[i + 3] == b':' => {
                let oh = digits(&b[i + 1..i + 3]).ok_or_else(|| fmt_err("offset hour"))?;
                let om = digits(&b[i + 4..i + 6]).ok_or_else(|| fmt_err("offset minute"))?;
                field(s, "offset hour", oh, 0, 23, "00..=23")?;
                field(s, "offset minute", om, 0, 59, "00..=59")?;
                let m = i64::from(oh * 60 + om);
                if *sign == b'-' { -m } else { m }
            }
            None => return Err(fmt_err("missing UTC offset ('Z' or ±HH:MM)")),
            _ => return Err(fmt_err("offset must be 'Z' or ±HH:MM and end the string")),
        };

        field(s, "month", month, 1, 12, "01..=12")?;
        let dim = days_in_month(year as i64, month);
        if day < 1 || day > dim {
            return Err(TimestampError::Field {
                value: s.to_owned(),
                field: "day",
                got: day,
                range: "the days of that month",
            });
        }
        field(s, "hour", hour, 0, 23, "00..=23")?;
        field(s, "minute", minute, 0, 59, "00..=59")?;
        field(
            s,
            "second",
            second,
            0,
            59,
            "00..=59 (leap seconds are not accepted)",
        )?;

        let days = days_from_civil(year as i64, month, day);
        let us = days * US_PER_DAY
            + i64::from(hour) * US_PER_HOUR
            + i64::from(minute) * US_PER_MINUTE
            + i64::from(second) * US_PER_SECOND
            + i64::from(micros)
            - offset_minutes * US_PER_MINUTE;
        if (0..=MAX_MICROS).contains(&us) {
            Ok(Timestamp(us))
        } else {
            Err(TimestampError::OutOfRange {
                value: s.to_owned(),
            })
        }
    }

    /// Parses a canonical key form exactly (27 chars, `Z`, six fraction digits).
    pub fn parse_canonical(s: &str) -> Result<Self, TimestampError> {
        if s.len() != Self::WIDTH || !s.ends_with('Z') || s.as_bytes()[19] != b'.' {
            return Err(TimestampError::Format {
                value: s.to_owned(),
                detail: "not the canonical form YYYY-MM-DDTHH:MM:SS.ffffffZ",
            });
        }
        let t = Self::parse_rfc3339(s)?;
        if t.to_string() == s {
            Ok(t)
        } else {
            Err(TimestampError::Format {
                value: s.to_owned(),
                detail: "not the canonical form YYYY-MM-DDTHH:MM:SS.ffffffZ",
            })
        }
    }

    /// Parses what an API caller or a device may send: RFC 3339, or epoch milliseconds.
    pub fn parse_flexible(s: &str) -> Result<Self, TimestampError> {
        if !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()) {
            let ms: i64 = s.parse().map_err(|_| TimestampError::OutOfRange {
                value: s.to_owned(),
            })?;
            Self::from_epoch_millis(ms)
        } else if s.starts_with('-') && s[1..].bytes().all(|c| c.is_ascii_digit()) && s.len() > 1 {
            Err(TimestampError::OutOfRange {
                value: s.to_owned(),
            })
        } else {
            Self::parse_rfc3339(s)
        }
    }

    pub fn plus_millis(self, ms: i64) -> Option<Self> {
        self.plus_micros(ms.checked_mul(US_PER_MS)?)
    }

    pub fn minus_millis(self, ms: i64) -> Option<Self> {
        self.minus_micros(ms.checked_mul(US_PER_MS)?)
    }

    pub fn plus_micros(self, us: i64) -> Option<Self> {
        Self::from_epoch_micros(self.0.checked_add(us)?).ok()
    }

    pub fn minus_micros(self, us: i64) -> Option<Self> {
        Self::from_epoch_micros(self.0.checked_sub(us)?).ok()
    }

    /// The instant just before this one (the last instant of a range that ends here).
    /// The next representable instant (a microsecond later), for exclusive lower bounds.
    pub fn succ(self) -> Option<Self> {
        self.plus_micros(1)
    }

    pub fn pred(self) -> Option<Self> {
        self.minus_micros(1)
    }

    /// Start of the UTC minute holding this instant.
    pub fn minute_start(self) -> Timestamp {
        Timestamp(self.0 - self.0.rem_euclid(US_PER_MINUTE))
    }

    /// Start of the UTC hour holding this instant.
    pub fn hour_start(self) -> Timestamp {
        Timestamp(self.0 - self.0.rem_euclid(US_PER_HOUR))
    }

    pub fn day(self) -> Day {
        Day((self.0 / US_PER_DAY) as i32)
    }

    /// DynamoDB TTL value (epoch seconds) for an item kept `retention_days` after this instant.
    pub fn ttl_after_days(self, retention_days: u32) -> i64 {
        self.epoch_seconds() + i64::from(retention_days) * 86_400
    }

    /// (year, month, day, hour, minute, second, microsecond)
    fn civil(self) -> (i64, u32, u32, u32, u32, u32, u32) {
        let days = self.0.div_euclid(US_PER_DAY);
        let rem = self.0.rem_euclid(US_PER_DAY);
        let (y, m, d) = civil_from_days(days);
        let h = (rem / US_PER_HOUR) as u32;
        let mi = ((rem % US_PER_HOUR) / US_PER_MINUTE) as u32;
        let s = ((rem % US_PER_MINUTE) / US_PER_SECOND) as u32;
        let us = (rem % US_PER_SECOND) as u32;
        (y, m, d, h, mi, s, us)
    }

    /// `2026-04-20T14:00:00Z`: the hour-bucket form docs/design.md §2 uses in aggregate keys.
    pub fn to_hour_string(self) -> String {
        let (y, m, d, h, _, _, _) = self.hour_start().civil();
        format!("{y:04}-{m:02}-{d:02}T{h:02}:00:00Z")
    }

    /// `20260420T140000000000Z`: compact and URL-safe, still fixed width, for alert IDs.
    pub fn to_compact_string(self) -> String {
        let (y, m, d, h, mi, s, us) = self.civil();
        format!("{y:04}{m:02}{d:02}T{h:02}{mi:02}{s:02}{us:06}Z")
    }

    pub fn parse_compact(s: &str) -> Result<Self, TimestampError> {
        let b = s.as_bytes();
        let bad = || TimestampError::Format {
            value: s.to_owned(),
            detail: "not the compact form YYYYMMDDTHHMMSSffffffZ",
        };
        if !s.is_ascii() || b.len() != 22 || b[8] != b'T' || b[21] != b'Z' {
            return Err(bad());
        }
        let expanded = format!(
            "{}-{}-{}T{}:{}:{}.{}Z",
            &s[0..4],
            &s[4..6],
            &s[6..8],
            &s[9..11],
            &s[11..13],
            &s[13..15],
            &s[15..21]
        );
        Self::parse_canonical(&expanded).map_err(|_| bad())
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (y, m, d, h, mi, s, us) = self.civil();
        write!(f, "{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{us:06}Z")
    }
}

impl FromStr for Timestamp {
    type Err = TimestampError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse_rfc3339(s)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Timestamp::parse_rfc3339(&s).map_err(serde::de::Error::custom)
    }
}

/// A UTC calendar day, as days since 1970-01-01.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Day(i32);

impl Day {
    pub fn start(self) -> Timestamp {
        Timestamp(i64::from(self.0) * US_PER_DAY)
    }

    pub fn days_since_epoch(self) -> i32 {
        self.0
    }

    pub fn next(self) -> Option<Day> {
        let d = Day(self.0 + 1);
        (d.start() <= Timestamp::MAX).then_some(d)
    }

    pub fn prev(self) -> Option<Day> {
        let d = Day(self.0.checked_sub(1)?);
        (d.start() >= Timestamp::MIN).then_some(d)
    }

    /// Parses `2026-04-20`.
    pub fn parse(s: &str) -> Result<Self, TimestampError> {
        if s.len() != 10 {
            return Err(TimestampError::Format {
                value: s.to_owned(),
                detail: "a day is YYYY-MM-DD",
            });
        }
        let t = Timestamp::parse_rfc3339(&format!("{s}T00:00:00Z")).map_err(|e| match e {
            TimestampError::Field {
                field, got, range, ..
            } => TimestampError::Field {
                value: s.to_owned(),
                field,
                got,
                range,
            },
            _ => TimestampError::Format {
                value: s.to_owned(),
                detail: "a day is YYYY-MM-DD",
            },
        })?;
        Ok(t.day())
    }
}

impl fmt::Display for Day {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (y, m, d) = civil_from_days(i64::from(self.0));
        write!(f, "{y:04}-{m:02}-{d:02}")
    }
}

/// Rollup period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Period {
    Hourly,
    Daily,
}

impl Period {
    pub fn as_str(self) -> &'static str {
        match self {
            Period::Hourly => "hourly",
            Period::Daily => "daily",
        }
    }

    pub fn parse(s: &str) -> Option<Period> {
        match s {
            "hourly" => Some(Period::Hourly),
            "daily" => Some(Period::Daily),
            _ => None,
        }
    }

    /// The bucket of this period holding `t`.
    pub fn bucket(self, t: Timestamp) -> Bucket {
        match self {
            Period::Hourly => Bucket::Hourly(t.hour_start()),
            Period::Daily => Bucket::Daily(t.day()),
        }
    }
}

/// One rollup bucket: a UTC hour or a UTC day.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Bucket {
    /// Always the start of an hour.
    Hourly(Timestamp),
    Daily(Day),
}

impl Bucket {
    pub fn period(self) -> Period {
        match self {
            Bucket::Hourly(_) => Period::Hourly,
            Bucket::Daily(_) => Period::Daily,
        }
    }

    pub fn start(self) -> Timestamp {
        match self {
            Bucket::Hourly(t) => t,
            Bucket::Daily(d) => d.start(),
        }
    }

    /// First instant after the bucket (saturating at [`Timestamp::MAX`]).
    pub fn end_exclusive(self) -> Timestamp {
        let len = match self {
            Bucket::Hourly(_) => US_PER_HOUR,
            Bucket::Daily(_) => US_PER_DAY,
        };
        self.start().plus_micros(len).unwrap_or(Timestamp::MAX)
    }

    pub fn contains(self, t: Timestamp) -> bool {
        self.period().bucket(t) == self
    }

    /// `2026-04-20T14:00:00Z` for an hour, `2026-04-20` for a day.
    pub fn label(self) -> String {
        match self {
            Bucket::Hourly(t) => t.to_hour_string(),
            Bucket::Daily(d) => d.to_string(),
        }
    }

    pub fn parse(period: Period, label: &str) -> Result<Bucket, TimestampError> {
        match period {
            Period::Hourly => {
                let t = Timestamp::parse_rfc3339(label)?;
                if t.to_hour_string() != label {
                    return Err(TimestampError::Format {
                        value: label.to_owned(),
                        detail: "an hour bucket is YYYY-MM-DDTHH:00:00Z",
                    });
                }
                Ok(Bucket::Hourly(t))
            }
            Period::Daily => Day::parse(label).map(Bucket::Daily),
        }
    }
}

fn digits(b: &[u8]) -> Option<u32> {
    b.iter().try_fold(0u32, |acc, &c| {
        c.is_ascii_digit().then(|| acc * 10 + u32::from(c - b'0'))
    })
}

fn field(
    value: &str,
    name: &'static str,
    got: u32,
    lo: u32,
    hi: u32,
    range: &'static str,
) -> Result<(), TimestampError> {
    if (lo..=hi).contains(&got) {
        Ok(())
    } else {
        Err(TimestampError::Field {
            value: value.to_owned(),
            field: name,
            got,
            range,
        })
    }
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(y) => 29,
        2 => 28,
        _ => 0,
    }
}

// Howard Hinnant's civil-calendar algorithms (public domain): exact for the proleptic
// Gregorian calendar, no tables, no allocation.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    #[test]
    fn canonical_form_is_fixed_width_utc_microseconds() {
        assert_eq!(
            ts("2026-04-20T14:00:00Z").to_string(),
            "2026-04-20T14:00:00.000000Z"
        );
        assert_eq!(Timestamp::MIN.to_string(), "1970-01-01T00:00:00.000000Z");
        assert_eq!(Timestamp::MAX.to_string(), "9999-12-31T23:59:59.999999Z");
        assert_eq!(Timestamp::MAX.to_string().len(), Timestamp::WIDTH);
    }

    #[test]
    fn offsets_are_normalised_to_utc() {
        assert_eq!(ts("2026-04-20T19:30:00+05:30"), ts("2026-04-20T14:00:00Z"));
        assert_eq!(ts("2026-04-20T09:00:00-05:00"), ts("2026-04-20T14:00:00Z"));
        assert_eq!(ts("2026-04-20T14:00:00+00:00"), ts("2026-04-20T14:00:00Z"));
    }

    #[test]
    fn lowercase_t_and_z_are_accepted_as_rfc3339_allows() {
        assert_eq!(ts("2026-04-20t14:00:00z"), ts("2026-04-20T14:00:00Z"));
    }

    #[test]
    fn fractions_are_kept_to_the_microsecond() {
        assert_eq!(
            ts("2026-04-20T14:00:00.5Z").to_string(),
            "2026-04-20T14:00:00.500000Z"
        );
        assert_eq!(
            ts("2026-04-20T14:00:00.123456789Z").to_string(),
            "2026-04-20T14:00:00.123456Z"
        );
        assert_ne!(
            ts("2026-04-20T14:00:00.000001Z"),
            ts("2026-04-20T14:00:00.000002Z"),
            "two readings a microsecond apart are two readings"
        );
    }

    #[test]
    fn epoch_milliseconds_are_accepted() {
        let t = Timestamp::parse_flexible("1776693600000").unwrap();
        assert_eq!(t.to_string(), "2026-04-20T14:00:00.000000Z");
        assert_eq!(t.epoch_millis(), 1_776_693_600_000);
    }

    #[test]
    fn rejects_bad_timestamps_with_the_value_and_the_rule() {
        let cases = [
            ("2026-04-20T14:00:60Z", "second"),
            ("10000-01-01T00:00:00Z", "RFC 3339"),
            ("2026-04-20T14:00:00", "missing UTC offset"),
            ("2026-02-30T00:00:00Z", "day"),
            ("2026-13-01T00:00:00Z", "month"),
            ("2026-04-20T24:00:00Z", "hour"),
            ("2026-04-20 14:00:00Z", "'T'"),
            ("2026-04-20T14:00:00+5:30", "offset"),
            ("1969-12-31T23:59:59Z", "supported range"),
            ("", "too short"),
        ];
        for (input, rule) in cases {
            let err = Timestamp::parse_rfc3339(input).unwrap_err().to_string();
            assert!(err.contains(&format!("{input:?}")), "{err}");
            assert!(err.contains(rule), "{input}: {err}");
        }
    }

    #[test]
    fn negative_epoch_is_rejected() {
        let err = Timestamp::from_epoch_millis(-1).unwrap_err();
        assert_eq!(err, TimestampError::OutOfRange { value: "-1".into() });
        assert!(Timestamp::parse_flexible("-5").is_err());
        assert!(Timestamp::from_epoch_millis(MAX_MILLIS + 1).is_err());
    }

    #[test]
    fn canonical_parse_accepts_only_the_canonical_form() {
        assert!(Timestamp::parse_canonical("2026-04-20T14:00:00.000000Z").is_ok());
        assert!(Timestamp::parse_canonical("2026-04-20T14:00:00.000Z").is_err());
        assert!(Timestamp::parse_canonical("2026-04-20T14:00:00Z").is_err());
        assert!(Timestamp::parse_canonical("2026-04-20t14:00:00.000000Z").is_err());
    }

    #[test]
    fn buckets_label_and_parse() {
        let t = ts("2026-04-20T14:59:59.999999Z");
        assert_eq!(Period::Hourly.bucket(t).label(), "2026-04-20T14:00:00Z");
        assert_eq!(Period::Daily.bucket(t).label(), "2026-04-20");
        assert_eq!(
            Bucket::parse(Period::Hourly, "2026-04-20T14:00:00Z").unwrap(),
            Period::Hourly.bucket(t)
        );
        assert!(Bucket::parse(Period::Hourly, "2026-04-20T14:30:00Z").is_err());
        assert!(Period::Hourly.bucket(t).contains(t));
        assert!(!Period::Hourly.bucket(t).contains(t.plus_micros(1).unwrap()));
        assert_eq!(Period::Hourly.bucket(t).end_exclusive().pred(), Some(t));
    }

    #[test]
    fn ttl_is_reading_time_plus_retention_in_epoch_seconds() {
        assert_eq!(
            ts("2026-04-20T14:00:00Z").ttl_after_days(30),
            1_776_693_600 + 30 * 86_400
        );
    }

    #[test]
    fn leap_years_follow_the_gregorian_rules() {
        assert!(Timestamp::parse_rfc3339("2024-02-29T00:00:00Z").is_ok());
        assert!(Timestamp::parse_rfc3339("2000-02-29T00:00:00Z").is_ok());
        assert!(Timestamp::parse_rfc3339("2100-02-29T00:00:00Z").is_err());
    }

    #[test]
    fn compact_form_round_trips() {
        let t = ts("2026-04-20T14:00:00.123456Z");
        assert_eq!(t.to_compact_string(), "20260420T140000123456Z");
        assert_eq!(
            Timestamp::parse_compact("20260420T140000123456Z").unwrap(),
            t
        );
    }
}
