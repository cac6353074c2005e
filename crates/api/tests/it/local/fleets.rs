//! Fleet reads (docs/design.md §6 "Fleet reads"): a group's series from its stored buckets
//! (`GET /groups/series`), every member's latest reading (`GET /latest?tag=`), and alerts of
//! the devices holding tags (`GET /alerts?tag=`). Each behaviour runs over the in-memory
//! engine and against DynamoDB Local, on items written as the export and the rollups role
//! write them.

use std::collections::BTreeMap;

use crate::common::*;
use serde_json::Value;
use tidemark_api::memory::MemoryStore;
use tidemark_api::{ApiConfig, App};
use tidemark_schema::{
    Bucket, ExportCursorItem, ExportDirtyItem, GroupBucketItem, GroupPartialItem, Period, Stats,
    Tag, Timestamp,
};
use tidemark_store::Item;
use tidemark_testkit::TestTable;

const TEMP: &str = "temperature";
const MEMBERS: usize = 5;

fn site_a() -> Tag {
    Tag::parse("site:A").unwrap()
}

fn group_now() -> Timestamp {
    ts("2026-04-21T15:00:00Z")
}

/// The export's cursor: every hour up to it was recomputed, but those marked dirty.
fn cursor_hour() -> Timestamp {
    ts("2026-04-21T12:00:00Z")
}

/// An hour the export passed whose first readings came late: marked dirty, not yet redone,
/// so it has partials and no item.
fn dirty_hour() -> Timestamp {
    ts("2026-04-21T05:00:00Z")
}

/// An hour the export passed with no readings in the group; a stray partial there (its
/// readings deleted since) must not be read.
fn empty_hour() -> Timestamp {
    ts("2026-04-21T03:00:00Z")
}

/// Every member's readings of `temperature` from 2026-04-20 00:00 to 15:00 the next day, one
/// every ten minutes, none in [`empty_hour`]: (time, value).
fn truth() -> Vec<(Timestamp, f64)> {
    let start = ts("2026-04-20T00:00:00Z");
    let mut out = Vec::new();
    for d in 0..MEMBERS {
        for i in 0..(39 * 6) {
            let at = start.plus_millis(i * 600_000 + d as i64 * 7_000).unwrap();
            if at.hour_start() == empty_hour() {
                continue;
            }
            let x = (i as f64) * 0.29 + d as f64;
            out.push((
                at,
                18.0 + d as f64 * 0.7 + x.sin() * 2.5 + (i % 7) as f64 * 0.05,
            ));
        }
    }
    out
}

fn fold(points: &[(Timestamp, f64)]) -> Stats {
    let mut s = Stats::EMPTY;
    for (at, v) in points {
        s.merge(&Stats::at_sketched(*at, *v));
    }
    s
}

fn in_bucket(period: Period, start: Timestamp) -> Vec<(Timestamp, f64)> {
    truth()
        .into_iter()
        .filter(|(at, _)| period.bucket(*at).start() == start)
        .collect()
}

fn partial(
    hour: Timestamp,
    batch: &str,
    added: &[(Timestamp, f64)],
    removed: &[(Timestamp, f64)],
) -> Item {
    let key = GroupPartialItem::key(&site_a(), hour, batch);
    let m = metric(TEMP);
    tidemark_store::to_item(&GroupPartialItem {
        pk: key.pk,
        sk: key.sk,
        added: [(m.clone(), fold(added))].into(),
        removed: if removed.is_empty() {
            BTreeMap::new()
        } else {
            [(m, fold(removed))].into()
        },
        added_minutes: BTreeMap::new(),
        removed_minutes: BTreeMap::new(),
        ttl: group_now().epoch_seconds() + 7 * 86_400,
    })
    .unwrap()
}

