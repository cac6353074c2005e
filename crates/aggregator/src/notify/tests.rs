use std::collections::HashSet;
use std::sync::Mutex;

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use tidemark_schema::{
    AlertItem, AlertRule, AlertState, DeviceItem, DeviceStatus, EntityKey, EventId, TagKey,
    TagValue, Tags, Timestamp,
};
use tidemark_store::StoreError;

use super::*;

fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

fn alert(device: &str, opened: &str) -> AlertItem {
    crate::testing::open_alert(device, ts(opened))
}

fn record(name: &str, seq: u64, old: Option<&AlertItem>, new: Option<&AlertItem>) -> EventRecord {
    use crate::testing::{change_record, image};
    let mut r = change_record(seq.into(), old.map(image), new.map(image));
    r.event_name = name.into();
    r.event_id = format!("e{seq}");
    let timed: aws_lambda_events::event::dynamodb::StreamRecord = serde_json::from_value(
        serde_json::json!({"ApproximateCreationDateTime": 1_776_700_000 + seq, "SizeBytes": 1}),
    )
    .unwrap();
    r.change.approximate_creation_date_time = timed.approximate_creation_date_time;
    r
}

fn event(records: Vec<EventRecord>) -> Event {
    let mut e = Event::default();
    e.records = records;
    e
}

fn kinds(records: &[EventRecord]) -> Vec<ChangeKind> {
    alert_changes(records).iter().map(|c| c.kind).collect()
}

#[test]
fn an_inserted_alert_is_opened_and_a_spike_born_resolved_is_also_resolved() {
    let a = alert("sensor_01", "2026-04-20T14:00:00Z");
    assert_eq!(
        kinds(&[record("INSERT", 1, None, Some(&a))]),
        [ChangeKind::Opened]
    );
    let mut spike = a.clone();
    spike.state = AlertState::Resolved;
    spike.resolved_at = Some(ts("2026-04-20T14:01:00Z"));
    let changes = alert_changes(&[record("INSERT", 2, None, Some(&spike))]);
    let k: Vec<_> = changes.iter().map(|c| c.kind).collect();
    assert_eq!(k, [ChangeKind::Opened, ChangeKind::Resolved]);
    assert_eq!(changes[0].detail.changed_at, spike.opened_at);
    assert_eq!(changes[1].detail.changed_at, ts("2026-04-20T14:01:00Z"));
    assert_ne!(changes[0].event_id(), changes[1].event_id());
}

#[test]
fn each_transition_between_images_is_one_change() {
    let open = alert("sensor_01", "2026-04-20T14:00:00Z");
    let mut peak = open.clone();
    peak.value = 50.0;
    peak.breach_count = 2;
    let mut acked = peak.clone();
    acked.state = AlertState::Acknowledged;
    acked.acknowledged_at = Some(ts("2026-04-20T14:05:00Z"));
    let mut resolved = acked.clone();
    resolved.state = AlertState::Resolved;
    resolved.resolved_at = Some(ts("2026-04-20T14:10:00Z"));
    let mut snoozed = open.clone();
    snoozed.snoozed_until = Some(ts("2026-04-20T18:00:00Z"));
    let mut resnoozed = snoozed.clone();
    resnoozed.snoozed_until = Some(ts("2026-04-20T20:00:00Z"));
    let records = [
        record("MODIFY", 1, Some(&open), Some(&peak)),
        record("MODIFY", 2, Some(&peak), Some(&acked)),
        record("MODIFY", 3, Some(&acked), Some(&resolved)),
        record("MODIFY", 4, Some(&open), Some(&snoozed)),
        record("MODIFY", 5, Some(&snoozed), Some(&resnoozed)),
        record("MODIFY", 6, Some(&resnoozed), Some(&open)),
        record("MODIFY", 7, Some(&open), Some(&resolved)),
    ];
    let changes = alert_changes(&records);
    let got: Vec<_> = changes.iter().map(|c| (c.index, c.kind)).collect();
    assert_eq!(
        got,
        [
            (1, ChangeKind::Acknowledged),
            (2, ChangeKind::Resolved),
            (3, ChangeKind::Snoozed),
            (4, ChangeKind::Snoozed),
            (5, ChangeKind::Unsnoozed),
            (6, ChangeKind::Resolved),
        ]
    );
    // A snooze change happens when its record was written.
    assert_eq!(
        changes[2].detail.changed_at.epoch_seconds(),
        1_776_700_000 + 4
    );
}

