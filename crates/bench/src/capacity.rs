//! Capacity units of a DynamoDB response body (`ConsumedCapacity`), table and GSI apart: what
//! the metering proxy ([`crate::meter`]) and the shadow tables ([`crate::shadow`]) sum.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

/// Capacity units of one response, split by where they were spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Capacity {
    pub total: f64,
    pub table: f64,
    pub gsi: f64,
}

impl Capacity {
    pub fn add(&mut self, o: Capacity) {
        self.total += o.total;
        self.table += o.table;
        self.gsi += o.gsi;
    }
}

fn units(v: &Value) -> f64 {
    ["CapacityUnits", "WriteCapacityUnits", "ReadCapacityUnits"]
        .iter()
        .find_map(|k| v.get(*k).and_then(Value::as_f64))
        .unwrap_or(0.0)
}

/// Sums the `ConsumedCapacity` of a response body: an object (single-item operations,
/// Query) or a list of them, one per table (batch and transaction operations).
pub fn consumed(body: &[u8]) -> Capacity {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return Capacity::default();
    };
    let entries: Vec<&Value> = match v.get("ConsumedCapacity") {
        Some(Value::Array(a)) => a.iter().collect(),
        Some(o @ Value::Object(_)) => vec![o],
        _ => return Capacity::default(),
    };
    let mut sum = Capacity::default();
    for e in entries {
        let total = units(e);
        let index_units = |k: &str| -> f64 {
            e.get(k)
                .and_then(Value::as_object)
                .map(|m| m.values().map(units).sum())
                .unwrap_or(0.0)
        };
        let gsi = index_units("GlobalSecondaryIndexes");
        let lsi = index_units("LocalSecondaryIndexes");
        let table = e.get("Table").map(units).unwrap_or(total - gsi - lsi);
        sum.add(Capacity { total, table, gsi });
    }
    sum
}

/// The global secondary index units of a response, by index name (what [`consumed`] sums
/// as `gsi`).
pub fn consumed_by_index(body: &[u8]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return out;
    };
    let entries: Vec<&Value> = match v.get("ConsumedCapacity") {
        Some(Value::Array(a)) => a.iter().collect(),
        Some(o @ Value::Object(_)) => vec![o],
        _ => return out,
    };
    for e in entries {
        if let Some(m) = e.get("GlobalSecondaryIndexes").and_then(Value::as_object) {
            for (name, c) in m {
                *out.entry(name.clone()).or_insert(0.0) += units(c);
            }
        }
    }
    out
}
