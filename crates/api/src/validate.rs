//! Parameter and body validation. Every error names the parameter (or body field path) and
//! the rule, and is a 400: bad input never reaches DynamoDB and never becomes a 500.

use serde::Deserialize;
use serde_json::{Map, Value};
use tidemark_schema::{
    AlertId, DeviceId, DeviceStatus, DeviceType, GatewayFor, Severity, Timestamp,
};

use crate::error::ApiError;
use crate::request::Params;
use crate::store::DeviceRegistration;

pub const DEFAULT_LIMIT: usize = 100;
pub const MAX_LIMIT: usize = 1000;
/// `GET /latest` takes at most this many IDs (one BatchGetItem).
pub const MAX_IDS: usize = 100;
/// Partition queries one `GET /latest` may make in all (a device may query each shard of
/// each layout segment over the retention): 100 partitioned devices could otherwise fan out to
/// thousands.
pub const MAX_LATEST_QUERIES: usize = 400;
pub use thresholds::{MAX_FOR_SECONDS, MAX_THRESHOLDS};

mod layout;
mod rules;
mod tags;
mod thresholds;
pub use layout::{LayoutChange, PartitionCountChange, layout_change, partition_count_change};
use rules::rules;
pub use tags::{MAX_TAG_FILTERS, TagRequest, tag_filters};
use thresholds::thresholds;

pub fn device_id(raw: &str) -> Result<DeviceId, ApiError> {
    DeviceId::new(raw).map_err(|e| ApiError::bad("id", e.to_string()))
}

pub fn alert_id(raw: &str) -> Result<AlertId, ApiError> {
    AlertId::new(raw).map_err(|e| ApiError::bad("alertId", e.to_string()))
}

/// A group in a path (`site:A`): a 400 naming `group` when it is not a tag.
pub fn group(raw: &str) -> Result<tidemark_schema::Tag, ApiError> {
    tidemark_schema::Tag::parse(raw).map_err(|e| ApiError::bad("group", e.to_string()))
}

pub fn limit(p: &Params) -> Result<usize, ApiError> {
    match p.get("limit") {
        None => Ok(DEFAULT_LIMIT),
        Some(s) => s
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_LIMIT).contains(n))
            .ok_or_else(|| {
                ApiError::bad(
                    "limit",
                    format!("{s:?} is not a whole number from 1 to {MAX_LIMIT}"),
                )
            }),
    }
}

/// `asc` or `desc`, `default` when absent; returns "scan forward".
pub fn order(p: &Params, default_forward: bool) -> Result<bool, ApiError> {
    match p.get("order") {
        None => Ok(default_forward),
        Some("asc") => Ok(true),
        Some("desc") => Ok(false),
        Some(o) => Err(ApiError::bad(
            "order",
            format!("{o:?} is not one of: asc, desc"),
        )),
    }
}

/// A time given in a JSON body (`effectiveFrom`, `tagsEffectiveFrom`): RFC 3339 text or epoch
/// milliseconds, read as the query parameters are.
pub(crate) fn body_time(name: &str, v: &serde_json::Value) -> Result<Timestamp, ApiError> {
    let raw = match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    Timestamp::parse_flexible(&raw)
        .map_err(|e| ApiError::bad(name, format!("{e} (or give epoch milliseconds)")))
}

pub fn time(p: &Params, name: &str) -> Result<Option<Timestamp>, ApiError> {
    p.get(name)
        .map(|s| {
            Timestamp::parse_flexible(s)
                .map_err(|e| ApiError::bad(name, format!("{e} (or give epoch milliseconds)")))
        })
        .transpose()
}

/// `from`/`to` with defaults: `to` is now, `from` is `to` minus `default_span_ms`.
pub fn range(
    p: &Params,
    now: Timestamp,
    default_span_ms: i64,
) -> Result<(Timestamp, Timestamp), ApiError> {
    let from = time(p, "from")?;
    let to = time(p, "to")?;
    let to = to.unwrap_or(now);
    let from = from.unwrap_or_else(|| to.minus_millis(default_span_ms).unwrap_or(Timestamp::MIN));
    if from > to {
        return Err(ApiError::bad(
            "from",
            format!("from ({from}) is after to ({to})"),
        ));
    }
    Ok((from, to))
}

