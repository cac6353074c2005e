//! Scoped access (docs/design.md §6 "Scoped access", docs/decisions/0009-scoped-access.md):
//! which devices a caller may see and change, from one JWT claim.
//!
//! The claim the deployment names (`SCOPE_CLAIM`, default `tidemark:sites`) lists the values
//! of the device tag `site` the caller may see; `*` means all, and a token without the claim
//! sees the whole fleet. [`Scope`] is built once per request from the claims API Gateway's
//! JWT authorizer passed on ([`Scope::of_request`]); every route then keeps to it by the
//! rule [`RULES`] gives it ([`Rule`]), and a route without a rule is refused to a scoped
//! caller (a test holds [`RULES`] to `openapi.yaml`).
//!
//! A device's site is its current `site` tag: the latest one declared (`PUT /devices/{id}`),
//! as the device item holds it. Access follows it: when the tag changes, the device (all its
//! history) leaves the old site's callers and joins the new site's at once.

use std::collections::BTreeSet;

use http::Method;
use lambda_http::request::RequestContext;
use lambda_http::{Request, RequestExt};
use tidemark_schema::{Tag, TagKey, TagValue, Tags};

use crate::config::{ApiConfig, UiAuth};
use crate::error::ApiError;

/// The devices a caller may see: all, or those whose `site` tag is one of a set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    All,
    /// Devices whose current `site` tag is one of these (a device without one: none).
    Sites(BTreeSet<TagValue>),
}

tokio::task_local! {
    /// The scope of the request being answered ([`App::dispatch`](crate::App) sets it).
    static CALLER: Scope;
}

fn site_key() -> TagKey {
    // "site" is a valid key; the fallback is never taken.
    TagKey::new(TagKey::SITE).unwrap_or_else(|_| unreachable!())
}

impl Scope {
    /// The scope a claim's value gives. API Gateway passes a list claim as text: `[A B]` (its
    /// rendering of a JSON array), and a JSON array (`["A","B"]`), `A,B` and `A B` are read
    /// alike. `*` anywhere means all. Values that cannot be tag values match no device and
    /// are dropped, so a malformed claim narrows, never widens.
    pub fn from_claim(raw: &str) -> Scope {
        let raw = raw.trim();
        let inner = raw
            .strip_prefix('[')
            .and_then(|r| r.strip_suffix(']'))
            .unwrap_or(raw);
        let mut sites = BTreeSet::new();
        for part in inner.split(|c: char| c == ',' || c.is_whitespace()) {
            let part = part.trim().trim_matches('"');
            if part == "*" {
                return Scope::All;
            }
            if let Ok(v) = TagValue::new(part) {
                sites.insert(v);
            }
        }
        Scope::Sites(sites)
    }

    /// The caller's scope. With JWT claims (API Gateway's JWT authorizer), from the claim
    /// `config.scope_claim` (absent: [`Scope::All`]). Without them: when the deployment uses
    /// the JWT authorizer (`UI_AUTH=jwt`) the request did not come through it and is refused
    /// (401); with IAM auth or on a local stack there is no claim, and the caller sees all.
    pub fn of_request(req: &Request, config: &ApiConfig) -> Result<Scope, ApiError> {
        let jwt = match req.request_context_ref() {
            Some(RequestContext::ApiGatewayV2(ctx)) => {
                ctx.authorizer.as_ref().and_then(|a| a.jwt.as_ref())
            }
            _ => None,
        };
        match jwt {
            Some(jwt) => Ok(jwt
                .claims
                .get(&config.scope_claim)
                .map_or(Scope::All, |v| Scope::from_claim(v))),
            None if matches!(config.ui_auth, UiAuth::Jwt(_)) => Err(ApiError::Unauthorized(
                "this deployment takes JWT access tokens; the request carries no verified \
                 token claims"
                    .into(),
            )),
            None => Ok(Scope::All),
        }
    }

    /// Whether a device with these (current) tags is in scope.
    pub fn sees(&self, tags: &Tags) -> bool {
        self.sees_site(tags.get(&site_key()))
    }

