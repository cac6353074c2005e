//! Rules of `rules` (windows, rates, stuck values, `keepFiringForSeconds`) through the alerts
//! role against DynamoDB Local: the same situations as the in-memory tests
//! (`crates/aggregator/src/alerting/rule_tests.rs`), with the readings the signals are
//! computed from stored in a real table, rules from the device item's `rules` or the fleet
//! default, and the opened events read from the table's real stream by the notifier.

use crate::common::*;
use serde_json::Value;
use tidemark_aggregator::config::Role;
use tidemark_aggregator::notify::{DynamoMarkers, alert_changes};
use tidemark_aggregator::{Aggregator, AggregatorConfig, Notifier};
use tidemark_schema::rules::parse_rules;
use tidemark_schema::{
    AlertItem, AlertRule, AlertState, DeviceItem, DeviceStatus, ReadingItem, RuleSpec, Timestamp,
};
use tidemark_testkit::TestTable;

fn rules(json: &str) -> Vec<RuleSpec> {
    parse_rules(&serde_json::from_str(json).unwrap()).unwrap()
}

/// The alerts role with `defaults` as the fleet's `DEFAULT_RULES` and no thresholds.
fn alerts_role(t: &TestTable, defaults: &str) -> Aggregator {
    Aggregator::new(
        t.client.clone(),
        AggregatorConfig::new(&t.name)
            .with_role(Role::Alerts)
            .with_default_rules(rules(defaults)),
    )
}

fn at(s: i64) -> Timestamp {
    ts("2026-04-20T14:00:00Z").plus_millis(s * 1000).unwrap()
}

fn reading(device: &str, metric: &str, s: i64, v: f64) -> ReadingItem {
    reading_at(&dev(device), at(s), metrics(&[(metric, v)]), None)
}

/// Registers `device` with its own `rules` (as the API's PUT stores them).
async fn register(t: &TestTable, device: &str, own: Vec<RuleSpec>) {
    let mut d = DeviceItem::new(dev(device), DeviceStatus::Active, at(0));
    d.rules = Some(own);
    put_items(t, &[d]).await;
}

/// Stores the readings (as ingest does), then delivers their records as one batch.
async fn send(t: &TestTable, agg: &Aggregator, s: &mut StreamSim, rs: &[ReadingItem]) {
    put_readings(t, rs).await;
    let (resp, report) = agg
        .process(&event(rs.iter().map(|r| s.insert(r)).collect()))
        .await;
    assert!(resp.batch_item_failures.is_empty(), "{report:?}");
}

/// (opened at, resolved at) of every alert of `device`, oldest first.
async fn episodes(t: &TestTable, device: &str) -> Vec<(Timestamp, Option<Timestamp>)> {
    alerts_of(t, device)
        .await
        .iter()
        .map(|a| (a.opened_at, a.resolved_at))
        .collect()
}

/// Hands the table's stream, once it shows `changes` alert changes, to a notifier, and
/// returns the details it published.
async fn published(t: &TestTable, changes: usize) -> Vec<Value> {
    let n = Notifier::with_parts(
        Bus::default(),
        DynamoMarkers::new(t.client.clone(), t.name.clone()),
        "bus",
    );
    let records = stream_records(t, "the alert changes on the stream", |r| {
        alert_changes(r).len() >= changes
    })
    .await;
    let (first, report) = n.process(&event(records)).await;
    assert_eq!(first, None, "{report:?}");
    n.publisher()
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|e| serde_json::from_str(&e.detail).unwrap())
        .collect()
}

const AVG5M_ABOVE_30_FOR_10M: &str =
    r#"[{"metric":"temperature","aggregate":"avg","window":"5m","above":30,"forSeconds":600}]"#;

