//! API Gateway's JWT authorizer, for a local stack signed in against a real issuer: what
//! `template.yaml`'s HTTP API does before the API function sees a request, so the dashboard's
//! sign-in is tested against the same refusals a deployment gives.
//!
//! As API Gateway documents it: the token comes from the `Authorization` header (a `Bearer `
//! prefix is allowed); its header names a `kid` found in the issuer's JWKS (`jwks_uri` from
//! the issuer's discovery document) and an RSA algorithm; the signature verifies; `iss` is
//! the issuer; `aud`, or `client_id` when there is no `aud`, is one of the audiences; `exp`,
//! `nbf` and `iat` hold now (no leeway); and the `scope` or `scp` claim holds the route's
//! scope. A failed check is a 401 `{"message":"Unauthorized"}`, a missing scope a 403
//! `{"message":"Forbidden"}`. The function then sees the claims and scopes in the request
//! context, as deployed. Signature checks are `jsonwebtoken`'s, not ours.

use std::collections::HashMap;

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use lambda_http::aws_lambda_events::apigw::{
    ApiGatewayRequestAuthorizer, ApiGatewayRequestAuthorizerJwtDescription,
};
use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt, Response};
use serde_json::Value;
use tidemark_api::routes::{Scope, resolve};
use tidemark_api::{ScopeNames, request::path_segments, ui};
use tokio::sync::RwLock;

use crate::http_api::HttpHandler;

/// Why a request was refused: the status API Gateway answers with, and the reason it puts in
/// `www-authenticate` (and we in the log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    Unauthorized(String),
    Forbidden(String),
}

/// The authorizer's configuration (`jwtConfiguration` in the template) and the issuer's keys.
pub struct JwtAuthorizer {
    issuer: String,
    audiences: Vec<String>,
    keys: RwLock<Option<JwkSet>>,
}

/// What a valid token gives the function: its claims as strings, and its scopes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub claims: HashMap<String, String>,
    pub scopes: Vec<String>,
}

impl JwtAuthorizer {
    pub fn new(issuer: impl Into<String>, audiences: Vec<String>) -> Self {
        JwtAuthorizer {
            issuer: issuer.into(),
            audiences,
            keys: RwLock::new(None),
        }
    }

    /// Checks a request's `Authorization` header for a route needing `scope`.
    pub async fn authorize(&self, header: Option<&str>, scope: &str) -> Result<Grant, Refusal> {
        let unauthorized = |why: &str| Refusal::Unauthorized(why.to_owned());
        let token = header
            .map(|h| h.trim())
            .map(|h| h.strip_prefix("Bearer ").unwrap_or(h).trim())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| unauthorized("no token in the Authorization header"))?;
        let head = jsonwebtoken::decode_header(token)
            .map_err(|e| Refusal::Unauthorized(format!("not a JWT: {e}")))?;
        if !matches!(
            head.alg,
            Algorithm::RS256 | Algorithm::RS384 | Algorithm::RS512
        ) {
            return Err(unauthorized("only RSA-signed tokens are accepted"));
        }
        let kid = head
            .kid
            .ok_or_else(|| unauthorized("the token names no signing key (kid)"))?;
        let key = self.key(&kid).await?;
        let mut v = Validation::new(head.alg);
        v.leeway = 0;
        v.validate_nbf = true;
        v.validate_aud = false; // aud or client_id, checked below
        v.set_issuer(&[&self.issuer]);
        v.set_required_spec_claims(&["exp", "iss"]);
        let data = jsonwebtoken::decode::<HashMap<String, Value>>(token, &key, &v)
            .map_err(|e| Refusal::Unauthorized(format!("invalid token: {e}")))?;
        let claims = data.claims;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if claims
            .get("iat")
            .and_then(Value::as_u64)
            .is_some_and(|iat| iat > now)
        {
            return Err(unauthorized("the token was issued in the future"));
        }
        let aud: Vec<&str> = match claims.get("aud") {
            Some(Value::String(a)) => vec![a.as_str()],
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
            _ => claims
                .get("client_id")
                .and_then(Value::as_str)
                .into_iter()
                .collect(),
        };
        if !aud.iter().any(|a| self.audiences.iter().any(|w| w == a)) {
            return Err(unauthorized("the token is for another audience"));
        }
        let scopes: Vec<String> = match claims.get("scope").or_else(|| claims.get("scp")) {
            Some(Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        };
        if !scopes.iter().any(|s| s == scope) {
            return Err(Refusal::Forbidden(format!(
                "the token lacks the scope {scope}"
            )));
        }
        let claims = claims
            .into_iter()
            .map(|(k, v)| {
                let s = match v {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                (k, s)
            })
            .collect();
        Ok(Grant { claims, scopes })
    }

    /// The issuer's key `kid`; the JWKS is read again when it does not hold it (key rotation).
    async fn key(&self, kid: &str) -> Result<DecodingKey, Refusal> {
        for refresh in [false, true] {
            if refresh || self.keys.read().await.is_none() {
                let fresh = self.fetch_keys().await.map_err(|e| {
                    Refusal::Unauthorized(format!("the issuer's keys are unavailable: {e}"))
                })?;
                *self.keys.write().await = Some(fresh);
            }
            if let Some(jwk) = self.keys.read().await.as_ref().and_then(|k| k.find(kid)) {
                return DecodingKey::from_jwk(jwk)
                    .map_err(|e| Refusal::Unauthorized(format!("unusable signing key: {e}")));
            }
        }
        Err(Refusal::Unauthorized(format!(
            "the issuer has no signing key {kid}"
        )))
    }

    async fn fetch_keys(&self) -> Result<JwkSet, String> {
        let discovery = format!(
            "{}/.well-known/openid-configuration",
            self.issuer.trim_end_matches('/')
        );
        let doc = get_json(&discovery).await?;
        let jwks = doc
            .get("jwks_uri")
            .and_then(Value::as_str)
            .ok_or("the discovery document has no jwks_uri")?;
        serde_json::from_value(get_json(jwks).await?).map_err(|e| format!("JWKS: {e}"))
    }
}

/// One GET over plain HTTP: the local issuer listens on loopback without TLS.
async fn get_json(url: &str) -> Result<Value, String> {
    use http_body_util::{BodyExt, Empty};
    use hyper::body::Bytes;
    let uri: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
    if uri.scheme_str() != Some("http") {
        return Err(format!(
            "{url}: the local authorizer reads only http:// issuers (a local provider)"
        ));
    }
    let authority = uri.authority().ok_or("no host")?.to_string();
    let stream = tokio::net::TcpStream::connect(&authority)
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| format!("{url}: {e}"))?;
    tokio::spawn(conn);
    let req = http::Request::get(uri.path_and_query().map_or("/", |p| p.as_str()))
        .header(http::header::HOST, authority)
        .header(http::header::ACCEPT, "application/json")
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    if !resp.status().is_success() {
        return Err(format!("{url}: HTTP {}", resp.status()));
    }
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("{url}: {e}"))?
        .to_bytes();
    serde_json::from_slice(&body).map_err(|e| format!("{url}: {e}"))
}

