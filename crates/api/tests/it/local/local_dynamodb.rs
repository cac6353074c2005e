//! The API against DynamoDB Local: every access pattern of docs/design.md §9 with its exact JSON,
//! pagination across pages and shards, and a table of bad inputs.

use crate::common::*;
use base64::Engine;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use tidemark_api::{ApiConfig, App};

use tidemark_schema::{
    AlertState, DeviceStatus, LayoutHistory, LayoutHistoryItem, Period, QuarantineItem,
    QuarantineReason, ReadingItem, Severity, Stats, Timestamp,
};
use tidemark_testkit::TestTable;

fn sample_device_json() -> Value {
    json!({"deviceId":"sensor_01","name":"Warehouse Temp A","type":"sensor","status":"active",
           "firmware":"2.1.0","createdAt":"2026-04-01T09:00:00.000000Z","connectivity":"unknown",
           "lastSeenAt":"2026-04-20T14:01:00.000000Z",
           "latest":{"timestamp":"2026-04-20T14:01:00.000000Z",
                     "metrics":{"temperature":22.5,"humidity":44,"battery":87}}})
}

fn sample_alert_json() -> Value {
    json!({"deviceId":"sensor_01","alertId":"20260420T143000000000Z-temperature-max",
           "kind":"threshold","metric":"temperature","rule":"max","severity":"critical","state":"open",
           "message":"temperature above 30","value":31.5,"threshold":30,"breachCount":2,
           "openedAt":"2026-04-20T14:30:00.000000Z","lastBreachAt":"2026-04-20T14:31:00.000000Z"})
}

#[tokio::test]
async fn ap1_device_by_id_returns_the_item_without_keys() {
    let t = sample_table("api-ap1").await;
    let app = app(&t);
    assert_eq!(
        get(&app, "/devices/sensor_01").await,
        (200, sample_device_json())
    );
    let (status, body) = get(&app, "/devices/nobody").await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "not_found");
}

#[tokio::test]
async fn a_device_shows_its_newest_stored_reading_as_last_seen_whatever_its_item_holds() {
    // GIVEN a device item the pipeline last wrote at 14:00 (it is not rewritten for
    // `lastSeenAt` alone) and readings stored up to 14:01
    let t = sample_table("api-last-seen").await;
    let mut d = sample_device();
    d.last_seen_at = Some(ts("2026-04-20T14:00:00Z"));
    d.latest = Some(tidemark_schema::LatestReading {
        timestamp: ts("2026-04-20T14:00:00Z"),
        metrics: [(metric("temperature"), 22.4)].into(),
    });
    put(&t, &d).await;
    // WHEN it is read
    let (status, body) = get(&app(&t), "/devices/sensor_01").await;
    // THEN `lastSeenAt` and `latest` are the newest stored reading, as fresh as ingest
    assert_eq!(status, 200);
    assert_eq!(body["lastSeenAt"], "2026-04-20T14:01:00.000000Z");
    assert_eq!(
        body["latest"],
        json!({"timestamp":"2026-04-20T14:01:00.000000Z",
               "metrics":{"temperature":22.5,"humidity":44,"battery":87}})
    );
    // AND an item ahead of the stored readings (they expired, or were deleted) keeps its own
    d.last_seen_at = Some(ts("2026-04-20T14:30:00Z"));
    put(&t, &d).await;
    let (_, body) = get(&app(&t), "/devices/sensor_01").await;
    assert_eq!(body["lastSeenAt"], "2026-04-20T14:30:00.000000Z");
    assert_eq!(body["latest"]["timestamp"], "2026-04-20T14:00:00.000000Z");
}

#[tokio::test]
async fn ap2_devices_by_status() {
    let t = sample_table("api-ap2").await;
    let mut other = sample_device();
    other.device_id = dev("sensor_02");
    other.pk = tidemark_schema::keys::device_pk(&other.device_id);
    other.gsi1sk = tidemark_schema::keys::device_gsi1sk(&other.device_id);
    other.status = DeviceStatus::Maintenance;
    other.gsi1pk = tidemark_schema::keys::status_gsi1pk(DeviceStatus::Maintenance, None);
    put(&t, &other).await;
    let app = app(&t);
    // The listing has the items as GSI1 projects them: no connectivity, and no
    // `lastSeenAt` or `latest` newer than the item's (GET /devices/{id} has those).
    let mut summary = sample_device_json();
    for key in ["connectivity", "lastSeenAt", "latest"] {
        summary.as_object_mut().unwrap().remove(key);
    }
    assert_eq!(
        get(&app, "/devices?status=active").await,
        (200, json!({"items":[summary],"cursor":null}))
    );
    // Without a status: every status, merged in device-ID order.
    let (_, all) = get(&app, "/devices").await;
    let ids: Vec<&str> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["deviceId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["sensor_01", "sensor_02"]);
}

#[tokio::test]
async fn ap3_readings_in_a_range_flat_with_normalised_times() {
    let t = sample_table("api-ap3").await;
    let app = app(&t);
    let expected = json!({"items":[
        {"deviceId":"sensor_01","timestamp":"2026-04-20T14:00:00.000000Z","temperature":22.4,"humidity":45,"battery":87},
        {"deviceId":"sensor_01","timestamp":"2026-04-20T14:01:00.000000Z","temperature":22.5,"humidity":44,"battery":87}
    ],"cursor":null});
    assert_eq!(
        get(
            &app,
            "/devices/sensor_01/readings?from=2026-04-20T16:00:00%2B02:00&to=2026-04-20T14:59:59Z"
        )
        .await,
        (200, expected.clone())
    );
    // Defaults: the last hour before now (15:00), ascending.
    assert_eq!(
        get(&app, "/devices/sensor_01/readings").await,
        (200, expected)
    );
    // Epoch milliseconds, descending, limit 1 → a cursor to the second.
    let (_, page) = get(
        &app,
        "/devices/sensor_01/readings?from=1776693600000&to=1776697200000&order=desc&limit=1",
    )
    .await;
    assert_eq!(page["items"][0]["timestamp"], "2026-04-20T14:01:00.000000Z");
    assert!(page["cursor"].is_string());
}

#[tokio::test]
async fn ap4_latest_reading() {
    let t = sample_table("api-ap4").await;
    let app = app(&t);
    assert_eq!(
        get(&app, "/devices/sensor_01/readings/latest").await,
        (
            200,
            json!({"deviceId":"sensor_01","timestamp":"2026-04-20T14:01:00.000000Z",
                   "temperature":22.5,"humidity":44,"battery":87})
        )
    );
}

#[tokio::test]
async fn ap5_alerts_of_a_device_newest_first_and_acknowledge() {
    let t = sample_table("api-ap5").await;
    let mut older = sample_alert();
    older.alert_id = tidemark_schema::AlertId::for_breach(
        ts("2026-04-20T10:00:00Z"),
        &metric("humidity"),
        tidemark_schema::AlertRule::Min,
    );
    older.sk = tidemark_schema::keys::alert_sk(&older.alert_id);
    older.metric = Some(metric("humidity"));
    older.state = AlertState::Resolved;
    older.gsi1pk = None;
    older.gsi1sk = None;
    older.resolved_at = Some(ts("2026-04-20T11:00:00Z"));
    put(&t, &older).await;
    let app = app(&t);
    let (status, body) = get(&app, "/devices/sensor_01/alerts").await;
    assert_eq!(status, 200);
    assert_eq!(body["items"][0], sample_alert_json());
    assert_eq!(body["items"][1]["state"], "resolved");
    assert_eq!(
        body["items"][1]["resolvedAt"],
        "2026-04-20T11:00:00.000000Z"
    );
    assert_eq!(body["cursor"], Value::Null);

    let ack = "/devices/sensor_01/alerts/20260420T143000000000Z-temperature-max/ack";
    let mut acked = sample_alert_json();
    acked["state"] = json!("acknowledged");
    acked["acknowledgedAt"] = json!("2026-04-20T15:00:00.000000Z");
    assert_eq!(call(&app, "POST", ack, "").await, (200, acked.clone()));
    // Acknowledging twice is harmless: same alert, same acknowledgement time.
    assert_eq!(call(&app, "POST", ack, "").await, (200, acked));
    let resolved = format!("/devices/sensor_01/alerts/{}/ack", older.alert_id.as_str());
    let (status, body) = call(&app, "POST", &resolved, "").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("conflict"))
    );
    let missing = "/devices/sensor_01/alerts/20200101T000000000000Z-temperature-max/ack";
    assert_eq!(call(&app, "POST", missing, "").await.0, 404);
}

