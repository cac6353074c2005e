//! `openapi.yaml` describes exactly the routes the router serves, with the same path and
//! query parameters, and every operation documents its errors.

use std::collections::BTreeSet;

use serde_yaml::Value;

fn spec() -> Value {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml"))
        .expect("openapi.yaml exists");
    serde_yaml::from_str(&text).expect("openapi.yaml is YAML")
}

const METHODS: [&str; 7] = ["get", "put", "post", "delete", "patch", "head", "options"];

/// Follows a local `$ref` (`#/components/...`).
fn resolve<'a>(root: &'a Value, v: &'a Value) -> &'a Value {
    match v.get("$ref").and_then(Value::as_str) {
        Some(r) => r
            .trim_start_matches("#/")
            .split('/')
            .fold(root, |node, part| &node[part]),
        None => v,
    }
}

#[test]
fn the_spec_lists_exactly_the_router_routes() {
    let spec = spec();
    assert!(spec["openapi"].as_str().unwrap().starts_with("3."));
    let mut documented = BTreeSet::new();
    for (path, item) in spec["paths"].as_mapping().unwrap() {
        for m in METHODS {
            if item.get(m).is_some() {
                documented.insert((m.to_uppercase(), path.as_str().unwrap().to_owned()));
            }
        }
    }
    let served: BTreeSet<(String, String)> = tidemark_api::routes()
        .into_iter()
        .map(|(m, p)| (m.to_string(), p.to_owned()))
        .collect();
    assert_eq!(documented, served);
}

#[test]
fn every_operation_documents_its_parameters_and_errors() {
    let spec = spec();
    for (method, path) in tidemark_api::routes() {
        let item = &spec["paths"][path];
        let op = &item[method.as_str().to_lowercase().as_str()];
        let mut path_params = BTreeSet::new();
        let mut query_params = BTreeSet::new();
        let declared = item
            .get("parameters")
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
            .chain(
                op.get("parameters")
                    .and_then(Value::as_sequence)
                    .into_iter()
                    .flatten(),
            );
        for p in declared {
            let p = resolve(&spec, p);
            let name = p["name"].as_str().unwrap().to_owned();
            match p["in"].as_str().unwrap() {
                "path" => path_params.insert(name),
                "query" => query_params.insert(name),
                other => panic!("{path}: parameter in {other}"),
            };
        }
        let template_params: BTreeSet<String> = path
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .map(str::to_owned)
            .collect();
        assert_eq!(
            path_params, template_params,
            "{method} {path}: path parameters"
        );
        let taken: BTreeSet<String> = tidemark_api::query_parameters(&method, path)
            .unwrap()
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(query_params, taken, "{method} {path}: query parameters");
        let responses = op["responses"].as_mapping().unwrap();
        // 429: every route is counted against the caller's rate limit when one is set.
        for code in ["400", "429", "500"] {
            assert!(
                responses.contains_key(code),
                "{method} {path} does not document {code}"
            );
        }
        if path.contains("{id}") && method != http::Method::PUT {
            assert!(responses.contains_key("404"), "{method} {path}: 404");
        }
        for (code, r) in responses {
            let r = resolve(&spec, r);
            let schema = &r["content"]["application/json"]["schema"];
            assert!(
                !schema.is_null(),
                "{method} {path} {code:?}: no JSON schema"
            );
        }
    }
}

#[test]
fn the_spec_marks_deprecated_exactly_the_routes_that_answer_as_deprecated() {
    let spec = spec();
    for (method, path) in tidemark_api::routes() {
        let op = &spec["paths"][path][method.as_str().to_lowercase().as_str()];
        let segments: Vec<String> = path
            .trim_start_matches('/')
            .split('/')
            .map(str::to_owned)
            .collect();
        let route = tidemark_api::routes::resolve(&method, &segments)
            .unwrap()
            .route;
        assert_eq!(
            op.get("deprecated")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            route.successor().is_some(),
            "{method} {path}"
        );
    }
}
