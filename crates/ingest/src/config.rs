//! Ingest settings, from the function's environment (see `template.yaml`) or built in tests.

use std::time::Duration;

use tidemark_schema::{DeviceIdentity, Layout, LayoutLead};
use tidemark_store::settings::{self, Env};
use tidemark_store::write::batch::RetryPolicy;

pub use tidemark_store::settings::ConfigError;

/// What to do with a reading from a device that has no Device item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownDevices {
    /// Store the reading; ingest does nothing extra. The device is registered by the
    /// aggregator's device update, which sets `createdAt`, `status` and the GSI1 keys with
    /// `if_not_exists` and so costs no extra write unit (docs/design.md §5). A conditional put here
    /// would pay a write unit per device per container even when the device exists.
    Register,
    /// Quarantine records naming a device that is not registered (reason `unknown_device`).
    /// Existence is checked with `BatchGetItem`, answers cached per container for
    /// [`IngestConfig::device_cache_ttl`], so a steady fleet costs almost no reads.
    Quarantine,
}

impl UnknownDevices {
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "register" => Some(UnknownDevices::Register),
            "quarantine" => Some(UnknownDevices::Quarantine),
            _ => None,
        }
    }
}

/// Everything the ingest handler can be told.
#[derive(Debug, Clone, PartialEq)]
pub struct IngestConfig {
    /// `TABLE_NAME` (default `tidemark`).
    pub table_name: String,
    /// `RETENTION_DAYS` (30): reading TTL, and the oldest reading accepted.
    pub retention_days: u32,
    /// `MAX_FUTURE_SECONDS` (300): how far ahead of the clock a reading may be (device clocks
    /// drift; a reading far in the future would sit at the top of "latest" for days).
    pub max_future: Duration,
    /// `UNKNOWN_DEVICES` (`register` | `quarantine`).
    pub unknown_devices: UnknownDevices,
    /// `DEVICE_IDENTITY` (`payload` | `partition-key` | `iot-thing`): which devices a
    /// record's readings may name ([`crate::identity`]). A deployment that leaves it unset
    /// gets `partition-key` ([`IngestConfig::from_lookup`]); [`IngestConfig::new`] starts
    /// from `payload`, so code that embeds the handler (tests, benches, the local stack)
    /// chooses its mode rather than inheriting one its records were not made for.
    pub device_identity: DeviceIdentity,
    /// `MAX_IN_FLIGHT` (4): concurrent `BatchWriteItem` calls.
    pub max_in_flight: usize,
    /// `MAX_METRICS` (32, docs/design.md §3).
    pub max_metrics: usize,
    /// `MAX_ARRAY_LEN` (1000): readings in one record.
    pub max_array_len: usize,
    /// `MAX_PAYLOAD_BYTES` (1 MiB, Kinesis' own record limit).
    pub max_payload_bytes: usize,
    /// `MAX_METADATA_BYTES` (1024): keeps a reading item near the 1 KB of one write unit and
    /// far from DynamoDB's 400 KB item limit.
    pub max_metadata_bytes: usize,
    /// `LAYOUT_CACHE_SECONDS` (30): the oldest partition counts a container writes with. It
    /// refreshes them after half of this, and keeps the old answer through a failed refresh
    /// only until this. The API schedules a shard change later than now + this +
    /// `MAX_FUTURE_SECONDS` ([`tidemark_schema::LayoutLead`]), so no container still holding
    /// the old count writes a reading of the new epoch. Both must match the API's.
    pub layout_cache_ttl: Duration,
    /// `DEVICE_CACHE_SECONDS` (60): how long an existence answer is trusted in quarantine mode.
    pub device_cache_ttl: Duration,
    /// `DEADLINE_MARGIN_MS` (500): time kept back before the invocation deadline to report.
    pub deadline_margin: Duration,
    /// `RETRY_BASE_MS` (25) and `RETRY_MAX_MS` (2000): backoff of re-sent writes.
    pub retry: RetryPolicy,
    /// `DEFAULT_LAYOUT` (`single` | `packed:<slot seconds>`): how readings of devices without
    /// a layout of their own are stored. A container whose value differs from the fleet's
    /// default layout history appends it, effective after the shard lead time, so readings
    /// already written keep their items ([`tidemark_schema::layout`]).
    pub default_layout: Option<Layout>,
}

impl IngestConfig {
    /// The defaults of docs/design.md §3/§4 for `table_name` (what tests start from), with
    /// `device_identity` `payload` (see [`IngestConfig::device_identity`]).
    pub fn new(table_name: impl Into<String>) -> Self {
        IngestConfig {
            table_name: table_name.into(),
            retention_days: const { settings::RETENTION_DAYS.default_u32() },
            max_future: LayoutLead::default().max_future,
            unknown_devices: UnknownDevices::Register,
            device_identity: DeviceIdentity::Payload,
            max_in_flight: const { settings::MAX_IN_FLIGHT.default_usize() },
            max_metrics: const { settings::MAX_METRICS.default_usize() },
            max_array_len: const { settings::MAX_ARRAY_LEN.default_usize() },
            max_payload_bytes: const { settings::MAX_PAYLOAD_BYTES.default_usize() },
            max_metadata_bytes: const { settings::MAX_METADATA_BYTES.default_usize() },
            layout_cache_ttl: LayoutLead::default().layout_cache,
            device_cache_ttl: Duration::from_secs(
                const { settings::DEVICE_CACHE_SECONDS.default_u64() },
            ),
            deadline_margin: Duration::from_millis(
                const { settings::DEADLINE_MARGIN_MS.default_u64() },
            ),
            retry: RetryPolicy::default(),
            default_layout: None,
        }
    }