#[tokio::test]
async fn ap6_open_alerts_of_a_severity_fleet_wide() {
    let t = sample_table("api-ap6").await;
    let app = app(&t);
    let expected = json!({"items":[sample_alert_json()],"cursor":null});
    assert_eq!(
        get(&app, "/alerts?severity=critical&state=open").await,
        (200, expected.clone())
    );
    assert_eq!(get(&app, "/alerts").await, (200, expected));
    assert_eq!(
        get(&app, "/alerts?severity=warning").await,
        (200, json!({"items":[],"cursor":null}))
    );
    assert_eq!(
        get(&app, "/alerts?severity=critical&state=acknowledged").await,
        (200, json!({"items":[],"cursor":null}))
    );
    let (status, body) = get(&app, "/alerts?state=resolved").await;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("invalid state")
    );
}

#[tokio::test]
async fn ap7_hourly_and_daily_aggregates() {
    let t = sample_table("api-ap7").await;
    let app = app(&t);
    let metrics = json!({
        "battery":{"count":2,"sum":174,"min":87,"max":87,"avg":87},
        "humidity":{"count":2,"sum":89,"min":44,"max":45,"avg":44.5},
        "temperature":{"count":2,"sum":44.9,"min":22.4,"max":22.5,"avg":22.45}
    });
    let (status, body) = get(
        &app,
        "/devices/sensor_01/aggregates?period=hourly&from=2026-04-20T00:00:00Z&to=2026-04-20T23:59:59Z",
    )
    .await;
    assert_eq!(status, 200);
    // 22.4 + 22.5 in binary floating point is 44.9 only to within an ulp.
    let t_sum = body["items"][0]["metrics"]["temperature"]["sum"]
        .as_f64()
        .unwrap();
    assert!((t_sum - 44.9).abs() < 1e-9);
    let mut body = body;
    body["items"][0]["metrics"]["temperature"]["sum"] = json!(44.9);
    body["items"][0]["metrics"]["temperature"]["avg"] = json!(22.45);
    assert_eq!(
        body,
        json!({"items":[{"deviceId":"sensor_01","period":"hourly","start":"2026-04-20T14:00:00.000000Z",
            "metrics":metrics,"firstAt":"2026-04-20T14:00:00.000000Z","lastAt":"2026-04-20T14:01:00.000000Z"}],
            "cursor":null})
    );
    let (_, daily) = get(
        &app,
        "/devices/sensor_01/aggregates?period=daily&from=2026-04-20T00:00:00Z&to=2026-04-20T00:00:00Z",
    )
    .await;
    assert_eq!(daily["items"][0]["start"], "2026-04-20T00:00:00.000000Z");
    assert_eq!(daily["items"][0]["period"], "daily");
    assert_eq!(daily["items"][0]["metrics"]["battery"]["count"], 2);
}

#[tokio::test]
async fn an_open_hour_is_served_from_its_readings_and_its_open_day_with_it() {
    // GIVEN a device whose hour and day are still open: both items placeholders holding
    // stale content a reader must not serve, the hour's readings stored, and a closed hour
    // earlier the same day
    let t = TestTable::new("api-open-hour").await;
    put(&t, &sample_device()).await;
    let rs = sample_readings();
    for r in &rs {
        put(&t, &ReadingItem::new(r, None, 30)).await;
    }
    let at = |s: &str| Timestamp::parse_rfc3339(s).unwrap();
    for period in [Period::Hourly, Period::Daily] {
        let mut placeholder = aggregate("sensor_01", period, rs[0].timestamp, &rs[..1]);
        placeholder
            .metrics
            .values_mut()
            .for_each(|s| s.count += 100);
        placeholder.open = true;
        put(&t, &placeholder).await;
    }
    let mut closed = aggregate("sensor_01", Period::Hourly, at("2026-04-20T09:00:00Z"), &rs);
    closed.metrics = BTreeMap::from([(
        metric("temperature"),
        Stats::at(at("2026-04-20T09:10:00Z"), 10.0),
    )]);
    (closed.first_at, closed.last_at) = (at("2026-04-20T09:10:00Z"), at("2026-04-20T09:10:00Z"));
    put(&t, &closed).await;
    // WHEN its hourly and daily rollups are asked for
    let (status, hourly) = get(
        &app(&t),
        "/devices/sensor_01/aggregates?period=hourly&from=2026-04-20T14:00:00Z&to=2026-04-20T14:00:00Z",
    )
    .await;
    // THEN the open hour holds what its readings say, in the shape of a closed one
    assert_eq!(status, 200, "{hourly}");
    let h = &hourly["items"][0];
    assert_eq!(h["metrics"]["temperature"]["count"], 2, "{hourly}");
    assert_eq!(h["metrics"]["battery"]["sum"], 174.0);
    assert_eq!(h["firstAt"], "2026-04-20T14:00:00.000000Z");
    assert_eq!(h["lastAt"], "2026-04-20T14:01:00.000000Z");
    // AND the open day is its closed hour plus its open hour's readings
    let (_, daily) = get(
        &app(&t),
        "/devices/sensor_01/aggregates?period=daily&from=2026-04-20T00:00:00Z&to=2026-04-20T00:00:00Z",
    )
    .await;
    let d = &daily["items"][0];
    assert_eq!(d["metrics"]["temperature"]["count"], 3, "{daily}");
    assert_eq!(d["metrics"]["temperature"]["min"], 10.0);
    assert_eq!(d["metrics"]["battery"]["count"], 2);
    assert_eq!(d["firstAt"], "2026-04-20T09:10:00.000000Z");
    assert_eq!(d["lastAt"], "2026-04-20T14:01:00.000000Z");
}

