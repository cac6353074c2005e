//! What DynamoDB Local lets each way of writing readings reach: items per second for the same
//! reading items written five ways, each into an empty table on a DynamoDB Local of its own.
//! It says what bounds ingest's readings/s in `make bench`, apart from Tidemark's code.
//!
//! ```sh
//! cargo run --release -p tidemark-bench --example write_ceiling   # writes bench/CEILING.md
//! ```
//!
//! The ways: a plain `PutItem` one at a time (the textbook design's ingest); a conditional
//! `PutItem` one at a time; conditional `PutItem`s 64 in flight (Tidemark's ingest before
//! batched inserts); `BatchWriteItem`, 25 a call, 4 calls in flight (Tidemark's ingest before
//! readings were merges: it let a same-timestamp record erase another); PartiQL `INSERT`s, 25
//! a `BatchExecuteStatement`, 4 calls in flight (Tidemark's ingest now). Each way writes the
//! same readings (1,000 devices, 4 metrics, as the standard fleet's) in three runs; the median
//! run is reported.

use std::collections::HashMap;
use std::time::Instant;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{PutRequest, WriteRequest};
use futures::StreamExt;
use tidemark_bench::artifacts::{machine, workspace_root};
use tidemark_bench::local_ddb::LocalDynamo;
use tidemark_schema::{DeviceId, MetricName, Reading, TABLE, Timestamp};
use tidemark_store::{ClientSettings, Item};

const READINGS: usize = 2_500;
const RUNS: usize = 5;

#[derive(Clone, Copy, Debug)]
enum Way {
    PutOneAtATime,
    ConditionalPutOneAtATime,
    ConditionalPut64InFlight,
    BatchWrite25x4,
    PartiqlInsert25x4,
}

impl Way {
    fn describe(self) -> &'static str {
        match self {
            Way::PutOneAtATime => "`PutItem`, one at a time (the textbook design's ingest)",
            Way::ConditionalPutOneAtATime => "conditional `PutItem`, one at a time",
            Way::ConditionalPut64InFlight => {
                "conditional `PutItem`, 64 in flight (Tidemark's ingest before batched inserts)"
            }
            Way::BatchWrite25x4 => {
                "`BatchWriteItem`, 25 a call, 4 in flight (no conditions: loses same-timestamp records)"
            }
            Way::PartiqlInsert25x4 => {
                "PartiQL `INSERT`, 25 a `BatchExecuteStatement`, 4 in flight (Tidemark's ingest now)"
            }
        }
    }
}

fn readings() -> Vec<Item> {
    let start = Timestamp::parse_rfc3339("2026-04-20T14:00:00Z").expect("a valid time");
    (0..READINGS)
        .map(|i| {
            let r = Reading {
                device_id: DeviceId::new(&format!("dev-{:04}", i % 1000)).expect("a valid id"),
                timestamp: start
                    .plus_millis((i / 1000) as i64 * 60_000)
                    .expect("in range"),
                metrics: [
                    ("temperature", 21.5 + (i % 7) as f64 / 10.0),
                    ("humidity", 40.1),
                    ("pressure", 1013.2),
                    ("battery", 99.1),
                ]
                .into_iter()
                .map(|(k, v)| (MetricName::new(k).expect("a valid name"), v))
                .collect(),
                metadata: None,
            };
            let arrived = r.timestamp;
            tidemark_ingest::reading_item(&r, None, 30, arrived).expect("an item")
        })
        .collect()
}

async fn put(c: &Client, table: &str, item: Item, conditional: bool) {
    let mut req = c.put_item().table_name(table).set_item(Some(item));
    if conditional {
        req = req
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", "pk");
    }
    req.send().await.expect("PutItem");
}

async fn write(c: &Client, table: &str, way: Way, items: Vec<Item>) {
    match way {
        Way::PutOneAtATime | Way::ConditionalPutOneAtATime => {
            for i in items {
                put(c, table, i, matches!(way, Way::ConditionalPutOneAtATime)).await;
            }
        }
        Way::ConditionalPut64InFlight => {
            futures::stream::iter(items)
                .map(|i| put(c, table, i, true))
                .buffer_unordered(64)
                .collect::<Vec<_>>()
                .await;
        }
        Way::BatchWrite25x4 => {
            let chunks: Vec<Vec<Item>> = items.chunks(25).map(<[Item]>::to_vec).collect();
            futures::stream::iter(chunks)
                .map(|chunk| async move {
                    let reqs: Vec<WriteRequest> = chunk
                        .into_iter()
                        .map(|i| {
                            let put = PutRequest::builder().set_item(Some(i)).build();
                            WriteRequest::builder()
                                .put_request(put.expect("a put request"))
                                .build()
                        })
                        .collect();
                    let out = c
                        .batch_write_item()
                        .request_items(table, reqs)
                        .send()
                        .await
                        .expect("BatchWriteItem");
                    assert!(
                        out.unprocessed_items().is_none_or(HashMap::is_empty),
                        "DynamoDB Local leaves nothing unprocessed"
                    );
                })
                .buffer_unordered(4)
                .collect::<Vec<_>>()
                .await;
        }
        Way::PartiqlInsert25x4 => {
            let chunks: Vec<Vec<Item>> = items.chunks(25).map(<[Item]>::to_vec).collect();
            futures::stream::iter(chunks)
                .map(|chunk| async move {
                    let answers = tidemark_store::write::insert::insert_batch(c, table, chunk)
                        .await
                        .expect("BatchExecuteStatement");
                    assert!(
                        answers
                            .iter()
                            .all(|a| *a == tidemark_store::write::insert::Inserted::Yes),
                        "{answers:?}"
                    );
                })
                .buffer_unordered(4)
                .collect::<Vec<_>>()
                .await;
        }
    }
}

