//! Alert rules over time through the API against DynamoDB Local: a device's
//! `rules` stored on its item and shown back, the 400s a bad rule gets, `keepFiringForSeconds`
//! on thresholds, and a rule's alert (`kind` and `ruleSpec`, the tagged alert ID) listed,
//! acknowledged and snoozed like a threshold's.

use crate::common::*;
use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{Value, json};
use tidemark_schema::table::attr;
use tidemark_schema::{AlertId, AlertItem, AlertRule, EntityKey, RuleSpec, Severity, keys};
use tidemark_testkit::TestTable;

/// The issue's three examples.
fn three_rules() -> Value {
    json!([
        {"metric":"temperature","aggregate":"avg","window":"5m","above":30,"forSeconds":600},
        {"metric":"pressure","rate":"per_minute","above":5},
        {"metric":"flow","unchangedForSeconds":3600,"keepFiringForSeconds":300}
    ])
}

/// `rules` as the API shows them: each with its severity (`warning` when not given).
fn shown(rules: &Value) -> Value {
    let mut v = rules.clone();
    for r in v.as_array_mut().unwrap() {
        r["severity"] = json!("warning");
    }
    v
}

fn error_param(body: &Value) -> String {
    let m = body["error"]["message"].as_str().unwrap_or_default();
    m.strip_prefix("invalid ")
        .and_then(|r| r.split(':').next())
        .unwrap_or_default()
        .to_owned()
}

/// The device item's `rules` attribute as stored.
async fn stored_rules(t: &TestTable, device: &str) -> Option<AttributeValue> {
    let key = EntityKey::Device(dev(device)).key();
    let item = t
        .client
        .get_item()
        .table_name(&t.name)
        .key(attr::PK, AttributeValue::S(key.pk))
        .key(attr::SK, AttributeValue::S(key.sk))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    item.get("rules").cloned()
}