/// The raw range parameters as they bind a cursor: normalised when given, `-` when not.
pub fn range_scope(p: &Params) -> Result<String, ApiError> {
    let part = |name| -> Result<String, ApiError> {
        Ok(time(p, name)?.map_or_else(|| "-".to_owned(), |t| t.to_string()))
    };
    Ok(format!("{}|{}", part("from")?, part("to")?))
}

/// The body of `PUT /devices/{id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DeviceBody {
    device_id: Option<String>,
    name: Option<String>,
    #[serde(rename = "type")]
    device_type: Option<String>,
    status: Option<String>,
    location: Option<Value>,
    firmware: Option<String>,
    thresholds: Option<Map<String, Value>>,
    rules: Option<Value>,
    offline_after_seconds: Option<Value>,
    offline_severity: Option<String>,
    percentiles: Option<Value>,
    tags: Option<Value>,
    tags_effective_from: Option<Value>,
    gateway_for: Option<Value>,
    max_metrics_per_day: Option<Value>,
}

/// `maxMetricsPerDay`: the device's cap on distinct metric names per UTC day, 1 to
/// [`tidemark_schema::MAX_METRICS_PER_DAY`] (absent: the default,
/// [`tidemark_schema::DEFAULT_MAX_METRICS_PER_DAY`]).
fn max_metrics_per_day(v: Value) -> Result<u32, ApiError> {
    v.as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| (1..=tidemark_schema::MAX_METRICS_PER_DAY).contains(n))
        .ok_or_else(|| {
            ApiError::bad(
                "maxMetricsPerDay",
                format!(
                    "{v} is not a whole number of metric names from 1 to {}",
                    tidemark_schema::MAX_METRICS_PER_DAY
                ),
            )
        })
}

/// `gatewayFor`: the device ids a gateway may send readings for (`DEVICE_IDENTITY=
/// partition-key`), a list of at most [`tidemark_schema::MAX_GATEWAY_FOR`] distinct ids.
fn gateway_for(v: Value) -> Result<GatewayFor, ApiError> {
    let Value::Array(items) = v else {
        return Err(ApiError::bad("gatewayFor", "must be a list of device IDs"));
    };
    if items.len() > tidemark_schema::MAX_GATEWAY_FOR {
        return Err(ApiError::bad(
            "gatewayFor",
            format!(
                "{} device IDs; a gateway speaks for at most {}",
                items.len(),
                tidemark_schema::MAX_GATEWAY_FOR
            ),
        ));
    }
    let mut ids = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let id = item
            .as_str()
            .ok_or_else(|| format!("is {item}, not a string"))
            .and_then(|s| DeviceId::new(s).map_err(|e| e.to_string()))
            .map_err(|e| ApiError::bad(format!("gatewayFor[{i}]"), e))?;
        ids.push(id);
    }
    GatewayFor::new(ids).map_err(|e| ApiError::bad("gatewayFor", e.to_string()))
}

/// A device's offline window: 0 (never) or 60 s to 30 days
/// ([`tidemark_schema::MIN_OFFLINE_WINDOW`], [`tidemark_schema::MAX_OFFLINE_WINDOW`]).
pub fn offline_window_ok(seconds: u32) -> bool {
    seconds == 0
        || (tidemark_schema::MIN_OFFLINE_WINDOW..=tidemark_schema::MAX_OFFLINE_WINDOW)
            .contains(&seconds)
}

fn offline_after(v: Value) -> Result<u32, ApiError> {
    v.as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| offline_window_ok(*n))
        .ok_or_else(|| {
            ApiError::bad(
                "offlineAfterSeconds",
                format!(
                    "{v} is not 0 (never offline) or a whole number of seconds from 60 to 2592000"
                ),
            )
        })
}

/// `GET /devices?connectivity=`: only the offline devices are indexed (the others are every
/// device with a window, which `status` lists).
pub fn connectivity(value: &str, with_status: bool) -> Result<(), ApiError> {
    if value != "offline" {
        return Err(ApiError::bad(
            "connectivity",
            format!(
                "{value:?}: only \"offline\" is listed (GET /devices/{{id}} shows each device's)"
            ),
        ));
    }
    if with_status {
        return Err(ApiError::bad(
            "connectivity",
            "cannot be combined with status",
        ));
    }
    Ok(())
}

