//! Every environment variable a deployed function reads, in one table: its name, default,
//! meaning and which functions read it. Each function's `from_lookup` reads its settings, and
//! a workspace test holds the table against what each one reads, what `template.yaml`
//! declares for it, and the settings table of `docs/operations.md`, so the four cannot drift
//! apart.
//!
//! Each row is a constant named as its variable (`settings::RETENTION_DAYS`); code names a
//! variable only through it, so a name is spelled once.
//!
//! [`Env`] reads them, the same way for every function: unset and blank mean the default,
//! and a malformed value is a [`ConfigError`] naming the variable, its value and what it
//! should be, never a guess.

use std::borrow::Cow;
use std::fmt::Display;
use std::str::FromStr;
use std::time::Duration;

use thiserror::Error;

/// A deployed function (the alerts function is the aggregator binary in its alerts role).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Function {
    Ingest,
    Rollups,
    Alerts,
    Api,
    Watchdog,
    Exporter,
}

impl Function {
    pub const ALL: [Function; 6] = [
        Function::Ingest,
        Function::Rollups,
        Function::Alerts,
        Function::Api,
        Function::Watchdog,
        Function::Exporter,
    ];

    /// Its logical ID in `template.yaml`.
    pub fn resource(self) -> &'static str {
        match self {
            Function::Ingest => "IngestFunction",
            Function::Rollups => "AggregatorFunction",
            Function::Alerts => "AlertFunction",
            Function::Api => "ApiFunction",
            Function::Watchdog => "WatchdogFunction",
            Function::Exporter => "ExporterFunction",
        }
    }

    /// Its name in the settings table of `docs/operations.md`.
    pub fn label(self) -> &'static str {
        match self {
            Function::Ingest => "ingest",
            Function::Rollups => "rollups",
            Function::Alerts => "alerts",
            Function::Api => "api",
            Function::Watchdog => "watchdog",
            Function::Exporter => "exporter",
        }
    }
}

/// One environment variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    pub name: &'static str,
    /// What an unset (or empty) variable means.
    pub default: &'static str,
    pub meaning: &'static str,
    pub read_by: &'static [Function],
    pub read_through: ReadThrough,
    /// The name the variable had before a rename: still read, with a deprecation warning,
    /// when the variable is not set under its name ([`renamed`]).
    pub old_name: Option<&'static str>,
}

impl Setting {
    /// The default of a setting whose default is a whole number. Called in a constant
    /// (`const { MAX_IN_FLIGHT.default_usize() }`), it makes the table's default the config's
    /// and a default that is not one fails the build.
    pub const fn default_u64(&self) -> u64 {
        let b = self.default.as_bytes();
        // Nineteen digits stay below u64::MAX, so the sum below cannot overflow.
        assert!(
            !b.is_empty() && b.len() <= 19,
            "the setting's default is not a whole number"
        );
        let mut n: u64 = 0;
        let mut i = 0;
        while i < b.len() {
            assert!(
                b[i].is_ascii_digit(),
                "the setting's default is not a whole number"
            );
            n = n * 10 + (b[i] - b'0') as u64;
            i += 1;
        }
        n
    }

    /// [`Setting::default_u64`] for a `u32` setting.
    pub const fn default_u32(&self) -> u32 {
        let n = self.default_u64();
        assert!(n <= u32::MAX as u64, "the setting's default is too large");
        n as u32
    }

    /// [`Setting::default_u64`] for a `u16` setting.
    pub const fn default_u16(&self) -> u16 {
        let n = self.default_u64();
        assert!(n <= u16::MAX as u64, "the setting's default is too large");
        n as u16
    }

    /// [`Setting::default_u64`] for a `usize` setting.
    pub const fn default_usize(&self) -> usize {
        let n = self.default_u64();
        assert!(n <= usize::MAX as u64, "the setting's default is too large");
        n as usize
    }
}

/// Who reads a setting, and so who must declare it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadThrough {
    /// The function's `from_lookup`; `template.yaml` declares it.
    Config,
    /// The SDK client set-up ([`crate::client`]), for local runs; the template declares it
    /// empty.
    Client,
    /// An AWS SDK variable `from_lookup` honours too; Lambda's environment is the user's
    /// to set, so the template does not declare it.
    Sdk,
}

use Function::{Alerts, Api, Exporter, Ingest, Rollups, Watchdog};

const fn s(
    name: &'static str,
    default: &'static str,
    meaning: &'static str,
    read_by: &'static [Function],
) -> Setting {
    Setting {
        name,
        default,
        meaning,
        read_by,
        read_through: ReadThrough::Config,
        old_name: None,
    }
}

pub const TABLE_NAME: Setting = s(
    "TABLE_NAME",
    "`tidemark`",
    "the table",
    &[Ingest, Rollups, Alerts, Api, Watchdog, Exporter],
);

/// DynamoDB Local or another emulator, e.g. `http://127.0.0.1:8000`; [`crate::client`] reads it.
pub const TIDEMARK_DYNAMODB_ENDPOINT: Setting = Setting {
    read_through: ReadThrough::Client,
    ..s(
        "TIDEMARK_DYNAMODB_ENDPOINT",
        "AWS",
        "a local DynamoDB endpoint (empty when deployed)",
        &[Ingest, Rollups, Alerts, Api, Watchdog, Exporter],
    )
};

