//! Every environment variable a deployed function reads, in one table: its name, default,
//! meaning and which functions read it. Each function's `from_lookup` reads its settings, and
//! a workspace test holds the table against what each one reads, what `template.yaml`
//! declares for it, and the README's settings table, so the four cannot drift apart.

/// A deployed function (the alerts function is the aggregator binary in its alerts role).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Function {
    Ingest,
    Aggregator,
    Alerts,
    Api,
    Watchdog,
}

impl Function {
    pub const ALL: [Function; 5] = [
        Function::Ingest,
        Function::Aggregator,
        Function::Alerts,
        Function::Api,
        Function::Watchdog,
    ];

    /// Its logical ID in `template.yaml`.
    pub fn resource(self) -> &'static str {
        match self {
            Function::Ingest => "IngestFunction",
            Function::Aggregator => "AggregatorFunction",
            Function::Alerts => "AlertFunction",
            Function::Api => "ApiFunction",
            Function::Watchdog => "WatchdogFunction",
        }
    }

    /// Its name in the README's settings table.
    pub fn label(self) -> &'static str {
        match self {
            Function::Ingest => "ingest",
            Function::Aggregator => "aggregator",
            Function::Alerts => "alerts",
            Function::Api => "api",
            Function::Watchdog => "watchdog",
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
    pub source: Source,
}

/// Who reads a setting, and so who must declare it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The function's `from_lookup`; `template.yaml` declares it.
    Config,
    /// The SDK client set-up ([`crate::client`]), for local runs; the template declares it
    /// empty.
    Client,
    /// An AWS SDK variable `from_lookup` honours too; Lambda's environment is the user's
    /// to set, so the template does not declare it.
    Sdk,
}

use Function::{Aggregator, Alerts, Api, Ingest, Watchdog};

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
        source: Source::Config,
    }
}