/// CPU time of this process so far (every thread's, from `/proc/self/task/*/schedstat`), in
/// nanoseconds: the client's side of the writes; DynamoDB Local is another process.
fn process_cpu_ns() -> u64 {
    std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let out_dir = std::env::args()
        .skip_while(|a| a != "--out")
        .nth(1)
        .map_or_else(|| workspace_root().join("bench"), Into::into);
    let items = readings();
    let ways = [
        Way::PutOneAtATime,
        Way::ConditionalPutOneAtATime,
        Way::ConditionalPut64InFlight,
        Way::BatchWrite25x4,
        Way::PartiqlInsert25x4,
    ];
    let mut rows = Vec::new();
    for way in ways {
        let (mut rates, mut cpu) = (Vec::new(), Vec::new());
        for _ in 0..RUNS {
            // A fresh DynamoDB Local each run: one that has taken many writes to tables with
            // streams slows down, table after table, and would be measured instead of the way.
            let dynamo = LocalDynamo::start().await.expect("DynamoDB Local starts");
            let endpoint = format!("http://{}", dynamo.addr);
            let client = tidemark_store::dynamodb_client(&ClientSettings::local(&endpoint)).await;
            let table = "ceiling";
            tidemark_store::create_table(&client, table, &TABLE)
                .await
                .expect("table");
            let (began, cpu_before) = (Instant::now(), process_cpu_ns());
            write(&client, table, way, items.clone()).await;
            rates.push(READINGS as f64 / began.elapsed().as_secs_f64());
            cpu.push((process_cpu_ns() - cpu_before) as f64 / 1e3 / READINGS as f64);
            let stored = client
                .scan()
                .table_name(table)
                .select(aws_sdk_dynamodb::types::Select::Count)
                .send()
                .await
                .expect("Scan")
                .count();
            assert_eq!(stored as usize, READINGS, "{way:?} stored every reading");
            dynamo.stop().await;
        }
        rates.sort_by(f64::total_cmp);
        cpu.sort_by(f64::total_cmp);
        eprintln!("write_ceiling: {way:?}: {rates:?} items/s, {cpu:?} µs CPU/item");
        rows.push((way, rates[RUNS / 2], rates, cpu[RUNS / 2]));
    }
    let base = rows[0].1;
    let m = machine();
    let mut md = format!(
        "# What DynamoDB Local lets each way of writing readings reach\n\n\
         Generated by `cargo run --release -p tidemark-bench --example write_ceiling` (part of \
         `make bench`); nothing is edited by hand.\n\n\
         - **Machine:** {} — {} cores, {:.1} GB RAM; DynamoDB Local ({}) on the same cores\n\
         - **Checkout:** {}{}\n\
         - **What:** {READINGS} reading items (1,000 devices, 4 metrics, the standard fleet's \
         shape) written into an empty Tidemark table (streams on, as deployed); each way {RUNS} \
         times, each run on a freshly started DynamoDB Local (cold: no JIT warm-up); items per \
         second of the median run, every item checked stored.\n\n\
         | way | items/s (median) | runs | × one plain `PutItem` at a time | client CPU per item (median) |\n|---|---|---|---|---|\n",
        m.cpu,
        m.cores,
        m.memory_gb,
        m.java,
        m.git_commit,
        if m.git_dirty {
            " (uncommitted changes)"
        } else {
            ""
        },
    );
    for (way, median, rates, cpu) in &rows {
        let runs: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
        md.push_str(&format!(
            "| {} | {median:.0} | {} | {:.2}× | {cpu:.1} µs |\n",
            way.describe(),
            runs.join(", "),
            median / base
        ));
    }
    md.push_str(
        "\n*Client CPU per item* is this process's CPU time (all threads, from \
         `/proc/self/task/*/schedstat`) over the run, divided by the items: building, signing, \
         sending and parsing the requests, which is what a Lambda function pays for; DynamoDB \
         Local runs in another process.\n\n\
         DynamoDB Local is one JVM with streams on, and its own cost per item, not the number \
         of requests, sets these rates. On DynamoDB the service scales out, a client's rate is \
         set by round trips, and 25 inserts a call need 1/25 of the requests of one-at-a-time \
         puts.\n",
    );
    std::fs::create_dir_all(&out_dir).expect("out dir");
    let path = out_dir.join("CEILING.md");
    std::fs::write(&path, md).expect("write CEILING.md");
    eprintln!("write_ceiling: wrote {}", path.display());
}
