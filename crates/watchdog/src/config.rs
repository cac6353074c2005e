//! The watchdog's settings (the table of every function's settings is
//! `tidemark_store::settings`).

use std::time::Duration;

use tidemark_schema::{Clock, GroupRuleSpec, GroupSignal, TagKey};
use tidemark_store::settings::{self, Env};

pub use tidemark_store::settings::ConfigError;

#[derive(Debug, Clone)]
pub struct WatchdogConfig {
    pub table_name: String,
    /// The readings stream its heartbeats go into.
    pub stream_name: String,
    /// A local Kinesis endpoint (`TIDEMARK_KINESIS_ENDPOINT`); `None`: AWS.
    pub kinesis_endpoint: Option<String>,
    /// The fleet's offline window for devices without their own (0: off).
    pub offline_after_default: u32,
    /// How long a run waits for its own heartbeats to pass; past it, it decides with the
    /// watermark the pipeline has reached (an older one).
    pub heartbeat_wait: Duration,
    /// How often it looks whether they have.
    pub heartbeat_poll: Duration,
    /// The most devices one run decides about (the rest are due still: the next run).
    pub max_devices: usize,
    /// Devices decided at once.
    pub concurrency: usize,
    /// `GROUP_RULES`: the fleet's group rules, judged at the end of each run.
    pub group_rules: Vec<GroupRuleSpec>,
    pub clock: Clock,
}

impl WatchdogConfig {
    pub fn new(table: impl Into<String>, stream: impl Into<String>) -> Self {
        WatchdogConfig {
            table_name: table.into(),
            stream_name: stream.into(),
            kinesis_endpoint: None,
            offline_after_default: const { settings::OFFLINE_AFTER_SECONDS.default_u32() },
            heartbeat_wait: Duration::from_secs(20),
            heartbeat_poll: Duration::from_millis(500),
            max_devices: 5_000,
            concurrency: 16,
            group_rules: Vec::new(),
            clock: Clock::system(),
        }
    }

    /// The watchdog's settings ([`tidemark_store::settings`]).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = Env::new(get);
        let table = env.table_name();
        let stream = env.required(
            &settings::STREAM_NAME,
            format!("required: {}", settings::STREAM_NAME.meaning),
        )?;
        let mut c = WatchdogConfig::new(table, stream);
        c.kinesis_endpoint = env.text(&settings::TIDEMARK_KINESIS_ENDPOINT);
        c.offline_after_default = env.offline_after()?.unwrap_or(c.offline_after_default);
        c.group_rules = env
            .try_parse(&settings::GROUP_RULES, group_rules)?
            .unwrap_or_default();
        windows_kept(&c.group_rules, &env.group_tags()?).map_err(|expected| ConfigError {
            name: settings::GROUP_RULES.name,
            value: env.text(&settings::GROUP_RULES),
            expected: expected.into(),
        })?;
        Ok(c)
    }
}

/// `GROUP_RULES` ([`tidemark_schema::parse_group_rules`]): a bad rule fails the deployment,
/// naming the rule and the field.
pub fn group_rules(json: &str) -> Result<Vec<GroupRuleSpec>, String> {
    let v: serde_json::Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
    tidemark_schema::parse_group_rules(&v).map_err(|(i, e)| match i {
        Some(i) => format!("groupRules[{i}].{e}"),
        None => e.to_string(),
    })
}

/// Refuses a group window rule over a tag key without group rollups (`GROUP_TAGS`): the
/// rollups role keeps no partials, so its window would never hold a reading.
pub fn windows_kept(rules: &[GroupRuleSpec], keys: &[TagKey]) -> Result<(), String> {
    match rules.iter().enumerate().find(|(_, r)| {
        matches!(r.signal, GroupSignal::Window { .. }) && !keys.contains(&r.group.key)
    }) {
        Some((i, r)) => Err(format!(
            "groupRules[{i}].group: {} keeps no group rollups, which a window rule folds; \
             add {} to {}",
            r.group,
            r.group.key,
            settings::GROUP_TAGS.name
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_is_required_and_the_window_is_checked() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        let e = WatchdogConfig::from_lookup(env(&[])).unwrap_err();
        assert!(e.to_string().contains(settings::STREAM_NAME.name), "{e}");
        let c = WatchdogConfig::from_lookup(env(&[
            (settings::STREAM_NAME.name, "readings"),
            (settings::OFFLINE_AFTER_SECONDS.name, "300"),
        ]))
        .unwrap();
        assert_eq!(
            (c.stream_name.as_str(), c.offline_after_default),
            ("readings", 300)
        );
        let e = WatchdogConfig::from_lookup(env(&[
            (settings::STREAM_NAME.name, "readings"),
            (settings::OFFLINE_AFTER_SECONDS.name, "9999999"),
        ]))
        .unwrap_err();
        assert!(
            e.to_string().contains(settings::OFFLINE_AFTER_SECONDS.name),
            "{e}"
        );
    }

    #[test]
    fn a_group_window_rule_needs_its_tag_key_in_group_tags() {
        let rules =
            r#"[{"group":"zone:7","metric":"t","aggregate":"avg","window":"15m","above":28}]"#;
        let with = |tags: &'static str| {
            move |k: &str| match k {
                "STREAM_NAME" => Some("readings".to_owned()),
                "GROUP_RULES" => Some(rules.to_owned()),
                "GROUP_TAGS" => Some(tags.to_owned()),
                _ => None,
            }
        };
        let e = WatchdogConfig::from_lookup(with("site")).unwrap_err();
        assert!(e.to_string().contains("groupRules[0].group"), "{e}");
        let c = WatchdogConfig::from_lookup(with("site,zone")).unwrap();
        assert_eq!(c.group_rules.len(), 1);
    }
}