/// Ingest's reading TTL and the API's oldest served reading: both must be given the same
/// value.
pub const RETENTION_DAYS: Setting = s(
    "RETENTION_DAYS",
    "30",
    "reading TTL, the oldest reading accepted and served",
    &[Ingest, Api],
);

/// With [`LAYOUT_CACHE_SECONDS`], how far ahead the API schedules a layout change
/// ([`tidemark_schema::LayoutLead`]); ingest and the API must be given the same value.
pub const MAX_FUTURE_SECONDS: Setting = s(
    "MAX_FUTURE_SECONDS",
    "300",
    "how far ahead of the clock a reading may be; part of the layout and tag lead time",
    &[Ingest, Rollups, Api],
);

/// How long an ingest container trusts the layout histories it read. Ingest and the API must
/// be given the same value (see [`MAX_FUTURE_SECONDS`]).
pub const LAYOUT_CACHE_SECONDS: Setting = Setting {
    old_name: Some("SHARD_CACHE_SECONDS"),
    ..s(
        "LAYOUT_CACHE_SECONDS",
        "30",
        "the oldest layout histories an ingest container writes with; part of the layout and tag lead time",
        &[Ingest, Rollups, Api],
    )
};

pub const UNKNOWN_DEVICES: Setting = s(
    "UNKNOWN_DEVICES",
    "`register`",
    "`register` or `quarantine` readings of devices without a device item",
    &[Ingest],
);

/// Who a reading may name as its device ([`tidemark_schema::DeviceIdentity`]).
pub const DEVICE_IDENTITY: Setting = s(
    "DEVICE_IDENTITY",
    "`partition-key`",
    "`payload`, `partition-key` or `iot-thing`: which device a record's readings may name (others are quarantined as `identity_mismatch`)",
    &[Ingest],
);

pub const DEFAULT_LAYOUT: Setting = s(
    "DEFAULT_LAYOUT",
    "the stored one",
    "`single` or `packed:<slot seconds>`: the fleet's default layout, recorded for the future",
    &[Ingest],
);

pub const MAX_IN_FLIGHT: Setting = s("MAX_IN_FLIGHT", "4", "concurrent batch writes", &[Ingest]);

pub const MAX_METRICS: Setting = s("MAX_METRICS", "32", "metrics in one record", &[Ingest]);

pub const MAX_ARRAY_LEN: Setting = s("MAX_ARRAY_LEN", "1000", "readings in one record", &[Ingest]);

pub const MAX_PAYLOAD_BYTES: Setting = s(
    "MAX_PAYLOAD_BYTES",
    "1048576",
    "bytes in one record (Kinesis' own limit)",
    &[Ingest],
);

pub const MAX_METADATA_BYTES: Setting = s(
    "MAX_METADATA_BYTES",
    "1024",
    "bytes of one reading's `metadata`",
    &[Ingest],
);

pub const DEVICE_CACHE_SECONDS: Setting = s(
    "DEVICE_CACHE_SECONDS",
    "60",
    "how long a device's existence (`UNKNOWN_DEVICES=quarantine`) and a gateway's `gatewayFor` (`DEVICE_IDENTITY=partition-key`) are trusted",
    &[Ingest],
);

pub const DEADLINE_MARGIN_MS: Setting = s(
    "DEADLINE_MARGIN_MS",
    "500",
    "time kept back before the invocation's deadline to report what is unwritten",
    &[Ingest],
);

pub const RETRY_BASE_MS: Setting = s(
    "RETRY_BASE_MS",
    "25",
    "first backoff of a re-sent write",
    &[Ingest],
);

pub const RETRY_MAX_MS: Setting = s(
    "RETRY_MAX_MS",
    "2000",
    "longest backoff of a re-sent write",
    &[Ingest],
);

/// The template runs the one aggregator binary twice, once per role, each behind its own
/// mapping on the table's stream.
pub const AGGREGATOR_ROLE: Setting = s(
    "AGGREGATOR_ROLE",
    "`rollups`",
    "`rollups` or `alerts`: what the aggregator binary does",
    &[Rollups, Alerts],
);

/// JSON, e.g.
/// `{"temperature":{"max":30,"severity":"critical"},"battery":{"min":15,"severity":"warning"}}`.
pub const DEFAULT_THRESHOLDS: Setting = s(
    "DEFAULT_THRESHOLDS",
    "none",
    "JSON thresholds per metric for devices without their own",
    &[Rollups, Alerts],
);

/// JSON, an array of alert rules (`tidemark_schema::rules::parse_rules`, at most 16), e.g.
/// `[{"metric":"temperature","aggregate":"avg","window":"5m","above":30}]`: the rules of
/// devices without their own `rules` (docs/design.md §5). Only the alerts role judges rules,
/// so only it reads this.
pub const DEFAULT_RULES: Setting = s(
    "DEFAULT_RULES",
    "`[]`",
    "JSON array of alert rules (windowed aggregate, rate, stuck value; at most 16) for devices without their own",
    &[Alerts],
);

