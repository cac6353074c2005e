//! Validated identifiers. A value of these types is always safe to put in a key.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

use crate::time::Timestamp;

/// Why an identifier was rejected; every variant names the offending value and the rule.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum IdError {
    #[error("{kind} must not be empty")]
    Empty { kind: &'static str },
    #[error("{kind} {value:?} is {len} characters long; the limit is {max}")]
    TooLong {
        kind: &'static str,
        value: String,
        len: usize,
        max: usize,
    },
    #[error("{kind} {value:?} has {found:?} at position {position}; allowed: {allowed}")]
    BadChar {
        kind: &'static str,
        value: String,
        found: char,
        position: usize,
        allowed: &'static str,
    },
    #[error("{kind} {value:?} is not one of: {allowed}")]
    NotAllowed {
        kind: &'static str,
        value: String,
        allowed: &'static str,
    },
}

pub(crate) fn check(
    kind: &'static str,
    value: &str,
    max: usize,
    allowed: &'static str,
    ok: impl Fn(usize, char) -> bool,
) -> Result<(), IdError> {
    if value.is_empty() {
        return Err(IdError::Empty { kind });
    }
    let len = value.chars().count();
    if len > max {
        return Err(IdError::TooLong {
            kind,
            value: value.to_owned(),
            len,
            max,
        });
    }
    if let Some((position, found)) = value.chars().enumerate().find(|&(i, c)| !ok(i, c)) {
        return Err(IdError::BadChar {
            kind,
            value: value.to_owned(),
            found,
            position,
            allowed,
        });
    }
    Ok(())
}

macro_rules! string_newtype {
    ($name:ident) => {
        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                Self::new(s)
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(s: String) -> Result<Self, IdError> {
                Self::new(&s)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
                Self::new(&s).map_err(serde::de::Error::custom)
            }
        }
    };
}

/// A device ID: 1–128 characters of `[A-Za-z0-9_.:-]`. `#` can never occur, so no device ID
/// can produce a key belonging to another entity or another device.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeviceId(String);

impl DeviceId {
    pub const MAX_LEN: usize = 128;
    pub const ALLOWED: &'static str = "A-Z a-z 0-9 _ . : -";

    pub fn new(s: &str) -> Result<Self, IdError> {
        check("device ID", s, Self::MAX_LEN, Self::ALLOWED, |_, c| {
            c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-')
        })?;
        Ok(DeviceId(s.to_owned()))
    }
}
string_newtype!(DeviceId);

/// A metric name: a letter then up to 63 of `[A-Za-z0-9_]`, and not a reserved reading field.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MetricName(String);

impl MetricName {
    pub const MAX_LEN: usize = 64;
    /// Top-level reading fields that are never metrics.
    pub const RESERVED: [&'static str; 3] = ["deviceId", "timestamp", "metadata"];

    pub fn new(s: &str) -> Result<Self, IdError> {
        check(
            "metric name",
            s,
            Self::MAX_LEN,
            "a letter, then A-Z a-z 0-9 _",
            |i, c| c.is_ascii_alphabetic() || (i > 0 && (c.is_ascii_digit() || c == '_')),
        )?;
        if Self::RESERVED.contains(&s) {
            return Err(IdError::NotAllowed {
                kind: "metric name",
                value: s.to_owned(),
                allowed: "any name but deviceId, timestamp, metadata",
            });
        }
        Ok(MetricName(s.to_owned()))
    }
}
string_newtype!(MetricName);

macro_rules! keyword_enum {
    ($(#[$m:meta])* $name:ident, $kind:literal, { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "lowercase")]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            pub fn parse(s: &str) -> Result<Self, IdError> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err(IdError::NotAllowed {
                        kind: $kind,
                        value: s.to_owned(),
                        allowed: concat!($($text, " "),+),
                    }),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

keyword_enum!(
    /// Lifecycle status of a device; indexed in GSI1 (access pattern AP2).
    DeviceStatus, "device status", {
    Active => "active",
    Inactive => "inactive",
    Maintenance => "maintenance",
});

keyword_enum!(
    /// Alert severity; open alerts are indexed by it in GSI1 (access pattern AP6).
    Severity, "severity", {
    Info => "info",
    Warning => "warning",
    Critical => "critical",
});

keyword_enum!(
    /// What an alert watches: a side of a metric's threshold (`min`, `max`), the device's
    /// silence (`offline`: no reading arrived for its `offlineAfterSeconds`), a rule of the
    /// device's `rules` by kind (`window`, `rate`, `stuck`; [`crate::rules::RuleSpec`]), or a
    /// rule over a group of devices (`group`; [`crate::group_rules::GroupRuleSpec`]).
    AlertRule, "alert rule", {
    Min => "min",
    Max => "max",
    Offline => "offline",
    Window => "window",
    Rate => "rate",
    Stuck => "stuck",
    Group => "group",
});

impl AlertRule {
    /// `threshold`, `offline`, `window`, `rate`, `stuck` or `group`: the `kind` the API and
    /// the alert events show.
    pub fn kind(self) -> &'static str {
        match self {
            AlertRule::Min | AlertRule::Max => "threshold",
            r => r.as_str(),
        }
    }

    /// A rule of `rules`, told apart from the device's other rules of its kind by a tag.
    pub fn is_tagged(self) -> bool {
        matches!(self, AlertRule::Window | AlertRule::Rate | AlertRule::Stuck)
    }
}

/// An alert ID: `<opened at, compact>-<metric>-<rule>`, e.g.
/// `20260420T140000000000Z-temperature-max`, `<opened at>-<metric>-<kind>.<tag>` for a rule of
/// `rules` (`…-temperature-window.9f3a01bc`), or `<opened at>-offline` for a silence. It sorts
/// by opening time, and the same breach (same reading time, metric and rule) or the same
/// silence (same deadline) always yields the same ID, so a replay, or two watchdog runs at
/// once, can never open a second alert.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AlertId(String);

impl AlertId {
    pub fn for_breach(opened_at: Timestamp, metric: &MetricName, rule: AlertRule) -> Self {
        AlertId(format!(
            "{}-{}-{}",
            opened_at.to_compact_string(),
            metric,
            rule
        ))
    }

