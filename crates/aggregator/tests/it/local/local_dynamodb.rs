//! The aggregator against DynamoDB Local: real items, real conditional writes.

use std::collections::BTreeMap;

use crate::common::*;
use aws_lambda_events::event::dynamodb::Event;
use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_aggregator::{AggregatorConfig, BothRoles};
use tidemark_schema::table::{GSI1, attr};
use tidemark_schema::{
    AlertState, DeviceItem, DeviceStatus, LayoutHistory, MetricName, Period, Severity, Threshold,
    keys,
};
use tidemark_testkit::TestTable;

/// AP6: open alerts of a severity, one GSI1 Query per listing partition.
async fn open_alert_ids(t: &TestTable, s: Severity) -> Vec<String> {
    let mut ids = Vec::new();
    for pk in keys::severity_gsi1pks(s) {
        let items = t
            .client
            .query()
            .table_name(&t.name)
            .index_name(GSI1)
            .key_condition_expression("#pk = :pk")
            .expression_attribute_names("#pk", attr::GSI1PK)
            .expression_attribute_values(":pk", AttributeValue::S(pk))
            .send()
            .await
            .unwrap()
            .items
            .unwrap_or_default();
        ids.extend(items.into_iter().filter_map(|i| match i.get("alertId") {
            Some(AttributeValue::S(s)) => Some(s.clone()),
            _ => None,
        }));
    }
    ids
}

async fn item_count(t: &TestTable) -> i32 {
    t.client
        .scan()
        .table_name(&t.name)
        .send()
        .await
        .unwrap()
        .count()
}