#[tokio::test]
async fn an_open_day_is_served_as_the_sum_of_its_hours_so_far() {
    // GIVEN a device whose day is still open: its daily item a placeholder (holding stale
    // content a reader must not serve), two hours of the day and one of the next
    let t = TestTable::new("api-open-day").await;
    put(&t, &sample_device()).await;
    let rs = sample_readings();
    let at = |s: &str| Timestamp::parse_rfc3339(s).unwrap();
    let hour = |start: &str, t_stats: Stats| {
        let mut h = aggregate("sensor_01", Period::Hourly, at(start), &rs);
        h.metrics = BTreeMap::from([(metric("temperature"), t_stats)]);
        h.first_at = at(start);
        h.last_at = at(start).plus_millis(30 * 60_000).unwrap();
        h
    };
    let mut placeholder = aggregate("sensor_01", Period::Daily, at("2026-04-20T14:00:00Z"), &rs);
    placeholder.open = true;
    put(&t, &placeholder).await;
    put(
        &t,
        &hour(
            "2026-04-20T14:00:00Z",
            Stats {
                count: 2,
                sum: 40.0,
                min: 19.0,
                max: 21.0,
                ..Stats::EMPTY
            },
        ),
    )
    .await;
    put(
        &t,
        &hour(
            "2026-04-20T16:00:00Z",
            Stats {
                count: 1,
                sum: 25.0,
                min: 25.0,
                max: 25.0,
                ..Stats::EMPTY
            },
        ),
    )
    .await;
    put(
        &t,
        &hour(
            "2026-04-21T00:00:00Z",
            Stats {
                count: 1,
                sum: 99.0,
                min: 99.0,
                max: 99.0,
                ..Stats::EMPTY
            },
        ),
    )
    .await;
    // WHEN its daily rollups are asked for
    let (status, body) = get(
        &app(&t),
        "/devices/sensor_01/aggregates?period=daily&from=2026-04-20T00:00:00Z&to=2026-04-20T00:00:00Z",
    )
    .await;
    // THEN the day is the sum of its own hours, in the same shape as a closed day
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["items"],
        json!([{"deviceId":"sensor_01","period":"daily","start":"2026-04-20T00:00:00.000000Z",
            "metrics":{"temperature":{"count":3,"sum":65,"min":19,"max":25,"avg":65.0/3.0}},
            "firstAt":"2026-04-20T14:00:00.000000Z","lastAt":"2026-04-20T16:30:00.000000Z"}])
    );
}

#[tokio::test]
async fn put_device_sets_created_once_updates_every_write_and_moves_status_partition() {
    let t = TestTable::new("api-put").await;
    let app = App::new(t.client.clone(), ApiConfig::new(&t.name).with_now(now()));
    let body = r#"{"name":"Dock door","type":"actuator","status":"active","firmware":"1.0.0",
        "location":{"lat":52.5,"lon":13.4},
        "thresholds":{"temperature":{"max":30,"severity":"critical"}}}"#;
    let (status, created) = call(&app, "PUT", "/devices/door_1", body).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(
        created,
        json!({"deviceId":"door_1","name":"Dock door","type":"actuator","status":"active",
               "firmware":"1.0.0","location":{"lat":52.5,"lon":13.4},
               "thresholds":{"temperature":{"max":30,"severity":"critical"}},
               "createdAt":"2026-04-20T15:00:00.000000Z","updatedAt":"2026-04-20T15:00:00.000000Z",
               "connectivity":"unknown"})
    );
    // A later write: createdAt stays, updatedAt moves, the status changes partition, and
    // fields left out of the PUT are removed.
    let later = App::new(
        t.client.clone(),
        ApiConfig::new(&t.name).with_now(ts("2026-04-21T08:00:00Z")),
    );
    let (status, updated) = call(
        &later,
        "PUT",
        "/devices/door_1",
        r#"{"name":"Dock door","type":"actuator","status":"maintenance"}"#,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        updated,
        json!({"deviceId":"door_1","name":"Dock door","type":"actuator","status":"maintenance",
               "createdAt":"2026-04-20T15:00:00.000000Z","updatedAt":"2026-04-21T08:00:00.000000Z",
               "connectivity":"unknown"})
    );
    assert_eq!(get(&later, "/devices/door_1").await.1, updated);
    assert_eq!(
        get(&later, "/devices?status=active").await.1["items"],
        json!([])
    );
    assert_eq!(
        get(&later, "/devices?status=maintenance").await.1["items"][0]["deviceId"],
        "door_1"
    );
}

/// 2,500 readings one second apart, walked by cursor with several page sizes.
#[tokio::test]
async fn a_2500_reading_range_walks_every_reading_once_in_order_both_ways() {
    let t = TestTable::new("api-walk").await;
    put(&t, &sample_device()).await;
    let base = ts("2026-04-20T14:00:00Z");
    let items: Vec<ReadingItem> = (0..2500)
        .map(|i| {
            let r = reading(
                "sensor_01",
                base.plus_millis(i * 1000).unwrap(),
                &[("n", i as f64)],
            );
            ReadingItem::new(&r, None, 30)
        })
        .collect();
    put_all(&t, &items).await;
    let app = app(&t);
    let range = "from=2026-04-20T14:00:00Z&to=2026-04-20T15:00:00Z";
    let expected: Vec<i64> = (0..2500).collect();
    for (order, limit) in [("asc", 100), ("desc", 100), ("asc", 1000), ("desc", 333)] {
        let (got, pages) = walk(
            &app,
            &format!("/devices/sensor_01/readings?{range}&order={order}&limit={limit}"),
        )
        .await;
        let ns: Vec<i64> = got.iter().map(|r| r["n"].as_i64().unwrap()).collect();
        let mut want = expected.clone();
        if order == "desc" {
            want.reverse();
        }
        assert_eq!(ns, want, "{order} limit {limit}");
        assert_eq!(pages, 2500usize.div_ceil(limit), "{order} limit {limit}");
    }
}

/// A hot device whose partition count changed twice inside the range: one partition, then 4
/// shards, then 2. Every reading comes back once, in order, across pages, both ways.
#[tokio::test]
async fn a_partitioned_device_merges_its_partitions_across_pages_both_ways() {
    let t = TestTable::new("api-shards").await;
    put(&t, &sample_device()).await;
    let base = ts("2026-04-20T14:00:00Z");
    let history = LayoutHistory::default()
        .with_change(base.plus_millis(100_000).unwrap(), 4)
        .unwrap()
        .with_change(base.plus_millis(400_000).unwrap(), 2)
        .unwrap();
    put(
        &t,
        &LayoutHistoryItem::new(&dev("sensor_01"), history.clone()),
    )
    .await;
    // 600 readings 997 ms apart (so consecutive readings land on varied shards).
    let readings: Vec<ReadingItem> = (0..600)
        .map(|i| {
            let at = base.plus_millis(i * 997).unwrap();
            let r = reading("sensor_01", at, &[("n", i as f64)]);
            ReadingItem::new(&r, history.partition_at(at), 30)
        })
        .collect();
    let partitions: std::collections::BTreeSet<&str> =
        readings.iter().map(|r| r.pk.as_str()).collect();
    assert_eq!(partitions.len(), 5, "{partitions:?}");
    put_all(&t, &readings).await;
    let app = app(&t);
    for order in ["asc", "desc"] {
        let (got, pages) = walk(
            &app,
            &format!(
                "/devices/sensor_01/readings?from=2026-04-20T14:00:00Z&to=2026-04-20T14:59:59Z&order={order}&limit=37"
            ),
        )
        .await;
        let ns: Vec<i64> = got.iter().map(|r| r["n"].as_i64().unwrap()).collect();
        let mut want: Vec<i64> = (0..600).collect();
        if order == "desc" {
            want.reverse();
        }
        assert_eq!(ns, want, "{order}");
        assert_eq!(pages, 600usize.div_ceil(37));
    }
    // Latest asks every live shard.
    let (_, latest) = get(&app, "/devices/sensor_01/readings/latest").await;
    assert_eq!(latest["n"], 599);
}

