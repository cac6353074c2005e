//! What is retried, what is set aside (docs/design.md §5), against DynamoDB Local: a record
//! whose device write DynamoDB refuses for ever (the update would take the device item past
//! 400 KB) is retried, set aside at its third failure with a repair item, and the batch moves
//! on; once the cause is gone the repair re-derives the device's alerts from the table.

use crate::common::*;
use aws_lambda_events::event::dynamodb::EventRecord;
use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_aggregator::config::{Role, parse_thresholds};
use tidemark_aggregator::setaside::REPAIR_EVERY_MS;
use tidemark_aggregator::{Aggregator, AggregatorConfig, Report};
use tidemark_schema::{AlertState, Clock, DeviceItem, DeviceStatus, ReadingItem, RepairItem, keys};
use tidemark_testkit::TestTable;

const MAX30: &str = r#"{"temperature":{"max":30,"severity":"critical"}}"#;

fn temp(device: &str, at: &str, v: f64) -> ReadingItem {
    reading_at(&dev(device), ts(at), metrics(&[("temperature", v)]), None)
}

/// Delivers `records` as the mapping does (again from the first failed record, until a batch
/// succeeds): each attempt's failed record and report.
async fn deliver(
    agg: &Aggregator,
    mut records: Vec<EventRecord>,
    attempts: usize,
) -> Vec<(Option<String>, Report)> {
    let mut out = Vec::new();
    for _ in 0..attempts {
        let (resp, report) = agg.process(&event(records.clone())).await;
        let failed = resp
            .batch_item_failures
            .first()
            .and_then(|f| f.item_identifier.clone());
        out.push((failed.clone(), report));
        let Some(seq) = failed else { break };
        let from = records
            .iter()
            .position(|r| r.change.sequence_number.as_deref() == Some(&seq))
            .unwrap();
        records = records.split_off(from);
    }
    out
}

async fn put_device(t: &TestTable, d: &DeviceItem, padding: usize) {
    let mut item = tidemark_store::to_item(d).unwrap();
    if padding > 0 {
        item.insert("padding".into(), AttributeValue::S("x".repeat(padding)));
    }
    t.client
        .put_item()
        .table_name(&t.name)
        .set_item(Some(item))
        .send()
        .await
        .unwrap();
}

async fn repairs(t: &TestTable) -> Vec<RepairItem> {
    let out = t
        .client
        .query()
        .table_name(&t.name)
        .key_condition_expression("pk = :pk")
        .expression_attribute_values(":pk", AttributeValue::S(keys::repair_pk("alerts")))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    out.items()
        .iter()
        .map(|i| tidemark_store::from_item(i.clone()).unwrap())
        .collect()
}

#[tokio::test]
async fn a_record_dynamodb_refuses_for_ever_is_set_aside_at_its_third_failure_and_repaired() {
    // GIVEN the alerts role, and a device whose item is so large (an operator's attribute)
    // that writing its latest reading would take it past 400 KB
    let t = TestTable::new("agg-set-aside").await;
    let clock = Clock::fixed(ts("2026-04-20T14:20:00Z"));
    let mut config = AggregatorConfig::new(&t.name)
        .with_role(Role::Alerts)
        .with_default_thresholds(parse_thresholds(MAX30).unwrap());
    config.clock = clock.clone();
    config.retry.base_delay = std::time::Duration::from_millis(1);
    let agg = Aggregator::new(t.client.clone(), config);
    let big = DeviceItem::new(
        dev("d-big"),
        DeviceStatus::Active,
        ts("2026-04-20T10:00:00Z"),
    );
    put_device(&t, &big, 409_300).await;
    let mut s = StreamSim::new(1);
    let rs = vec![
        temp("d-ok", "2026-04-20T14:01:00Z", 20.0),
        temp("d-big", "2026-04-20T14:05:00Z", 50.0),
        temp("d-ok2", "2026-04-20T14:10:00Z", 21.0),
    ];
    put_readings(&t, &rs).await;
    let records: Vec<EventRecord> = rs.iter().map(|r| s.insert(r)).collect();
    let big_seq = records[1].change.sequence_number.clone();

    // WHEN the batch is delivered as the mapping does
    let attempts = deliver(&agg, records, 6).await;

    // THEN the refused record is reported twice, and set aside at the third attempt
    let failed: Vec<Option<String>> = attempts.iter().map(|(f, _)| f.clone()).collect();
    assert_eq!(failed, vec![big_seq.clone(), big_seq.clone(), None]);
    assert_eq!(attempts[2].1.set_aside, 1, "{:?}", attempts[2].1);
    let r = repairs(&t).await;
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0].device_id, Some(dev("d-big")));
    assert_eq!(Some(r[0].sequence_number.clone()), big_seq);
    assert_eq!(r[0].hours, vec![ts("2026-04-20T14:00:00Z")]);
    // AND the records around it were processed
    for d in ["d-ok", "d-ok2"] {
        assert!(device_item(&t, d).await.unwrap().latest.is_some(), "{d}");
    }

    // WHEN the operator shrinks the item, and a minute later any batch comes
    put_device(&t, &big, 0).await;
    clock.set(clock.now().plus_millis(REPAIR_EVERY_MS).unwrap());
    let next = vec![temp("d-ok", "2026-04-20T14:21:00Z", 22.0)];
    put_readings(&t, &next).await;
    let (resp, report) = agg
        .process(&event(next.iter().map(|r| s.insert(r)).collect()))
        .await;
    assert!(resp.batch_item_failures.is_empty(), "{report:?}");
    // THEN the repair derived d-big's alerts from the table: its 50 opened the alert, its
    // latest reading is the one set aside, and the repair item is gone
    assert_eq!(report.repaired, 1, "{report:?}");
    let d = device_item(&t, "d-big").await.unwrap();
    let latest = d.latest.unwrap();
    assert_eq!(latest.timestamp, ts("2026-04-20T14:05:00Z"));
    let alerts = alerts_of(&t, "d-big").await;
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(alerts[0].state, AlertState::Open);
    assert!(repairs(&t).await.is_empty());
}