#[test]
fn a_resolved_alert_open_again_is_opened_once_more_under_an_event_id_of_its_own() {
    let open = alert("sensor_01", "2026-04-20T14:00:00Z");
    let mut resolved = open.clone();
    resolved.state = AlertState::Resolved;
    resolved.resolved_at = Some(ts("2026-04-20T14:10:00Z"));
    let mut acked = open.clone();
    acked.state = AlertState::Acknowledged;
    acked.acknowledged_at = Some(ts("2026-04-20T14:05:00Z"));
    let mut acked_resolved = acked.clone();
    acked_resolved.state = AlertState::Resolved;
    acked_resolved.resolved_at = resolved.resolved_at;
    let changes = alert_changes(&[
        record("INSERT", 1, None, Some(&open)),
        record("MODIFY", 2, Some(&open), Some(&resolved)),
        record("MODIFY", 3, Some(&resolved), Some(&open)),
        record("MODIFY", 4, Some(&acked_resolved), Some(&acked)),
    ]);
    let got: Vec<_> = changes.iter().map(|c| (c.index, c.kind)).collect();
    assert_eq!(
        got,
        [
            (0, ChangeKind::Opened),
            (1, ChangeKind::Resolved),
            (2, ChangeKind::Opened),
            (3, ChangeKind::Opened),
        ]
    );
    // The first opening's NOTIFIED marker does not swallow the reopening.
    assert_ne!(changes[0].event_id(), changes[2].event_id());
    assert_eq!(changes[2].detail.state, AlertState::Open);
    assert_eq!(changes[3].detail.state, AlertState::Acknowledged);
    assert_eq!(changes[2].detail.resolved_at, None);
}

#[test]
fn removals_and_items_other_than_alerts_give_no_change() {
    let a = alert("sensor_01", "2026-04-20T14:00:00Z");
    let mut reading = EventRecord::default();
    reading.event_name = "INSERT".into();
    reading.change.sequence_number = Some("5".into());
    reading.change.keys = serde_dynamo::to_item(serde_json::json!({
        "pk": "DEVICE#sensor_01", "sk": "READING#2026-04-20T14:00:00.000000Z"
    }))
    .unwrap();
    let marker = EntityKey::NotifyMarker(EventId::new(&"a".repeat(32)).unwrap()).key();
    let mut m = EventRecord::default();
    m.event_name = "INSERT".into();
    m.change.sequence_number = Some("6".into());
    m.change.keys =
        serde_dynamo::to_item(serde_json::json!({"pk": marker.pk, "sk": marker.sk})).unwrap();
    assert!(kinds(&[record("REMOVE", 1, Some(&a), None), reading, m]).is_empty());
}

#[test]
fn event_ids_repeat_for_a_replayed_record_and_differ_for_another_write_or_change() {
    let a = alert("sensor_01", "2026-04-20T14:00:00Z");
    let first = alert_changes(&[record("INSERT", 7, None, Some(&a))]);
    let replay = alert_changes(&[record("INSERT", 7, None, Some(&a))]);
    assert_eq!(first[0].event_id(), replay[0].event_id());
    let later = alert_changes(&[record("INSERT", 8, None, Some(&a))]);
    assert_ne!(first[0].event_id(), later[0].event_id());
    let k = EntityKey::Alert {
        device: a.device_id.clone(),
        alert: a.alert_id.clone(),
    }
    .key();
    assert_eq!(
        event_id(&k, "000000000000000000007", ChangeKind::Opened),
        event_id(&k, "7", ChangeKind::Opened),
        "DynamoDB Local's zero padding does not change the ID"
    );
    assert_ne!(
        event_id(&k, "7", ChangeKind::Opened),
        event_id(&k, "7", ChangeKind::Resolved)
    );
    let other = alert("sensor_02", "2026-04-20T14:00:00Z");
    let o = alert_changes(&[record("INSERT", 7, None, Some(&other))]);
    assert_ne!(first[0].event_id(), o[0].event_id());
}

