use std::collections::BTreeMap;

use tidemark_schema::{MetricName, Threshold};
use tidemark_store::settings::{self, Env};

pub use tidemark_store::settings::ConfigError;

use crate::AggregatorError;
pub use crate::role::Role;

#[derive(Debug, Clone)]
pub struct AggregatorConfig {
    pub table_name: String,
    pub role: Role,
    /// Per metric, used when a device item has no threshold of its own for that metric.
    pub default_thresholds: BTreeMap<MetricName, Threshold>,
    /// `DEFAULT_RULES`: the rules of devices without their own `rules`.
    pub default_rules: Vec<tidemark_schema::RuleSpec>,
    /// How often one item is re-read and rewritten after a conditional-write conflict.
    pub max_attempts: u32,
    /// The wait before each of those attempts (jittered exponential).
    pub retry: tidemark_store::retry::RetryPolicy,
    pub write_concurrency: usize,
    /// GSI1 status partitions of the fleet (1: `DEVICE_STATUS#<status>` alone).
    pub status_partitions: u16,
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
    /// ([`crate::rollups::pages::PAGE_BYTES`]; smaller only in tests of paging).
    pub page_bytes: usize,
    /// `GROUP_TAGS` (the rollups role): the tag keys whose groups keep rollups.
    pub group_tags: Vec<tidemark_schema::TagKey>,
    /// `LAYOUT_CACHE_SECONDS` and `MAX_FUTURE_SECONDS` (the rollups role): how far ahead the
    /// API announces a tag change, so how long a read tag history serves
    /// ([`tidemark_store::tags::TagBook`]).
    pub tag_lead: tidemark_schema::LayoutLead,
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
            default_rules: Vec::new(),
            max_attempts: 10,
            retry: tidemark_store::retry::RetryPolicy::default(),
            write_concurrency: const { settings::WRITE_CONCURRENCY.default_usize() },
            status_partitions: const { settings::STATUS_PARTITIONS.default_u16() },
            device_refresh: std::time::Duration::from_secs(
                const { settings::DEVICE_REFRESH_SECONDS.default_u64() },
            ),
            offline_after_default: const { settings::OFFLINE_AFTER_SECONDS.default_u32() },
            event_bus_name: None,
            eventbridge_endpoint: None,
            deadline_margin: std::time::Duration::from_secs(3),
            scan: crate::alerting::derive::ScanLimits::default(),
            page_bytes: crate::rollups::pages::PAGE_BYTES,
            group_tags: settings::default_group_tags(),
            tag_lead: tidemark_schema::LayoutLead::default(),
            clock: tidemark_schema::Clock::system(),
        }
    }

    pub fn with_role(mut self, role: Role) -> Self {
        self.role = role;
        self
    }

    pub fn with_default_rules(mut self, r: Vec<tidemark_schema::RuleSpec>) -> Self {
        self.default_rules = r;
        self
    }

    pub fn with_default_thresholds(mut self, t: BTreeMap<MetricName, Threshold>) -> Self {
        self.default_thresholds = t;
        self
    }

    /// The aggregator's settings ([`tidemark_store::settings`]; the alerts role reads more).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// [`AggregatorConfig::from_env`] over any variable source (tests record what is read).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = Env::new(get);
        let mut c = AggregatorConfig::new(env.table_name());
        c.role = env
            .parse_with(&settings::AGGREGATOR_ROLE, "rollups or alerts", |v| {
                v.trim().parse().ok()
            })?
            .unwrap_or_default();
        // Only the alerts role publishes and watches for silence: the rollups role reads
        // neither the EventBridge settings nor the offline window.
        if c.role == Role::Alerts {
            let when = format!("required when {}=alerts", settings::AGGREGATOR_ROLE.name);
            c.event_bus_name = Some(env.required(&settings::EVENT_BUS_NAME, when)?);
            c.eventbridge_endpoint = env
                .text(&settings::TIDEMARK_EVENTBRIDGE_ENDPOINT)
                .or_else(|| env.text(&settings::AWS_ENDPOINT_URL_EVENTBRIDGE));
            c.offline_after_default = env.offline_after()?.unwrap_or(c.offline_after_default);
        } else {
            c.group_tags = env.group_tags()?;
            c.tag_lead = env.layout_lead(c.tag_lead)?;
        }
        c.default_thresholds = env
            .try_parse(&settings::DEFAULT_THRESHOLDS, thresholds)?
            .unwrap_or_default();
        if c.role == Role::Alerts {
            c.default_rules = env
                .try_parse(&settings::DEFAULT_RULES, rules)?
                .unwrap_or_default();
        }
        c.write_concurrency = env
            .num(
                &settings::WRITE_CONCURRENCY,
                "a whole number of at least 1",
                |n| *n >= 1,
            )?
            .unwrap_or(c.write_concurrency);
        c.device_refresh = env
            .seconds(&settings::DEVICE_REFRESH_SECONDS, "whole seconds", |_| true)?
            .unwrap_or(c.device_refresh);
        c.status_partitions = env.status_partitions()?.unwrap_or(c.status_partitions);
        Ok(c)
    }
}