    /// The alert of a rule of `rules` (its [`crate::rules::RuleSpec::tag`]).
    pub fn for_rule(opened_at: Timestamp, metric: &MetricName, rule: AlertRule, tag: &str) -> Self {
        AlertId(format!(
            "{}-{}-{}.{}",
            opened_at.to_compact_string(),
            metric,
            rule,
            tag
        ))
    }

    /// The alert of a group rule (its [`crate::group_rules::GroupRuleSpec::tag`]), opened at
    /// `opened_at`: `<opened at>-group.<tag>`.
    pub fn for_group(opened_at: Timestamp, tag: &str) -> Self {
        AlertId(format!(
            "{}-{}.{tag}",
            opened_at.to_compact_string(),
            AlertRule::Group
        ))
    }

    /// The tag of a rule of `rules` or of a group rule (none for a threshold's or a
    /// silence's alert).
    pub fn rule_tag(&self) -> Option<&str> {
        self.0.rsplit_once('.').map(|(_, t)| t)
    }

    /// The alert of a device that went silent: opened at its deadline (last arrival plus
    /// `offlineAfterSeconds`).
    pub fn for_offline(opened_at: Timestamp) -> Self {
        AlertId(format!(
            "{}-{}",
            opened_at.to_compact_string(),
            AlertRule::Offline
        ))
    }

    pub fn new(s: &str) -> Result<Self, IdError> {
        Self::parts(s).map(|_| AlertId(s.to_owned()))
    }

    /// The opening time, metric (none for `offline`) and rule the ID was made from.
    pub fn parts(s: &str) -> Result<(Timestamp, Option<MetricName>, AlertRule), IdError> {
        let bad = || IdError::NotAllowed {
            kind: "alert ID",
            value: s.to_owned(),
            allowed: "<YYYYMMDDTHHMMSSfffZ>-<metric>-<min|max>, <YYYYMMDDTHHMMSSfffZ>-<metric>-<window|rate|stuck>.<8 hex digits>, <YYYYMMDDTHHMMSSfffZ>-offline or <YYYYMMDDTHHMMSSfffZ>-group.<8 hex digits>",
        };
        let mut it = s.splitn(3, '-');
        let (Some(t), Some(m)) = (it.next(), it.next()) else {
            return Err(bad());
        };
        let t = Timestamp::parse_compact(t).map_err(|_| bad())?;
        match it.next() {
            None if m == AlertRule::Offline.as_str() => Ok((t, None, AlertRule::Offline)),
            None if m.strip_prefix("group.").is_some_and(|tag| {
                tag.len() == 8 && tag.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            }) =>
            {
                Ok((t, None, AlertRule::Group))
            }
            None => Err(bad()),
            Some(r) => {
                let m = MetricName::new(m).map_err(|_| bad())?;
                let (r, tag) = match r.split_once('.') {
                    Some((r, tag)) => (r, Some(tag)),
                    None => (r, None),
                };
                let r = AlertRule::parse(r).map_err(|_| bad())?;
                let tag_ok = tag.is_some_and(|t| {
                    t.len() == 8 && t.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
                });
                match r {
                    AlertRule::Offline | AlertRule::Group => Err(bad()),
                    r if r.is_tagged() != tag_ok || (tag.is_some() && !tag_ok) => Err(bad()),
                    r => Ok((t, Some(m), r)),
                }
            }
        }
    }

    pub fn opened_at(&self) -> Timestamp {
        Self::parts(&self.0).map(|p| p.0).unwrap_or(Timestamp::MIN)
    }
}
string_newtype!(AlertId);

/// The ID of a published alert notification: 32 lowercase hex digits, derived (by the
/// aggregator) from the alert's key, the stream record and the kind of change, so a replayed
/// record yields the same ID. It keys the "already published" marker item.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventId(String);

impl EventId {
    pub const LEN: usize = 32;