#[test]
fn a_snoozed_alert_changes_silently_but_its_snooze_changes_are_published() {
    let mut a = alert("sensor_01", "2026-04-20T14:00:00Z");
    a.snoozed_until = Some(ts("2026-04-20T15:00:00Z"));
    let mut resolved = a.clone();
    resolved.state = AlertState::Resolved;
    resolved.resolved_at = Some(ts("2026-04-20T16:00:00Z"));
    let mut unsnoozed = a.clone();
    unsnoozed.snoozed_until = None;
    let changes = alert_changes(&[
        record("INSERT", 1, None, Some(&a)),
        record("MODIFY", 2, Some(&a), Some(&resolved)),
        record("MODIFY", 3, Some(&a), Some(&unsnoozed)),
    ]);
    let got: Vec<_> = changes.iter().map(|c| (c.kind, c.suppressed)).collect();
    assert_eq!(
        got,
        [
            (ChangeKind::Opened, true),
            (ChangeKind::Resolved, false),
            (ChangeKind::Unsnoozed, false)
        ],
        "opened inside the snooze is silent; resolved after it ended is not"
    );
}

#[test]
fn the_detail_has_the_documented_shape() {
    let mut a = alert("sensor_01", "2026-04-20T14:00:00Z");
    a.state = AlertState::Acknowledged;
    a.acknowledged_at = Some(ts("2026-04-20T14:05:00Z"));
    let open = alert("sensor_01", "2026-04-20T14:00:00Z");
    let c = alert_changes(&[record("MODIFY", 3, Some(&open), Some(&a))]);
    let v = serde_json::to_value(&c[0].detail).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    let mut want = vec![
        "eventId",
        "change",
        "deviceId",
        "alertId",
        "kind",
        "metric",
        "rule",
        "severity",
        "state",
        "value",
        "threshold",
        "message",
        "openedAt",
        "acknowledgedAt",
        "changedAt",
        "path",
        "tags",
    ];
    want.sort_unstable();
    let mut keys = keys;
    keys.sort_unstable();
    assert_eq!(keys, want);
    assert_eq!(v["change"], "acknowledged");
    assert_eq!(v["kind"], "threshold");
    assert_eq!(v["state"], "acknowledged");
    assert_eq!(v["severity"], "critical");
    assert_eq!(v["changedAt"], "2026-04-20T14:05:00.000000Z");
    assert_eq!(
        v["path"],
        "/devices/sensor_01/alerts/20260420T140000000000Z-temperature-max"
    );
    assert_eq!(v["eventId"].as_str().unwrap().len(), 32);
    // An alert item without tags (a device without, or written before tags existed).
    assert_eq!(v["tags"], serde_json::json!({}));
}

fn tags(pairs: &[(&str, &str)]) -> Tags {
    Tags::new(
        pairs
            .iter()
            .map(|(k, v)| (TagKey::new(k).unwrap(), TagValue::new(v).unwrap()))
            .collect(),
    )
    .unwrap()
}

#[test]
fn the_detail_carries_the_alert_items_tags_as_an_object() {
    let mut offline = alert("sensor_01", "2026-04-20T14:00:00Z");
    offline.metric = None;
    offline.rule = AlertRule::Offline;
    offline.tags = tags(&[("site", "A"), ("line", "3")]);
    let c = alert_changes(&[record("INSERT", 1, None, Some(&offline))]);
    let v = serde_json::to_value(&c[0].detail).unwrap();
    assert_eq!(v["kind"], "offline");
    assert_eq!(v["tags"], serde_json::json!({"site": "A", "line": "3"}));
}

#[test]
fn a_rules_alert_event_carries_its_kind_and_the_rule_as_declared() {
    let spec = tidemark_schema::RuleSpec::from_value(&serde_json::json!(
        {"metric":"temperature","aggregate":"avg","window":"5m","above":30,"forSeconds":600}
    ))
    .unwrap();
    let mut a = alert("sensor_01", "2026-04-20T14:00:00Z");
    a.rule = AlertRule::Window;
    a.alert_id = tidemark_schema::AlertId::for_rule(
        a.opened_at,
        &spec.metric,
        AlertRule::Window,
        &spec.tag(),
    );
    a.rule_spec = Some(spec);
    let c = alert_changes(&[record("INSERT", 1, None, Some(&a))]);
    let v = serde_json::to_value(&c[0].detail).unwrap();
    assert_eq!(v["kind"], "window");
    assert_eq!(v["rule"], "window");
    assert_eq!(
        v["ruleSpec"],
        serde_json::json!({"metric":"temperature","aggregate":"avg","window":"5m","above":30.0,
            "forSeconds":600,"severity":"warning"})
    );
    // a threshold's event has none
    let t = alert_changes(&[record(
        "INSERT",
        1,
        None,
        Some(&alert("sensor_01", "2026-04-20T14:00:00Z")),
    )]);
    assert!(
        serde_json::to_value(&t[0].detail)
            .unwrap()
            .get("ruleSpec")
            .is_none()
    );
}

