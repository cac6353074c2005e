//! What packed slots cost at ingest for every pairing of ingest window and slot length (issue
//! 16; `bench/PACKING.md` has the whole pipeline at the chosen pairings): write units, read
//! units and stored bytes per reading when a device's readings are merged into slot items
//! ([`tidemark_store::write::slots::SlotWriter`]) once per ingest batch, against DynamoDB Local
//! through the metering proxy.
//!
//! ```sh
//! cargo run --release -p tidemark-bench --example slot_cost   # writes bench/SLOTS.md
//! ```
//!
//! Three devices: one at 1 Hz (an hour), one at 1 reading a minute (the standard fleet's, 12
//! hours), one at 2 kHz (10 s, the hot device's rate, one partition key: DynamoDB allows a key
//! 1,000 WCU/s); 4 metrics each. A batch holds what one ingest window
//! collects; each slot it touches is written once. Ingest only: the aggregator's side and
//! the read side come with the feature.

use std::collections::BTreeMap;
use std::time::Duration;

use tidemark_bench::artifacts::{machine, workspace_root};
use tidemark_bench::local_ddb::LocalDynamo;
use tidemark_bench::meter::Meter;
use tidemark_schema::packed::SlotReadings;
use tidemark_schema::{MetricName, SlotLen, TABLE, Timestamp};
use tidemark_store::ClientSettings;
use tidemark_store::retry::RetryPolicy;
use tidemark_store::write::slots::{SlotKey, SlotWriter};

struct Device {
    name: &'static str,
    every_us: i64,
    count: i64,
    /// Ingest windows and slot lengths to try, in seconds.
    windows: &'static [i64],
    slots: &'static [i64],
}

struct Row {
    device: &'static str,
    window_s: i64,
    slot_s: i64,
    readings: usize,
    wru: f64,
    rru: f64,
    bytes: usize,
    /// The most write units the slot's key took in one second.
    peak_per_second: f64,
}

