//! The handlers over the in-memory store: the merge of many partitions under short
//! DynamoDB pages (the 1 MB cap), for many layout histories and page sizes, without a
//! database. The same behaviours run against DynamoDB Local in `local/local_dynamodb.rs`.

use crate::common::*;
use tidemark_api::memory::MemoryStore;
use tidemark_api::{ApiConfig, App};
use tidemark_schema::{LayoutHistory, LayoutHistoryItem, ReadingItem};

/// A small deterministic generator (no test depends on luck).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

#[tokio::test]
async fn partitioned_walks_return_every_reading_once_in_order_under_short_pages() {
    let base = ts("2026-04-20T14:00:00Z");
    let mut rng = Lcg(7);
    for case in 0..40 {
        // GIVEN a random layout history with up to three changes inside the hour
        let mut history = LayoutHistory::default();
        let mut at = 0;
        for _ in 0..rng.next(4) {
            at += 1 + rng.next(1_200_000) as i64;
            history = history
                .with_change(base.plus_millis(at).unwrap(), 1 + rng.next(6) as u16)
                .unwrap();
        }
        // AND readings at random instants, on the shard in force at each
        let store = MemoryStore::new().with_page_cap(1 + rng.next(5) as usize);
        store.put_entity(&sample_device()).unwrap();
        store
            .put_entity(&LayoutHistoryItem::new(&dev("sensor_01"), history.clone()))
            .unwrap();
        let mut times: Vec<i64> = (0..(20 + rng.next(150)))
            .map(|_| rng.next(3_600_000) as i64)
            .collect();
        times.sort();
        times.dedup();
        for (i, ms) in times.iter().enumerate() {
            let t = base.plus_millis(*ms).unwrap();
            let r = reading("sensor_01", t, &[("n", i as f64)]);
            store
                .put_entity(&ReadingItem::new(&r, history.partition_at(t), 30))
                .unwrap();
        }
        let app = App::with_store(store, ApiConfig::new("memory").with_now(now()));
        let limit = 1 + rng.next(40);
        // WHEN the range is walked page by page, both ways
        for order in ["asc", "desc"] {
            let (got, _) = walk(
                &app,
                &format!(
                    "/devices/sensor_01/readings?from=2026-04-20T14:00:00Z&to=2026-04-20T15:00:00Z&order={order}&limit={limit}"
                ),
            )
            .await;
            // THEN every reading comes back exactly once, in order
            let ns: Vec<i64> = got.iter().map(|r| r["n"].as_i64().unwrap()).collect();
            let mut want: Vec<i64> = (0..times.len() as i64).collect();
            if order == "desc" {
                want.reverse();
            }
            assert_eq!(ns, want, "case {case}, {order}, limit {limit}, {history:?}");
        }
    }
}