    /// Whether a device whose `site` tag is `site` is in scope.
    pub fn sees_site(&self, site: Option<&TagValue>) -> bool {
        match self {
            Scope::All => true,
            Scope::Sites(sites) => site.is_some_and(|s| sites.contains(s)),
        }
    }

    /// Whether a group (`GET /groups/series?tag=`) is one of the caller's: any group for a
    /// fleet-wide caller, only `site:<one of its sites>` for a scoped one (another group's
    /// rollups mix devices of sites the caller may not see).
    pub fn sees_group(&self, tag: &Tag) -> bool {
        match self {
            Scope::All => true,
            Scope::Sites(_) => tag.key.as_str() == TagKey::SITE && self.sees_site(Some(&tag.value)),
        }
    }

    /// The `site` tags a scoped caller's listings walk, in order (`None`: fleet-wide).
    pub fn site_tags(&self) -> Option<Vec<Tag>> {
        match self {
            Scope::All => None,
            Scope::Sites(sites) => Some(
                sites
                    .iter()
                    .map(|v| Tag::new(site_key(), v.clone()))
                    .collect(),
            ),
        }
    }

    /// What a cursor is bound to besides its query (`None` for a fleet-wide caller, whose
    /// cursors are as they always were): a cursor made for one scope does not open for
    /// another ([`crate::cursor::CursorKey::bound_to`]).
    pub fn binding(&self) -> Option<String> {
        match self {
            Scope::All => None,
            Scope::Sites(sites) => Some(format!(
                "sites:{}",
                sites
                    .iter()
                    .map(TagValue::as_str)
                    .collect::<Vec<_>>()
                    .join(",")
            )),
        }
    }

    /// Runs `f` as the request of a caller with this scope ([`Scope::caller`]).
    pub async fn serve<F: std::future::Future>(self, f: F) -> F::Output {
        CALLER.scope(self, f).await
    }

    /// The scope of the request being answered; outside one (never, in the API), no device.
    pub fn caller() -> Scope {
        CALLER
            .try_with(Scope::clone)
            .unwrap_or_else(|_| Scope::Sites(BTreeSet::new()))
    }
}

/// How a route keeps to the caller's scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Names one device (`{id}`): a device outside the caller's sites answers 404, exactly as
    /// a missing one; a write may not move a device out of them.
    DeviceScoped,
    /// A list over many devices: shows only the caller's devices.
    FilteredList,
    /// A group's rollups or alert: only groups of the caller's sites (`site:<value>`).
    SiteGroup,
    /// Fleet-wide, not divisible by site: refused (403) to a scoped caller.
    FleetWideAdminOnly,
    /// Holds nothing of any device.
    Public,
}

/// Every route's rule, by (method, path template) as `openapi.yaml` names them. A route the
/// router serves without a row here is [`Rule::FleetWideAdminOnly`] ([`rule`]); a test fails
/// until it has one.
pub const RULES: &[(Method, &str, Rule)] = &[
    (Method::GET, "/devices", Rule::FilteredList),
    (Method::PUT, "/devices/{id}", Rule::DeviceScoped),
    (Method::GET, "/devices/{id}", Rule::DeviceScoped),
    (Method::GET, "/devices/{id}/shards", Rule::DeviceScoped),
    (Method::PUT, "/devices/{id}/shards", Rule::DeviceScoped),
    (Method::GET, "/devices/{id}/layout", Rule::DeviceScoped),
    (Method::PUT, "/devices/{id}/layout", Rule::DeviceScoped),
    (Method::GET, "/devices/{id}/readings", Rule::DeviceScoped),
    (
        Method::GET,
        "/devices/{id}/readings/latest",
        Rule::DeviceScoped,
    ),
    (Method::GET, "/latest", Rule::FilteredList),
    (Method::GET, "/devices/{id}/alerts", Rule::DeviceScoped),
    (
        Method::POST,
        "/devices/{id}/alerts/{alertId}/ack",
        Rule::DeviceScoped,
    ),
    (
        Method::POST,
        "/devices/{id}/alerts/{alertId}/snooze",
        Rule::DeviceScoped,
    ),
    (
        Method::DELETE,
        "/devices/{id}/alerts/{alertId}/snooze",
        Rule::DeviceScoped,
    ),
    (
        Method::POST,
        "/groups/{group}/alerts/{alertId}/ack",
        Rule::SiteGroup,
    ),
    (
        Method::POST,
        "/groups/{group}/alerts/{alertId}/snooze",
        Rule::SiteGroup,
    ),
    (
        Method::DELETE,
        "/groups/{group}/alerts/{alertId}/snooze",
        Rule::SiteGroup,
    ),
    (Method::GET, "/alerts", Rule::FilteredList),
    (Method::GET, "/devices/{id}/aggregates", Rule::DeviceScoped),
    (Method::GET, "/devices/{id}/series", Rule::DeviceScoped),
    (Method::GET, "/groups/series", Rule::SiteGroup),
    (Method::GET, "/quarantine", Rule::FilteredList),
];

