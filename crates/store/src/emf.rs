//! CloudWatch Embedded Metric Format: one JSON line on stdout per invocation, which Lambda's
//! log pipeline turns into metrics without a PutMetricData call (no latency, no IAM).

use serde_json::{Map, Value, json};

pub const NAMESPACE: &str = "Tidemark";

/// Counts (unit `Count`) of one invocation of `function`, dimensioned by function name.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    function: String,
    values: Vec<(String, f64)>,
}

impl Metrics {
    pub fn new(function: &str) -> Self {
        Metrics {
            function: function.to_owned(),
            values: Vec::new(),
        }
    }

    pub fn count(mut self, name: &str, value: u64) -> Self {
        self.values.push((name.to_owned(), value as f64));
        self
    }

    /// The EMF document (testable without capturing stdout).
    pub fn to_json(&self, timestamp_ms: i64) -> Value {
        let defs: Vec<Value> = self
            .values
            .iter()
            .map(|(n, _)| json!({"Name": n, "Unit": "Count"}))
            .collect();
        let mut root = Map::new();
        root.insert(
            "_aws".into(),
            json!({
                "Timestamp": timestamp_ms,
                "CloudWatchMetrics": [{
                    "Namespace": NAMESPACE,
                    "Dimensions": [["Function"]],
                    "Metrics": defs,
                }]
            }),
        );
        root.insert("Function".into(), Value::String(self.function.clone()));
        for (n, v) in &self.values {
            root.insert(n.clone(), json!(v));
        }
        Value::Object(root)
    }

    /// Prints the EMF line to stdout, where Lambda collects it.
    pub fn emit(&self) {
        let now = tidemark_schema::Timestamp::now().epoch_millis();
        println!("{}", self.to_json(now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emf_document_declares_every_value() {
        let m = Metrics::new("ingest")
            .count("Records", 3)
            .count("Quarantined", 1);
        let v = m.to_json(1_776_693_600_000);
        assert_eq!(v["Function"], "ingest");
        assert_eq!(v["Records"], 3.0);
        assert_eq!(v["_aws"]["CloudWatchMetrics"][0]["Namespace"], "Tidemark");
        let names: Vec<_> = v["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["Name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(names, ["Records", "Quarantined"]);
    }
}