/// Records what was put; fails every entry whose detail contains a string in `failing`.
#[derive(Default)]
struct FakeBus {
    put: Mutex<Vec<EventEntry>>,
    calls: Mutex<Vec<usize>>,
    failing: Mutex<Vec<String>>,
}

impl Publisher for FakeBus {
    async fn put_events(&self, entries: &[EventEntry]) -> Result<EntryOutcomes, String> {
        assert!(entries.len() <= MAX_ENTRIES);
        self.calls.lock().unwrap().push(entries.len());
        let failing = self.failing.lock().unwrap().clone();
        let mut out = Vec::new();
        for e in entries {
            if failing.iter().any(|f| e.detail.contains(f.as_str())) {
                out.push(Some("InternalFailure: try again".to_owned()));
            } else {
                self.put.lock().unwrap().push(e.clone());
                out.push(None);
            }
        }
        Ok(out)
    }
}

#[derive(Default)]
struct FakeMarkers(Mutex<HashSet<EventId>>);

impl Markers for FakeMarkers {
    async fn marked(&self, ids: &[EventId]) -> Result<HashSet<EventId>, StoreError> {
        let m = self.0.lock().unwrap();
        Ok(ids.iter().filter(|i| m.contains(*i)).cloned().collect())
    }
    async fn mark(&self, ids: &[EventId], _now: Timestamp) -> usize {
        self.0.lock().unwrap().extend(ids.iter().cloned());
        0
    }
}

fn notifier() -> Notifier<FakeBus, FakeMarkers> {
    Notifier::with_parts(FakeBus::default(), FakeMarkers::default(), "tidemark-test").with_retry(
        tidemark_store::retry::RetryPolicy {
            base_delay: std::time::Duration::ZERO,
            max_delay: std::time::Duration::ZERO,
        },
    )
}

fn detail_of(e: &EventEntry) -> serde_json::Value {
    serde_json::from_str(&e.detail).unwrap()
}