fn load_event(path: &str) -> Event {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[tokio::test]
async fn the_lambda_fixture_of_foreign_items_is_ignored_without_error() {
    let t = TestTable::new("agg-fixture").await;
    let agg = aggregator(&t);
    let e = load_event(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/example-dynamodb-event.json"
    ));
    let (resp, report) = agg.process(&e).await;
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(report.records_ignored, report.records_seen);
    assert_eq!(report.items_written, 0);
    assert_eq!(item_count(&t).await, 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    agg.rollups.handle(e.clone(), deadline).await.unwrap();
    agg.alerts.handle(e, deadline).await.unwrap();
}

#[tokio::test]
async fn an_insert_batch_builds_hourly_daily_and_registers_the_device() {
    // GIVEN three readings of an unknown device in one hour
    let t = TestTable::new("agg-insert").await;
    let agg = aggregator(&t);
    let mut s = StreamSim::new(1);
    let rs = vec![
        reading(
            "sensor_01",
            "2026-04-20T14:00:00Z",
            &[("temperature", 22.5), ("humidity", 45.0)],
        ),
        reading(
            "sensor_01",
            "2026-04-20T14:01:00Z",
            &[("temperature", 23.5), ("humidity", 44.0)],
        ),
        reading(
            "sensor_01",
            "2026-04-20T14:02:00Z",
            &[("temperature", 21.0)],
        ),
    ];
    put_readings(&t, &rs).await;
    // WHEN their INSERT records arrive as one batch
    let (resp, report) = agg
        .process(&event(rs.iter().map(|r| s.insert(r)).collect()))
        .await;
    // THEN one write per item: hourly, daily, device
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(report.items_written, 3);
    assert_eq!(report.readings_aggregated, 3);
    assert_exact(&t, &[dev("sensor_01")], &rs).await;
    let hourly = stored_aggregates(&t, &[dev("sensor_01")]).await[&bucket_key(
        "sensor_01",
        Period::Hourly.bucket(ts("2026-04-20T14:00:00Z")),
    )]
        .clone();
    let temp = &hourly.metrics[&MetricName::new("temperature").unwrap()];
    assert_eq!(
        (temp.count, temp.sum, temp.min, temp.max),
        (3, 67.0, 21.0, 23.5)
    );
    assert_eq!(hourly.version, 1);
    // AND the device is registered (status active, in GSI1) with the newest reading
    let d = device_item(&t, "sensor_01")
        .await
        .expect("device registered");
    assert_eq!(d.status, DeviceStatus::Active);
    assert_eq!(d.gsi1pk, keys::status_gsi1pk(DeviceStatus::Active, None));
    assert_eq!(d.gsi1sk, keys::device_gsi1sk(&dev("sensor_01")));
    assert_eq!(d.last_seen_at, Some(ts("2026-04-20T14:02:00Z")));
    assert_eq!(d.latest.unwrap().metrics, metrics(&[("temperature", 21.0)]));
}

#[tokio::test]
async fn replays_and_bisections_change_nothing() {
    let t = TestTable::new("agg-replay").await;
    let agg = aggregator(&t);
    let mut s = StreamSim::new(1);
    let rs: Vec<_> = (0..6)
        .map(|i| {
            reading(
                "sensor_01",
                &format!("2026-04-20T14:0{i}:00Z"),
                &[("temperature", 20.0 + i as f64)],
            )
        })
        .collect();
    put_readings(&t, &rs).await;
    let records: Vec<_> = rs.iter().map(|r| s.insert(r)).collect();
    // bisected: first half, then the second half, then the whole batch twice
    agg.process(&event(records[..3].to_vec())).await;
    agg.process(&event(records[3..].to_vec())).await;
    let (_, again) = agg.process(&event(records.clone())).await;
    let (_, again2) = agg.process(&event(records[1..5].to_vec())).await;
    assert_eq!(again.items_written, 0, "a replay writes nothing");
    assert_eq!(again2.items_written, 0);
    assert_exact(&t, &[dev("sensor_01")], &rs).await;
}

/// A batch whose hourly write landed but whose daily write did not (the invocation died in
/// between) is delivered again: the hour applies nothing, and the day, which holds an older
/// version of the hour, is folded from its hours.
#[tokio::test]
async fn a_day_that_missed_its_hours_write_catches_up_on_the_replay() {
    let t = TestTable::new("agg-day-behind").await;
    let agg = aggregator(&t);
    let mut s = StreamSim::new(1);
    let rs: Vec<_> = ["14:00", "14:10", "15:00", "14:20"]
        .iter()
        .enumerate()
        .map(|(i, hm)| {
            reading(
                "sensor_01",
                &format!("2026-04-20T{hm}:00Z"),
                &[("temperature", 20.0 + i as f64)],
            )
        })
        .collect();
    put_readings(&t, &rs[..3]).await;
    let records: Vec<_> = rs.iter().map(|r| s.insert(r)).collect();
    agg.process(&event(records[..3].to_vec())).await;
    put_readings(&t, &rs[3..]).await;
    let day_key = tidemark_schema::AggregateItem::key_for(
        &dev("sensor_01"),
        Period::Daily.bucket(ts("2026-04-20T00:00:00Z")),
    );
    let get_day = || {
        t.client
            .get_item()
            .table_name(&t.name)
            .key("pk", AttributeValue::S(day_key.pk.clone()))
            .key("sk", AttributeValue::S(day_key.sk.clone()))
            .consistent_read(true)
            .send()
    };
    let day_before = get_day().await.unwrap().item.unwrap();
    agg.process(&event(records[3..].to_vec())).await;
    // GIVEN the day as it was before the last batch (its write "never landed")
    t.client
        .put_item()
        .table_name(&t.name)
        .set_item(Some(day_before))
        .send()
        .await
        .unwrap();
    // WHEN the last batch is delivered again
    let (resp, again) = agg.process(&event(records[3..].to_vec())).await;
    // THEN the hour is left alone and the day holds every reading once
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(again.items_written, 1, "only the day is written: {again:?}");
    assert_exact(&t, &[dev("sensor_01")], &rs).await;
    let day: tidemark_schema::AggregateItem =
        tidemark_store::from_item(get_day().await.unwrap().item.unwrap()).unwrap();
    assert_eq!(
        day.folded.len(),
        2,
        "the day records both hours: {:?}",
        day.folded
    );
    // AND one more replay writes nothing at all
    let (_, third) = agg.process(&event(records[3..].to_vec())).await;
    assert_eq!(third.items_written, 0);
}

#[tokio::test]
async fn hour_and_day_boundaries_split_the_buckets() {
    let t = TestTable::new("agg-bounds").await;
    let agg = aggregator(&t);
    let mut s = StreamSim::new(2);
    let rs = vec![
        reading("d1", "2026-04-20T22:59:59.999000Z", &[("t", 1.0)]),
        reading("d1", "2026-04-20T23:00:00Z", &[("t", 2.0)]),
        reading("d1", "2026-04-20T23:59:59.999000Z", &[("t", 3.0)]),
        reading("d1", "2026-04-21T00:00:00Z", &[("t", 4.0)]),
        reading("d2", "2026-04-21T00:00:00.001000Z", &[("t", 5.0)]),
    ];
    put_readings(&t, &rs).await;
    let (resp, _) = agg
        .process(&event(rs.iter().map(|r| s.insert(r)).collect()))
        .await;
    assert!(resp.batch_item_failures.is_empty());
    assert_exact(&t, &[dev("d1"), dev("d2")], &rs).await;
    let got = stored_aggregates(&t, &[dev("d1")]).await;
    assert_eq!(got.len(), 3 + 2, "3 hours and 2 days of d1");
}

#[tokio::test]
async fn ttl_removals_are_ignored() {
    let t = TestTable::new("agg-ttl").await;
    let agg = aggregator(&t);
    let mut s = StreamSim::new(1);
    let r = reading("sensor_01", "2026-04-20T14:00:00Z", &[("t", 1.0)]);
    put_readings(&t, std::slice::from_ref(&r)).await;
    agg.process(&event(vec![s.insert(&r)])).await;
    let before = stored_aggregates(&t, &[dev("sensor_01")]).await;
    // WHEN TTL deletes the reading
    delete_reading(&t, &r).await;
    let (resp, report) = agg.process(&event(vec![s.ttl_remove(&r)])).await;
    // THEN the aggregates keep it
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!((report.records_ignored, report.items_written), (1, 0));
    assert_eq!(stored_aggregates(&t, &[dev("sensor_01")]).await, before);
}

#[tokio::test]
async fn a_corrected_reading_is_recomputed() {
    let t = TestTable::new("agg-correct").await;
    let agg = aggregator(&t);
    let mut s = StreamSim::new(1);
    let mut rs = vec![
        reading("sensor_01", "2026-04-20T14:00:00Z", &[("t", 20.0)]),
        reading("sensor_01", "2026-04-20T14:01:00Z", &[("t", 99.0)]),
        reading("sensor_01", "2026-04-20T14:02:00Z", &[("t", 21.0)]),
    ];
    put_readings(&t, &rs).await;
    agg.process(&event(rs.iter().map(|r| s.insert(r)).collect()))
        .await;
    // WHEN the outlier is corrected in the table (a MODIFY with other values)
    let old = rs[1].clone();
    rs[1] = reading("sensor_01", "2026-04-20T14:01:00Z", &[("t", 22.0)]);
    put_readings(&t, &rs[1..2]).await;
    let modify = s.modify(&old, &rs[1]);
    let (resp, _) = agg.process(&event(vec![modify.clone()])).await;
    assert!(resp.batch_item_failures.is_empty());
    // THEN count, sum, min and max are those of the raw readings (max is no longer 99)
    assert_exact(&t, &[dev("sensor_01")], &rs).await;
    // AND replaying the correction changes nothing
    let (_, again) = agg.process(&event(vec![modify])).await;
    assert_eq!(again.items_written, 0);
    assert_exact(&t, &[dev("sensor_01")], &rs).await;
}

#[tokio::test]
async fn a_user_delete_is_recomputed_and_a_metadata_only_modify_is_not() {
    let t = TestTable::new("agg-delete").await;
    let agg = aggregator(&t);
    let mut s = StreamSim::new(1);
    let mut rs = vec![
        reading("sensor_01", "2026-04-20T14:00:00Z", &[("t", 20.0)]),
        reading("sensor_01", "2026-04-20T14:30:00Z", &[("t", 25.0)]),
        reading("sensor_01", "2026-04-20T14:59:00Z", &[("t", 30.0)]),
    ];
    put_readings(&t, &rs).await;
    agg.process(&event(rs.iter().map(|r| s.insert(r)).collect()))
        .await;
    let gone = rs.pop().unwrap();
    delete_reading(&t, &gone).await;
    let (resp, _) = agg.process(&event(vec![s.user_remove(&gone)])).await;
    assert!(resp.batch_item_failures.is_empty());
    assert_exact(&t, &[dev("sensor_01")], &rs).await;
    // a MODIFY that changes only metadata leaves aggregates alone
    let mut with_meta = rs[0].clone();
    with_meta.metadata = Some(serde_json::Map::from_iter([("fw".into(), "2.1.1".into())]));
    let (_, report) = agg
        .process(&event(vec![s.modify(&rs[0], &with_meta)]))
        .await;
    assert_eq!((report.records_ignored, report.items_written), (1, 0));
}

#[tokio::test]
async fn a_hot_device_correction_reads_its_shard_partitions() {
    // GIVEN a device writing to 4 partitions
    let t = TestTable::new("agg-hot").await;
    let agg = aggregator(&t);
    let d = dev("hot_01");
    let h = LayoutHistory::default()
        .with_change(ts("2026-04-20T00:00:00Z"), 4)
        .unwrap();
    put_layout_history(&t, &d, &h).await;
    let mut rs: Vec<_> = (0..12)
        .map(|i| {
            let at = ts("2026-04-20T14:00:00Z").plus_millis(i * 1000).unwrap();
            reading_at(&d, at, metrics(&[("t", i as f64)]), h.partition_at(at))
        })
        .collect();
    put_readings(&t, &rs).await;
    let mut s = StreamSim::new(3);
    agg.process(&event(rs.iter().map(|r| s.insert(r)).collect()))
        .await;
    assert_exact(&t, std::slice::from_ref(&d), &rs).await;
    // WHEN the maximum (t=11) is corrected down
    let old = rs[11].clone();
    rs[11] = reading_at(
        &d,
        old.to_reading().unwrap().0.timestamp,
        metrics(&[("t", 0.5)]),
        h.partition_at(old.to_reading().unwrap().0.timestamp),
    );
    put_readings(&t, &rs[11..]).await;
    agg.process(&event(vec![s.modify(&old, &rs[11])])).await;
    // THEN the new maximum comes from the other partitions
    assert_exact(&t, std::slice::from_ref(&d), &rs).await;
}

fn thresholds() -> BTreeMap<MetricName, Threshold> {
    BTreeMap::from([(
        MetricName::new("temperature").unwrap(),
        Threshold::new(None, Some(30.0), Severity::Critical),
    )])
}

#[tokio::test]
async fn alerts_open_update_stay_acknowledged_and_resolve() {
    let t = TestTable::new("agg-alerts").await;
    // GIVEN a device with a temperature threshold on its item
    let mut d = DeviceItem::new(
        dev("sensor_01"),
        DeviceStatus::Active,
        ts("2026-04-01T00:00:00Z"),
    );
    d.thresholds = thresholds();
    t.client
        .put_item()
        .table_name(&t.name)
        .set_item(Some(tidemark_store::to_item(&d).unwrap()))
        .send()
        .await
        .unwrap();
    let agg = aggregator(&t);
    let mut s = StreamSim::new(1);
    let r = |at: &str, v: f64| reading("sensor_01", at, &[("temperature", v)]);

    // WHEN a breach arrives THEN one alert opens, indexed under its severity
    let b1 = [
        r("2026-04-20T14:00:00Z", 25.0),
        r("2026-04-20T14:01:00Z", 31.0),
    ];
    put_readings(&t, &b1).await;
    let (_, rep) = agg
        .process(&event(b1.iter().map(|x| s.insert(x)).collect()))
        .await;
    assert_eq!(rep.alerts_opened, 1);
    let alerts = alerts_of(&t, "sensor_01").await;
    assert_eq!(alerts.len(), 1);
    let id = alerts[0].alert_id.clone();
    assert_eq!(id.as_str(), "20260420T140100000000Z-temperature-max");
    assert_eq!(
        open_alert_ids(&t, Severity::Critical).await,
        [id.to_string()]
    );
    assert_eq!(
        device_item(&t, "sensor_01").await.unwrap().rule_states["temperature-max"].alert,
        Some(id.clone())
    );

    // WHEN the API acknowledges it and more breaches arrive
    t.client
        .update_item()
        .table_name(&t.name)
        .key("pk", AttributeValue::S(alerts[0].pk.clone()))
        .key("sk", AttributeValue::S(alerts[0].sk.clone()))
        .update_expression("SET #s = :ack, acknowledgedAt = :at")
        .expression_attribute_names("#s", "state")
        .expression_attribute_values(":ack", AttributeValue::S("acknowledged".into()))
        .expression_attribute_values(
            ":at",
            AttributeValue::S("2026-04-20T14:01:30.000000Z".into()),
        )
        .send()
        .await
        .unwrap();
    let b2 = vec![
        r("2026-04-20T14:02:00Z", 35.0),
        r("2026-04-20T14:03:00Z", 33.0),
    ];
    put_readings(&t, &b2).await;
    agg.process(&event(b2.iter().map(|x| s.insert(x)).collect()))
        .await;
    // THEN it stays acknowledged and in AP6; breaches that change no state write nothing
    // (its peak and count are written with its next state change)
    let a = &alerts_of(&t, "sensor_01").await[0];
    assert_eq!(a.state, AlertState::Acknowledged);
    assert_eq!(open_alert_ids(&t, Severity::Critical).await.len(), 1);

    // WHEN a late breach older than the alert arrives THEN it is history (opened and
    // resolved by the next reading) and the open alert neither flips nor counts it
    let before_late = alerts_of(&t, "sensor_01").await[0].clone();
    let late = vec![r("2026-04-20T13:59:00Z", 50.0)];
    put_readings(&t, &late).await;
    agg.process(&event(late.iter().map(|x| s.insert(x)).collect()))
        .await;
    let all = alerts_of(&t, "sensor_01").await;
    let a = all.iter().find(|a| a.alert_id == id).unwrap();
    // (the derivation stops at the normal reading after the late one: the open alert's
    // statistics are written with its next state change, as documented)
    assert_eq!(a, &before_late, "the open alert is left as it was");
    assert_eq!(a.state, AlertState::Acknowledged);
    let history = all.iter().find(|a| a.alert_id != id).unwrap();
    assert_eq!(
        (history.state, history.resolved_at),
        (AlertState::Resolved, Some(ts("2026-04-20T14:00:00Z")))
    );
    assert_eq!(
        device_item(&t, "sensor_01").await.unwrap().last_seen_at,
        Some(ts("2026-04-20T14:03:00Z")),
        "a late reading never moves lastSeenAt back"
    );

    // WHEN the first normal reading arrives THEN it resolves and leaves the index
    let b3 = vec![r("2026-04-20T14:04:00Z", 29.0)];
    put_readings(&t, &b3).await;
    let (_, rep) = agg
        .process(&event(b3.iter().map(|x| s.insert(x)).collect()))
        .await;
    assert_eq!(rep.alerts_resolved, 1);
    let a = alerts_of(&t, "sensor_01")
        .await
        .into_iter()
        .find(|a| a.alert_id == id)
        .unwrap();
    assert_eq!(a.state, AlertState::Resolved);
    assert_eq!(a.resolved_at, Some(ts("2026-04-20T14:04:00Z")));
    assert_eq!((a.gsi1pk.as_ref(), a.gsi1sk.as_ref()), (None, None));
    assert!(open_alert_ids(&t, Severity::Critical).await.is_empty());
    assert!(
        device_item(&t, "sensor_01").await.unwrap().rule_states["temperature-max"]
            .alert
            .is_none()
    );

    // AND replaying everything opens nothing new
    let all: Vec<_> = b1.iter().chain(&b2).chain(&b3).cloned().collect();
    let mut s2 = StreamSim::new(1);
    let (_, rep) = agg
        .process(&event(all.iter().map(|x| s2.insert(x)).collect()))
        .await;
    assert_eq!((rep.alerts_opened, rep.alerts_resolved), (0, 0));
    assert_eq!(alerts_of(&t, "sensor_01").await.len(), 2);
}

#[tokio::test]
async fn default_thresholds_apply_to_devices_without_their_own() {
    let t = TestTable::new("agg-defaults").await;
    let agg = BothRoles::new(
        t.client.clone(),
        AggregatorConfig::new(&t.name).with_default_thresholds(thresholds()),
    );
    let mut s = StreamSim::new(1);
    let rs = [reading(
        "fresh",
        "2026-04-20T14:00:00Z",
        &[("temperature", 40.0)],
    )];
    put_readings(&t, &rs).await;
    let (_, rep) = agg
        .process(&event(rs.iter().map(|x| s.insert(x)).collect()))
        .await;
    assert_eq!(rep.alerts_opened, 1);
    assert_eq!(open_alert_ids(&t, Severity::Critical).await.len(), 1);
}

#[tokio::test]
async fn two_concurrent_invocations_for_one_device_stay_exact() {
    let t = TestTable::new("agg-race").await;
    let agg = BothRoles::new(
        t.client.clone(),
        AggregatorConfig::new(&t.name).with_default_thresholds(thresholds()),
    );
    let d = dev("hot_01");
    let h = LayoutHistory::default()
        .with_change(ts("2026-04-20T00:00:00Z"), 2)
        .unwrap();
    put_layout_history(&t, &d, &h).await;
    let mut s = StreamSim::new(2);
    let mut all = Vec::new();
    for round in 0..4i64 {
        let rs: Vec<_> = (0..10i64)
            .map(|i| {
                let at = ts("2026-04-20T14:00:00Z")
                    .plus_millis((round * 10 + i) * 1000)
                    .unwrap();
                let v = if (round + i) % 3 == 0 {
                    31.0
                } else {
                    20.0 + i as f64 / 4.0
                };
                reading_at(&d, at, metrics(&[("temperature", v)]), h.partition_at(at))
            })
            .collect();
        put_readings(&t, &rs).await;
        all.extend(rs.iter().cloned());
        let records: Vec<_> = rs.iter().map(|r| s.insert(r)).collect();
        // the same device's two partitions in two invocations at once, plus the whole
        // batch delivered a second time concurrently (a retried timeout)
        let (s0, s1): (Vec<_>, Vec<_>) = rs
            .iter()
            .zip(records.iter().cloned())
            .partition(|(r, _)| r.pk.ends_with("#S0"));
        let s0: Vec<_> = s0.into_iter().map(|(_, rec)| rec).collect();
        let s1: Vec<_> = s1.into_iter().map(|(_, rec)| rec).collect();
        assert!(!s0.is_empty() && !s1.is_empty());
        let (e0, e1, whole) = (event(s0), event(s1), event(records.clone()));
        let (a, b, c) = tokio::join!(agg.process(&e0), agg.process(&e1), agg.process(&whole));
        for (resp, report) in [a, b, c] {
            assert!(resp.batch_item_failures.is_empty(), "{report:?}");
        }
    }
    assert_exact(&t, std::slice::from_ref(&d), &all).await;
    let item = device_item(&t, "hot_01").await.unwrap();
    assert_eq!(
        item.last_seen_at,
        all.iter()
            .map(|r| r.to_reading().unwrap().0.timestamp)
            .max()
    );
    // every breach evaluated once, whichever invocation got there first: each one-reading
    // breach (a normal reading follows it) is one alert, resolved by that reading, and the
    // last reading, a breach, leaves exactly one open
    let breaches = all
        .iter()
        .filter(|r| r.metrics.values().any(|v| *v > 30.0))
        .count();
    let alerts = alerts_of(&t, "hot_01").await;
    assert_eq!(alerts.len(), breaches, "{alerts:?}");
    assert!(alerts.iter().all(|a| a.breach_count == 1));
    let open: Vec<_> = alerts
        .iter()
        .filter(|a| a.state != AlertState::Resolved)
        .collect();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].opened_at, ts("2026-04-20T14:00:39Z"));
}

