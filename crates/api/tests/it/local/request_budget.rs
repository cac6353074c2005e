//! A budget per request against DynamoDB Local (docs/design.md §6 "A budget per request"):
//! every answer that would pass a limit is a 400 `too_much` naming it, at the limit it is
//! answered; open-hour readings count; no body passes the response bound.

use crate::common::*;
use serde_json::Value;
use tidemark_api::budget::{Limits, Usage, escaped_len};
use tidemark_api::{ApiConfig, App};
use tidemark_schema::{DeviceItem, DeviceStatus, LayoutHistory, Period, Reading, ReadingItem};
use tidemark_testkit::TestTable;

fn app_with(t: &TestTable, limits: Limits) -> App {
    init_logs();
    let mut config = ApiConfig::new(&t.name).with_now(now());
    config.budget = limits;
    App::new(t.client.clone(), config)
}

async fn metered(app: &App, uri: &str) -> (u16, Value, Usage, String) {
    let (resp, usage) = app.handle_metered(request("GET", uri, "")).await;
    let status = resp.status().as_u16();
    let text = String::from_utf8(resp.body().to_vec()).unwrap();
    let body: Value = serde_json::from_str(&text).unwrap();
    (status, body, usage, text)
}

fn assert_too_much(status: u16, body: &Value, limit: &str) {
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "too_much", "{body}");
    assert_eq!(body["error"]["limit"], limit, "{body}");
}

async fn device(t: &TestTable, id: &str) {
    put(
        t,
        &DeviceItem::new(dev(id), DeviceStatus::Active, ts("2026-04-01T09:00:00Z")),
    )
    .await;
}

/// A device that reported 30,000 distinct metric names between 14:00 and 14:05: 300
/// readings of 100 names each.
async fn many_metrics_table() -> TestTable {
    let t = TestTable::new("api-budget-metrics").await;
    device(&t, "gateway_01").await;
    let readings: Vec<ReadingItem> = (0..300)
        .map(|i| {
            let r = Reading {
                device_id: dev("gateway_01"),
                timestamp: ts("2026-04-20T14:00:00Z").plus_millis(i * 1_000).unwrap(),
                metrics: (0..100)
                    .map(|j| (metric(&format!("m{:05}", i * 100 + j)), j as f64))
                    .collect(),
                metadata: None,
            };
            ReadingItem::new(&r, None, 30)
        })
        .collect();
    put_all(&t, &readings).await;
    t
}

#[tokio::test]
async fn a_series_of_tens_of_thousands_of_metric_names_is_answered_up_to_the_cell_limit() {
    // GIVEN a device with 30,000 metric names in one five-minute bucket
    let t = many_metrics_table().await;
    let app = app_with(&t, Limits::default());
    let all = "/devices/gateway_01/series?from=2026-04-20T14:00:00Z&to=2026-04-20T14:05:00Z\
               &resolution=5m&format=wide";
    // WHEN all of them are asked for with the four default aggregates (30,000 × 4 = 120,000
    // values: the limit) THEN the answer holds every one
    let (status, body, usage, text) = metered(&app, all).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(usage.cells, 120_000);
    assert_eq!(body[0].as_object().unwrap().len(), 1 + 120_000);
    assert!(escaped_len(&text) <= tidemark_api::budget::MAX_RESPONSE_BYTES);
    // WHEN a fifth aggregate is asked for (150,000 values) THEN it is a 400 naming the cell
    // limit and how to narrow the query
    let (status, body) = get(&app, &format!("{all}&aggregates=avg,min,max,count,sum")).await;
    assert_too_much(status, &body, "cells");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("150000 values"), "{message}");
    assert!(message.contains("120000"), "{message}");
    assert!(message.contains("metrics="), "{message}");
    // AND asking for a few of its metrics works
    let (status, body) = get(&app, &format!("{all}&metrics=m00001,m29999")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body[0]["m29999.max"], 99.0);
}

#[tokio::test]
async fn a_page_of_rows_counts_the_cells_of_its_one_bucket_however_many_metrics_it_has() {
    // GIVEN a device with 300 metric names in one minute
    let t = TestTable::new("api-budget-rows").await;
    device(&t, "gateway_02").await;
    let r = Reading {
        device_id: dev("gateway_02"),
        timestamp: ts("2026-04-20T14:00:30Z"),
        metrics: (0..300)
            .map(|j| (metric(&format!("m{j:03}")), 1.0))
            .collect(),
        metadata: None,
    };
    put(&t, &ReadingItem::new(&r, None, 30)).await;
    let uri = "/devices/gateway_02/series?from=2026-04-20T14:00:00Z&to=2026-04-20T14:10:00Z\
               &resolution=1m&limit=10";
    // WHEN a page of rows (a bucket is never split: 300 rows × 4 aggregates) is asked for
    // with a cell limit of 1,200 THEN it is answered
    let at = |cells| Limits {
        cells,
        ..Limits::default()
    };
    let (status, body) = get(&app_with(&t, at(1_200)), uri).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["items"].as_array().unwrap().len(), 300);
    // AND one cell fewer is a 400 naming the cell limit
    let (status, body) = get(&app_with(&t, at(1_199)), uri).await;
    assert_too_much(status, &body, "cells");
}

/// A device whose hour 14:00 is open (its rollup a placeholder) and holds `n` readings.
async fn open_hour_table(n: i64) -> TestTable {
    let t = TestTable::new("api-budget-open-hour").await;
    device(&t, "sensor_01").await;
    let rs: Vec<Reading> = (0..n)
        .map(|i| {
            reading(
                "sensor_01",
                ts("2026-04-20T14:00:00Z").plus_millis(i * 1_000).unwrap(),
                &[("temperature", i as f64)],
            )
        })
        .collect();
    let items: Vec<ReadingItem> = rs.iter().map(|r| ReadingItem::new(r, None, 30)).collect();
    put_all(&t, &items).await;
    let mut placeholder = aggregate("sensor_01", Period::Hourly, rs[0].timestamp, &rs[..1]);
    placeholder.open = true;
    put(&t, &placeholder).await;
    t
}

