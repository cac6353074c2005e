//! The route table (docs/design.md §6). `openapi.yaml` must list exactly these; a test checks it.

use http::Method;

use crate::error::ApiError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    ListDevices,
    PutDevice,
    GetDevice,
    GetShards,
    PutShards,
    GetLayout,
    PutLayout,
    Readings,
    LatestReading,
    LatestOfDevices,
    DeviceAlerts,
    AckAlert,
    SnoozeAlert,
    UnsnoozeAlert,
    GroupAckAlert,
    GroupSnoozeAlert,
    GroupUnsnoozeAlert,
    Alerts,
    Aggregates,
    Series,
    GroupSeries,
    Quarantine,
}

impl Route {
    /// For a deprecated route, the last segment of its successor's path (the rest is the
    /// same): `/shards` only ever said half of what `/layout` says.
    pub fn successor(self) -> Option<&'static str> {
        match self {
            Route::GetShards | Route::PutShards => Some("layout"),
            _ => None,
        }
    }
}

/// When the deprecated routes were deprecated (2026-11-26T00:00:00Z), for the `Deprecation`
/// header (RFC 9745: `@<epoch seconds>`).
pub const DEPRECATED_SINCE: i64 = 1_795_651_200;

/// The JWT scope a route needs (template.yaml's HttpApi definition asks API Gateway for the
/// same; a test holds them equal). Quarantine is apart because it holds raw device payloads.
/// What a scope is called in tokens is the deployment's choice ([`ScopeNames`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Read,
    Write,
    Admin,
}

impl Scope {
    /// The name when the deployment does not choose one (the template's parameter defaults).
    pub fn default_name(self) -> &'static str {
        match self {
            Scope::Read => "tidemark/read",
            Scope::Write => "tidemark/write",
            Scope::Admin => "tidemark/admin",
        }
    }
}

/// What each scope is called in the deployment's access tokens (`scope` or `scp` claim):
/// issuers name them differently (a Cognito resource server prefixes its identifier, Entra
/// ID puts the bare name in `scp`), so the template takes them as parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeNames {
    pub read: String,
    pub write: String,
    pub admin: String,
}

impl Default for ScopeNames {
    fn default() -> Self {
        ScopeNames {
            read: Scope::Read.default_name().into(),
            write: Scope::Write.default_name().into(),
            admin: Scope::Admin.default_name().into(),
        }
    }
}

impl ScopeNames {
    pub fn name(&self, scope: Scope) -> &str {
        match scope {
            Scope::Read => &self.read,
            Scope::Write => &self.write,
            Scope::Admin => &self.admin,
        }
    }
}

impl Route {
    pub fn scope(self) -> Scope {
        match self {
            Route::PutDevice
            | Route::PutShards
            | Route::PutLayout
            | Route::AckAlert
            | Route::SnoozeAlert
            | Route::UnsnoozeAlert
            | Route::GroupAckAlert
            | Route::GroupSnoozeAlert
            | Route::GroupUnsnoozeAlert => Scope::Write,
            Route::Quarantine => Scope::Admin,
            Route::ListDevices
            | Route::GetDevice
            | Route::GetShards
            | Route::GetLayout
            | Route::Readings
            | Route::LatestReading
            | Route::LatestOfDevices
            | Route::DeviceAlerts
            | Route::Alerts
            | Route::Aggregates
            | Route::Series
            | Route::GroupSeries => Scope::Read,
        }
    }
}

/// The scope each (method, path template) needs, for the template check.
pub fn scopes() -> Vec<(Method, &'static str, Scope)> {
    TABLE
        .iter()
        .map(|(m, p, r, _)| (m.clone(), *p, r.scope()))
        .collect()
}

