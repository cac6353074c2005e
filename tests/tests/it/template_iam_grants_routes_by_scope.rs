//! With IAM auth, the template's ApiRead/ApiWrite/ApiAdmin managed policies grant each route
//! of `crates/api/src/routes.rs` exactly as its JWT scope does: the policy of the route's
//! scope allows it, the other two do not. (The JWT side is checked in
//! `template_wires_events_and_api.rs`.)

use std::path::PathBuf;

use serde_yaml::Value;
use tidemark_api::routes::{Scope, scopes};

fn template() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../template.yaml");
    let text = std::fs::read_to_string(path).expect("read template");
    serde_yaml::from_str(&text).expect("template.yaml is YAML")
}

/// The `<METHOD>/<path>` patterns a managed policy allows (after `${HttpApi}/$default/`).
fn granted(t: &Value, policy: &str) -> Vec<String> {
    let statements = t["Resources"][policy]["Properties"]["PolicyDocument"]["Statement"]
        .as_sequence()
        .unwrap_or_else(|| panic!("{policy} has no statements"));
    statements
        .iter()
        .flat_map(|s| s["Resource"].as_sequence().cloned().unwrap_or_default())
        .map(|r| match r {
            Value::Tagged(t) => t.value.as_str().unwrap_or_default().to_owned(),
            other => other.as_str().unwrap_or_default().to_owned(),
        })
        .map(|arn| {
            arn.split_once("${HttpApi}/$default/")
                .unwrap_or_else(|| panic!("{policy}: {arn} is not a route of the HttpApi"))
                .1
                .to_owned()
        })
        .collect()
}

/// IAM's wildcard match: `*` matches any run of characters, `/` included.
fn matches(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, rest)) => {
            text.starts_with(head)
                && (0..=text.len() - head.len()).any(|i| {
                    text.is_char_boundary(head.len() + i) && matches(rest, &text[head.len() + i..])
                })
        }
    }
}

#[test]
fn each_route_is_granted_by_the_managed_policy_of_its_scope_and_no_other() {
    let t = template();
    let policies = [
        (Scope::Read, "ApiReadPolicy"),
        (Scope::Write, "ApiWritePolicy"),
        (Scope::Admin, "ApiAdminPolicy"),
    ];
    let grants: Vec<(Scope, &str, Vec<String>)> = policies
        .iter()
        .map(|(s, p)| (*s, *p, granted(&t, p)))
        .collect();
    for (method, template_path, scope) in scopes() {
        // A concrete request path of the route: each `{param}` a plain segment.
        let path: Vec<&str> = template_path
            .trim_start_matches('/')
            .split('/')
            .map(|seg| if seg.starts_with('{') { "p1" } else { seg })
            .collect();
        let request = format!("{}/{}", method.as_str(), path.join("/"));
        for (s, policy, patterns) in &grants {
            let allowed = patterns.iter().any(|p| matches(p, &request));
            assert_eq!(
                allowed,
                *s == scope,
                "{method} {template_path} (scope {}): {policy} {}",
                scope.default_name(),
                if allowed {
                    "grants it"
                } else {
                    "does not grant it"
                }
            );
        }
    }
}

#[test]
fn the_wildcard_match_is_iams() {
    assert!(matches("GET/devices/*", "GET/devices/a/alerts"));
    assert!(matches(
        "POST/devices/*/alerts/*/ack",
        "POST/devices/a/alerts/b/ack"
    ));
    assert!(!matches(
        "POST/devices/*/alerts/*/ack",
        "POST/devices/a/alerts/b/snooze"
    ));
    assert!(!matches("GET/devices", "GET/devices/a"));
    assert!(matches("GET/latest", "GET/latest"));
}