#[tokio::test]
async fn a_replayed_batch_publishes_nothing_twice() {
    let n = notifier();
    let a = alert("sensor_01", "2026-04-20T14:00:00Z");
    let mut acked = a.clone();
    acked.state = AlertState::Acknowledged;
    acked.acknowledged_at = Some(ts("2026-04-20T14:05:00Z"));
    let batch = event(vec![
        record("INSERT", 1, None, Some(&a)),
        record("MODIFY", 2, Some(&a), Some(&acked)),
    ]);
    let (first, report) = n.process(&batch).await;
    assert_eq!(first, None);
    assert_eq!(report.published, 2);
    let put = n.publisher().put.lock().unwrap().clone();
    let changes: Vec<_> = put.iter().map(|e| detail_of(e)["change"].clone()).collect();
    assert_eq!(changes, ["opened", "acknowledged"]);
    assert!(
        put.iter()
            .all(|e| e.bus == "tidemark-test" && e.detail_type == DETAIL_TYPE)
    );

    let (first, report) = n.process(&batch).await;
    assert_eq!(first, None);
    assert_eq!((report.published, report.already_published), (0, 2));
    assert_eq!(n.publisher().put.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_change_that_cannot_be_published_fails_its_record_and_only_it_is_sent_again() {
    let n = notifier();
    let a = alert("sensor_01", "2026-04-20T14:00:00Z");
    let b = alert("sensor_02", "2026-04-20T14:00:00Z");
    let c = alert("sensor_03", "2026-04-20T14:00:00Z");
    let batch = event(vec![
        record("INSERT", 1, None, Some(&a)),
        record("INSERT", 2, None, Some(&b)),
        record("INSERT", 3, None, Some(&c)),
    ]);
    n.publisher()
        .failing
        .lock()
        .unwrap()
        .push("sensor_02".into());
    let (first, report) = n.process(&batch).await;
    assert_eq!(first, Some(1), "the record of the unpublished change");
    assert_eq!((report.published, report.publish_failed), (2, 1));
    assert_eq!(
        n.publisher().calls.lock().unwrap().len() as u32,
        MAX_ATTEMPTS,
        "one call, then retries of the failed entry alone"
    );

    n.publisher().failing.lock().unwrap().clear();
    let (first, report) = n.process(&batch).await;
    assert_eq!(first, None);
    assert_eq!((report.published, report.already_published), (1, 2));
    let devices: Vec<_> = n
        .publisher()
        .put
        .lock()
        .unwrap()
        .iter()
        .map(|e| detail_of(e)["deviceId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(devices, ["sensor_01", "sensor_03", "sensor_02"]);
}

#[tokio::test]
async fn events_go_out_ten_a_call_and_snoozed_changes_are_counted_not_sent() {
    let n = notifier();
    let mut records: Vec<_> = (0..23)
        .map(|i| {
            let a = alert(&format!("sensor_{i:02}"), "2026-04-20T14:00:00Z");
            record("INSERT", i + 1, None, Some(&a))
        })
        .collect();
    let mut snoozed = alert("sensor_99", "2026-04-20T14:00:00Z");
    snoozed.snoozed_until = Some(ts("2026-04-21T00:00:00Z"));
    records.push(record("INSERT", 100, None, Some(&snoozed)));
    let (first, report) = n.process(&event(records)).await;
    assert_eq!(first, None);
    assert_eq!((report.published, report.suppressed), (23, 1));
    assert_eq!(*n.publisher().calls.lock().unwrap(), [10, 10, 3]);
}

/// The stream records the writes between two snapshots of the alerts would give: an INSERT
/// per new alert, a MODIFY (old and new image) per changed one.
fn records_between(before: &[AlertItem], after: &[AlertItem], seq: &mut u64) -> Vec<EventRecord> {
    let mut out = Vec::new();
    for a in after {
        let old = before.iter().find(|b| b.alert_id == a.alert_id);
        if old == Some(a) {
            continue;
        }
        *seq += 1;
        let name = if old.is_some() { "MODIFY" } else { "INSERT" };
        out.push(record(name, *seq, old, Some(a)));
    }
    out
}

#[tokio::test]
async fn threshold_alert_events_carry_the_device_tags_of_when_the_alert_was_written() {
    use crate::config::{Role, parse_thresholds};
    use crate::memory::MemoryStore;
    use crate::testing::{device, insert, metric};
    use crate::{Aggregator, AggregatorConfig};

    let config = AggregatorConfig::new("t")
        .with_role(Role::Alerts)
        .with_default_thresholds(
            parse_thresholds(r#"{"t":{"max":30,"severity":"critical"}}"#).unwrap(),
        );
    let agg = Aggregator::with_store(MemoryStore::default(), config);
    let n = notifier();
    let at = |s: i64| ts("2026-04-20T14:00:00Z").plus_millis(s * 1000).unwrap();
    let mut seq = 0;
    // GIVEN a device tagged site A, line 3
    let mut dev = DeviceItem::new(device("d1"), DeviceStatus::Active, at(0));
    dev.tags = tags(&[("site", "A"), ("line", "3")]);
    agg.store().put_device(&dev);
    // WHEN a breach opens an alert, and its stream record is published
    agg.store()
        .put_reading(&device("d1"), at(0), [(metric("t"), 40.0)].into());
    let (resp, _) = agg
        .process(&event(vec![insert(1, "d1", at(0), "t", 40.0)]))
        .await;
    assert!(resp.batch_item_failures.is_empty());
    let opened = agg.store().alerts();
    let (first, _) = n
        .process(&event(records_between(&[], &opened, &mut seq)))
        .await;
    assert_eq!(first, None);
    // THEN the alert item and its opened event carry the device's tags
    assert_eq!(opened[0].tags, dev.tags);
    let put = n.publisher().put.lock().unwrap().clone();
    assert_eq!(detail_of(&put[0])["change"], "opened");
    assert_eq!(
        detail_of(&put[0])["tags"],
        serde_json::json!({"site": "A", "line": "3"})
    );

    // WHEN the device moves to site B, and a normal reading resolves the alert
    let mut moved = agg.store().device(&device("d1")).unwrap();
    moved.tags = tags(&[("site", "B")]);
    agg.store().put_device(&moved);
    agg.store()
        .put_reading(&device("d1"), at(60), [(metric("t"), 20.0)].into());
    let (resp, _) = agg
        .process(&event(vec![insert(2, "d1", at(60), "t", 20.0)]))
        .await;
    assert!(resp.batch_item_failures.is_empty());
    let resolved = agg.store().alerts();
    n.process(&event(records_between(&opened, &resolved, &mut seq)))
        .await;
    // THEN the resolved event carries the tags the alert was last written with: site B's
    let put = n.publisher().put.lock().unwrap().clone();
    assert_eq!(put.len(), 2);
    assert_eq!(detail_of(&put[1])["change"], "resolved");
    assert_eq!(detail_of(&put[1])["tags"], serde_json::json!({"site": "B"}));
}