#[tokio::test]
async fn a_five_minute_mean_above_the_limit_for_ten_minutes_opens_one_window_alert_and_spikes_do_not()
 {
    let t = TestTable::new("rules-window").await;
    let agg = alerts_role(&t, "[]");
    let mut s = StreamSim::new(1);
    // GIVEN a device whose own rule is "the 5-minute mean above 30 for 10 minutes"
    register(&t, "d", rules(AVG5M_ABOVE_30_FOR_10M)).await;
    // AND a reading a minute: 26.25, with a spike to 40 at minute 5 (the 5-minute mean
    // peaks at 29) and one to 50 at minute 15 (the mean is 31 for 4 minutes, under
    // forSeconds), then 29 for 10 minutes and 31 for 20
    let mut values: Vec<f64> = vec![26.25; 30];
    values[5] = 40.0;
    values[15] = 50.0;
    values.extend([29.0; 10]);
    values.extend([31.0; 20]);
    let readings: Vec<ReadingItem> = values
        .iter()
        .enumerate()
        .map(|(m, v)| reading("d", "temperature", m as i64 * 60, *v))
        .collect();
    // WHEN they arrive a few at a time
    for chunk in readings.chunks(4) {
        send(&t, &agg, &mut s, chunk).await;
    }
    // THEN one alert, opened once the mean had been above 30 for ten minutes: the window
    // (t - 5m, t] passes 30 at minute 42 (29, 29, 31, 31, 31: 30.2), so at minute 52
    let alerts = alerts_of(&t, "d").await;
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    let a = &alerts[0];
    assert_eq!(
        (a.opened_at, a.resolved_at, a.state),
        (at(52 * 60), None, AlertState::Open)
    );
    assert_eq!((a.rule, a.rule.kind()), (AlertRule::Window, "window"));
    assert_eq!(
        a.rule_spec.as_ref(),
        Some(&rules(AVG5M_ABOVE_30_FOR_10M)[0])
    );
    assert_eq!(a.message, "temperature avg over 5m above 30");
    // AND its one opened event says it is a window alert
    let sent = published(&t, 1).await;
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(
        (&sent[0]["change"], &sent[0]["kind"], &sent[0]["rule"]),
        (
            &Value::from("opened"),
            &Value::from("window"),
            &Value::from("window")
        )
    );
    assert_eq!(sent[0]["alertId"], a.alert_id.as_str());
    // AND names the rule that raised it, as declared
    assert_eq!(
        sent[0]["ruleSpec"],
        serde_json::to_value(&rules(AVG5M_ABOVE_30_FOR_10M)[0]).unwrap()
    );
}

