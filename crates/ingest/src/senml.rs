//! SenML (RFC 8428) packs, as LwM2M/CoAP devices and many gateways send them: a JSON array of
//! SenML records becomes readings, which then pass the same checks as any other reading.
//!
//! How a pack maps onto readings (docs/design.md §3):
//! - A record is SenML when the array's objects carry no `deviceId` and one of them has `n`
//!   or `bn` (a reading array always names its device).
//! - Base fields (`bn`, `bt`, `bu`, `bv`, `bs`, `bver`) apply to the records after them;
//!   the resolved name (`bn` + `n`) is split at its last `:` or `/` into device ID and
//!   metric; a name with neither is rejected. The resolved time (`bt` + `t`, seconds) is
//!   relative to the record's arrival when below 2^28, absolute otherwise; `ut` is ignored.
//! - Records with the same device and time become one reading. A numeric value (`v`, plus
//!   `bv`) is a metric; a sum (`s`, plus `bs`) the metric `<name>_sum`; strings (`vs`),
//!   booleans (`vb`) and data (`vd`, kept as its base64 text) go to the reading's metadata
//!   under `values`, units under `units`.
//! - Metric names are the name part with every character outside `A-Za-z0-9_` replaced by
//!   `_`, and `m_` in front when it does not start with a letter (`10e2073a01080063` →
//!   `m_10e2073a01080063`). A name used with several units in one pack (RFC 8428 §5.1.3
//!   tells humidity from position by unit alone) gets its unit appended (`_RH`, `_lon`).
//! - A version (`bver`) above 10, or a field ending in `_` (which RFC 8428 §4.4 says must be
//!   understood), rejects the whole record.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};
use tidemark_schema::{QuarantineReason, Timestamp};

use crate::rejection::Rejection;

/// Relative times are below this (RFC 8428 §4.5.3).
const RELATIVE_BELOW: f64 = 268_435_456.0;
const MAX_VERSION: u64 = 10;

/// Whether an array of JSON values is a SenML pack rather than an array of readings.
pub fn is_pack(items: &[Value]) -> bool {
    !items.is_empty()
        && items
            .iter()
            .all(|v| v.as_object().is_some_and(|o| !o.contains_key("deviceId")))
        && items.iter().any(|v| {
            v.as_object()
                .is_some_and(|o| o.contains_key("n") || o.contains_key("bn"))
        })
}

fn bad(reason: QuarantineReason, i: usize, msg: impl std::fmt::Display) -> Rejection {
    Rejection::new(reason, format!("SenML record {i}: {msg}"))
}

fn number(o: &Map<String, Value>, k: &str, i: usize) -> Result<Option<f64>, Rejection> {
    match o.get(k) {
        None => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or_else(|| {
            bad(
                QuarantineReason::InvalidMetric,
                i,
                format!("{k} is {v}, not a number"),
            )
        }),
    }
}

fn text<'a>(o: &'a Map<String, Value>, k: &str, i: usize) -> Result<Option<&'a str>, Rejection> {
    match o.get(k) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(bad(
            QuarantineReason::NotObjectOrArray,
            i,
            format!("{k} is {v}, not a string"),
        )),
    }
}

/// `A-Za-z0-9_` only, starting with a letter.
fn metric_name(s: &str) -> String {
    let clean: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.starts_with(|c: char| c.is_ascii_alphabetic()) {
        clean
    } else {
        format!("m_{clean}")
    }
}

fn unit_suffix(u: &str) -> String {
    let clean: String = u
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    clean.trim_matches('_').to_owned()
}

/// One resolved record.
struct Resolved {
    device: String,
    name: String,
    micros: i64,
    unit: Option<String>,
    value: Option<f64>,
    sum: Option<f64>,
    other: Option<Value>,
}

/// The readings of a pack, as reading objects (`deviceId`, `timestamp`, metrics, `metadata`)
/// for the usual validation; `arrival` anchors relative times.
pub fn readings(
    items: Vec<Value>,
    arrival: Timestamp,
) -> Result<Vec<Map<String, Value>>, Rejection> {
    readings_of(items, arrival, None)
}

