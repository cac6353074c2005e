//! `GET /devices/{id}/series` against DynamoDB Local. Every aggregate of every resolution
//! equals a recomputation from the readings the readings route returns, across a device whose
//! layout goes from single items to packed slots to two shards; rows paged in pages of any
//! size give the same buckets as one wide answer; empty buckets are filled with nothing, the
//! last reading, or the line between readings, including readings outside the range.

mod fixture;
mod sketches;

use crate::common::*;
use fixture::*;
use serde_json::Value;
use tidemark_api::{ApiConfig, App};
use tidemark_schema::{AggregateItem, Period, Timestamp};

#[tokio::test]
async fn every_aggregate_of_every_resolution_equals_a_recomputation_from_the_stored_readings() {
    // GIVEN a device across three layouts, with sparse metrics, a gap and corrections
    let t = device("api-series-exact").await;
    let app = app(&t); // 15:00
    let (from, to) = ("2026-04-20T13:52:10Z", "2026-04-20T15:00:00Z");
    let readings = stored(&app, from, to).await;
    assert!(readings.len() > 550, "{}", readings.len());
    assert!(
        readings.iter().any(|(_, m, v)| m == "t" && *v == -5.0),
        "corrections stored"
    );
    for (res, width_ms) in [
        ("1m", 60_000),
        ("5m", 300_000),
        ("15m", 900_000),
        ("1h", 3_600_000),
    ] {
        let want = recompute(&readings, width_ms);
        for limit in [1, 7, 1000] {
            // WHEN the series is read in pages of `limit` rows
            let uri = format!(
                "/devices/sensor_01/series?from={from}&to={to}&resolution={res}&aggregates={ALL}&limit={limit}"
            );
            let (rows, pages) = walk(&app, &uri).await;
            // THEN there is one row per bucket and metric with readings, in time then metric
            // order, and every aggregate equals the recomputation
            let keys: Vec<(String, String)> = rows
                .iter()
                .map(|r| {
                    (
                        r["time"].as_str().unwrap().into(),
                        r["metric"].as_str().unwrap().into(),
                    )
                })
                .collect();
            assert_eq!(
                keys,
                want.keys().cloned().collect::<Vec<_>>(),
                "{res} limit {limit}"
            );
            for (row, (key, aggs)) in rows.iter().zip(&want) {
                for (name, w) in aggs {
                    assert!(
                        close(&row[*name], *w),
                        "{res} {key:?} {name}: {} vs {w:?}",
                        row[*name]
                    );
                }
                assert_eq!(row.get("filled"), None);
            }
            if limit == 1 {
                // a page holds whole buckets: one bucket (of up to three metrics) a page
                let buckets: std::collections::BTreeSet<&String> =
                    want.keys().map(|k| &k.0).collect();
                assert_eq!(pages, buckets.len(), "{res}");
            }
        }
        // AND one wide answer holds the same buckets
        let (status, wide) = get(
            &app,
            &format!("/devices/sensor_01/series?from={from}&to={to}&resolution={res}&aggregates={ALL}&format=wide&maxPoints=10000"),
        )
        .await;
        assert_eq!(status, 200, "{wide}");
        let mut cells = 0;
        for bucket in wide.as_array().unwrap() {
            let time = bucket["time"].as_str().unwrap().to_owned();
            for m in ["h", "t", "w"] {
                match want.get(&(time.clone(), m.to_owned())) {
                    Some(aggs) => {
                        cells += 1;
                        for (name, w) in aggs {
                            assert!(
                                close(&bucket[format!("{m}.{name}")], *w),
                                "{res} {time} {m}.{name}"
                            );
                        }
                    }
                    None => assert!(bucket[format!("{m}.count")].is_null(), "{res} {time} {m}"),
                }
            }
        }
        assert_eq!(cells, want.len(), "{res}");
    }
}

