//! The watchdog's settings (the table of every function's settings is
//! `tidemark_store::settings`).

use std::time::Duration;

use tidemark_schema::Clock;

use crate::WatchdogError;

pub const STREAM_NAME_ENV: &str = "STREAM_NAME";
pub const OFFLINE_AFTER_SECONDS_ENV: &str = "OFFLINE_AFTER_SECONDS";
pub const KINESIS_ENDPOINT_ENV: &str = "TIDEMARK_KINESIS_ENDPOINT";

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
    pub clock: Clock,
}

impl WatchdogConfig {
    pub fn new(table: impl Into<String>, stream: impl Into<String>) -> Self {
        WatchdogConfig {
            table_name: table.into(),
            stream_name: stream.into(),
            kinesis_endpoint: None,
            offline_after_default: 0,
            heartbeat_wait: Duration::from_secs(20),
            heartbeat_poll: Duration::from_millis(500),
            max_devices: 5_000,
            concurrency: 16,
            clock: Clock::system(),
        }
    }

    /// `TABLE_NAME` (default `tidemark`), `STREAM_NAME` (required), `OFFLINE_AFTER_SECONDS`,
    /// `TIDEMARK_KINESIS_ENDPOINT` (local runs).
    pub fn from_env() -> Result<Self, WatchdogError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, WatchdogError> {
        let non_empty = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let table = non_empty(tidemark_store::client::TABLE_NAME_ENV)
            .unwrap_or_else(|| tidemark_schema::TABLE.default_name.to_owned());
        let stream = non_empty(STREAM_NAME_ENV)
            .ok_or_else(|| WatchdogError::Config(format!("{STREAM_NAME_ENV} is required")))?;
        let mut c = WatchdogConfig::new(table, stream);
        c.kinesis_endpoint = non_empty(KINESIS_ENDPOINT_ENV);
        if let Some(n) = non_empty(OFFLINE_AFTER_SECONDS_ENV) {
            c.offline_after_default = n
                .trim()
                .parse::<u32>()
                .ok()
                .and_then(tidemark_schema::fleet_offline_window)
                .ok_or_else(|| {
                    WatchdogError::Config(format!(
                        "{OFFLINE_AFTER_SECONDS_ENV}={n:?} is not a whole number of seconds from 0 to 2592000"
                    ))
                })?;
        }
        Ok(c)
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
        assert!(e.to_string().contains(STREAM_NAME_ENV), "{e}");
        let c = WatchdogConfig::from_lookup(env(&[
            (STREAM_NAME_ENV, "readings"),
            (OFFLINE_AFTER_SECONDS_ENV, "300"),
        ]))
        .unwrap();
        assert_eq!(
            (c.stream_name.as_str(), c.offline_after_default),
            ("readings", 300)
        );
        let e = WatchdogConfig::from_lookup(env(&[
            (STREAM_NAME_ENV, "readings"),
            (OFFLINE_AFTER_SECONDS_ENV, "9999999"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains(OFFLINE_AFTER_SECONDS_ENV), "{e}");
    }
}
