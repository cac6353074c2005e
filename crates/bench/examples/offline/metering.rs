//! What one function spent, as the metering proxy saw it, and the clients that go through
//! the proxy.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tidemark_bench::meter::{Kind, Meter, MeterTotals};
use tidemark_store::ClientSettings;

/// Units one function spent, as the proxy saw them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Spent {
    pub wru: f64,
    pub wru_table: f64,
    pub wru_gsi: f64,
    /// GSI write units by index.
    pub wru_by_index: BTreeMap<String, f64>,
    pub rru: f64,
    /// Read units AWS bills and DynamoDB Local reports as none: reads that find nothing
    /// (an empty query, a missing item) cost the minimum on AWS.
    #[serde(default)]
    pub rru_unreported: f64,
    pub write_calls: u64,
    pub read_calls: u64,
    /// Failed conditional writes (no units reported by DynamoDB Local; AWS bills them).
    pub conditional_failures: u64,
    /// Calls and units by operation.
    pub by_operation: BTreeMap<String, (u64, f64)>,
}

impl Spent {
    /// Read units as AWS would bill them.
    pub fn rru_aws(&self) -> f64 {
        self.rru + self.rru_unreported
    }

    pub fn of(t: &MeterTotals) -> Spent {
        let (w, write_calls, conditional_failures) = t.writes();
        let (r, read_calls) = t.reads();
        Spent {
            wru: w.total,
            wru_table: w.table,
            wru_gsi: w.gsi,
            wru_by_index: t.gsi_by_index(Kind::Write),
            rru: r.total,
            rru_unreported: t.unreported_read_minimum(),
            write_calls,
            read_calls,
            conditional_failures,
            by_operation: t
                .by_operation
                .iter()
                .map(|(op, s)| (op.clone(), (s.calls, s.capacity.total)))
                .collect(),
        }
    }
}

pub async fn client_via(m: &Meter) -> aws_sdk_dynamodb::Client {
    tidemark_store::dynamodb_client(&ClientSettings::local(m.endpoint())).await
}
