//! The notifier's markers against DynamoDB Local: what one attempt marks, the next attempt
//! (a Lambda retry, a bisected half, a replay) does not publish again.

use crate::common::Bus;
use std::collections::HashSet;

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_aggregator::Notifier;
use tidemark_aggregator::notify::{DynamoMarkers, Markers, alert_changes};
use tidemark_schema::{AlertItem, AlertState, EntityKey, EventId, Timestamp};
use tidemark_testkit::TestTable;

fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

fn alert(device: &str) -> AlertItem {
    tidemark_aggregator::testing::open_alert(device, ts("2026-04-20T14:00:00Z"))
}

fn record(name: &str, seq: u64, old: Option<&AlertItem>, new: &AlertItem) -> EventRecord {
    use tidemark_aggregator::testing::{change_record, image};
    let mut r = change_record(seq.into(), old.map(image), Some(image(new)));
    r.event_name = name.into();
    r
}

#[tokio::test]
async fn markers_are_read_back_consistently_and_outlive_the_table_stream() {
    let table = TestTable::new("notify-markers").await;
    let markers = DynamoMarkers::new(table.client.clone(), table.name.clone());
    let a = EventId::new(&"a".repeat(32)).unwrap();
    let b = EventId::new(&"b".repeat(32)).unwrap();
    assert!(
        markers
            .marked(&[a.clone(), b.clone()])
            .await
            .unwrap()
            .is_empty()
    );

    let now = Timestamp::now();
    assert_eq!(markers.mark(std::slice::from_ref(&a), now).await, 0);
    assert_eq!(
        markers.marked(&[a.clone(), b.clone()]).await.unwrap(),
        HashSet::from([a.clone()])
    );

    let k = EntityKey::NotifyMarker(a).key();
    let item = table
        .client
        .get_item()
        .table_name(&table.name)
        .key("pk", AttributeValue::S(k.pk))
        .key("sk", AttributeValue::S(k.sk))
        .send()
        .await
        .unwrap()
        .item
        .expect("the marker item");
    let ttl: i64 = match &item["ttl"] {
        AttributeValue::N(n) => n.parse().unwrap(),
        other => panic!("ttl {other:?}"),
    };
    assert!(
        ttl > now.epoch_seconds() + 24 * 3600,
        "kept past the stream's 24 h retention"
    );
}

#[tokio::test]
async fn retried_and_bisected_alert_batches_publish_each_change_once() {
    let table = TestTable::new("notify-once").await;
    let notifier = Notifier::with_parts(
        Bus::default(),
        DynamoMarkers::new(table.client.clone(), table.name.clone()),
        "bus",
    );
    let a = alert("sensor_01");
    let mut acked = a.clone();
    acked.state = AlertState::Acknowledged;
    acked.acknowledged_at = Some(ts("2026-04-20T14:05:00Z"));
    let b = alert("sensor_02");
    let records = vec![
        record("INSERT", 1, None, &a),
        record("MODIFY", 2, Some(&a), &acked),
        record("INSERT", 3, None, &b),
    ];
    assert_eq!(alert_changes(&records).len(), 3);
    let batch = |rs: &[EventRecord]| {
        let mut e = Event::default();
        e.records = rs.to_vec();
        e
    };

    // A bisected first half, then the whole batch (Lambda's retry after the split).
    let (first, report) = notifier.process(&batch(&records[..1])).await;
    assert_eq!((first, report.published), (None, 1));
    let (first, report) = notifier.process(&batch(&records)).await;
    assert_eq!(first, None);
    assert_eq!((report.published, report.already_published), (2, 1));
    // And a replay of everything.
    let (_, report) = notifier.process(&batch(&records)).await;
    assert_eq!((report.published, report.already_published), (0, 3));

    let put = notifier.publisher().0.lock().unwrap().clone();
    let changes: Vec<(String, String)> = put
        .iter()
        .map(|e| {
            let d: serde_json::Value = serde_json::from_str(&e.detail).unwrap();
            (
                d["deviceId"].as_str().unwrap().to_owned(),
                d["change"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        changes,
        [
            ("sensor_01".into(), "opened".into()),
            ("sensor_01".into(), "acknowledged".into()),
            ("sensor_02".into(), "opened".into()),
        ]
    );
}