/// [`readings`] of a pack an IoT thing published ([`crate::identity`]): a name with no `:`
/// or `/` is a metric of `thing` rather than a rejection.
pub fn readings_of(
    items: Vec<Value>,
    arrival: Timestamp,
    thing: Option<&str>,
) -> Result<Vec<Map<String, Value>>, Rejection> {
    let (mut bn, mut bt, mut bu, mut bv, mut bs) = (String::new(), 0.0, None::<String>, 0.0, 0.0);
    let mut resolved = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let Value::Object(o) = item else {
            return Err(bad(QuarantineReason::NotObjectOrArray, i, "not an object"));
        };
        if let Some(k) = o.keys().find(|k| k.ends_with('_')) {
            return Err(bad(
                QuarantineReason::NotObjectOrArray,
                i,
                format!("{k} must be understood (RFC 8428 §4.4), and is not"),
            ));
        }
        if let Some(v) = o.get("bver") {
            let ok = v.as_u64().is_some_and(|v| v <= MAX_VERSION);
            if !ok {
                return Err(bad(
                    QuarantineReason::NotObjectOrArray,
                    i,
                    format!("version {v} is not supported (at most {MAX_VERSION})"),
                ));
            }
        }
        if let Some(s) = text(&o, "bn", i)? {
            bn = s.to_owned();
        }
        if let Some(t) = number(&o, "bt", i)? {
            bt = t;
        }
        if let Some(u) = text(&o, "bu", i)? {
            bu = Some(u.to_owned());
        }
        if let Some(v) = number(&o, "bv", i)? {
            bv = v;
        }
        if let Some(v) = number(&o, "bs", i)? {
            bs = v;
        }
        let value = number(&o, "v", i)?.map(|v| v + bv);
        let sum = number(&o, "s", i)?.map(|s| s + bs);
        let other = match (o.get("vs"), o.get("vb"), o.get("vd")) {
            (Some(v @ Value::String(_)), None, None)
            | (None, Some(v @ Value::Bool(_)), None)
            | (None, None, Some(v @ Value::String(_))) => Some(v.clone()),
            (None, None, None) => None,
            _ => {
                return Err(bad(
                    QuarantineReason::InvalidMetric,
                    i,
                    "vs must be a string, vb a boolean, vd a string, one of them at most",
                ));
            }
        };
        if value.is_none() && sum.is_none() && other.is_none() {
            continue; // a base-only record
        }
        let name = format!("{bn}{}", text(&o, "n", i)?.unwrap_or_default());
        let (device, metric) = match (name.rfind([':', '/']), thing) {
            (Some(cut), _) => (&name[..cut], &name[cut + 1..]),
            (None, Some(thing)) => (thing, name.as_str()),
            (None, None) => {
                return Err(bad(
                    QuarantineReason::InvalidDeviceId,
                    i,
                    format!("name {name:?} has no ':' or '/' to split into device and metric"),
                ));
            }
        };
        if device.is_empty() || metric.is_empty() {
            return Err(bad(
                QuarantineReason::InvalidDeviceId,
                i,
                format!("name {name:?} splits into an empty device or metric"),
            ));
        }
        let t = bt + number(&o, "t", i)?.unwrap_or(0.0);
        let seconds = if t.abs() < RELATIVE_BELOW {
            arrival.epoch_micros() as f64 / 1e6 + t
        } else {
            t
        };
        let micros = (seconds * 1e6).round();
        if !micros.is_finite() || micros.abs() > 1e17 {
            return Err(bad(
                QuarantineReason::InvalidTimestamp,
                i,
                format!("time {t} is out of range"),
            ));
        }
        resolved.push(Resolved {
            device: device.to_owned(),
            name: metric.to_owned(),
            micros: micros as i64,
            unit: text(&o, "u", i)?.map(str::to_owned).or_else(|| bu.clone()),
            value,
            sum,
            other,
        });
    }

    // A name used with several units in the pack is told apart by unit.
    let mut units: BTreeMap<(&str, &str), BTreeSet<&str>> = BTreeMap::new();
    for r in &resolved {
        if let Some(u) = &r.unit {
            units.entry((&r.device, &r.name)).or_default().insert(u);
        }
    }
    let mut out: BTreeMap<(String, i64), Map<String, Value>> = BTreeMap::new();
    for r in &resolved {
        let several = units
            .get(&(r.device.as_str(), r.name.as_str()))
            .is_some_and(|u| u.len() > 1);
        let mut metric = metric_name(&r.name);
        if several && let Some(u) = &r.unit {
            metric = format!("{metric}_{}", unit_suffix(u));
        }
        let reading = out.entry((r.device.clone(), r.micros)).or_insert_with(|| {
            let at = Timestamp::from_epoch_micros(r.micros)
                .map_or(Value::Null, |t| json!(t.to_string()));
            let mut m = Map::new();
            m.insert("deviceId".into(), json!(r.device));
            m.insert("timestamp".into(), at);
            m
        });
        if let Some(v) = r.value {
            reading.insert(metric.clone(), json!(v));
        }
        if let Some(s) = r.sum {
            reading.insert(format!("{metric}_sum"), json!(s));
        }
        if let Some(v) = &r.other {
            put_meta(reading, "values", &r.name, v.clone());
        }
        if let (Some(u), true) = (&r.unit, r.value.is_some() || r.sum.is_some()) {
            put_meta(reading, "units", &metric, json!(u));
        }
    }
    Ok(out.into_values().collect())
}

