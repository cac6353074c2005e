//! A hot device's partition count changed twice while its readings flow through ingest, with the
//! API scheduling the changes and serving the reads, all on DynamoDB Local (docs/design.md §4).
//!
//! Time is simulated: each ingest "container" and the API run on a clock the test moves, so
//! the cache ages, the change lead time and the reading bounds are exact.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use aws_lambda_events::event::kinesis::KinesisEvent;
use base64::Engine;
use lambda_http::{Body, Request};
use serde_json::{Value, json};
use tidemark_api::{ApiConfig, App};
use tidemark_ingest::{DynamoLookups, Ingest, IngestConfig};
use tidemark_schema::{Clock, DeviceId, LayoutHistory, MetricName, ReadingItem, Timestamp, keys};
use tidemark_testkit::TestTable;

type Container = Ingest<aws_sdk_dynamodb::Client, DynamoLookups, DynamoLookups>;

fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

fn at(t: Timestamp, ms: i64) -> Timestamp {
    t.plus_millis(ms).unwrap()
}

const SECOND: i64 = 1000;
const MINUTE: i64 = 60 * SECOND;

/// One ingest container: its own layout cache and clock (defaults: 30 s cache, 300 s future).
fn container(t: &TestTable, now: Timestamp) -> Container {
    let mut c = IngestConfig::new(&t.name);
    c.deadline_margin = Duration::ZERO;
    let lookups = DynamoLookups::new(t.client.clone(), t.name.clone());
    Ingest::from_parts(
        c,
        t.client.clone(),
        lookups.clone(),
        lookups,
        Clock::fixed(now),
    )
}

fn api(t: &TestTable, now: Timestamp) -> App {
    App::new(t.client.clone(), ApiConfig::new(&t.name).with_now(now))
}

async fn call(app: &App, method: &str, uri: &str, body: &str) -> (u16, Value) {
    let req: Request = http::Request::builder()
        .method(method)
        .uri(uri)
        .body(if body.is_empty() {
            Body::Empty
        } else {
            Body::Text(body.to_owned())
        })
        .unwrap();
    let resp = app.handle(req).await;
    let v = serde_json::from_slice(resp.body().as_ref()).unwrap();
    (resp.status().as_u16(), v)
}

/// Every page of a list, following cursors.
async fn walk(app: &App, uri: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut next = uri.to_owned();
    loop {
        let (status, body) = call(app, "GET", &next, "").await;
        assert_eq!(status, 200, "{next}: {body}");
        out.extend(body["items"].as_array().unwrap().iter().cloned());
        match body["cursor"].as_str() {
            Some(c) => next = format!("{uri}&cursor={c}"),
            None => return out,
        }
    }
}

/// A Kinesis batch: one record per group of readings `(timestamp, n)`, each an array.
fn batch(first_seq: u64, groups: &[Vec<(Timestamp, i64)>]) -> KinesisEvent {
    let b64 = base64::engine::general_purpose::STANDARD;
    let records: Vec<Value> = groups
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let payload: Vec<Value> = g
                .iter()
                .map(|(t, n)| json!({"deviceId": "hot", "timestamp": t.to_string(), "n": n}))
                .collect();
            let seq = format!("{:056}", first_seq + i as u64);
            json!({
                "kinesis": {
                    "kinesisSchemaVersion": "1.0",
                    "partitionKey": "hot",
                    "sequenceNumber": seq,
                    "data": b64.encode(Value::Array(payload).to_string()),
                    "approximateArrivalTimestamp": g[0].0.epoch_millis() as f64 / 1000.0,
                },
                "eventSource": "aws:kinesis",
                "eventVersion": "1.0",
                "eventID": format!("shardId-000000000000:{seq}"),
                "eventName": "aws:kinesis:record",
                "awsRegion": "us-east-1",
                "eventSourceARN": "arn:aws:kinesis:us-east-1:123456789012:stream/tidemark-readings",
            })
        })
        .collect();
    serde_json::from_value::<tidemark_ingest::KinesisBatch>(json!({ "Records": records }))
        .unwrap()
        .0
}