#[tokio::test]
async fn put_device_keeps_created_at_and_replaces_the_registration() {
    let store = MemoryStore::new();
    let first = App::with_store(store, ApiConfig::new("memory").with_now(now()));
    let (status, _) = call(
        &first,
        "PUT",
        "/devices/d1",
        r#"{"name":"A","firmware":"1.0"}"#,
    )
    .await;
    assert_eq!(status, 201);
    let (status, again) = call(&first, "PUT", "/devices/d1", r#"{"status":"inactive"}"#).await;
    assert_eq!(status, 200);
    assert_eq!(
        again,
        serde_json::json!({"deviceId":"d1","status":"inactive",
            "createdAt":"2026-04-20T15:00:00.000000Z","updatedAt":"2026-04-20T15:00:00.000000Z",
            "connectivity":"unknown"})
    );
}

#[tokio::test]
async fn the_memory_store_refuses_a_shard_change_from_a_stale_version_like_dynamodb() {
    use tidemark_api::store::LayoutWriter;
    let store = MemoryStore::new();
    let id = dev("hot");
    let h = LayoutHistory::default()
        .with_change(ts("2026-04-20T16:00:00Z"), 4)
        .unwrap();
    assert!(store.replace_layouts(&id, &h, 0).await.unwrap());
    assert!(
        !store
            .replace_layouts(&id, &LayoutHistory::default(), 0)
            .await
            .unwrap()
    );
    assert!(
        store
            .replace_layouts(&id, &LayoutHistory::default(), 1)
            .await
            .unwrap()
    );
    assert!(!store.replace_layouts(&id, &h, 1).await.unwrap());
}

#[tokio::test]
async fn latest_of_many_partitioned_devices_is_refused_above_the_query_bound() {
    // GIVEN ten devices of 64 partitions each (65 with the single one before)
    let store = MemoryStore::new();
    let history = LayoutHistory::default()
        .with_change(ts("2026-04-20T00:00:00Z"), 64)
        .unwrap();
    let ids: Vec<String> = (0..10).map(|i| format!("hot_{i}")).collect();
    for id in &ids {
        store
            .put_entity(&LayoutHistoryItem::new(&dev(id), history.clone()))
            .unwrap();
    }
    let app = App::with_store(store, ApiConfig::new("memory").with_now(now()));
    // WHEN all ten are asked for at once THEN it is a 400 naming the partition limit and
    // the bound
    let (status, body) = get(&app, &format!("/latest?ids={}", ids.join(","))).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "too_much", "{body}");
    assert_eq!(body["error"]["limit"], "partitions", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("650 partitions") && message.contains("400"),
        "{message}"
    );
    // AND six of them (390 queries) are answered
    let (status, body) = get(&app, &format!("/latest?ids={}", ids[..6].join(","))).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn the_shards_routes_are_deprecated_and_link_the_layout_route_that_replaces_them() {
    let store = MemoryStore::new();
    store.put_entity(&sample_device()).unwrap();
    let app = App::with_store(store, ApiConfig::new("memory").with_now(now()));
    // Both /shards routes answer as before, and say they are deprecated and what replaces
    // them; a 4xx of theirs does too (a failing old client is the one to tell).
    for (method, body) in [("GET", ""), ("PUT", r#"{"count":2}"#), ("PUT", "{")] {
        let resp = app
            .handle(request(method, "/devices/sensor_01/shards", body))
            .await;
        assert_eq!(
            resp.headers()["deprecation"],
            "@1795651200",
            "{method} {body}"
        );
        assert_eq!(
            resp.headers()["link"],
            r#"</devices/sensor_01/layout>; rel="successor-version""#
        );
    }
    // The route that replaces them is not deprecated.
    let resp = app
        .handle(request("GET", "/devices/sensor_01/layout", ""))
        .await;
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get("deprecation").is_none());
    assert!(resp.headers().get("link").is_none());
}

/// GIVEN open alerts of every severity on 1,000 devices, so every listing partition of every
/// severity holds many
/// WHEN the fleet-wide listing is walked at the smallest and the largest page
/// THEN each alert comes once, and every cursor fits the request line API Gateway takes
/// (what `MAX_CURSOR_LEN` holds it to), however many partitions it has to resume.
#[tokio::test]
async fn a_fleet_wide_alerts_cursor_over_every_listing_partition_stays_short() {
    use tidemark_schema::{Severity, keys};
    let store = MemoryStore::new();
    let mut want = std::collections::BTreeSet::new();
    for i in 0..1_000 {
        let mut a = tidemark_testkit::open_alert(&format!("sensor_{i:04}"));
        a.severity = Severity::ALL[i % Severity::ALL.len()];
        a.gsi1pk = Some(keys::severity_gsi1pk(a.severity, &a.pk));
        want.insert((a.pk.clone(), a.alert_id.to_string()));
        store.put_entity(&a).unwrap();
    }
    let app = App::with_store(store, ApiConfig::new("memory").with_now(now()));
    for limit in [1, 50, 1000] {
        let mut got = std::collections::BTreeSet::new();
        let mut cursor: Option<String> = None;
        let mut longest = 0;
        loop {
            let uri = match &cursor {
                None => format!("/alerts?limit={limit}"),
                Some(c) => format!("/alerts?limit={limit}&cursor={c}"),
            };
            let (status, body) = get(&app, &uri).await;
            assert_eq!(status, 200, "{body}");
            for a in body["items"].as_array().unwrap() {
                let pk = format!("DEVICE#{}", a["deviceId"].as_str().unwrap());
                assert!(got.insert((pk, a["alertId"].as_str().unwrap().to_owned())));
            }
            match body["cursor"].as_str() {
                Some(c) => {
                    longest = longest.max(c.len());
                    cursor = Some(c.to_owned());
                }
                None => break,
            }
            if limit == 1 && got.len() >= 100 {
                break;
            }
        }
        assert!(
            longest <= tidemark_api::cursor::MAX_CURSOR_LEN,
            "limit {limit}: a cursor of {longest} bytes"
        );
        if limit > 1 {
            assert_eq!(got, want, "limit {limit}");
        }
        eprintln!("limit {limit}: longest cursor {longest} bytes");
    }
}