#[tokio::test]
async fn empty_buckets_are_filled_from_the_neighbouring_readings_even_outside_the_range() {
    // GIVEN the device's gap from 14:32 to 14:41, and a range that starts inside it
    let t = device("api-series-fill").await;
    let app = app(&t);
    let readings = stored(&app, "2026-04-20T14:00:00Z", "2026-04-20T15:00:00Z").await;
    let t_values: Vec<(Timestamp, f64)> = readings
        .iter()
        .filter(|(_, m, _)| m == "t")
        .map(|(at, _, v)| (*at, *v))
        .collect();
    let before = *t_values
        .iter()
        .rfind(|(at, _)| *at < ts("2026-04-20T14:33:00Z"))
        .unwrap();
    let after = *t_values
        .iter()
        .find(|(at, _)| *at >= ts("2026-04-20T14:41:00Z"))
        .unwrap();
    let uri = |fill: &str| {
        format!(
            "/devices/sensor_01/series?from=2026-04-20T14:33:00Z&to=2026-04-20T14:43:00Z\
             &resolution=1m&metrics=t&aggregates=avg,count,sum,last&fill={fill}&limit=3"
        )
    };
    // WHEN nothing fills the gap, only the buckets with readings come back
    let (rows, _) = walk(&app, &uri("none")).await;
    let times: Vec<&str> = rows.iter().map(|r| r["time"].as_str().unwrap()).collect();
    assert_eq!(
        times,
        ["2026-04-20T14:41:00.000000Z", "2026-04-20T14:42:00.000000Z"]
    );
    for (fill, expect) in [
        (
            "null",
            Box::new(|_: Timestamp| None) as Box<dyn Fn(Timestamp) -> Option<f64>>,
        ),
        ("locf", Box::new(move |_| Some(before.1))),
        (
            "linear",
            Box::new(move |t: Timestamp| {
                let f = (t.epoch_micros() - before.0.epoch_micros()) as f64
                    / (after.0.epoch_micros() - before.0.epoch_micros()) as f64;
                Some(before.1 + (after.1 - before.1) * f)
            }),
        ),
    ] {
        // WHEN it is filled (pages of 3 rows, so the gap spans pages)
        let (rows, pages) = walk(&app, &uri(fill)).await;
        // THEN every minute has a row; the eight empty ones are marked filled, with count 0,
        // no sum, and avg and last from the readings around the gap
        assert_eq!(rows.len(), 10, "{fill}");
        assert_eq!(pages, 4, "{fill}");
        for (i, row) in rows.iter().enumerate() {
            let time = ts("2026-04-20T14:33:00Z")
                .plus_millis(i as i64 * 60_000)
                .unwrap();
            assert_eq!(row["time"], Value::from(time.to_string()));
            if i < 8 {
                assert_eq!(row["filled"], Value::Bool(true), "{fill} {time}");
                assert_eq!(
                    (row["count"].as_u64(), row["sum"].is_null()),
                    (Some(0), true)
                );
                assert!(close(&row["avg"], expect(time)), "{fill} {time}: {row}");
                assert!(close(&row["last"], expect(time)), "{fill} {time}: {row}");
            } else {
                assert_eq!(row.get("filled"), None);
                assert!(row["count"].as_u64().unwrap() > 0);
            }
        }
    }
}