#[tokio::test]
async fn expired_readings_are_never_returned() {
    let t = TestTable::new("api-ttl").await;
    put(&t, &sample_device()).await;
    // Written with a 1-day retention: at "now" + 2 days they are expired, though the API's
    // retention (30 days) would still cover them: only the ttl check can drop them.
    for r in sample_readings() {
        put(&t, &ReadingItem::new(&r, None, 1)).await;
    }
    let later = App::new(
        t.client.clone(),
        ApiConfig::new(&t.name).with_now(ts("2026-04-22T15:00:00Z")),
    );
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
}

#[tokio::test]
async fn latest_of_many_devices_in_request_order() {
    // GIVEN device a, whose item still shows an older latest reading (the aggregator
    // refreshes it only now and then), and a hot device b on four shards
    let t = TestTable::new("api-latest").await;
    let mut a = sample_device();
    a.device_id = dev("a");
    a.pk = tidemark_schema::keys::device_pk(&a.device_id);
    a.gsi1sk = tidemark_schema::keys::device_gsi1sk(&a.device_id);
    a.latest = Some(tidemark_schema::LatestReading {
        timestamp: ts("2026-04-20T14:00:00Z"),
        metrics: [(metric("t"), 0.0)].into_iter().collect(),
    });
    put(&t, &a).await;
    let hot = LayoutHistory::default()
        .with_change(ts("2026-04-20T14:00:00Z"), 4)
        .unwrap();
    put(&t, &LayoutHistoryItem::new(&dev("b"), hot.clone())).await;
    let mut items = Vec::new();
    for i in 0..10 {
        let at = ts("2026-04-20T14:10:00Z").plus_millis(i * 1000).unwrap();
        items.push(ReadingItem::new(
            &reading("a", at, &[("t", i as f64)]),
            None,
            30,
        ));
        let at = ts("2026-04-20T14:20:00Z").plus_millis(i * 1001).unwrap();
        items.push(ReadingItem::new(
            &reading("b", at, &[("t", 100.0 + i as f64)]),
            hot.partition_at(at),
            30,
        ));
    }
    put_all(&t, &items).await;
    let app = app(&t);
    // WHEN asked in any order, with unknowns and repeats THEN the newest stored readings
    assert_eq!(
        get(&app, "/latest?ids=b,unknown,a,b").await,
        (
            200,
            json!({"items":[
                {"deviceId":"b","timestamp":"2026-04-20T14:20:09.009000Z","t":109},
                {"deviceId":"a","timestamp":"2026-04-20T14:10:09.000000Z","t":9}
            ],"cursor":null})
        )
    );
    let many: Vec<String> = (0..101).map(|i| format!("d{i}")).collect();
    assert_eq!(
        get(&app, &format!("/latest?ids={}", many.join(",")))
            .await
            .0,
        400
    );
    let hundred: Vec<String> = (0..100).map(|i| format!("d{i}")).collect();
    assert_eq!(
        get(&app, &format!("/latest?ids={}", hundred.join(","))).await,
        (200, json!({"items":[],"cursor":null}))
    );
}

#[tokio::test]
async fn quarantine_of_a_day_merges_its_partitions_with_base64_payloads() {
    let t = TestTable::new("api-quarantine").await;
    let day = ts("2026-04-20T00:00:00Z").day();
    let mut expected = Vec::new();
    for i in 0..30u64 {
        let received = ts("2026-04-20T14:00:00Z")
            .plus_millis(i as i64 * 1000)
            .unwrap();
        let seq = format!("4959033827149025660855969253836157109592157598913658{i:04}");
        let k = QuarantineItem::key_for(day, received, &seq);
        put(
            &t,
            &QuarantineItem {
                pk: k.pk,
                sk: k.sk,
                reason: QuarantineReason::NotJson,
                message: "expected value at line 1 column 1".into(),
                received_at: received,
                sequence_number: seq.clone(),
                sub_record: None,
                explicit_hash_key: None,
                partition_key: "sensor_01".into(),
                partition_key_sha256: None,
                explicit_hash_key_sha256: None,
                message_sha256: None,
                function_version: None,
                size: 3,
                payload: b"\x00{x".to_vec(),
                parts: 1,
                ttl: received.ttl_after_days(QuarantineItem::RETENTION_DAYS),
            },
        )
        .await;
        expected.push(seq);
    }
    let app = app(&t);
    let (_, first) = get(&app, "/quarantine?day=2026-04-20&limit=1").await;
    assert_eq!(
        first["items"][0],
        json!({"reason":"not_json","message":"expected value at line 1 column 1",
               "receivedAt":"2026-04-20T14:00:00.000000Z","sequenceNumber":expected[0],
               "partitionKey":"sensor_01","size":3,"payload":"AHt4"})
    );
    let (all, _) = walk(&app, "/quarantine?day=2026-04-20&limit=7").await;
    let seqs: Vec<&str> = all
        .iter()
        .map(|q| q["sequenceNumber"].as_str().unwrap())
        .collect();
    assert_eq!(seqs, expected);
}

#[tokio::test]
async fn megabyte_quarantined_payloads_come_back_whole_a_few_to_a_page() {
    // GIVEN five quarantined records of 1 MiB each, stored over several items each
    let t = TestTable::new("api-quarantine-big").await;
    let mut sent = Vec::new();
    for i in 0..5u8 {
        let received = ts("2026-04-20T14:00:00Z")
            .plus_millis(i64::from(i))
            .unwrap();
        let seq = format!("4959033827149025660855969253836157109592157598913659{i:04}");
        let payload: Vec<u8> = (0..1024 * 1024).map(|j| (j % 251) as u8 ^ i).collect();
        let q = QuarantineItem::split(
            tidemark_schema::QuarantineSource {
                received,
                sequence: &seq,
                sub_record: None,
                partition_key: "sensor_01",
                explicit_hash_key: None,
            },
            QuarantineReason::PayloadTooLarge,
            "too large".into(),
            &payload,
        );
        assert!(q.record.parts > 1);
        put(&t, &q.record).await;
        for part in &q.parts {
            put(&t, part).await;
        }
        sent.push((seq, payload));
    }
    // WHEN the day is listed with the default limit
    let app = app(&t);
    let (status, first) = get(&app, "/quarantine?day=2026-04-20").await;
    assert_eq!(status, 200);
    let n = first["items"].as_array().unwrap().len();
    assert!(
        (1..5).contains(&n),
        "a page stops at its payload budget: {n}"
    );
    // THEN every record comes back once, in order, with its whole payload
    let (all, _) = walk(&app, "/quarantine?day=2026-04-20").await;
    assert_eq!(all.len(), 5);
    for (got, (seq, payload)) in all.iter().zip(&sent) {
        assert_eq!(got["sequenceNumber"], json!(seq));
        assert_eq!(got["size"], json!(payload.len()));
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(got["payload"].as_str().unwrap())
            .unwrap();
        assert!(bytes == *payload, "payload of {seq} whole");
    }
}

