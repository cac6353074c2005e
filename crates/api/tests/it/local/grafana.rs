//! The committed Grafana files (`grafana/`) work against the API: the provisioned data source
//! is the Infinity plugin with a bearer token from the environment, and every query of the
//! dashboard (its variables' and its panels'), with Grafana's macros substituted, returns 200
//! and the shape its Infinity columns read, against DynamoDB Local. The tag variable (a
//! group, `key:value`) feeds the group panel a `/groups/series?format=wide` of that group.

use crate::common::*;
use serde_json::Value;
use tidemark_schema::{GroupBucketItem, Period, Stats, Tag};

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
    // Every query of the dashboard goes to this data source (a text box variable has none).
    let uid = ds["uid"].as_str().unwrap();
    let d = dashboard();
    let mut sources = Vec::new();
    for v in d["templating"]["list"].as_array().unwrap() {
        if v["type"] != "textbox" {
            assert_eq!(v["type"], "query", "{v}");
            sources.push(&v["datasource"]);
        }
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

/// The group the tests pick, its members' hour (the sample readings, 14:00 and 14:01) and
/// another group's, as the exporter writes them.
const GROUP: &str = "site:north";

fn group_hour(tag: &str, values: &[f64]) -> GroupBucketItem {
    let at = ts("2026-04-20T14:00:00Z");
    let mut stats = Stats::at_sketched(at, values[0]);
    for (i, v) in values.iter().enumerate().skip(1) {
        stats.merge(&Stats::at_sketched(
            at.plus_millis(i as i64 * 60_000).unwrap(),
            *v,
        ));
    }
    GroupBucketItem::new(
        Tag::parse(tag).unwrap(),
        metric("temperature"),
        Period::Hourly.bucket(at),
        stats,
        values.len() as u64,
        now(),
    )
}

/// The sample table, with sensor_01 tagged [`GROUP`] (through the API) and the two groups'
/// closed hour of temperature.
async fn tagged_sample_table(label: &str) -> (tidemark_testkit::TestTable, tidemark_api::App) {
    let t = sample_table(label).await;
    let app = app(&t);
    let (status, body) = call(
        &app,
        "PUT",
        "/devices/sensor_01",
        r#"{"name": "Warehouse Temp A", "type": "sensor", "firmware": "2.1.0",
            "tags": {"site": "north"}}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    put(&t, &group_hour(GROUP, &[22.4, 22.5])).await;
    put(&t, &group_hour("site:south", &[30.0, 31.0, 32.0])).await;
    (t, app)
}

/// The value Grafana would give each variable: a query variable's is picked from what its
/// query lists (which must hold it), a text box's is typed.
async fn resolve_variables(app: &tidemark_api::App, d: &Value) -> Vec<(&'static str, String)> {
    let mut vars = vec![
        (
            "__from",
            ts("2026-04-20T12:00:00Z").epoch_millis().to_string(),
        ),
        ("__to", now().epoch_millis().to_string()),
    ];
    for v in d["templating"]["list"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        let (key, pick) = match name {
            "device" => ("device", "sensor_01"),
            "metric" => ("metric", "temperature"),
            "tag" => ("tag", GROUP),
            other => panic!("a variable the test does not know: {other}"),
        };
        if v["type"] == "textbox" {
            // Its default is a valid tag, so the dashboard opens on a query the API takes.
            let default = v["query"].as_str().unwrap_or_default();
            assert!(Tag::parse(default).is_ok(), "{name}: default {default:?}");
        } else {
            let rows = run(app, &v["query"], &vars).await;
            let column = v["query"]["columns"][0]["selector"].as_str().unwrap();
            let values: Vec<&str> = rows.iter().map(|r| r[column].as_str().unwrap()).collect();
            assert!(values.contains(&pick), "{name}: {values:?}");
        }
        vars.push((key, pick.to_owned()));
    }
    vars
}

#[tokio::test]
async fn every_query_of_the_dashboard_returns_the_shape_its_panel_reads() {
    // GIVEN the sample device and its readings (14:00 and 14:01), tagged site:north, and
    // Grafana's time range
    let (_t, app) = tagged_sample_table("api-grafana").await;
    let d = dashboard();
    // WHEN the variables are resolved in order, as Grafana does, THEN each lists values
    let vars = resolve_variables(&app, &d).await;
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

/// The panel whose query reads `path` for the tag variable's group.
fn panel_of_group<'a>(d: &'a Value, path: &str) -> &'a Value {
    d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| {
            p["targets"][0]["url"].as_str().is_some_and(|u| {
                u.split_once('?')
                    .is_some_and(|(at, q)| at == path && q.split('&').any(|kv| kv == "tag=${tag}"))
            })
        })
        .unwrap_or_else(|| panic!("no panel reads {path} of the tag variable's group"))
}

#[tokio::test]
async fn the_tag_variable_feeds_the_group_panel_its_groups_wide_series_and_member_list() {
    // GIVEN sensor_01 in site:north, and the closed hour of site:north and of site:south
    let (_t, app) = tagged_sample_table("api-grafana-group").await;
    let d = dashboard();
    // AND the dashboard's tag variable: a text box taking key:value
    let tag = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "tag")
        .expect("a tag variable");
    assert_eq!(tag["type"], "textbox");
    let vars = resolve_variables(&app, &d).await;
    // WHEN the group panel's query runs for tag=site:north
    let group = &panel_of_group(&d, "/groups/series")["targets"][0];
    let url = group["url"].as_str().unwrap();
    let params: Vec<&str> = url.split_once('?').unwrap().1.split('&').collect();
    for p in ["tag=${tag}", "metric=${metric}", "format=wide"] {
        assert!(params.contains(&p), "{url} lacks {p}");
    }
    assert_eq!(group["format"], "timeseries");
    let rows = run(&app, group, &vars).await;
    // THEN it draws site:north's hour, the fold of its members' readings, and nothing of
    // site:south's
    let hour: Vec<&Value> = rows
        .iter()
        .filter(|r| {
            r["time"]
                .as_str()
                .is_some_and(|t| ts(t) == ts("2026-04-20T14:00:00Z"))
        })
        .collect();
    assert_eq!(hour.len(), 1, "{rows:?}");
    let avg = hour[0]["temperature.avg"].as_f64().unwrap();
    assert!((avg - 22.45).abs() < 1e-9, "{rows:?}");
    assert_eq!(hour[0]["temperature.min"].as_f64(), Some(22.4));
    assert_eq!(hour[0]["temperature.max"].as_f64(), Some(22.5));
    let p95 = hour[0]["temperature.p95"].as_f64().unwrap();
    assert!((22.4 * 0.99..=22.5 * 1.01).contains(&p95), "{rows:?}");
    // AND the member table lists the group's devices
    let members = run(&app, &panel_of_group(&d, "/devices")["targets"][0], &vars).await;
    let fleet_table: Vec<&str> = members
        .iter()
        .map(|r| r["deviceId"].as_str().unwrap())
        .collect();
    assert!(fleet_table.contains(&"sensor_01"), "{fleet_table:?}");
}