#[tokio::test]
async fn an_open_hours_readings_count_towards_the_budget() {
    // GIVEN an open hour of 600 readings
    let t = open_hour_table(600).await;
    let uris = [
        "/devices/sensor_01/aggregates?period=hourly&from=2026-04-20T14:00:00Z&to=2026-04-20T14:00:00Z",
        "/devices/sensor_01/series?from=2026-04-20T14:00:00Z&to=2026-04-20T15:00:00Z&resolution=1h",
    ];
    for uri in uris {
        // WHEN its rollup is asked for THEN the request reads every reading of the hour
        let (status, body, usage, _) = metered(&app_with(&t, Limits::default()), uri).await;
        assert_eq!(status, 200, "{uri}: {body}");
        assert!(usage.items > 600, "{uri}: {usage:?}");
        // AND with exactly that many items allowed it is answered the same
        let at = |items| Limits {
            items,
            ..Limits::default()
        };
        let (status, again, _, _) = metered(&app_with(&t, at(usage.items)), uri).await;
        assert_eq!((status, &again), (200, &body), "{uri}");
        // AND with one item fewer it is a 400 naming the item limit
        let (status, body, _, _) = metered(&app_with(&t, at(usage.items - 1)), uri).await;
        assert_too_much(status, &body, "items");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("{}", usage.items - 1)),
            "{message}"
        );
        // AND so is one byte of items fewer than it read
        let bytes = Limits {
            read_bytes: usage.read_bytes - 1,
            ..Limits::default()
        };
        let (status, body, _, _) = metered(&app_with(&t, bytes), uri).await;
        assert_too_much(status, &body, "read_bytes");
    }
}

#[tokio::test]
async fn latest_of_many_ids_is_answered_up_to_the_partition_limit() {
    // GIVEN six devices, one of them with two shards since before the retention
    let t = TestTable::new("api-budget-latest").await;
    let ids: Vec<String> = (0..5).map(|i| format!("d{i}")).collect();
    for id in &ids {
        device(&t, id).await;
        put(
            &t,
            &ReadingItem::new(
                &reading(id, ts("2026-04-20T14:00:00Z"), &[("t", 1.0)]),
                None,
                30,
            ),
        )
        .await;
    }
    let history = LayoutHistory::default()
        .with_change(ts("2026-01-01T00:00:00Z"), 2)
        .unwrap();
    put(
        &t,
        &tidemark_schema::LayoutHistoryItem::new(&dev("sharded"), history),
    )
    .await;
    let limits = Limits {
        latest_partitions: 5,
        ..Limits::default()
    };
    let app = app_with(&t, limits);
    // WHEN five single-partition devices are asked for (five partitions: the limit) THEN each one's
    // latest reading is answered
    let (status, body) = get(&app, &format!("/latest?ids={}", ids.join(","))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["items"].as_array().unwrap().len(), 5);
    // WHEN one more partition is asked for THEN it is a 400 naming the partition limit
    let six = format!("/latest?ids={},sharded", ids[..4].join(","));
    let (status, body) = get(&app, &six).await;
    assert_too_much(status, &body, "partitions");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("6 partitions") && message.contains("fewer ids"),
        "{message}"
    );
    // AND the deployed bound is 400 partitions, with at most 100 ids
    assert_eq!(Limits::default().latest_partitions, 400);
    let many: Vec<String> = (0..101).map(|i| format!("d{i}")).collect();
    let (status, body) = get(&app, &format!("/latest?ids={}", many.join(","))).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &Value::from("bad_request"))
    );
}

#[tokio::test]
async fn no_body_passes_the_response_byte_limit() {
    // GIVEN an answer whose body is exactly `n` bytes as Lambda returns it
    let t = TestTable::new("api-budget-bytes").await;
    device(&t, "sensor_01").await;
    let rs: Vec<ReadingItem> = (0..50)
        .map(|i| {
            ReadingItem::new(
                &reading(
                    "sensor_01",
                    ts("2026-04-20T14:00:00Z").plus_millis(i * 60_000).unwrap(),
                    &[("temperature", i as f64), ("humidity", 40.0)],
                ),
                None,
                30,
            )
        })
        .collect();
    put_all(&t, &rs).await;
    let uri =
        "/devices/sensor_01/readings?from=2026-04-20T14:00:00Z&to=2026-04-20T15:00:00Z&limit=50";
    let (status, _, _, text) = metered(&app_with(&t, Limits::default()), uri).await;
    assert_eq!(status, 200);
    let n = escaped_len(&text);
    let at = |response_bytes| Limits {
        response_bytes,
        ..Limits::default()
    };
    // WHEN the limit is `n` THEN it is answered whole
    let (status, _, _, same) = metered(&app_with(&t, at(n)), uri).await;
    assert_eq!((status, same), (200, text));
    // WHEN the limit is one byte less THEN it is a 400 naming the response limit
    let (status, body, _, _) = metered(&app_with(&t, at(n - 1)), uri).await;
    assert_too_much(status, &body, "response_bytes");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("{n} bytes")),
        "{body}"
    );
    // AND the deployed limit leaves room for Lambda's envelope within 6 MB
    assert_eq!(tidemark_api::budget::MAX_RESPONSE_BYTES, 5 * 1024 * 1024);
}