/// The fleet's group rules (docs/design.md §5 "Group rules"). The watchdog judges them each
/// minute, so only it reads this.
pub const GROUP_RULES: Setting = s(
    "GROUP_RULES",
    "`[]`",
    "JSON array of group rules (`{\"group\":\"site:A\",\"offlineFraction\":{\"above\":0.1}}`, `{\"group\":\"site:A\",\"metric\":\"temperature\",\"aggregate\":\"avg\",\"window\":\"15m\",\"above\":28}`; at most 64)",
    &[Watchdog],
);

pub const WRITE_CONCURRENCY: Setting = s(
    "WRITE_CONCURRENCY",
    "16",
    "concurrent aggregate and device writes",
    &[Rollups, Alerts],
);

pub const DEVICE_REFRESH_SECONDS: Setting = s(
    "DEVICE_REFRESH_SECONDS",
    "86400",
    "how far the device item's `lastSeenAt` may lag before it is rewritten for it alone (`GET /devices/{id}` reads the newest reading)",
    &[Rollups, Alerts],
);

pub const OFFLINE_AFTER_SECONDS: Setting = s(
    "OFFLINE_AFTER_SECONDS",
    "0",
    "the fleet's offline window for devices without `offlineAfterSeconds` (0: off)",
    &[Alerts, Api, Watchdog],
);

pub const STREAM_NAME: Setting = s(
    "STREAM_NAME",
    "required",
    "the Kinesis stream the watchdog sends its heartbeats into",
    &[Watchdog],
);

pub const TIDEMARK_KINESIS_ENDPOINT: Setting = s(
    "TIDEMARK_KINESIS_ENDPOINT",
    "AWS",
    "a local Kinesis endpoint (empty when deployed)",
    &[Watchdog],
);

/// The aggregator and the API must be given the same value: a device the aggregator
/// registers must land where the API lists it.
pub const STATUS_PARTITIONS: Setting = Setting {
    old_name: Some("STATUS_SHARDS"),
    ..s(
        "STATUS_PARTITIONS",
        "1",
        "GSI1 partitions of the fleet-wide status listings",
        &[Rollups, Alerts, Api, Exporter],
    )
};

/// Group rollups cost writes per distinct group a batch touches, so a key unique per device
/// (a serial number) must not be one. The aggregator (rollups role), the exporter and the API
/// must be given the same value.
pub const GROUP_TAGS: Setting = s(
    "GROUP_TAGS",
    "`site`",
    "the tag keys whose groups keep rollups (`GET /groups/series`) and can have group window rules, comma-separated",
    &[Rollups, Api, Exporter, Watchdog],
);

pub const EXPORT_BUCKET: Setting = s(
    "EXPORT_BUCKET",
    "required",
    "the bucket the Parquet export is written to",
    &[Exporter],
);

pub const EXPORT_PREFIX: Setting = s(
    "EXPORT_PREFIX",
    "`tidemark`",
    "the key prefix of the export's `readings/` and `rollups/`",
    &[Exporter],
);

/// With the rollups' close grace, how long after an hour ends it is exported.
pub const EXPORT_GRACE_SECONDS: Setting = s(
    "EXPORT_GRACE_SECONDS",
    "300",
    "how long after an hour closes it is exported (late readings until then are in it)",
    &[Exporter],
);

pub const EXPORT_MAX_HOURS: Setting = s(
    "EXPORT_MAX_HOURS",
    "24",
    "hours being exported for the first time at once, at most (a backlog is caught up over several runs)",
    &[Exporter],
);

/// Where an hour's slices go (docs/decisions/0017-export-fans-out-over-sqs.md).
pub const EXPORT_QUEUE_URL: Setting = s(
    "EXPORT_QUEUE_URL",
    "none",
    "the SQS queue an hour's slices are sent to, each exported by an invocation of its own (none: each run exports them itself)",
    &[Exporter],
);

pub const TIDEMARK_S3_ENDPOINT: Setting = s(
    "TIDEMARK_S3_ENDPOINT",
    "AWS",
    "a local S3 endpoint, path-style (empty when deployed)",
    &[Exporter],
);

pub const EVENT_BUS_NAME: Setting = s(
    "EVENT_BUS_NAME",
    "required",
    "the EventBridge bus alert state changes are published to",
    &[Alerts],
);

/// The local stack's `PutEvents` stand-in.
pub const TIDEMARK_EVENTBRIDGE_ENDPOINT: Setting = s(
    "TIDEMARK_EVENTBRIDGE_ENDPOINT",
    "AWS",
    "a local EventBridge endpoint (empty when deployed)",
    &[Alerts],
);

pub const AWS_ENDPOINT_URL_EVENTBRIDGE: Setting = Setting {
    read_through: ReadThrough::Sdk,
    ..s(
        "AWS_ENDPOINT_URL_EVENTBRIDGE",
        "AWS",
        "the SDK's own EventBridge endpoint override, used when the one above is unset",
        &[Alerts],
    )
};

