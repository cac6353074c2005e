//! Tests across entities: the attribute names of [`super::field`] are the ones serde writes,
//! and GSI1's projection is made of device and alert attributes.

use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::history::LayoutHistory;
use crate::ids::{AlertId, AlertRule, DeviceId, DeviceStatus, MetricName, Severity};

fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

#[test]
fn field_constants_are_the_serialised_names() {
    let mut d = DeviceItem::new(
        DeviceId::new("sensor_01").unwrap(),
        DeviceStatus::Active,
        ts("2026-04-20T14:00:00Z"),
    );
    d.updated_at = Some(d.created_at);
    d.last_seen_at = Some(d.created_at);
    d.latest = Some(LatestReading {
        timestamp: d.created_at,
        metrics: BTreeMap::new(),
    });
    d.rule_states.insert(
        DeviceItem::rule_state_key(&MetricName::new("temperature").unwrap(), AlertRule::Max),
        RuleState {
            mode: RulePhase::Open,
            since: Some(d.created_at),
            alert: Some(AlertId::for_breach(
                d.created_at,
                &MetricName::new("temperature").unwrap(),
                AlertRule::Max,
            )),
            at: d.created_at,
            threshold: Threshold::new(None, Some(30.0), Severity::Critical),
        },
    );
    d.thresholds.insert(
        MetricName::new("temperature").unwrap(),
        Threshold::new(None, Some(30.0), Severity::Critical),
    );
    d.gateway_for = GatewayFor::new([DeviceId::new("leaf_1").unwrap()]).unwrap();
    d.max_metrics_per_day = Some(5000);
    d.rules = Some(Vec::new());
    let v = serde_json::to_value(&d).unwrap();
    for f in [
        field::DEVICE_ID,
        field::STATUS,
        field::CREATED_AT,
        field::UPDATED_AT,
        field::LAST_SEEN_AT,
        field::LATEST,
        field::THRESHOLDS,
        field::RULE_STATES,
        field::RULES,
        field::GATEWAY_FOR,
        field::MAX_METRICS_PER_DAY,
    ] {
        assert!(v.get(f).is_some(), "device item has no {f}: {v}");
    }
    let names = serde_json::to_value(MetricNamesItem::new(
        &DeviceId::new("sensor_01").unwrap(),
        d.created_at.day(),
    ))
    .unwrap();
    assert!(names.get(field::NAMES).is_some(), "{names}");
    let calls = serde_json::to_value(CallerRateItem::new("user-1", d.created_at)).unwrap();
    assert!(calls.get(field::REQUESTS).is_some(), "{calls}");
    let a = AggregateItem {
        pk: String::new(),
        sk: String::new(),
        metrics: BTreeMap::new(),
        first_at: d.created_at,
        last_at: d.created_at,
        applied: BTreeMap::new(),
        marks: Default::default(),
        marked_at: 0,
        from_table: false,
        folded: Default::default(),
        version: 0,
        sealed: false,
        open: false,
    };
    let v = serde_json::to_value(&a).unwrap();
    assert!(
        v.get(field::SEALED).is_none(),
        "unsealed items write no sealed"
    );
    assert!(v.get(field::OPEN).is_none(), "closed days write no open");
    let open = serde_json::to_value(AggregateItem {
        open: true,
        ..a.clone()
    })
    .unwrap();
    assert_eq!(open[field::OPEN], serde_json::json!(true));
    for f in [
        field::METRICS,
        field::FIRST_AT,
        field::LAST_AT,
        field::APPLIED,
        field::VERSION,
    ] {
        assert!(v.get(f).is_some(), "aggregate item has no {f}: {v}");
    }
    let s = serde_json::to_value(LayoutHistoryItem::new(
        &DeviceId::new("x").unwrap(),
        LayoutHistory::default(),
    ))
    .unwrap();
    assert!(s.get(field::EPOCHS).is_some());
}