#[tokio::test]
async fn a_rate_is_judged_between_neighbours_in_time_order_when_a_late_reading_arrives() {
    let t = TestTable::new("rules-rate").await;
    let agg = alerts_role(&t, "[]");
    let mut s = StreamSim::new(1);
    // GIVEN a device whose own rule is "pressure rises faster than 5 a minute"
    register(
        &t,
        "d",
        rules(r#"[{"metric":"pressure","rate":"per_minute","above":5}]"#),
    )
    .await;
    let p = |sec: i64, v: f64| reading("d", "pressure", sec, v);
    // AND readings rising 1 a minute, the one at minute 2 arriving after minute 10's: in
    // arrival order 10 → 2 is a fall of 8, in time order every step is 1 a minute
    send(&t, &agg, &mut s, &[p(0, 0.0), p(60, 1.0), p(600, 10.0)]).await;
    send(&t, &agg, &mut s, &[p(120, 2.0)]).await;
    assert!(
        alerts_of(&t, "d").await.is_empty(),
        "{:?}",
        alerts_of(&t, "d").await
    );
    // WHEN late readings make a steep step between two neighbours: 9.9 at 540 s, 30 at 570 s
    send(&t, &agg, &mut s, &[p(540, 9.9), p(570, 30.0)]).await;
    // THEN that step (20.1 in 30 s: 40.2 a minute) opened an alert at 570 s, and the step
    // to the reading after it in time (30 → 10 at 600 s, a fall) resolved it
    let alerts = alerts_of(&t, "d").await;
    assert_eq!(
        episodes(&t, "d").await,
        vec![(at(570), Some(at(600)))],
        "{alerts:?}"
    );
    let a = &alerts[0];
    assert_eq!((a.rule.kind(), a.state), ("rate", AlertState::Resolved));
    assert!((a.value - 40.2).abs() < 1e-9, "{}", a.value);
    assert_eq!(
        a.rule_spec.as_ref().map(|r| r.to_string()),
        Some("pressure rate per minute above 5".to_owned())
    );
}

#[tokio::test]
async fn a_fleet_stuck_rule_opens_while_the_device_keeps_sending_the_same_value_and_resolves_when_it_changes()
 {
    let t = TestTable::new("rules-stuck").await;
    // GIVEN the fleet's rule "flow unchanged for an hour", and a device that opted out of
    // the fleet's rules
    let agg = alerts_role(&t, r#"[{"metric":"flow","unchangedForSeconds":3600}]"#);
    register(&t, "opted_out", Vec::new()).await;
    let mut s = StreamSim::new(1);
    // AND both keep sending the same flow every 10 minutes
    let same = |d: &str| -> Vec<ReadingItem> {
        (0..=7).map(|i| reading(d, "flow", i * 600, 12.5)).collect()
    };
    let (d, opted_out) = (same("d"), same("opted_out"));
    send(&t, &agg, &mut s, &d[..6]).await;
    send(&t, &agg, &mut s, &opted_out[..6]).await;
    // 50 minutes unchanged: nothing yet
    assert!(alerts_of(&t, "d").await.is_empty());
    send(&t, &agg, &mut s, &d[6..]).await;
    send(&t, &agg, &mut s, &opted_out[6..]).await;
    // THEN at 60 minutes the fleet's rule opens a stuck alert for the device
    assert_eq!(episodes(&t, "d").await, vec![(at(3600), None)]);
    let a: AlertItem = alerts_of(&t, "d").await.remove(0);
    assert_eq!((a.rule.kind(), a.state), ("stuck", AlertState::Open));
    assert_eq!(
        a.rule_spec.as_ref(),
        Some(&rules(r#"[{"metric":"flow","unchangedForSeconds":3600}]"#)[0])
    );
    // AND none for the device with rules of its own (none)
    assert!(alerts_of(&t, "opted_out").await.is_empty());
    // WHEN the value moves, the alert resolves at that reading
    send(&t, &agg, &mut s, &[reading("d", "flow", 4800, 12.6)]).await;
    assert_eq!(episodes(&t, "d").await, vec![(at(3600), Some(at(4800)))]);
    // AND its events say it is a stuck alert, opened and resolved once each
    let sent = published(&t, 2).await;
    let changes: Vec<(&str, &str)> = sent
        .iter()
        .map(|d| (d["change"].as_str().unwrap(), d["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(changes, [("opened", "stuck"), ("resolved", "stuck")]);
}

#[tokio::test]
async fn keep_firing_for_keeps_a_flapping_signal_one_alert_until_it_has_been_clear_that_long() {
    let t = TestTable::new("rules-keep").await;
    // GIVEN the fleet's rule "the 1-minute max above 30", kept firing for 5 minutes
    let agg = alerts_role(
        &t,
        r#"[{"metric":"temperature","aggregate":"max","window":"1m","above":30,"keepFiringForSeconds":300}]"#,
    );
    let mut s = StreamSim::new(1);
    // AND a value that flaps across the limit every two minutes for 20 minutes, then stays
    // low for 20
    let readings: Vec<ReadingItem> = (0..20)
        .map(|i| {
            let v = if i < 10 && i % 2 == 0 { 31.0 } else { 20.0 };
            reading("d", "temperature", i * 120, v)
        })
        .collect();
    // WHEN they arrive three at a time
    for chunk in readings.chunks(3) {
        send(&t, &agg, &mut s, chunk).await;
    }
    // THEN one alert, resolved once the signal had been clear for five minutes: the last
    // breach is at 960 s, the first clear reading after it at 1080 s, so at 1440 s (the
    // first reading 300 s or more later)
    let alerts = alerts_of(&t, "d").await;
    assert_eq!(
        episodes(&t, "d").await,
        vec![(at(0), Some(at(1440)))],
        "{alerts:?}"
    );
    assert_eq!(alerts[0].rule.kind(), "window");
    assert_eq!(
        alerts[0]
            .rule_spec
            .as_ref()
            .and_then(|r| r.keep_firing_for_seconds),
        Some(300)
    );
}
