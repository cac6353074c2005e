//! Packed readings through the API, against DynamoDB Local: a device whose layout changes
//! from single items to packed slots and back (set through `PUT /devices/{id}/layout`), read
//! across the changes in pages of every size, both ways; `latest` and `/latest?ids=` whether
//! the newest reading is packed or not; unreadable slot parts skipped, never a 500.

use crate::common::*;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{Value, json};
use tidemark_schema::packed::SlotReadings;
use tidemark_schema::{DeviceId, Layout, LayoutHistory, Reading, SlotLen, Timestamp, keys};
use tidemark_store::retry::RetryPolicy;
use tidemark_store::write::slots::{SlotKey, SlotWriter};
use tidemark_testkit::TestTable;

fn len(s: i64) -> SlotLen {
    SlotLen::new(s).unwrap()
}

/// The layouts the walk test sets: single, packed 60 s from 14:10, single again from 14:40,
/// packed 10 s over two shards from 14:50.
fn history() -> LayoutHistory {
    LayoutHistory::default()
        .with_layout(ts("2026-04-20T14:10:00Z"), Layout::packed(len(60)))
        .unwrap()
        .with_layout(ts("2026-04-20T14:40:00Z"), Layout::SINGLE)
        .unwrap()
        .with_layout(
            ts("2026-04-20T14:50:00Z"),
            Layout {
                partitions: 2,
                slot: Some(len(10)),
            },
        )
        .unwrap()
}

/// Metrics whose values differ in every bit, so packed parts fill up quickly.
fn metrics(n: usize) -> Vec<(&'static str, f64)> {
    let x = n as f64;
    vec![("n", x), ("v", 20.0 + x.sqrt()), ("w", (x * 0.37).sin())]
}

/// Every 7 s from 14:00 to 15:00, plus readings on each side of every layout change.
fn walk_readings() -> Vec<Reading> {
    let mut times: Vec<Timestamp> = (0..515)
        .map(|i| ts("2026-04-20T14:00:00Z").plus_millis(i * 7_000).unwrap())
        .collect();
    for edge in ["14:10:00", "14:40:00", "14:50:00"] {
        let e = ts(&format!("2026-04-20T{edge}Z"));
        times.extend([e.pred().unwrap(), e, e.succ().unwrap()]);
    }
    times.sort();
    times.dedup();
    times
        .into_iter()
        .enumerate()
        .map(|(n, at)| {
            let mut r = reading("sensor_01", at, &metrics(n));
            // Some readings carry metadata, in runs, as devices send it.
            if n % 5 < 2 {
                r.metadata = Some(
                    json!({"fw": format!("2.{}", n / 50), "site": "hall 3"})
                        .as_object()
                        .unwrap()
                        .clone(),
                );
            }
            r
        })
        .collect()
}

async fn slot_parts(t: &TestTable, pk: &str) -> Vec<String> {
    let out = t
        .client
        .query()
        .table_name(&t.name)
        .key_condition_expression("pk = :p AND begins_with(sk, :s)")
        .expression_attribute_values(":p", AttributeValue::S(pk.into()))
        .expression_attribute_values(":s", AttributeValue::S(keys::SLOT_PREFIX.into()))
        .send()
        .await
        .unwrap();
    out.items()
        .iter()
        .map(|i| i["sk"].as_s().unwrap().clone())
        .collect()
}

/// A reading's JSON as a client parses it (serde_json's own float parsing, which the
/// responses went through too, is not always the closest double).
fn as_parsed(r: &Reading) -> Value {
    serde_json::from_str(&r.to_json().to_string()).unwrap()
}

fn ns(items: &[Value]) -> Vec<i64> {
    items.iter().map(|r| r["n"].as_i64().unwrap()).collect()
}

