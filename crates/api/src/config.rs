//! What the API needs to know besides the request: table, cursor key, retention, clock.

use std::fmt;

use tidemark_schema::{Clock, LayoutLead, Timestamp};
use tidemark_store::settings::{self, Env};

pub use crate::routes::ScopeNames;
pub use tidemark_store::settings::ConfigError;

pub const MIN_SECRET_LEN: usize = 32;

/// The claim naming a caller's sites when the deployment does not choose one.
pub const DEFAULT_SCOPE_CLAIM: &str = "tidemark:sites";

/// Used only when the process says it is local ([`settings::TIDEMARK_LOCAL`]), where cursors
/// protect nothing worth a secret. Never used on Lambda: there a missing secret stops the
/// function from starting (see [`ApiConfig::from_env`]), because a known key would let anyone
/// forge cursors.
const DEV_CURSOR_SECRET: &[u8] = b"tidemark-local-development-cursor-key-not-a-secret";

#[derive(Clone)]
pub struct ApiConfig {
    pub table_name: String,
    cursor_secret: Vec<u8>,
    /// Deployed: where the real cursor key is; the Lambda reads it before serving.
    pub cursor_secret_arn: Option<String>,
    pub retention_days: u32,
    pub status_partitions: u16,
    /// The fleet's offline window for devices without `offlineAfterSeconds` (0: off): what
    /// `connectivity` is judged with (the alerts role and the watchdog read the same
    /// variable).
    pub offline_after_default: u32,
    /// Largest accepted request body; device items stay small because the aggregator
    /// rewrites them every batch (an item over 1 KB costs two write units).
    pub max_body_bytes: usize,
    /// Ingest's shard-count cache and future-reading allowance (the same variables as
    /// ingest's): how far ahead a shard change must be scheduled.
    pub layout_lead: LayoutLead,
    /// Where "now" comes from: fixed in tests and fixtures (the docs/design.md §9 sample data
    /// is from April 2026 and would otherwise be expired).
    pub clock: Clock,
    /// What the dashboard tells its user about auth (served as `/ui/config.json`).
    pub ui_auth: UiAuth,
    /// What the JWT scopes are called; the function holds each route to its scope, as API
    /// Gateway does.
    pub scopes: ScopeNames,
    /// `SCOPE_CLAIM`: the JWT claim listing the `site` tag values a caller may see
    /// ([`crate::access::Scope`]).
    pub scope_claim: String,
    /// Readings one `series` request summarizes at most ([`crate::series::MAX_READINGS`];
    /// smaller only in tests of the bound).
    pub series_max_readings: usize,
    /// What one request may read and answer ([`crate::budget`]; smaller only in tests of
    /// the bounds).
    pub budget: crate::budget::Limits,
    /// `GROUP_TAGS`: the tag keys whose groups keep rollups (`GET /groups/series`).
    pub group_tags: Vec<tidemark_schema::TagKey>,
    /// `CALLER_RATE_LIMIT`: requests per minute per caller, 429 past it (0: off;
    /// [`crate::rate`]).
    pub caller_rate_limit: u32,
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
    /// The authorizer's audience, asked for by name ([`settings::JWT_AUDIENCE`]).
    pub audience: Option<String>,
    /// The dashboard's public client; without it the page can only take a pasted token.
    pub client_id: Option<String>,
    /// What to ask the issuer for; `None`: `openid` and the read and write scopes.
    pub request_scopes: Option<String>,
    /// The token endpoint's origin when it is not the issuer's
    /// ([`settings::UI_OIDC_TOKEN_ORIGIN`]).
    pub token_origin: Option<String>,
}

impl fmt::Debug for ApiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiConfig")
            .field("table_name", &self.table_name)
            .field("cursor_secret", &"<redacted>")
            .field("retention_days", &self.retention_days)
            .field("status_partitions", &self.status_partitions)
            .field("offline_after_default", &self.offline_after_default)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("layout_lead", &self.layout_lead)
            .field("clock", &self.clock)
            .field("ui_auth", &self.ui_auth)
            .field("scopes", &self.scopes)
            .field("scope_claim", &self.scope_claim)
            .field("group_tags", &self.group_tags)
            .field("caller_rate_limit", &self.caller_rate_limit)
            .finish()
    }
}

impl ApiConfig {
    pub const DEFAULT_RETENTION_DAYS: u32 = settings::RETENTION_DAYS.default_u32();
    /// 16 KiB for any request, and room beside it for the largest list a gateway may hold
    /// (1,000 distinct ids of the longest length, quoted and comma-separated), so a valid
    /// `gatewayFor` is never refused for its size: about 144 KiB.
    pub const DEFAULT_MAX_BODY: usize =
        16 * 1024 + tidemark_schema::MAX_GATEWAY_FOR * (tidemark_schema::DeviceId::MAX_LEN + 3);

