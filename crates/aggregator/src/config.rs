use std::collections::BTreeMap;

use tidemark_schema::{MetricName, Threshold};

use crate::AggregatorError;

/// Environment variable with the default thresholds, JSON:
/// `{"temperature":{"max":30,"severity":"critical"},"battery":{"min":15,"severity":"warning"}}`.
pub const DEFAULT_THRESHOLDS_ENV: &str = "DEFAULT_THRESHOLDS";
/// Environment variable with the number of GSI1 status shards (the API's setting, the same
/// value: a device this function registers must land where the API lists it).
pub const STATUS_SHARDS_ENV: &str = "STATUS_SHARDS";
/// Environment variable: how far behind the newest reading a device's `lastSeenAt` and
/// `latest` may lag before the device item is rewritten (seconds, default 900).
pub const DEVICE_REFRESH_SECONDS_ENV: &str = "DEVICE_REFRESH_SECONDS";
/// Environment variable: the fleet's offline window in seconds, for devices without an
/// `offlineAfterSeconds` of their own (0, the default: not watched).
pub const OFFLINE_AFTER_SECONDS_ENV: &str = "OFFLINE_AFTER_SECONDS";
/// Environment variable bounding how many item writes one invocation keeps in flight.
pub const WRITE_CONCURRENCY_ENV: &str = "WRITE_CONCURRENCY";
/// Environment variable choosing what this function does with the table's stream:
/// `rollups` (default) or `alerts`. The template runs the same binary twice, once per role,
/// each behind its own mapping on the one stream.
pub const ROLE_ENV: &str = "AGGREGATOR_ROLE";
/// Environment variable naming the EventBridge bus alert state changes go to (required in the
/// alerts role).
pub const EVENT_BUS_NAME_ENV: &str = "EVENT_BUS_NAME";
/// Environment variable pointing the EventBridge client at another endpoint (devstack's
/// `PutEvents` stand-in); the SDK's own `AWS_ENDPOINT_URL_EVENTBRIDGE` is read as well.
pub const EVENTBRIDGE_ENDPOINT_ENV: &str = "TIDEMARK_EVENTBRIDGE_ENDPOINT";

/// The two readers of the table's stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Role {
    /// Hourly and daily rollups, behind a mapping with a long batching window (cheap writes).
    #[default]
    Rollups,
    /// Alert state, the device item and alert notifications, behind a mapping with a short
    /// window (fast alerts; writes only on changes).
    Alerts,
}

impl std::str::FromStr for Role {
    type Err = AggregatorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "rollups" => Ok(Role::Rollups),
            "alerts" => Ok(Role::Alerts),
            other => Err(AggregatorError::Config(format!(
                "{ROLE_ENV}={other:?} is neither \"rollups\" nor \"alerts\""
            ))),
        }
    }
}

#[derive(Debug, Clone)]
pub struct AggregatorConfig {
    pub table_name: String,
    pub role: Role,
    /// Per metric, used when a device item has no threshold of its own for that metric.
    pub default_thresholds: BTreeMap<MetricName, Threshold>,
    /// How often one item is re-read and rewritten after a conditional-write conflict.
    pub max_attempts: u32,
    /// The wait before each of those attempts (jittered exponential).
    pub retry: tidemark_store::retry::RetryPolicy,
    pub write_concurrency: usize,
    /// GSI1 status shards of the fleet (1: `DEVICE_STATUS#<status>` unsharded).
    pub status_shards: u16,
    /// The device item would be a third item written per device and batch (after the hourly
    /// and daily rollups); the alerts role rewrites it only when its `lastSeenAt` is this far
    /// behind the newest reading (or when it is new, or an alert state changes), which keeps
    /// the standard fleet under 1.5 write units per reading. Readings themselves, and
    /// `GET /latest`, never lag: they are read from the reading partitions.
    pub device_refresh: std::time::Duration,
    /// The fleet's offline window (seconds; 0: devices are watched only with a window of
    /// their own).
    pub offline_after_default: u32,
    /// Where alert state changes are published (the alerts role).
    pub event_bus_name: Option<String>,
    /// A local EventBridge endpoint; `None` is the SDK's own resolution.
    pub eventbridge_endpoint: Option<String>,
    /// Kept back from the invocation's deadline: work not finished by then is reported as
    /// `batchItemFailures` (the next invocation continues there) instead of being killed.
    pub deadline_margin: std::time::Duration,
    /// How far an alert derivation reads (the documented bounds).
    pub scan: crate::alerting::derive::ScanLimits,
    /// The size past which a bucket's open rollup page takes no new metrics
    /// ([`crate::pages::PAGE_BYTES`]; smaller only in tests of paging).
    pub page_bytes: usize,
    /// The most per-item marks an hourly item keeps before the hour is taken from the table
    /// ([`tidemark_schema::marks::MAX_MARKS`]; tests lower it).
    pub max_marks: usize,
    /// The same for marks of single reading items
    /// ([`tidemark_schema::marks::MAX_SINGLE_MARKS`]).
    pub max_single_marks: usize,
    /// Where "now" comes from (the system clock; tests fix it).
    pub clock: tidemark_schema::Clock,
}

