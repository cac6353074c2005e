//! The worst cases of "every invocation's work is bounded": how long one aggregator invocation
//! takes on them, against the function's timeout in `template.yaml` (120 s, of which the
//! aggregator keeps 3 s back to report what it has not finished). A stream mapping retries a
//! failed batch for ever, so an invocation that cannot finish in time would stall its shard.
//!
//! ```sh
//! cargo run --release -p tidemark-bench --example worst_case   # writes bench/WORST_CASE.md
//! cargo run -p tidemark-bench --example worst_case -- --days 2 --hz2k-seconds 60 --out /tmp
//! ```
//!
//! On a DynamoDB Local of its own (in memory), the alerts role (one device, 30 days of 1 Hz
//! history packed in 60 s slots, 2,592,000 readings):
//! - a threshold changed (the limit lowered below the newest value);
//! - a breach from 29 days ago arriving late (a slot part's MODIFY adding it);
//! - a late breach from 29 days ago and a new breach in one batch.
//!
//! And the rollups role on a 2 kHz device packed in 1 s slots (`--hz2k-seconds` of them,
//! default 600: 1.2 million readings): its maximum reading corrected down, which recomputes
//! its hour's extremes from the hour's stored readings and its day's from the hourly items.
//! The report gives the readings per second that reached and what a whole 2 kHz hour would
//! take at that rate, against the timeout. Times are this machine's, not Lambda's.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use serde::Serialize;
use tidemark_aggregator::config::parse_thresholds;
use tidemark_aggregator::testing::image;
use tidemark_aggregator::{Aggregator, AggregatorConfig, Role};
use tidemark_bench::local_ddb::LocalDynamo;
use tidemark_schema::layout::{Layout, SlotLen};
use tidemark_schema::packed::{self, SlotReadings};
use tidemark_schema::{
    DeviceId, DeviceItem, DeviceStatus, EntityKey, LayoutHistory, LayoutHistoryItem, MetricName,
    SlotItem, Timestamp,
};
use tidemark_store::ClientSettings;
use tidemark_store::retry::RetryPolicy;
use tidemark_store::write::batch::{BatchWriter, PendingWrite};
use tidemark_testkit::workspace_root;

/// The aggregator's `Timeout` in template.yaml.
const TIMEOUT: Duration = Duration::from_secs(120);
const TABLE: &str = "tidemark-worst";

fn arg(name: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != name).nth(1)
}

fn metric() -> MetricName {
    MetricName::new("t").unwrap()
}

/// A slot part of `device` starting at `start`, holding `readings`.
fn part(device: &DeviceId, start: Timestamp, readings: &SlotReadings, version: u64) -> SlotItem {
    let k = EntityKey::Slot {
        device: device.clone(),
        partition: None,
        start,
        part: 0,
    }
    .key();
    SlotItem {
        pk: k.pk,
        sk: k.sk,
        packed: packed::encode(start, readings).expect("encodes"),
        reading_count: readings.len() as u64,
        version,
        ttl: 0,
        sealed: false,
        full: false,
        metadata: Default::default(),
        arrived_at: None,
    }
}

/// A stream record of `name` for the item, as DynamoDB Streams delivers it.
fn record<T: Serialize>(seq: u64, name: &str, old: &T, new: &T) -> EventRecord {
    let mut r =
        tidemark_aggregator::testing::change_record(seq.into(), Some(image(old)), Some(image(new)));
    r.event_name = name.into();
    r
}

fn event(records: Vec<EventRecord>) -> Event {
    let mut e = Event::default();
    e.records = records;
    e
}

async fn put_all(client: &aws_sdk_dynamodb::Client, items: Vec<tidemark_store::Item>) {
    let writer = BatchWriter::new(client.clone(), TABLE, 8, RetryPolicy::default());
    let writes = items
        .into_iter()
        .enumerate()
        .map(|(i, item)| PendingWrite::put(i, item))
        .collect();
    let r = writer
        .write_all(
            writes,
            tokio::time::Instant::now() + Duration::from_secs(3600),
        )
        .await;
    assert!(
        r.failed_tags.is_empty(),
        "every item written: {:?}",
        r.last_error
    );
}

struct Row {
    case: String,
    readings: String,
    seconds: f64,
    outcome: String,
}