#[tokio::test]
async fn bad_requests_name_their_parameter_and_cursors_bind_to_their_query() {
    let t = device("api-series-errors").await;
    let app = app(&t);
    let day = "from=2026-04-20T00:00:00Z&to=2026-04-21T00:00:00Z";
    let (status, body) = get(&app, &format!("/devices/nobody/series?{day}")).await;
    assert_eq!(status, 404, "{body}");
    for (query, param) in [
        (format!("{day}&resolution=1m&format=wide"), "maxPoints"),
        (format!("{day}&aggregates=mean"), "aggregates"),
        ("from=2026-04-20T00:00:00Z".to_owned(), "to"),
        (format!("{day}&tz=Europe/Paris"), "tz"),
    ] {
        let (status, body) = get(&app, &format!("/devices/sensor_01/series?{query}")).await;
        assert_eq!(
            (status, param_of(&body)),
            (400, Some(param)),
            "{query}: {body}"
        );
    }
    // A cursor opens only the query that made it.
    let q = "from=2026-04-20T14:00:00Z&to=2026-04-20T15:00:00Z&resolution=1m&limit=5";
    let (_, first) = get(&app, &format!("/devices/sensor_01/series?{q}")).await;
    let cursor = first["cursor"].as_str().unwrap();
    let (status, body) = get(
        &app,
        &format!("/devices/sensor_01/series?{q}&aggregates=max&cursor={cursor}"),
    )
    .await;
    assert_eq!((status, param_of(&body)), (400, Some("cursor")), "{body}");
    let (status, next) = get(
        &app,
        &format!("/devices/sensor_01/series?{q}&cursor={cursor}"),
    )
    .await;
    assert_eq!(status, 200);
    assert!(next["items"][0]["time"].as_str() > first["items"][4]["time"].as_str());
}

/// The stored readings of `[from, to)` as readings again (one per timestamp).
#[tokio::test]
async fn hours_and_days_come_from_the_rollups_and_buckets_cut_by_the_range_from_readings() {
    // GIVEN the device's hour 14 rolled up, and hour 13 rolled up before rollups kept the
    // spread, first and last (count, sum, min and max only), and its day still open
    let t = device("api-series-rollups").await;
    let app = app(&t);
    let all = stored(&app, "2026-04-20T13:00:00Z", "2026-04-20T15:00:00Z").await;
    let hour = |h: &str| {
        let (from, to) = (
            format!("2026-04-20T{h}:00:00Z"),
            format!("2026-04-20T{h}:59:59.999999Z"),
        );
        aggregate(
            "sensor_01",
            Period::Hourly,
            ts(&from),
            &as_readings(&all, &from, &to),
        )
    };
    let mut old = hour("13");
    for s in old.metrics.values_mut() {
        (s.m2, s.first, s.last) = (None, None, None);
    }
    put(&t, &old).await;
    put(&t, &hour("14")).await;
    let mut day = AggregateItem::empty(&AggregateItem::key_for(
        &dev("sensor_01"),
        Period::Daily.bucket(ts("2026-04-20T00:00:00Z")),
    ));
    day.open = true;
    put(&t, &day).await;
    let aggs = "count,sum,avg,min,max,stddev,first,last";
    let series = |query: String| rows(&app, query);

    // WHEN whole hours are asked for
    let rows = series(format!(
        "from=2026-04-20T13:00:00Z&to=2026-04-20T15:00:00Z&resolution=1h&aggregates={aggs}"
    ))
    .await;
    // THEN hour 14 is its rollup, equal to the recomputation in every aggregate
    let want = recompute(&all, 3_600_000);
    assert_eq!(rows.len(), want.len());
    for (row, ((time, metric), w)) in rows.iter().zip(&want) {
        assert_eq!(
            (row["time"].as_str(), row["metric"].as_str()),
            (Some(time.as_str()), Some(metric.as_str()))
        );
        for name in aggs.split(',') {
            let old_field =
                time.starts_with("2026-04-20T13") && ["stddev", "first", "last"].contains(&name);
            // AND hour 13 answers what its rollup holds, `null` for what it does not
            let expected = if old_field { None } else { w[name] };
            assert!(
                close(&row[name], expected),
                "{time} {metric} {name}: {}",
                row[name]
            );
        }
    }

    // AND pages of rows, however small, hold the same rows
    for limit in [1, 2, 4] {
        let (paged, pages) = walk(
            &app,
            &format!(
                "/devices/sensor_01/series?from=2026-04-20T13:00:00Z&to=2026-04-20T15:00:00Z&resolution=1h&aggregates={aggs}&limit={limit}"
            ),
        )
        .await;
        assert_eq!(paged, rows, "limit {limit}");
        assert!(pages >= 2, "limit {limit}: {pages} pages");
    }

    // WHEN the range cuts both hours, THEN each is taken from its readings inside the range
    let (from, to) = ("2026-04-20T13:30:00Z", "2026-04-20T14:30:00Z");
    let inside: Vec<_> = all
        .iter()
        .filter(|(at, _, _)| ts(from) <= *at && *at < ts(to))
        .cloned()
        .collect();
    let want = recompute(&inside, 3_600_000);
    let rows = series(format!(
        "from={from}&to={to}&resolution=1h&aggregates={aggs}"
    ))
    .await;
    assert_eq!(rows.len(), want.len());
    for (row, (key, w)) in rows.iter().zip(&want) {
        for name in aggs.split(',') {
            assert!(close(&row[name], w[name]), "{key:?} {name}: {}", row[name]);
        }
    }

    // WHEN a percentile is asked for, THEN hours come from readings, exact
    let want = recompute(&all, 3_600_000);
    let rows = series(
        "from=2026-04-20T13:00:00Z&to=2026-04-20T15:00:00Z&resolution=1h&aggregates=p95,stddev"
            .into(),
    )
    .await;
    for (row, (key, w)) in rows.iter().zip(&want) {
        assert!(
            close(&row["p95"], w["p95"]) && close(&row["stddev"], w["stddev"]),
            "{key:?}: {row}"
        );
    }

    // WHEN the open day is asked for, THEN it is the sum of its hours: counts and sums exact,
    // no spread (one of its hours does not hold it)
    let want = recompute(&all, 86_400_000);
    let rows = series(format!(
        "from=2026-04-20T00:00:00Z&to=2026-04-21T00:00:00Z&resolution=1d&aggregates={aggs}"
    ))
    .await;
    assert_eq!(rows.len(), want.len());
    for (row, (key, w)) in rows.iter().zip(&want) {
        for name in ["count", "sum", "avg", "min", "max"] {
            assert!(close(&row[name], w[name]), "{key:?} {name}: {}", row[name]);
        }
        assert!(row["stddev"].is_null() && row["first"].is_null(), "{row}");
    }
}