/// What the export and the rollups role leave for `site:A`: recomputed hours up to the
/// cursor (a day item for the first, complete day), partials for the hours after it and for
/// the dirty hour, two batches each, the second correcting a reading of the first.
fn group_items() -> Vec<Item> {
    let tag = site_a();
    let m = metric(TEMP);
    let mut items = Vec::new();
    let computed = ts("2026-04-21T14:10:00Z");
    let mut hour = ts("2026-04-20T00:00:00Z");
    while hour < group_now() {
        let points = in_bucket(Period::Hourly, hour);
        if hour <= cursor_hour() && hour != dirty_hour() && !points.is_empty() {
            let item = GroupBucketItem::new(
                tag.clone(),
                m.clone(),
                Bucket::Hourly(hour),
                fold(&points),
                MEMBERS as u64,
                computed,
            );
            items.push(tidemark_store::to_item(&item).unwrap());
        } else if !points.is_empty() {
            // Batch 1 stored the first half with one value wrong; batch 2 the rest and the
            // correction (its old value removed, its new one added).
            let (first, rest) = points.split_at(points.len() / 2);
            let mut wrong = first.to_vec();
            wrong[1].1 = 21.0;
            let mut added = rest.to_vec();
            added.push(first[1]);
            items.push(partial(hour, "4960001", &wrong, &[]));
            items.push(partial(hour, "4960002", &added, &[wrong[1]]));
        }
        hour = hour.plus_millis(3_600_000).unwrap();
    }
    let day = ts("2026-04-20T00:00:00Z");
    let item = GroupBucketItem::new(
        tag.clone(),
        m.clone(),
        Period::Daily.bucket(day),
        fold(&in_bucket(Period::Daily, day)),
        MEMBERS as u64,
        computed,
    );
    items.push(tidemark_store::to_item(&item).unwrap());
    items.push(partial(
        empty_hour(),
        "4960003",
        &[(empty_hour(), 99.0)],
        &[],
    ));
    items.push(tidemark_store::to_item(&ExportCursorItem::new(cursor_hour())).unwrap());
    let dirty = tidemark_schema::EntityKey::ExportDirty(dirty_hour()).key();
    items.push(
        tidemark_store::to_item(&ExportDirtyItem {
            pk: dirty.pk,
            sk: dirty.sk,
            hour: dirty_hour(),
            marked_at: ts("2026-04-21T14:00:00Z"),
            marks: 1,
        })
        .unwrap(),
    );
    items
}

fn memory_app(items: Vec<Item>) -> App<MemoryStore> {
    let store = MemoryStore::new().with_page_cap(7);
    for i in items {
        store.put(i).unwrap();
    }
    App::with_store(store, ApiConfig::new("memory").with_now(group_now()))
}

async fn local_app(label: &str, items: Vec<Item>) -> (TestTable, App) {
    let t = TestTable::new(label).await;
    for chunk in items.chunks(25) {
        for i in chunk {
            t.put_item(i.clone()).await;
        }
    }
    init_logs();
    let app = App::new(
        t.client.clone(),
        ApiConfig::new(&t.name).with_now(group_now()),
    );
    (t, app)
}

fn exact_rank(mut v: Vec<f64>, q: u64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[(q * (v.len() as u64 - 1) / 100) as usize]
}

fn num(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("{k} in {v}"))
}

