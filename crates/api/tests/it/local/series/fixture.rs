//! The device every series test reads: readings across three layouts, with sparse metrics,
//! a gap and corrections, and the plain recomputation the answers are checked against.

use std::collections::BTreeMap;

use serde_json::Value;
use tidemark_api::App;
use tidemark_schema::{LayoutHistory, Reading, Timestamp};
use tidemark_testkit::TestTable;

use crate::common::*;

/// Every 13 s from 13:50 to 15:00: `t` always, `h` on even readings, `w` only before 14:30,
/// and none at all from 14:32 to 14:41 (a gap). Values wander and repeat, so extremes and
/// percentiles have ties.
pub fn sent() -> Vec<Reading> {
    let start = ts("2026-04-20T13:50:00Z");
    (0..324)
        .map(|i| (i, start.plus_millis(i * 13_000).unwrap()))
        .filter(|(_, at)| !(ts("2026-04-20T14:32:00Z") <= *at && *at < ts("2026-04-20T14:41:00Z")))
        .map(|(i, at)| {
            let x = i as f64;
            let mut m = vec![("t", 20.0 + (x * 0.37).sin() * 3.0)];
            if i % 2 == 0 {
                m.push(("h", ((i * 7) % 11) as f64));
            }
            if at < ts("2026-04-20T14:30:00Z") {
                m.push(("w", 1e6 + (i % 5) as f64 * 0.1));
            }
            reading("sensor_01", at, &m)
        })
        .collect()
}

/// A device whose layout is single until 14:10, packed in 60 s slots until 14:40, then packed
/// in 10 s slots over two shards, holding [`sent`] and then corrections of some readings.
pub async fn device(label: &str) -> TestTable {
    let t = TestTable::new(label).await;
    put(&t, &sample_device()).await;
    for (clock, body) in [
        (
            "2026-04-20T13:00:00Z",
            r#"{"slotSeconds":60,"effectiveFrom":"2026-04-20T14:10:00Z"}"#,
        ),
        (
            "2026-04-20T14:15:00Z",
            r#"{"slotSeconds":10,"shards":2,"effectiveFrom":"2026-04-20T14:40:00Z"}"#,
        ),
    ] {
        let (status, answer) = call(
            &at_clock(&t, clock),
            "PUT",
            "/devices/sensor_01/layout",
            body,
        )
        .await;
        assert_eq!(status, 200, "{body}: {answer}");
    }
    let (_, layout) = get(&app(&t), "/devices/sensor_01/layout").await;
    let history: LayoutHistory = serde_json::from_value(layout["epochs"].clone()).unwrap();
    let readings = sent();
    store(&t, "sensor_01", &history, &readings).await;
    // Corrections: every 17th reading sent again with another value for `t`.
    let corrected: Vec<Reading> = readings
        .iter()
        .step_by(17)
        .map(|r| {
            let mut r = r.clone();
            r.metrics.insert(metric("t"), -5.0);
            r
        })
        .collect();
    store(&t, "sensor_01", &history, &corrected).await;
    t
}

/// What the readings route returns over `[from, to)`: (time, metric, value).
pub async fn stored(app: &App, from: &str, to: &str) -> Vec<(Timestamp, String, f64)> {
    let to_incl = ts(to).pred().unwrap();
    let (items, _) = walk(
        app,
        &format!("/devices/sensor_01/readings?from={from}&to={to_incl}&limit=1000"),
    )
    .await;
    let mut out = Vec::new();
    for r in items {
        let at = ts(r["timestamp"].as_str().unwrap());
        // A reading is flat: every numeric property is a metric.
        for (m, v) in r.as_object().unwrap() {
            if let Some(v) = v.as_f64() {
                out.push((at, m.clone(), v));
            }
        }
    }
    out
}

/// Each bucket's aggregates recomputed the plain way: keyed by (bucket start, metric).
pub fn recompute(
    readings: &[(Timestamp, String, f64)],
    width_ms: i64,
) -> BTreeMap<(String, String), BTreeMap<&'static str, Option<f64>>> {
    let mut groups: BTreeMap<(i64, String), Vec<(Timestamp, f64)>> = BTreeMap::new();
    for (at, m, v) in readings {
        let ms = at.epoch_millis();
        groups
            .entry((ms - ms.rem_euclid(width_ms), m.clone()))
            .or_default()
            .push((*at, *v));
    }
    groups
        .into_iter()
        .map(|((start, m), vs)| {
            let n = vs.len() as f64;
            let sum: f64 = vs.iter().map(|(_, v)| v).sum();
            let mean = sum / n;
            let var = vs.iter().map(|(_, v)| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
            let mut sorted: Vec<f64> = vs.iter().map(|(_, v)| *v).collect();
            sorted.sort_by(f64::total_cmp);
            let rank = |q: usize| sorted[q * (sorted.len() - 1) / 100];
            let aggs = BTreeMap::from([
                ("count", Some(n)),
                ("sum", Some(sum)),
                ("avg", Some(mean)),
                ("min", Some(sorted[0])),
                ("max", Some(sorted[sorted.len() - 1])),
                ("stddev", (vs.len() > 1).then(|| var.sqrt())),
                ("first", Some(vs[0].1)),
                ("last", Some(vs[vs.len() - 1].1)),
                ("p50", Some(rank(50))),
                ("p95", Some(rank(95))),
                ("p99", Some(rank(99))),
            ]);
            let time = Timestamp::from_epoch_millis(start).unwrap().to_string();
            ((time, m), aggs)
        })
        .collect()
}

/// The parameter a 400 names (its message reads `invalid <param>: …`).
pub fn param_of(body: &Value) -> Option<&str> {
    body["error"]["message"]
        .as_str()?
        .strip_prefix("invalid ")?
        .split(':')
        .next()
}

pub const ALL: &str = "count,sum,avg,min,max,stddev,first,last,p50,p95,p99";

pub fn close(got: &Value, want: Option<f64>) -> bool {
    match (got.as_f64(), want) {
        (None, None) => got.is_null(),
        (Some(g), Some(w)) => (g - w).abs() <= 1e-9 * w.abs().max(1.0),
        _ => false,
    }
}

pub fn as_readings(stored: &[(Timestamp, String, f64)], from: &str, to: &str) -> Vec<Reading> {
    let mut by_time: BTreeMap<Timestamp, Vec<(&str, f64)>> = BTreeMap::new();
    for (at, m, v) in stored {
        if ts(from) <= *at && *at < ts(to) {
            by_time.entry(*at).or_default().push((m.as_str(), *v));
        }
    }
    by_time
        .into_iter()
        .map(|(at, ms)| reading("sensor_01", at, &ms))
        .collect()
}

/// The rows of one page of `sensor_01`'s series for `query`, which must be a 200.
pub async fn rows(app: &App, query: String) -> Vec<Value> {
    let (status, body) = get(app, &format!("/devices/sensor_01/series?{query}")).await;
    assert_eq!(status, 200, "{query}: {body}");
    body["items"].as_array().unwrap().clone()
}
