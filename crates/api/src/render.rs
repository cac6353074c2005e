//! Items to the JSON shapes of docs/design.md §6 (camelCase, keys never shown).

use aws_sdk_dynamodb::types::AttributeValue;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};
use tidemark_schema::table::attr;
use tidemark_schema::{
    AggregateItem, AlertItem, AlertRule, DeviceId, DeviceItem, EntityKey, LatestReading,
    LayoutHistory, QuarantineItem, QuarantinePartItem, QuarantineReason, ReadingItem, Timestamp,
    number,
};
use tidemark_store::Item;

use crate::error::ApiError;

/// Integral numbers as integers (`30`, not `30.0`), as readings print them.
pub fn normalize(v: &mut Value) {
    match v {
        Value::Number(n) => {
            if !n.is_i64()
                && !n.is_u64()
                && let Some(f) = n.as_f64()
            {
                *v = number(f);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(normalize),
        Value::Object(m) => m.values_mut().for_each(normalize),
        _ => {}
    }
}

fn without_keys(v: Value) -> Value {
    let mut v = v;
    if let Value::Object(m) = &mut v {
        for k in [
            attr::PK,
            attr::SK,
            attr::GSI1PK,
            attr::GSI1SK,
            attr::GSI2PK,
            attr::GSI2SK,
            attr::TTL,
        ] {
            m.remove(k);
        }
    }
    normalize(&mut v);
    v
}

fn corrupt(e: impl std::fmt::Display) -> ApiError {
    ApiError::Corrupt(e.to_string())
}

/// A device with its `connectivity` (`online`, `offline` or `unknown`), judged with the
/// fleet's offline window `fleet_window` for a device without its own.
/// `tags` and `tagsFrom` show the latest declared tags (absent when it has none).
pub fn device(d: &DeviceItem, fleet_window: u32) -> Result<Value, ApiError> {
    let mut v = without_keys(serde_json::to_value(d).map_err(corrupt)?);
    if let Value::Object(m) = &mut v {
        m.insert(
            "connectivity".into(),
            Value::from(d.connectivity(fleet_window).as_str()),
        );
    }
    Ok(v)
}

pub fn device_item(item: Item, fleet_window: u32) -> Result<Value, ApiError> {
    device(&tidemark_store::from_item(item)?, fleet_window)
}

/// A device as the status listing has it: what GSI1 projects, so no `connectivity` (which
/// needs the device's arrival and offline state; `?connectivity=offline` lists those).
pub fn device_summary(item: Item) -> Result<Value, ApiError> {
    let d: DeviceItem = tidemark_store::from_item(item)?;
    Ok(without_keys(serde_json::to_value(&d).map_err(corrupt)?))
}

/// A device as a tag listing has it: the status listing's summary with its `tags` and
/// `tagsFrom`.
pub fn tagged_device(item: Item) -> Result<Value, ApiError> {
    const SHOWN: &[&str] = &[
        "deviceId",
        "name",
        "type",
        "status",
        "location",
        "firmware",
        "createdAt",
        "updatedAt",
        "tags",
        "tagsFrom",
    ];
    let d: DeviceItem = tidemark_store::from_item(item)?;
    let mut v = without_keys(serde_json::to_value(&d).map_err(corrupt)?);
    if let Value::Object(m) = &mut v {
        m.retain(|k, _| SHOWN.contains(&k.as_str()));
    }
    Ok(v)
}

/// `{"deviceId", "count": <in force now>, "epochs": [{"from", "count"}…]}`; epochs later
/// than now are announced changes.
pub fn shards(id: &DeviceId, history: &LayoutHistory, now: Timestamp) -> Value {
    json!({
        "deviceId": id.as_str(),
        "count": history.count_at(now),
        "epochs": history.epochs(),
    })
}

/// `{"deviceId", "shards", "slotSeconds": <n, or null for single items>, "epochs": […]}`:
/// the layout in force now, and every epoch (`{"from", "count", "slotSeconds"?}`); epochs
/// later than now are announced changes.
pub fn layout(id: &DeviceId, history: &LayoutHistory, now: Timestamp) -> Value {
    let l = history.layout_at(now);
    json!({
        "deviceId": id.as_str(),
        "shards": l.partitions,
        "slotSeconds": l.slot.map(|s| s.seconds()),
        "epochs": history.epochs(),
    })
}

/// Whether `item` is the alert of a rule of `rules` (its `rule` is `window`, `rate` or
/// `stuck`), read without the rest of the item.
pub fn is_rule_alert(item: &Item) -> bool {
    match item.get(tidemark_schema::field::RULE) {
        Some(AttributeValue::S(r)) => {
            AlertRule::parse(r).is_ok_and(|r| r.is_tagged() || r == AlertRule::Group)
        }
        _ => false,
    }
}

/// The group of a group rule's alert item (`GROUP#<tag>` / `ALERT#…`); `None` for a
/// device's alert.
pub fn alert_group(item: &Item) -> Option<tidemark_schema::Tag> {
    let (Some(AttributeValue::S(pk)), Some(AttributeValue::S(sk))) =
        (item.get(attr::PK), item.get(attr::SK))
    else {
        return None;
    };
    match EntityKey::parse(pk, sk) {
        Ok(EntityKey::GroupAlert { tag, .. }) => Some(tag),
        _ => None,
    }
}

/// An alert with its `kind` (`threshold`, `offline` with no `metric`, or a rule's `window`,
/// `rate` or `stuck`) and, for a rule's alert, its `ruleSpec`: the rule as the device's
/// `rules` gives it.
pub fn alert(item: Item) -> Result<Value, ApiError> {
    if let Some(group) = alert_group(&item) {
        return group_alert(item, &group);
    }
    let a: AlertItem = tidemark_store::from_item(item)?;
    let mut v = without_keys(serde_json::to_value(&a).map_err(corrupt)?);
    if let Value::Object(m) = &mut v {
        m.insert("kind".into(), Value::from(a.rule.kind()));
    }
    Ok(v)
}

/// A group rule's alert as the index projects it: the alert's attributes (no `deviceId`),
/// `kind: "group"` and its `group`, which its key holds.
fn group_alert(item: Item, group: &tidemark_schema::Tag) -> Result<Value, ApiError> {
    let v: Value = serde_dynamo::from_item(item).map_err(corrupt)?;
    let mut v = without_keys(v);
    if let Value::Object(m) = &mut v {
        m.insert("kind".into(), Value::from(AlertRule::Group.kind()));
        m.insert("group".into(), Value::from(group.to_string()));
    }
    Ok(v)
}

pub fn reading(item: Item) -> Result<Value, ApiError> {
    let r: ReadingItem = tidemark_store::from_item(item)?;
    let (reading, _shard) = r.to_reading().map_err(corrupt)?;
    Ok(reading.to_json())
}

/// A stored reading item as the `latest` a device item carries.
pub fn latest(item: Item) -> Result<LatestReading, ApiError> {
    let r: ReadingItem = tidemark_store::from_item(item)?;
    let (reading, _shard) = r.to_reading().map_err(corrupt)?;
    Ok(LatestReading {
        timestamp: reading.timestamp,
        metrics: reading.metrics,
    })
}

pub fn aggregate(item: Item) -> Result<Value, ApiError> {
    aggregate_item(tidemark_store::from_item(item)?)
}

/// A bucket's rollup: an aggregate item, or a paged bucket's pages merged
/// ([`AggregateItem::merge_pages`]); the same shape either way.
pub fn aggregate_item(a: AggregateItem) -> Result<Value, ApiError> {
    let EntityKey::Aggregate { device, bucket } =
        EntityKey::parse(&a.pk, &a.sk).map_err(corrupt)?
    else {
        return Err(corrupt(format!("{} / {} is not an aggregate", a.pk, a.sk)));
    };
    let metrics: Map<String, Value> = a
        .metrics
        .iter()
        .map(|(m, s)| {
            (
                m.to_string(),
                json!({"count": s.count, "sum": number(s.sum), "min": number(s.min),
                       "max": number(s.max), "avg": number(s.avg())}),
            )
        })
        .collect();
    Ok(json!({
        "deviceId": device,
        "period": bucket.period().as_str(),
        "start": bucket.start().to_string(),
        "metrics": metrics,
        "firstAt": a.first_at,
        "lastAt": a.last_at,
    }))
}

/// True for a quarantined record's own item (not one of its payload's further parts).
pub fn is_quarantined_record(item: &Item) -> bool {
    let s = |name| match item.get(name) {
        Some(AttributeValue::S(s)) => s.as_str(),
        _ => "",
    };
    matches!(
        EntityKey::parse(s(attr::PK), s(attr::SK)),
        Ok(EntityKey::Quarantine { .. })
    )
}

/// A quarantined record's reason, read without the rest of the item.
pub fn quarantine_reason(item: &Item) -> Option<QuarantineReason> {
    match item.get("reason") {
        Some(AttributeValue::S(s)) => QuarantineReason::parse(s),
        _ => None,
    }
}

/// How many of `items` (quarantined records, in order) fit in `budget` payload bytes; at
/// least one.
pub fn records_within(items: &[Item], budget: u64) -> usize {
    let mut total = 0u64;
    let mut n = 0;
    for item in items {
        let size = match item.get("size") {
            Some(AttributeValue::N(n)) => n.parse::<u64>().unwrap_or(0),
            _ => 0,
        };
        total += size;
        if n > 0 && total > budget {
            break;
        }
        n += 1;
    }
    n
}

/// The keys of a quarantined record's further payload parts.
pub fn quarantine_part_keys(item: &Item) -> Result<Vec<tidemark_schema::Key>, ApiError> {
    let q: QuarantineItem = tidemark_store::from_item(item.clone())?;
    Ok(q.part_keys())
}

/// A quarantined record with its whole payload: `parts` are its further parts as read (in
/// any order); a part that could not be read (expired meanwhile) makes the payload end early,
/// which `size` shows.
pub fn quarantined(item: Item, parts: Vec<Item>) -> Result<Value, ApiError> {
    let q: QuarantineItem = tidemark_store::from_item(item)?;
    let mut parts: Vec<QuarantinePartItem> = parts
        .into_iter()
        .map(tidemark_store::from_item)
        .collect::<Result<_, _>>()?;
    parts.sort_by_key(|p| match EntityKey::parse(&p.pk, &p.sk) {
        Ok(EntityKey::QuarantinePart { part, .. }) => part,
        _ => u16::MAX,
    });
    let mut payload = q.payload;
    for p in parts {
        payload.extend_from_slice(&p.payload);
    }
    let mut out = json!({
        "reason": q.reason.as_str(),
        "message": q.message,
        "receivedAt": q.received_at,
        "sequenceNumber": q.sequence_number,
        "partitionKey": q.partition_key,
        "size": q.size,
        "payload": STANDARD.encode(&payload),
    });
    if let Some(i) = q.sub_record {
        out["subRecord"] = json!(i);
    }
    if let Some(v) = q.function_version {
        out["functionVersion"] = json!(v);
    }
    if let Some(k) = q.explicit_hash_key {
        out["explicitHashKey"] = json!(k);
    }
    // The whole value's hash beside a field cut to fit the item.
    for (name, hash) in [
        ("partitionKeySha256", q.partition_key_sha256),
        ("explicitHashKeySha256", q.explicit_hash_key_sha256),
        ("messageSha256", q.message_sha256),
    ] {
        if let Some(h) = hash {
            out[name] = json!(h);
        }
    }
    Ok(out)
}