    /// A configuration for `table` with the local development key and system clock (tests,
    /// benchmarks, the local server).
    pub fn new(table_name: impl Into<String>) -> Self {
        ApiConfig {
            table_name: table_name.into(),
            cursor_secret: DEV_CURSOR_SECRET.to_vec(),
            cursor_secret_arn: None,
            retention_days: Self::DEFAULT_RETENTION_DAYS,
            status_partitions: const { settings::STATUS_PARTITIONS.default_u16() },
            offline_after_default: const { settings::OFFLINE_AFTER_SECONDS.default_u32() },
            max_body_bytes: Self::DEFAULT_MAX_BODY,
            layout_lead: LayoutLead::default(),
            clock: Clock::system(),
            ui_auth: UiAuth::None,
            scopes: ScopeNames::default(),
            scope_claim: DEFAULT_SCOPE_CLAIM.to_owned(),
            series_max_readings: crate::series::MAX_READINGS,
            budget: crate::budget::Limits::default(),
            group_tags: settings::default_group_tags(),
            caller_rate_limit: const { settings::CALLER_RATE_LIMIT.default_u32() },
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
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// [`ApiConfig::from_env`] over any variable source (testable without touching the
    /// process environment).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = Env::new(get);
        let mut c = ApiConfig::new(env.table_name());
        let local = env.text(&settings::TIDEMARK_LOCAL).as_deref() == Some("1");
        let auth = env.parse_with(&settings::UI_AUTH, "one of jwt, iam, none", |v| match v {
            "jwt" => Some(UiAuth::Jwt(JwtSignIn::default())),
            "iam" => Some(UiAuth::Iam),
            "none" => Some(UiAuth::None),
            _ => None,
        })?;
        c.ui_auth = match auth {
            Some(UiAuth::Jwt(_)) => UiAuth::Jwt(jwt_sign_in(&env)?),
            Some(auth) => auth,
            None if local => UiAuth::None,
            None => UiAuth::Iam,
        };
        let one_scope = |v: &str| {
            let one = !v.contains(|ch: char| ch.is_whitespace() || ch == '"');
            one.then(|| v.to_owned())
        };
        for (s, slot) in [
            (&settings::READ_SCOPE, &mut c.scopes.read),
            (&settings::WRITE_SCOPE, &mut c.scopes.write),
            (&settings::ADMIN_SCOPE, &mut c.scopes.admin),
        ] {
            if let Some(v) = env.parse_with(s, "one scope name, no spaces", one_scope)? {
                *slot = v;
            }
        }
        if let Some(v) = env.parse_with(
            &settings::SCOPE_CLAIM,
            "one claim name, no spaces",
            one_scope,
        )? {
            c.scope_claim = v;
        }
        // The explicit local flag wins: `sam local` resolves the template's secret reference
        // to a name no local process can read.
        if !local {
            let unless = format!(
                "required unless {}=1 says this is a local stack",
                settings::TIDEMARK_LOCAL.name
            );
            c.cursor_secret_arn = Some(env.required(&settings::CURSOR_SECRET_ARN, unless)?);
        }
        c.retention_days = env
            .num(&settings::RETENTION_DAYS, "whole days, 1..=36500", |d| {
                (1..=36_500).contains(d)
            })?
            .unwrap_or(c.retention_days);
        c.status_partitions = env.status_partitions()?.unwrap_or(c.status_partitions);
        c.offline_after_default = env.offline_after()?.unwrap_or(c.offline_after_default);
        c.group_tags = env.group_tags()?;
        c.layout_lead = env.layout_lead(c.layout_lead)?;
        let max = tidemark_schema::MAX_CALLER_RATE_LIMIT;
        c.caller_rate_limit = env
            .num(
                &settings::CALLER_RATE_LIMIT,
                format!(
                    "requests per minute per caller, 0..={max} (0: off; more would pass one \
                     partition's 1,000 writes a second)"
                ),
                |n| *n <= max,
            )?
            .unwrap_or(c.caller_rate_limit);
        Ok(c)
    }

    /// The oldest reading time that is not expired at `now`.
    pub fn retention_start(&self, now: Timestamp) -> Timestamp {
        now.minus_millis(i64::from(self.retention_days) * 86_400_000)
            .unwrap_or(Timestamp::MIN)
    }
}

/// The dashboard's sign-in at the JWT authorizer's issuer.
fn jwt_sign_in(env: &Env<impl Fn(&str) -> Option<String>>) -> Result<JwtSignIn, ConfigError> {
    Ok(JwtSignIn {
        issuer: env.text(&settings::JWT_ISSUER),
        // The template passes the audience list joined by commas; one is enough to ask for.
        audience: env.text(&settings::JWT_AUDIENCE).and_then(|a| {
            a.split(',')
                .map(str::trim)
                .find(|s| !s.is_empty())
                .map(str::to_owned)
        }),
        client_id: env.text(&settings::UI_OIDC_CLIENT_ID),
        request_scopes: env.text(&settings::UI_OIDC_SCOPES),
        token_origin: env.parse_with(
            &settings::UI_OIDC_TOKEN_ORIGIN,
            "an origin: https://host[:port], no path",
            |v| origin(v).filter(|o| o == v),
        )?,
    })
}

/// `scheme://host[:port]` of an HTTP(S) URL, when it is made only of characters an origin
/// may hold (so it cannot smuggle another directive into the policy).
pub fn origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let host = rest.split('/').next()?;
    let o = format!("{scheme}://{host}");
    let ok = !host.is_empty()
        && (scheme == "https" || scheme == "http")
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
    ok.then_some(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::time::Duration;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    fn is_missing_cursor_secret(e: ConfigError) -> bool {
        e.name == settings::CURSOR_SECRET_ARN.name && e.value.is_none()
    }

    #[test]
    fn lambda_without_a_cursor_secret_refuses_to_start() {
        let e = ApiConfig::from_lookup(lookup(&[("TABLE_NAME", "t")])).unwrap_err();
        assert!(e.to_string().contains("TIDEMARK_LOCAL=1"), "{e}");
        assert!(is_missing_cursor_secret(e));
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
        assert!(is_missing_cursor_secret(
            ApiConfig::from_lookup(lookup(&[(
                "TIDEMARK_DYNAMODB_ENDPOINT",
                "https://vpce-1.dynamodb.eu-west-1.vpce.amazonaws.com"
            )]))
            .unwrap_err()
        ));
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
            ("STATUS_PARTITIONS", "4"),
        ]))
        .unwrap();
        assert_eq!(c.status_partitions, 4);
        let c = ApiConfig::from_lookup(lookup(&[
            ("CURSOR_SECRET_ARN", arn),
            ("LAYOUT_CACHE_SECONDS", "10"),
            ("MAX_FUTURE_SECONDS", "60"),
        ]))
        .unwrap();
        assert_eq!(
            c.layout_lead,
            LayoutLead {
                layout_cache: Duration::from_secs(10),
                max_future: Duration::from_secs(60)
            }
        );
        assert!(
            ApiConfig::from_lookup(lookup(&[
                ("CURSOR_SECRET_ARN", arn),
                ("LAYOUT_CACHE_SECONDS", "-1")
            ]))
            .is_err()
        );
    }

    #[test]
    fn the_caller_rate_limit_is_off_by_default_and_at_most_one_partitions_writes() {
        let arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:cursor-AbCdEf";
        let limit = |v: &str| {
            ApiConfig::from_lookup(lookup(&[
                ("CURSOR_SECRET_ARN", arn),
                ("CALLER_RATE_LIMIT", v),
            ]))
            .map(|c| c.caller_rate_limit)
        };
        assert_eq!(limit(""), Ok(0), "unset: off");
        assert_eq!(ApiConfig::new("t").caller_rate_limit, 0);
        assert_eq!(limit("600"), Ok(600));
        assert_eq!(limit("60000"), Ok(60_000));
        for bad in ["60001", "-1", "ten"] {
            let e = limit(bad).unwrap_err();
            assert_eq!(e.name, "CALLER_RATE_LIMIT", "{bad}");
            assert!(e.to_string().contains("60000"), "{e}");
        }
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
        let d = ScopeNames::default();
        for (s, name) in [
            (settings::READ_SCOPE, d.read),
            (settings::WRITE_SCOPE, d.write),
            (settings::ADMIN_SCOPE, d.admin),
        ] {
            assert_eq!(
                s.default,
                format!("`{name}`"),
                "the table's default scope names"
            );
        }
        assert_eq!(c.scope_claim, DEFAULT_SCOPE_CLAIM);
        assert_eq!(
            settings::SCOPE_CLAIM.default,
            format!("`{DEFAULT_SCOPE_CLAIM}`"),
            "the table's default scope claim"
        );
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
            assert_eq!(e.name, k, "{e}");
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