#[tokio::test]
async fn a_quarantined_record_with_fields_too_long_for_an_item_comes_back_cut_with_their_hashes() {
    // GIVEN a user record quarantined with a 500 KB partition key, a 2,000-digit explicit hash
    // key and a 10,000-character message (DynamoDB Local refuses items over 400 KB)
    let t = TestTable::new("api-quarantine-cut").await;
    let (pk, ehk, message) = ("k".repeat(500 * 1024), "9".repeat(2000), "m".repeat(10_000));
    let q = QuarantineItem::split(
        tidemark_schema::QuarantineSource {
            received: ts("2026-04-20T14:00:00Z"),
            sequence: "49590338271490256608559692538361571095921575989136588898",
            sub_record: Some(7),
            partition_key: &pk,
            explicit_hash_key: Some(&ehk),
        },
        QuarantineReason::CorruptAggregate,
        message.clone(),
        b"not json {",
    );
    put(&t, &q.record).await;
    // THEN the listing shows each field cut, with the hash of its whole value beside it
    let (status, page) = get(&app(&t), "/quarantine?day=2026-04-20").await;
    assert_eq!(status, 200);
    let got = &page["items"][0];
    let sha256 = |s: &str| format!("{:x}", <sha2::Sha256 as sha2::Digest>::digest(s));
    assert_eq!(
        got["partitionKey"],
        json!(pk[..QuarantineItem::MAX_KEY_BYTES])
    );
    assert_eq!(got["partitionKeySha256"], json!(sha256(&pk)));
    assert_eq!(
        got["explicitHashKey"],
        json!(ehk[..QuarantineItem::MAX_KEY_BYTES])
    );
    assert_eq!(got["explicitHashKeySha256"], json!(sha256(&ehk)));
    assert_eq!(
        got["message"],
        json!(message[..QuarantineItem::MAX_MESSAGE_BYTES])
    );
    assert_eq!(got["messageSha256"], json!(sha256(&message)));
    assert_eq!(got["subRecord"], json!(7));
    assert_eq!(got["payload"], json!("bm90IGpzb24gew=="));
}

#[tokio::test]
async fn cursors_are_bound_to_their_query() {
    let t = sample_table("api-cursor").await;
    let app = app(&t);
    let q = "/devices/sensor_01/readings?from=2026-04-20T14:00:00Z&to=2026-04-20T15:00:00Z&limit=1";
    let (_, page) = get(&app, q).await;
    let cursor = page["cursor"].as_str().unwrap().to_owned();
    // The same query continues.
    let (status, next) = get(&app, &format!("{q}&cursor={cursor}")).await;
    assert_eq!(
        (status, next["items"][0]["timestamp"].as_str()),
        (200, Some("2026-04-20T14:01:00.000000Z"))
    );
    // Any other query, an altered cursor, or another key: 400 naming the cursor.
    let mut altered = cursor.clone().into_bytes();
    altered[3] = if altered[3] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    for uri in [
        format!("{q}&order=desc&cursor={cursor}"),
        format!(
            "/devices/sensor_01/readings?from=2026-04-20T14:00:01Z&to=2026-04-20T15:00:00Z&limit=1&cursor={cursor}"
        ),
        format!(
            "/devices/sensor_02/readings?from=2026-04-20T14:00:00Z&to=2026-04-20T15:00:00Z&limit=1&cursor={cursor}"
        ),
        format!("/devices/sensor_01/alerts?cursor={cursor}"),
        format!("/alerts?cursor={cursor}"),
        format!("{q}&cursor={altered}"),
    ] {
        let (status, body) = get(&app, &uri).await;
        assert_eq!(status, 400, "{uri}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("invalid cursor"),
            "{body}"
        );
    }
    let other_key = App::new(
        t.client.clone(),
        ApiConfig::new(&t.name)
            .with_now(now())
            .with_cursor_secret(b"another key, another deployment".to_vec()),
    );
    assert_eq!(
        get(&other_key, &format!("{q}&cursor={cursor}")).await.0,
        400
    );
}

#[tokio::test]
async fn bad_inputs_are_4xx_naming_the_parameter() {
    let t = sample_table("api-bad").await;
    let app = app(&t);
    // One byte past the body limit (16 KiB and room for the largest gateway list).
    let big = format!(
        r#"{{"name":"{}"}}"#,
        "x".repeat(tidemark_api::ApiConfig::DEFAULT_MAX_BODY - 10)
    );
    let r = "/devices/sensor_01/readings";
    let cases: Vec<(&str, String, &str, u16, &str)> = vec![
        (
            "GET",
            format!("{r}?from=2026-04-20T15:00:00Z&to=2026-04-20T14:00:00Z"),
            "",
            400,
            "from",
        ),
        ("GET", format!("{r}?limit=0"), "", 400, "limit"),
        ("GET", format!("{r}?limit=5000"), "", 400, "limit"),
        ("GET", format!("{r}?limit=ten"), "", 400, "limit"),
        ("GET", format!("{r}?cursor=garbage"), "", 400, "cursor"),
        (
            "GET",
            format!("{r}?cursor=e30.AAAAAAAAAAAAAAAAAAAAAA"),
            "",
            400,
            "cursor",
        ),
        ("GET", format!("{r}?from=yesterday"), "", 400, "from"),
        ("GET", format!("{r}?to=-5"), "", 400, "to"),
        ("GET", format!("{r}?order=sideways"), "", 400, "order"),
        ("GET", format!("{r}?colour=red"), "", 400, "colour"),
        ("GET", format!("{r}?limit=1&limit=2"), "", 400, "limit"),
        ("GET", "/devices/a%23b".into(), "", 400, "id"),
        ("GET", "/devices/a%23b/readings".into(), "", 400, "id"),
        ("PUT", "/devices/DEVICE%23x%23S1".into(), "{}", 400, "id"),
        (
            "GET",
            format!("/devices/{}", "x".repeat(129)),
            "",
            400,
            "id",
        ),
        ("GET", "/devices/%zz".into(), "", 400, "path"),
        (
            "GET",
            "/devices/sensor_01/aggregates?period=weekly".into(),
            "",
            400,
            "period",
        ),
        (
            "PUT",
            "/devices/sensor_01".into(),
            "{\"name\":",
            400,
            "body",
        ),
        ("PUT", "/devices/sensor_01".into(), "", 400, "body"),
        (
            "PUT",
            "/devices/sensor_01".into(),
            "{\"type\":\"toaster\"}",
            400,
            "type",
        ),
        (
            "PUT",
            "/devices/sensor_01".into(),
            "{\"status\":\"gone\"}",
            400,
            "status",
        ),
        ("PUT", "/devices/sensor_01".into(), &big, 413, ""),
        ("GET", "/devices?status=lost".into(), "", 400, "status"),
        (
            "GET",
            "/alerts?severity=apocalyptic".into(),
            "",
            400,
            "severity",
        ),
        ("GET", "/alerts?state=sleeping".into(), "", 400, "state"),
        ("GET", "/latest".into(), "", 400, "ids"),
        ("GET", "/latest?ids=a,,b".into(), "", 400, "ids"),
        ("GET", "/latest?ids=a%23b".into(), "", 400, "ids"),
        ("GET", "/quarantine?day=2026-02-30".into(), "", 400, "day"),
        (
            "POST",
            "/devices/sensor_01/alerts/not-an-alert/ack".into(),
            "",
            400,
            "alertId",
        ),
        (
            "GET",
            "/devices/sensor_01/readings/oldest".into(),
            "",
            404,
            "",
        ),
        ("GET", "/nothing/here".into(), "", 404, ""),
        ("DELETE", "/devices/sensor_01".into(), "", 405, ""),
        ("POST", "/devices/sensor_01/readings".into(), "", 405, ""),
        (
            "GET",
            "/devices/unknown_device/readings".into(),
            "",
            404,
            "",
        ),
        ("GET", "/devices/unknown_device/alerts".into(), "", 404, ""),
        (
            "GET",
            "/devices/unknown_device/aggregates".into(),
            "",
            404,
            "",
        ),
    ];
    for (method, uri, body, status, param) in cases {
        let (got, resp) = call(&app, method, &uri, body).await;
        assert_eq!(got, status, "{method} {uri}: {resp}");
        let err = &resp["error"];
        assert!(err["code"].is_string(), "{resp}");
        let msg = err["message"].as_str().unwrap();
        if !param.is_empty() {
            assert!(
                msg.starts_with(&format!("invalid {param}:")),
                "{method} {uri}: {msg}"
            );
        }
        assert!(!msg.contains(&t.name), "table name leaked: {msg}");
    }
    let resp = app
        .handle(request("DELETE", "/devices/sensor_01", ""))
        .await;
    assert_eq!(resp.headers()["allow"], "PUT, GET");
}

