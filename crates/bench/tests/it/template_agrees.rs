//! The benchmark simulates the deployed event-source mappings: its batch sizes and window
//! must be the ones `template.yaml` deploys, or the report measures another system.

use serde_yaml::Value;
use tidemark_bench::scenario::{
    TEMPLATE_AGGREGATOR_BATCH, TEMPLATE_ALERTS_BATCH, TEMPLATE_ALERTS_WINDOW_MS,
    TEMPLATE_DEVICE_REFRESH_S, TEMPLATE_INGEST_BATCH, TEMPLATE_INGEST_WINDOW_MS, WINDOW_MS,
};

fn template() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../template.yaml");
    serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn scenario_batch_sizes_and_window_are_the_templates() {
    let t = template();
    // The mappings are the functions' stream events.
    let mapping = |function: &str, event: &str| {
        t["Resources"][function]["Properties"]["Events"][event]["Properties"].clone()
    };
    // The ingest batch size is a parameter: the scenario's is its default.
    let ingest = mapping("IngestFunction", "Readings")["BatchSize"].clone();
    let Value::Tagged(r) = ingest else {
        panic!("BatchSize is !Ref IngestBatchSize")
    };
    assert_eq!(r.tag.to_string(), "!Ref");
    let parameter = r.value.as_str().unwrap();
    assert_eq!(
        t["Parameters"][parameter]["Default"].as_u64(),
        Some(TEMPLATE_INGEST_BATCH as u64)
    );
    assert_eq!(
        mapping("AggregatorFunction", "TableStream")["BatchSize"].as_u64(),
        Some(TEMPLATE_AGGREGATOR_BATCH as u64)
    );
    assert_eq!(
        t["Parameters"]["AggregatorBatchingWindowSeconds"]["Default"].as_i64(),
        Some(WINDOW_MS / 1000)
    );
}

#[test]
fn the_offline_bench_uses_the_templates_alerts_mapping_and_windows() {
    let t = template();
    let mapping = |function: &str, event: &str| {
        t["Resources"][function]["Properties"]["Events"][event]["Properties"].clone()
    };
    let default_of = |mapping: &Value, key: &str| {
        let Value::Tagged(r) = mapping[key].clone() else {
            panic!("{key} is a !Ref to a parameter")
        };
        t["Parameters"][r.value.as_str().unwrap()]["Default"].as_i64()
    };
    let alerts = mapping("AlertFunction", "TableStream");
    assert_eq!(
        alerts["BatchSize"].as_u64(),
        Some(TEMPLATE_ALERTS_BATCH as u64)
    );
    assert_eq!(
        default_of(&alerts, "MaximumBatchingWindowInSeconds"),
        Some(TEMPLATE_ALERTS_WINDOW_MS / 1000)
    );
    let ingest = mapping("IngestFunction", "Readings");
    assert_eq!(
        default_of(&ingest, "MaximumBatchingWindowInSeconds"),
        Some(TEMPLATE_INGEST_WINDOW_MS / 1000)
    );
    assert_eq!(
        t["Parameters"]["DeviceRefreshSeconds"]["Default"].as_u64(),
        Some(TEMPLATE_DEVICE_REFRESH_S)
    );
}
