//! Alert events carry the device's tags, against DynamoDB Local: the alerts role (threshold
//! alerts) and the watchdog (offline alerts) write the device item's tags onto the alert
//! items, and the notifier, fed the table's real stream, publishes them as `detail.tags`, so
//! an EventBridge rule can route one site's alerts to its own team.

use std::time::Duration;

use crate::common::*;
use serde_json::{Value, json};
use tidemark_aggregator::config::{Role, parse_thresholds};
use tidemark_aggregator::notify::{DynamoMarkers, alert_changes};
use tidemark_aggregator::{Aggregator, AggregatorConfig, Notifier};
use tidemark_schema::keys::{self};
use tidemark_schema::{Clock, DeviceId, DeviceItem, DeviceStatus, TagKey, TagValue, Tags};
use tidemark_testkit::TestTable;
use tidemark_watchdog::{DynamoWatch, Watchdog, WatchdogConfig};

fn tags(pairs: &[(&str, &str)]) -> Tags {
    Tags::new(
        pairs
            .iter()
            .map(|(k, v)| (TagKey::new(k).unwrap(), TagValue::new(v).unwrap()))
            .collect(),
    )
    .unwrap()
}

fn notifier(t: &TestTable) -> Notifier<Bus, DynamoMarkers> {
    Notifier::with_parts(
        Bus::default(),
        DynamoMarkers::new(t.client.clone(), t.name.clone()),
        "bus",
    )
}

/// The details published so far.
fn published(n: &Notifier<Bus, DynamoMarkers>) -> Vec<Value> {
    n.publisher()
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|e| serde_json::from_str(&e.detail).unwrap())
        .collect()
}

#[tokio::test]
async fn threshold_alert_events_carry_the_tags_the_device_had_when_the_alert_was_written() {
    let t = TestTable::new("alert-tags").await;
    let agg = Aggregator::new(
        t.client.clone(),
        AggregatorConfig::new(&t.name)
            .with_role(Role::Alerts)
            .with_default_thresholds(
                parse_thresholds(r#"{"temperature":{"max":30,"severity":"critical"}}"#).unwrap(),
            ),
    );
    let n = notifier(&t);
    let mut s = StreamSim::new(1);
    let at = |sec: i64| ts("2026-04-20T14:00:00Z").plus_millis(sec * 1000).unwrap();
    // GIVEN a device of site A, line 3
    let mut d = DeviceItem::new(dev("d"), DeviceStatus::Active, at(0));
    d.tags = tags(&[("site", "A"), ("line", "3")]);
    put_items(&t, &[d]).await;

    // WHEN a breach opens an alert and the table's stream reaches the notifier
    let breach = reading_at(&dev("d"), at(0), metrics(&[("temperature", 41.5)]), None);
    put_readings(&t, std::slice::from_ref(&breach)).await;
    let (resp, _) = agg.process(&event(vec![s.insert(&breach)])).await;
    assert!(resp.batch_item_failures.is_empty());
    let (first, _) = n
        .process(&event(
            stream_records(&t, "the alert's opening on the stream", |r| {
                !alert_changes(r).is_empty()
            })
            .await,
        ))
        .await;
    assert_eq!(first, None);

    // THEN the alert item and its opened event carry the device's tags
    let alerts = alerts_of(&t, "d").await;
    assert_eq!(alerts[0].tags, tags(&[("site", "A"), ("line", "3")]));
    let sent = published(&n);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["change"], "opened");
    assert_eq!(sent[0]["tags"], json!({"site": "A", "line": "3"}));

    // WHEN the device moves to site B (no line) and a normal reading resolves the alert
    let mut moved = device_item(&t, "d").await.unwrap();
    moved.tags = tags(&[("site", "B")]);
    put_items(&t, &[moved]).await;
    let normal = reading_at(&dev("d"), at(60), metrics(&[("temperature", 20.0)]), None);
    put_readings(&t, std::slice::from_ref(&normal)).await;
    let (resp, _) = agg.process(&event(vec![s.insert(&normal)])).await;
    assert!(resp.batch_item_failures.is_empty());
    n.process(&event(
        stream_records(&t, "the alert's two changes on the stream", |r| {
            alert_changes(r).len() >= 2
        })
        .await,
    ))
    .await;

    // THEN the resolved event (the alert's update, DynamoDB's update expression) carries
    // the tags the alert was last written with, and the opened one is not sent again
    let sent = published(&n);
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[1]["change"], "resolved");
    assert_eq!(sent[1]["tags"], json!({"site": "B"}));
    assert_eq!(
        alerts_of(&t, "d").await[0].tags,
        tags(&[("site", "B")]),
        "line 3 is gone from the item too"
    );
}

#[tokio::test]
async fn offline_alert_events_carry_the_device_tags() {
    let t = TestTable::new("offline-tags").await;
    let n = notifier(&t);
    // GIVEN a device of site A whose last reading arrived at 14:00, silent for 300 s since
    let arrived = ts("2026-04-20T14:00:00Z");
    let mut d = DeviceItem::new(
        DeviceId::new("silent").unwrap(),
        DeviceStatus::Active,
        arrived,
    );
    d.tags = tags(&[("site", "A")]);
    d.offline_after_seconds = Some(300);
    d.last_arrival_at = Some(arrived);
    d.last_seen_at = Some(arrived);
    d.version = Some(3);
    d.gsi2pk = Some(keys::watch_gsi2pk(&d.device_id));
    d.gsi2sk = Some(keys::watch_gsi2sk(ts("2026-04-20T14:05:00Z")));
    t.put(&d).await;

    // WHEN the watchdog runs at 14:10 and the table's stream reaches the notifier
    let w = Watchdog::new(
        DynamoWatch::new(t.client.clone(), t.name.clone()),
        CaughtUp(t.client.clone(), t.name.clone()),
        WatchdogConfig {
            heartbeat_wait: Duration::from_secs(2),
            heartbeat_poll: Duration::from_millis(50),
            clock: Clock::fixed(ts("2026-04-20T14:10:00Z")),
            ..WatchdogConfig::new(t.name.clone(), "readings")
        },
    );
    let report = w
        .run(tokio::time::Instant::now() + Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(report.opened, 1, "{report:?}");
    let (first, _) = n
        .process(&event(
            stream_records(&t, "the alert's opening on the stream", |r| {
                !alert_changes(r).is_empty()
            })
            .await,
        ))
        .await;
    assert_eq!(first, None);

    // THEN the offline alert's opened event carries the device's tags
    let sent = published(&n);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(
        (&sent[0]["change"], &sent[0]["kind"]),
        (&json!("opened"), &json!("offline"))
    );
    assert_eq!(sent[0]["tags"], json!({"site": "A"}));
}