/// Every setting, in the order of the README's table.
pub const SETTINGS: &[Setting] = &[
    s(
        "TABLE_NAME",
        "`tidemark`",
        "the table",
        &[Ingest, Aggregator, Alerts, Api, Watchdog],
    ),
    Setting {
        source: Source::Client,
        ..s(
            "TIDEMARK_DYNAMODB_ENDPOINT",
            "AWS",
            "a local DynamoDB endpoint (empty when deployed)",
            &[Ingest, Aggregator, Alerts, Api, Watchdog],
        )
    },
    s(
        "RETENTION_DAYS",
        "30",
        "reading TTL, the oldest reading accepted and served",
        &[Ingest, Api],
    ),
    s(
        "MAX_FUTURE_SECONDS",
        "300",
        "how far ahead of the clock a reading may be; part of the layout lead time",
        &[Ingest, Api],
    ),
    s(
        "SHARD_CACHE_SECONDS",
        "30",
        "the oldest layout histories an ingest container writes with; part of the layout lead time",
        &[Ingest, Api],
    ),
    s(
        "UNKNOWN_DEVICES",
        "`register`",
        "`register` or `quarantine` readings of devices without a device item",
        &[Ingest],
    ),
    s(
        "DEFAULT_LAYOUT",
        "the stored one",
        "`single` or `packed:<slot seconds>`: the fleet's default layout, recorded for the future",
        &[Ingest],
    ),
    s("MAX_IN_FLIGHT", "4", "concurrent batch writes", &[Ingest]),
    s("MAX_METRICS", "32", "metrics in one record", &[Ingest]),
    s("MAX_ARRAY_LEN", "1000", "readings in one record", &[Ingest]),
    s(
        "MAX_PAYLOAD_BYTES",
        "1048576",
        "bytes in one record (Kinesis' own limit)",
        &[Ingest],
    ),
    s(
        "MAX_METADATA_BYTES",
        "1024",
        "bytes of one reading's `metadata`",
        &[Ingest],
    ),
    s(
        "DEVICE_CACHE_SECONDS",
        "60",
        "how long a device's existence is trusted with `UNKNOWN_DEVICES=quarantine`",
        &[Ingest],
    ),
    s(
        "DEADLINE_MARGIN_MS",
        "500",
        "time kept back before the invocation's deadline to report what is unwritten",
        &[Ingest],
    ),
    s(
        "RETRY_BASE_MS",
        "25",
        "first backoff of a re-sent write",
        &[Ingest],
    ),
    s(
        "RETRY_MAX_MS",
        "2000",
        "longest backoff of a re-sent write",
        &[Ingest],
    ),
    s(
        "AGGREGATOR_ROLE",
        "`rollups`",
        "`rollups` or `alerts`: what the aggregator binary does",
        &[Aggregator, Alerts],
    ),
    s(
        "DEFAULT_THRESHOLDS",
        "none",
        "JSON thresholds per metric for devices without their own",
        &[Aggregator, Alerts],
    ),
    s(
        "WRITE_CONCURRENCY",
        "16",
        "concurrent aggregate and device writes",
        &[Aggregator, Alerts],
    ),
    s(
        "DEVICE_REFRESH_SECONDS",
        "900",
        "how far `lastSeenAt` may lag before the device item is rewritten for it alone",
        &[Aggregator, Alerts],
    ),
    s(
        "OFFLINE_AFTER_SECONDS",
        "0",
        "the fleet's offline window for devices without `offlineAfterSeconds` (0: off)",
        &[Alerts, Api, Watchdog],
    ),
    s(
        "STREAM_NAME",
        "required",
        "the Kinesis stream the watchdog sends its heartbeats into",
        &[Watchdog],
    ),
    s(
        "TIDEMARK_KINESIS_ENDPOINT",
        "AWS",
        "a local Kinesis endpoint (empty when deployed)",
        &[Watchdog],
    ),
    s(
        "STATUS_SHARDS",
        "1",
        "GSI1 partitions of the fleet-wide status listings",
        &[Aggregator, Alerts, Api],
    ),
    s(
        "EVENT_BUS_NAME",
        "required",
        "the EventBridge bus alert state changes are published to",
        &[Alerts],
    ),
    s(
        "TIDEMARK_EVENTBRIDGE_ENDPOINT",
        "AWS",
        "a local EventBridge endpoint (empty when deployed)",
        &[Alerts],
    ),
    Setting {
        source: Source::Sdk,
        ..s(
            "AWS_ENDPOINT_URL_EVENTBRIDGE",
            "AWS",
            "the SDK's own EventBridge endpoint override, used when the one above is unset",
            &[Alerts],
        )
    },
    s(
        "CURSOR_SECRET_ARN",
        "required (not with `TIDEMARK_LOCAL=1`)",
        "the Secrets Manager secret holding the cursor signing key",
        &[Api],
    ),
    s(
        "TIDEMARK_LOCAL",
        "off",
        "`1`: a local run (the development cursor key, no secret read)",
        &[Api],
    ),
    s(
        "UI_AUTH",
        "`iam` (`none` with `TIDEMARK_LOCAL=1`)",
        "`jwt`, `iam` or `none`: what the dashboard tells its user about auth",
        &[Api],
    ),
    s(
        "JWT_ISSUER",
        "none",
        "the issuer the dashboard signs in with (`UI_AUTH=jwt`)",
        &[Api],
    ),
    s(
        "UI_OIDC_CLIENT_ID",
        "none",
        "the dashboard's public OAuth client at the issuer",
        &[Api],
    ),
    s(
        "JWT_AUDIENCE",
        "none",
        "the authorizer's audiences, comma-separated; the page asks for the first (Auth0's `audience`)",
        &[Api],
    ),
    s(
        "UI_OIDC_SCOPES",
        "`openid` + read + write scope",
        "what the dashboard asks the issuer for, space-separated",
        &[Api],
    ),
    s(
        "UI_OIDC_TOKEN_ORIGIN",
        "none",
        "the issuer's token endpoint origin when not the issuer's (Cognito's domain); in the page's CSP",
        &[Api],
    ),
    s(
        "READ_SCOPE",
        "`tidemark/read`",
        "the read routes' scope, as named in access tokens",
        &[Api],
    ),
    s(
        "WRITE_SCOPE",
        "`tidemark/write`",
        "the write routes' scope (devices, layouts, acknowledge, snooze)",
        &[Api],
    ),
    s(
        "ADMIN_SCOPE",
        "`tidemark/admin`",
        "the quarantine route's scope",
        &[Api],
    ),
];

/// The setting called `name`.
pub fn setting(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == name)
}

/// The settings `f` reads.
pub fn read_by(f: Function) -> impl Iterator<Item = &'static Setting> {
    SETTINGS.iter().filter(move |s| s.read_by.contains(&f))
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
        assert_eq!(read_by(Function::Alerts).count(), 11);
    }
}
