//! Device tags through the API (docs/design.md §2 "Tags and groups"): `PUT /devices/{id}`
//! declares them (versioned, effective from `tagsFrom`), `GET /devices/{id}` shows them, and
//! `GET /devices?tag=…` lists a tag's members from its index, with the other filters. Each
//! behaviour runs over the in-memory store and against DynamoDB Local.

use std::collections::BTreeSet;

use crate::common::*;
use serde_json::{Value, json};
use tidemark_api::memory::MemoryStore;
use tidemark_api::{ApiConfig, App, Store};
use tidemark_schema::{
    DeviceStatus, LayoutLead, Tag, TagHistoryItem, TagIndexItem, Timestamp, keys,
};
use tidemark_testkit::TestTable;

fn memory_app(page_cap: usize) -> App<MemoryStore> {
    App::with_store(
        MemoryStore::new().with_page_cap(page_cap),
        ApiConfig::new("memory").with_now(now()),
    )
}

async fn local_app(label: &str) -> (TestTable, App) {
    let t = TestTable::new(label).await;
    let app = app(&t);
    (t, app)
}

/// The moment a change made now takes effect by default.
fn earliest() -> Timestamp {
    LayoutLead::default().earliest_change(now())
}

fn tag(s: &str) -> Tag {
    Tag::parse(s).unwrap()
}

async fn put_device<S: Store>(app: &App<S>, id: &str, body: Value) -> (u16, Value) {
    call(app, "PUT", &format!("/devices/{id}"), &body.to_string()).await
}

/// The device's stored tag history.
async fn history<S: Store>(app: &App<S>, id: &str) -> TagHistoryItem {
    let item = app
        .store()
        .get(TagHistoryItem::key(&dev(id)), true)
        .await
        .unwrap()
        .expect("a tag history item");
    tidemark_store::from_item(item).unwrap()
}

fn assert_bad(r: (u16, Value), field: &str, what: &str) {
    assert_eq!(r.0, 400, "{what}: {}", r.1);
    let msg = r.1["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with(&format!("invalid {field}:")),
        "{what}: {msg}"
    );
}

fn ids(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .map(|d| d["deviceId"].as_str().unwrap().to_owned())
        .collect()
}

// ---- behaviours, each run over both stores ----

async fn tags_round_trip<S: Store>(app: &App<S>) {
    // WHEN a device is registered with tags
    let (status, d) = put_device(
        app,
        "pump_1",
        json!({"name":"Pump","tags":{"site":"A","line":"3"}}),
    )
    .await;
    // THEN the answer and the device carry them, from the earliest honourable moment
    assert_eq!(status, 201, "{d}");
    assert_eq!(d["tags"], json!({"line":"3","site":"A"}));
    assert_eq!(d["tagsFrom"], earliest().to_string());
    let (_, got) = get(app, "/devices/pump_1").await;
    assert_eq!(
        (got["tags"].clone(), got["tagsFrom"].clone()),
        (d["tags"].clone(), d["tagsFrom"].clone())
    );
    // AND a PUT without `tags` leaves them as they are
    let (status, again) = put_device(app, "pump_1", json!({"name":"Pump 2"})).await;
    assert_eq!(status, 200);
    assert_eq!(again["tags"], d["tags"]);
    assert_eq!(again["name"], "Pump 2");
    assert_eq!(
        history(app, "pump_1").await.version,
        1,
        "nothing re-declared"
    );
    // AND `location.site` is the tag site: over the tags as they are when `tags` is omitted,
    // added to `tags` when they have none
    let (_, moved) = put_device(
        app,
        "pump_1",
        json!({"location":{"lat":1.5,"lon":2.5,"site":"B"}}),
    )
    .await;
    assert_eq!(moved["tags"], json!({"line":"3","site":"B"}));
    let (status, d2) = put_device(
        app,
        "pump_2",
        json!({"location":{"lat":1,"lon":2,"site":"C"},"tags":{"line":"1"}}),
    )
    .await;
    assert_eq!(status, 201);
    assert_eq!(d2["tags"], json!({"line":"1","site":"C"}));
    // AND a site that is no tag value stays a label and makes no tag (existing clients)
    let (status, d3) = put_device(
        app,
        "pump_3",
        json!({"location":{"lat":1,"lon":2,"site":"Plant 3"}}),
    )
    .await;
    assert_eq!(status, 201, "{d3}");
    assert!(
        d3.get("tags").is_none() && d3.get("tagsFrom").is_none(),
        "{d3}"
    );
    // AND `tags: {}` removes them all, from tagsFrom on
    let (_, cleared) = put_device(app, "pump_2", json!({"tags":{}})).await;
    assert!(cleared.get("tags").is_none(), "{cleared}");
    assert_eq!(cleared["tagsFrom"], earliest().to_string());
}

