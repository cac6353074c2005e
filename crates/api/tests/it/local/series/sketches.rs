//! Percentiles of hours and days from the rollups' quantile sketches (devices with
//! `percentiles: true`): within the sketch's 1 % of the exact quantile, and from the readings,
//! exact, wherever a bucket's rollup keeps no sketch.

use serde_json::Value;
use tidemark_schema::sketch::RELATIVE_ACCURACY;
use tidemark_schema::{AggregateItem, Period, Reading, Sketch};

use super::fixture::*;
use crate::common::*;

/// `item` with each metric's sketch of `rs`, as the rollups role writes it for a device
/// with `percentiles: true`.
fn sketched(mut item: AggregateItem, rs: &[Reading]) -> AggregateItem {
    for (m, s) in item.metrics.iter_mut() {
        let mut sk = Sketch::default();
        for r in rs {
            if let Some(v) = r.metrics.get(m) {
                sk.add(*v);
            }
        }
        s.sketch = Some(sk);
    }
    item
}

fn within_accuracy(got: &Value, want: Option<f64>) -> bool {
    match (got.as_f64(), want) {
        (Some(g), Some(w)) => (g - w).abs() <= RELATIVE_ACCURACY * w.abs() + 1e-12,
        _ => false,
    }
}

const PCTS: [&str; 4] = ["p50", "p90", "p95", "p99"];

#[tokio::test]
async fn percentiles_of_hours_and_days_come_from_the_rollup_sketches_within_one_percent() {
    // GIVEN the device with percentiles on, hours 13 and 14 and the day rolled up with sketches
    let t = device("api-series-sketch").await;
    let app = app(&t);
    let (status, body) = call(&app, "PUT", "/devices/sensor_01", r#"{"percentiles":true}"#).await;
    assert_eq!(status, 200, "{body}");
    let (_, shown) = get(&app, "/devices/sensor_01").await;
    assert_eq!(shown["percentiles"], Value::Bool(true));
    let all = stored(&app, "2026-04-20T13:00:00Z", "2026-04-20T15:00:00Z").await;
    let hour_readings = |h: &str| {
        as_readings(
            &all,
            &format!("2026-04-20T{h}:00:00Z"),
            &format!("2026-04-20T{h}:59:59.999999Z"),
        )
    };
    for h in ["13", "14"] {
        let rs = hour_readings(h);
        let item = aggregate("sensor_01", Period::Hourly, rs[0].timestamp, &rs);
        put(&t, &sketched(item, &rs)).await;
    }
    let day_rs = as_readings(&all, "2026-04-20T00:00:00Z", "2026-04-20T23:59:59.999999Z");
    let day = aggregate("sensor_01", Period::Daily, day_rs[0].timestamp, &day_rs);
    put(&t, &sketched(day, &day_rs)).await;
    let aggs = "count,p50,p90,p95,p99";
    let series = |query: String| rows(&app, query);
    let hours = "from=2026-04-20T13:00:00Z&to=2026-04-20T15:00:00Z&resolution=1h";
    let days = "from=2026-04-20T00:00:00Z&to=2026-04-21T00:00:00Z&resolution=1d";
    let mut approximate = 0;
    for (range, width) in [(hours, 3_600_000), (days, 86_400_000)] {
        // WHEN percentiles of whole hours or days are asked for
        let rows = series(format!("{range}&aggregates={aggs}")).await;
        // THEN each is within 1 % of the exact quantile of the bucket's readings, counts exact
        let want = recompute(&all, width);
        assert_eq!(rows.len(), want.len(), "{range}");
        for (row, (key, w)) in rows.iter().zip(&want) {
            assert!(close(&row["count"], w["count"]), "{key:?}: {row}");
            for p in PCTS {
                let exact = exact_rank(&all, key, width, p[1..].parse().unwrap());
                assert!(
                    within_accuracy(&row[p], exact),
                    "{key:?} {p}: {row} vs {exact:?}"
                );
                approximate += usize::from(!close(&row[p], exact));
            }
        }
    }
    // AND they came from the sketches: some are not the exact value (a bin's, within 1 %)
    assert!(approximate > 0);

    // WHEN hour 13's rollup has no sketch (written before the device asked for percentiles)
    let rs = hour_readings("13");
    put(
        &t,
        &aggregate("sensor_01", Period::Hourly, rs[0].timestamp, &rs),
    )
    .await;
    let rows = series(format!("{hours}&aggregates={aggs}")).await;
    // THEN hour 13 comes from its readings, exact, and hour 14 from its sketch still
    let want = recompute(&all, 3_600_000);
    let mut hour14_approximate = 0;
    for (row, (key, _)) in rows.iter().zip(&want) {
        for p in PCTS {
            let exact = exact_rank(&all, key, 3_600_000, p[1..].parse().unwrap());
            if key.0.starts_with("2026-04-20T13") {
                assert!(close(&row[p], exact), "{key:?} {p}: {row}");
            } else {
                assert!(within_accuracy(&row[p], exact), "{key:?} {p}: {row}");
                hour14_approximate += usize::from(!close(&row[p], exact));
            }
        }
    }
    assert!(hour14_approximate > 0);

    // WHEN the device turns percentiles off, THEN every percentile is exact again (readings)
    let (status, _) = call(
        &app,
        "PUT",
        "/devices/sensor_01",
        r#"{"percentiles":false}"#,
    )
    .await;
    assert_eq!(status, 200);
    let (_, shown) = get(&app, "/devices/sensor_01").await;
    assert_eq!(shown.get("percentiles"), None);
    let rows = series(format!("{days}&aggregates={aggs}&format=rows")).await;
    let want = recompute(&all, 86_400_000);
    assert_eq!(rows.len(), want.len());
    for (row, (key, _)) in rows.iter().zip(&want) {
        for p in PCTS {
            let exact = exact_rank(&all, key, 86_400_000, p[1..].parse().unwrap());
            assert!(close(&row[p], exact), "{key:?} {p}: {row}");
        }
    }
    // AND a body that is not a boolean is a 400 naming `percentiles`
    let (status, body) = call(
        &app,
        "PUT",
        "/devices/sensor_01",
        r#"{"percentiles":"yes"}"#,
    )
    .await;
    assert_eq!(
        (status, param_of(&body)),
        (400, Some("percentiles")),
        "{body}"
    );
}

/// The exact `q`th percentile (rank ⌊q·(n−1)/100⌋) of the readings of `key`'s bucket.
fn exact_rank(
    all: &[(tidemark_schema::Timestamp, String, f64)],
    key: &(String, String),
    width_ms: i64,
    q: usize,
) -> Option<f64> {
    let start = ts(&key.0).epoch_millis();
    let mut v: Vec<f64> = all
        .iter()
        .filter(|(at, m, _)| *m == key.1 && (start..start + width_ms).contains(&at.epoch_millis()))
        .map(|(_, _, v)| *v)
        .collect();
    v.sort_by(f64::total_cmp);
    v.get(q * v.len().checked_sub(1)? / 100).copied()
}