#[tokio::test]
async fn store_failures_are_500_without_internal_details() {
    // GIVEN a table that does not exist
    let client = tidemark_testkit::dynamodb().await;
    let app = App::new(
        client,
        ApiConfig::new("no-such-table-anywhere").with_now(now()),
    );
    let (status, body) = get(&app, "/devices/sensor_01").await;
    assert_eq!(status, 500);
    assert_eq!(
        body,
        json!({"error":{"code":"internal","message":"internal error"}})
    );
}

#[tokio::test]
async fn device_alerts_page_newest_first() {
    let t = TestTable::new("api-alert-pages").await;
    put(&t, &sample_device()).await;
    let base = ts("2026-04-20T00:00:00Z");
    let mut alerts = Vec::new();
    for i in 0..25 {
        let mut a = sample_alert();
        a.opened_at = base.plus_millis(i * 60_000).unwrap();
        a.alert_id = tidemark_schema::AlertId::for_breach(
            a.opened_at,
            &metric("temperature"),
            tidemark_schema::AlertRule::Max,
        );
        a.sk = tidemark_schema::keys::alert_sk(&a.alert_id);
        a.gsi1sk = Some(tidemark_schema::keys::alert_gsi1sk(&a.alert_id));
        a.severity = if i % 2 == 0 {
            Severity::Critical
        } else {
            Severity::Warning
        };
        // Spread over the severity's listing partitions, and a few under the plain key
        // alerts were listed under before partitions.
        let own = tidemark_schema::keys::severity_gsi1pk(a.severity, &a.pk);
        let n = tidemark_schema::keys::listing_partition_of(&a.pk);
        a.gsi1pk = Some(match i % 3 {
            0 => format!("ALERT_SEVERITY#{}", a.severity),
            1 => own,
            _ => format!("ALERT_SEVERITY#{}#{}", a.severity, (n + 1) % 16),
        });
        alerts.push(a);
    }
    put_all(&t, &alerts).await;
    let app = app(&t);
    let want: Vec<String> = alerts
        .iter()
        .rev()
        .map(|a| a.alert_id.to_string())
        .collect();
    let (got, pages) = walk(&app, "/devices/sensor_01/alerts?limit=4").await;
    let ids: Vec<&str> = got.iter().map(|a| a["alertId"].as_str().unwrap()).collect();
    assert_eq!((ids, pages), (want.iter().map(String::as_str).collect(), 7));
    // Fleet-wide over both severities and every partition, merged newest first.
    let (got, _) = walk(&app, "/alerts?limit=3&state=open").await;
    let ids: Vec<&str> = got.iter().map(|a| a["alertId"].as_str().unwrap()).collect();
    assert_eq!(ids, want.iter().map(String::as_str).collect::<Vec<_>>());
}

/// GIVEN a fleet registered with `STATUS_PARTITIONS=4`, and one device from before status
/// sharding under the plain status key
/// WHEN listing by status, or every status
/// THEN every device comes once, in device-ID order, across pages, from every partition.
#[tokio::test]
async fn status_listing_merges_every_status_shard_across_pages() {
    let t = TestTable::new("api-status-shards").await;
    let mut config = ApiConfig::new(&t.name).with_now(now());
    config.status_partitions = 4;
    let app = App::new(t.client.clone(), config);
    let mut active = vec!["sensor_01".to_owned()];
    for i in 0..30 {
        let id = format!("dev_{i:02}");
        let status = if i % 3 == 0 { "maintenance" } else { "active" };
        let (code, body) = call(
            &app,
            "PUT",
            &format!("/devices/{id}"),
            &json!({ "status": status }).to_string(),
        )
        .await;
        assert_eq!(code, 201, "{body}");
        if status == "active" {
            active.push(id);
        }
    }
    put(&t, &sample_device()).await;
    active.sort();

    // The devices really are spread over the status partitions.
    let scan = t.client.scan().table_name(&t.name).send().await.unwrap();
    let partitions: std::collections::BTreeSet<String> = scan
        .items
        .unwrap_or_default()
        .iter()
        .filter_map(|i| i.get("gsi1pk").and_then(|v| v.as_s().ok()).cloned())
        .filter(|p| p.starts_with("DEVICE_STATUS#active"))
        .collect();
    assert!(
        partitions.contains("DEVICE_STATUS#active"),
        "{partitions:?}"
    );
    assert!(partitions.len() >= 4, "{partitions:?}");

    let ids = |items: Vec<Value>| -> Vec<String> {
        items
            .iter()
            .map(|d| d["deviceId"].as_str().unwrap().to_owned())
            .collect()
    };
    let (items, pages) = walk(&app, "/devices?status=active&limit=4").await;
    assert_eq!(ids(items), active);
    assert_eq!(pages, active.len().div_ceil(4));

    let (items, _) = walk(&app, "/devices?limit=7").await;
    let mut all: Vec<String> = (0..30).map(|i| format!("dev_{i:02}")).collect();
    all.push("sensor_01".into());
    assert_eq!(ids(items), all);
}