pub const CURSOR_SECRET_ARN: Setting = s(
    "CURSOR_SECRET_ARN",
    "required (not with `TIDEMARK_LOCAL=1`)",
    "the Secrets Manager secret holding the cursor signing key",
    &[Api],
);

/// Never inferred from anything else (an endpoint, a missing secret): a local stack signs
/// cursors with a known key, which would let anyone forge them on a deployed one.
pub const TIDEMARK_LOCAL: Setting = s(
    "TIDEMARK_LOCAL",
    "off",
    "`1`: a local run (the development cursor key, no secret read)",
    &[Api],
);

/// It only tells the page what to ask its user for; API Gateway enforces the auth whatever it
/// says.
pub const UI_AUTH: Setting = s(
    "UI_AUTH",
    "`iam` (`none` with `TIDEMARK_LOCAL=1`)",
    "`jwt`, `iam` or `none`: what the dashboard tells its user about auth",
    &[Api],
);

pub const JWT_ISSUER: Setting = s(
    "JWT_ISSUER",
    "none",
    "the issuer the dashboard signs in with (`UI_AUTH=jwt`)",
    &[Api],
);

/// Registered at the issuer with redirect URI `<ApiUrl>/ui/`, authorization code with PKCE
/// and no secret; it enables "Sign in" by redirect, without it the page takes a pasted token.
pub const UI_OIDC_CLIENT_ID: Setting = s(
    "UI_OIDC_CLIENT_ID",
    "none",
    "the dashboard's public OAuth client at the issuer",
    &[Api],
);

/// Auth0 needs the `audience` parameter to issue a JWT access token; other issuers ignore it.
pub const JWT_AUDIENCE: Setting = s(
    "JWT_AUDIENCE",
    "none",
    "the authorizer's audiences, comma-separated; the page asks for the first (Auth0's `audience`)",
    &[Api],
);

/// Entra ID is asked for `api://<app>/<name>` and puts `<name>` in the token, so the two
/// names can differ.
pub const UI_OIDC_SCOPES: Setting = s(
    "UI_OIDC_SCOPES",
    "`openid` + read + write scope",
    "what the dashboard asks the issuer for, space-separated",
    &[Api],
);

pub const UI_OIDC_TOKEN_ORIGIN: Setting = s(
    "UI_OIDC_TOKEN_ORIGIN",
    "none",
    "the issuer's token endpoint origin when not the issuer's (Cognito's domain); in the page's CSP",
    &[Api],
);

/// Issuers name scopes differently (a Cognito resource server prefixes its identifier), so
/// the template takes the three scope names as parameters.
pub const READ_SCOPE: Setting = s(
    "READ_SCOPE",
    "`tidemark/read`",
    "the read routes' scope, as named in access tokens",
    &[Api],
);

pub const WRITE_SCOPE: Setting = s(
    "WRITE_SCOPE",
    "`tidemark/write`",
    "the write routes' scope (devices, layouts, acknowledge, snooze)",
    &[Api],
);

pub const ADMIN_SCOPE: Setting = s(
    "ADMIN_SCOPE",
    "`tidemark/admin`",
    "the quarantine route's scope",
    &[Api],
);

/// Names the JWT claim that limits a caller to the devices of some sites (docs/design.md §6
/// "Scoped access"); a token without it sees the whole fleet.
pub const SCOPE_CLAIM: Setting = s(
    "SCOPE_CLAIM",
    "`tidemark:sites`",
    "the JWT claim listing the `site` tag values a caller may see (`*`: all)",
    &[Api],
);

/// Per-caller rate limits (docs/design.md §6 "Rate limits per caller"): the API counts each
/// caller's requests per minute in the table and answers 429 past the limit; at most
/// [`tidemark_schema::MAX_CALLER_RATE_LIMIT`], one partition's write rate.
pub const CALLER_RATE_LIMIT: Setting = s(
    "CALLER_RATE_LIMIT",
    "0",
    "requests per minute per caller (a token's `sub`, an IAM identity), 429 past it; at most 60000 (0: off)",
    &[Api],
);

/// Every setting, in the order of the table in `docs/operations.md`.
pub const SETTINGS: &[Setting] = &[
    TABLE_NAME,
    TIDEMARK_DYNAMODB_ENDPOINT,
    RETENTION_DAYS,
    MAX_FUTURE_SECONDS,
    LAYOUT_CACHE_SECONDS,
    UNKNOWN_DEVICES,
    DEVICE_IDENTITY,
    DEFAULT_LAYOUT,
    MAX_IN_FLIGHT,
    MAX_METRICS,
    MAX_ARRAY_LEN,
    MAX_PAYLOAD_BYTES,
    MAX_METADATA_BYTES,
    DEVICE_CACHE_SECONDS,
    DEADLINE_MARGIN_MS,
    RETRY_BASE_MS,
    RETRY_MAX_MS,
    AGGREGATOR_ROLE,
    DEFAULT_THRESHOLDS,
    DEFAULT_RULES,
    GROUP_RULES,
    WRITE_CONCURRENCY,
    DEVICE_REFRESH_SECONDS,
    OFFLINE_AFTER_SECONDS,
    STREAM_NAME,
    TIDEMARK_KINESIS_ENDPOINT,
    STATUS_PARTITIONS,
    GROUP_TAGS,
    EXPORT_BUCKET,
    EXPORT_PREFIX,
    EXPORT_GRACE_SECONDS,
    EXPORT_MAX_HOURS,
    EXPORT_QUEUE_URL,
    TIDEMARK_S3_ENDPOINT,
    EVENT_BUS_NAME,
    TIDEMARK_EVENTBRIDGE_ENDPOINT,
    AWS_ENDPOINT_URL_EVENTBRIDGE,
    CURSOR_SECRET_ARN,
    TIDEMARK_LOCAL,
    UI_AUTH,
    JWT_ISSUER,
    UI_OIDC_CLIENT_ID,
    JWT_AUDIENCE,
    UI_OIDC_SCOPES,
    UI_OIDC_TOKEN_ORIGIN,
    READ_SCOPE,
    WRITE_SCOPE,
    ADMIN_SCOPE,
    SCOPE_CLAIM,
    CALLER_RATE_LIMIT,
];

