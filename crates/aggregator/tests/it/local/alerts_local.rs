//! The alerts role against DynamoDB Local: each rule and each situation in which alerts used
//! to be wrong, with real conditional writes and transactions.

use crate::common::*;
use aws_lambda_events::event::dynamodb::EventRecord;
use tidemark_aggregator::config::{Role, parse_thresholds};
use tidemark_aggregator::testing::device_modify;
use tidemark_aggregator::{Aggregator, AggregatorConfig};
use tidemark_schema::{
    AlertItem, AlertState, DeviceItem, DeviceStatus, LayoutHistory, ReadingItem, RulePhase,
    Timestamp,
};
use tidemark_testkit::TestTable;

const MAX30: &str = r#"{"temperature":{"max":30,"severity":"critical"}}"#;

fn alerts_role(t: &TestTable, thresholds: &str) -> Aggregator {
    Aggregator::new(
        t.client.clone(),
        AggregatorConfig::new(&t.name)
            .with_role(Role::Alerts)
            .with_default_thresholds(parse_thresholds(thresholds).unwrap()),
    )
}

fn at(s: i64) -> Timestamp {
    ts("2026-04-20T14:00:00Z").plus_millis(s * 1000).unwrap()
}

fn temp(device: &str, s: i64, v: f64) -> ReadingItem {
    reading_at(&dev(device), at(s), metrics(&[("temperature", v)]), None)
}

/// Stores the readings (as ingest does), then delivers their records as one batch.
async fn send(t: &TestTable, agg: &Aggregator, s: &mut StreamSim, rs: &[ReadingItem]) {
    put_readings(t, rs).await;
    deliver(agg, s, rs).await;
}

async fn deliver(agg: &Aggregator, s: &mut StreamSim, rs: &[ReadingItem]) {
    let (resp, report) = agg
        .process(&event(rs.iter().map(|r| s.insert(r)).collect()))
        .await;
    assert!(resp.batch_item_failures.is_empty(), "{report:?}");
}

fn unresolved(alerts: &[AlertItem]) -> Vec<&AlertItem> {
    alerts
        .iter()
        .filter(|a| a.state != AlertState::Resolved)
        .collect()
}

#[tokio::test]
async fn a_late_breach_never_leaves_an_alert_open_when_newer_readings_are_normal() {
    let t = TestTable::new("alerts-late").await;
    let agg = alerts_role(&t, MAX30);
    let mut s = StreamSim::new(1);
    // GIVEN normal readings, then later normal ones whose device write is deferred
    send(&t, &agg, &mut s, &[temp("d", 0, 20.0), temp("d", 60, 21.0)]).await;
    send(
        &t,
        &agg,
        &mut s,
        &[temp("d", 120, 22.0), temp("d", 180, 23.0)],
    )
    .await;
    // WHEN a breach older than the newest of them arrives
    send(&t, &agg, &mut s, &[temp("d", 150, 40.0)]).await;
    // THEN it is recorded as history, resolved by the reading after it; nothing is open
    let alerts = alerts_of(&t, "d").await;
    assert!(unresolved(&alerts).is_empty(), "{alerts:?}");
    assert_eq!(alerts.len(), 1);
    assert_eq!(
        (alerts[0].opened_at, alerts[0].resolved_at),
        (at(150), Some(at(180)))
    );
    // AND lastSeenAt and latest are the newest reading's, never the late one's
    let d = device_item(&t, "d").await.unwrap();
    assert_eq!(d.last_seen_at, Some(at(180)));
    assert_eq!(d.latest.unwrap().timestamp, at(180));
}

