//! A real OpenID Connect provider for sign-in tests: `scripts/oidc/provider.mjs` (the npm
//! package `oidc-provider`, installed by `scripts/oidc.sh` when missing), one process per
//! test on a free loopback port, killed on drop.
//!
//! It issues RS256 JWT access tokens for the Tidemark API (`aud` = [`LocalIssuer::audience`])
//! by authorization code + PKCE to the dashboard's public client, with refresh tokens, and
//! grants each user only the scopes [`IssuerOptions::users`] gives them. With a machine
//! secret it also issues tokens by client credentials, for checks without a browser.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use serde_json::Value;

use crate::workspace_root;

pub const AUDIENCE: &str = "urn:tidemark:api";
pub const CLIENT_ID: &str = "dashboard";
pub const MACHINE_SECRET: &str = "local-machine-secret-not-a-secret";

/// How to configure the provider.
#[derive(Debug, Clone)]
pub struct IssuerOptions {
    /// The dashboard's redirect URIs (`http://127.0.0.1:<port>/ui/`).
    pub redirect_uris: Vec<String>,
    /// (login, granted scopes) of every user who may sign in; any password is accepted.
    pub users: Vec<(String, String)>,
    /// Access token lifetime.
    pub access_ttl_seconds: u32,
    /// More client-credentials clients besides `machine` and `machine-short` (names
    /// starting `machine`), for callers that differ by their claims.
    pub machines: Vec<String>,
    /// (login or client ID, claims): extra claims in the access tokens issued to them.
    pub claims: Vec<(String, Value)>,
}

impl IssuerOptions {
    /// `operator` (read, write and admin) and `viewer` (read only), 5-minute tokens.
    pub fn new(redirect_uri: impl Into<String>) -> Self {
        IssuerOptions {
            redirect_uris: vec![redirect_uri.into()],
            users: vec![
                (
                    "operator".into(),
                    "tidemark/read tidemark/write tidemark/admin".into(),
                ),
                ("viewer".into(), "tidemark/read".into()),
            ],
            access_ttl_seconds: 300,
            machines: Vec::new(),
            claims: Vec::new(),
        }
    }
}

/// One running provider.
pub struct LocalIssuer {
    child: Child,
    /// `http://127.0.0.1:<port>`, as the tokens' `iss` says.
    pub issuer: String,
    events: Arc<Mutex<Vec<Value>>>,
}

impl LocalIssuer {
    pub fn audience(&self) -> &'static str {
        AUDIENCE
    }

    pub fn start(opts: &IssuerOptions) -> Self {
        let out = Command::new("bash")
            .arg(workspace_root().join("scripts/oidc.sh"))
            .output()
            .expect("run scripts/oidc.sh");
        assert!(
            out.status.success(),
            "scripts/oidc.sh could not install the local OpenID provider:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let script = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let users: serde_json::Map<String, Value> = opts
            .users
            .iter()
            .map(|(u, s)| (u.clone(), Value::String(s.clone())))
            .collect();
        let claims: serde_json::Map<String, Value> = opts.claims.iter().cloned().collect();
        let mut child = Command::new("node")
            .arg(&script)
            .env("OIDC_PORT", "0")
            .env("OIDC_CLIENT_ID", CLIENT_ID)
            .env("OIDC_REDIRECT_URIS", opts.redirect_uris.join(","))
            .env("OIDC_AUDIENCE", AUDIENCE)
            .env("OIDC_USERS", Value::Object(users).to_string())
            .env("OIDC_ACCESS_TTL", opts.access_ttl_seconds.to_string())
            .env("OIDC_MACHINE_SECRET", MACHINE_SECRET)
            .env("OIDC_MACHINES", opts.machines.join(","))
            .env("OIDC_CLAIMS", Value::Object(claims).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start node (Node.js 20 or newer is required)");
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let first = lines
            .next()
            .and_then(Result::ok)
            .expect("the provider says where it listens");
        let issuer = serde_json::from_str::<Value>(&first)
            .ok()
            .and_then(|v| v["issuer"].as_str().map(str::to_owned))
            .unwrap_or_else(|| panic!("unexpected first line from the provider: {first}"));
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    sink.lock().unwrap().push(v);
                }
            }
        });
        LocalIssuer {
            child,
            issuer,
            events,
        }
    }

    /// How many grants of `grant_type` (`authorization_code`, `refresh_token`, …) succeeded.
    pub fn grants(&self, grant_type: &str) -> usize {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e["event"] == "grant" && e["grantType"] == grant_type)
            .count()
    }

    /// An access token by client credentials: `client` is `machine`, `machine-short`
    /// (1-second tokens) or one of [`IssuerOptions::machines`]; `resource` another audience
    /// than the API's, if given.
    pub fn machine_token(&self, client: &str, scope: &str, resource: Option<&str>) -> String {
        let mut form = format!(
            "grant_type=client_credentials&scope={}",
            scope.replace('/', "%2F").replace(' ', "+")
        );
        if let Some(r) = resource {
            form.push_str(&format!("&resource={}", r.replace(':', "%3A")));
        }
        let basic =
            base64::engine::general_purpose::STANDARD.encode(format!("{client}:{MACHINE_SECRET}"));
        let host = self.issuer.trim_start_matches("http://");
        let mut s = TcpStream::connect(host).expect("connect to the provider");
        s.set_read_timeout(Some(Duration::from_secs(30))).ok();
        write!(
            s,
            "POST /token HTTP/1.1\r\nHost: {host}\r\nAuthorization: Basic {basic}\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{form}",
            form.len()
        )
        .expect("send the token request");
        let mut raw = String::new();
        s.read_to_string(&mut raw).expect("read the token response");
        let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        // Chunked or not, the JSON object is the body's one `{…}`.
        let json = body
            .find('{')
            .and_then(|i| body.rfind('}').map(|j| &body[i..=j]))
            .unwrap_or_default();
        let v: Value =
            serde_json::from_str(json).unwrap_or_else(|e| panic!("token response {raw:?}: {e}"));
        v["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no access token: {v}"))
            .to_owned()
    }
}

impl Drop for LocalIssuer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
