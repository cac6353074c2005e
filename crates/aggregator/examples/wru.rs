//! Cost benchmark (docs/design.md §8): write request units per stored reading on a simulated fleet,
//! from DynamoDB's own ConsumedCapacity, against DynamoDB Local.
//!
//! The fleet: `DEVICES` devices (default 1,000), one reading a minute each with four metrics,
//! for `MINUTES` minutes (default 30). Readings are stored with BatchWriteItem (what ingest
//! pays), and the stream is cut into batches the way a 300 s batching window cuts it
//! (`WINDOW_SECONDS`), each handed to the aggregator in process.
//!
//! `cargo run -p tidemark-aggregator --example wru` (`DEVICES=200 MINUTES=20` for a quick run).

use std::time::Instant;

use aws_lambda_events::event::dynamodb::{Event, EventRecord, StreamViewType};
use aws_sdk_dynamodb::types::{PutRequest, ReturnConsumedCapacity, WriteRequest};
use tidemark_aggregator::{AggregatorConfig, BothRoles};
use tidemark_schema::{DeviceId, MetricName, Reading, ReadingItem, Timestamp};
use tidemark_testkit::TestTable;

fn env(name: &str, default: i64) -> i64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn record(item: &ReadingItem, seq: u128) -> EventRecord {
    use tidemark_aggregator::testing::{change_record, image};
    let mut r = change_record(seq, None, Some(image(item)));
    r.change.size_bytes = 200;
    r.change.stream_view_type = Some(StreamViewType::NewAndOldImages);
    r.event_id = seq.to_string();
    r.aws_region = "us-east-1".into();
    r
}

#[tokio::main]
async fn main() {
    let devices = env("DEVICES", 1000);
    let minutes = env("MINUTES", 30);
    let window_s = env("WINDOW_SECONDS", 300);
    let mut table = TestTable::new("bench-agg-wru").await;
    // A shared, busy emulator can be slow: patience instead of the Lambda-sized timeouts.
    let mut settings = tidemark_testkit::dynamodb_settings();
    settings.attempt_timeout = std::time::Duration::from_secs(120);
    table.client = tidemark_store::dynamodb_client(&settings).await;
    let agg = BothRoles::new(table.client.clone(), AggregatorConfig::new(&table.name));
    let start = Timestamp::parse_rfc3339("2026-04-20T14:00:00Z").expect("start");
    let names: Vec<MetricName> = ["temperature", "humidity", "pressure", "battery"]
        .iter()
        .map(|n| MetricName::new(n).expect("metric"))
        .collect();

    // One reading a minute per device, each device at its own second within the minute.
    let mut items = Vec::new();
    for m in 0..minutes {
        for d in 0..devices {
            let at = start
                .plus_millis(m * 60_000 + (d * 997 % 60_000))
                .expect("time");
            let v = (d + m) as f64;
            let metrics = names
                .iter()
                .zip([
                    20.0 + (v % 50.0) / 10.0,
                    40.0 + v % 20.0,
                    1013.2,
                    90.0 - (m as f64) / 60.0,
                ])
                .map(|(n, x)| (n.clone(), x))
                .collect();
            let r = Reading {
                device_id: DeviceId::new(&format!("sensor_{d:04}")).expect("id"),
                timestamp: at,
                metrics,
                metadata: None,
            };
            items.push(ReadingItem::new(&r, None, 30));
        }
    }
    items.sort_by(|a, b| a.sk.cmp(&b.sk));
    let n = items.len() as f64;

    // What ingest pays to store them.
    let t0 = Instant::now();
    let mut ingest_units = 0.0;
    let chunks: Vec<_> = items.chunks(25).collect();
    for group in chunks.chunks(2) {
        let calls = group.iter().map(|chunk| {
            let client = table.client.clone();
            let name = table.name.clone();
            async move {
                let mut units = 0.0;
                let mut reqs: Vec<WriteRequest> = chunk
                    .iter()
                    .map(|r| {
                        WriteRequest::builder()
                            .put_request(
                                PutRequest::builder()
                                    .set_item(Some(tidemark_store::to_item(r).expect("item")))
                                    .build()
                                    .expect("put"),
                            )
                            .build()
                    })
                    .collect();
                while !reqs.is_empty() {
                    let out = client
                        .batch_write_item()
                        .request_items(&name, reqs)
                        .return_consumed_capacity(ReturnConsumedCapacity::Indexes)
                        .send()
                        .await
                        .expect("batch write");
                    units += out
                        .consumed_capacity()
                        .iter()
                        .filter_map(|c| c.capacity_units())
                        .sum::<f64>();
                    reqs = out
                        .unprocessed_items
                        .and_then(|mut u| u.remove(&name))
                        .unwrap_or_default();
                }
                units
            }
        });
        ingest_units += futures::future::join_all(calls).await.iter().sum::<f64>();
    }
    let ingest_secs = t0.elapsed().as_secs_f64();

    // The stream, cut by the batching window.
    let mut batches: Vec<Vec<EventRecord>> = Vec::new();
    let mut seq: u128 = 1_000;
    for it in &items {
        let (r, _) = it.to_reading().expect("reading");
        let w = ((r.timestamp.epoch_millis() - start.epoch_millis()) / 1000 / window_s) as usize;
        if batches.len() <= w {
            batches.resize_with(w + 1, Vec::new);
        }
        seq += 3;
        batches[w].push(record(it, seq));
    }
    let mut agg_units = 0.0;
    let mut steady_units = 0.0;
    let mut steady_readings = 0.0;
    let mut written = 0;
    let t0 = Instant::now();
    for (i, b) in batches.into_iter().enumerate() {
        let len = b.len() as f64;
        let mut e = Event::default();
        e.records = b;
        let (resp, report) = agg.process(&e).await;
        assert!(resp.batch_item_failures.is_empty(), "batch {i} failed");
        agg_units += report.write_units;
        written += report.items_written;
        if i > 0 {
            steady_units += report.write_units;
            steady_readings += len;
        }
        eprintln!(
            "batch {i}: {len} records, {} items written, {:.0} WRU",
            report.items_written, report.write_units
        );
    }
    let agg_secs = t0.elapsed().as_secs_f64();

    println!("fleet: {devices} devices x {minutes} min, window {window_s} s: {n} readings");
    println!(
        "ingest:     {:.3} WRU/reading ({ingest_units:.0} WRU, {:.0} readings/s locally)",
        ingest_units / n,
        n / ingest_secs
    );
    println!(
        "aggregator: {:.3} WRU/reading ({agg_units:.0} WRU, {written} item writes, {:.0} records/s locally)",
        agg_units / n,
        n / agg_secs
    );
    if steady_readings > 0.0 {
        println!(
            "aggregator, steady state (after the batch that registers the devices): {:.3} WRU/reading",
            steady_units / steady_readings
        );
    }
    println!(
        "total:      {:.3} WRU per stored reading (target 1.5)",
        (ingest_units + agg_units) / n
    );
}
