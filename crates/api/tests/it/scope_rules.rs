//! Every route in `openapi.yaml` has a scope decision (docs/design.md §6 "Scoped access"):
//! a row in [`tidemark_api::access::RULES`] saying how it keeps to a caller limited to some
//! sites. A route added to the spec or the router without one fails here.

use std::collections::BTreeSet;

use serde_yaml::Value;
use tidemark_api::access::RULES;

const METHODS: [&str; 7] = ["get", "put", "post", "delete", "patch", "head", "options"];

fn documented() -> BTreeSet<(String, String)> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml"))
        .expect("openapi.yaml exists");
    let spec: Value = serde_yaml::from_str(&text).expect("openapi.yaml is YAML");
    let mut out = BTreeSet::new();
    for (path, item) in spec["paths"].as_mapping().expect("paths") {
        for m in METHODS {
            if item.get(m).is_some() {
                out.insert((m.to_uppercase(), path.as_str().unwrap().to_owned()));
            }
        }
    }
    out
}

#[test]
fn every_route_in_the_spec_has_a_scope_decision_and_every_decision_a_route() {
    let decided: BTreeSet<(String, String)> = RULES
        .iter()
        .map(|(m, p, _)| (m.to_string(), (*p).to_owned()))
        .collect();
    assert_eq!(RULES.len(), decided.len(), "one decision per route");
    let spec = documented();
    let undecided: Vec<_> = spec.difference(&decided).collect();
    assert!(
        undecided.is_empty(),
        "routes in openapi.yaml without a scope decision in access::RULES: {undecided:?}"
    );
    let stale: Vec<_> = decided.difference(&spec).collect();
    assert!(
        stale.is_empty(),
        "scope decisions for routes openapi.yaml does not have: {stale:?}"
    );
    let served: BTreeSet<(String, String)> = tidemark_api::routes()
        .into_iter()
        .map(|(m, p)| (m.to_string(), p.to_owned()))
        .collect();
    assert_eq!(
        decided, served,
        "the router serves exactly the decided routes"
    );
}

#[test]
fn every_route_naming_a_device_is_device_scoped() {
    use tidemark_api::access::Rule;
    for (m, p, rule) in RULES {
        if p.contains("{id}") {
            assert_eq!(*rule, Rule::DeviceScoped, "{m} {p}");
        }
    }
}
