//! The bodies of `PUT /devices/{id}/shards` and `PUT /devices/{id}/layout`.

use serde::Deserialize;
use serde_json::Value;
use tidemark_schema::{SlotLen, Timestamp};

use crate::error::ApiError;

/// The body of `PUT /devices/{id}/shards`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PartitionCountBody {
    count: Value,
    effective_from: Option<Value>,
}

/// A requested shard change: `count` shards from `effective_from` (default: as soon as
/// safely possible).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionCountChange {
    pub count: u16,
    pub effective_from: Option<Timestamp>,
}

pub fn partition_count_change(body: &[u8]) -> Result<PartitionCountChange, ApiError> {
    use tidemark_schema::partition::MAX_PARTITIONS;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad(
            "body",
            "a JSON object is required: {\"count\": n, \"effectiveFrom\"?: time}",
        ));
    }
    let b: PartitionCountBody = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad("body", format!("not a valid shard change: {e}")))?;
    let count = b
        .count
        .as_u64()
        .and_then(|n| u16::try_from(n).ok())
        .filter(|n| (1..=MAX_PARTITIONS).contains(n))
        .ok_or_else(|| {
            ApiError::bad(
                "count",
                format!(
                    "{} is not a whole number from 1 to {MAX_PARTITIONS}",
                    b.count
                ),
            )
        })?;
    let effective_from = b.effective_from.map(effective_from).transpose()?;
    Ok(PartitionCountChange {
        count,
        effective_from,
    })
}

/// The body of `PUT /devices/{id}/layout`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct LayoutBody {
    #[serde(default)]
    slot_seconds: Value,
    #[serde(default)]
    shards: Value,
    effective_from: Option<Value>,
}

/// A requested layout change: packed into slots of `slot` (`None`: single items), over
/// `shards` partitions (`None`: the count in force then), from `effective_from` (default: as
/// soon as safely possible).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayoutChange {
    pub slot: Option<SlotLen>,
    pub shards: Option<u16>,
    pub effective_from: Option<Timestamp>,
}

pub fn layout_change(body: &[u8]) -> Result<LayoutChange, ApiError> {
    use tidemark_schema::partition::MAX_PARTITIONS;
    const SHAPE: &str = "a JSON object is required: {\"slotSeconds\": n | null, \"shards\"?: n, \
                         \"effectiveFrom\"?: time}";
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad("body", SHAPE));
    }
    let b: LayoutBody = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad("body", format!("not a valid layout change ({e}); {SHAPE}")))?;
    let slot = match &b.slot_seconds {
        Value::Null => None,
        v => Some(
            v.as_i64()
                .ok_or_else(|| ApiError::bad("slotSeconds", format!("{v} is not a whole number")))
                .and_then(|n| {
                    SlotLen::new(n).map_err(|e| ApiError::bad("slotSeconds", e.to_string()))
                })?,
        ),
    };
    let shards = match &b.shards {
        Value::Null => None,
        v => Some(
            v.as_u64()
                .and_then(|n| u16::try_from(n).ok())
                .filter(|n| (1..=MAX_PARTITIONS).contains(n))
                .ok_or_else(|| {
                    ApiError::bad(
                        "shards",
                        format!("{v} is not a whole number from 1 to {MAX_PARTITIONS}"),
                    )
                })?,
        ),
    };
    Ok(LayoutChange {
        slot,
        shards,
        effective_from: b.effective_from.map(effective_from).transpose()?,
    })
}

fn effective_from(v: Value) -> Result<Timestamp, ApiError> {
    super::body_time("effectiveFrom", &v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_changes_name_the_bad_field() {
        let ok = partition_count_change(br#"{"count":4,"effectiveFrom":"2026-04-20T15:00:00Z"}"#)
            .unwrap();
        assert_eq!(ok.count, 4);
        assert_eq!(
            ok.effective_from,
            Some(Timestamp::parse_rfc3339("2026-04-20T15:00:00Z").unwrap())
        );
        assert_eq!(
            partition_count_change(br#"{"count":1}"#)
                .unwrap()
                .effective_from,
            None
        );
        for (body, param) in [
            (r#"{"count":0}"#, "count"),
            (r#"{"count":65}"#, "count"),
            (r#"{"count":2.5}"#, "count"),
            (r#"{"count":"4"}"#, "count"),
            (r#"{"count":4,"effectiveFrom":"soon"}"#, "effectiveFrom"),
            (r#"{"count":4,"effectiveFrom":true}"#, "effectiveFrom"),
            (r#"{"count":4,"shards":4}"#, "body"),
            (r#"{}"#, "body"),
            ("", "body"),
        ] {
            match partition_count_change(body.as_bytes()) {
                Err(ApiError::BadRequest { param: p, .. }) => assert_eq!(p, param, "{body}"),
                other => panic!("{body}: expected a 400, got {other:?}"),
            }
        }
    }

    #[test]
    fn layout_changes_name_the_bad_field() {
        let ok = layout_change(br#"{"slotSeconds":60,"shards":2,"effectiveFrom":1776697200000}"#)
            .unwrap();
        assert_eq!(ok.slot, Some(SlotLen::new(60).unwrap()));
        assert_eq!(ok.shards, Some(2));
        assert_eq!(
            ok.effective_from,
            Some(Timestamp::parse_rfc3339("2026-04-20T15:00:00Z").unwrap())
        );
        for single in [r#"{"slotSeconds":null}"#, "{}"] {
            let c = layout_change(single.as_bytes()).unwrap();
            assert_eq!((c.slot, c.shards, c.effective_from), (None, None, None));
        }
        for (body, param) in [
            (r#"{"slotSeconds":7}"#, "slotSeconds"),
            (r#"{"slotSeconds":0}"#, "slotSeconds"),
            (r#"{"slotSeconds":7200}"#, "slotSeconds"),
            (r#"{"slotSeconds":"60"}"#, "slotSeconds"),
            (r#"{"slotSeconds":1.5}"#, "slotSeconds"),
            (r#"{"slotSeconds":60,"shards":0}"#, "shards"),
            (r#"{"slotSeconds":60,"shards":65}"#, "shards"),
            (
                r#"{"slotSeconds":60,"effectiveFrom":"soon"}"#,
                "effectiveFrom",
            ),
            (r#"{"slotSeconds":60,"count":2}"#, "body"),
            ("[]", "body"),
            ("", "body"),
        ] {
            match layout_change(body.as_bytes()) {
                Err(ApiError::BadRequest { param: p, .. }) => assert_eq!(p, param, "{body}"),
                other => panic!("{body}: expected a 400, got {other:?}"),
            }
        }
    }
}