#[tokio::test]
async fn shard_changes_are_scheduled_ahead_replaced_before_use_and_never_lost_to_a_race() {
    let t = sample_table("api-shards-put").await;
    let app = app(&t); // 15:00
    let at = |now: &str| App::new(t.client.clone(), ApiConfig::new(&t.name).with_now(ts(now)));

    // Unknown devices and changes sooner than ingest can learn of them are refused.
    let (status, _) = call(&app, "PUT", "/devices/nobody/shards", r#"{"count":4}"#).await;
    assert_eq!(status, 404);
    let (status, body) = call(
        &app,
        "PUT",
        "/devices/sensor_01/shards",
        r#"{"count":4,"effectiveFrom":"2026-04-20T15:05:00Z"}"#,
    )
    .await;
    assert_eq!(status, 400);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("effectiveFrom") && message.contains("2026-04-20T15:05:36.000000Z"),
        "{message}"
    );
    assert_eq!(layout_history_version(&t, "sensor_01").await, None);

    // A change at 16:00 is announced; the count now is still 1.
    let four_at_16 = json!({"deviceId":"sensor_01","count":1,
        "epochs":[{"from":"2026-04-20T16:00:00.000000Z","count":4}]});
    let body = r#"{"count":4,"effectiveFrom":"2026-04-20T16:00:00Z"}"#;
    assert_eq!(
        call(&app, "PUT", "/devices/sensor_01/shards", body).await,
        (200, four_at_16.clone())
    );
    assert_eq!(
        get(&app, "/devices/sensor_01/shards").await,
        (200, four_at_16.clone())
    );
    assert_eq!(
        layout_history_version(&t, "sensor_01").await.as_deref(),
        Some("1")
    );
    // Repeating it writes nothing.
    assert_eq!(
        call(&app, "PUT", "/devices/sensor_01/shards", body).await,
        (200, four_at_16)
    );
    assert_eq!(
        layout_history_version(&t, "sensor_01").await.as_deref(),
        Some("1")
    );

    // At 15:50 no container can have used the 16:00 change yet: it is replaced.
    let (status, replaced) = call(
        &at("2026-04-20T15:50:00Z"),
        "PUT",
        "/devices/sensor_01/shards",
        r#"{"count":8,"effectiveFrom":"2026-04-20T16:10:00Z"}"#,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        replaced["epochs"],
        json!([{"from":"2026-04-20T16:10:00.000000Z","count":8}])
    );
    let later = at("2026-04-20T16:20:00Z");
    assert_eq!(get(&later, "/devices/sensor_01/shards").await.1["count"], 8);

    // Racing changes: every answer is a 200 or a 409, and each 200 is one stored version
    // (none overwrote another unseen), the last of them the stored history.
    let bodies: Vec<String> = [2, 3, 4, 5, 6, 7, 9]
        .iter()
        .map(|n| json!({"count": n, "effectiveFrom": "2026-04-20T17:00:00Z"}).to_string())
        .collect();
    let answers = futures::future::join_all(
        bodies
            .iter()
            .map(|b| call(&later, "PUT", "/devices/sensor_01/shards", b)),
    )
    .await;
    let won: Vec<&Value> = answers
        .iter()
        .filter(|(s, _)| *s == 200)
        .map(|(_, b)| b)
        .collect();
    assert!(
        answers.iter().all(|(s, _)| *s == 200 || *s == 409),
        "{answers:?}"
    );
    assert!(!won.is_empty());
    assert_eq!(
        layout_history_version(&t, "sensor_01").await,
        Some((2 + won.len()).to_string())
    );
    let stored = get(&later, "/devices/sensor_01/shards").await.1;
    assert!(won.contains(&&stored), "{stored} not among {won:?}");
    assert_eq!(
        stored["epochs"][0],
        json!({"from":"2026-04-20T16:10:00.000000Z","count":8})
    );
}

