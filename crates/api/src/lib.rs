//! Tidemark's HTTP API (docs/design.md §6): one Lambda behind an API Gateway HTTP API (payload v2).
//!
//! [`App::handle`] turns any request into a JSON response and never fails: bad input is a
//! 400 naming the parameter, unknown routes 404, wrong methods 405, conflicts 409, and store
//! failures a 500/503 whose details go only to the log. Every route is one GetItem,
//! BatchGetItem or Query per partition; lists page with signed cursors ([`cursor`]) and read
//! several partitions in one global order when a list spans them
//! ([`tidemark_store::read::interleave`]). Readings are
//! read layout segment by segment over a device's history of partition counts and packing
//! (`PUT /devices/{id}/layout`): single reading items and packed slots
//! ([`tidemark_store::read::readings`]) come out as the same reading JSON, so a layout change is invisible to clients. An operator's
//! writes to an alert (acknowledge, snooze, unsnooze) each update only their own attributes
//! under a condition ([`store::AlertWriter`]), so they never undo what the pipeline wrote.
//! The dashboard's static files are served under `/ui/` ([`ui`]).
//!
//! Scoped access ([`access`], docs/design.md §6 "Scoped access"): a caller whose token lists
//! sites (`SCOPE_CLAIM`) sees and changes only the devices whose current `site` tag is one of
//! them, on every route by its rule in [`access::RULES`]; others answer 404 as missing
//! devices, and cursors are bound to the caller's scope.
//!
//! A budget per request ([`budget`], docs/design.md §6 "A budget per request"): every read
//! goes through [`budget::Metered`], which charges its items and bytes to the request; a
//! series charges its cells before it is laid out; and every body is measured before it
//! leaves. An answer that would pass a limit is a 400 `too_much` naming it, and no response
//! passes Lambda's and API Gateway's 6 MB.
//!
//! Rate limits per caller ([`rate`], docs/design.md §6 "Rate limits per caller"): with
//! `CALLER_RATE_LIMIT` set, each caller's requests are counted per UTC minute before anything
//! is read, and a request past the limit is a 429 `rate_limited` with `Retry-After`.
//!
//! Fleet reads (docs/design.md §6 "Fleet reads"): a group's series is read from the group's
//! own stored buckets (its recomputed hours and days, the partials of hours not recomputed
//! yet), never from its members, and laid out by the device series' code ([`series`]); fleet
//! latest pages a tag's index and reads each member's newest reading; alerts by tag keep a
//! page's alerts whose devices hold the tags.
//!
//! The crate has the shape of every function crate: its settings in [`config`], its errors
//! in [`error`], the store traits handlers run over in [`store`], their DynamoDB
//! implementation in [`dynamo`] ([`DynamoStore`]) and the in-memory one over the one test
//! engine in [`memory`] (unit tests, the devstack's dashboard tests, the bench). It has no
//! `Report`: what an invocation did is its HTTP response.

pub mod access;
pub mod budget;
pub mod config;
pub mod cursor;
pub mod dynamo;
pub mod error;
mod handlers;
pub mod memory;
pub mod rate;
pub mod render;
pub mod request;
pub mod routes;
pub mod secret;
pub mod series;
pub mod store;
pub mod ui;
pub mod validate;

use std::time::Instant;

use http::{HeaderValue, StatusCode, header};
use lambda_http::{Body, Request, Response};
use serde_json::Value;

pub use config::{ApiConfig, ConfigError, JwtSignIn, UiAuth};
pub use dynamo::DynamoStore;
pub use error::ApiError;
pub use routes::{Route, ScopeNames, query_parameters, routes};
pub use store::Store;

use crate::cursor::CursorKey;

/// The API: a store (read through the request's budget), the configuration and the cursor
/// key.
pub struct App<S = DynamoStore> {
    store: budget::Metered<S>,
    config: ApiConfig,
    /// Replaced when the Lambda re-reads the secret ([`App::set_cursor_key`]).
    cursor: std::sync::RwLock<std::sync::Arc<CursorKey>>,
}

impl App<DynamoStore> {
    pub fn new(client: aws_sdk_dynamodb::Client, config: ApiConfig) -> Self {
        let store = DynamoStore::new(client, config.table_name.clone());
        App::with_store(store, config)
    }
}

impl<S: Store> App<S> {
    pub fn with_store(store: S, config: ApiConfig) -> Self {
        let cursor = CursorKey::new(config.cursor_secret());
        App {
            store: budget::Metered(store),
            config,
            cursor: std::sync::RwLock::new(std::sync::Arc::new(cursor)),
        }
    }

    /// Signs and opens cursors with `key` from now on (a secret read from Secrets Manager).
    pub fn set_cursor_key(&self, key: CursorKey) {
        *self.cursor.write().unwrap_or_else(|e| e.into_inner()) = std::sync::Arc::new(key);
    }

    /// The cursor key, bound to the scope of the caller being answered
    /// ([`access::Scope::caller`]).
    fn cursor_key(&self) -> CursorKey {
        let key = self
            .cursor
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        CursorKey::clone(&key).bound_to(access::Scope::caller().binding())
    }

    pub fn config(&self) -> &ApiConfig {
        &self.config
    }

    pub fn store(&self) -> &S {
        &self.store.0
    }

    /// Answers one request. Never errors: every failure is a JSON error response.
    pub async fn handle(&self, req: Request) -> Response<Body> {
        self.handle_metered(req).await.0
    }

