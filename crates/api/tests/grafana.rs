//! The committed Grafana files (`grafana/`) work against the API: the provisioned data source
//! is the Infinity plugin with a bearer token from the environment, and every query of the
//! dashboard (its variables' and its panels'), with Grafana's macros substituted, returns 200
//! and the shape its Infinity columns read, against DynamoDB Local.

mod common;

use common::*;
use serde_json::Value;

fn grafana(path: &str) -> String {
    let p = format!("{}/../../grafana/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn dashboard() -> Value {
    serde_json::from_str(&grafana("dashboards/tidemark.json")).expect("the dashboard is JSON")
}

#[test]
fn the_data_source_is_infinity_at_the_api_with_a_bearer_token_from_the_environment() {
    let file: serde_yaml::Value =
        serde_yaml::from_str(&grafana("provisioning/datasources/tidemark.yaml")).unwrap();
    let ds = &file["datasources"][0];
    assert_eq!(ds["type"].as_str(), Some("yesoreyeram-infinity-datasource"));
    assert_eq!(ds["url"].as_str(), Some("$TIDEMARK_API_URL"));
    assert_eq!(ds["jsonData"]["auth_method"].as_str(), Some("bearerToken"));
    assert_eq!(
        ds["secureJsonData"]["bearerToken"].as_str(),
        Some("$TIDEMARK_API_TOKEN")
    );
    // Every query of the dashboard goes to this data source.
    let uid = ds["uid"].as_str().unwrap();
    let d = dashboard();
    let mut sources = Vec::new();
    for v in d["templating"]["list"].as_array().unwrap() {
        sources.push(&v["datasource"]);
    }
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            sources.push(&t["datasource"]);
        }
    }
    for s in sources {
        assert_eq!(s["uid"].as_str(), Some(uid));
        assert_eq!(s["type"], ds["type"].as_str().unwrap());
    }
}

/// `url` with Grafana's macros and the dashboard's variables replaced; none may be left.
fn expand(url: &str, vars: &[(&str, String)]) -> String {
    let mut out = url.to_owned();
    for (name, value) in vars {
        out = out.replace(&format!("${{{name}}}"), value);
    }
    assert!(
        !out.contains('$'),
        "a macro the test does not know in {out}"
    );
    out
}

/// The objects an Infinity query reads: `root_selector`'s array, or the answer itself.
fn rows<'a>(query: &Value, body: &'a Value) -> &'a Vec<Value> {
    let root = query["root_selector"].as_str().unwrap_or("");
    let v = if root.is_empty() { body } else { &body[root] };
    v.as_array()
        .unwrap_or_else(|| panic!("{}: not an array at {root:?}: {body}", query["url"]))
}

/// Runs an Infinity query: 200, rows, and every column's selector in them with its type (a
/// timestamp column an RFC 3339 time).
async fn run(app: &tidemark_api::App, query: &Value, vars: &[(&str, String)]) -> Vec<Value> {
    assert_eq!(query["type"], "json");
    assert_eq!(query["source"], "url");
    let url = expand(query["url"].as_str().unwrap(), vars);
    let (status, body) = get(app, &url).await;
    assert_eq!(status, 200, "{url}: {body}");
    let rows = rows(query, &body).clone();
    assert!(!rows.is_empty(), "{url} returned no rows");
    for c in query["columns"].as_array().unwrap() {
        let selector = expand(c["selector"].as_str().unwrap(), vars);
        // Infinity shows a row without the field as empty; some row must have it.
        assert!(
            rows.iter().any(|r| r.get(&selector).is_some()),
            "{url}: no row has {selector}: {rows:?}"
        );
        for v in rows.iter().filter_map(|r| r.get(&selector)) {
            match c["type"].as_str().unwrap() {
                "timestamp" => assert!(
                    v.as_str()
                        .is_some_and(|s| tidemark_schema::Timestamp::parse_rfc3339(s).is_ok()),
                    "{url}: {selector} = {v}"
                ),
                "number" => assert!(v.is_number() || v.is_null(), "{url}: {selector} = {v}"),
                _ => assert!(v.is_string(), "{url}: {selector} = {v}"),
            }
        }
    }
    rows
}

#[tokio::test]
async fn every_query_of_the_dashboard_returns_the_shape_its_panel_reads() {
    // GIVEN the sample device and its readings (14:00 and 14:01), and Grafana's time range
    let t = sample_table("api-grafana").await;
    let app = app(&t);
    let mut vars = vec![
        (
            "__from",
            ts("2026-04-20T12:00:00Z").epoch_millis().to_string(),
        ),
        ("__to", now().epoch_millis().to_string()),
    ];
    let d = dashboard();
    // WHEN the variables are resolved in order, as Grafana does, THEN each lists values
    for v in d["templating"]["list"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        let rows = run(&app, &v["query"], &vars).await;
        let column = v["query"]["columns"][0]["selector"].as_str().unwrap();
        let values: Vec<&str> = rows.iter().map(|r| r[column].as_str().unwrap()).collect();
        let pick = match name {
            "device" => "sensor_01",
            _ => "temperature",
        };
        assert!(values.contains(&pick), "{name}: {values:?}");
        vars.push((name, pick.to_owned()));
    }
    // AND every panel's query returns rows holding its columns
    for p in d["panels"].as_array().unwrap() {
        for target in p["targets"].as_array().unwrap() {
            let rows = run(&app, target, &vars).await;
            if target["format"] == "timeseries" {
                // the readings' bucket has a value
                assert!(
                    rows.iter()
                        .any(|r| r.as_object().unwrap().values().any(Value::is_number)),
                    "{}: {rows:?}",
                    p["title"]
                );
            }
        }
    }
}
