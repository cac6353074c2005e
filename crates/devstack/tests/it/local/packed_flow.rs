//! A device whose layout changes from single items to packed slots and back while its readings
//! flow through the whole pipeline (Kinesis → ingest → table → stream → aggregator → API),
//! sent as fleets send them: in several batches, out of order, with a resend, a correction
//! and one reading split over two records.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use tidemark_devstack::pipeline::Pipeline;
use tidemark_schema::{
    DeviceId, DeviceItem, DeviceStatus, Layout, LayoutHistory, LayoutHistoryItem, SlotLen,
    Timestamp,
};
use tidemark_testkit::{TestStream, TestTable, eventually};

use crate::common;
use crate::common::{LastSeen, encode, try_all_items};

async fn send(stream: &TestStream, records: &[Value]) {
    for r in records {
        stream
            .client
            .put_record()
            .stream_name(&stream.name)
            .partition_key(r["deviceId"].as_str().unwrap())
            .data(aws_sdk_kinesis::primitives::Blob::new(
                serde_json::to_vec(r).unwrap(),
            ))
            .send()
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_moving_single_packed_single_reads_every_reading_once_and_rolls_up_exactly() {
    let table = TestTable::new("packed-flow").await;
    let stream = TestStream::new("packed-flow", 1).await;
    // GIVEN a device stored singly until t0 + 20 min, packed in 60 s slots until t0 + 40 min,
    // singly again after (its history written before any reading arrives)
    let t0 = Timestamp::from_epoch_millis(
        Timestamp::now()
            .minus_millis(50 * 60_000)
            .unwrap()
            .epoch_seconds()
            * 1000,
    )
    .unwrap();
    let at = |min: i64, sec: i64| t0.plus_millis(min * 60_000 + sec * 1000).unwrap();
    let history = LayoutHistory::default()
        .with_layout(at(20, 0), Layout::packed(SlotLen::new(60).unwrap()))
        .unwrap()
        .with_layout(at(40, 0), Layout::SINGLE)
        .unwrap();
    let device = DeviceId::new("mover_01").unwrap();
    // Registered (this pipeline runs no alerts role, which would register it on its first
    // reading; the API answers 404 for an unregistered device).
    let registered = DeviceItem::new(device.clone(), DeviceStatus::Active, t0);
    for item in [
        tidemark_store::to_item(&LayoutHistoryItem::new(&device, history)).unwrap(),
        tidemark_store::to_item(&registered).unwrap(),
    ] {
        table
            .client
            .put_item()
            .table_name(&table.name)
            .set_item(Some(item))
            .send()
            .await
            .unwrap();
    }
    let pipeline = Pipeline::start(common::in_process(&table, &stream, 25))
        .await
        .unwrap();

    // WHEN a reading every 20 s over 50 minutes arrives in reverse batches of ten minutes,
    // each batch shuffled, the packed stretch's first batch sent twice,
    let mut want: BTreeMap<Timestamp, f64> = BTreeMap::new();
    let record =
        |t: Timestamp, v: f64| json!({"deviceId": "mover_01", "timestamp": t.to_string(), "v": v});
    for block in (0..5).rev() {
        let mut batch: Vec<Value> = Vec::new();
        for i in 0..30 {
            let t = at(block * 10, i * 20);
            let v = (block * 30 + i) as f64 * 0.5;
            want.insert(t, v);
            batch.push(record(t, v));
        }
        batch.reverse();
        batch.rotate_left(7);
        send(&stream, &batch).await;
        if block == 2 {
            send(&stream, &batch).await;
        }
    }
    // a correction of one packed reading and of one single one,
    let fix_packed = at(25, 0);
    let fix_single = at(45, 0);
    send(
        &stream,
        &[record(fix_packed, -1.0), record(fix_single, -2.0)],
    )
    .await;
    want.insert(fix_packed, -1.0);
    want.insert(fix_single, -2.0);
    // and a packed reading whose second metric comes in its own record
    let split = at(30, 20);
    send(
        &stream,
        &[json!({"deviceId": "mover_01", "timestamp": split.to_string(), "w": 7.0})],
    )
    .await;

    // THEN every reading is read back once, in order, with its last value, in pages of 7,
    // forward and backward, across both layout changes
    let from = encode(&t0.minus_millis(1).unwrap().to_string());
    let to = encode(&at(60, 0).to_string());
    let path = |order: &str| {
        format!("/devices/mover_01/readings?from={from}&to={to}&limit=7&order={order}")
    };
    let last = LastSeen::default();
    let readings = eventually(
        Duration::from_secs(60),
        "every reading read back, with its last value",
        || async {
            let readings = try_all_items(pipeline.api_addr, &path("asc"))
                .await
                .unwrap_or_default();
            let done = readings.len() == want.len()
                && readings.iter().any(|r| r["v"].as_f64() == Some(-1.0))
                && readings.iter().any(|r| r["w"].as_f64() == Some(7.0));
            last.set(format!("{readings:?}"));
            done.then_some(readings)
        },
    )
    .await;
    let got: Vec<(String, f64)> = readings
        .iter()
        .map(|r| {
            (
                r["timestamp"].as_str().unwrap().to_owned(),
                r["v"].as_f64().unwrap(),
            )
        })
        .collect();
    let expected: Vec<(String, f64)> = want.iter().map(|(t, v)| (t.to_string(), *v)).collect();
    assert_eq!(got, expected);
    let split_reading = readings
        .iter()
        .find(|r| r["timestamp"] == json!(split.to_string()))
        .unwrap();
    // Integral values print as integers (`7`), as for every reading.
    assert_eq!(split_reading["w"], json!(7));
    let mut backwards = try_all_items(pipeline.api_addr, &path("desc"))
        .await
        .unwrap();
    backwards.reverse();
    assert_eq!(backwards, readings);

    // AND the hourly rollups count each reading once, with the corrected values
    let agg_path = format!("/devices/mover_01/aggregates?period=hourly&from={from}&to={to}");
    let mut by_hour: BTreeMap<Timestamp, (u64, f64)> = BTreeMap::new();
    for (t, v) in &want {
        let e = by_hour.entry(t.hour_start()).or_default();
        e.0 += 1;
        e.1 += v;
    }
    eventually(
        Duration::from_secs(60),
        "the hourly rollups count each reading once",
        || async {
            let items = try_all_items(pipeline.api_addr, &agg_path)
                .await
                .unwrap_or_default();
            let got: BTreeMap<Timestamp, (u64, f64)> = items
                .iter()
                .map(|a| {
                    (
                        Timestamp::parse_rfc3339(a["start"].as_str().unwrap()).unwrap(),
                        (
                            a["metrics"]["v"]["count"].as_u64().unwrap_or(0),
                            a["metrics"]["v"]["sum"].as_f64().unwrap_or(0.0),
                        ),
                    )
                })
                .collect();
            last.set(format!("want {by_hour:?}; got {items:?}"));
            (got.len() == by_hour.len()
                && got
                    .iter()
                    .zip(&by_hour)
                    .all(|((h1, (c1, s1)), (h2, (c2, s2)))| {
                        h1 == h2 && c1 == c2 && (s1 - s2).abs() < 1e-9
                    }))
            .then_some(())
        },
    )
    .await;
    pipeline.stop().await;
}
