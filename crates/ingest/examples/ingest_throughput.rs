//! Records/s of 10,000-record Kinesis batches through the ingest handler into DynamoDB Local.
//! A benchmark, not a test: it prints numbers and asserts only that nothing was lost.
//!
//! `cargo run -p tidemark-ingest --example ingest_throughput [-- <records> <runs> <max_in_flight>]`

use std::time::{Duration, Instant};

use aws_lambda_events::event::kinesis::KinesisEvent;
use base64::Engine;
use serde_json::json;
use tidemark_ingest::{DynamoLookups, Ingest, IngestConfig};
use tidemark_schema::{Clock, Timestamp};
use tidemark_testkit::TestTable;

fn event(n: usize, devices: usize, start: Timestamp) -> KinesisEvent {
    let b64 = base64::engine::general_purpose::STANDARD;
    let records: Vec<_> = (0..n)
        .map(|i| {
            let at = start.plus_millis(i as i64 * 250).unwrap_or(start);
            let data = json!({
                "deviceId": format!("sensor_{:04}", i % devices),
                "timestamp": at.to_string(),
                "temperature": 20.0 + (i % 100) as f64 / 10.0,
                "humidity": 40 + i % 20,
                "pressure": 1013.2,
                "battery": 87,
            })
            .to_string();
            let seq = format!("4959033827149025660855969253836157109592157598{i:010}");
            json!({
                "kinesis": {
                    "partitionKey": format!("sensor_{:04}", i % devices),
                    "sequenceNumber": seq,
                    "data": b64.encode(data),
                    "approximateArrivalTimestamp": start.epoch_millis() as f64 / 1000.0,
                },
                "eventSource": "aws:kinesis",
                "eventName": "aws:kinesis:record",
            })
        })
        .collect();
    serde_json::from_value(json!({ "Records": records })).expect("a Kinesis event")
}

#[tokio::main]
async fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let records = args.first().copied().unwrap_or(10_000);
    let runs = args.get(1).copied().unwrap_or(3);
    let in_flight = args.get(2).copied().unwrap_or(8);

    let table = TestTable::new("ingest-bench").await;
    let mut config = IngestConfig::new(&table.name);
    config.max_in_flight = in_flight;
    let lookups = DynamoLookups::new(table.client.clone(), table.name.clone());
    let start = Timestamp::parse_rfc3339("2026-04-20T12:00:00Z").expect("a timestamp");
    let clock = Clock::fixed(start.plus_millis(3_600_000).expect("in range"));
    let ingest = Ingest::from_parts(
        config,
        table.client.clone(),
        lookups.clone(),
        lookups,
        clock,
    );

    println!("records={records} devices=1000 max_in_flight={in_flight} (DynamoDB Local)");
    for run in 0..runs {
        // Each run writes new items (a fresh hour), like fresh traffic.
        let base = start.plus_millis(run as i64 * 3_600_000).expect("in range");
        ingest
            .clock()
            .set(base.plus_millis(3_600_000).expect("in range"));
        let e = event(records, 1000, base);
        let t0 = Instant::now();
        let (resp, stats) = ingest
            .process(&e, Instant::now() + Duration::from_secs(900))
            .await
            .expect("batch handled");
        let secs = t0.elapsed().as_secs_f64();
        assert!(resp.batch_item_failures.is_empty(), "{stats:?}");
        assert_eq!(stats.written as usize, records);
        println!(
            "run {run}: {records} records in {secs:.2} s = {:.0} records/s ({} calls, {} retries)",
            records as f64 / secs,
            stats.calls,
            stats.retries
        );
    }
}
