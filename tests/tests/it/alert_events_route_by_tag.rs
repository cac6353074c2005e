//! An EventBridge rule can route one site's alerts to its own team: the alert event's
//! `detail.tags` holds the device's tags, the sample event in `events/` is exactly what the
//! notifier publishes for the sample alert record, and the template's commented example rule
//! (`SiteAAlertRule`) matches site A's events and no others.
//!
//! The matcher below is EventBridge's exact-value matching (nested objects; a list of allowed
//! values; an array in the event matches when any element does), the only kind of pattern
//! the template's rules use; a content filter (`prefix`, `numeric`, …) fails the test rather
//! than being guessed at.

use std::path::PathBuf;

use serde_json::{Value, json};
use tidemark_aggregator::notify::{DETAIL_TYPE, SOURCE, alert_changes};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn sample(name: &str) -> Value {
    let text = std::fs::read_to_string(root().join("events").join(name)).expect(name);
    serde_json::from_str(&text).expect(name)
}

/// The event EventBridge delivers to a rule's target for the published alert change.
fn opened_event() -> Value {
    sample("eventbridge-alert-opened.json")
}

/// Whether `event` matches `pattern`, as EventBridge matches exact values.
fn matches(pattern: &Value, event: &Value) -> bool {
    let Value::Object(fields) = pattern else {
        panic!("a pattern is an object: {pattern}");
    };
    fields.iter().all(|(k, p)| {
        let Some(v) = event.get(k) else {
            return false;
        };
        match p {
            Value::Object(_) => matches(p, v),
            Value::Array(allowed) => {
                assert!(
                    allowed.iter().all(|a| !a.is_object() && !a.is_array()),
                    "content filters are not modelled here: {p}"
                );
                match v {
                    Value::Array(values) => values.iter().any(|x| allowed.contains(x)),
                    x => allowed.contains(x),
                }
            }
            _ => panic!("a pattern's leaves are lists of values: {k}: {p}"),
        }
    })
}

/// The template's commented example rule `SiteAAlertRule`, uncommented.
fn site_rule() -> serde_yaml::Value {
    let text = std::fs::read_to_string(root().join("template.yaml")).expect("read template");
    let mut lines = text
        .lines()
        .skip_while(|l| l.trim_end() != "  # SiteAAlertRule:");
    let mut yaml = String::new();
    for line in lines.by_ref() {
        let Some(rest) = line.strip_prefix("  # ").or(line.strip_prefix("  #")) else {
            break;
        };
        yaml.push_str(rest);
        yaml.push('\n');
    }
    assert!(
        !yaml.is_empty(),
        "template.yaml has the commented SiteAAlertRule"
    );
    let v: serde_yaml::Value = serde_yaml::from_str(&yaml).expect("the example is YAML");
    v["SiteAAlertRule"].clone()
}

fn with_tags(event: &Value, tags: Value) -> Value {
    let mut e = event.clone();
    e["detail"]["tags"] = tags;
    e
}

#[test]
fn the_sample_event_is_what_the_notifier_publishes_for_the_sample_alert_record() {
    let record: aws_lambda_events::event::dynamodb::Event =
        serde_json::from_value(sample("ddb-stream-alert-opened.json")).unwrap();
    let changes = alert_changes(&record.records);
    assert_eq!(changes.len(), 1);
    let detail = serde_json::to_value(&changes[0].detail).unwrap();
    let event = opened_event();
    assert_eq!(event["detail"], detail);
    assert_eq!(detail["tags"], json!({"site": "A", "line": "3"}));
    assert_eq!(event["source"], SOURCE);
    assert_eq!(event["detail-type"], DETAIL_TYPE);
    // The event's time is the change's, as the notifier sets it.
    assert_eq!(
        tidemark_schema::Timestamp::parse_rfc3339(event["time"].as_str().unwrap()).unwrap(),
        changes[0].detail.changed_at
    );
}