/// Every bucket of the range equals a recomputation from the members' readings: count, sum,
/// avg and stddev exactly (to rounding), percentiles within 1 %; recomputed buckets carry
/// their members and open ones say so.
async fn buckets_equal_a_recomputation<S: tidemark_api::Store>(app: &App<S>) {
    let range = "from=2026-04-20T00:00:00Z&to=2026-04-21T15:00:00Z";
    for (res, period) in [("1h", Period::Hourly), ("1d", Period::Daily)] {
        let uri = format!(
            "/groups/series?tag=site:A&metric={TEMP}&{range}&resolution={res}\
             &aggregates=count,sum,avg,stddev,min,max,p50,p95&limit=10"
        );
        let (rows, _) = walk(app, &uri).await;
        let mut want: BTreeMap<Timestamp, Vec<(Timestamp, f64)>> = BTreeMap::new();
        for (at, v) in truth() {
            want.entry(period.bucket(at).start())
                .or_default()
                .push((at, v));
        }
        assert_eq!(
            rows.len(),
            want.len(),
            "{res}: one row a bucket with readings"
        );
        for (row, (start, points)) in rows.iter().zip(&want) {
            let t = Timestamp::parse_rfc3339(row["time"].as_str().unwrap()).unwrap();
            assert_eq!(t, *start, "{res}: {row}");
            assert_eq!(row["metric"], TEMP);
            let values: Vec<f64> = points.iter().map(|p| p.1).collect();
            let n = values.len() as f64;
            let sum: f64 = values.iter().sum();
            let mean = sum / n;
            let sd = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
            assert_eq!(num(row, "count"), n, "{res} {start}");
            assert!((num(row, "sum") - sum).abs() < 1e-9 * sum.abs(), "{row}");
            assert!((num(row, "avg") - mean).abs() < 1e-9 * mean.abs(), "{row}");
            assert!((num(row, "stddev") - sd).abs() < 1e-6 * sd, "{row} vs {sd}");
            let hour_open = |h: Timestamp| h > cursor_hour() || h == dirty_hour();
            let open = match period {
                Period::Hourly => hour_open(*start),
                Period::Daily => points.iter().any(|p| hour_open(p.0.hour_start())),
            };
            assert_eq!(row.get("open").is_some(), open, "{res} {start}: {row}");
            if !open {
                // Recomputed: exact extremes, percentiles within 1 % (an open bucket keeps a
                // value a correction replaced in them until its hour is recomputed).
                for q in [50, 95] {
                    let exact = exact_rank(values.clone(), q);
                    let got = num(row, &format!("p{q}"));
                    assert!(
                        (got - exact).abs() <= 0.01 * exact.abs(),
                        "{res} {start} p{q}: {got} vs {exact}"
                    );
                }
                let min = values.iter().copied().fold(f64::INFINITY, f64::min);
                let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                // (stored numbers keep 15 significant digits)
                for (k, want) in [("min", min), ("max", max)] {
                    assert!(
                        (num(row, k) - want).abs() < 1e-12 * want.abs(),
                        "{k}: {row}"
                    );
                }
            }
            let stored = match period {
                Period::Hourly => !open,
                Period::Daily => *start == ts("2026-04-20T00:00:00Z"),
            };
            if stored {
                assert_eq!(row["devices"], MEMBERS as u64, "{row}");
            } else {
                assert!(row.get("devices").is_none(), "{row}");
            }
        }
    }
}

#[tokio::test]
async fn a_group_series_equals_a_recomputation_from_its_members_readings() {
    buckets_equal_a_recomputation(&memory_app(group_items())).await;
}

#[tokio::test]
async fn a_group_series_equals_a_recomputation_from_its_members_readings_in_dynamodb() {
    let (_t, app) = local_app("groups-series", group_items()).await;
    buckets_equal_a_recomputation(&app).await;
}