/// The setting called `name`, or once called `name` ([`Setting::old_name`]).
pub fn setting(name: &str) -> Option<&'static Setting> {
    SETTINGS
        .iter()
        .find(|s| s.name == name || s.old_name == Some(name))
}

/// A renamed variable's value (blank is unset): under its `name`, or else under its deprecated
/// `old` name, with a warning in the log naming both. When both are set, `name` wins (and the
/// warning says `old` is ignored). The one reader of renamed variables: [`Env`] reads the
/// functions' settings through it ([`Setting::old_name`]), devstack its own variables.
pub fn renamed(
    get: impl Fn(&str) -> Option<String>,
    name: &'static str,
    old: Option<&'static str>,
) -> Option<(&'static str, String)> {
    let set = |k: &str| get(k).filter(|v| !v.trim().is_empty());
    let new = set(name);
    let Some(old) = old else {
        return new.map(|v| (name, v));
    };
    match (new, set(old)) {
        (Some(v), Some(_)) => {
            tracing::warn!(
                deprecated = old,
                name,
                "{old} is deprecated and ignored: {name} is set (unset {old})"
            );
            Some((name, v))
        }
        (Some(v), None) => Some((name, v)),
        (None, Some(v)) => {
            tracing::warn!(
                deprecated = old,
                name,
                "{old} is deprecated: read as {name}; set {name} instead"
            );
            Some((old, v))
        }
        (None, None) => None,
    }
}

/// The settings `f` reads.
pub fn read_by(f: Function) -> impl Iterator<Item = &'static Setting> {
    SETTINGS.iter().filter(move |s| s.read_by.contains(&f))
}

// Defaults another crate owns (the layout lead time is the schema's): held to the table's
// when this crate builds.
const _: () = {
    assert!(
        MAX_FUTURE_SECONDS.default_u64() == tidemark_schema::history::DEFAULT_MAX_FUTURE_SECONDS
    );
    assert!(
        LAYOUT_CACHE_SECONDS.default_u64()
            == tidemark_schema::history::DEFAULT_LAYOUT_CACHE_SECONDS
    );
};

/// A setting that cannot be used: set to something malformed, or required and not set.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error("environment variable {name}{}: {expected}", found(.value))]
pub struct ConfigError {
    pub name: &'static str,
    /// What it is set to; `None`: not set (or blank).
    pub value: Option<String>,
    /// What it should be.
    pub expected: Cow<'static, str>,
}

fn found(value: &Option<String>) -> String {
    match value {
        Some(v) => format!("={v:?} is invalid"),
        None => " is not set".to_owned(),
    }
}

/// Settings read through a lookup: the process environment, or a map in tests (which can
/// also record what is read). Unset and blank are the same, the default: the template
/// declares some variables empty.
pub struct Env<F> {
    get: F,
}

impl<F: Fn(&str) -> Option<String>> Env<F> {
    pub fn new(get: F) -> Self {
        Env { get }
    }

    /// The value as set; `None` when unset or blank.
    pub fn text(&self, s: &Setting) -> Option<String> {
        self.named(s).map(|(_, v)| v)
    }

    /// The value as set, and the name it is set under: the setting's, or its deprecated
    /// old name ([`renamed`]).
    fn named(&self, s: &Setting) -> Option<(&'static str, String)> {
        renamed(&self.get, s.name, s.old_name)
    }

    /// The value, which must be set; `why` says when and why it is needed.
    pub fn required(
        &self,
        s: &Setting,
        why: impl Into<Cow<'static, str>>,
    ) -> Result<String, ConfigError> {
        self.text(s).ok_or_else(|| ConfigError {
            name: s.name,
            value: None,
            expected: why.into(),
        })
    }

    /// The value through `parse`, which answers `None` for one that is not `expected`.
    pub fn parse_with<T>(
        &self,
        s: &Setting,
        expected: impl Into<Cow<'static, str>>,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<Option<T>, ConfigError> {
        let Some((name, v)) = self.named(s) else {
            return Ok(None);
        };
        match parse(&v) {
            Some(t) => Ok(Some(t)),
            None => Err(ConfigError {
                name,
                value: Some(v),
                expected: expected.into(),
            }),
        }
    }

