//! A device's alert thresholds (`thresholds` of `PUT /devices/{id}`): bounds, severity, and
//! the fields that shape an alert's life, `deadband`, `forSeconds` and
//! `keepFiringForSeconds`.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use tidemark_schema::{
    MAX_METRIC_MAGNITUDE, MIN_METRIC_MAGNITUDE, MetricName, Threshold, is_metric_value,
};

use crate::error::ApiError;

pub const MAX_THRESHOLDS: usize = 32;
/// A threshold's `forSeconds` (and `keepFiringForSeconds`) is at most a day.
pub const MAX_FOR_SECONDS: u32 = 86_400;

pub(super) fn thresholds(
    m: Map<String, Value>,
) -> Result<BTreeMap<MetricName, Threshold>, ApiError> {
    if m.len() > MAX_THRESHOLDS {
        return Err(ApiError::bad(
            "thresholds",
            format!("at most {MAX_THRESHOLDS} metrics"),
        ));
    }
    let mut out = BTreeMap::new();
    for (k, v) in m {
        let param = format!("thresholds.{k}");
        let metric = MetricName::new(&k).map_err(|e| ApiError::bad(&param, e.to_string()))?;
        // The tuning fields first, so their errors name them rather than the metric.
        // (`null` is absent, as for every optional field.)
        let given = |name| v.get(name).filter(|x| !x.is_null());
        let band = given("deadband").map(|d| deadband(&param, d)).transpose()?;
        for name in ["forSeconds", "keepFiringForSeconds"] {
            if let Some(f) = given(name) {
                duration(&param, name, f)?;
            }
        }
        let t: Threshold = serde_json::from_value(v).map_err(|e| {
            ApiError::bad(
                &param,
                format!("{e}; expected {{\"min\"?: number, \"max\"?: number, \"severity\": info|warning|critical, \"deadband\"?: number, \"forSeconds\"?: integer, \"keepFiringForSeconds\"?: integer}}"),
            )
        })?;
        if let Some(v) = [t.min, t.max]
            .into_iter()
            .flatten()
            .find(|v| !is_metric_value(*v))
        {
            return Err(ApiError::bad(
                &param,
                format!(
                    "{v:e} is outside the range of metric values (0, or a magnitude from \
                     {MIN_METRIC_MAGNITUDE:e} to {MAX_METRIC_MAGNITUDE:e})"
                ),
            ));
        }
        match (t.min, t.max) {
            (None, None) => {
                return Err(ApiError::bad(&param, "needs min, max, or both"));
            }
            (Some(lo), Some(hi)) if lo >= hi => {
                return Err(ApiError::bad(&param, "min must be below max"));
            }
            (Some(lo), Some(hi)) if band.is_some_and(|d| d > hi - lo) => {
                return Err(ApiError::bad(
                    format!("{param}.deadband"),
                    format!(
                        "must not exceed the span between min and max ({})",
                        tidemark_schema::number(hi - lo)
                    ),
                ));
            }
            _ => {}
        }
        out.insert(metric, t);
    }
    Ok(out)
}

/// `deadband`: how far back inside the limit a value must be to resolve the alert; a metric
/// value (so every bound it shifts stays storable) and never negative.
fn deadband(param: &str, v: &Value) -> Result<f64, ApiError> {
    v.as_f64()
        .filter(|d| *d >= 0.0 && is_metric_value(*d))
        .ok_or_else(|| {
            ApiError::bad(
                format!("{param}.deadband"),
                format!(
                    "{v} is not 0 or a number from {MIN_METRIC_MAGNITUDE:e} to \
                     {MAX_METRIC_MAGNITUDE:e}"
                ),
            )
        })
}