#[tokio::test]
async fn an_hour_the_export_passed_without_an_item_is_empty_and_its_partials_unread() {
    let app = memory_app(group_items());
    let (status, body) = get(
        &app,
        &format!(
            "/groups/series?tag=site:A&metric={TEMP}&from=2026-04-21T03:00:00Z\
             &to=2026-04-21T04:00:00Z&resolution=1h&fill=null"
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let items = body["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["count"], 0, "{body}");
    assert_eq!(items[0]["filled"], true);
}

#[tokio::test]
async fn pages_of_rows_hold_the_same_buckets_as_one_wide_answer() {
    let app = memory_app(group_items());
    let base = format!(
        "/groups/series?tag=site:A&metric={TEMP}&from=1776643200000&to=2026-04-21T15:00:00Z\
         &resolution=auto&aggregates=count,avg,p95&fill=null"
    );
    let (rows, pages) = walk(&app, &format!("{base}&limit=4")).await;
    assert!(pages >= 10, "{pages} pages");
    let (status, wide) = get(&app, &format!("{base}&format=wide")).await;
    assert_eq!(status, 200, "{wide}");
    let wide = wide.as_array().unwrap();
    // auto over 39 hours at maxPoints 1,000 would be minutes for a device; a group's is 1h.
    assert_eq!(wide.len(), 39);
    assert_eq!(rows.len(), 39);
    for (r, w) in rows.iter().zip(wide) {
        assert_eq!(r["time"], w["time"]);
        assert_eq!(r["count"], w["temperature.count"]);
        assert_eq!(r["avg"], w["temperature.avg"]);
        assert_eq!(r["p95"], w["temperature.p95"]);
        assert_eq!(
            r.get("devices"),
            w.get("temperature.devices").filter(|d| !d.is_null())
        );
        assert_eq!(r.get("open"), w.get("open"));
    }
}

#[tokio::test]
async fn an_unknown_tag_value_is_an_empty_series() {
    let app = memory_app(group_items());
    let (status, body) = get(
        &app,
        &format!(
            "/groups/series?tag=site:nowhere&metric={TEMP}&from=2026-04-20T00:00:00Z\
             &to=2026-04-21T15:00:00Z&resolution=1h"
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["items"], serde_json::json!([]));
    assert_eq!(body["cursor"], Value::Null);
}

#[tokio::test]
async fn bad_group_series_requests_are_400s_naming_the_parameter() {
    let app = memory_app(Vec::new());
    let ok = format!("metric={TEMP}&from=2026-04-20T00:00:00Z&to=2026-04-21T00:00:00Z");
    for (query, param, says) in [
        (ok.clone(), "tag", "required"),
        (format!("tag=site&{ok}"), "tag", "key:value"),
        (format!("tag=Site:A&{ok}"), "tag", "tag key"),
        (
            format!("tag=site:A&tag=site:B&{ok}"),
            "tag",
            "more than once",
        ),
        (format!("tag=serial:X1&{ok}"), "tag", "GROUP_TAGS"),
        (
            "tag=site:A&from=2026-04-20T00:00:00Z&to=2026-04-21T00:00:00Z".to_owned(),
            "metric",
            "required",
        ),
        (
            format!("tag=site:A&{ok}&resolution=5m"),
            "resolution",
            "per hour",
        ),
        (
            format!("tag=site:A&{ok}&resolution=2h"),
            "resolution",
            "not one of",
        ),
        (
            format!("tag=site:A&{ok}&aggregates=avg,median"),
            "aggregates",
            "median",
        ),
        (
            format!("tag=site:A&{ok}&metrics=t"),
            "metrics",
            "unknown query parameter",
        ),
    ] {
        let (status, body) = get(&app, &format!("/groups/series?{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        let text = body.to_string();
        assert!(text.contains(param), "{query}: {body}");
        assert!(text.contains(says), "{query}: {body}");
    }
}

#[tokio::test]
async fn a_cursor_of_one_group_does_not_open_another() {
    let app = memory_app(group_items());
    let uri = format!(
        "/groups/series?tag=site:A&metric={TEMP}&from=2026-04-20T00:00:00Z\
         &to=2026-04-21T15:00:00Z&resolution=1h&limit=2"
    );
    let (_, body) = get(&app, &uri).await;
    let cursor = body["cursor"].as_str().unwrap().to_owned();
    let other = uri.replace("site:A", "site:B");
    let (status, body) = get(&app, &format!("{other}&cursor={cursor}")).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("cursor"));
}

/// Seven devices: `d0`..`d4` at `site:A` (`d0`, `d1` also on `line:3`; `d4` without a
/// reading), `d5` and `d6` at `site:B`; each with readings, its tag index entries, and an open
/// alert on `d0`, `d2` and `d5`.
fn fleet_items() -> Vec<Item> {
    use tidemark_schema::{DeviceItem, DeviceStatus, ReadingItem, TagIndexItem, Tags};
    let mut items = Vec::new();
    for d in 0..7 {
        let id = format!("d{d}");
        let mut tags = vec![("site", if d < 5 { "A" } else { "B" })];
        if d < 2 {
            tags.push(("line", "3"));
        }
        let tags: Tags = serde_json::from_value(serde_json::json!(
            tags.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        ))
        .unwrap();
        let mut device =
            DeviceItem::new(dev(&id), DeviceStatus::Active, ts("2026-04-01T00:00:00Z"));
        device.tags = tags.clone();
        items.push(tidemark_store::to_item(&device).unwrap());
        for tag in tags.iter() {
            let entry = TagIndexItem::new(&tag, &dev(&id), DeviceStatus::Active, tags.clone());
            items.push(tidemark_store::to_item(&entry).unwrap());
        }
        if d != 4 {
            for i in 0..3 {
                let at = ts("2026-04-20T14:00:00Z")
                    .plus_millis(i * 60_000 + d * 1_000)
                    .unwrap();
                let r = reading(&id, at, &[("temperature", 20.0 + d as f64 + i as f64)]);
                items.push(tidemark_store::to_item(&ReadingItem::new(&r, None, 30)).unwrap());
            }
        }
        if [0, 2, 5].contains(&d) {
            items.push(tidemark_store::to_item(&tidemark_testkit::open_alert(&id)).unwrap());
        }
    }
    items
}

fn fleet_memory_app() -> App<MemoryStore> {
    let store = MemoryStore::new().with_page_cap(3);
    for i in fleet_items() {
        store.put(i).unwrap();
    }
    App::with_store(store, ApiConfig::new("memory").with_now(now()))
}

fn device_ids(items: &[Value]) -> Vec<String> {
    let mut ids: Vec<String> = items
        .iter()
        .map(|i| i["deviceId"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

/// Every member's latest reading, page by page, each equal to its device's own latest.
async fn latest_of_members<S: tidemark_api::Store>(app: &App<S>) {
    let (items, pages) = walk(app, "/latest?tag=site:A&limit=2").await;
    assert!(pages >= 2, "{pages} pages");
    assert_eq!(
        device_ids(&items),
        ["d0", "d1", "d2", "d3"],
        "d4 has no reading"
    );
    for item in &items {
        let id = item["deviceId"].as_str().unwrap();
        let (status, own) = get(app, &format!("/devices/{id}/readings/latest")).await;
        assert_eq!(status, 200);
        assert_eq!(item, &own, "{id}");
    }
    let (items, _) = walk(app, "/latest?tag=site:A&tag=line:3&limit=1").await;
    assert_eq!(device_ids(&items), ["d0", "d1"]);
    let (items, _) = walk(app, "/latest?tag=line:3&tag=site:B").await;
    assert!(items.is_empty());
    let (status, body) = get(app, "/latest?tag=site:nowhere").await;
    assert_eq!(
        (status, &body["items"], &body["cursor"]),
        (200, &serde_json::json!([]), &Value::Null)
    );
}

#[tokio::test]
async fn fleet_latest_pages_through_every_member_as_its_own_latest() {
    latest_of_members(&fleet_memory_app()).await;
}

#[tokio::test]
async fn fleet_latest_pages_through_every_member_as_its_own_latest_in_dynamodb() {
    let (t, _) = local_app("fleet-latest", fleet_items()).await;
    latest_of_members(&App::new(
        t.client.clone(),
        ApiConfig::new(&t.name).with_now(now()),
    ))
    .await;
}

/// Alerts of the devices holding the tags only; pages may be short, the cursor goes on.
async fn alerts_of_members<S: tidemark_api::Store>(app: &App<S>) {
    let (items, pages) = walk(app, "/alerts?tag=site:A&limit=1").await;
    assert_eq!(device_ids(&items), ["d0", "d2"]);
    assert!(pages >= 2);
    let (items, _) = walk(
        app,
        "/alerts?tag=site:A&tag=line:3&state=open&severity=critical",
    )
    .await;
    assert_eq!(device_ids(&items), ["d0"]);
    let (items, _) = walk(app, "/alerts?tag=site:B").await;
    assert_eq!(device_ids(&items), ["d5"]);
    let (items, _) = walk(app, "/alerts?tag=site:nowhere").await;
    assert!(items.is_empty());
    let (items, _) = walk(app, "/alerts").await;
    assert_eq!(device_ids(&items), ["d0", "d2", "d5"]);
}

#[tokio::test]
async fn fleet_alerts_keep_those_of_devices_holding_the_tags() {
    alerts_of_members(&fleet_memory_app()).await;
}

#[tokio::test]
async fn fleet_alerts_keep_those_of_devices_holding_the_tags_in_dynamodb() {
    let (t, _) = local_app("fleet-alerts", fleet_items()).await;
    alerts_of_members(&App::new(
        t.client.clone(),
        ApiConfig::new(&t.name).with_now(now()),
    ))
    .await;
}

#[tokio::test]
async fn bad_fleet_requests_are_400s_naming_the_parameter() {
    let app = fleet_memory_app();
    for (uri, param) in [
        ("/latest?tag=site", "tag"),
        ("/latest?tag=site:A&tag=Line:3", "tag"),
        ("/latest?tag=site:A&ids=d0", "ids"),
        ("/latest?tag=site:A&limit=1001", "limit"),
        ("/latest?ids=d0&limit=10", "limit"),
        ("/latest?tag=site:A&cursor=abc", "cursor"),
        ("/alerts?tag=site:A%23B", "tag"),
        ("/alerts?tag=:A", "tag"),
    ] {
        let (status, body) = get(&app, uri).await;
        assert_eq!(status, 400, "{uri}: {body}");
        assert!(body.to_string().contains(param), "{uri}: {body}");
    }
    // A cursor of one tag's listing does not open another's.
    let (_, body) = get(&app, "/latest?tag=site:A&limit=1").await;
    let c = body["cursor"].as_str().unwrap();
    let (status, _) = get(&app, &format!("/latest?tag=site:B&limit=1&cursor={c}")).await;
    assert_eq!(status, 400);
}

/// The export stopped 60 hours ago: the 12 hours before have items, the 60 since only
/// partials, more than one request reads.
fn export_stopped_items() -> Vec<Item> {
    let tag = site_a();
    let m = metric(TEMP);
    let stopped = ts("2026-04-19T03:00:00Z");
    let mut items = vec![
        tidemark_store::to_item(&ExportCursorItem::new(
            stopped.minus_millis(3_600_000).unwrap(),
        ))
        .unwrap(),
    ];
    for h in 0..72 {
        let hour = ts("2026-04-18T15:00:00Z")
            .plus_millis(h * 3_600_000)
            .unwrap();
        let points = [
            (hour, 20.0 + h as f64),
            (hour.plus_millis(60_000).unwrap(), 21.0),
        ];
        if hour < stopped {
            let item = GroupBucketItem::new(
                tag.clone(),
                m.clone(),
                Bucket::Hourly(hour),
                fold(&points),
                2,
                hour,
            );
            items.push(tidemark_store::to_item(&item).unwrap());
        } else {
            items.push(partial(hour, "4960009", &points, &[]));
        }
    }
    items
}

#[tokio::test]
async fn one_request_reads_at_most_two_days_of_partials_and_rows_page_past_them() {
    let app = App::with_store(
        {
            let store = MemoryStore::new();
            for i in export_stopped_items() {
                store.put(i).unwrap();
            }
            store
        },
        ApiConfig::new("memory").with_now(ts("2026-04-21T15:00:00Z")),
    );
    let range = format!(
        "/groups/series?tag=site:A&metric={TEMP}&from=2026-04-18T15:00:00Z\
         &to=2026-04-21T15:00:00Z&resolution=1h&aggregates=count,sum"
    );
    let (status, body) = get(&app, &format!("{range}&format=wide")).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("invalid to"), "{body}");
    assert!(body.to_string().contains("export"), "{body}");
    let (rows, pages) = walk(&app, &format!("{range}&limit=1000")).await;
    assert_eq!(pages, 2, "48 hours of partials a page");
    assert_eq!(rows.len(), 72);
    for (h, row) in rows.iter().enumerate() {
        assert_eq!(row["count"], 2, "{row}");
        assert_eq!(num(row, "sum"), 41.0 + h as f64, "{row}");
        assert_eq!(row.get("open").is_some(), h >= 12, "{row}");
    }
}