    /// Answers one request as [`Self::handle`] does, and says what it used of its budget.
    pub async fn handle_metered(&self, req: Request) -> (Response<Body>, budget::Usage) {
        let budget = budget::Budget::new(self.config.budget);
        // On the heap: the routes' futures are large, and a caller's stack need not be.
        let resp = budget.serve(Box::pin(self.answer(req, &budget))).await;
        (resp, budget.usage())
    }

    async fn answer(&self, req: Request, budget: &budget::Budget) -> Response<Body> {
        let started = Instant::now();
        let method = req.method().clone();
        let path = req.uri().path().to_owned();
        // The dashboard's routes have no authorizer: a request API Gateway matched to one
        // of them is answered from the static files or not at all, whatever its path
        // decodes to, so no spelling of a path reaches data without auth.
        let ui_route = ui::is_ui_route_key(&req);
        match request::path_segments(&req) {
            Ok(segments) if ui_route || ui::is_ui_path(&segments) => {
                let answer = if ui::is_ui_path(&segments) {
                    ui::answer(&req, &segments, &self.config.ui_auth, &self.config.scopes)
                } else {
                    Err(ApiError::NotFound(format!("no dashboard file {path}")))
                };
                return answer.unwrap_or_else(|e| error_response(&e));
            }
            Err(e) if ui_route => return error_response(&e),
            _ => {}
        }
        let successor = request::path_segments(&req)
            .ok()
            .and_then(|s| routes::resolve(&method, &s).ok())
            .and_then(|m| m.route.successor());
        let mut result = self.dispatch(&req).await;
        // A read the budget refused ends the request as an error of its own: the answer is
        // the limit it passed, whatever the handler made of the refusal.
        if let Some(limit) = budget.passed()
            && !matches!(result, Err(ApiError::TooMuch { .. }))
        {
            result = Err(too_much_read(limit, &path));
        }
        let mut retry_after = None;
        let (status, body, allow) = match result {
            Ok((status, body)) => (status, body, None),
            Err(e) => {
                let status = e.status();
                if status.is_server_error() {
                    tracing::error!(%method, %path, error = ?e, "request failed");
                } else {
                    tracing::info!(%method, %path, status = status.as_u16(), error = %e, "request rejected");
                }
                let allow = match &e {
                    ApiError::MethodNotAllowed { allowed, .. } => Some(allowed.clone()),
                    _ => None,
                };
                if let ApiError::RateLimited { retry_after: s, .. } = &e {
                    retry_after = Some(*s);
                }
                (status, e.body(), allow)
            }
        };
        tracing::debug!(%method, %path, status = status.as_u16(), micros = started.elapsed().as_micros() as u64, "handled");
        let mut resp = json_response(status, &body, allow);
        if let Some(s) = retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if let Some(too_big) = oversized(&resp, budget.limits().response_bytes) {
            tracing::info!(%method, %path, error = %too_big, "request rejected");
            resp = error_response(&too_big);
        }
        if let Some(next) = successor {
            deprecated(&mut resp, &path, next);
        }
        resp
    }
}

/// The `too_much` error of a request whose reads passed `limit`.
fn too_much_read(limit: budget::Limit, path: &str) -> ApiError {
    let limits = budget::Budget::current_limits();
    let (what, max) = match limit {
        budget::Limit::ReadBytes => ("bytes of items", limits.read_bytes),
        _ => ("items", limits.items),
    };
    let narrow = if path.ends_with("/series") || path.ends_with("/aggregates") {
        "narrow with metrics=, a shorter from/to, or a coarser resolution"
    } else if path.ends_with("/readings") {
        "narrow with a shorter from/to or a smaller limit"
    } else if path.ends_with("/latest") {
        "ask for fewer ids"
    } else {
        "ask for a smaller limit or narrow the filters"
    };
    ApiError::TooMuch {
        limit,
        message: format!("answering this request would read more than {max} {what}; {narrow}"),
    }
}

/// The `too_much` error of a response whose body, as Lambda returns it (a JSON string),
/// would be over `max` bytes ([`budget::MAX_RESPONSE_BYTES`]).
fn oversized(resp: &Response<Body>, max: u64) -> Option<ApiError> {
    let Body::Text(text) = resp.body() else {
        return None;
    };
    let n = budget::escaped_len(text);
    (n > max).then(|| ApiError::TooMuch {
        limit: budget::Limit::ResponseBytes,
        message: format!(
            "this answer would be {n} bytes; at most {max} fit in one response: ask for a \
             smaller limit, fewer metrics=, a shorter from/to, or a coarser resolution"
        ),
    })
}

/// Marks the answer of a deprecated route (RFC 9745) and links the route that replaces it
/// (RFC 8288), so clients and gateways can find the callers still using it.
fn deprecated(resp: &mut Response<Body>, path: &str, successor: &str) {
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&format!("@{}", routes::DEPRECATED_SINCE)) {
        h.insert("deprecation", v);
    }
    let base = path.rsplit_once('/').map_or("", |(base, _)| base);
    if let Ok(v) =
        HeaderValue::from_str(&format!("<{base}/{successor}>; rel=\"successor-version\""))
    {
        h.insert(header::LINK, v);
    }
}

fn error_response(e: &ApiError) -> Response<Body> {
    let allow = match e {
        ApiError::MethodNotAllowed { allowed, .. } => Some(allowed.clone()),
        _ => None,
    };
    json_response(e.status(), &e.body(), allow)
}

fn json_response(status: StatusCode, body: &Value, allow: Option<String>) -> Response<Body> {
    let mut resp = Response::new(Body::Text(body.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(v) = allow.and_then(|a| HeaderValue::from_str(&a).ok()) {
        resp.headers_mut().insert(header::ALLOW, v);
    }
    resp
}