#[tokio::test]
async fn a_page_of_rows_ends_at_a_bucket_boundary_once_it_has_read_its_share_of_readings() {
    // GIVEN an API that summarizes at most 50 readings a request, and a range of about 280
    let t = device("api-series-bound").await;
    let mut config = ApiConfig::new(&t.name).with_now(now());
    config.series_max_readings = 50;
    let bounded = App::new(t.client.clone(), config);
    let unbounded = app(&t);
    let range = "from=2026-04-20T13:52:10Z&to=2026-04-20T15:00:00Z";
    // WHEN minutes are read in rows, THEN the pages stop early and together hold every row
    let uri =
        format!("/devices/sensor_01/series?{range}&resolution=1m&aggregates={ALL}&limit=1000");
    let (whole, one_page) = walk(&unbounded, &uri).await;
    let (paged, pages) = walk(&bounded, &uri).await;
    assert_eq!(one_page, 1);
    assert!(pages >= 5, "{pages} pages");
    assert_eq!(paged, whole);
    // WHEN a wide answer or a single bucket needs more, THEN a 400 names what to change
    for (query, param) in [
        (
            format!("{range}&resolution=1m&format=wide&maxPoints=10000"),
            "to",
        ),
        (
            format!("{range}&resolution=1h&aggregates=p95"),
            "resolution",
        ),
    ] {
        let (status, body) = get(&bounded, &format!("/devices/sensor_01/series?{query}")).await;
        assert_eq!(
            (status, param_of(&body)),
            (400, Some(param)),
            "{query}: {body}"
        );
    }
}
