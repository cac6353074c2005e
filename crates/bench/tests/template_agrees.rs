//! The benchmark simulates the deployed event-source mappings: its batch sizes and window
//! must be the ones `template.yaml` deploys, or the report measures another system.

use serde_yaml::Value;
use tidemark_bench::scenario::{TEMPLATE_AGGREGATOR_BATCH, TEMPLATE_INGEST_BATCH, WINDOW_MS};

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
