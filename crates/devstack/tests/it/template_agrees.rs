//! `make run`'s emulated mappings must fail the way the deployed ones do: a function error is
//! retried until it succeeds, never skipped (template.yaml: MaximumRetryAttempts -1).

use serde_yaml::Value;
use tidemark_devstack::esm::MappingConfig;

fn event(t: &Value, function: &str, event: &str) -> Value {
    t["Resources"][function]["Properties"]["Events"][event]["Properties"].clone()
}

#[test]
fn emulated_mappings_retry_forever_like_the_templates() {
    let path = tidemark_testkit::workspace_root().join("template.yaml");
    let t: Value = serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for (function, name) in [
        ("IngestFunction", "Readings"),
        ("AggregatorFunction", "TableStream"),
        ("AlertFunction", "TableStream"),
    ] {
        let e = event(&t, function, name);
        assert_eq!(e["MaximumRetryAttempts"].as_i64(), Some(-1), "{function}");
        assert_eq!(
            e["MaximumRecordAgeInSeconds"].as_i64(),
            Some(-1),
            "{function}"
        );
        assert_eq!(
            e["BisectBatchOnFunctionError"].as_bool(),
            Some(true),
            "{function}"
        );
    }
    assert_eq!(
        MappingConfig::new("x").max_retries,
        None,
        "devstack's default"
    );
}