#[tokio::test]
async fn a_device_switching_single_packed_single_reads_every_reading_once_in_order_both_ways() {
    // GIVEN a device whose layout is changed through the API three times, ahead of use
    let t = TestTable::new("api-packed-walk").await;
    put(&t, &sample_device()).await;
    let changes = [
        (
            "2026-04-20T14:00:00Z",
            r#"{"slotSeconds":60,"effectiveFrom":"2026-04-20T14:10:00Z"}"#,
        ),
        (
            "2026-04-20T14:15:00Z",
            r#"{"slotSeconds":null,"effectiveFrom":"2026-04-20T14:40:00Z"}"#,
        ),
        (
            "2026-04-20T14:41:00Z",
            r#"{"slotSeconds":10,"shards":2,"effectiveFrom":"2026-04-20T14:50:00Z"}"#,
        ),
    ];
    for (clock, body) in changes {
        let (status, answer) = call(
            &at_clock(&t, clock),
            "PUT",
            "/devices/sensor_01/layout",
            body,
        )
        .await;
        assert_eq!(status, 200, "{body}: {answer}");
    }
    let app = app(&t); // 15:00
    let (status, layout) = get(&app, "/devices/sensor_01/layout").await;
    assert_eq!(status, 200);
    assert_eq!(
        layout,
        json!({"deviceId":"sensor_01","shards":2,"slotSeconds":10,"epochs":[
            {"from":"2026-04-20T14:10:00.000000Z","count":1,"slotSeconds":60},
            {"from":"2026-04-20T14:40:00.000000Z","count":1},
            {"from":"2026-04-20T14:50:00.000000Z","count":2,"slotSeconds":10}]})
    );
    let h = history();
    assert_eq!(
        serde_json::from_value::<LayoutHistory>(layout["epochs"].clone()).unwrap(),
        h
    );
    // AND readings written under each layout, packed slots in several interleaved parts
    let readings = walk_readings();
    store(&t, "sensor_01", &h, &readings).await;
    let parts = slot_parts(&t, "DEVICE#sensor_01").await;
    assert!(
        parts.iter().any(|sk| sk.ends_with("#2")),
        "some 60 s slot has three parts: {parts:?}"
    );
    assert!(!slot_parts(&t, "DEVICE#sensor_01#S1").await.is_empty());

    // WHEN the whole range is walked in pages of every size, both ways
    let range = "from=2026-04-20T13:59:00Z&to=2026-04-20T15:00:00Z";
    let all: Vec<i64> = (0..readings.len() as i64).collect();
    for limit in [1, 4, 9, 100, 1000] {
        for order in ["asc", "desc"] {
            let uri = format!("/devices/sensor_01/readings?{range}&order={order}&limit={limit}");
            let (got, pages) = walk(&app, &uri).await;
            // THEN every reading comes back once, in order
            let mut want = all.clone();
            if order == "desc" {
                want.reverse();
            }
            assert_eq!(ns(&got), want, "{order} limit {limit}");
            if limit == 9 {
                // Every reading exactly as sent, metadata and all, whatever its layout.
                let mut sent: Vec<Value> = readings.iter().map(as_parsed).collect();
                if order == "desc" {
                    sent.reverse();
                }
                assert_eq!(got, sent, "{order}");
            }
            assert!(
                pages <= all.len().div_ceil(limit) + 1,
                "{order} {limit}: {pages} pages"
            );
        }
    }
    // AND a packed reading looks exactly like a single one
    let (_, page) = get(
        &app,
        "/devices/sensor_01/readings?from=2026-04-20T14:10:00Z&to=2026-04-20T14:10:00Z",
    )
    .await;
    let n = readings
        .iter()
        .position(|r| r.timestamp == ts("2026-04-20T14:10:00Z"))
        .unwrap();
    assert_eq!(page["items"], json!([as_parsed(&readings[n])]));
    assert_eq!(
        page["items"][0]["timestamp"], "2026-04-20T14:10:00.000000Z",
        "{page}"
    );
    // AND a range inside one slot, cut by the page size, neither skips nor repeats
    let (got, _) = walk(
        &app,
        "/devices/sensor_01/readings?from=2026-04-20T14:20:10Z&to=2026-04-20T14:20:50Z&limit=2&order=desc",
    )
    .await;
    let want: Vec<i64> = readings
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            r.timestamp >= ts("2026-04-20T14:20:10Z") && r.timestamp <= ts("2026-04-20T14:20:50Z")
        })
        .map(|(i, _)| i as i64)
        .rev()
        .collect();
    assert!(want.len() >= 5);
    assert_eq!(ns(&got), want);
    // AND the latest is the newest packed reading
    let (status, latest) = get(&app, "/devices/sensor_01/readings/latest").await;
    assert_eq!(status, 200);
    assert_eq!(latest, as_parsed(readings.last().unwrap()));
}