fn series(
    every_us: i64,
    count: i64,
    start: Timestamp,
) -> Vec<(Timestamp, BTreeMap<MetricName, f64>)> {
    let m = |s: &str| MetricName::new(s).expect("a valid name");
    (0..count)
        .map(|i| {
            let t = start.plus_micros(i * every_us).expect("in range");
            let wave = (i as f64 / 30.0).sin();
            (
                t,
                BTreeMap::from([
                    (m("temperature"), ((21.0 + wave) * 10.0).round() / 10.0),
                    (m("humidity"), ((45.0 + 3.0 * wave) * 10.0).round() / 10.0),
                    (m("pressure"), 1013.2),
                    (m("battery"), (100.0 - i as f64 / 1000.0).round()),
                ]),
            )
        })
        .collect()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dynamo = LocalDynamo::start().await.expect("DynamoDB Local starts");
    let meter = Meter::start(dynamo.addr).await.expect("meter");
    let client = tidemark_store::dynamodb_client(&ClientSettings::local(meter.endpoint())).await;
    let direct =
        tidemark_store::dynamodb_client(&ClientSettings::local(format!("http://{}", dynamo.addr)))
            .await;
    let start = Timestamp::parse_rfc3339("2026-04-20T00:00:00Z").expect("a time");
    let windows = &[1, 10, 60, 300];
    let slots = &[60, 600, 3600];
    let devices = [
        Device {
            name: "1 Hz",
            every_us: 1_000_000,
            count: 3600,
            windows,
            slots,
        },
        Device {
            name: "1/min",
            every_us: 60_000_000,
            count: 720,
            windows,
            slots,
        },
        Device {
            name: "2 kHz",
            every_us: 500,
            count: 20_000,
            windows: &[1],
            slots: &[1, 10],
        },
    ];
    let mut rows = Vec::new();
    for d in devices {
        let (device, every, count, windows, slots) =
            (d.name, d.every_us, d.count, d.windows, d.slots);
        let readings = series(every, count, start);
        for &window in windows {
            for &slot in slots {
                let table = format!("slots-{every}-{window}-{slot}");
                tidemark_store::create_table(&direct, &table, &TABLE)
                    .await
                    .expect("table");
                let _ = meter.take().await;
                let (mut wru_total, mut reads_total) = (0.0f64, 0.0f64);
                // One batch per window; within it, one write per slot touched.
                let mut batches: BTreeMap<(i64, i64), SlotReadings> = BTreeMap::new();
                for (t, m) in &readings {
                    let s = (t.epoch_micros() - start.epoch_micros()) / 1_000_000;
                    batches
                        .entry((s / window, s / slot))
                        .or_default()
                        .insert(*t, m.clone());
                }
                // The most units one key took in one second: a batch is one window.
                let mut peak_per_second = 0.0f64;
                let mut spent = 0.0f64;
                let mut second = -1i64;
                for ((window_index, slot_index), batch) in &batches {
                    let slot_start = start
                        .plus_micros(slot_index * slot * 1_000_000)
                        .expect("in range");
                    let key = SlotKey {
                        pk: "DEVICE#d".into(),
                        start: slot_start,
                        len: SlotLen::new(slot).expect("a slot length"),
                    };
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
                    SlotWriter::new(client.clone(), &table, RetryPolicy::default())
                        .write(&key, batch, 0, deadline)
                        .await
                        .expect("slot write");
                    // Spread over the window the batch stands for (a window of 1 s or more).
                    let t = meter.take().await;
                    let units = t.writes().0.total;
                    if *window_index != second {
                        (second, spent) = (*window_index, 0.0);
                    }
                    spent += units / window as f64;
                    peak_per_second = peak_per_second.max(spent);
                    wru_total += units;
                    reads_total += t.reads().0.total;
                }
                let items = direct
                    .scan()
                    .table_name(&table)
                    .send()
                    .await
                    .expect("scan")
                    .items
                    .unwrap_or_default();
                let bytes: usize = items
                    .iter()
                    .filter_map(|i| match i.get(tidemark_schema::field::PACKED) {
                        Some(aws_sdk_dynamodb::types::AttributeValue::B(b)) => {
                            Some(b.as_ref().len())
                        }
                        _ => None,
                    })
                    .sum();
                let n = readings.len();
                rows.push(Row {
                    device,
                    window_s: window,
                    slot_s: slot,
                    readings: n,
                    wru: wru_total / n as f64,
                    rru: reads_total / n as f64,
                    bytes,
                    peak_per_second,
                });
                eprintln!(
                    "slot_cost: {device} window {window} s slot {slot} s: {:.4} WRU/r, peak {peak_per_second:.0} WCU/s",
                    wru_total / n as f64
                );
            }
        }
    }
    dynamo.stop().await;
    let m = machine();
    let mut md = format!(
        "# Packed slots at ingest: cost per window and slot length\n\n\
         Generated by `cargo run --release -p tidemark-bench --example slot_cost`; nothing is \
         edited by hand. Checkout {}{}; DynamoDB Local ({}), units from its `ConsumedCapacity` \
         through the metering proxy.\n\n\
         Each device's readings (4 metrics) are merged into slot items by \
         `tidemark_store::write::slots::write_slot`: per ingest batch (one per window), each slot it \
         touches is read (eventually consistent) and written back whole under an optimistic \
         lock. A write is billed by the item's size, so a slot rewritten often while it grows \
         costs more than its readings' bytes. Ingest only: the aggregator and API sides come \
         with the feature. Today's single items cost 1.000 WRU per reading at ingest.\n\n\
         | device | readings | ingest window | slot | WRU per reading | RRU per reading | packed bytes per reading | peak WCU/s on one key |\n\
         |---|---|---|---|---|---|---|---|\n",
        m.git_commit,
        if m.git_dirty {
            " (uncommitted changes)"
        } else {
            ""
        },
        m.java,
    );
    for r in &rows {
        md.push_str(&format!(
            "| {} | {} | {} s | {} s | {:.4} | {:.4} | {:.2} | {:.1} |\n",
            r.device,
            r.readings,
            r.window_s,
            r.slot_s,
            r.wru,
            r.rru,
            r.bytes as f64 / r.readings as f64,
            r.peak_per_second
        ));
    }
    let out = workspace_root().join("bench").join("SLOTS.md");
    std::fs::write(&out, md).expect("write SLOTS.md");
    eprintln!("slot_cost: wrote {}", out.display());
}