impl AggregatorConfig {
    /// A configuration for `table_name` with no default thresholds (tests, tools).
    pub fn new(table_name: impl Into<String>) -> Self {
        AggregatorConfig {
            table_name: table_name.into(),
            role: Role::default(),
            default_thresholds: BTreeMap::new(),
            max_attempts: 10,
            retry: tidemark_store::retry::RetryPolicy::default(),
            write_concurrency: 16,
            status_shards: 1,
            device_refresh: std::time::Duration::from_secs(900),
            offline_after_default: 0,
            event_bus_name: None,
            eventbridge_endpoint: None,
            deadline_margin: std::time::Duration::from_secs(3),
            scan: crate::alerting::derive::ScanLimits::default(),
            page_bytes: crate::pages::PAGE_BYTES,
            max_marks: tidemark_schema::marks::MAX_MARKS,
            max_single_marks: tidemark_schema::marks::MAX_SINGLE_MARKS,
            clock: tidemark_schema::Clock::system(),
        }
    }

    pub fn with_role(mut self, role: Role) -> Self {
        self.role = role;
        self
    }

    pub fn with_default_thresholds(mut self, t: BTreeMap<MetricName, Threshold>) -> Self {
        self.default_thresholds = t;
        self
    }

    /// `TABLE_NAME` (default `tidemark`), `AGGREGATOR_ROLE`, `DEFAULT_THRESHOLDS` (JSON,
    /// optional), `WRITE_CONCURRENCY`, `STATUS_SHARDS` and `DEVICE_REFRESH_SECONDS`
    /// (optional), `EVENT_BUS_NAME` (required in the alerts role) and
    /// `TIDEMARK_EVENTBRIDGE_ENDPOINT` (local runs).
    pub fn from_env() -> Result<Self, AggregatorError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// [`AggregatorConfig::from_env`] over any variable source (tests record what is read).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, AggregatorError> {
        let table = get(tidemark_store::client::TABLE_NAME_ENV)
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| tidemark_schema::TABLE.default_name.to_owned());
        let mut c = AggregatorConfig::new(table);
        if let Some(r) = get(ROLE_ENV).filter(|s| !s.trim().is_empty()) {
            c.role = r.trim().parse()?;
        }
        // Only the alerts role publishes: the rollups role reads no EventBridge setting.
        if c.role == Role::Alerts {
            let non_empty = |k: &str| get(k).filter(|v| !v.trim().is_empty());
            c.event_bus_name = Some(non_empty(EVENT_BUS_NAME_ENV).ok_or_else(|| {
                AggregatorError::Config(format!(
                    "{EVENT_BUS_NAME_ENV} is required when {ROLE_ENV}=alerts"
                ))
            })?);
            c.eventbridge_endpoint = non_empty(EVENTBRIDGE_ENDPOINT_ENV)
                .or_else(|| non_empty("AWS_ENDPOINT_URL_EVENTBRIDGE"));
        }
        if let Some(json) = get(DEFAULT_THRESHOLDS_ENV)
            && !json.trim().is_empty()
        {
            c.default_thresholds = parse_thresholds(&json)?;
        }
        if let Some(n) = get(WRITE_CONCURRENCY_ENV) {
            c.write_concurrency = n.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| {
                AggregatorError::Config(format!(
                    "{WRITE_CONCURRENCY_ENV}={n:?} is not a positive integer"
                ))
            })?;
        }
        if let Some(n) = get(DEVICE_REFRESH_SECONDS_ENV).filter(|s| !s.is_empty()) {
            c.device_refresh = n
                .parse::<u64>()
                .ok()
                .map(std::time::Duration::from_secs)
                .ok_or_else(|| {
                    AggregatorError::Config(format!(
                        "{DEVICE_REFRESH_SECONDS_ENV}={n:?} is not a whole number of seconds"
                    ))
                })?;
        }
        // Only the alerts role watches for silence.
        if c.role == Role::Alerts
            && let Some(n) = get(OFFLINE_AFTER_SECONDS_ENV).filter(|s| !s.trim().is_empty())
        {
            c.offline_after_default = parse_offline_after(&n)?;
        }
        if let Some(n) = get(STATUS_SHARDS_ENV) {
            let max = tidemark_schema::keys::MAX_STATUS_SHARDS;
            c.status_shards = n
                .parse::<u16>()
                .ok()
                .filter(|n| (1..=max).contains(n))
                .ok_or_else(|| {
                    AggregatorError::Config(format!(
                        "{STATUS_SHARDS_ENV}={n:?} is not a whole number from 1 to {max}"
                    ))
                })?;
        }
        Ok(c)
    }
}