    /// What the API must know of this configuration to schedule shard changes safely.
    pub fn layout_lead(&self) -> LayoutLead {
        LayoutLead {
            layout_cache: self.layout_cache_ttl,
            max_future: self.max_future,
        }
    }

    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads settings through `get` (the environment, or a map in tests); unset or empty
    /// variables keep their defaults, malformed ones are an error rather than a guess.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        const POSITIVE: &str = "a whole number of at least 1";
        const WHOLE: &str = "a whole number";
        let env = Env::new(get);
        let mut c = IngestConfig::new(env.table_name());
        c.retention_days = env
            .num(&settings::RETENTION_DAYS, POSITIVE, |n| *n >= 1)?
            .unwrap_or(c.retention_days);
        c.max_future = env
            .seconds(&settings::MAX_FUTURE_SECONDS, WHOLE, |_| true)?
            .unwrap_or(c.max_future);
        c.default_layout = env.parse_with(
            &settings::DEFAULT_LAYOUT,
            "single or packed:<seconds dividing an hour>, e.g. packed:60",
            |v| v.parse().ok(),
        )?;
        c.unknown_devices = env
            .parse_with(
                &settings::UNKNOWN_DEVICES,
                "register or quarantine",
                UnknownDevices::parse,
            )?
            .unwrap_or(c.unknown_devices);
        c.device_identity = env
            .parse_with(
                &settings::DEVICE_IDENTITY,
                "payload, partition-key or iot-thing",
                DeviceIdentity::parse,
            )?
            .unwrap_or_default();
        c.max_in_flight = env
            .num(&settings::MAX_IN_FLIGHT, POSITIVE, |n| *n >= 1)?
            .unwrap_or(c.max_in_flight);
        c.max_metrics = env
            .num(&settings::MAX_METRICS, POSITIVE, |n| *n >= 1)?
            .unwrap_or(c.max_metrics);
        c.max_array_len = env
            .num(&settings::MAX_ARRAY_LEN, POSITIVE, |n| *n >= 1)?
            .unwrap_or(c.max_array_len);
        c.max_payload_bytes = env
            .num(&settings::MAX_PAYLOAD_BYTES, POSITIVE, |n| *n >= 1)?
            .unwrap_or(c.max_payload_bytes);
        c.max_metadata_bytes = env
            .num(&settings::MAX_METADATA_BYTES, WHOLE, |_| true)?
            .unwrap_or(c.max_metadata_bytes);
        c.layout_cache_ttl = env
            .seconds(&settings::LAYOUT_CACHE_SECONDS, WHOLE, |_| true)?
            .unwrap_or(c.layout_cache_ttl);
        c.device_cache_ttl = env
            .seconds(&settings::DEVICE_CACHE_SECONDS, WHOLE, |_| true)?
            .unwrap_or(c.device_cache_ttl);
        c.deadline_margin = env
            .millis(&settings::DEADLINE_MARGIN_MS, WHOLE, |_| true)?
            .unwrap_or(c.deadline_margin);
        c.retry.base_delay = env
            .millis(&settings::RETRY_BASE_MS, POSITIVE, |n| *n >= 1)?
            .unwrap_or(c.retry.base_delay);
        c.retry.max_delay = env
            .millis(&settings::RETRY_MAX_MS, POSITIVE, |n| *n >= 1)?
            .unwrap_or(c.retry.max_delay);
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn from(pairs: &[(&str, &str)]) -> Result<IngestConfig, ConfigError> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        IngestConfig::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults_follow_the_design() {
        let c = from(&[]).unwrap();
        assert_eq!(
            c,
            IngestConfig {
                device_identity: DeviceIdentity::PartitionKey,
                ..IngestConfig::new("tidemark")
            }
        );
        assert_eq!(c.retention_days, 30);
        assert_eq!(c.max_future, Duration::from_secs(300));
        assert_eq!(c.unknown_devices, UnknownDevices::Register);
        assert_eq!(c.max_metrics, 32);
        let table = settings::UNKNOWN_DEVICES.default.trim_matches('`');
        assert_eq!(UnknownDevices::parse(table), Some(c.unknown_devices));
        assert_eq!(c.device_identity, DeviceIdentity::PartitionKey);
        let table = settings::DEVICE_IDENTITY.default.trim_matches('`');
        assert_eq!(DeviceIdentity::parse(table), Some(c.device_identity));
    }

    #[test]
    fn environment_overrides_defaults() {
        let c = from(&[
            ("TABLE_NAME", "t1"),
            ("RETENTION_DAYS", "7"),
            ("MAX_FUTURE_SECONDS", "60"),
            ("UNKNOWN_DEVICES", "Quarantine"),
            ("MAX_IN_FLIGHT", "8"),
            ("DEVICE_IDENTITY", "iot-thing"),
        ])
        .unwrap();
        assert_eq!(c.device_identity, DeviceIdentity::IotThing);
        assert_eq!(c.table_name, "t1");
        assert_eq!(c.retention_days, 7);
        assert_eq!(c.max_future, Duration::from_secs(60));
        assert_eq!(c.unknown_devices, UnknownDevices::Quarantine);
        assert_eq!(c.max_in_flight, 8);
    }

    #[test]
    fn malformed_settings_are_errors_not_guesses() {
        for (k, v) in [
            ("RETENTION_DAYS", "0"),
            ("RETENTION_DAYS", "thirty"),
            ("UNKNOWN_DEVICES", "drop"),
            ("DEVICE_IDENTITY", "thing"),
            ("MAX_IN_FLIGHT", "-1"),
        ] {
            let e = from(&[(k, v)]).unwrap_err();
            assert_eq!(e.name, k);
        }
    }
}