async fn deliver(c: &Container, now: Timestamp, event: &KinesisEvent) {
    c.clock().set(now);
    let deadline = Instant::now() + Duration::from_secs(300);
    let (resp, stats) = c.process(event, deadline).await.unwrap();
    assert!(resp.batch_item_failures.is_empty(), "{resp:?}");
    assert_eq!(stats.quarantined, 0);
}

/// Every reading item of the device: reading time -> (partition, n).
async fn stored_readings(t: &TestTable) -> BTreeMap<Timestamp, (String, i64)> {
    let mut out = BTreeMap::new();
    for item in t.scan().await {
        let is_reading = item
            .get("sk")
            .and_then(|v| v.as_s().ok())
            .is_some_and(|sk| sk.starts_with(keys::READING_PREFIX));
        if is_reading {
            let r: ReadingItem = tidemark_store::from_item(item).unwrap();
            let at = Timestamp::parse_canonical(&r.sk[keys::READING_PREFIX.len()..]).unwrap();
            let n = r.metrics[&MetricName::new("n").unwrap()] as i64;
            let prev = out.insert(at, (r.pk, n));
            assert!(prev.is_none(), "a reading stored twice: {at}");
        }
    }
    out
}

fn history_of(body: &Value) -> LayoutHistory {
    serde_json::from_value(body["epochs"].clone()).unwrap()
}

/// Schedules `count` shards for the device as soon as allowed; returns when it takes effect.
async fn set_shards(app: &App, count: u16) -> Timestamp {
    let body = json!({ "count": count }).to_string();
    let (status, reply) = call(app, "PUT", "/devices/hot/shards", &body).await;
    assert_eq!(status, 200, "{reply}");
    let last = *history_of(&reply).epochs().last().unwrap();
    assert_eq!(last.count, count);
    last.from
}