/// The rule of a route; one without a row is fleet-wide (refused to scoped callers).
pub fn rule(method: &Method, template: &str) -> Rule {
    RULES
        .iter()
        .find(|(m, p, _)| m == method && *p == template)
        .map_or(Rule::FleetWideAdminOnly, |(_, _, r)| *r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sites(v: &[&str]) -> Scope {
        Scope::Sites(v.iter().map(|s| TagValue::new(s).unwrap()).collect())
    }

    #[test]
    fn a_claim_reads_as_api_gateway_and_json_render_lists() {
        for raw in ["[A B]", r#"["A","B"]"#, "A,B", "A B", " [A, B] "] {
            assert_eq!(Scope::from_claim(raw), sites(&["A", "B"]), "{raw}");
        }
        assert_eq!(Scope::from_claim("plant-7"), sites(&["plant-7"]));
        assert_eq!(Scope::from_claim("*"), Scope::All);
        assert_eq!(Scope::from_claim("[A *]"), Scope::All);
    }

    #[test]
    fn a_malformed_claim_narrows_never_widens() {
        assert_eq!(Scope::from_claim(""), sites(&[]));
        assert_eq!(Scope::from_claim("[]"), sites(&[]));
        assert_eq!(Scope::from_claim("A {bad} B"), sites(&["A", "B"]));
        let none = sites(&[]);
        assert!(!none.sees_site(None));
        assert!(!none.sees_site(Some(&TagValue::new("A").unwrap())));
    }

    #[test]
    fn a_device_without_a_site_is_seen_only_fleet_wide() {
        assert!(Scope::All.sees(&Tags::empty()));
        assert!(!sites(&["A"]).sees(&Tags::empty()));
    }

    #[test]
    fn only_site_groups_of_the_callers_sites_are_its_groups() {
        let a = sites(&["A"]);
        assert!(a.sees_group(&Tag::parse("site:A").unwrap()));
        assert!(!a.sees_group(&Tag::parse("site:B").unwrap()));
        assert!(!a.sees_group(&Tag::parse("line:A").unwrap()));
        assert!(Scope::All.sees_group(&Tag::parse("line:A").unwrap()));
    }

    #[test]
    fn scopes_bind_cursors_apart_and_fleet_wide_cursors_stay_as_they_were() {
        assert_eq!(Scope::All.binding(), None);
        assert_ne!(sites(&["A"]).binding(), sites(&["B"]).binding());
        assert_ne!(sites(&["A"]).binding(), sites(&["A", "B"]).binding());
        assert_ne!(sites(&[]).binding(), None);
    }

    #[test]
    fn a_route_without_a_rule_is_refused_to_scoped_callers() {
        assert_eq!(rule(&Method::GET, "/nowhere"), Rule::FleetWideAdminOnly);
        assert_eq!(rule(&Method::GET, "/devices/{id}"), Rule::DeviceScoped);
    }
}