#[tokio::test]
async fn latest_finds_the_newest_reading_whether_single_or_packed() {
    // GIVEN device a, packed from 14:10 with its newest reading in a three-part slot, and
    // device b, packed then single from 14:40, with an announced packed layout from 16:00
    // that has no readings yet
    let t = TestTable::new("api-packed-latest").await;
    let mut b = sample_device();
    b.device_id = dev("b");
    b.pk = keys::device_pk(&b.device_id);
    b.gsi1sk = keys::device_gsi1sk(&b.device_id);
    let mut a = b.clone();
    a.device_id = dev("a");
    a.pk = keys::device_pk(&a.device_id);
    a.gsi1sk = keys::device_gsi1sk(&a.device_id);
    put(&t, &a).await;
    put(&t, &b).await;
    let packed_a = LayoutHistory::default()
        .with_layout(ts("2026-04-20T14:10:00Z"), Layout::packed(len(600)))
        .unwrap();
    let packed_b = packed_a
        .with_layout(ts("2026-04-20T14:40:00Z"), Layout::SINGLE)
        .unwrap()
        .with_layout(ts("2026-04-20T16:00:00Z"), Layout::packed(len(60)))
        .unwrap();
    for (id, h) in [("a", &packed_a), ("b", &packed_b)] {
        put(
            &t,
            &tidemark_schema::LayoutHistoryItem::new(&dev(id), h.clone()),
        )
        .await;
    }
    let every = |id: &str, secs: i64, n: i64| -> Vec<Reading> {
        (0..n)
            .map(|i| {
                let at = ts("2026-04-20T14:00:00Z")
                    .plus_millis(i * secs * 1000)
                    .unwrap();
                reading(id, at, &metrics(i as usize))
            })
            .collect()
    };
    // a: every 13 s until 14:49:49; b: every 17 s until 14:44:52.
    let ra = every("a", 13, 230);
    let rb = every("b", 17, 159);
    store(&t, "a", &packed_a, &ra).await;
    store(&t, "b", &packed_b, &rb).await;
    let newest_a_slot = len(600).start_of(ra.last().unwrap().timestamp);
    assert!(
        slot_parts(&t, "DEVICE#a")
            .await
            .contains(&keys::slot_sk(newest_a_slot, 2)),
        "the newest slot of a has at least three parts"
    );
    // WHEN the latest readings are asked for
    let app = app(&t);
    for (id, rs) in [("a", &ra), ("b", &rb)] {
        let (status, latest) = get(&app, &format!("/devices/{id}/readings/latest")).await;
        // THEN each is the newest, packed (a) or single (b)
        assert_eq!(status, 200, "{latest}");
        assert_eq!(latest, as_parsed(rs.last().unwrap()), "{id}");
    }
    let (status, both) = get(&app, "/latest?ids=b,a,nobody").await;
    assert_eq!(status, 200);
    assert_eq!(
        both,
        json!({"items":[as_parsed(rb.last().unwrap()), as_parsed(ra.last().unwrap())],"cursor":null})
    );
}