#[test]
fn every_gsi1_projected_attribute_is_a_device_or_alert_field() {
    let mut d = DeviceItem::new(
        DeviceId::new("sensor_01").unwrap(),
        DeviceStatus::Active,
        ts("2026-04-20T14:00:00Z"),
    );
    d.name = Some("Warehouse Temp A".into());
    d.device_type = Some(DeviceType::Sensor);
    d.location = Some(json!("aisle 3"));
    d.firmware = Some("2.1.0".into());
    d.updated_at = Some(d.created_at);
    let m = MetricName::new("temperature").unwrap();
    let a = AlertItem {
        pk: String::new(),
        sk: String::new(),
        gsi1pk: None,
        gsi1sk: None,
        device_id: d.device_id.clone(),
        alert_id: AlertId::for_breach(d.created_at, &m, AlertRule::Max),
        metric: Some(m),
        rule: AlertRule::Max,
        rule_spec: None,
        severity: Severity::Critical,
        state: AlertState::Open,
        message: "temperature above 30".into(),
        value: 31.0,
        threshold: 30.0,
        breach_count: 1,
        opened_at: d.created_at,
        last_breach_at: d.created_at,
        acknowledged_at: Some(d.created_at),
        resolved_at: None,
        snoozed_until: Some(d.created_at),
        tags: Default::default(),
    };
    let dv = serde_json::to_value(&d).unwrap();
    let av = serde_json::to_value(&a).unwrap();
    for f in crate::table::TABLE.global_secondary_indexes[0].non_key_attributes {
        assert!(
            dv.get(f).is_some() || av.get(f).is_some(),
            "{f} is on no item"
        );
    }
    // What changes on every batch must stay out of the index, or each device update
    // pays a second write unit for the index copy.
    for f in [field::LAST_SEEN_AT, field::LATEST] {
        assert!(
            !crate::table::TABLE.global_secondary_indexes[0]
                .non_key_attributes
                .contains(&f)
        );
    }
}

#[test]
fn a_gateway_speaks_for_at_most_a_thousand_distinct_devices_stored_as_a_list() {
    let ids = |n: usize| (0..n).map(|i| DeviceId::new(&format!("leaf_{i}")).unwrap());
    let g = GatewayFor::new(ids(MAX_GATEWAY_FOR).chain(ids(3))).unwrap();
    assert_eq!(g.len(), MAX_GATEWAY_FOR);
    assert_eq!(
        GatewayFor::new(ids(MAX_GATEWAY_FOR + 1)),
        Err(GatewayForError::TooMany(MAX_GATEWAY_FOR + 1))
    );
    let v = serde_json::to_value(GatewayFor::new(ids(2)).unwrap()).unwrap();
    assert_eq!(v, serde_json::json!(["leaf_0", "leaf_1"]));
    let too_many: Vec<String> = ids(MAX_GATEWAY_FOR + 1).map(|d| d.to_string()).collect();
    assert!(serde_json::from_value::<GatewayFor>(serde_json::json!(too_many)).is_err());
    let d = DeviceItem::new(
        DeviceId::new("plain").unwrap(),
        DeviceStatus::Active,
        Timestamp::parse_rfc3339("2026-04-20T00:00:00Z").unwrap(),
    );
    let v = serde_json::to_value(&d).unwrap();
    assert!(v.get(field::GATEWAY_FOR).is_none(), "no list, no attribute");
}

#[test]
fn device_identity_reads_its_setting_and_defaults_to_the_partition_key() {
    assert_eq!(DeviceIdentity::default(), DeviceIdentity::PartitionKey);
    for m in DeviceIdentity::ALL {
        assert_eq!(DeviceIdentity::parse(m.as_str()), Some(m));
    }
    assert_eq!(
        DeviceIdentity::parse(" IoT-Thing "),
        Some(DeviceIdentity::IotThing)
    );
    assert_eq!(DeviceIdentity::parse("partition_key"), None);
    assert_eq!(DeviceIdentity::parse(""), None);
}

#[test]
fn a_days_metric_names_expire_days_after_the_day_and_fit_one_item_at_the_largest_cap() {
    let day = crate::time::Day::parse("2026-04-20").unwrap();
    let item = MetricNamesItem::new(&DeviceId::new("gw_1").unwrap(), day);
    assert_eq!(
        (item.pk.as_str(), item.sk.as_str()),
        ("DEVICE#gw_1", "METRICS#2026-04-20")
    );
    let end = ts("2026-04-21T00:00:00Z").epoch_millis() / 1000;
    assert_eq!(item.ttl, end + METRIC_NAMES_KEEP_DAYS * 86_400);
    let largest = MAX_METRICS_PER_DAY as usize * MetricName::MAX_LEN;
    assert!(largest + 1024 < 400 * 1024, "{largest} bytes");
    const { assert!(DEFAULT_MAX_METRICS_PER_DAY <= MAX_METRICS_PER_DAY) };
}
