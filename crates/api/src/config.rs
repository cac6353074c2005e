//! What the API needs to know besides the request: table, cursor key, retention, clock.

use std::fmt;

use std::time::Duration;

use thiserror::Error;
use tidemark_schema::history::{MAX_FUTURE_SECONDS_ENV, SHARD_CACHE_SECONDS_ENV};
use tidemark_schema::{Clock, LayoutLead, Timestamp};

pub use crate::routes::ScopeNames;
use tidemark_store::client::TABLE_NAME_ENV;

/// The Secrets Manager secret holding the cursor key (deployed; see [`crate::secret`]).
pub const CURSOR_SECRET_ARN_ENV: &str = "CURSOR_SECRET_ARN";
/// `1` says explicitly that this is a local stack (`make run`, `sam local`, tests): cursors
/// are signed with a fixed development key. Never inferred from anything else.
pub const LOCAL_ENV: &str = "TIDEMARK_LOCAL";
/// Days a reading is kept (must match ingest's `ttl`), default 30.
pub const RETENTION_DAYS_ENV: &str = "RETENTION_DAYS";
/// How many GSI1 status keys a status is spread over (`DEVICE_STATUS#<status>#<n>`), default 1.
/// The fleet's offline window (seconds; 0 or unset: off).
pub const OFFLINE_AFTER_SECONDS_ENV: &str = "OFFLINE_AFTER_SECONDS";
pub const STATUS_SHARDS_ENV: &str = "STATUS_SHARDS";
/// How the dashboard's data calls authenticate: `jwt`, `iam` or `none` (the template sets it
/// from its authorizer). It only tells the page what to ask the user for; API Gateway
/// enforces the auth whatever it says. Default: `none` on a local stack, `iam` otherwise.
pub const UI_AUTH_ENV: &str = "UI_AUTH";
/// The JWT authorizer's issuer, shown on the dashboard's sign-in form.
pub const JWT_ISSUER_ENV: &str = "JWT_ISSUER";
/// The JWT authorizer's audience: the page asks the issuer for a token for it (Auth0 needs
/// the `audience` parameter to issue a JWT access token; other issuers ignore it).
pub const JWT_AUDIENCE_ENV: &str = "JWT_AUDIENCE";
/// An OAuth client ID registered at the issuer for the dashboard (redirect URI
/// `<ApiUrl>/ui/`, authorization code with PKCE, no secret): enables "Sign in" by redirect.
pub const UI_OIDC_CLIENT_ID_ENV: &str = "UI_OIDC_CLIENT_ID";
/// The scopes the page asks the issuer for, space-separated. Default: `openid` and the read
/// and write scopes' names (Entra ID asks for `api://<app>/<name>` and puts `<name>` in the
/// token, so there the two differ).
pub const UI_OIDC_SCOPES_ENV: &str = "UI_OIDC_SCOPES";
/// The origin of the issuer's token endpoint when it is not the issuer's own (Cognito's is
/// the user pool domain): the page's `connect-src` names it.
pub const UI_OIDC_TOKEN_ORIGIN_ENV: &str = "UI_OIDC_TOKEN_ORIGIN";
/// What the read, write and admin scopes are called in the deployment's tokens.
pub const READ_SCOPE_ENV: &str = "READ_SCOPE";
pub const WRITE_SCOPE_ENV: &str = "WRITE_SCOPE";
pub const ADMIN_SCOPE_ENV: &str = "ADMIN_SCOPE";

pub const MIN_SECRET_LEN: usize = 32;

/// Used only when the process says it is local ([`LOCAL_ENV`]), where cursors protect
/// nothing worth a secret. Never used on Lambda: there a missing secret stops the function
/// from starting (see [`ApiConfig::from_env`]), because a known key would let anyone forge
/// cursors.
const DEV_CURSOR_SECRET: &[u8] = b"tidemark-local-development-cursor-key-not-a-secret";

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error(
        "{CURSOR_SECRET_ARN_ENV} is not set; it is required unless {LOCAL_ENV}=1 says this is \
         a local stack"
    )]
    MissingCursorSecret,
    #[error("{var}={value:?} is not valid: {rule}")]
    Invalid {
        var: &'static str,
        value: String,
        rule: &'static str,
    },
}