/// The API function behind the authorizer, routed as `template.yaml` routes: the dashboard's
/// files open, every other route (the catch-all included) needing its scope.
pub struct Authorized<H> {
    pub inner: H,
    pub authorizer: JwtAuthorizer,
    pub scopes: ScopeNames,
}

impl<H: HttpHandler> HttpHandler for Authorized<H> {
    async fn handle(&self, req: Request) -> Response<Body> {
        let Ok(segments) = path_segments(&req) else {
            return refuse(&Refusal::Unauthorized("unreadable path".into()));
        };
        if ui::is_ui_path(&segments) {
            return self.inner.handle(req).await;
        }
        let scope = resolve(req.method(), &segments)
            .map(|m| m.route.scope())
            .unwrap_or(Scope::Read);
        let header = req
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        match self
            .authorizer
            .authorize(header.as_deref(), self.scopes.name(scope))
            .await
        {
            Ok(grant) => self.inner.handle(with_grant(req, grant)).await,
            Err(refusal) => {
                tracing::info!(path = %req.uri().path(), ?refusal, "authorizer refused");
                refuse(&refusal)
            }
        }
    }
}

/// The request as API Gateway hands it on: the token's claims and scopes in its context.
fn with_grant(req: Request, grant: Grant) -> Request {
    let RequestContext::ApiGatewayV2(mut ctx) = req.request_context() else {
        return req;
    };
    let mut jwt = ApiGatewayRequestAuthorizerJwtDescription::default();
    jwt.claims = grant.claims;
    jwt.scopes = Some(grant.scopes);
    let mut authorizer = ApiGatewayRequestAuthorizer::default();
    authorizer.jwt = Some(jwt);
    ctx.authorizer = Some(authorizer);
    req.with_request_context(RequestContext::ApiGatewayV2(ctx))
}

fn refuse(refusal: &Refusal) -> Response<Body> {
    let (status, message, why) = match refusal {
        Refusal::Unauthorized(why) => (401, "Unauthorized", why),
        Refusal::Forbidden(why) => (403, "Forbidden", why),
    };
    let challenge = format!(
        "Bearer error=\"{}\" error_description=\"{}\"",
        if status == 401 {
            "invalid_token"
        } else {
            "insufficient_scope"
        },
        why.replace('"', "'")
    );
    let mut resp = Response::new(Body::Text(
        serde_json::json!({ "message": message }).to_string(),
    ));
    *resp.status_mut() = http::StatusCode::from_u16(status).unwrap_or_default();
    let h = resp.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    if let Ok(v) = http::HeaderValue::from_str(&challenge) {
        h.insert(http::header::WWW_AUTHENTICATE, v);
    }
    resp
}
