//! The template's `SetAsideAlarm` watches the very metric the functions emit when they set a
//! record aside (docs/design.md §4, "What is retried, what is set aside"): the EMF namespace,
//! metric name and `Function` dimension of ingest's and the aggregator's invocation metrics.

use std::path::PathBuf;

use serde_yaml::Value;

fn template() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../template.yaml");
    let text = std::fs::read_to_string(path).expect("read template");
    serde_yaml::from_str(&text).expect("template.yaml is YAML")
}

/// (namespace, function dimension) of an EMF document that carries `SetAside`.
fn emitted(doc: serde_json::Value) -> (String, String) {
    assert!(doc.get("SetAside").is_some(), "no SetAside in {doc}");
    (
        doc["_aws"]["CloudWatchMetrics"][0]["Namespace"]
            .as_str()
            .unwrap()
            .to_owned(),
        doc["Function"].as_str().unwrap().to_owned(),
    )
}

#[test]
fn the_set_aside_alarm_sums_the_set_aside_metric_of_ingest_and_the_aggregator() {
    let t = template();
    let alarm = &t["Resources"]["SetAsideAlarm"]["Properties"];
    assert_eq!(
        alarm["ComparisonOperator"].as_str(),
        Some("GreaterThanThreshold")
    );
    assert_eq!(
        alarm["Threshold"].as_i64(),
        Some(0),
        "any set-aside record alarms"
    );
    assert!(alarm["AlarmActions"].is_sequence());
    let watched: Vec<(String, String)> = alarm["Metrics"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|m| {
            let metric = &m["MetricStat"]["Metric"];
            assert!(metric.is_null() || metric["MetricName"].as_str() == Some("SetAside"));
            Some((
                metric["Namespace"].as_str()?.to_owned(),
                metric["Dimensions"][0]["Value"].as_str()?.to_owned(),
            ))
        })
        .collect();
    let ingest = tidemark_ingest::Report::default().metrics().to_json(0);
    let aggregator = tidemark_aggregator::Report::default().metrics().to_json(0);
    for source in [emitted(ingest), emitted(aggregator)] {
        assert!(
            watched.contains(&source),
            "the alarm does not watch {source:?}: {watched:?}"
        );
    }
}