/// `forSeconds` (how long, on reading timestamps, a breach must last before it opens an
/// alert) or `keepFiringForSeconds` (how long it must have ended before the alert resolves,
/// so a flapping value stays one alert): whole seconds, at most a day.
fn duration(param: &str, name: &str, v: &Value) -> Result<u32, ApiError> {
    v.as_u64()
        .filter(|n| *n <= MAX_FOR_SECONDS as u64)
        .map(|n| n as u32)
        .ok_or_else(|| {
            ApiError::bad(
                format!("{param}.{name}"),
                format!("{v} is not a whole number of seconds from 0 to {MAX_FOR_SECONDS}"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `thresholds` object of a registration body.
    fn parse(body: &str) -> Result<BTreeMap<MetricName, Threshold>, ApiError> {
        let v: Value = serde_json::from_str(body).unwrap();
        thresholds(v["thresholds"].as_object().unwrap().clone())
    }

    fn param_of(r: Result<BTreeMap<MetricName, Threshold>, ApiError>) -> String {
        match r {
            Err(ApiError::BadRequest { param, .. }) => param,
            other => panic!("expected a 400, got {other:?}"),
        }
    }

    #[test]
    fn deadband_and_for_seconds_are_kept_when_valid() {
        let r = parse(r#"{"thresholds":{
            "temperature":{"min":-5,"max":30,"severity":"critical","deadband":35,"forSeconds":86400},
            "battery":{"min":10,"severity":"warning","deadband":0,"forSeconds":0},
            "humidity":{"max":90,"severity":"info","deadband":2.5,"forSeconds":null}}}"#)
        .unwrap();
        let t = |m: &str| r[&MetricName::new(m).unwrap()].clone();
        assert_eq!(
            (t("temperature").deadband, t("temperature").for_seconds),
            (Some(35.0), Some(86_400))
        );
        assert_eq!(
            (t("battery").deadband, t("battery").for_seconds),
            (Some(0.0), Some(0))
        );
        assert_eq!(
            (t("humidity").deadband, t("humidity").for_seconds),
            (Some(2.5), None)
        );
    }

    #[test]
    fn keep_firing_for_seconds_is_kept_up_to_a_day_and_a_bad_one_is_named() {
        let t = |v: &str| {
            format!(
                r#"{{"thresholds":{{"temperature":{{"max":30,"severity":"critical","keepFiringForSeconds":{v}}}}}}}"#
            )
        };
        let r = parse(&t("86400")).unwrap();
        assert_eq!(
            r[&MetricName::new("temperature").unwrap()].keep_firing_for_seconds,
            Some(86_400)
        );
        let r = parse(&t("null")).unwrap();
        assert_eq!(
            r[&MetricName::new("temperature").unwrap()].keep_firing_for_seconds,
            None
        );
        for bad in ["86401", "-1", "1.5", "\"60\""] {
            assert_eq!(
                param_of(parse(&t(bad))),
                "thresholds.temperature.keepFiringForSeconds",
                "{bad}"
            );
        }
    }

    #[test]
    fn each_bad_deadband_or_for_seconds_names_its_field() {
        let t = |extra: &str| {
            format!(
                r#"{{"thresholds":{{"temperature":{{"min":10,"max":30,"severity":"critical",{extra}}}}}}}"#
            )
        };
        for (extra, param) in [
            (r#""deadband":-1"#, "thresholds.temperature.deadband"),
            (r#""deadband":"2""#, "thresholds.temperature.deadband"),
            (r#""deadband":1e101"#, "thresholds.temperature.deadband"),
            (r#""deadband":1e-101"#, "thresholds.temperature.deadband"),
            (r#""deadband":true"#, "thresholds.temperature.deadband"),
            // wider than the 20 between min and max
            (r#""deadband":20.5"#, "thresholds.temperature.deadband"),
            (r#""forSeconds":-1"#, "thresholds.temperature.forSeconds"),
            (r#""forSeconds":86401"#, "thresholds.temperature.forSeconds"),
            (r#""forSeconds":1.5"#, "thresholds.temperature.forSeconds"),
            (r#""forSeconds":"60""#, "thresholds.temperature.forSeconds"),
            (r#""forSecs":60"#, "thresholds.temperature"),
        ] {
            assert_eq!(param_of(parse(&t(extra))), param, "{extra}");
        }
        // The span bound holds only with both limits; alone, a limit takes any deadband.
        assert!(
            parse(r#"{"thresholds":{"t":{"max":1,"severity":"info","deadband":500}}}"#).is_ok()
        );
        assert!(
            parse(&t(r#""deadband":20"#)).is_ok(),
            "a deadband equal to the span is allowed"
        );
    }
}