#[tokio::test]
async fn rules_round_trip_through_the_device_item_and_null_means_the_fleets() {
    let t = TestTable::new("api-rules").await;
    let app = app(&t);
    // GIVEN a device registered with the issue's three rules
    let body = json!({"percentiles": true, "rules": three_rules()}).to_string();
    let (status, put_body) = call(&app, "PUT", "/devices/pump_01", &body).await;
    // THEN the answer and a later GET show them, as the schema writes them
    assert_eq!(status, 201, "{put_body}");
    assert_eq!(put_body["rules"], shown(&three_rules()));
    let (status, got) = get(&app, "/devices/pump_01").await;
    assert_eq!(status, 200);
    assert_eq!(got["rules"], shown(&three_rules()));
    // AND the item holds a list of three under `rules`, which reads back as the same rules
    let Some(AttributeValue::L(stored)) = stored_rules(&t, "pump_01").await else {
        panic!("rules is not stored as a list");
    };
    assert_eq!(stored.len(), 3);
    let back: Vec<RuleSpec> =
        serde_dynamo::from_attribute_value(AttributeValue::L(stored)).unwrap();
    assert_eq!(
        back,
        tidemark_schema::rules::parse_rules(&three_rules()).unwrap()
    );

    // WHEN registered with `[]` THEN it has no rules: an empty list, not the fleet's
    let (status, b) = call(&app, "PUT", "/devices/pump_01", r#"{"rules":[]}"#).await;
    assert_eq!((status, &b["rules"]), (200, &json!([])), "{b}");
    assert_eq!(get(&app, "/devices/pump_01").await.1["rules"], json!([]));
    assert_eq!(
        stored_rules(&t, "pump_01").await,
        Some(AttributeValue::L(vec![]))
    );

    // WHEN registered with `null`, or without `rules` (PUT replaces the registration)
    // THEN the attribute is gone: the fleet's DEFAULT_RULES apply
    for body in [r#"{"rules":null}"#, r#"{"name":"Pump 1"}"#] {
        call(&app, "PUT", "/devices/pump_01", &three_rules_body()).await;
        let (status, b) = call(&app, "PUT", "/devices/pump_01", body).await;
        assert_eq!(status, 200, "{body}: {b}");
        assert!(b.get("rules").is_none(), "{body}: {b}");
        assert!(get(&app, "/devices/pump_01").await.1.get("rules").is_none());
        assert_eq!(stored_rules(&t, "pump_01").await, None, "{body}");
    }
}

fn three_rules_body() -> String {
    json!({"percentiles": true, "rules": three_rules()}).to_string()
}

#[tokio::test]
async fn bad_rules_are_400s_naming_the_rule_and_field_and_change_nothing() {
    let t = TestTable::new("api-rules-bad").await;
    let app = app(&t);
    let (status, _) = call(&app, "PUT", "/devices/pump_01", &three_rules_body()).await;
    assert_eq!(status, 201);
    let ok = json!({"metric":"t","rate":"per_minute","above":1});
    for (rules, percentiles, param) in [
        // an unknown aggregate
        (
            json!([ok, {"metric":"t","aggregate":"median","window":"5m","above":1}]),
            true,
            "rules[1].aggregate",
        ),
        // a window over 24 h
        (
            json!([{"metric":"t","aggregate":"avg","window":"25h","above":1}]),
            true,
            "rules[0].window",
        ),
        // a metric name that is not valid
        (
            json!([{"metric":"temp erature","rate":"per_minute","above":1}]),
            true,
            "rules[0].metric",
        ),
        // more than 16 rules
        (
            (0..17)
                .map(|i| json!({"metric": format!("t{i}"), "rate": "per_minute", "above": 1}))
                .collect(),
            true,
            "rules",
        ),
        // p95 on a device that keeps no percentiles
        (
            json!([ok, {"metric":"t","aggregate":"p95","window":"1h","above":1}]),
            false,
            "rules[1].aggregate",
        ),
        // two rules computing the same (one state, one alert between them)
        (
            json!([ok, {"metric":"t","rate":"per_minute","above":9}]),
            true,
            "rules[1].rule",
        ),
        (json!({"metric":"t"}), true, "rules"),
    ] {
        let body = json!({"percentiles": percentiles, "rules": rules}).to_string();
        let (status, b) = call(&app, "PUT", "/devices/pump_01", &body).await;
        assert_eq!((status, error_param(&b)), (400, param.to_owned()), "{body}");
        assert_eq!(b["error"]["code"], "bad_request");
    }
    // None of the refused bodies changed what is stored.
    assert_eq!(
        get(&app, "/devices/pump_01").await.1["rules"],
        shown(&three_rules())
    );
}

#[tokio::test]
async fn keep_firing_for_seconds_on_a_threshold_round_trips_and_is_at_most_a_day() {
    let t = TestTable::new("api-keep-firing").await;
    let app = app(&t);
    let thresholds = json!({
        "temperature": {"max": 30, "severity": "critical", "keepFiringForSeconds": 86400}
    });
    let body = json!({"thresholds": thresholds}).to_string();
    let (status, b) = call(&app, "PUT", "/devices/cold_01", &body).await;
    assert_eq!((status, &b["thresholds"]), (201, &thresholds), "{b}");
    assert_eq!(
        get(&app, "/devices/cold_01").await.1["thresholds"],
        thresholds
    );
    let over = json!({"thresholds": {"temperature":
        {"max": 30, "severity": "critical", "keepFiringForSeconds": 86401}}});
    let (status, b) = call(&app, "PUT", "/devices/cold_01", &over.to_string()).await;
    assert_eq!(
        (status, error_param(&b)),
        (
            400,
            "thresholds.temperature.keepFiringForSeconds".to_owned()
        )
    );
}

/// An open alert of a window rule as the alerts role stores it: the tagged ID, rule
/// `window`, the rule in `ruleSpec`.
fn window_alert() -> AlertItem {
    let spec = RuleSpec::from_value(
        &json!({"metric":"temperature","aggregate":"avg","window":"5m","above":30,"forSeconds":600}),
    )
    .unwrap();
    let mut a = sample_alert();
    let opened = ts("2026-04-20T14:40:00Z");
    a.alert_id = AlertId::for_rule(
        opened,
        &metric("temperature"),
        AlertRule::Window,
        &spec.tag(),
    );
    a.sk = keys::alert_sk(&a.alert_id);
    a.gsi1pk = Some(keys::severity_gsi1pk(Severity::Warning, &a.pk));
    a.gsi1sk = Some(keys::alert_gsi1sk(&a.alert_id));
    a.severity = Severity::Warning;
    a.rule = AlertRule::Window;
    a.message = spec.to_string();
    a.value = 31.0;
    a.threshold = 30.0;
    a.opened_at = opened;
    a.last_breach_at = opened;
    a.rule_spec = Some(spec);
    a
}

#[tokio::test]
async fn a_window_rules_alert_lists_with_its_kind_and_rule_and_takes_ack_and_snooze() {
    let t = sample_table("api-window-alert").await;
    let alert = window_alert();
    put(&t, &alert).await;
    let app = app(&t);
    let id = alert.alert_id.as_str().to_owned();
    assert!(
        id.ends_with(&format!(
            "-temperature-window.{}",
            alert.rule_spec.as_ref().unwrap().tag()
        )),
        "{id}"
    );
    let rule_spec = json!({"metric":"temperature","aggregate":"avg","window":"5m","above":30,
                           "forSeconds":600,"severity":"warning"});
    // GIVEN the stored window alert, THEN the fleet's list and the device's show it with
    // kind `window` and the rule that raised it, and the threshold alert without a ruleSpec
    let (status, fleet) = get(&app, "/alerts?severity=warning").await;
    assert_eq!(status, 200, "{fleet}");
    let listed = &fleet["items"][0];
    assert_eq!(listed["alertId"], id.as_str(), "{fleet}");
    assert_eq!(listed["kind"], "window");
    assert_eq!(listed["ruleSpec"], rule_spec);
    let (_, device) = get(&app, "/devices/sensor_01/alerts").await;
    let items = device["items"].as_array().unwrap();
    let window = items.iter().find(|a| a["alertId"] == id.as_str()).unwrap();
    assert_eq!(
        (&window["kind"], &window["ruleSpec"]),
        (&json!("window"), &rule_spec)
    );
    let threshold = items.iter().find(|a| a["alertId"] != id.as_str()).unwrap();
    assert_eq!(threshold["kind"], "threshold");
    assert!(threshold.get("ruleSpec").is_none(), "{threshold}");

    // WHEN acknowledged by its ID (the '.' as is) THEN it is acknowledged, rule kept
    let (status, b) = call(
        &app,
        "POST",
        &format!("/devices/sensor_01/alerts/{id}/ack"),
        "",
    )
    .await;
    assert_eq!(status, 200, "{b}");
    assert_eq!(b["state"], "acknowledged");
    assert_eq!((&b["kind"], &b["ruleSpec"]), (&json!("window"), &rule_spec));
    // AND snoozed with the '.' percent-encoded, the same alert
    let encoded = id.replace('.', "%2E");
    let (status, b) = call(
        &app,
        "POST",
        &format!("/devices/sensor_01/alerts/{encoded}/snooze"),
        r#"{"until":"2026-04-20T16:00:00Z"}"#,
    )
    .await;
    assert_eq!(status, 200, "{b}");
    assert_eq!(b["alertId"], id.as_str());
    assert_eq!(b["snoozedUntil"], "2026-04-20T16:00:00.000000Z");
    // AND a window alert ID whose rule no alert has is a 404, a malformed tag a 400
    let other = id.replace(&alert.rule_spec.as_ref().unwrap().tag(), "00000000");
    let (status, _) = call(
        &app,
        "POST",
        &format!("/devices/sensor_01/alerts/{other}/ack"),
        "",
    )
    .await;
    assert_eq!(status, 404);
    for bad in [id.replace('.', ".xyz"), id.replace("window.", "max.")] {
        let (status, b) = call(
            &app,
            "POST",
            &format!("/devices/sensor_01/alerts/{bad}/ack"),
            "",
        )
        .await;
        assert_eq!(
            (status, error_param(&b)),
            (400, "alertId".to_owned()),
            "{bad}"
        );
    }
}

/// The members `tag`'s index partitions count, read from the table.
async fn members(t: &TestTable, tag: &str) -> i64 {
    t.group_counts(&tidemark_schema::Tag::parse(tag).unwrap())
        .await
        .0
}

#[tokio::test]
async fn tagging_devices_counts_group_members_and_a_group_alert_lists_with_its_group() {
    let t = TestTable::new("api-group-rules").await;
    let app = app(&t);
    // GIVEN two devices put into site A, one of them put twice (a retried request)
    for d in ["a1", "a2", "a2"] {
        let body = json!({"tags": {"site": "A"}}).to_string();
        let (status, b) = call(&app, "PUT", &format!("/devices/{d}"), &body).await;
        assert!(status == 200 || status == 201, "{b}");
    }
    // THEN site A counts two members
    assert_eq!(members(&t, "site:A").await, 2);
    // WHEN one moves to site B
    let body = json!({"tags": {"site": "B"}}).to_string();
    let (status, b) = call(&app, "PUT", "/devices/a2", &body).await;
    assert_eq!(status, 200, "{b}");
    // THEN each site counts one
    assert_eq!(
        (members(&t, "site:A").await, members(&t, "site:B").await),
        (1, 1)
    );

    // GIVEN an open alert of the group rule "more than a tenth of site A offline"
    let rule = tidemark_schema::GroupRuleSpec::from_value(
        &json!({"group":"site:A","offlineFraction":{"above":0.1},"severity":"critical"}),
    )
    .unwrap();
    let alert = tidemark_schema::GroupAlertItem::open(
        &rule,
        now(),
        tidemark_schema::GroupMeasure::Counts {
            members: 10,
            offline: 2,
        },
    );
    put(&t, &alert).await;
    // WHEN the fleet's alerts are listed, by site too
    let (status, all) = get(&app, "/alerts?severity=critical").await;
    assert_eq!(status, 200, "{all}");
    let (_, of_a) = get(&app, "/alerts?tag=site:A").await;
    let (_, of_b) = get(&app, "/alerts?tag=site:B").await;
    // THEN it is there with its kind, group, rule and counts, and no device
    let items = all["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{all}");
    let g = &items[0];
    assert_eq!(
        (&g["kind"], &g["group"], &g["alertId"]),
        (
            &json!("group"),
            &json!("site:A"),
            &json!(alert.alert_id.to_string())
        )
    );
    assert_eq!(
        g["ruleSpec"],
        json!({"group":"site:A","offlineFraction":{"above":0.1},"severity":"critical"})
    );
    assert_eq!((&g["value"], &g["threshold"]), (&json!(0.2), &json!(0.1)));
    assert_eq!(
        (&g["members"], &g["offlineMembers"]),
        (&json!(10), &json!(2))
    );
    assert!(g.get("deviceId").is_none(), "{g}");
    // AND listed under its own site only
    assert_eq!(of_a["items"].as_array().unwrap().len(), 1, "{of_a}");
    assert!(of_b["items"].as_array().unwrap().is_empty(), "{of_b}");
}

/// `method path` as API Gateway passes it on for a token limited to `sites`.
fn scoped(method: &str, path: &str, sites: &str) -> lambda_http::Request {
    let file = format!(
        "{}/../../events/apigw-get-device.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    v["rawPath"] = json!(path);
    v["requestContext"]["http"]["method"] = json!(method);
    v["requestContext"]["http"]["path"] = json!(path);
    v["requestContext"]["authorizer"]["jwt"]["claims"] = json!({
        "sub": "site-operator", "iss": "https://issuer.example.com/",
        "scope": "tidemark/read tidemark/write", "tidemark:sites": sites
    });
    v["requestContext"]["authorizer"]["jwt"]["scopes"] = json!(["tidemark/read", "tidemark/write"]);
    lambda_http::request::from_str(&v.to_string()).unwrap()
}

#[tokio::test]
async fn a_group_alert_is_acknowledged_and_snoozed_under_its_group_and_only_by_its_sites() {
    let t = TestTable::new("api-group-actions").await;
    let app = app(&t);
    let rule = tidemark_schema::GroupRuleSpec::from_value(
        &json!({"group":"site:A","offlineFraction":{"above":0.1}}),
    )
    .unwrap();
    let alert = tidemark_schema::GroupAlertItem::open(
        &rule,
        now(),
        tidemark_schema::GroupMeasure::Counts {
            members: 10,
            offline: 2,
        },
    );
    put(&t, &alert).await;
    let base = format!("/groups/site:A/alerts/{}", alert.alert_id);

    // WHEN a caller limited to site B tries to acknowledge it
    let resp = app
        .handle(scoped("POST", &format!("{base}/ack"), "[B]"))
        .await;
    // THEN it is refused, and the alert is as it was
    assert_eq!(resp.status().as_u16(), 403);
    let refused: Value = serde_json::from_slice(resp.body().as_ref()).unwrap();
    assert!(
        refused
            .to_string()
            .contains("group site:A is not one of the sites"),
        "{refused}"
    );
    let (_, listed) = get(&app, "/alerts").await;
    assert_eq!(listed["items"][0]["state"], "open");

    // WHEN site A's operator acknowledges it
    let resp = app
        .handle(scoped("POST", &format!("{base}/ack"), "[A]"))
        .await;
    assert_eq!(resp.status().as_u16(), 200);
    let acked: Value = serde_json::from_slice(resp.body().as_ref()).unwrap();
    // THEN it is acknowledged, still a group alert of site A
    assert_eq!(
        (&acked["state"], &acked["kind"], &acked["group"]),
        (&json!("acknowledged"), &json!("group"), &json!("site:A"))
    );
    // AND it snoozes and unsnoozes like a device's alert
    let until = now().plus_millis(3_600_000).unwrap().to_string();
    let (status, snoozed) = call(
        &app,
        "POST",
        &format!("{base}/snooze"),
        &json!({ "until": until }).to_string(),
    )
    .await;
    assert_eq!(status, 200, "{snoozed}");
    assert_eq!(snoozed["snoozedUntil"], json!(until));
    let (status, woke) = call(&app, "DELETE", &format!("{base}/snooze"), "").await;
    assert_eq!(status, 200, "{woke}");
    assert!(woke.get("snoozedUntil").is_none(), "{woke}");

    // AND an unknown alert is a 404 naming the group, a group that is no tag a 400
    let (status, body) = call(
        &app,
        "POST",
        "/groups/site:B/alerts/20260420T141000000000Z-group.0a1b2c3d/ack",
        "",
    )
    .await;
    assert_eq!(status, 404, "{body}");
    assert!(body.to_string().contains("group site:B"), "{body}");
    let (status, body) = call(
        &app,
        "POST",
        &format!("/groups/siteA/alerts/{}/ack", alert.alert_id),
        "",
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(error_param(&body), "group", "{body}");
}