#[tokio::test]
async fn a_one_reading_spike_on_a_four_shard_device_is_never_missed() {
    let t = TestTable::new("alerts-hot").await;
    let agg = alerts_role(&t, MAX30);
    let d = dev("hot");
    let h = LayoutHistory::default()
        .with_change(ts("2026-04-20T00:00:00Z"), 4)
        .unwrap();
    put_layout_history(&t, &d, &h).await;
    let mut s = StreamSim::new(1);
    // GIVEN 4 rounds of 40 readings over the 4 shards, one spike per round at a different
    // position, each shard's records in its own invocation, all four at once
    for round in 0..4i64 {
        let rs: Vec<ReadingItem> = (0..40i64)
            .map(|i| {
                let sec = round * 100 + i;
                let v = if i == 10 + round * 7 { 99.0 } else { 20.0 };
                reading_at(
                    &d,
                    at(sec),
                    metrics(&[("temperature", v)]),
                    h.partition_at(at(sec)),
                )
            })
            .collect();
        put_readings(&t, &rs).await;
        let mut per_shard: Vec<Vec<EventRecord>> = vec![Vec::new(); 4];
        for r in &rs {
            let shard = r.pk.rsplit("#S").next().unwrap().parse::<usize>().unwrap();
            per_shard[shard].push(s.insert(r));
        }
        let events: Vec<_> = per_shard.into_iter().map(event).collect();
        let results = futures::future::join_all(events.iter().map(|e| agg.process(e))).await;
        for (resp, report) in results {
            assert!(resp.batch_item_failures.is_empty(), "{report:?}");
        }
    }
    // THEN every spike opened an alert that the next reading resolved: 4 of 4
    let alerts = alerts_of(&t, "hot").await;
    assert_eq!(alerts.len(), 4, "{alerts:?}");
    for (round, a) in alerts.iter().enumerate() {
        let sec = round as i64 * 100 + 10 + round as i64 * 7;
        assert_eq!((a.opened_at, a.value), (at(sec), 99.0));
        assert_eq!(a.resolved_at, Some(at(sec + 1)));
    }
}

#[tokio::test]
async fn removing_a_threshold_resolves_the_alert_it_opened() {
    let t = TestTable::new("alerts-removed").await;
    let agg = alerts_role(&t, "{}");
    // GIVEN a device with its own threshold, breaching
    let mut d = DeviceItem::new(dev("d"), DeviceStatus::Active, at(0));
    d.thresholds = parse_thresholds(MAX30).unwrap();
    t.client
        .put_item()
        .table_name(&t.name)
        .set_item(Some(tidemark_store::to_item(&d).unwrap()))
        .send()
        .await
        .unwrap();
    let mut s = StreamSim::new(1);
    send(&t, &agg, &mut s, &[temp("d", 10, 35.0)]).await;
    assert_eq!(unresolved(&alerts_of(&t, "d").await).len(), 1);
    // WHEN the threshold is removed (as the API's PUT does) and its MODIFY arrives
    let before = device_item(&t, "d").await.unwrap();
    t.client
        .update_item()
        .table_name(&t.name)
        .key(
            "pk",
            aws_sdk_dynamodb::types::AttributeValue::S(before.pk.clone()),
        )
        .key(
            "sk",
            aws_sdk_dynamodb::types::AttributeValue::S(before.sk.clone()),
        )
        .update_expression("REMOVE thresholds SET updatedAt = :u")
        .expression_attribute_values(
            ":u",
            aws_sdk_dynamodb::types::AttributeValue::S(at(20).to_string()),
        )
        .send()
        .await
        .unwrap();
    let after = device_item(&t, "d").await.unwrap();
    let (resp, report) = agg
        .process(&event(vec![device_modify(900, &before, &after)]))
        .await;
    assert!(resp.batch_item_failures.is_empty());
    // THEN the alert is resolved at the change, and out of the open-alert index
    assert_eq!(report.alerts_resolved, 1);
    let alerts = alerts_of(&t, "d").await;
    assert!(unresolved(&alerts).is_empty(), "{alerts:?}");
    assert_eq!(alerts[0].resolved_at, Some(at(20)));
    assert_eq!(alerts[0].gsi1pk, None);
    assert!(device_item(&t, "d").await.unwrap().rule_states.is_empty());
}