#[tokio::test]
async fn the_event_files_are_stream_events_of_our_items() {
    let t = TestTable::new("agg-events").await;
    let agg = aggregator(&t);
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../events/");
    let readings = load_event(&format!("{root}ddb-stream-readings.json"));
    let (resp, report) = agg.process(&readings).await;
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(report.records_ignored, 0);
    assert!(report.readings_aggregated > 0);
    let ttl = load_event(&format!("{root}ddb-stream-ttl-remove.json"));
    let before = stored_aggregates(&t, &[dev("sensor_01")]).await;
    let (resp, report) = agg.process(&ttl).await;
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(report.records_ignored, report.records_seen);
    assert_eq!(stored_aggregates(&t, &[dev("sensor_01")]).await, before);
}

#[tokio::test]
async fn an_unreadable_item_is_skipped_and_counted_and_the_rest_of_the_batch_goes_on() {
    // GIVEN an hourly item of d1 and the device item of d2 written by something else
    let t = TestTable::new("agg-poison").await;
    let agg = aggregator(&t);
    let mut s = StreamSim::new(1);
    let hour = Period::Hourly.bucket(ts("2026-04-20T14:00:00Z"));
    let poison_hourly = tidemark_schema::AggregateItem::key_for(&dev("d1"), hour);
    let poison_device = tidemark_schema::EntityKey::Device(dev("d2")).key();
    for k in [&poison_hourly, &poison_device] {
        t.client
            .put_item()
            .table_name(&t.name)
            .item("pk", AttributeValue::S(k.pk.clone()))
            .item("sk", AttributeValue::S(k.sk.clone()))
            .item("metrics", AttributeValue::S("not a map".into()))
            .item("status", AttributeValue::N("7".into()))
            .send()
            .await
            .unwrap();
    }
    let rs = vec![
        reading("d1", "2026-04-20T14:00:00Z", &[("temperature", 1.0)]),
        reading("d2", "2026-04-20T14:00:00Z", &[("temperature", 2.0)]),
        reading("d3", "2026-04-20T14:00:00Z", &[("temperature", 3.0)]),
    ];
    put_readings(&t, &rs).await;
    // WHEN a batch touches them
    let (resp, report) = agg
        .process(&event(rs.iter().map(|r| s.insert(r)).collect()))
        .await;
    // THEN the batch succeeds, the two unreadable items are counted and left as they were
    assert!(resp.batch_item_failures.is_empty(), "{report:?}");
    assert_eq!(report.unreadable_items, 2, "{report:?}");
    let get = |k: tidemark_schema::Key| {
        let c = t.client.clone();
        let name = t.name.clone();
        async move {
            c.get_item()
                .table_name(name)
                .key("pk", AttributeValue::S(k.pk))
                .key("sk", AttributeValue::S(k.sk))
                .send()
                .await
                .unwrap()
                .item
                .unwrap()
        }
    };
    let still = get(poison_hourly.clone()).await;
    assert_eq!(
        still["metrics"],
        AttributeValue::S("not a map".into()),
        "the unreadable hourly item is left as it was"
    );
    // AND every other item is exact: d2's rollups, all of d3
    assert_exact(&t, &[dev("d2"), dev("d3")], &rs[1..]).await;
    // AND d1's day, which follows its hours, holds nothing of the hour it could not read
    let daily_key = tidemark_schema::AggregateItem::key_for(
        &dev("d1"),
        Period::Daily.bucket(ts("2026-04-20T14:00:00Z")),
    );
    let daily = t
        .client
        .get_item()
        .table_name(&t.name)
        .key("pk", AttributeValue::S(daily_key.pk))
        .key("sk", AttributeValue::S(daily_key.sk))
        .send()
        .await
        .unwrap();
    assert!(daily.item.is_none(), "{:?}", daily.item);
    assert!(device_item(&t, "d3").await.is_some());
}