#[derive(Clone)]
pub struct ApiConfig {
    pub table_name: String,
    cursor_secret: Vec<u8>,
    /// Deployed: where the real cursor key is; the Lambda reads it before serving.
    pub cursor_secret_arn: Option<String>,
    pub retention_days: u32,
    pub status_shards: u16,
    /// The fleet's offline window for devices without `offlineAfterSeconds` (0: off): what
    /// `connectivity` is judged with (the alerts role and the watchdog read the same
    /// variable).
    pub offline_after_default: u32,
    /// Largest accepted request body; device items stay small because the aggregator
    /// rewrites them every batch (an item over 1 KB costs two write units).
    pub max_body_bytes: usize,
    /// Ingest's shard-count cache and future-reading allowance (the same variables as
    /// ingest's): how far ahead a shard change must be scheduled.
    pub shard_lead: LayoutLead,
    /// Where "now" comes from: fixed in tests and fixtures (the docs/design.md §9 sample data
    /// is from April 2026 and would otherwise be expired).
    pub clock: Clock,
    /// What the dashboard tells its user about auth (served as `/ui/config.json`).
    pub ui_auth: UiAuth,
    /// What the JWT scopes are called; the function holds each route to its scope, as API
    /// Gateway does.
    pub scopes: ScopeNames,
}

/// The auth the dashboard's data calls need, as the deployment configured it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UiAuth {
    /// Local stack: loopback, no auth.
    None,
    /// A JWT authorizer: the page sends the user's access token, pasted or, with a client
    /// ID, obtained by an OpenID Connect redirect to the issuer.
    Jwt(JwtSignIn),
    /// IAM (SigV4) auth, which a browser page cannot sign: the page says how to reach it.
    Iam,
}

/// How the page signs in against a JWT authorizer's issuer. Nothing here is a secret.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JwtSignIn {
    pub issuer: Option<String>,
    /// The authorizer's audience, asked for by name ([`JWT_AUDIENCE_ENV`]).
    pub audience: Option<String>,
    /// The dashboard's public client; without it the page can only take a pasted token.
    pub client_id: Option<String>,
    /// What to ask the issuer for; `None`: `openid` and the read and write scopes.
    pub request_scopes: Option<String>,
    /// The token endpoint's origin when it is not the issuer's ([`UI_OIDC_TOKEN_ORIGIN_ENV`]).
    pub token_origin: Option<String>,
}

impl fmt::Debug for ApiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiConfig")
            .field("table_name", &self.table_name)
            .field("cursor_secret", &"<redacted>")
            .field("retention_days", &self.retention_days)
            .field("status_shards", &self.status_shards)
            .field("offline_after_default", &self.offline_after_default)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("shard_lead", &self.shard_lead)
            .field("clock", &self.clock)
            .field("ui_auth", &self.ui_auth)
            .field("scopes", &self.scopes)
            .finish()
    }
}

impl ApiConfig {
    pub const DEFAULT_RETENTION_DAYS: u32 = 30;
    pub const DEFAULT_MAX_BODY: usize = 16 * 1024;

    /// A configuration for `table` with the local development key and system clock (tests,
    /// benchmarks, the local server).
    pub fn new(table_name: impl Into<String>) -> Self {
        ApiConfig {
            table_name: table_name.into(),
            cursor_secret: DEV_CURSOR_SECRET.to_vec(),
            cursor_secret_arn: None,
            retention_days: Self::DEFAULT_RETENTION_DAYS,
            status_shards: 1,
            offline_after_default: 0,
            max_body_bytes: Self::DEFAULT_MAX_BODY,
            shard_lead: LayoutLead::default(),
            clock: Clock::system(),
            ui_auth: UiAuth::None,
            scopes: ScopeNames::default(),
        }
    }