/// `metadata.<key>.<name> = v`.
fn put_meta(reading: &mut Map<String, Value>, key: &str, name: &str, v: Value) {
    let md = reading.entry("metadata").or_insert_with(|| json!({}));
    if let Some(sub) = md
        .as_object_mut()
        .and_then(|m| m.entry(key).or_insert_with(|| json!({})).as_object_mut())
    {
        sub.insert(name.to_owned(), v);
    }
}

#[cfg(test)]
mod tests {
    //! RFC 8428 §5.1's own examples, with the readings each becomes.
    use serde_json::{Value, json};
    use tidemark_schema::{QuarantineReason, Reading, Timestamp};

    use crate::config::IngestConfig;
    use crate::decode::decode_record_at;

    /// Mon Oct 31 16:27:09 UTC 2011, the "now" of §5.1.6.
    const ARRIVAL: &str = "2011-10-31T16:27:09Z";

    fn decode(pack: &str) -> Result<Vec<Reading>, crate::decode::Rejection> {
        let at = Timestamp::parse_rfc3339(ARRIVAL).unwrap();
        let mut c = IngestConfig::new("t");
        c.retention_days = 36_500;
        decode_record_at(pack.as_bytes(), at, at, &c)
    }

    /// (device, time, metrics, metadata) of each reading, in order.
    fn readings(pack: &str) -> Vec<(String, String, Value, Value)> {
        decode(pack)
            .unwrap()
            .into_iter()
            .map(|r| {
                let metrics: serde_json::Map<String, Value> = r
                    .metrics
                    .iter()
                    .map(|(k, v)| (k.to_string(), json!(v)))
                    .collect();
                (
                    r.device_id.to_string(),
                    r.timestamp.to_string(),
                    Value::Object(metrics),
                    r.metadata.map_or(Value::Null, Value::Object),
                )
            })
            .collect()
    }

    fn r(device: &str, at: &str, metrics: Value, meta: Value) -> (String, String, Value, Value) {
        (device.into(), at.into(), metrics, meta)
    }