/// (method, path template, route, query parameters it takes).
const TABLE: &[(Method, &str, Route, &[&str])] = &[
    (
        Method::GET,
        "/devices",
        Route::ListDevices,
        &["status", "connectivity", "tag", "limit", "cursor"],
    ),
    (Method::PUT, "/devices/{id}", Route::PutDevice, &[]),
    (Method::GET, "/devices/{id}", Route::GetDevice, &[]),
    (Method::GET, "/devices/{id}/shards", Route::GetShards, &[]),
    (Method::PUT, "/devices/{id}/shards", Route::PutShards, &[]),
    (Method::GET, "/devices/{id}/layout", Route::GetLayout, &[]),
    (Method::PUT, "/devices/{id}/layout", Route::PutLayout, &[]),
    (
        Method::GET,
        "/devices/{id}/readings",
        Route::Readings,
        &["from", "to", "limit", "cursor", "order"],
    ),
    (
        Method::GET,
        "/devices/{id}/readings/latest",
        Route::LatestReading,
        &[],
    ),
    (
        Method::GET,
        "/latest",
        Route::LatestOfDevices,
        &["ids", "tag", "limit", "cursor"],
    ),
    (
        Method::GET,
        "/devices/{id}/alerts",
        Route::DeviceAlerts,
        &["limit", "cursor"],
    ),
    (
        Method::POST,
        "/devices/{id}/alerts/{alertId}/ack",
        Route::AckAlert,
        &[],
    ),
    (
        Method::POST,
        "/devices/{id}/alerts/{alertId}/snooze",
        Route::SnoozeAlert,
        &[],
    ),
    (
        Method::DELETE,
        "/devices/{id}/alerts/{alertId}/snooze",
        Route::UnsnoozeAlert,
        &[],
    ),
    (
        Method::POST,
        "/groups/{group}/alerts/{alertId}/ack",
        Route::GroupAckAlert,
        &[],
    ),
    (
        Method::POST,
        "/groups/{group}/alerts/{alertId}/snooze",
        Route::GroupSnoozeAlert,
        &[],
    ),
    (
        Method::DELETE,
        "/groups/{group}/alerts/{alertId}/snooze",
        Route::GroupUnsnoozeAlert,
        &[],
    ),
    (
        Method::GET,
        "/alerts",
        Route::Alerts,
        &["severity", "state", "tag", "limit", "cursor"],
    ),
    (
        Method::GET,
        "/devices/{id}/aggregates",
        Route::Aggregates,
        &["period", "from", "to", "limit", "cursor", "order"],
    ),
    (
        Method::GET,
        "/devices/{id}/series",
        Route::Series,
        &[
            "from",
            "to",
            "resolution",
            "maxPoints",
            "metrics",
            "aggregates",
            "fill",
            "format",
            "limit",
            "cursor",
        ],
    ),
    (
        Method::GET,
        "/groups/series",
        Route::GroupSeries,
        &[
            "tag",
            "metric",
            "from",
            "to",
            "resolution",
            "maxPoints",
            "aggregates",
            "fill",
            "format",
            "limit",
            "cursor",
        ],
    ),
    (
        Method::GET,
        "/quarantine",
        Route::Quarantine,
        &["day", "reason", "limit", "cursor"],
    ),
];

/// Every (method, path template) the API serves.
pub fn routes() -> Vec<(Method, &'static str)> {
    TABLE.iter().map(|(m, p, _, _)| (m.clone(), *p)).collect()
}

/// The query parameters a route takes (any other is a 400), for the OpenAPI check.
pub fn query_parameters(method: &Method, template: &str) -> Option<&'static [&'static str]> {
    TABLE
        .iter()
        .find(|(m, p, _, _)| m == method && *p == template)
        .map(|(_, _, _, q)| *q)
}

/// A matched route with its path parameters in template order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matched {
    pub route: Route,
    pub template: &'static str,
    pub params: Vec<String>,
    /// The query parameters the route takes.
    pub query: &'static [&'static str],
}

fn match_template(template: &str, segments: &[String]) -> Option<Vec<String>> {
    let parts: Vec<&str> = template.trim_start_matches('/').split('/').collect();
    if parts.len() != segments.len() {
        return None;
    }
    let mut params = Vec::new();
    for (p, s) in parts.iter().zip(segments) {
        if p.starts_with('{') {
            params.push(s.clone());
        } else if p != s {
            return None;
        }
    }
    Some(params)
}

/// 404 when no template matches the path, 405 (naming the allowed methods) when one matches
/// but not with this method.
pub fn resolve(method: &Method, segments: &[String]) -> Result<Matched, ApiError> {
    let mut allowed = Vec::new();
    for (m, template, route, query) in TABLE {
        if let Some(params) = match_template(template, segments) {
            if m == method {
                return Ok(Matched {
                    route: *route,
                    template,
                    params,
                    query,
                });
            }
            allowed.push(m.as_str());
        }
    }
    let path = format!("/{}", segments.join("/"));
    if allowed.is_empty() {
        Err(ApiError::NotFound(format!("no route for {path}")))
    } else {
        Err(ApiError::MethodNotAllowed {
            method: method.to_string(),
            path,
            allowed: allowed.join(", "),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(p: &str) -> Vec<String> {
        p.trim_start_matches('/')
            .split('/')
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn literal_segments_win_only_where_they_match() {
        let m = resolve(&Method::GET, &segs("/devices/s1/readings/latest")).unwrap();
        assert_eq!(
            (m.route, m.params),
            (Route::LatestReading, vec!["s1".into()])
        );
        let m = resolve(&Method::POST, &segs("/devices/s1/alerts/a1/ack")).unwrap();
        assert_eq!(m.params, vec!["s1".to_string(), "a1".to_string()]);
        let m = resolve(&Method::DELETE, &segs("/devices/s1/alerts/a1/snooze")).unwrap();
        assert_eq!(
            (m.route, m.params),
            (Route::UnsnoozeAlert, vec!["s1".into(), "a1".into()])
        );
    }

    #[test]
    fn unknown_paths_are_404_and_wrong_methods_405() {
        assert!(matches!(
            resolve(&Method::GET, &segs("/nope")),
            Err(ApiError::NotFound(_))
        ));
        match resolve(&Method::DELETE, &segs("/devices/s1")) {
            Err(ApiError::MethodNotAllowed { allowed, .. }) => assert_eq!(allowed, "PUT, GET"),
            other => panic!("{other:?}"),
        }
    }
}