#[test]
fn the_templates_example_rule_routes_site_a_alerts_and_only_them() {
    let rule = site_rule();
    assert_eq!(rule["Type"].as_str(), Some("AWS::Events::Rule"));
    let props = &rule["Properties"];
    match &props["EventBusName"] {
        serde_yaml::Value::Tagged(t) => {
            assert_eq!(t.tag.to_string(), "!Ref");
            assert_eq!(t.value.as_str(), Some("AlertEventBus"));
        }
        other => panic!("EventBusName is !Ref AlertEventBus, not {other:?}"),
    }
    assert!(
        matches!(props["Targets"][0]["Arn"], serde_yaml::Value::Tagged(_)),
        "the team's target: {:?}",
        props["Targets"]
    );
    let pattern: Value = serde_json::to_value(&props["EventPattern"]).unwrap();
    assert_eq!(pattern["detail"]["tags"]["site"], json!(["A"]));

    let site_a = opened_event();
    assert!(matches(&pattern, &site_a), "site A's alert is routed");
    let site_b = with_tags(&site_a, json!({"site": "B", "line": "3"}));
    assert!(!matches(&pattern, &site_b), "site B's is not");
    let untagged = with_tags(&site_a, json!({}));
    assert!(!matches(&pattern, &untagged), "nor a device's without tags");
    let mut other_source = site_a.clone();
    other_source["source"] = json!("someone.else");
    assert!(!matches(&pattern, &other_source), "nor another source's");

    // The template's critical-alert rule matches the same event by severity, whatever its
    // site: the matcher agrees with the rule the template deploys.
    let t: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(root().join("template.yaml")).expect("read template"),
    )
    .expect("template.yaml is YAML");
    let critical: Value =
        serde_json::to_value(&t["Resources"]["CriticalAlertRule"]["Properties"]["EventPattern"])
            .unwrap();
    assert!(matches(&critical, &site_a) && matches(&critical, &site_b));
    let mut warning = site_a.clone();
    warning["detail"]["severity"] = json!("warning");
    assert!(!matches(&critical, &warning));
    // A team that wants only its site's critical alerts adds severity beside tags.
    let mut critical_at_a = pattern.clone();
    critical_at_a["detail"]["severity"] = json!(["critical"]);
    assert!(matches(&critical_at_a, &site_a));
    assert!(!matches(&critical_at_a, &warning) && !matches(&critical_at_a, &site_b));
}

#[test]
fn a_group_alert_event_names_its_group_and_routes_with_its_sites_alerts() {
    // GIVEN the alert the watchdog opens for "more than a tenth of site A offline"
    let rule = tidemark_schema::GroupRuleSpec::from_value(
        &json!({"group": "site:A", "offlineFraction": {"above": 0.1}, "severity": "critical"}),
    )
    .unwrap();
    let at = tidemark_schema::Timestamp::parse_rfc3339("2026-04-20T14:10:00Z").unwrap();
    let alert = tidemark_schema::GroupAlertItem::open(
        &rule,
        at,
        tidemark_schema::GroupMeasure::Counts {
            members: 500,
            offline: 60,
        },
    );
    use tidemark_aggregator::testing::{change_record, image};
    let record = change_record(4_200_000_000_000_000_000, None, Some(image(&alert)));
    // WHEN the notifier reads its stream record
    let changes = alert_changes(&[record]);
    // THEN it publishes the sample group event: its group, no device, the group as its tag
    assert_eq!(changes.len(), 1);
    let detail = serde_json::to_value(&changes[0].detail).unwrap();
    let event = sample("eventbridge-group-alert-opened.json");
    assert_eq!(event["detail"], detail, "{detail}");
    assert!(detail.get("deviceId").is_none());
    // AND a team's rule for site A takes it, as the critical-alert rule does
    let pattern: Value = serde_json::to_value(&site_rule()["Properties"]["EventPattern"]).unwrap();
    assert!(matches(&pattern, &event), "site A's group alert is routed");
    assert!(!matches(&pattern, &with_tags(&event, json!({"site": "B"}))));
    let t: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(root().join("template.yaml")).expect("read template"),
    )
    .expect("template.yaml is YAML");
    let critical: Value =
        serde_json::to_value(&t["Resources"]["CriticalAlertRule"]["Properties"]["EventPattern"])
            .unwrap();
    assert!(matches(&critical, &event));
}