    pub fn with_now(mut self, now: Timestamp) -> Self {
        self.clock = Clock::fixed(now);
        self
    }

    pub fn with_cursor_secret(mut self, secret: impl Into<Vec<u8>>) -> Self {
        self.cursor_secret = secret.into();
        self
    }

    pub fn cursor_secret(&self) -> &[u8] {
        &self.cursor_secret
    }

    /// From the environment. Without `CURSOR_SECRET_ARN` it refuses (a Lambda then fails its
    /// init and never serves a forgeable cursor) unless `TIDEMARK_LOCAL=1` says this is a
    /// local stack, where a fixed development key is used.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
    }

    /// [`ApiConfig::from_env`] over any variable source (testable without touching the
    /// process environment).
    pub fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut c = ApiConfig::new(
            var(TABLE_NAME_ENV).unwrap_or_else(|| tidemark_schema::TABLE.default_name.into()),
        );
        let local = var(LOCAL_ENV).as_deref() == Some("1");
        c.ui_auth = match var(UI_AUTH_ENV).as_deref() {
            Some("jwt") => UiAuth::Jwt(JwtSignIn {
                issuer: var(JWT_ISSUER_ENV),
                // The template passes the audience list joined by commas; one is enough to ask for.
                audience: var(JWT_AUDIENCE_ENV).and_then(|a| {
                    a.split(',')
                        .map(str::trim)
                        .find(|s| !s.is_empty())
                        .map(str::to_owned)
                }),
                client_id: var(UI_OIDC_CLIENT_ID_ENV),
                request_scopes: var(UI_OIDC_SCOPES_ENV),
                token_origin: match var(UI_OIDC_TOKEN_ORIGIN_ENV) {
                    None => None,
                    Some(v) => Some(crate::ui::origin(&v).filter(|o| *o == v).ok_or(
                        ConfigError::Invalid {
                            var: UI_OIDC_TOKEN_ORIGIN_ENV,
                            value: v,
                            rule: "an origin: https://host[:port], no path",
                        },
                    )?),
                },
            }),
            Some("iam") => UiAuth::Iam,
            Some("none") => UiAuth::None,
            None if local => UiAuth::None,
            None => UiAuth::Iam,
            Some(other) => {
                return Err(ConfigError::Invalid {
                    var: UI_AUTH_ENV,
                    value: other.to_owned(),
                    rule: "one of jwt, iam, none",
                });
            }
        };
        for (name, slot) in [
            (READ_SCOPE_ENV, &mut c.scopes.read),
            (WRITE_SCOPE_ENV, &mut c.scopes.write),
            (ADMIN_SCOPE_ENV, &mut c.scopes.admin),
        ] {
            if let Some(v) = var(name) {
                if v.is_empty() || v.chars().any(|ch| ch.is_whitespace() || ch == '"') {
                    return Err(ConfigError::Invalid {
                        var: name,
                        value: v,
                        rule: "one scope name, no spaces",
                    });
                }
                *slot = v;
            }
        }
        // The explicit local flag wins: `sam local` resolves the template's secret reference
        // to a name no local process can read.
        match (local, var(CURSOR_SECRET_ARN_ENV)) {
            (true, _) => {}
            (false, Some(arn)) => c.cursor_secret_arn = Some(arn),
            (false, None) => return Err(ConfigError::MissingCursorSecret),
        }
        if let Some(v) = var(RETENTION_DAYS_ENV) {
            c.retention_days = v.parse().ok().filter(|d| (1..=36_500).contains(d)).ok_or(
                ConfigError::Invalid {
                    var: RETENTION_DAYS_ENV,
                    value: v,
                    rule: "whole days, 1..=36500",
                },
            )?;
        }
        if let Some(v) = var(STATUS_SHARDS_ENV) {
            c.status_shards = v
                .parse()
                .ok()
                .filter(|n| (1..=tidemark_schema::keys::MAX_STATUS_SHARDS).contains(n))
                .ok_or(ConfigError::Invalid {
                    var: STATUS_SHARDS_ENV,
                    value: v,
                    rule: "1..=64 (MAX_STATUS_SHARDS)",
                })?;
        }
        if let Some(v) = var(OFFLINE_AFTER_SECONDS_ENV) {
            c.offline_after_default = v
                .trim()
                .parse()
                .ok()
                .and_then(tidemark_schema::fleet_offline_window)
                .ok_or(ConfigError::Invalid {
                    var: OFFLINE_AFTER_SECONDS_ENV,
                    value: v,
                    rule: "whole seconds, 0..=2592000 (0: off; under 60 counts as 60)",
                })?;
        }
        for (name, slot) in [
            (SHARD_CACHE_SECONDS_ENV, &mut c.shard_lead.shard_cache),
            (MAX_FUTURE_SECONDS_ENV, &mut c.shard_lead.max_future),
        ] {
            if let Some(v) = var(name) {
                *slot = v
                    .trim()
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n <= 86_400)
                    .map(Duration::from_secs)
                    .ok_or(ConfigError::Invalid {
                        var: name,
                        value: v,
                        rule: "whole seconds, 0..=86400 (the same value as ingest's)",
                    })?;
            }
        }
        Ok(c)
    }

    /// The oldest reading time that is not expired at `now`.
    pub fn retention_start(&self, now: Timestamp) -> Timestamp {
        now.minus_millis(i64::from(self.retention_days) * 86_400_000)
            .unwrap_or(Timestamp::MIN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn lambda_without_a_cursor_secret_refuses_to_start() {
        assert_eq!(
            ApiConfig::from_lookup(lookup(&[("TABLE_NAME", "t")])).unwrap_err(),
            ConfigError::MissingCursorSecret
        );
    }

    #[test]
    fn only_an_explicit_local_flag_gives_the_development_key() {
        let c = ApiConfig::from_lookup(lookup(&[("TIDEMARK_LOCAL", "1")])).unwrap();
        assert_eq!(c.table_name, "tidemark");
        assert_eq!(c.cursor_secret(), DEV_CURSOR_SECRET);
        assert_eq!(c.cursor_secret_arn, None);
        let c = ApiConfig::from_lookup(lookup(&[
            ("TIDEMARK_LOCAL", "1"),
            ("CURSOR_SECRET_ARN", "CursorSigningSecret"),
        ]))
        .unwrap();
        assert_eq!(c.cursor_secret_arn, None);
        // A DynamoDB endpoint (a VPC endpoint, say) is no reason to use a known key.
        assert_eq!(
            ApiConfig::from_lookup(lookup(&[(
                "TIDEMARK_DYNAMODB_ENDPOINT",
                "https://vpce-1.dynamodb.eu-west-1.vpce.amazonaws.com"
            )]))
            .unwrap_err(),
            ConfigError::MissingCursorSecret
        );
    }

    #[test]
    fn deployed_the_key_comes_from_the_secret_never_the_environment() {
        let arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:cursor-AbCdEf";
        let c = ApiConfig::from_lookup(lookup(&[
            ("CURSOR_SECRET_ARN", arn),
            ("CURSOR_SECRET", &"k".repeat(40)),
        ]))
        .unwrap();
        assert_eq!(c.cursor_secret_arn.as_deref(), Some(arn));
    }

    #[test]
    fn bad_numbers_are_rejected() {
        let arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:cursor-AbCdEf";
        assert!(
            ApiConfig::from_lookup(lookup(&[
                ("CURSOR_SECRET_ARN", arn),
                ("RETENTION_DAYS", "0")
            ]))
            .is_err()
        );
        let c = ApiConfig::from_lookup(lookup(&[
            ("CURSOR_SECRET_ARN", arn),
            ("STATUS_SHARDS", "4"),
        ]))
        .unwrap();
        assert_eq!(c.status_shards, 4);
        let c = ApiConfig::from_lookup(lookup(&[
            ("CURSOR_SECRET_ARN", arn),
            ("SHARD_CACHE_SECONDS", "10"),
            ("MAX_FUTURE_SECONDS", "60"),
        ]))
        .unwrap();
        assert_eq!(
            c.shard_lead,
            LayoutLead {
                shard_cache: Duration::from_secs(10),
                max_future: Duration::from_secs(60)
            }
        );
        assert!(
            ApiConfig::from_lookup(lookup(&[
                ("CURSOR_SECRET_ARN", arn),
                ("SHARD_CACHE_SECONDS", "-1")
            ]))
            .is_err()
        );
    }

    #[test]
    fn the_dashboard_auth_follows_the_deployment() {
        let arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:cursor";
        let c = ApiConfig::from_lookup(lookup(&[("CURSOR_SECRET_ARN", arn)])).unwrap();
        assert_eq!(c.ui_auth, UiAuth::Iam);
        let c = ApiConfig::from_lookup(lookup(&[
            ("CURSOR_SECRET_ARN", arn),
            ("UI_AUTH", "jwt"),
            ("JWT_ISSUER", "https://issuer.example"),
        ]))
        .unwrap();
        assert_eq!(
            c.ui_auth,
            UiAuth::Jwt(JwtSignIn {
                issuer: Some("https://issuer.example".into()),
                ..JwtSignIn::default()
            })
        );
        let c = ApiConfig::from_lookup(lookup(&[
            ("CURSOR_SECRET_ARN", arn),
            ("UI_AUTH", "jwt"),
            (
                "JWT_ISSUER",
                "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_Ab",
            ),
            ("JWT_AUDIENCE", "5abc"),
            ("UI_OIDC_CLIENT_ID", "5abc"),
            (
                "UI_OIDC_TOKEN_ORIGIN",
                "https://fleet.auth.eu-west-1.amazoncognito.com",
            ),
            ("READ_SCOPE", "https://api.example/read"),
        ]))
        .unwrap();
        let UiAuth::Jwt(j) = &c.ui_auth else {
            panic!("{:?}", c.ui_auth)
        };
        assert_eq!(j.audience.as_deref(), Some("5abc"));
        assert_eq!(
            j.token_origin.as_deref(),
            Some("https://fleet.auth.eu-west-1.amazoncognito.com")
        );
        assert_eq!(c.scopes.read, "https://api.example/read");
        assert_eq!(c.scopes.write, "tidemark/write");
        // A token origin with a path, or a scope with a space, is refused, not widened.
        for (k, v) in [
            (
                "UI_OIDC_TOKEN_ORIGIN",
                "https://fleet.auth.example/oauth2/token",
            ),
            ("UI_OIDC_TOKEN_ORIGIN", "*"),
            ("WRITE_SCOPE", "tidemark/read tidemark/write"),
        ] {
            let e = ApiConfig::from_lookup(lookup(&[
                ("CURSOR_SECRET_ARN", arn),
                ("UI_AUTH", "jwt"),
                (k, v),
            ]))
            .unwrap_err();
            assert!(
                matches!(e, ConfigError::Invalid { var, .. } if var == k),
                "{e}"
            );
        }
        // Only the explicit local flag makes the page open; a DynamoDB endpoint does not.
        let local = ApiConfig::from_lookup(lookup(&[("TIDEMARK_LOCAL", "1")])).unwrap();
        assert_eq!(local.ui_auth, UiAuth::None);
        let endpoint = ApiConfig::from_lookup(lookup(&[
            ("CURSOR_SECRET_ARN", arn),
            ("TIDEMARK_DYNAMODB_ENDPOINT", "http://127.0.0.1:8000"),
        ]))
        .unwrap();
        assert_eq!(endpoint.ui_auth, UiAuth::Iam);
        assert!(
            ApiConfig::from_lookup(lookup(&[("CURSOR_SECRET_ARN", arn), ("UI_AUTH", "open")]))
                .is_err()
        );
    }
}