    /// The value through `parse`, whose error says what is wrong with it (where a JSON value
    /// breaks, say).
    pub fn try_parse<T, E: Display>(
        &self,
        s: &Setting,
        parse: impl FnOnce(&str) -> Result<T, E>,
    ) -> Result<Option<T>, ConfigError> {
        let Some((name, v)) = self.named(s) else {
            return Ok(None);
        };
        match parse(&v) {
            Ok(t) => Ok(Some(t)),
            Err(e) => Err(ConfigError {
                name,
                value: Some(v),
                expected: e.to_string().into(),
            }),
        }
    }

    /// A number (blanks around it allowed) that `ok` accepts.
    pub fn num<T: FromStr>(
        &self,
        s: &Setting,
        expected: impl Into<Cow<'static, str>>,
        ok: impl FnOnce(&T) -> bool,
    ) -> Result<Option<T>, ConfigError> {
        self.parse_with(s, expected, |v| v.trim().parse().ok().filter(ok))
    }

    /// Whole seconds that `ok` accepts.
    pub fn seconds(
        &self,
        s: &Setting,
        expected: impl Into<Cow<'static, str>>,
        ok: impl FnOnce(&u64) -> bool,
    ) -> Result<Option<Duration>, ConfigError> {
        Ok(self.num(s, expected, ok)?.map(Duration::from_secs))
    }

    /// Whole milliseconds that `ok` accepts.
    pub fn millis(
        &self,
        s: &Setting,
        expected: impl Into<Cow<'static, str>>,
        ok: impl FnOnce(&u64) -> bool,
    ) -> Result<Option<Duration>, ConfigError> {
        Ok(self.num(s, expected, ok)?.map(Duration::from_millis))
    }

    /// [`TABLE_NAME`], or the schema's default table.
    pub fn table_name(&self) -> String {
        self.text(&TABLE_NAME)
            .unwrap_or_else(|| tidemark_schema::TABLE.default_name.to_owned())
    }

    /// [`OFFLINE_AFTER_SECONDS`], read alike by each function that watches for silence
    /// ([`tidemark_schema::fleet_offline_window`]).
    pub fn offline_after(&self) -> Result<Option<u32>, ConfigError> {
        use tidemark_schema::{MAX_OFFLINE_WINDOW, MIN_OFFLINE_WINDOW};
        self.parse_with(
            &OFFLINE_AFTER_SECONDS,
            format!(
                "whole seconds from 0 to {MAX_OFFLINE_WINDOW} (0: off; under \
                 {MIN_OFFLINE_WINDOW} counts as {MIN_OFFLINE_WINDOW})"
            ),
            |v| {
                v.trim()
                    .parse()
                    .ok()
                    .and_then(tidemark_schema::fleet_offline_window)
            },
        )
    }

    /// [`LAYOUT_CACHE_SECONDS`] and [`MAX_FUTURE_SECONDS`], the lead layout and tag changes are
    /// announced by, read alike by every function that must agree on it (ingest, the API, the
    /// rollups role): each whole seconds up to a day, `default`'s where unset.
    pub fn layout_lead(
        &self,
        default: tidemark_schema::LayoutLead,
    ) -> Result<tidemark_schema::LayoutLead, ConfigError> {
        let what = "whole seconds, 0..=86400 (the same value in every function)";
        let in_a_day = |n: &u64| *n <= 86_400;
        Ok(tidemark_schema::LayoutLead {
            layout_cache: self
                .seconds(&LAYOUT_CACHE_SECONDS, what, in_a_day)?
                .unwrap_or(default.layout_cache),
            max_future: self
                .seconds(&MAX_FUTURE_SECONDS, what, in_a_day)?
                .unwrap_or(default.max_future),
        })
    }

    /// [`GROUP_TAGS`], read alike by the aggregator's rollups role, the exporter and the API:
    /// the default (`site`) when unset; each key must be a tag key, none twice.
    pub fn group_tags(&self) -> Result<Vec<tidemark_schema::TagKey>, ConfigError> {
        Ok(self
            .try_parse(&GROUP_TAGS, parse_group_tags)?
            .unwrap_or_else(default_group_tags))
    }

    /// [`STATUS_PARTITIONS`], read alike by the aggregator and the API.
    pub fn status_partitions(&self) -> Result<Option<u16>, ConfigError> {
        let max = tidemark_schema::keys::MAX_STATUS_PARTITIONS;
        self.num(
            &STATUS_PARTITIONS,
            format!("a whole number from 1 to {max} (MAX_STATUS_PARTITIONS)"),
            |n| (1..=max).contains(n),
        )
    }
}

/// [`GROUP_TAGS`]' default: `site`.
pub fn default_group_tags() -> Vec<tidemark_schema::TagKey> {
    parse_group_tags(GROUP_TAGS.default.trim_matches('`')).unwrap_or_default()
}

