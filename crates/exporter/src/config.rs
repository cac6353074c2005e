//! The exporter function's settings (the table of every function's settings is
//! `tidemark_store::settings`).

use std::time::Duration;

use tidemark_store::settings::{self, Env};

pub use tidemark_store::settings::ConfigError;

use crate::schedule::Schedule;

#[derive(Debug, Clone)]
pub struct ExporterConfig {
    pub table_name: String,
    pub bucket: String,
    /// A local S3 (`TIDEMARK_S3_ENDPOINT`); `None`: AWS.
    pub s3_endpoint: Option<String>,
    /// `STATUS_PARTITIONS`: where the device listing is spread, as the aggregator writes it.
    pub status_partitions: u16,
    /// `GROUP_TAGS`: the tag keys whose groups keep rollups.
    pub group_tags: Vec<tidemark_schema::TagKey>,
    pub schedule: Schedule,
    /// `EXPORT_QUEUE_URL`: the queue an hour's slices are sent to, each invoking the function
    /// once; `None` (unset or empty): each run exports its slices itself.
    pub queue_url: Option<String>,
}

impl ExporterConfig {
    pub fn new(table: impl Into<String>, bucket: impl Into<String>) -> Self {
        ExporterConfig {
            table_name: table.into(),
            bucket: bucket.into(),
            s3_endpoint: None,
            status_partitions: const { settings::STATUS_PARTITIONS.default_u16() },
            group_tags: settings::default_group_tags(),
            schedule: Schedule {
                prefix: settings::EXPORT_PREFIX.default.trim_matches('`').to_owned(),
                grace: Duration::from_secs(const { settings::EXPORT_GRACE_SECONDS.default_u64() }),
                max_hours: const { settings::EXPORT_MAX_HOURS.default_usize() },
                settle: crate::schedule::MARK_SETTLE,
                resend_after: crate::schedule::RESEND_AFTER,
            },
            queue_url: None,
        }
    }

    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = Env::new(get);
        let table = env.table_name();
        let bucket = env.required(
            &settings::EXPORT_BUCKET,
            format!("required: {}", settings::EXPORT_BUCKET.meaning),
        )?;
        let mut c = ExporterConfig::new(table, bucket);
        c.s3_endpoint = env.text(&settings::TIDEMARK_S3_ENDPOINT);
        c.queue_url = env.text(&settings::EXPORT_QUEUE_URL);
        c.status_partitions = env.status_partitions()?.unwrap_or(c.status_partitions);
        c.group_tags = env.group_tags()?;
        if let Some(p) = env.parse_with(
            &settings::EXPORT_PREFIX,
            "a key prefix of letters, digits, '/', '_' and '-'",
            |v| {
                let p = v.trim().trim_matches('/');
                let ok = !p.is_empty()
                    && p.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "/_-".contains(c));
                ok.then(|| p.to_owned())
            },
        )? {
            c.schedule.prefix = p;
        }
        c.schedule.grace = env
            .seconds(
                &settings::EXPORT_GRACE_SECONDS,
                "whole seconds, at most 86400",
                |s| *s <= 86_400,
            )?
            .unwrap_or(c.schedule.grace);
        c.schedule.max_hours = env
            .num(
                &settings::EXPORT_MAX_HOURS,
                "a whole number from 1 to 744",
                |n| (1..=744).contains(n),
            )?
            .unwrap_or(c.schedule.max_hours);
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn the_bucket_is_required_and_the_rest_defaults_to_the_tables() {
        let e = ExporterConfig::from_lookup(lookup(&[])).unwrap_err();
        assert_eq!(e.name, "EXPORT_BUCKET");
        let c = ExporterConfig::from_lookup(lookup(&[("EXPORT_BUCKET", "b")])).unwrap();
        assert_eq!(
            (
                c.schedule.prefix.as_str(),
                c.schedule.grace,
                c.schedule.max_hours
            ),
            ("tidemark", Duration::from_secs(300), 24)
        );
        assert_eq!((c.status_partitions, c.s3_endpoint), (1, None));
        assert_eq!(c.queue_url, None);
    }

    #[test]
    fn a_malformed_value_names_its_variable() {
        for (name, bad) in [
            ("EXPORT_PREFIX", "a b"),
            ("EXPORT_GRACE_SECONDS", "-1"),
            ("EXPORT_MAX_HOURS", "0"),
            ("STATUS_PARTITIONS", "0"),
        ] {
            let get = move |k: &str| match k {
                "EXPORT_BUCKET" => Some("b".to_owned()),
                k if k == name => Some(bad.to_owned()),
                _ => None,
            };
            let e = ExporterConfig::from_lookup(get).unwrap_err();
            assert_eq!(e.name, name);
        }
        let c = ExporterConfig::from_lookup(lookup(&[
            ("EXPORT_BUCKET", "b"),
            ("EXPORT_PREFIX", "/lake/tidemark/"),
            ("STATUS_PARTITIONS", "4"),
        ]))
        .unwrap();
        assert_eq!(
            (c.schedule.prefix.as_str(), c.status_partitions),
            ("lake/tidemark", 4)
        );
    }
}