fn keyword<T: for<'de> Deserialize<'de>>(
    param: &str,
    value: &str,
    allowed: &str,
) -> Result<T, ApiError> {
    serde_json::from_value(Value::String(value.to_owned()))
        .map_err(|_| ApiError::bad(param, format!("{value:?} is not one of: {allowed}")))
}

fn text(param: &str, v: &str, max: usize) -> Result<String, ApiError> {
    let n = v.chars().count();
    if n == 0 || n > max {
        return Err(ApiError::bad(
            param,
            format!("must be 1 to {max} characters"),
        ));
    }
    if v.chars().any(char::is_control) {
        return Err(ApiError::bad(param, "must not contain control characters"));
    }
    Ok(v.to_owned())
}

/// `{"lat","lon"}` in degrees, optional `alt` (metres) and `site` label, nothing else.
fn location(v: Value) -> Result<Value, ApiError> {
    let Value::Object(m) = v else {
        return Err(ApiError::bad(
            "location",
            "must be an object {\"lat\",\"lon\",\"alt\"?,\"site\"?}",
        ));
    };
    for k in m.keys() {
        if !["lat", "lon", "alt", "site"].contains(&k.as_str()) {
            return Err(ApiError::bad(
                format!("location.{k}"),
                "unknown field; allowed: lat, lon, alt, site",
            ));
        }
    }
    let num = |k: &str, lo: f64, hi: f64, required: bool| -> Result<(), ApiError> {
        match m.get(k) {
            None if !required => Ok(()),
            Some(Value::Number(n)) if n.as_f64().is_some_and(|x| (lo..=hi).contains(&x)) => Ok(()),
            _ => Err(ApiError::bad(
                format!("location.{k}"),
                format!("must be a number from {lo} to {hi}"),
            )),
        }
    };
    num("lat", -90.0, 90.0, true)?;
    num("lon", -180.0, 180.0, true)?;
    num("alt", -11_000.0, 100_000.0, false)?;
    if let Some(site) = m.get("site") {
        match site {
            Value::String(s) => {
                text("location.site", s, 128)?;
            }
            _ => return Err(ApiError::bad("location.site", "must be a string")),
        }
    }
    Ok(Value::Object(m))
}

fn firmware(v: &str) -> Result<String, ApiError> {
    if v.is_empty()
        || v.len() > 64
        || !v
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'+' | b'-'))
    {
        return Err(ApiError::bad(
            "firmware",
            "must be 1 to 64 characters of A-Z a-z 0-9 . _ + -",
        ));
    }
    Ok(v.to_owned())
}

/// Parses and validates a registration body for device `id`.
pub fn registration(
    id: DeviceId,
    body: &[u8],
    status_partitions: u16,
) -> Result<DeviceRegistration, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad("body", "a JSON object is required"));
    }
    let b: DeviceBody = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad("body", format!("not a valid device: {e}")))?;
    if let Some(d) = &b.device_id
        && d != id.as_str()
    {
        return Err(ApiError::bad(
            "deviceId",
            format!("{d:?} differs from the ID in the path ({id})"),
        ));
    }
    let status = match &b.status {
        None => DeviceStatus::Active,
        Some(s) => DeviceStatus::parse(s).map_err(|e| ApiError::bad("status", e.to_string()))?,
    };
    let device_type = b
        .device_type
        .as_deref()
        .map(|t| keyword::<DeviceType>("type", t, "sensor, gateway, actuator"))
        .transpose()?;
    let status_shard = tidemark_schema::keys::status_partition_for(&id, status_partitions);
    let location = b.location.map(location).transpose()?;
    let site = location
        .as_ref()
        .and_then(|l| l.get("site"))
        .and_then(Value::as_str);
    let tag_request = tags::tag_request(b.tags, b.tags_effective_from, site)?;
    let percentiles = match b.percentiles {
        None => false,
        Some(v) => v
            .as_bool()
            .ok_or_else(|| ApiError::bad("percentiles", format!("{v} is not true or false")))?,
    };
    Ok(DeviceRegistration {
        device_id: id,
        name: b
            .name
            .as_deref()
            .map(|n| text("name", n, 128))
            .transpose()?,
        device_type,
        status,
        location,
        firmware: b.firmware.as_deref().map(firmware).transpose()?,
        thresholds: b
            .thresholds
            .map(thresholds)
            .transpose()?
            .unwrap_or_default(),
        rules: b.rules.map(|r| rules(&r, percentiles)).transpose()?,
        status_shard,
        offline_after_seconds: b.offline_after_seconds.map(offline_after).transpose()?,
        offline_severity: b
            .offline_severity
            .as_deref()
            .map(|s| keyword::<Severity>("offlineSeverity", s, "info, warning, critical"))
            .transpose()?,
        percentiles,
        tag_request,
        tags: tidemark_schema::Tags::empty(),
        tags_from: None,
        gateway_for: b
            .gateway_for
            .map(gateway_for)
            .transpose()?
            .unwrap_or_default(),
        max_metrics_per_day: b.max_metrics_per_day.map(max_metrics_per_day).transpose()?,
    })
}