/// A comma list of tag keys (blanks around each allowed, at least one, none twice).
fn parse_group_tags(v: &str) -> Result<Vec<tidemark_schema::TagKey>, String> {
    let mut keys = Vec::new();
    for part in v.split(',').map(str::trim) {
        let key = tidemark_schema::TagKey::new(part).map_err(|e| {
            format!("a comma-separated list of tag keys ([a-z][a-z0-9_.-]{{0,31}}): {e}")
        })?;
        if keys.contains(&key) {
            return Err(format!("tag key {key} is listed twice"));
        }
        keys.push(key);
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_setting_is_listed_once_and_read_by_someone() {
        let mut names: Vec<_> = SETTINGS.iter().map(|s| s.name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "a setting is listed twice");
        assert!(SETTINGS.iter().all(|s| !s.read_by.is_empty()));
        assert_eq!(setting("TABLE_NAME").map(|s| s.default), Some("`tidemark`"));
        assert_eq!(read_by(Function::Alerts).count(), 12);
    }

    #[test]
    fn defaults_owned_elsewhere_are_the_tables() {
        assert_eq!(
            TABLE_NAME.default,
            format!("`{}`", tidemark_schema::TABLE.default_name)
        );
        let retry = crate::retry::RetryPolicy::default();
        assert_eq!(
            u128::from(RETRY_BASE_MS.default_u64()),
            retry.base_delay.as_millis()
        );
        assert_eq!(
            u128::from(RETRY_MAX_MS.default_u64()),
            retry.max_delay.as_millis()
        );
        assert_eq!(MAX_PAYLOAD_BYTES.default_usize(), 1024 * 1024);
    }

    fn env(pairs: &'static [(&'static str, &'static str)]) -> Env<impl Fn(&str) -> Option<String>> {
        Env::new(|k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn the_reader_keeps_defaults_for_unset_and_blank_and_names_what_is_wrong() {
        let at_least_1 = |n: &u32| *n >= 1;
        let e = env(&[("MAX_METRICS", ""), ("MAX_ARRAY_LEN", "  ")]);
        assert_eq!(e.num(&RETENTION_DAYS, "", at_least_1), Ok(None), "unset");
        assert_eq!(e.num(&MAX_METRICS, "", at_least_1), Ok(None), "empty");
        assert_eq!(e.num(&MAX_ARRAY_LEN, "", at_least_1), Ok(None), "blank");
        assert_eq!(e.text(&MAX_ARRAY_LEN), None);

        let e = env(&[
            ("RETENTION_DAYS", " 7 "),
            ("MAX_METRICS", "thirty"),
            ("MAX_IN_FLIGHT", "0"),
        ]);
        assert_eq!(e.num(&RETENTION_DAYS, "", at_least_1), Ok(Some(7)));
        let malformed = e.num(&MAX_METRICS, "a whole number of at least 1", at_least_1);
        assert_eq!(
            malformed,
            Err(ConfigError {
                name: "MAX_METRICS",
                value: Some("thirty".into()),
                expected: "a whole number of at least 1".into(),
            })
        );
        assert_eq!(
            malformed.unwrap_err().to_string(),
            "environment variable MAX_METRICS=\"thirty\" is invalid: a whole number of at least 1"
        );
        let out_of_bounds = e.num(&MAX_IN_FLIGHT, "at least 1", at_least_1).unwrap_err();
        assert_eq!(
            (out_of_bounds.name, out_of_bounds.value.as_deref()),
            ("MAX_IN_FLIGHT", Some("0"))
        );
        assert_eq!(
            e.seconds(&RETENTION_DAYS, "", |_| true),
            Ok(Some(Duration::from_secs(7)))
        );
        assert_eq!(
            e.millis(&RETENTION_DAYS, "", |_| true),
            Ok(Some(Duration::from_millis(7)))
        );
    }

    #[test]
    fn required_and_parsed_settings_say_what_they_need() {
        let e = env(&[("DEFAULT_THRESHOLDS", "{"), ("UI_AUTH", "open")]);
        let missing = e.required(&STREAM_NAME, "required").unwrap_err();
        assert_eq!(missing.value, None);
        assert_eq!(
            missing.to_string(),
            "environment variable STREAM_NAME is not set: required"
        );
        let auth = e.parse_with(&UI_AUTH, "one of jwt, iam, none", |v| {
            (v == "iam").then_some(())
        });
        assert_eq!(auth.unwrap_err().expected, "one of jwt, iam, none");
        let json = e
            .try_parse(&DEFAULT_THRESHOLDS, |v| {
                serde_json::from_str::<serde_json::Value>(v)
            })
            .unwrap_err();
        assert_eq!(json.value.as_deref(), Some("{"));
        assert!(json.expected.contains("EOF"), "{json}");
        assert_eq!(e.table_name(), "tidemark");
    }

    #[test]
    fn shared_settings_are_bounded() {
        let e = env(&[("STATUS_PARTITIONS", "65"), ("OFFLINE_AFTER_SECONDS", "30")]);
        assert_eq!(e.status_partitions().unwrap_err().name, "STATUS_PARTITIONS");
        assert_eq!(
            e.offline_after(),
            Ok(Some(60)),
            "under a minute counts as one"
        );
        let e = env(&[
            ("STATUS_PARTITIONS", "64"),
            ("OFFLINE_AFTER_SECONDS", "2592001"),
        ]);
        assert_eq!(e.status_partitions(), Ok(Some(64)));
        let e = e.offline_after().unwrap_err();
        assert!(e.to_string().contains("2592000"), "{e}");
    }

    #[test]
    fn group_tags_are_a_comma_list_of_tag_keys_site_by_default() {
        let keys = |r: Result<Vec<tidemark_schema::TagKey>, ConfigError>| -> Vec<String> {
            r.unwrap().iter().map(|k| k.as_str().to_owned()).collect()
        };
        assert_eq!(keys(env(&[]).group_tags()), ["site"]);
        assert_eq!(keys(env(&[("GROUP_TAGS", " ")]).group_tags()), ["site"]);
        assert_eq!(
            keys(env(&[("GROUP_TAGS", "site, line,zone")]).group_tags()),
            ["site", "line", "zone"]
        );
        let bad: [&'static [(&str, &str)]; 4] = [
            &[("GROUP_TAGS", "Site")],
            &[("GROUP_TAGS", "site,,line")],
            &[("GROUP_TAGS", "site,site")],
            &[("GROUP_TAGS", "serial#")],
        ];
        for pairs in bad {
            let err = env(pairs).group_tags().unwrap_err();
            assert_eq!(
                (err.name, err.value.as_deref()),
                ("GROUP_TAGS", Some(pairs[0].1))
            );
        }
    }

    // The names the two settings had before they were renamed
    // (docs/decisions/0011-one-word-one-meaning.md).
    const OLD_CACHE: &str = "SHARD_CACHE_SECONDS";
    const OLD_STATUS: &str = "STATUS_SHARDS";

    /// Runs `f` with a subscriber that keeps what is logged, and returns that text.
    fn logged(f: impl FnOnce()) -> String {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let out = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || out.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        String::from_utf8(buf.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn renamed_settings_know_their_old_names() {
        assert_eq!(LAYOUT_CACHE_SECONDS.old_name, Some(OLD_CACHE));
        assert_eq!(STATUS_PARTITIONS.old_name, Some(OLD_STATUS));
        assert_eq!(setting(OLD_CACHE), Some(&LAYOUT_CACHE_SECONDS));
        assert_eq!(setting(OLD_STATUS), Some(&STATUS_PARTITIONS));
        // An old name is never a current one.
        for s in SETTINGS {
            if let Some(old) = s.old_name {
                assert!(SETTINGS.iter().all(|t| t.name != old), "{old}");
            }
        }
    }

    #[test]
    fn a_setting_set_under_its_old_name_is_read_with_a_deprecation_warning() {
        let e = env(&[(OLD_CACHE, "45"), (OLD_STATUS, "8")]);
        let mut read = (None, None);
        let log = logged(|| {
            read = (
                e.seconds(&LAYOUT_CACHE_SECONDS, "seconds", |_| true)
                    .unwrap(),
                e.status_partitions().unwrap(),
            );
        });
        assert_eq!(read, (Some(Duration::from_secs(45)), Some(8)));
        assert!(log.contains("WARN"), "{log}");
        for (old, new) in [
            (OLD_CACHE, "LAYOUT_CACHE_SECONDS"),
            (OLD_STATUS, "STATUS_PARTITIONS"),
        ] {
            assert!(
                log.lines()
                    .any(|l| l.contains(&format!("{old} is deprecated")) && l.contains(new)),
                "no warning naming {old} and {new}: {log}"
            );
        }
    }

    #[test]
    fn the_new_name_wins_when_both_names_are_set_and_the_old_one_is_said_to_be_ignored() {
        let e = env(&[(OLD_STATUS, "8"), ("STATUS_PARTITIONS", "4")]);
        let mut read = None;
        let log = logged(|| read = Some(e.status_partitions()));
        assert_eq!(read, Some(Ok(Some(4))));
        assert!(
            log.contains(&format!("{OLD_STATUS} is deprecated and ignored"))
                && log.contains("STATUS_PARTITIONS"),
            "{log}"
        );
    }

    #[test]
    fn a_setting_set_under_its_new_name_alone_warns_nothing() {
        let e = env(&[("STATUS_PARTITIONS", "4")]);
        let mut read = None;
        let log = logged(|| read = Some(e.status_partitions()));
        assert_eq!(read, Some(Ok(Some(4))));
        assert_eq!(log, "");
    }

    #[test]
    fn a_malformed_value_under_the_old_name_is_reported_under_the_old_name() {
        let e = env(&[(OLD_STATUS, "65")]);
        let err = e.status_partitions().unwrap_err();
        assert_eq!((err.name, err.value.as_deref()), (OLD_STATUS, Some("65")));
    }

    #[test]
    fn a_variable_without_an_old_name_is_read_under_its_name_alone() {
        let get = |k: &str| (k == "X").then(|| "1".to_owned());
        assert_eq!(renamed(get, "X", None), Some(("X", "1".to_owned())));
        assert_eq!(renamed(get, "Y", None), None);
        let blank = |_: &str| Some("  ".to_owned());
        assert_eq!(renamed(blank, "X", Some("OLD_X")), None);
    }
}
