//! The dashboard's static files, compiled into the binary, served under `/ui/`.
//!
//! The files are embedded with `include_str!`, so the page a deployment serves is exactly the
//! page the browser tests drove, and nobody needs Node to build it. They are public (the
//! template routes `/ui` without an authorizer); every data call the page makes goes to the
//! API routes with the user's token, where API Gateway enforces auth as for any client.
//! `/ui/config.json` tells the page which auth that is ([`UiAuth`]); it holds no secret.

use std::sync::OnceLock;

use http::{HeaderValue, Method, StatusCode, header};
use lambda_http::{Body, Request, Response};
use serde_json::json;
use sha2::{Digest, Sha256};

pub use crate::config::origin;
use crate::config::{JwtSignIn, ScopeNames, UiAuth};
use crate::error::ApiError;

/// The path segment the dashboard lives under.
pub const PREFIX: &str = "ui";

/// One embedded file.
pub struct Asset {
    pub name: &'static str,
    pub content_type: &'static str,
    pub body: &'static str,
}

macro_rules! asset {
    ($name:literal, $type:expr) => {
        Asset {
            name: $name,
            content_type: $type,
            body: include_str!(concat!("../ui/", $name)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file of the dashboard; `index.html` answers `/ui/`.
pub const ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("app.css", "text/css; charset=utf-8"),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("oidc.js", JS),
    asset!("charts.js", JS),
    asset!("fleet.js", JS),
    asset!("device.js", JS),
    asset!("alerts.js", JS),
    asset!("alert_item.js", JS),
    asset!("quarantine.js", JS),
    asset!("vendor/uPlot.iife.min.js", JS),
    asset!("vendor/uPlot.min.css", "text/css; charset=utf-8"),
    asset!("vendor/LICENSE.uPlot", "text/plain; charset=utf-8"),
];

/// Strong validators, computed once per container: browsers revalidate (`no-cache`) and get
/// a 304 while the binary is unchanged, so a deploy is visible at the next load.
fn etags() -> &'static [String] {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    TAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|a| {
                let d = Sha256::digest(a.body.as_bytes());
                let hex: String = d[..12].iter().map(|b| format!("{b:02x}")).collect();
                format!("\"{hex}\"")
            })
            .collect()
    })
}

/// `true` when API Gateway matched the request to one of the dashboard's routes
/// (`GET /ui`, `GET /ui/{proxy+}` in `template.yaml`), which have no authorizer.
pub fn is_ui_route_key(req: &Request) -> bool {
    use lambda_http::RequestExt;
    use lambda_http::request::RequestContext;
    match req.request_context_ref() {
        Some(RequestContext::ApiGatewayV2(ctx)) => ctx.route_key.as_deref().is_some_and(|k| {
            k.split_whitespace()
                .nth(1)
                .is_some_and(|p| p == "/ui" || p.starts_with("/ui/"))
        }),
        _ => false,
    }
}

/// `true` when a request's path (stage removed) is the dashboard's.
pub fn is_ui_path(segments: &[String]) -> bool {
    segments.first().is_some_and(|s| s == PREFIX)
}

/// The page's whole policy: its own scripts and styles (uPlot styles its elements inline),
/// data from this origin only, except with an OpenID Connect sign-in, which also reads the
/// issuer's discovery document and posts to its token endpoint: those two origins by name,
/// nothing wider (a page that may connect anywhere could send the token anywhere).
fn csp(auth: &UiAuth) -> String {
    let mut connect = vec!["'self'".to_owned()];
    if let UiAuth::Jwt(
        j @ JwtSignIn {
            client_id: Some(_), ..
        },
    ) = auth
    {
        connect.extend(j.issuer.as_deref().and_then(origin));
        connect.extend(j.token_origin.clone());
        connect.dedup();
    }
    format!(
        "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
         img-src 'self' data:; connect-src {}; base-uri 'none'; form-action 'self'; \
         frame-ancestors 'none'",
        connect.join(" ")
    )
}

fn with_headers(mut resp: Response<Body>, content_type: &str, auth: &UiAuth) -> Response<Body> {
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(content_type) {
        h.insert(header::CONTENT_TYPE, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if let Ok(v) = HeaderValue::from_str(&csp(auth)) {
        h.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    resp
}

/// Seconds between the page's refreshes: a few locally, slower deployed, where every
/// refresh of an open tab is billed as API requests and reads.
pub const LOCAL_REFRESH_SECONDS: u32 = 5;
pub const DEPLOYED_REFRESH_SECONDS: u32 = 30;

/// The page's view of the deployment's auth, and how often it refreshes. With JWTs: which
/// scope names the routes need (so a refusal can name the missing one) and what to ask the
/// issuer for.
pub fn config_json(auth: &UiAuth, scopes: &ScopeNames) -> serde_json::Value {
    match auth {
        UiAuth::None => json!({"auth": "none", "refreshSeconds": LOCAL_REFRESH_SECONDS}),
        UiAuth::Jwt(j) => json!({
            "auth": "jwt",
            "issuer": j.issuer,
            "audience": j.audience,
            "clientId": j.client_id,
            "scopes": {"read": scopes.read, "write": scopes.write, "admin": scopes.admin},
            "requestScopes": j.request_scopes.clone()
                .unwrap_or_else(|| format!("openid {} {}", scopes.read, scopes.write)),
            "refreshSeconds": DEPLOYED_REFRESH_SECONDS,
        }),
        UiAuth::Iam => json!({"auth": "iam", "refreshSeconds": DEPLOYED_REFRESH_SECONDS}),
    }
}

/// Answers a request under `/ui`. `raw_path` is the path as requested (with any stage), so
/// `/ui` can redirect to `ui/` relative to itself: the page's relative links then resolve.
pub fn answer(
    req: &Request,
    segments: &[String],
    auth: &UiAuth,
    scopes: &ScopeNames,
) -> Result<Response<Body>, ApiError> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Err(ApiError::MethodNotAllowed {
            method: req.method().to_string(),
            path: format!("/{}", segments.join("/")),
            allowed: "GET, HEAD".into(),
        });
    }
    let rest = segments[1..].join("/");
    let raw_path = req.uri().path();
    if rest.is_empty() && !raw_path.ends_with('/') {
        let mut resp = Response::new(Body::Empty);
        *resp.status_mut() = StatusCode::PERMANENT_REDIRECT;
        resp.headers_mut()
            .insert(header::LOCATION, HeaderValue::from_static("ui/"));
        return Ok(resp);
    }
    if rest == "config.json" {
        let resp = Response::new(Body::Text(config_json(auth, scopes).to_string()));
        return Ok(with_headers(resp, "application/json", auth));
    }
    let name = if rest.is_empty() { "index.html" } else { &rest };
    let (i, asset) = ASSETS
        .iter()
        .enumerate()
        .find(|(_, a)| a.name == name)
        .ok_or_else(|| ApiError::NotFound(format!("no dashboard file {name}")))?;
    let etag = &etags()[i];
    let fresh = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let mut resp = if fresh {
        let mut r = Response::new(Body::Empty);
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else if req.method() == Method::HEAD {
        Response::new(Body::Empty)
    } else {
        Response::new(Body::Text(asset.body.to_owned()))
    };
    if let Ok(v) = HeaderValue::from_str(etag) {
        resp.headers_mut().insert(header::ETAG, v);
    }
    Ok(with_headers(resp, asset.content_type, auth))
}