/// `OFFLINE_AFTER_SECONDS`: whole seconds, [`tidemark_schema::fleet_offline_window`].
pub fn parse_offline_after(n: &str) -> Result<u32, AggregatorError> {
    n.trim()
        .parse::<u32>()
        .ok()
        .and_then(tidemark_schema::fleet_offline_window)
        .ok_or_else(|| {
            AggregatorError::Config(format!(
                "{OFFLINE_AFTER_SECONDS_ENV}={n:?} is not a whole number of seconds from 0 to 2592000"
            ))
        })
}

/// Parses thresholds JSON (`{metric: {min?, max?, severity}}`), rejecting unknown fields so a
/// typo (`"maxx"`) fails the deployment instead of silently never alerting.
pub fn parse_thresholds(json: &str) -> Result<BTreeMap<MetricName, Threshold>, AggregatorError> {
    let t: BTreeMap<MetricName, Threshold> = serde_json::from_str(json)
        .map_err(|e| AggregatorError::Config(format!("{DEFAULT_THRESHOLDS_ENV}: {e}")))?;
    for (m, th) in &t {
        if let Some(v) = [th.min, th.max]
            .into_iter()
            .flatten()
            .find(|v| !tidemark_schema::is_metric_value(*v))
        {
            return Err(AggregatorError::Config(format!(
                "{DEFAULT_THRESHOLDS_ENV}: threshold of {m} is {v:e}, outside the range of \
                 metric values"
            )));
        }
        if th.min.is_none() && th.max.is_none() {
            return Err(AggregatorError::Config(format!(
                "{DEFAULT_THRESHOLDS_ENV}: threshold of {m} has neither min nor max"
            )));
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alerts_role_needs_an_event_bus() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        let e = AggregatorConfig::from_lookup(env(&[(ROLE_ENV, "alerts")])).unwrap_err();
        assert!(e.to_string().contains(EVENT_BUS_NAME_ENV), "{e}");
        let c = AggregatorConfig::from_lookup(env(&[
            (ROLE_ENV, "alerts"),
            (EVENT_BUS_NAME_ENV, "tidemark-alerts"),
        ]))
        .unwrap();
        assert_eq!(c.role, Role::Alerts);
        assert_eq!(c.event_bus_name.as_deref(), Some("tidemark-alerts"));
        let c = AggregatorConfig::from_lookup(env(&[])).unwrap();
        assert_eq!((c.role, c.event_bus_name), (Role::Rollups, None));
    }

    #[test]
    fn thresholds_parse_and_typos_are_rejected() {
        let t = parse_thresholds(
            r#"{"temperature":{"max":30,"severity":"critical"},"battery":{"min":15,"severity":"warning"}}"#,
        )
        .unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[&MetricName::new("temperature").unwrap()].max, Some(30.0));
        assert!(parse_thresholds(r#"{"temperature":{"maxx":30,"severity":"critical"}}"#).is_err());
        assert!(
            parse_thresholds(r#"{"temperature":{"max":1e300,"severity":"critical"}}"#).is_err(),
            "a threshold outside the range of metric values"
        );
        assert!(parse_thresholds(r#"{"temperature":{"severity":"critical"}}"#).is_err());
        assert!(parse_thresholds("not json").is_err());
    }
}