#[tokio::test]
async fn a_deadband_keeps_a_hovering_value_from_flapping() {
    let t = TestTable::new("alerts-deadband").await;
    let agg = alerts_role(
        &t,
        r#"{"temperature":{"max":30,"deadband":2,"severity":"critical"}}"#,
    );
    let mut s = StreamSim::new(1);
    let hover: Vec<_> = [31.0, 29.5, 30.5, 29.0, 30.2]
        .iter()
        .enumerate()
        .map(|(i, v)| temp("d", i as i64, *v))
        .collect();
    send(&t, &agg, &mut s, &hover[..2]).await;
    send(&t, &agg, &mut s, &hover[2..]).await;
    let alerts = alerts_of(&t, "d").await;
    assert_eq!((alerts.len(), unresolved(&alerts).len()), (1, 1));
    send(&t, &agg, &mut s, &[temp("d", 10, 27.9)]).await;
    let alerts = alerts_of(&t, "d").await;
    assert_eq!(alerts[0].resolved_at, Some(at(10)));
}

#[tokio::test]
async fn for_seconds_opens_only_once_the_breach_has_lasted_on_reading_time() {
    let t = TestTable::new("alerts-for").await;
    let agg = alerts_role(
        &t,
        r#"{"temperature":{"max":30,"forSeconds":60,"severity":"warning"}}"#,
    );
    let mut s = StreamSim::new(1);
    send(&t, &agg, &mut s, &[temp("d", 0, 31.0), temp("d", 30, 31.0)]).await;
    assert!(alerts_of(&t, "d").await.is_empty());
    let rule_state = device_item(&t, "d").await.unwrap().rule_states["temperature-max"].clone();
    assert_eq!(
        (rule_state.mode, rule_state.since),
        (RulePhase::Pending, Some(at(0)))
    );
    // a reading back inside restarts the clock
    send(
        &t,
        &agg,
        &mut s,
        &[temp("d", 45, 29.0), temp("d", 60, 31.0)],
    )
    .await;
    assert!(alerts_of(&t, "d").await.is_empty());
    send(&t, &agg, &mut s, &[temp("d", 120, 32.0)]).await;
    let alerts = alerts_of(&t, "d").await;
    assert_eq!(alerts.len(), 1);
    assert_eq!((alerts[0].opened_at, alerts[0].breach_count), (at(120), 2));
}

#[tokio::test]
async fn replayed_and_bisected_batches_of_the_alert_mapping_duplicate_nothing() {
    let t = TestTable::new("alerts-replay").await;
    let agg = alerts_role(&t, MAX30);
    let rs: Vec<_> = [20.0, 35.0, 20.0, 36.0, 37.0, 20.0, 38.0]
        .iter()
        .enumerate()
        .map(|(i, v)| temp("d", i as i64, *v))
        .collect();
    put_readings(&t, &rs).await;
    let mut s = StreamSim::new(1);
    let records: Vec<_> = rs.iter().map(|r| s.insert(r)).collect();
    // the whole batch fails half-way in Lambda's eyes: bisected, then retried whole, twice
    for part in [&records[..3], &records[3..], &records[..], &records[..]] {
        let (resp, _) = agg.process(&event(part.to_vec())).await;
        assert!(resp.batch_item_failures.is_empty());
    }
    let once = alerts_of(&t, "d").await;
    assert_eq!(once.len(), 3, "{once:?}");
    assert_eq!(unresolved(&once).len(), 1);
    let (_, report) = agg.process(&event(records.clone())).await;
    assert_eq!((report.items_written, report.alerts_opened), (0, 0));
    assert_eq!(alerts_of(&t, "d").await, once);
}

#[tokio::test]
async fn a_three_hundred_episode_upload_is_stored_whole_and_the_shard_moves_on() {
    let t = TestTable::new("alerts-upload").await;
    let agg = alerts_role(&t, MAX30);
    let mut s = StreamSim::new(1);
    // GIVEN a store-and-forward upload of 600 readings alternating above and below 30 (no
    // deadband): 300 episodes, three times what one transaction may hold
    let upload: Vec<ReadingItem> = (0..600)
        .map(|i| temp("gw", i, if i % 2 == 0 { 35.0 } else { 25.0 }))
        .collect();
    // WHEN it arrives in one batch (DynamoDB refuses a transaction past 100 actions)
    send(&t, &agg, &mut s, &upload).await;
    // THEN every episode is one resolved alert and the device moved on
    let alerts = alerts_of(&t, "gw").await;
    assert_eq!(alerts.len(), 300);
    assert!(unresolved(&alerts).is_empty());
    let d = device_item(&t, "gw").await.unwrap();
    assert_eq!(d.last_seen_at, Some(at(599)));
    // AND a breach of another device on the same shard, in the next batch, opens its alert
    send(&t, &agg, &mut s, &[temp("other", 600, 41.0)]).await;
    let other = alerts_of(&t, "other").await;
    assert_eq!(unresolved(&other).len(), 1, "{other:?}");
}