/// Parses thresholds JSON (`{metric: {min?, max?, severity}}`), rejecting unknown fields so a
/// typo (`"maxx"`) fails the deployment instead of silently never alerting.
pub fn parse_thresholds(json: &str) -> Result<BTreeMap<MetricName, Threshold>, AggregatorError> {
    thresholds(json)
        .map_err(|e| AggregatorError::Config(format!("{}: {e}", settings::DEFAULT_THRESHOLDS.name)))
}

/// `DEFAULT_RULES` (a JSON array of rules, [`tidemark_schema::rules::parse_rules`]): a bad
/// rule fails the deployment, naming the rule and the field.
fn rules(json: &str) -> Result<Vec<tidemark_schema::RuleSpec>, String> {
    let v: serde_json::Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
    tidemark_schema::rules::parse_rules(&v).map_err(|(i, e)| match i {
        Some(i) => format!("rules[{i}].{e}"),
        None => e.to_string(),
    })
}

/// [`parse_thresholds`], its error saying only what is wrong.
fn thresholds(json: &str) -> Result<BTreeMap<MetricName, Threshold>, String> {
    let t: BTreeMap<MetricName, Threshold> =
        serde_json::from_str(json).map_err(|e| e.to_string())?;
    for (m, th) in &t {
        if let Some(v) = [th.min, th.max]
            .into_iter()
            .flatten()
            .find(|v| !tidemark_schema::is_metric_value(*v))
        {
            return Err(format!(
                "threshold of {m} is {v:e}, outside the range of metric values"
            ));
        }
        if th.min.is_none() && th.max.is_none() {
            return Err(format!("threshold of {m} has neither min nor max"));
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
        let e = AggregatorConfig::from_lookup(env(&[(settings::AGGREGATOR_ROLE.name, "alerts")]))
            .unwrap_err();
        assert!(e.to_string().contains(settings::EVENT_BUS_NAME.name), "{e}");
        let c = AggregatorConfig::from_lookup(env(&[
            (settings::AGGREGATOR_ROLE.name, "alerts"),
            (settings::EVENT_BUS_NAME.name, "tidemark-alerts"),
        ]))
        .unwrap();
        assert_eq!(c.role, Role::Alerts);
        assert_eq!(c.event_bus_name.as_deref(), Some("tidemark-alerts"));
        let c = AggregatorConfig::from_lookup(env(&[])).unwrap();
        assert_eq!((c.role, c.event_bus_name), (Role::Rollups, None));
        let table = settings::AGGREGATOR_ROLE.default.trim_matches('`');
        assert_eq!(table.parse::<Role>().ok(), Some(c.role));
    }

    #[test]
    fn the_fleets_default_rules_parse_and_a_bad_one_fails_naming_its_field() {
        let env = |rules: &'static str| {
            move |k: &str| match k {
                "AGGREGATOR_ROLE" => Some("alerts".to_owned()),
                "EVENT_BUS_NAME" => Some("b".to_owned()),
                "DEFAULT_RULES" => Some(rules.to_owned()),
                _ => None,
            }
        };
        let c =
            AggregatorConfig::from_lookup(env(r#"[{"metric":"flow","unchangedForSeconds":3600}]"#))
                .unwrap();
        assert_eq!(c.default_rules.len(), 1);
        let e = AggregatorConfig::from_lookup(env(
            r#"[{"metric":"t","aggregate":"median","window":"5m","above":1}]"#,
        ))
        .unwrap_err();
        assert!(e.to_string().contains("rules[0].aggregate"), "{e}");
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