/// GIVEN a device sending 4 readings a second for 20 minutes through two ingest containers
/// WHEN its partition count is raised to 4 after 2 minutes and lowered to 2 after 10, while a
///   third container still holds the counts from before the first change
/// THEN every reading is stored once, on the partition the history gives its time; a range
///   spanning both changes reads back every reading once, in order, both ways, across
///   pages; latest asks every live shard; and re-sending old batches changes nothing.
#[tokio::test]
async fn shard_count_changed_while_readings_flow_loses_nothing_and_moves_nothing() {
    let t = TestTable::new("reshard").await;
    let t0 = ts("2026-04-20T14:00:00Z");
    let (status, body) = call(&api(&t, t0), "PUT", "/devices/hot", "{}").await;
    assert_eq!(status, 201, "{body}");

    let containers = [container(&t, t0), container(&t, t0)];
    let stale = container(&t, t0);
    let mut sent: BTreeMap<Timestamp, i64> = BTreeMap::new();
    let mut batches = Vec::new();
    let mut n = 0;
    let mut seq = 1;
    let steps = 120; // 10 s each
    let mut changes = Vec::new();
    for step in 0..steps {
        let start = at(t0, step * 10 * SECOND);
        // 40 readings at uneven offsets (so consecutive ones hash to varied shards).
        let groups: Vec<Vec<(Timestamp, i64)>> = (0..4)
            .map(|g| {
                (0..10)
                    .map(|k| {
                        n += 1;
                        let t = at(start, (g * 10 + k) * 250 + (step % 7));
                        sent.insert(t, n);
                        (t, n)
                    })
                    .collect()
            })
            .collect();
        let event = batch(seq, &groups);
        seq += 100;
        let sent_at = at(start, 10 * SECOND);
        deliver(&containers[(step % 2) as usize], sent_at, &event).await;
        batches.push((sent_at, event));

        if step == 12 {
            // The stale container reads the (still empty) layout history just before the
            // change is made...
            n += 1;
            let probe = at(sent_at, -5);
            sent.insert(probe, n);
            let probe = batch(seq, &[vec![(probe, n)]]);
            seq += 100;
            deliver(&stale, sent_at, &probe).await;
            // ... the change is scheduled, as soon as allowed ...
            changes.push(set_shards(&api(&t, sent_at), 4).await);
            // ... and 14 s later (no refresh due yet) that container writes a reading from
            // as far in the future as it accepts: still before the change takes effect, so
            // the old count is the right one for it.
            let late_now = at(sent_at, 14 * SECOND);
            let future = at(late_now, 300 * SECOND);
            assert!(future < changes[0], "{future} vs {}", changes[0]);
            n += 1;
            sent.insert(future, n);
            deliver(&stale, late_now, &batch(seq, &[vec![(future, n)]])).await;
            seq += 100;
        }
        if step == 60 {
            changes.push(set_shards(&api(&t, sent_at), 2).await);
        }
    }
    let end = at(t0, steps * 10 * SECOND);
    let app = api(&t, at(end, 5 * MINUTE));

    // The history as the API reports it: 1 shard, then 4, then 2.
    let (status, body) = call(&app, "GET", "/devices/hot/shards", "").await;
    assert_eq!(status, 200, "{body}");
    let history = history_of(&body);
    assert_eq!(body["count"], 2);
    assert_eq!(
        history
            .epochs()
            .iter()
            .map(|e| (e.from, e.count))
            .collect::<Vec<_>>(),
        vec![(changes[0], 4), (changes[1], 2)]
    );

    // Every reading stored once, on the partition its time's count gives.
    let stored = stored_readings(&t).await;
    assert_eq!(
        stored
            .iter()
            .map(|(t, (_, n))| (*t, *n))
            .collect::<Vec<_>>(),
        sent.iter().map(|(t, n)| (*t, *n)).collect::<Vec<_>>()
    );
    let hot = DeviceId::new("hot").unwrap();
    let mut per_partition: BTreeMap<&str, usize> = BTreeMap::new();
    for (t, (pk, _)) in &stored {
        assert_eq!(*pk, keys::reading_pk(&hot, history.partition_at(*t)), "{t}");
        *per_partition.entry(pk.as_str()).or_default() += 1;
    }
    assert_eq!(per_partition.len(), 5, "{per_partition:?}");

    // A range spanning both changes, both orders, across pages.
    let want: Vec<i64> = sent.values().copied().collect();
    let range = format!(
        "from={}&to={}&limit=97",
        t0,
        at(end, 6 * MINUTE) // includes the far-future reading
    );
    for (order, expected) in [
        ("asc", want.clone()),
        ("desc", want.iter().rev().copied().collect()),
    ] {
        let got: Vec<i64> = walk(
            &app,
            &format!("/devices/hot/readings?{range}&order={order}"),
        )
        .await
        .iter()
        .map(|r| r["n"].as_i64().unwrap())
        .collect();
        assert_eq!(got, expected, "{order}");
    }

    // Latest asks every live shard.
    let (status, latest) = call(&app, "GET", "/devices/hot/readings/latest", "").await;
    assert_eq!(status, 200, "{latest}");
    let (last_t, last_n) = sent.iter().next_back().unwrap();
    assert_eq!(
        (latest["timestamp"].as_str(), latest["n"].as_i64()),
        (Some(last_t.to_string().as_str()), Some(*last_n))
    );

    // Re-sent after the changes (a replayed shard, a new container): every reading lands
    // on the key it has, so the table does not change at all.
    let before = t.scan().await;
    let fresh = container(&t, end);
    for i in [0, 11, 13, 40, 61, 119] {
        deliver(&fresh, end, &batches[i].1).await;
    }
    assert_eq!(t.scan().await, before);
}