#[tokio::test]
async fn a_late_breach_before_a_snoozed_alert_keeps_it_and_the_shard_moves_on() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let t = TestTable::new("alerts-late-snoozed").await;
    let agg = alerts_role(&t, MAX30);
    let mut s = StreamSim::new(1);
    // GIVEN an alert opened at 150 that an operator acknowledged and snoozed
    send(
        &t,
        &agg,
        &mut s,
        &[temp("d", 100, 20.0), temp("d", 150, 35.0)],
    )
    .await;
    let open = alerts_of(&t, "d").await;
    assert_eq!(open.len(), 1);
    let snoozed_until = at(7_200).to_string();
    t.client
        .update_item()
        .table_name(&t.name)
        .key("pk", AttributeValue::S(open[0].pk.clone()))
        .key("sk", AttributeValue::S(open[0].sk.clone()))
        .update_expression("SET #state = :ack, acknowledgedAt = :at, snoozedUntil = :until")
        .expression_attribute_names("#state", "state")
        .expression_attribute_values(":ack", AttributeValue::S("acknowledged".into()))
        .expression_attribute_values(":at", AttributeValue::S(at(160).to_string()))
        .expression_attribute_values(":until", AttributeValue::S(snoozed_until.clone()))
        .send()
        .await
        .unwrap();
    // WHEN a late breach at 140 arrives, with a breach of another device in the same batch
    send(
        &t,
        &agg,
        &mut s,
        &[temp("d", 140, 33.0), temp("other", 141, 45.0)],
    )
    .await;
    // THEN the alert is the same one, still acknowledged and snoozed, opened at 140
    let alerts = alerts_of(&t, "d").await;
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(alerts[0].alert_id, open[0].alert_id);
    assert_eq!(alerts[0].state, AlertState::Acknowledged);
    assert_eq!(
        alerts[0].snoozed_until.map(|t| t.to_string()),
        Some(snoozed_until)
    );
    assert_eq!(alerts[0].opened_at, at(140));
    // AND the other device's breach opened its alert in the same invocation
    assert_eq!(unresolved(&alerts_of(&t, "other").await).len(), 1);
}

#[tokio::test]
async fn a_correction_that_removes_an_episodes_end_reopens_its_alert() {
    let t = TestTable::new("alerts-reopen").await;
    let agg = alerts_role(&t, MAX30);
    let mut s = StreamSim::new(1);
    // GIVEN an episode from 150 resolved at 200
    let end = temp("d", 200, 20.0);
    send(
        &t,
        &agg,
        &mut s,
        &[temp("d", 100, 20.0), temp("d", 150, 35.0), end.clone()],
    )
    .await;
    let before = alerts_of(&t, "d").await;
    assert_eq!(before.len(), 1);
    assert_eq!(before[0].resolved_at, Some(at(200)));
    // WHEN the reading that ended it is corrected into a breach
    let corrected = temp("d", 200, 36.0);
    put_readings(&t, std::slice::from_ref(&corrected)).await;
    let (resp, report) = agg.process(&event(vec![s.modify(&end, &corrected)])).await;
    assert!(resp.batch_item_failures.is_empty(), "{report:?}");
    // THEN its one alert is open again under its ID, back in the index, and the rule names it
    let alerts = alerts_of(&t, "d").await;
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    let a = &alerts[0];
    assert_eq!(a.alert_id, before[0].alert_id);
    assert_eq!(
        (a.state, a.resolved_at, a.value),
        (AlertState::Open, None, 36.0)
    );
    assert!(a.gsi1pk.is_some() && a.gsi1sk.is_some(), "{a:?}");
    let rule = device_item(&t, "d").await.unwrap().rule_states["temperature-max"].clone();
    assert_eq!(
        (rule.mode, rule.alert),
        (RulePhase::Open, Some(a.alert_id.clone()))
    );
}
