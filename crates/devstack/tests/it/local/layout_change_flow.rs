//! Packed layouts through the whole local pipeline (Kinesis → ingest → table → API): a device
//! whose slots grow in the middle of a slot (case 2 of the never-stall issue) and a packed
//! device's keep-alives (case 5). Each must be stored and read back, and the shard must move
//! on to the next device's readings.

use std::time::Duration;

use serde_json::{Value, json};
use tidemark_devstack::pipeline::Pipeline;
use tidemark_schema::{
    DeviceId, DeviceItem, DeviceStatus, Layout, LayoutHistory, LayoutHistoryItem, SlotLen,
    Timestamp,
};
use tidemark_testkit::{TestStream, TestTable};

use crate::common;
use crate::common::{encode, get, try_all_items};

/// Puts `records` into the stream in one `PutRecords` call (so ingest gets them in one batch).
async fn put_records(stream: &TestStream, records: &[Value]) {
    assert!(
        records.len() <= 500,
        "one PutRecords call takes 500 records"
    );
    let records: Vec<(String, Vec<u8>)> = records
        .iter()
        .map(|r| {
            let device = r["deviceId"].as_str().unwrap().to_owned();
            (device, serde_json::to_vec(r).unwrap())
        })
        .collect();
    stream.put(&records).await;
}

async fn put_items(table: &TestTable, items: Vec<tidemark_store::Item>) {
    for item in items {
        table
            .client
            .put_item()
            .table_name(&table.name)
            .set_item(Some(item))
            .send()
            .await
            .unwrap();
    }
}

/// A fleet packing in 60 s slots (stored as its default layout long before `since`) and
/// `devices` registered (this pipeline runs no alerts role, which would register them on
/// their first reading; the API answers 404 for an unregistered device).
async fn fleet(table: &TestTable, since: Timestamp, devices: &[&str]) {
    let default = LayoutHistory::default()
        .with_layout(
            since.minus_millis(86_400_000).unwrap(),
            Layout::packed(SlotLen::new(60).unwrap()),
        )
        .unwrap();
    let mut items =
        vec![tidemark_store::to_item(&LayoutHistoryItem::default_layout(default)).unwrap()];
    for d in devices {
        let device = DeviceItem::new(DeviceId::new(d).unwrap(), DeviceStatus::Active, since);
        items.push(tidemark_store::to_item(&device).unwrap());
    }
    put_items(table, items).await;
}

/// The readings the API gives for `device` over the last two hours, once `done` says they
/// are all there (60 s at most).
async fn readings_once(
    pipeline: &Pipeline,
    device: &str,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let now = Timestamp::now();
    let from = encode(&now.minus_millis(7_200_000).unwrap().to_string());
    let to = encode(&now.plus_millis(60_000).unwrap().to_string());
    let path = format!("/devices/{device}/readings?from={from}&to={to}");
    let last = common::LastSeen::default();
    tidemark_testkit::eventually(
        Duration::from_secs(60),
        &format!("{device}: the readings come"),
        || async {
            let items = try_all_items(pipeline.api_addr, &path)
                .await
                .unwrap_or_default();
            last.set(format!("{items:?}"));
            done(&items).then_some(items)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_to_longer_slots_inside_a_slot_stores_both_sides_and_the_shard_moves_on() {
    let table = TestTable::new("longer-slots").await;
    let stream = TestStream::new("longer-slots", 1).await;
    // GIVEN a fleet packing in 60 s slots, and one device changed to 300 s slots 200 s into
    // a 300 s slot (of ten minutes ago), whose start is also a 60 s slot's
    let slot =
        Timestamp::from_epoch_millis((Timestamp::now().epoch_seconds() / 300 * 300 - 600) * 1000)
            .unwrap();
    let at = |s: i64| slot.plus_millis(s * 1000).unwrap();
    fleet(&table, slot, &["grower_01", "newcomer_01"]).await;
    let history = LayoutHistory::default()
        .with_layout(
            slot.minus_millis(86_400_000).unwrap(),
            Layout::packed(SlotLen::new(60).unwrap()),
        )
        .unwrap()
        .with_layout(at(200), Layout::packed(SlotLen::new(300).unwrap()))
        .unwrap();
    let device = DeviceId::new("grower_01").unwrap();
    put_items(
        &table,
        vec![tidemark_store::to_item(&LayoutHistoryItem::new(&device, history)).unwrap()],
    )
    .await;
    let pipeline = Pipeline::start(common::in_process(&table, &stream, 25))
        .await
        .unwrap();

    // WHEN one PutRecords brings a reading from before the change (+37 s) and one from after
    // it (+217 s)
    put_records(
        &stream,
        &[
            json!({"deviceId": "grower_01", "timestamp": at(37).to_string(), "a": 1.5}),
            json!({"deviceId": "grower_01", "timestamp": at(217).to_string(), "b": 2.5}),
        ],
    )
    .await;
    // AND then a new device sends a reading on the same (only) shard
    put_records(
        &stream,
        &[json!({"deviceId": "newcomer_01", "timestamp": at(240).to_string(), "c": 3.5})],
    )
    .await;

    // THEN both readings are stored and the API reads them back
    let got = readings_once(&pipeline, "grower_01", |r| r.len() >= 2).await;
    assert_eq!(
        got,
        [
            json!({"deviceId": "grower_01", "timestamp": at(37).to_string(), "a": 1.5}),
            json!({"deviceId": "grower_01", "timestamp": at(217).to_string(), "b": 2.5}),
        ]
    );
    // AND the shard did not stall: the new device's reading is stored
    let got = readings_once(&pipeline, "newcomer_01", |r| !r.is_empty()).await;
    assert_eq!(got.len(), 1);
    pipeline.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_packed_devices_keep_alives_are_read_back_and_become_its_latest_reading() {
    let table = TestTable::new("packed-alive").await;
    let stream = TestStream::new("packed-alive", 1).await;
    let t0 = Timestamp::from_epoch_millis((Timestamp::now().epoch_seconds() - 600) * 1000).unwrap();
    let at = |s: i64| t0.plus_millis(s * 1000).unwrap();
    fleet(&table, t0, &["alive_01"]).await;
    let pipeline = Pipeline::start(common::in_process(&table, &stream, 25))
        .await
        .unwrap();
    // GIVEN a packed device's reading
    put_records(
        &stream,
        &[json!({"deviceId": "alive_01", "timestamp": at(0).to_string(), "t": 21.5})],
    )
    .await;
    readings_once(&pipeline, "alive_01", |r| r.len() == 1).await;
    // WHEN it sends three readings without metrics after it (keep-alives)
    let alive: Vec<Value> = [20, 40, 70]
        .iter()
        .map(|s| json!({"deviceId": "alive_01", "timestamp": at(*s).to_string()}))
        .collect();
    put_records(&stream, &alive).await;
    // THEN the API returns all four readings, the keep-alives as sent
    let got = readings_once(&pipeline, "alive_01", |r| r.len() == 4).await;
    assert_eq!(got[1..], alive[..]);
    // AND the latest reading is the newest keep-alive, on its route and on the device
    let (status, latest) = get(pipeline.api_addr, "/devices/alive_01/readings/latest").await;
    assert_eq!((status, &latest), (200, &alive[2]));
    let (status, device) = get(pipeline.api_addr, "/devices/alive_01").await;
    assert_eq!(status, 200);
    assert_eq!(
        device["latest"]["timestamp"],
        json!(at(70).to_string()),
        "{device}"
    );
    assert_eq!(device["lastSeenAt"], json!(at(70).to_string()), "{device}");
    pipeline.stop().await;
}