#[tokio::test]
async fn a_readings_cursor_overtaken_by_the_retention_edge_continues_from_the_edge() {
    // GIVEN 48 hourly readings kept one day each (ttl = time + 1 day)
    let t = TestTable::new("api-edge").await;
    put(&t, &sample_device()).await;
    let t0 = ts("2026-04-18T00:00:00Z");
    let at = |k: i64| t0.plus_millis(k * 3_600_000).unwrap();
    let items: Vec<_> = (0..48)
        .map(|k| ReadingItem::new(&reading("sensor_01", at(k), &[("n", k as f64)]), None, 1))
        .collect();
    put_all(&t, &items).await;
    let with_now = |now| {
        let mut c = ApiConfig::new(&t.name).with_now(now);
        c.retention_days = 1;
        App::new(t.client.clone(), c)
    };
    // WHEN a walk from the beginning of time takes its first page at t0 + 1 day
    let uri =
        "/devices/sensor_01/readings?from=2026-01-01T00:00:00Z&to=2026-04-20T00:00:00Z&limit=5";
    let (status, first) = get(&with_now(at(24)), uri).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["items"][4]["n"], 4.0);
    let cursor = first["cursor"].as_str().unwrap().to_owned();
    // AND continues ten hours later, when the edge (t0 + 10 h) has passed its position
    let next = format!("{uri}&cursor={}", urlencode(&cursor));
    let (status, second) = get(&with_now(at(34)), &next).await;
    // THEN the next page starts at the edge: nothing unexpired is skipped, no 500
    assert_eq!(status, 200, "{second}");
    let ns: Vec<f64> = second["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["n"].as_f64().unwrap())
        .collect();
    assert_eq!(ns, vec![10.0, 11.0, 12.0, 13.0, 14.0]);
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn a_quarantine_listing_of_today_started_before_midnight_goes_on_after_it() {
    // GIVEN six records quarantined late on 2026-04-20
    let t = TestTable::new("api-quarantine-midnight").await;
    let day = ts("2026-04-20T00:00:00Z").day();
    for i in 0..6i64 {
        let received = ts("2026-04-20T23:50:00Z").plus_millis(i * 1000).unwrap();
        let seq = format!("49590338271490256608559692538361571095921575989136{i:06}");
        let k = QuarantineItem::key_for(day, received, &seq);
        put(
            &t,
            &QuarantineItem {
                pk: k.pk,
                sk: k.sk,
                reason: QuarantineReason::NotJson,
                message: "expected value at line 1 column 1".into(),
                received_at: received,
                sequence_number: seq,
                sub_record: None,
                explicit_hash_key: None,
                partition_key: "sensor_01".into(),
                partition_key_sha256: None,
                explicit_hash_key_sha256: None,
                message_sha256: None,
                function_version: None,
                size: 3,
                payload: b"\x00{x".to_vec(),
                parts: 1,
                ttl: received.ttl_after_days(QuarantineItem::RETENTION_DAYS),
            },
        )
        .await;
    }
    let at = |now: &str| App::new(t.client.clone(), ApiConfig::new(&t.name).with_now(ts(now)));
    // WHEN the listing without `day` takes its first page at 23:59
    let (status, first) = get(&at("2026-04-20T23:59:00Z"), "/quarantine?limit=2").await;
    assert_eq!(status, 200, "{first}");
    let mut seen = first["items"].as_array().unwrap().len();
    let mut cursor = first["cursor"].as_str().map(str::to_owned);
    // AND the rest after midnight
    let after = at("2026-04-21T00:01:00Z");
    while let Some(c) = cursor {
        let (status, page) = get(&after, &format!("/quarantine?limit=2&cursor={c}")).await;
        // THEN every page is served, of the day the listing started on
        assert_eq!(status, 200, "{page}");
        seen += page["items"].as_array().unwrap().len();
        cursor = page["cursor"].as_str().map(str::to_owned);
    }
    assert_eq!(seen, 6);
    // AND a fresh listing after midnight is of the new day
    let (_, today) = get(&after, "/quarantine").await;
    assert_eq!(today["items"], json!([]));
}

#[tokio::test]
async fn a_paged_bucket_is_one_aggregate_with_every_metric_of_its_pages() {
    use tidemark_schema::{AggregateItem, Period, Stats};
    // GIVEN a gateway's hour of 2,000 metrics stored in three pages (as the aggregator
    // splits it), and an ordinary hour after it
    let t = TestTable::new("api-paged").await;
    put(&t, &sample_device()).await;
    let hour = Period::Hourly.bucket(ts("2026-04-20T14:00:00Z"));
    let page = |n: u16, tags: std::ops::Range<usize>, first: &str, last: &str| {
        let k = AggregateItem::page_key(&dev("sensor_01"), hour, n);
        AggregateItem {
            pk: k.pk,
            sk: k.sk,
            metrics: tags
                .map(|i| {
                    (
                        metric(&format!("tag{i:04}")),
                        Stats::at(ts(first), i as f64),
                    )
                })
                .collect(),
            first_at: ts(first),
            last_at: ts(last),
            applied: Default::default(),
            marks: Default::default(),
            marked_at: 0,
            from_table: false,
            folded: Default::default(),
            version: 1,
            sealed: n < 2,
            open: false,
        }
    };
    put_all(
        &t,
        &[
            page(0, 0..700, "2026-04-20T14:10:00Z", "2026-04-20T14:20:00Z"),
            page(1, 700..1400, "2026-04-20T14:05:00Z", "2026-04-20T14:15:00Z"),
            page(
                2,
                1400..2000,
                "2026-04-20T14:12:00Z",
                "2026-04-20T14:40:00Z",
            ),
        ],
    )
    .await;
    let next = ts("2026-04-20T15:00:00Z");
    put(
        &t,
        &aggregate(
            "sensor_01",
            Period::Hourly,
            next,
            &[reading("sensor_01", next, &[("temperature", 21.0)])],
        ),
    )
    .await;
    // WHEN the hours are asked for
    let (status, body) = get(
        &app(&t),
        "/devices/sensor_01/aggregates?period=hourly&from=2026-04-20T00:00:00Z&to=2026-04-20T23:59:59Z",
    )
    .await;
    // THEN the paged hour is one aggregate holding all its metrics, spanning its pages
    assert_eq!(status, 200, "{body}");
    let items = body["items"].as_array().unwrap();
    assert_eq!(
        items.len(),
        2,
        "no page shows up as an aggregate of its own"
    );
    let paged = &items[0];
    assert_eq!(paged["start"], "2026-04-20T14:00:00.000000Z");
    assert_eq!(paged["metrics"].as_object().unwrap().len(), 2_000);
    assert_eq!(
        paged["metrics"]["tag1999"],
        json!({"count":1,"sum":1999,"min":1999,"max":1999,"avg":1999})
    );
    assert_eq!(paged["firstAt"], "2026-04-20T14:05:00.000000Z");
    assert_eq!(paged["lastAt"], "2026-04-20T14:40:00.000000Z");
    assert_eq!(
        items[1]["metrics"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["temperature"]
    );
}

#[tokio::test]
async fn offline_settings_connectivity_and_the_offline_listing() {
    let t = TestTable::new("api-offline").await;
    let app = App::new(t.client.clone(), ApiConfig::new(&t.name).with_now(now()));
    // A device's window and severity are stored, shown, and refused when out of range,
    // naming the field.
    let (status, d) = call(
        &app,
        "PUT",
        "/devices/pump_1",
        r#"{"name":"Pump","offlineAfterSeconds":300,"offlineSeverity":"critical"}"#,
    )
    .await;
    assert_eq!(status, 201, "{d}");
    assert_eq!(
        (
            d["offlineAfterSeconds"].clone(),
            d["offlineSeverity"].clone()
        ),
        (json!(300), json!("critical"))
    );
    // Never seen yet: unknown.
    assert_eq!(d["connectivity"], "unknown");
    for (body, field) in [
        (r#"{"offlineAfterSeconds":30}"#, "offlineAfterSeconds"),
        (r#"{"offlineAfterSeconds":-1}"#, "offlineAfterSeconds"),
        (r#"{"offlineAfterSeconds":"5m"}"#, "offlineAfterSeconds"),
        (r#"{"offlineSeverity":"loud"}"#, "offlineSeverity"),
    ] {
        let (status, e) = call(&app, "PUT", "/devices/pump_1", body).await;
        assert_eq!(status, 400, "{body}: {e}");
        let msg = e["error"]["message"].as_str().unwrap();
        assert!(
            msg.starts_with(&format!("invalid {field}:")),
            "{body}: {msg}"
        );
    }
    // GIVEN three offline devices (as the watchdog leaves them, each in its listing
    // partition), one left offline under the one key of before partitions, and one online
    let at = ts("2026-04-20T14:00:00Z");
    for id in ["dead_3", "dead_1", "dead_2", "dead_0", "live_1"] {
        let mut d = sample_device();
        d.device_id = dev(id);
        d.pk = tidemark_schema::keys::device_pk(&d.device_id);
        d.gsi1sk = tidemark_schema::keys::device_gsi1sk(&d.device_id);
        d.offline_after_seconds = Some(120);
        d.last_arrival_at = Some(at);
        if id.starts_with("dead") {
            d.offline = Some(tidemark_schema::OfflineState {
                alert: tidemark_schema::AlertId::for_offline(at.plus_millis(120_000).unwrap()),
                since: at,
                counted: Vec::new(),
            });
            d.gsi2pk = Some(if id == "dead_0" {
                tidemark_schema::keys::OFFLINE_GSI2PK.to_owned()
            } else {
                tidemark_schema::keys::offline_gsi2pk(&d.device_id)
            });
            d.gsi2sk = Some(tidemark_schema::keys::offline_gsi2sk(&d.device_id));
        } else {
            d.gsi2pk = Some(tidemark_schema::keys::watch_gsi2pk(&d.device_id));
            d.gsi2sk = Some(tidemark_schema::keys::watch_gsi2sk(
                at.plus_millis(120_000).unwrap(),
            ));
        }
        put(&t, &d).await;
    }
    // THEN each shows its connectivity, and the listing pages through the offline ones in
    // ID order, whichever partition holds them
    assert_eq!(
        get(&app, "/devices/dead_1").await.1["connectivity"],
        "offline"
    );
    assert_eq!(
        get(&app, "/devices/live_1").await.1["connectivity"],
        "online"
    );
    let (status, page) = get(&app, "/devices?connectivity=offline&limit=2").await;
    assert_eq!(status, 200);
    let ids = |p: &Value| -> Vec<String> {
        p["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["deviceId"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(ids(&page), ["dead_0", "dead_1"]);
    assert!(page["items"][0]["offline"]["since"].is_string());
    let cursor = page["cursor"].as_str().unwrap();
    let (_, rest) = get(
        &app,
        &format!("/devices?connectivity=offline&limit=2&cursor={cursor}"),
    )
    .await;
    assert_eq!(ids(&rest), ["dead_2", "dead_3"]);
    let cursor = rest["cursor"].as_str().unwrap_or_default();
    if !cursor.is_empty() {
        let (_, last) = get(
            &app,
            &format!("/devices?connectivity=offline&limit=2&cursor={cursor}"),
        )
        .await;
        assert!(ids(&last).is_empty());
        assert!(last["cursor"].is_null());
    }
    for uri in [
        "/devices?connectivity=online",
        "/devices?connectivity=offline&status=active",
    ] {
        let (status, e) = get(&app, uri).await;
        assert_eq!(status, 400, "{uri}");
        let msg = e["error"]["message"].as_str().unwrap();
        assert!(msg.starts_with("invalid connectivity:"), "{uri}: {msg}");
    }
}