    #[test]
    fn single_data_point_5_1_1() {
        assert_eq!(
            readings(r#"[{"n":"urn:dev:ow:10e2073a01080063","u":"Cel","v":23.1}]"#),
            [r(
                "urn:dev:ow",
                "2011-10-31T16:27:09.000000Z",
                json!({"m_10e2073a01080063": 23.1}),
                json!({"units": {"m_10e2073a01080063": "Cel"}})
            )]
        );
    }

    #[test]
    fn multiple_data_points_5_1_2() {
        assert_eq!(
            readings(
                r#"[{"bn":"urn:dev:ow:10e2073a01080063:","n":"voltage","u":"V","v":120.1},
                    {"n":"current","u":"A","v":1.2}]"#
            ),
            [r(
                "urn:dev:ow:10e2073a01080063",
                "2011-10-31T16:27:09.000000Z",
                json!({"current": 1.2, "voltage": 120.1}),
                json!({"units": {"voltage": "V", "current": "A"}})
            )]
        );
        let d = "urn:dev:ow:10e2073a0108006";
        let current = |at: &str, v: f64| {
            r(
                d,
                at,
                json!({"current": v}),
                json!({"units": {"current": "A"}}),
            )
        };
        assert_eq!(
            readings(
                r#"[{"bn":"urn:dev:ow:10e2073a0108006:","bt":1.276020076001e+09,
                     "bu":"A","bver":5,"n":"voltage","u":"V","v":120.1},
                    {"n":"current","t":-5,"v":1.2},{"n":"current","t":-4,"v":1.3},
                    {"n":"current","t":-3,"v":1.4},{"n":"current","t":-2,"v":1.5},
                    {"n":"current","t":-1,"v":1.6},{"n":"current","v":1.7}]"#
            ),
            [
                current("2010-06-08T18:01:11.001000Z", 1.2),
                current("2010-06-08T18:01:12.001000Z", 1.3),
                current("2010-06-08T18:01:13.001000Z", 1.4),
                current("2010-06-08T18:01:14.001000Z", 1.5),
                current("2010-06-08T18:01:15.001000Z", 1.6),
                r(
                    d,
                    "2010-06-08T18:01:16.001000Z",
                    json!({"current": 1.7, "voltage": 120.1}),
                    json!({"units": {"voltage": "V", "current": "A"}})
                ),
            ]
        );
    }

    fn multiple_measurements() -> Vec<(String, String, Value, Value)> {
        let d = "urn:dev:ow";
        let units = |keys: &[(&str, &str)]| {
            let m: serde_json::Map<String, Value> = keys
                .iter()
                .map(|(k, u)| (format!("m_10e2073a01080063_{k}"), json!(u)))
                .collect();
            json!({ "units": m })
        };
        let fix = |at: &str, rh: f64, lon: f64, lat: f64| {
            r(
                d,
                at,
                json!({"m_10e2073a01080063_RH": rh, "m_10e2073a01080063_lon": lon,
                       "m_10e2073a01080063_lat": lat}),
                units(&[("RH", "%RH"), ("lon", "lon"), ("lat", "lat")]),
            )
        };
        vec![
            fix("2011-10-31T13:24:24.000000Z", 20.0, 24.30621, 60.07965),
            fix("2011-10-31T13:25:24.000000Z", 20.3, 24.30622, 60.07965),
            fix("2011-10-31T13:26:24.000000Z", 20.7, 24.30623, 60.07966),
            r(
                d,
                "2011-10-31T13:26:54.000000Z",
                json!({"m_10e2073a01080063_EL": 98.0}),
                units(&[("EL", "%EL")]),
            ),
            fix("2011-10-31T13:27:24.000000Z", 21.2, 24.30628, 60.07967),
        ]
    }

    #[test]
    fn multiple_measurements_5_1_3_are_told_apart_by_unit() {
        assert_eq!(
            readings(
                r#"[{"bn":"urn:dev:ow:10e2073a01080063","bt":1.320067464e+09,"bu":"%RH","v":20},
                    {"u":"lon","v":24.30621},{"u":"lat","v":60.07965},
                    {"t":60,"v":20.3},{"u":"lon","t":60,"v":24.30622},{"u":"lat","t":60,"v":60.07965},
                    {"t":120,"v":20.7},{"u":"lon","t":120,"v":24.30623},{"u":"lat","t":120,"v":60.07966},
                    {"u":"%EL","t":150,"v":98},
                    {"t":180,"v":21.2},{"u":"lon","t":180,"v":24.30628},{"u":"lat","t":180,"v":60.07967}]"#
            ),
            multiple_measurements()
        );
    }

    #[test]
    fn resolved_data_5_1_4_is_the_same_readings_as_5_1_3() {
        let n = "urn:dev:ow:10e2073a01080063";
        let rec = |u: &str, t: &str, v: f64| format!(r#"{{"n":"{n}","u":"{u}","t":{t},"v":{v}}}"#);
        let pack = [
            rec("%RH", "1.320067464e+09", 20.0),
            rec("lon", "1.320067464e+09", 24.30621),
            rec("lat", "1.320067464e+09", 60.07965),
            rec("%RH", "1.320067524e+09", 20.3),
            rec("lon", "1.320067524e+09", 24.30622),
            rec("lat", "1.320067524e+09", 60.07965),
            rec("%RH", "1.320067584e+09", 20.7),
            rec("lon", "1.320067584e+09", 24.30623),
            rec("lat", "1.320067584e+09", 60.07966),
            rec("%EL", "1.320067614e+09", 98.0),
            rec("%RH", "1.320067644e+09", 21.2),
            rec("lon", "1.320067644e+09", 24.30628),
            rec("lat", "1.320067644e+09", 60.07967),
        ];
        assert_eq!(
            readings(&format!("[{}]", pack.join(","))),
            multiple_measurements()
        );
    }

    #[test]
    fn multiple_data_types_5_1_5_keep_strings_booleans_and_data_as_metadata() {
        assert_eq!(
            readings(
                r#"[{"bn":"urn:dev:ow:10e2073a01080063:","n":"temp","u":"Cel","v":23.1},
                    {"n":"label","vs":"Machine Room"},{"n":"open","vb":false},
                    {"n":"nfv-reader","vd":"aGkgCg"}]"#
            ),
            [r(
                "urn:dev:ow:10e2073a01080063",
                "2011-10-31T16:27:09.000000Z",
                json!({"temp": 23.1}),
                json!({"units": {"temp": "Cel"},
                       "values": {"label": "Machine Room", "open": false, "nfv-reader": "aGkgCg"}})
            )]
        );
    }

    #[test]
    fn collection_of_resources_5_1_6_is_one_reading_per_device() {
        let both = |t: f64, h: f64| json!({"humidity": h, "temperature": t});
        let units = json!({"units": {"temperature": "Cel", "humidity": "%RH"}});
        assert_eq!(
            readings(
                r#"[{"bn":"2001:db8::2/","bt":1.320078429e+09,"n":"temperature","u":"Cel","v":25.2},
                    {"n":"humidity","u":"%RH","v":30},
                    {"bn":"2001:db8::1/","n":"temperature","u":"Cel","v":12.3},
                    {"n":"humidity","u":"%RH","v":67}]"#
            ),
            [
                r(
                    "2001:db8::1",
                    "2011-10-31T16:27:09.000000Z",
                    both(12.3, 67.0),
                    units.clone()
                ),
                r(
                    "2001:db8::2",
                    "2011-10-31T16:27:09.000000Z",
                    both(25.2, 30.0),
                    units
                ),
            ]
        );
    }

    #[test]
    fn the_issues_own_name_splits_at_the_last_colon() {
        let got = readings(
            r#"[{"bn":"urn:dev:mac:0024befffe804ff1:","n":"temperature","v":21.5,"t":-10}]"#,
        );
        assert_eq!(got[0].0, "urn:dev:mac:0024befffe804ff1");
        assert_eq!(
            got[0].1, "2011-10-31T16:26:59.000000Z",
            "relative to arrival"
        );
        assert_eq!(got[0].2, json!({"temperature": 21.5}));
    }

    #[test]
    fn what_cannot_be_mapped_is_rejected_with_its_reason() {
        for (pack, reason) in [
            (
                r#"[{"n":"temperature","v":1}]"#,
                QuarantineReason::InvalidDeviceId,
            ),
            (r#"[{"n":"a:b","v":"x"}]"#, QuarantineReason::InvalidMetric),
            (
                r#"[{"bver":11,"n":"a:b","v":1}]"#,
                QuarantineReason::NotObjectOrArray,
            ),
            (
                r#"[{"n":"a:b","v":1,"secret_":1}]"#,
                QuarantineReason::NotObjectOrArray,
            ),
            (
                r#"[{"n":"a b:c","v":1}]"#,
                QuarantineReason::InvalidDeviceId,
            ),
        ] {
            assert_eq!(decode(pack).unwrap_err().reason, reason, "{pack}");
        }
        // A reading array is never taken for SenML.
        let r = decode(r#"[{"deviceId":"a","timestamp":"2011-10-31T16:27:00Z","n":1}]"#).unwrap();
        assert_eq!(r[0].metrics.len(), 1);
    }

    fn any_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        prop_oneof![
            any::<f64>().prop_map(|f| json!(f)),
            (-1e12f64..1e12).prop_map(|f| json!(f)),
            "[a-z:/_0-9%-]{0,12}".prop_map(|s| json!(s)),
            any::<bool>().prop_map(|b| json!(b)),
            Just(Value::Null),
        ]
    }

    proptest::proptest! {
        #[test]
        fn any_pack_decodes_or_is_rejected_without_panicking(
            records in proptest::collection::vec(
                proptest::collection::btree_map(
                    proptest::sample::select(vec![
                        "bn", "bt", "bu", "bv", "bs", "bver", "n", "u", "v", "vs", "vb", "vd",
                        "s", "t", "ut",
                    ]),
                    any_value(),
                    1..6,
                ),
                1..12,
            )
        ) {
            let mut pack: Vec<Value> = records
                .into_iter()
                .map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()))
                .collect();
            pack[0]["n"] = json!("dev:x");
            let _ = decode(&Value::Array(pack).to_string());
        }
    }
}