async fn bad_tags_are_400s_naming_the_field<S: Store>(app: &App<S>) {
    let seventeen: serde_json::Map<String, Value> =
        (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
    let too_soon = now().plus_millis(60_000).unwrap().to_string();
    for (body, field) in [
        (json!({"tags":["site:A"]}), "tags"),
        (json!({"tags":Value::Object(seventeen)}), "tags"),
        (json!({"tags":{"Site":"A"}}), "tags.Site"),
        (json!({"tags":{"site":"A B"}}), "tags.site"),
        (json!({"tags":{"site":7}}), "tags.site"),
        (
            json!({"tags":{"site":"A"},"location":{"lat":1,"lon":2,"site":"B"}}),
            "tags.site",
        ),
        (
            json!({"tags":{"site":"A"},"tagsEffectiveFrom":too_soon}),
            "tagsEffectiveFrom",
        ),
        (
            json!({"tags":{"site":"A"},"tagsEffectiveFrom":"soon"}),
            "tagsEffectiveFrom",
        ),
        (
            json!({"tagsEffectiveFrom":"2026-04-20T18:00:00Z"}),
            "tagsEffectiveFrom",
        ),
    ] {
        let what = body.to_string();
        assert_bad(put_device(app, "bad_1", body).await, field, &what);
    }
    // Nothing was registered by a refused request.
    assert_eq!(get(app, "/devices/bad_1").await.0, 404);
    for (uri, field) in [
        ("/devices?tag=site", "tag"),
        ("/devices?tag=Site:A", "tag"),
        ("/devices?tag=site:A%23B", "tag"),
        ("/devices?tag=site:A&status=lost", "status"),
        (
            "/devices?tag=site:A&connectivity=offline&status=active",
            "connectivity",
        ),
    ] {
        assert_bad(get(app, uri).await, field, uri);
    }
    let many: Vec<String> = (0..17).map(|i| format!("tag=k{i}:v")).collect();
    let uri = format!("/devices?{}", many.join("&"));
    assert_bad(get(app, &uri).await, "tag", "17 tags");
}

async fn a_move_takes_effect_at_its_time_and_an_announced_change_is_replaced<S: Store>(
    app: &App<S>,
) {
    let t = |s: &str| ts(s);
    // GIVEN a device at site A from 16:00 and announced to move to B at 17:00
    let (status, d) = put_device(
        app,
        "mover",
        json!({"tags":{"site":"A"},"tagsEffectiveFrom":"2026-04-20T16:00:00Z"}),
    )
    .await;
    assert_eq!(status, 201, "{d}");
    assert_eq!(d["tagsFrom"], "2026-04-20T16:00:00.000000Z");
    let (_, d) = put_device(
        app,
        "mover",
        json!({"tags":{"site":"B"},"tagsEffectiveFrom":1_776_704_400_000i64}),
    )
    .await;
    assert_eq!(d["tagsFrom"], "2026-04-20T17:00:00.000000Z");
    let h = history(app, "mover").await;
    assert!(h.epochs.at(t("2026-04-20T16:59:59Z")).has(&tag("site:A")));
    assert!(h.epochs.at(t("2026-04-20T17:00:00Z")).has(&tag("site:B")));
    assert!(h.epochs.at(t("2026-04-20T15:59:59Z")).is_empty());
    // WHEN, before 17:00, it is moved to C from 16:30 instead
    let (_, d) = put_device(
        app,
        "mover",
        json!({"tags":{"site":"C"},"tagsEffectiveFrom":"2026-04-20T16:30:00Z"}),
    )
    .await;
    // THEN the announced move to B is replaced: A until 16:30, C after
    assert_eq!(d["tags"], json!({"site":"C"}));
    assert_eq!(d["tagsFrom"], "2026-04-20T16:30:00.000000Z");
    let h = history(app, "mover").await;
    assert_eq!(h.epochs.epochs().len(), 2);
    assert_eq!(h.version, 3);
    assert!(h.epochs.at(t("2026-04-20T16:29:59Z")).has(&tag("site:A")));
    assert!(h.epochs.at(t("2026-04-20T17:30:00Z")).has(&tag("site:C")));
    // AND it is listed under C only
    let (_, c) = get(app, "/devices?tag=site:C").await;
    assert_eq!(ids(c["items"].as_array().unwrap()), ["mover"]);
    for gone in ["site:A", "site:B"] {
        let (status, page) = get(app, &format!("/devices?tag={gone}")).await;
        assert_eq!(status, 200);
        assert_eq!(page, json!({"items":[],"cursor":null}), "{gone}");
    }
}

/// 40 devices: site A (even) or B (odd), line `i % 3`, every fifth inactive.
async fn register_fleet<S: Store>(app: &App<S>) {
    for i in 0..40 {
        let site = if i % 2 == 0 { "A" } else { "B" };
        let status = if i % 5 == 0 { "inactive" } else { "active" };
        let (code, d) = put_device(
            app,
            &format!("dev_{i:02}"),
            json!({"status":status,"name":format!("Device {i}"),
                   "tags":{"site":site,"line":(i % 3).to_string()}}),
        )
        .await;
        assert_eq!(code, 201, "{d}");
    }
}

fn fleet(keep: impl Fn(usize) -> bool) -> BTreeSet<String> {
    (0..40)
        .filter(|i| keep(*i))
        .map(|i| format!("dev_{i:02}"))
        .collect()
}

async fn listing_by_tags_pages_across_partitions_with_filters<S: Store>(app: &App<S>) {
    register_fleet(app).await;
    // A tag's members, 3 a page, each once, over several index partitions
    let (items, pages) = walk(app, "/devices?tag=site:A&limit=3").await;
    let got: Vec<String> = ids(&items);
    let set: BTreeSet<String> = got.iter().cloned().collect();
    assert_eq!(set.len(), got.len(), "each device once");
    assert_eq!(set, fleet(|i| i % 2 == 0));
    assert!(pages >= 7, "{pages} pages");
    let partitions: BTreeSet<u16> = got
        .iter()
        .map(|d| keys::tag_index_partition(&dev(d)))
        .collect();
    assert!(partitions.len() > 3, "{partitions:?}");
    // Items are the status listing's summary with the tags
    let one = items.iter().find(|d| d["deviceId"] == "dev_04").unwrap();
    assert_eq!(
        one,
        &json!({"deviceId":"dev_04","name":"Device 4","status":"active",
                "createdAt":"2026-04-20T15:00:00.000000Z",
                "updatedAt":"2026-04-20T15:00:00.000000Z",
                "tags":{"site":"A","line":"1"},"tagsFrom":earliest().to_string()})
    );
    // All tags must match, with the status too
    let (items, _) = walk(app, "/devices?tag=site:A&tag=line:0&limit=2").await;
    let want = fleet(|i| i % 2 == 0 && i % 3 == 0);
    assert_eq!(ids(&items).into_iter().collect::<BTreeSet<_>>(), want);
    let (items, _) = walk(
        app,
        "/devices?tag=line:0&tag=site:A&status=inactive&limit=1",
    )
    .await;
    assert_eq!(
        ids(&items).into_iter().collect::<BTreeSet<_>>(),
        fleet(|i| i % 2 == 0 && i % 3 == 0 && i % 5 == 0)
    );
    // A status change rewrites the entries' status
    let (_, d) = put_device(app, "dev_00", json!({"status":"active","name":"Device 0"})).await;
    assert_eq!(d["tags"], json!({"site":"A","line":"0"}), "tags kept");
    let (items, _) = walk(app, "/devices?tag=site:A&status=inactive").await;
    assert!(!ids(&items).contains(&"dev_00".to_owned()));
    let (items, _) = walk(app, "/devices?tag=site:A&status=active&limit=1000").await;
    assert!(ids(&items).contains(&"dev_00".to_owned()));
    // An unknown value, or tags no device has together, is an empty page
    for uri in [
        "/devices?tag=site:Z",
        "/devices?tag=site:A&tag=site:B",
        "/devices?tag=site:A&tag=color:red",
    ] {
        let (status, page) = get(app, uri).await;
        assert_eq!(
            (status, page),
            (200, json!({"items":[],"cursor":null})),
            "{uri}"
        );
    }
    // A cursor opens only for its own filters
    let (_, first) = get(app, "/devices?tag=site:A&limit=2").await;
    let c = first["cursor"].as_str().unwrap();
    let (status, _) = get(app, &format!("/devices?tag=site:B&limit=2&cursor={c}")).await;
    assert_eq!(status, 400);
    let (status, _) = get(
        app,
        &format!("/devices?tag=site:A&status=active&limit=2&cursor={c}"),
    )
    .await;
    assert_eq!(status, 400);
    // The same filters in another order are the same query
    let (status, _) = get(app, &format!("/devices?tag=site:A&limit=2&cursor={c}")).await;
    assert_eq!(status, 200);
}

/// Offline devices as the watchdog leaves them, with tags.
fn offline_device(id: &str, site: &str) -> tidemark_schema::DeviceItem {
    let at = ts("2026-04-20T14:00:00Z");
    let mut d = sample_device();
    d.device_id = dev(id);
    d.pk = keys::device_pk(&d.device_id);
    d.gsi1sk = keys::device_gsi1sk(&d.device_id);
    d.offline_after_seconds = Some(120);
    d.last_arrival_at = Some(at);
    d.offline = Some(tidemark_schema::OfflineState {
        alert: tidemark_schema::AlertId::for_offline(at.plus_millis(120_000).unwrap()),
        since: at,
        counted: Vec::new(),
    });
    d.gsi2pk = Some(keys::offline_gsi2pk(&d.device_id));
    d.gsi2sk = Some(keys::offline_gsi2sk(&d.device_id));
    d.tags = serde_json::from_value(json!({"site": site})).unwrap();
    d
}

async fn offline_listing_by_tags<S: Store>(app: &App<S>) {
    let (items, _) = walk(app, "/devices?connectivity=offline&tag=site:A&limit=1").await;
    assert_eq!(ids(&items), ["off_1", "off_3"]);
    let (items, _) = walk(app, "/devices?connectivity=offline&limit=10").await;
    assert_eq!(ids(&items), ["off_1", "off_2", "off_3"]);
}

// ---- the in-memory store ----

#[tokio::test]
async fn memory_tags_round_trip() {
    tags_round_trip(&memory_app(100)).await;
}

#[tokio::test]
async fn memory_bad_tags_are_400s_naming_the_field() {
    bad_tags_are_400s_naming_the_field(&memory_app(100)).await;
}

#[tokio::test]
async fn memory_a_move_takes_effect_at_its_time_and_an_announced_change_is_replaced() {
    a_move_takes_effect_at_its_time_and_an_announced_change_is_replaced(&memory_app(100)).await;
}

#[tokio::test]
async fn memory_listing_by_tags_pages_across_partitions_with_filters() {
    // Short query pages (the 1 MB cap) too.
    listing_by_tags_pages_across_partitions_with_filters(&memory_app(2)).await;
}

#[tokio::test]
async fn memory_offline_listing_by_tags() {
    let app = memory_app(100);
    for (id, site) in [("off_1", "A"), ("off_2", "B"), ("off_3", "A")] {
        app.store().put_entity(&offline_device(id, site)).unwrap();
    }
    offline_listing_by_tags(&app).await;
}

#[tokio::test]
async fn memory_a_stale_index_entry_is_not_listed() {
    // GIVEN an index entry a failed request left behind (the device no longer has the tag)
    let app = memory_app(100);
    put_device(&app, "d1", json!({"tags":{"site":"A"}})).await;
    let stale = TagIndexItem::new(
        &tag("site:B"),
        &dev("d1"),
        DeviceStatus::Active,
        serde_json::from_value(json!({"site":"B"})).unwrap(),
    );
    app.store().put_entity(&stale).unwrap();
    // THEN the listing follows the device item
    let (_, page) = get(&app, "/devices?tag=site:B").await;
    assert_eq!(page, json!({"items":[],"cursor":null}));
}

// ---- DynamoDB Local ----

#[tokio::test]
async fn local_tags_round_trip() {
    let (_t, app) = local_app("tags-round-trip").await;
    tags_round_trip(&app).await;
}

#[tokio::test]
async fn local_bad_tags_are_400s_naming_the_field() {
    let (_t, app) = local_app("tags-bad").await;
    bad_tags_are_400s_naming_the_field(&app).await;
}

#[tokio::test]
async fn local_a_move_takes_effect_at_its_time_and_an_announced_change_is_replaced() {
    let (_t, app) = local_app("tags-move").await;
    a_move_takes_effect_at_its_time_and_an_announced_change_is_replaced(&app).await;
}

#[tokio::test]
async fn local_listing_by_tags_pages_across_partitions_with_filters() {
    let (_t, app) = local_app("tags-list").await;
    listing_by_tags_pages_across_partitions_with_filters(&app).await;
}

#[tokio::test]
async fn local_offline_listing_by_tags() {
    let (t, app) = local_app("tags-offline").await;
    for (id, site) in [("off_1", "A"), ("off_2", "B"), ("off_3", "A")] {
        put(&t, &offline_device(id, site)).await;
    }
    offline_listing_by_tags(&app).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_racing_tag_changes_each_land_once() {
    // GIVEN eight requests moving one device to eight sites at eight times, all at once
    let (_t, app) = local_app("tags-race").await;
    let app = std::sync::Arc::new(app);
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let app = app.clone();
            tokio::spawn(async move {
                let from = ts("2026-04-20T16:00:00Z")
                    .plus_millis(i * 60_000)
                    .unwrap()
                    .to_string();
                put_device(
                    &app,
                    "raced",
                    json!({"tags":{"site":format!("S{i}")},"tagsEffectiveFrom":from}),
                )
                .await
            })
        })
        .collect();
    let mut landed = 0;
    for task in tasks {
        let (status, body) = task.await.unwrap();
        // A request that keeps losing the race is told so (409), never half-applied.
        assert!([200, 201, 409].contains(&status), "{status}: {body}");
        landed += u64::from(status != 409);
    }
    // THEN each change that was answered landed on the history as it then was: one version
    // each, none lost
    let h = history(&app, "raced").await;
    assert!(landed > 0);
    assert_eq!(h.version, landed);
    // AND the device item and the index agree with the history's latest declared tags
    let latest = h.epochs.latest().unwrap().tags.clone();
    let (_, d) = get(&app, "/devices/raced").await;
    let shown: tidemark_schema::Tags = serde_json::from_value(d["tags"].clone()).unwrap();
    assert_eq!(shown, latest);
}