/// A snooze lasts at most this long (an alert silenced for longer should have its
/// threshold changed instead).
pub const MAX_SNOOZE_DAYS: i64 = 30;

/// The body of `POST /devices/{id}/alerts/{alertId}/snooze`: `{"until": <RFC 3339>}`, a
/// time after `now` and at most [`MAX_SNOOZE_DAYS`] after it.
pub fn snooze_until(body: &[u8], now: Timestamp) -> Result<Timestamp, ApiError> {
    const SHAPE: &str = "a JSON object {\"until\": \"<RFC 3339 time>\"} is required";
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad("until", format!("required: {SHAPE}")));
    }
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad("body", format!("not JSON ({e}): {SHAPE}")))?;
    let Value::Object(m) = v else {
        return Err(ApiError::bad("body", SHAPE));
    };
    if let Some(k) = m.keys().find(|k| k.as_str() != "until") {
        return Err(ApiError::bad(
            "body",
            format!("unknown field {k:?}; {SHAPE}"),
        ));
    }
    let raw = match m.get("until") {
        Some(Value::String(s)) => s,
        Some(other) => {
            return Err(ApiError::bad(
                "until",
                format!("{other} is not an RFC 3339 time string"),
            ));
        }
        None => return Err(ApiError::bad("until", format!("required: {SHAPE}"))),
    };
    let until = Timestamp::parse_rfc3339(raw).map_err(|e| ApiError::bad("until", e.to_string()))?;
    if until <= now {
        return Err(ApiError::bad(
            "until",
            format!("{until} is not in the future (now is {now})"),
        ));
    }
    let latest = now
        .plus_millis(MAX_SNOOZE_DAYS * 86_400_000)
        .unwrap_or(Timestamp::MAX);
    if until > latest {
        return Err(ApiError::bad(
            "until",
            format!("{until} is more than {MAX_SNOOZE_DAYS} days ahead (at most {latest})"),
        ));
    }
    Ok(until)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(body: &str) -> Result<DeviceRegistration, ApiError> {
        registration(DeviceId::new("sensor_01").unwrap(), body.as_bytes(), 1)
    }

    fn param_of(r: Result<DeviceRegistration, ApiError>) -> String {
        match r {
            Err(ApiError::BadRequest { param, .. }) => param,
            other => panic!("expected a 400, got {other:?}"),
        }
    }

    #[test]
    fn a_full_registration_is_accepted() {
        let r = reg(
            r#"{"name":"Warehouse Temp A","type":"sensor","status":"maintenance",
            "location":{"lat":52.5,"lon":13.4,"site":"Hall 3"},"firmware":"2.1.0",
            "thresholds":{"temperature":{"max":30,"severity":"critical"}}}"#,
        )
        .unwrap();
        assert_eq!(r.status, DeviceStatus::Maintenance);
        assert_eq!(r.device_type, Some(DeviceType::Sensor));
        assert_eq!(r.thresholds.len(), 1);
    }

    #[test]
    fn a_devices_metric_name_cap_is_1_to_5000_and_a_bad_one_is_named() {
        assert_eq!(reg("{}").unwrap().max_metrics_per_day, None);
        let gw = reg(r#"{"type":"gateway","maxMetricsPerDay":5000}"#).unwrap();
        assert_eq!(gw.max_metrics_per_day, Some(5000));
        assert_eq!(
            reg(r#"{"maxMetricsPerDay":1}"#)
                .unwrap()
                .max_metrics_per_day,
            Some(1)
        );
        for bad in ["0", "5001", "-1", "2.5", "\"many\"", "4294967296"] {
            let body = format!(r#"{{"maxMetricsPerDay":{bad}}}"#);
            assert_eq!(param_of(reg(&body)), "maxMetricsPerDay", "{bad}");
        }
    }

    #[test]
    fn each_bad_field_is_named() {
        for (body, param) in [
            (r#"{"type":"toaster"}"#, "type"),
            (r#"{"status":"broken"}"#, "status"),
            (r#"{"location":{"lat":91,"lon":0}}"#, "location.lat"),
            (r#"{"location":{"lat":1,"lon":0,"x":1}}"#, "location.x"),
            (r#"{"location":"here"}"#, "location"),
            (r#"{"firmware":"v 1"}"#, "firmware"),
            (r#"{"name":""}"#, "name"),
            (
                r#"{"thresholds":{"temperature":{"severity":"critical"}}}"#,
                "thresholds.temperature",
            ),
            (
                r#"{"thresholds":{"t":{"min":5,"max":1,"severity":"info"}}}"#,
                "thresholds.t",
            ),
            (
                r#"{"thresholds":{"t":{"max":1,"severity":"loud"}}}"#,
                "thresholds.t",
            ),
            (
                r#"{"thresholds":{"9t":{"max":1,"severity":"info"}}}"#,
                "thresholds.9t",
            ),
            (
                r#"{"thresholds":{"t":{"max":1e300,"severity":"info"}}}"#,
                "thresholds.t",
            ),
            (
                r#"{"thresholds":{"t":{"min":-1e-200,"severity":"info"}}}"#,
                "thresholds.t",
            ),
            (r#"{"deviceId":"other"}"#, "deviceId"),
            (r#"{"colour":"red"}"#, "body"),
            (r#"{"name":"x""#, "body"),
            ("", "body"),
            ("[]", "body"),
        ] {
            assert_eq!(param_of(reg(body)), param, "{body}");
        }
    }

    #[test]
    fn a_snooze_ends_after_now_and_within_thirty_days() {
        let now = Timestamp::parse_rfc3339("2026-04-20T15:00:00Z").unwrap();
        let until = |b: &str| snooze_until(b.as_bytes(), now);
        assert_eq!(
            until(r#"{"until":"2026-04-20T17:30:00+02:00"}"#).unwrap(),
            Timestamp::parse_rfc3339("2026-04-20T15:30:00Z").unwrap()
        );
        assert!(
            until(r#"{"until":"2026-05-20T15:00:00Z"}"#).is_ok(),
            "30 days exactly"
        );
        assert!(until(r#"{"until":"2026-04-20T15:00:00.000001Z"}"#).is_ok());
        for (body, param) in [
            (r#"{"until":"2026-04-20T15:00:00Z"}"#, "until"),
            (r#"{"until":"2026-04-20T14:00:00Z"}"#, "until"),
            (r#"{"until":"2026-05-20T15:00:00.000001Z"}"#, "until"),
            (r#"{"until":"tomorrow"}"#, "until"),
            (r#"{"until":1776700800000}"#, "until"),
            (r#"{"until":null}"#, "until"),
            (r#"{}"#, "until"),
            ("", "until"),
            (r#"{"until":"2026-04-20T16:00:00Z","reason":"x"}"#, "body"),
            (r#"["2026-04-20T16:00:00Z"]"#, "body"),
            (r#"{"until":"#, "body"),
        ] {
            match until(body) {
                Err(ApiError::BadRequest { param: p, .. }) => assert_eq!(p, param, "{body}"),
                other => panic!("{body}: expected a 400, got {other:?}"),
            }
        }
    }
}
