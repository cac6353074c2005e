//! The rollups role marks for the Parquet export the hours whose readings change after they
//! closed, and only those (against DynamoDB Local).

use crate::common::*;
use tidemark_aggregator::{AggregatorConfig, BothRoles};
use tidemark_schema::{Clock, EntityKey, ExportDirtyItem};
use tidemark_testkit::TestTable;

async fn dirty(t: &TestTable, hour: &str) -> Option<ExportDirtyItem> {
    let k = EntityKey::ExportDirty(ts(hour)).key();
    let out = t
        .client
        .get_item()
        .table_name(&t.name)
        .key("pk", aws_sdk_dynamodb::types::AttributeValue::S(k.pk))
        .key("sk", aws_sdk_dynamodb::types::AttributeValue::S(k.sk))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    out.item.map(|i| tidemark_store::from_item(i).unwrap())
}

#[tokio::test]
async fn a_late_reading_marks_its_closed_hour_and_an_open_hours_reading_marks_nothing() {
    // GIVEN the clock at 12:00: hour 10 has closed (10:00 + 1 h + 15 min), hour 11 has not
    let t = TestTable::new("agg-export-marks").await;
    let mut config = AggregatorConfig::new(&t.name);
    config.clock = Clock::fixed(ts("2026-04-20T12:00:00Z"));
    let agg = BothRoles::new(t.client.clone(), config);
    let mut s = StreamSim::new(1);
    // WHEN a batch brings a reading of each hour
    let late = reading("d1", "2026-04-20T10:59:00Z", &[("t", 1.0)]);
    let current = reading("d1", "2026-04-20T11:30:00Z", &[("t", 2.0)]);
    store_and_process(&t, &agg, &mut s, &[late.clone(), current]).await;
    // THEN hour 10 is marked for the export, hour 11 is not
    let d = dirty(&t, "2026-04-20T10:00:00Z")
        .await
        .expect("hour 10 marked");
    assert_eq!((d.hour, d.marks), (ts("2026-04-20T10:00:00Z"), 1));
    assert!(dirty(&t, "2026-04-20T11:00:00Z").await.is_none());
    // AND a replay of the late record marks it again (the export removes a mark only if
    // none came after the one it read)
    let (resp, _) = agg.process(&event(vec![s.insert(&late)])).await;
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(dirty(&t, "2026-04-20T10:00:00Z").await.unwrap().marks, 2);
}