/// Runs one invocation under the template's deadline and times it.
async fn invoke(agg: &Aggregator, e: Event) -> (Duration, String) {
    let started = Instant::now();
    let (resp, report) = agg.process_until(&e, started + TIMEOUT).await;
    let took = started.elapsed();
    let outcome = if resp.batch_item_failures.is_empty() {
        format!(
            "done: {} opened, {} resolved, {} derivations",
            report.alerts_opened, report.alerts_resolved, report.alert_derivations
        )
    } else {
        format!("not finished ({} out of time)", report.out_of_time)
    };
    (took, outcome)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let days: i64 = arg("--days").and_then(|n| n.parse().ok()).unwrap_or(30);
    let hz2k_seconds: i64 = arg("--hz2k-seconds")
        .and_then(|n| n.parse().ok())
        .unwrap_or(600);
    let out_dir = arg("--out").map_or_else(|| workspace_root().join("bench"), Into::into);
    let dynamo = LocalDynamo::start().await.expect("DynamoDB Local starts");
    let client =
        tidemark_store::dynamodb_client(&ClientSettings::local(format!("http://{}", dynamo.addr)))
            .await;
    tidemark_store::create_table(&client, TABLE, &tidemark_schema::TABLE)
        .await
        .expect("table");
    let mut rows = Vec::new();

    // --- The alerts role: 30 days of 1 Hz, packed in 60 s slots.
    let d = DeviceId::new("history").unwrap();
    let slot = SlotLen::new(60).unwrap();
    let now = Timestamp::parse_rfc3339("2026-04-30T00:00:00Z").unwrap();
    let first = now.minus_micros(days * 86_400_000_000).unwrap();
    let history = LayoutHistory::default()
        .with_layout(Timestamp::MIN, Layout::packed(slot))
        .expect("a layout");
    put_all(
        &client,
        vec![tidemark_store::to_item(&LayoutHistoryItem::new(&d, history)).unwrap()],
    )
    .await;
    let value = |s: i64| 20.0 + (s % 7) as f64 * 0.5; // 20..23, always under 30
    let slot_of = |start: Timestamp| -> SlotReadings {
        (0..60)
            .map(|s| {
                let at = start.plus_millis(s * 1000).unwrap();
                let n = (at.epoch_micros() - first.epoch_micros()) / 1_000_000;
                (at, BTreeMap::from([(metric(), value(n))]))
            })
            .collect()
    };
    let started = Instant::now();
    let mut items = Vec::new();
    let mut start = first;
    while start < now {
        items.push(tidemark_store::to_item(&part(&d, start, &slot_of(start), 1)).unwrap());
        start = start.plus_millis(60_000).unwrap();
    }
    let parts = items.len();
    put_all(&client, items).await;
    eprintln!(
        "worst_case: {parts} slot parts ({} readings) written in {:.0} s",
        parts * 60,
        started.elapsed().as_secs_f64()
    );
    let mut dev = DeviceItem::new(d.clone(), DeviceStatus::Active, first);
    dev.thresholds = parse_thresholds(r#"{"t":{"max":30,"severity":"critical"}}"#).unwrap();
    put_all(&client, vec![tidemark_store::to_item(&dev).unwrap()]).await;
    let alerts = Aggregator::new(
        client.clone(),
        AggregatorConfig::new(TABLE).with_role(Role::Alerts),
    );
    // The device's state as of its newest reading: a breach in its last minute, resolved by
    // the readings after it, so the device item holds the rule's state.
    let last = now.minus_micros(60_000_000).unwrap();
    let quiet = slot_of(last);
    let mut newest = quiet.clone();
    newest.insert(
        last.plus_millis(10_500).unwrap(),
        BTreeMap::from([(metric(), 44.0)]),
    );
    newest.insert(
        last.plus_millis(59_999).unwrap(),
        BTreeMap::from([(metric(), 22.0)]),
    );
    let p0 = part(&d, last, &quiet, 1);
    let p = part(&d, last, &newest, 2);
    put_all(&client, vec![tidemark_store::to_item(&p).unwrap()]).await;
    let (took, outcome) = invoke(&alerts, event(vec![record(1, "MODIFY", &p0, &p)])).await;
    eprintln!(
        "worst_case: warm-up batch {:.2} s: {outcome}",
        took.as_secs_f64()
    );

    // 1. The threshold lowered below the newest value.
    let before = tidemark_aggregator::dynamo::DynamoStore::new(client.clone(), TABLE);
    let stored: DeviceItem = before
        .client()
        .get_item()
        .table_name(TABLE)
        .set_key(Some(tidemark_store::batch_get::key_item(
            &EntityKey::Device(d.clone()).key(),
        )))
        .consistent_read(true)
        .send()
        .await
        .ok()
        .and_then(|o| o.item)
        .and_then(|i| tidemark_store::from_stored(i).ok())
        .unwrap_or(dev.clone());
    let mut lowered = stored.clone();
    lowered.thresholds = parse_thresholds(r#"{"t":{"max":21,"severity":"critical"}}"#).unwrap();
    put_all(&client, vec![tidemark_store::to_item(&lowered).unwrap()]).await;
    let (took, outcome) =
        invoke(&alerts, event(vec![record(2, "MODIFY", &stored, &lowered)])).await;
    rows.push(Row {
        case: format!("threshold lowered on {days} days of 1 Hz (packed 60 s)"),
        readings: format!("{}", parts * 60),
        seconds: took.as_secs_f64(),
        outcome,
    });
    // Back to 30 for the late-data cases.
    put_all(&client, vec![tidemark_store::to_item(&stored).unwrap()]).await;

    // 2. A breach from 29 days ago arrives late: its slot part gains a reading.
    let late_start = first.plus_millis(86_400_000).unwrap();
    let old = part(&d, late_start, &slot_of(late_start), 1);
    let mut with_breach = slot_of(late_start);
    let late_at = late_start.plus_millis(30_500).unwrap();
    with_breach.insert(late_at, BTreeMap::from([(metric(), 45.0)]));
    let new = part(&d, late_start, &with_breach, 2);
    put_all(&client, vec![tidemark_store::to_item(&new).unwrap()]).await;
    let (took, outcome) = invoke(&alerts, event(vec![record(3, "MODIFY", &old, &new)])).await;
    rows.push(Row {
        case: format!("a breach from {} days ago arrives late", days - 1),
        readings: format!("{}", parts * 60 + 1),
        seconds: took.as_secs_f64(),
        outcome,
    });

    // 3. Another late breach and a new breach, in one batch.
    let old2 = new.clone();
    let mut two = with_breach.clone();
    two.insert(
        late_start.plus_millis(40_500).unwrap(),
        BTreeMap::from([(metric(), 46.0)]),
    );
    let new2 = part(&d, late_start, &two, 3);
    let mut fresh = newest.clone();
    let new_at = last.plus_millis(59_999).unwrap();
    fresh.insert(new_at, BTreeMap::from([(metric(), 47.0)]));
    let p_old = part(&d, last, &newest, 2);
    let p_new = part(&d, last, &fresh, 3);
    put_all(
        &client,
        vec![
            tidemark_store::to_item(&new2).unwrap(),
            tidemark_store::to_item(&p_new).unwrap(),
        ],
    )
    .await;
    let (took, outcome) = invoke(
        &alerts,
        event(vec![
            record(4, "MODIFY", &old2, &new2),
            record(5, "MODIFY", &p_old, &p_new),
        ]),
    )
    .await;
    rows.push(Row {
        case: format!(
            "a late breach ({} days back) and a new breach in one batch",
            days - 1
        ),
        readings: format!("{}", parts * 60 + 3),
        seconds: took.as_secs_f64(),
        outcome,
    });

    // --- The rollups role: a 2 kHz device's maximum corrected down.
    let hot = DeviceId::new("hot2k").unwrap();
    let one_s = SlotLen::new(1).unwrap();
    put_all(
        &client,
        vec![
            tidemark_store::to_item(&LayoutHistoryItem::new(
                &hot,
                LayoutHistory::default()
                    .with_layout(Timestamp::MIN, Layout::packed(one_s))
                    .expect("a layout"),
            ))
            .unwrap(),
        ],
    )
    .await;
    let hour = Timestamp::parse_rfc3339("2026-04-29T10:00:00Z").unwrap();
    // Second `s` of the hour: 2,000 readings, and in the middle second a spike of 5,000
    // (or the value it is corrected to).
    let spike_second = hz2k_seconds / 2;
    let second = |s: i64, spike: f64| -> (Timestamp, SlotReadings) {
        let start = hour.plus_millis(s * 1000).unwrap();
        let mut r: SlotReadings = (0..2000i64)
            .map(|i| {
                let at = Timestamp::from_epoch_micros(start.epoch_micros() + i * 500).unwrap();
                (
                    at,
                    BTreeMap::from([(metric(), ((s * 2000 + i) % 1000) as f64)]),
                )
            })
            .collect();
        if s == spike_second {
            r.insert(
                start.plus_millis(1).unwrap(),
                BTreeMap::from([(metric(), spike)]),
            );
        }
        (start, r)
    };
    let started = Instant::now();
    let mut items = Vec::with_capacity(hz2k_seconds as usize);
    for s in 0..hz2k_seconds {
        let (start, r) = second(s, 5_000.0);
        items.push(tidemark_store::to_item(&part(&hot, start, &r, 1)).unwrap());
    }
    put_all(&client, items).await;
    let readings_2k = hz2k_seconds * 2000 + 1;
    eprintln!(
        "worst_case: {readings_2k} readings at 2 kHz written in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    let rollups = Aggregator::new(client.clone(), AggregatorConfig::new(TABLE));
    // Every part's INSERT, as the stream delivers them, builds the rollups first.
    let mut seq = 100u64;
    let mut records = Vec::new();
    for s in 0..hz2k_seconds {
        let (start, r) = second(s, 5_000.0);
        let p = part(&hot, start, &r, 1);
        seq += 1;
        let mut rec = record(seq, "INSERT", &p, &p);
        rec.change.old_image = Default::default();
        records.push(rec);
        if records.len() == 100 {
            rollups.process(&event(std::mem::take(&mut records))).await;
        }
    }
    rollups.process(&event(records)).await;
    // The spike corrected: its part's MODIFY.
    let (start, spiked) = second(spike_second, 5_000.0);
    let (_, fixed) = second(spike_second, 1.0);
    let old = part(&hot, start, &spiked, 1);
    let new = part(&hot, start, &fixed, 2);
    put_all(&client, vec![tidemark_store::to_item(&new).unwrap()]).await;
    let (took, outcome) =
        invoke(&rollups, event(vec![record(seq + 1, "MODIFY", &old, &new)])).await;
    let rate = readings_2k as f64 / took.as_secs_f64().max(1e-9);
    rows.push(Row {
        case: format!("2 kHz spike corrected, {hz2k_seconds} s of readings in its hour"),
        readings: format!("{readings_2k}"),
        seconds: took.as_secs_f64(),
        outcome: outcome.replace("0 opened, 0 resolved, 0 derivations", "rollups exact"),
    });
    dynamo.stop().await;

    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Worst cases of bounded work\n\nGenerated by `cargo run{} -p tidemark-bench --example \
         worst_case -- --days {days} --hz2k-seconds {hz2k_seconds}` ({} build) on DynamoDB Local \
         (in memory, its own instance), {}. Each row is one aggregator invocation, timed here, \
         against the function's timeout of {} s in `template.yaml` (the aggregator stops 3 s \
         before it and reports what it has not finished). Target: every row well under the \
         timeout.\n",
        if cfg!(debug_assertions) {
            ""
        } else {
            " --release"
        },
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        Timestamp::now(),
        TIMEOUT.as_secs()
    );
    let _ = writeln!(
        md,
        "| case | readings stored | one invocation (s) | outcome |"
    );
    let _ = writeln!(md, "|---|---:|---:|---|");
    for r in &rows {
        let _ = writeln!(
            md,
            "| {} | {} | {:.2} | {} |",
            r.case, r.readings, r.seconds, r.outcome
        );
    }
    let _ = writeln!(
        md,
        "\nThe 2 kHz correction read its hour's stored readings to recompute the hour's \
         extremes, at about {:.0} readings/s here (the whole invocation over the readings \
         stored): a whole hour of 2 kHz (7.2 million readings) would take about {:.0} s. The \
         day's extremes come from its 24 hourly items and its first and last reading; read \
         from the day's readings (172.8 million), as before, they would take about {:.0} s at \
         that rate, past the timeout.",
        rate,
        7_200_000.0 / rate,
        172_800_000.0 / rate
    );
    let path = out_dir.join("WORST_CASE.md");
    std::fs::write(&path, &md).expect("report written");
    print!("{md}");
    eprintln!("worst_case: wrote {}", path.display());
}