#[tokio::test]
async fn unreadable_slot_parts_are_skipped_and_the_rest_is_read() {
    // GIVEN a packed device with one slot holding a part of garbage bytes and a part with no
    // packed readings at all, and a stray item in the slot key range
    let t = TestTable::new("api-packed-corrupt").await;
    put(&t, &sample_device()).await;
    let h = LayoutHistory::default()
        .with_layout(ts("2026-04-20T14:00:00Z"), Layout::packed(len(60)))
        .unwrap();
    put(
        &t,
        &tidemark_schema::LayoutHistoryItem::new(&dev("sensor_01"), h.clone()),
    )
    .await;
    let rs: Vec<Reading> = (0..30)
        .map(|i| {
            let at = ts("2026-04-20T14:00:00Z").plus_millis(i * 10_000).unwrap();
            reading("sensor_01", at, &metrics(i as usize))
        })
        .collect();
    store(&t, "sensor_01", &h, &rs).await;
    let start = ts("2026-04-20T14:02:00Z");
    let ttl = AttributeValue::N(start.ttl_after_days(30).to_string());
    let bad = [
        (keys::slot_sk(start, 7), Some(vec![0xff, 0x00, 0x13])),
        (keys::slot_sk(start, 8), None),
        (
            format!("{}#x", keys::slot_sk_prefix(start)),
            Some(vec![1, 0]),
        ),
    ];
    for (sk, bytes) in bad {
        let mut req = t
            .client
            .put_item()
            .table_name(&t.name)
            .item("pk", AttributeValue::S("DEVICE#sensor_01".into()))
            .item("sk", AttributeValue::S(sk))
            .item("ttl", ttl.clone());
        if let Some(b) = bytes {
            req = req.item("packed", AttributeValue::B(Blob::new(b)));
        }
        req.send().await.unwrap();
    }
    // WHEN the range is read, in small pages, both ways
    let app = app(&t);
    for order in ["asc", "desc"] {
        let (got, _) = walk(
            &app,
            &format!("/devices/sensor_01/readings?from=2026-04-20T14:00:00Z&order={order}&limit=4"),
        )
        .await;
        // THEN every readable reading comes back, and nothing failed
        let mut want: Vec<i64> = (0..30).collect();
        if order == "desc" {
            want.reverse();
        }
        assert_eq!(ns(&got), want, "{order}");
    }
    let (status, _) = get(&app, "/devices/sensor_01/readings/latest").await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn expired_packed_readings_are_never_returned() {
    // GIVEN packed slots written with a one-day retention
    let t = TestTable::new("api-packed-ttl").await;
    put(&t, &sample_device()).await;
    let h = LayoutHistory::default()
        .with_layout(ts("2026-04-20T13:00:00Z"), Layout::packed(len(60)))
        .unwrap();
    put(
        &t,
        &tidemark_schema::LayoutHistoryItem::new(&dev("sensor_01"), h),
    )
    .await;
    let writer = SlotWriter::new(t.client.clone(), &t.name, RetryPolicy::default());
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let start = ts("2026-04-20T14:00:00Z");
    let rs: SlotReadings = (0..3)
        .map(|i| {
            (
                start.plus_millis(i * 1000).unwrap(),
                [(metric("n"), i as f64)].into_iter().collect(),
            )
        })
        .collect();
    let key = SlotKey {
        pk: keys::reading_pk(&DeviceId::new("sensor_01").unwrap(), None),
        start,
        len: len(60),
    };
    let one_day = len(60).last_of(start).ttl_after_days(1);
    writer.write(&key, &rs, one_day, deadline).await.unwrap();
    // WHEN read two days later (the API's retention, 30 days, still covers them)
    let later = at_clock(&t, "2026-04-22T15:00:00Z");
    // THEN the expired slot's readings are not returned, nor the latest
    assert_eq!(
        get(
            &later,
            "/devices/sensor_01/readings?from=2026-04-20T00:00:00Z"
        )
        .await,
        (200, json!({"items":[],"cursor":null}))
    );
    assert_eq!(
        get(&later, "/devices/sensor_01/readings/latest").await.0,
        404
    );
    // AND before then they are
    let (_, page) = get(&app(&t), "/devices/sensor_01/readings").await;
    assert_eq!(page["items"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn layout_changes_follow_the_shard_rules_and_the_shards_route_keeps_the_packing() {
    let t = sample_table("api-layout-put").await;
    let app = app(&t); // 15:00
    // Unknown devices, bad fields and changes sooner than ingest can learn of them are 4xx.
    let (status, _) = call(
        &app,
        "PUT",
        "/devices/nobody/layout",
        r#"{"slotSeconds":60}"#,
    )
    .await;
    assert_eq!(status, 404);
    for (body, param) in [
        (r#"{"slotSeconds":7}"#, "slotSeconds"),
        (r#"{"slotSeconds":60,"shards":99}"#, "shards"),
        (
            r#"{"slotSeconds":60,"effectiveFrom":"2026-04-20T15:01:00Z"}"#,
            "effectiveFrom",
        ),
        (r#"{"slot":60}"#, "body"),
    ] {
        let (status, answer) = call(&app, "PUT", "/devices/sensor_01/layout", body).await;
        assert_eq!(status, 400, "{body}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("invalid {param}")),
            "{body}: {message}"
        );
    }
    assert_eq!(layout_history_version(&t, "sensor_01").await, None);
    assert_eq!(
        get(&app, "/devices/sensor_01/layout").await,
        (
            200,
            json!({"deviceId":"sensor_01","shards":1,"slotSeconds":null,"epochs":[]})
        )
    );

    // Packed from 16:00 is announced; repeating it writes nothing.
    let packed_at_16 = json!({"deviceId":"sensor_01","shards":1,"slotSeconds":null,
        "epochs":[{"from":"2026-04-20T16:00:00.000000Z","count":1,"slotSeconds":60}]});
    let body = r#"{"slotSeconds":60,"effectiveFrom":"2026-04-20T16:00:00Z"}"#;
    for _ in 0..2 {
        assert_eq!(
            call(&app, "PUT", "/devices/sensor_01/layout", body).await,
            (200, packed_at_16.clone())
        );
        assert_eq!(
            layout_history_version(&t, "sensor_01").await.as_deref(),
            Some("1")
        );
    }
    // Once it is in use, a shard change keeps the packing; the shards route shows it.
    let (status, shards) = call(
        &at_clock(&t, "2026-04-20T16:30:00Z"),
        "PUT",
        "/devices/sensor_01/shards",
        r#"{"count":4,"effectiveFrom":"2026-04-20T17:00:00Z"}"#,
    )
    .await;
    assert_eq!(status, 200, "{shards}");
    assert_eq!(
        shards["epochs"][1],
        json!({"from":"2026-04-20T17:00:00.000000Z","count":4,"slotSeconds":60})
    );
    let later = at_clock(&t, "2026-04-20T17:30:00Z");
    assert_eq!(
        get(&later, "/devices/sensor_01/layout").await.1["slotSeconds"],
        60
    );
    assert_eq!(get(&later, "/devices/sensor_01/shards").await.1["count"], 4);
    // Back to single items keeps the partition count unless told otherwise.
    let (status, single) = call(
        &later,
        "PUT",
        "/devices/sensor_01/layout",
        r#"{"slotSeconds":null,"effectiveFrom":"2026-04-20T18:00:00Z"}"#,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        single["epochs"][2],
        json!({"from":"2026-04-20T18:00:00.000000Z","count":4})
    );
    // A change sooner than the lead time is refused.
    let (status, _) = call(
        &at_clock(&t, "2026-04-20T18:30:00Z"),
        "PUT",
        "/devices/sensor_01/layout",
        r#"{"slotSeconds":10,"effectiveFrom":"2026-04-20T17:59:00Z"}"#,
    )
    .await;
    assert_eq!(status, 400, "before the lead time");

    // Racing changes: each answer a 200 or a 409, each 200 one stored version.
    let v0: usize = layout_history_version(&t, "sensor_01")
        .await
        .unwrap()
        .parse()
        .unwrap();
    let racer = at_clock(&t, "2026-04-20T18:30:00Z");
    let bodies: Vec<String> = [1, 2, 5, 10, 30, 60, 600]
        .iter()
        .map(|n| json!({"slotSeconds": n, "effectiveFrom": "2026-04-20T19:00:00Z"}).to_string())
        .collect();
    let answers = futures::future::join_all(
        bodies
            .iter()
            .map(|b| call(&racer, "PUT", "/devices/sensor_01/layout", b)),
    )
    .await;
    assert!(
        answers.iter().all(|(s, _)| *s == 200 || *s == 409),
        "{answers:?}"
    );
    let won: Vec<&Value> = answers
        .iter()
        .filter(|(s, _)| *s == 200)
        .map(|(_, b)| b)
        .collect();
    assert!(!won.is_empty());
    assert_eq!(
        layout_history_version(&t, "sensor_01").await,
        Some((v0 + won.len()).to_string())
    );
    let stored = get(&racer, "/devices/sensor_01/layout").await.1;
    assert!(won.contains(&&stored), "{stored} not among {won:?}");
}

#[tokio::test]
async fn a_device_following_the_fleet_default_layout_reads_whole_and_keeps_it_through_a_shard_change()
 {
    // GIVEN a fleet default of 60 s slots from 14:10, and a device with no layout of its own
    let t = TestTable::new("api-packed-default").await;
    put(&t, &sample_device()).await;
    let default = LayoutHistory::default()
        .with_layout(ts("2026-04-20T14:10:00Z"), Layout::packed(len(60)))
        .unwrap();
    put(
        &t,
        &tidemark_schema::LayoutHistoryItem::default_layout(default.clone()),
    )
    .await;
    let readings: Vec<Reading> = (0..277)
        .map(|i| {
            let at = ts("2026-04-20T14:00:00Z").plus_millis(i * 13_000).unwrap();
            reading("sensor_01", at, &metrics(i as usize))
        })
        .collect();
    store(&t, "sensor_01", &default, &readings).await;
    assert!(!slot_parts(&t, "DEVICE#sensor_01").await.is_empty());
    let app = app(&t);
    // WHEN its readings are read THEN they all come back, single and packed alike
    for order in ["asc", "desc"] {
        let (got, _) = walk(
            &app,
            &format!("/devices/sensor_01/readings?from=2026-04-20T14:00:00Z&order={order}&limit=7"),
        )
        .await;
        let mut want: Vec<i64> = (0..277).collect();
        if order == "desc" {
            want.reverse();
        }
        assert_eq!(ns(&got), want, "{order}");
    }
    let newest = as_parsed(readings.last().unwrap());
    assert_eq!(
        get(&app, "/devices/sensor_01/readings/latest").await,
        (200, newest.clone())
    );
    assert_eq!(
        get(&app, "/latest?ids=sensor_01").await.1["items"],
        json!([newest])
    );
    // AND its layout shows the default it follows
    let from_default = json!({"from":"2026-04-20T14:10:00.000000Z","count":1,"slotSeconds":60});
    assert_eq!(
        get(&app, "/devices/sensor_01/layout").await.1,
        json!({"deviceId":"sensor_01","shards":1,"slotSeconds":60,"epochs":[from_default]})
    );
    // WHEN its partition count is raised THEN the packing it follows is kept
    let (status, shards) = call(
        &app,
        "PUT",
        "/devices/sensor_01/shards",
        r#"{"count":2,"effectiveFrom":"2026-04-20T16:00:00Z"}"#,
    )
    .await;
    assert_eq!(status, 200, "{shards}");
    assert_eq!(
        shards["epochs"],
        json!([from_default, {"from":"2026-04-20T16:00:00.000000Z","count":2,"slotSeconds":60}])
    );
}