    pub fn new(s: &str) -> Result<Self, IdError> {
        check(
            "event ID",
            s,
            Self::LEN,
            "lowercase hex digits",
            |_, c| matches!(c, '0'..='9' | 'a'..='f'),
        )?;
        if s.len() != Self::LEN {
            return Err(IdError::NotAllowed {
                kind: "event ID",
                value: s.to_owned(),
                allowed: "exactly 32 lowercase hex digits",
            });
        }
        Ok(EventId(s.to_owned()))
    }
}
string_newtype!(EventId);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_ids_follow_the_rule_and_errors_name_it() {
        assert!(DeviceId::new("sensor_01").is_ok());
        assert!(DeviceId::new("a.b:c-d_E9").is_ok());
        assert!(DeviceId::new(&"x".repeat(128)).is_ok());

        assert_eq!(DeviceId::new(""), Err(IdError::Empty { kind: "device ID" }));
        let long = "x".repeat(129);
        assert!(matches!(
            DeviceId::new(&long),
            Err(IdError::TooLong { len: 129, .. })
        ));
        for (bad, ch) in [("a#b", '#'), ("a/b", '/'), ("a b", ' '), ("sensé", 'é')] {
            let err = DeviceId::new(bad).unwrap_err();
            assert!(
                matches!(&err, IdError::BadChar { found, .. } if *found == ch),
                "{bad}: {err}"
            );
            let msg = err.to_string();
            assert!(msg.contains(bad) && msg.contains("allowed"), "{msg}");
        }
    }

    #[test]
    fn metric_names_exclude_reserved_fields() {
        assert!(MetricName::new("temperature").is_ok());
        assert!(MetricName::new("co2_ppm").is_ok());
        assert!(MetricName::new("timestamp").is_err());
        assert!(MetricName::new("9lives").is_err());
        assert!(MetricName::new("a-b").is_err());
    }

    #[test]
    fn alert_ids_are_deterministic_and_sort_by_time() {
        let m = MetricName::new("temperature").unwrap();
        let t1 = Timestamp::parse_rfc3339("2026-04-20T14:00:00Z").unwrap();
        let t2 = Timestamp::parse_rfc3339("2026-04-20T15:00:00Z").unwrap();
        let a = AlertId::for_breach(t1, &m, AlertRule::Max);
        assert_eq!(a.as_str(), "20260420T140000000000Z-temperature-max");
        assert_eq!(a, AlertId::for_breach(t1, &m, AlertRule::Max));
        assert!(a < AlertId::for_breach(t2, &m, AlertRule::Max));
        assert_eq!(AlertId::new(a.as_str()).unwrap(), a);
        assert_eq!(a.opened_at(), t1);
        assert!(AlertId::new("garbage").is_err());
        let o = AlertId::for_offline(t1);
        assert_eq!(o.as_str(), "20260420T140000000000Z-offline");
        assert_eq!(
            AlertId::parts(o.as_str()).unwrap(),
            (t1, None, AlertRule::Offline)
        );
        assert!(AlertId::new("20260420T140000000000Z-temperature-offline").is_err());
        assert!(AlertId::new("20260420T140000000000Z-temperature").is_err());
    }

    #[test]
    fn a_rules_alert_id_carries_its_kind_and_tag() {
        let m = MetricName::new("temperature").unwrap();
        let t = Timestamp::parse_rfc3339("2026-04-20T14:00:00Z").unwrap();
        let w = AlertId::for_rule(t, &m, AlertRule::Window, "9f3a01bc");
        assert_eq!(
            w.as_str(),
            "20260420T140000000000Z-temperature-window.9f3a01bc"
        );
        assert_eq!(AlertId::new(w.as_str()).unwrap(), w);
        assert_eq!(
            AlertId::parts(w.as_str()).unwrap(),
            (t, Some(m.clone()), AlertRule::Window)
        );
        assert_eq!(w.rule_tag(), Some("9f3a01bc"));
        assert_eq!(AlertId::for_breach(t, &m, AlertRule::Max).rule_tag(), None);
        for bad in [
            "20260420T140000000000Z-temperature-window",
            "20260420T140000000000Z-temperature-max.9f3a01bc",
            "20260420T140000000000Z-temperature-rate.9F3A01BC",
            "20260420T140000000000Z-temperature-stuck.9f3a",
        ] {
            assert!(AlertId::new(bad).is_err(), "{bad}");
        }
        assert_eq!(AlertRule::Window.kind(), "window");
        assert_eq!(AlertRule::Min.kind(), "threshold");
    }

    #[test]
    fn keywords_parse_and_print() {
        assert_eq!(DeviceStatus::parse("active").unwrap(), DeviceStatus::Active);
        assert_eq!(Severity::Critical.to_string(), "critical");
        assert!(Severity::parse("CRITICAL").is_err());
    }
}
