//! The dashboard's pages in a real headless Chromium (WebDriver) against the API function over
//! the in-memory store (`tidemark_api::memory::MemoryStore`), behind the local HTTP server:
//! no pipeline and no database, so each test seeds what it needs through the schema types or
//! the API itself in milliseconds. (`dashboard.rs` drives the pages over the whole pipeline.)
//! Screenshots go to `target/dashboard/`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tidemark_api::memory::MemoryStore;
use tidemark_api::{ApiConfig, App, UiAuth};
use tidemark_devstack::http_api::{bind, serve};
use tidemark_schema::{
    DeviceId, DeviceItem, DeviceStatus, GroupBucketItem, MetricName, Period, Reading, ReadingItem,
    Stats, Tag, Timestamp,
};
use tidemark_testkit::browser::{Browser, screenshot_dir};
use tokio::sync::watch;

use crate::common;

const WAIT: Duration = Duration::from_secs(30);

/// The API function over `store`, served on a free loopback port until the process ends (the
/// server runs on its own thread and runtime, so it outlives each test's).
fn serve_store(store: MemoryStore) -> SocketAddr {
    let mut config = ApiConfig::new("memory");
    config.ui_auth = UiAuth::None;
    let app = Arc::new(App::with_store(store, config));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let (listener, addr) = bind(0).await.unwrap();
            let (_stop, stopped) = watch::channel(false);
            tx.send(addr).unwrap();
            serve(listener, app, stopped).await;
        });
    });
    rx.recv().expect("the API listens")
}

/// Whole seconds `back_ms` before now (the page's `Date` keeps milliseconds).
fn ago(back_ms: i64) -> Timestamp {
    let now = Timestamp::now().epoch_millis() / 1000 * 1000;
    Timestamp::from_epoch_millis(now - back_ms).unwrap()
}

/// A registered device and its readings of one metric, stored as ingest stores them (one
/// item a reading, the default layout).
fn seed_device(store: &MemoryStore, id: &str, metric: &str, readings: &[(Timestamp, f64)]) {
    let device = DeviceId::new(id).unwrap();
    store
        .put_entity(&DeviceItem::new(
            device.clone(),
            DeviceStatus::Active,
            ago(86_400_000),
        ))
        .unwrap();
    for (at, v) in readings {
        let r = Reading {
            device_id: device.clone(),
            timestamp: *at,
            metrics: [(MetricName::new(metric).unwrap(), *v)]
                .into_iter()
                .collect(),
            metadata: None,
        };
        store.put_entity(&ReadingItem::new(&r, None, 30)).unwrap();
    }
}

/// One call to the served API (HTTP/1.1, `Connection: close`): the status and the JSON body.
fn call(api: SocketAddr, method: &str, path: &str, body: &Value) -> (u16, Value) {
    let payload = body.to_string();
    let mut s = TcpStream::connect(api).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {api}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// Waits until the fleet page has drawn `rows` devices (in order), without an error.
fn wait_fleet(b: &Browser, rows: &[&str]) {
    let want = serde_json::to_string(rows).unwrap();
    b.wait_for(
        &format!(
            "window.tidemark && window.tidemark.view === 'fleet' \
             && document.body.dataset.state === 'ready' && !window.tidemark.error \
             && JSON.stringify([...document.querySelectorAll('#fleet tbody tr')] \
                  .map(r => r.dataset.device)) === '{want}'"
        ),
        WAIT,
    );
}

/// Waits until the device page of `id` has drawn, without an error.
fn open_device(b: &Browser, api: SocketAddr, id: &str, query: &str) {
    b.goto(&format!("http://{api}/ui/#/device/{id}{query}"));
    b.wait_for(
        &format!(
            "window.tidemark && window.tidemark.view === 'device' && window.tidemark.device \
             && window.tidemark.device.id === '{id}' && document.body.dataset.state === 'ready'"
        ),
        WAIT,
    );
    let error = b.eval("return window.tidemark.error;", vec![]);
    assert_eq!(error, Value::Null, "the page reported an error");
}

fn shot(b: &Browser, name: &str) {
    b.screenshot(&screenshot_dir().join(format!("{name}.png")));
}

#[test]
fn a_device_with_a_minute_of_data_opens_on_the_range_its_data_covers() {
    // GIVEN a device whose only readings span one minute, ending two minutes ago
    let store = MemoryStore::new();
    let last = ago(120_000);
    let readings: Vec<(Timestamp, f64)> = (0..7)
        .map(|i| {
            (
                last.minus_millis((6 - i) * 10_000).unwrap(),
                20.0 + i as f64,
            )
        })
        .collect();
    let (first, last) = (readings[0].0, readings[6].0);
    seed_device(&store, "minute_only", "temperature", &readings);
    let api = serve_store(store);
    let (_one, b) = common::browser(1280, 900);
    // WHEN its page opens from a link without a range
    open_device(&b, api, "minute_only", "");
    let shown = b.eval("return window.tidemark.device;", vec![]);
    shot(&b, "device-minute-of-data");
    // THEN the chart's range holds every reading and is not much wider than the data: the
    // points spread over the chart instead of crowding at one edge of a day
    let from = shown["from"].as_i64().unwrap();
    let to = shown["to"].as_i64().unwrap();
    let (f, l) = (first.epoch_millis(), last.epoch_millis());
    assert!(
        from <= f && to >= l,
        "range {from}..{to} leaves out readings at {f}..{l}"
    );
    assert!(
        (to - from) <= 2 * (l - f),
        "a range of {} s for {} s of data",
        (to - from) / 1000,
        (l - f) / 1000
    );
    assert_eq!(
        shown["charts"]["temperature"]["points"],
        json!(7),
        "{shown}"
    );
    assert_eq!(shown["resolution"], "raw");
    // AND no preset range is marked as chosen
    let pressed = b.eval(
        "return [...document.querySelectorAll('#range [data-range][aria-pressed=true]')].length;",
        vec![],
    );
    assert_eq!(pressed, json!(0));
}

#[test]
fn a_chart_labels_its_y_axis_with_distinct_values_showing_the_decimals_its_ticks_need() {
    // GIVEN a temperature between 17.9 and 18.1 (labelled 18.1, 18.1, 18, 17.9, 17.9 before)
    let store = MemoryStore::new();
    let values = [17.9, 17.95, 18.0, 18.05, 18.1, 18.02, 17.93, 18.07];
    let readings: Vec<(Timestamp, f64)> = values
        .iter()
        .enumerate()
        .map(|(i, v)| (ago(600_000 - i as i64 * 60_000), *v))
        .collect();
    seed_device(&store, "cold_room", "temperature", &readings);
    let api = serve_store(store);
    let (_one, b) = common::browser(1280, 900);
    for (width, height) in [(1280, 900), (390, 844)] {
        b.set_size(width, height);
        // WHEN its page draws the last hour
        open_device(&b, api, "cold_room", "?range=1h");
        let labels = b.eval(
            "const p = document.querySelector('.chart[data-metric=temperature] .plot'); \
             return p && p.dataset.yLabels ? JSON.parse(p.dataset.yLabels) : null;",
            vec![],
        );
        shot(&b, &format!("device-y-labels-{width}"));
        // THEN the y axis has several labels, no two alike, evenly spaced as their ticks are
        // (every label shows the decimals that tell it from its neighbours)
        let labels: Vec<String> = serde_json::from_value(labels.clone())
            .unwrap_or_else(|_| panic!("the chart recorded no y-axis labels: {labels}"));
        assert!(labels.len() >= 3, "{labels:?}");
        let mut distinct = labels.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), labels.len(), "repeated labels: {labels:?}");
        let nums: Vec<f64> = labels
            .iter()
            .map(|l| {
                l.parse::<f64>()
                    .unwrap_or_else(|_| panic!("{l} in {labels:?}"))
            })
            .collect();
        let step = nums[1] - nums[0];
        for w in nums.windows(2) {
            assert!(
                ((w[1] - w[0]) - step).abs() < step.abs() * 1e-6,
                "unevenly spaced labels {labels:?} (width {width})"
            );
        }
        // AND they cover the data
        assert!(nums.iter().cloned().fold(f64::MAX, f64::min) <= 17.9 + step.abs());
        assert!(nums.iter().cloned().fold(f64::MIN, f64::max) >= 18.1 - step.abs());
    }
}

/// A group's closed hour of one metric, as the exporter writes it: the fold of the values.
fn group_hour(tag: &str, metric: &str, hour: Timestamp, values: &[f64]) -> GroupBucketItem {
    let mut stats = Stats::at_sketched(hour, values[0]);
    for (i, v) in values.iter().enumerate().skip(1) {
        stats.merge(&Stats::at_sketched(
            hour.plus_millis(i as i64 * 1000).unwrap(),
            *v,
        ));
    }
    GroupBucketItem::new(
        Tag::parse(tag).unwrap(),
        MetricName::new(metric).unwrap(),
        Period::Hourly.bucket(hour),
        stats,
        2,
        ago(0),
    )
}

#[test]
fn the_fleet_page_filters_by_tags_kept_in_the_url_and_charts_the_first_tags_group() {
    // GIVEN four devices, three of them tagged through the API, with a temperature reading
    // each, and site:north's and site:south's last two closed hours as the exporter leaves them
    let store = MemoryStore::new();
    let now = ago(0);
    let hour = |back: i64| {
        Period::Hourly
            .bucket(now.minus_millis(back * 3_600_000).unwrap())
            .start()
    };
    for (id, t) in [
        ("north_1", 18.0),
        ("north_2", 19.0),
        ("south_1", 25.0),
        ("untagged", 30.0),
    ] {
        seed_device(
            &store,
            id,
            "temperature",
            &[(hour(2), t), (ago(300_000), t)],
        );
    }
    let north = [(hour(2), [18.0, 19.0]), (hour(1), [17.5, 19.5])];
    for (at, values) in north {
        store
            .put_entity(&group_hour("site:north", "temperature", at, &values))
            .unwrap();
    }
    store
        .put_entity(&group_hour(
            "site:south",
            "temperature",
            hour(1),
            &[25.0, 26.0],
        ))
        .unwrap();
    let api = serve_store(store);
    for (id, tags) in [
        ("north_1", json!({"site": "north", "line": "1"})),
        ("north_2", json!({"site": "north", "line": "2"})),
        ("south_1", json!({"site": "south", "line": "1"})),
    ] {
        let (status, body) = call(
            api,
            "PUT",
            &format!("/devices/{id}"),
            &json!({"tags": tags}),
        );
        assert!(status == 200 || status == 201, "{id}: {status} {body}");
    }
    let (_one, b) = common::browser(1280, 1000);
    b.goto(&format!("http://{api}/ui/#/fleet"));
    wait_fleet(&b, &["north_1", "north_2", "south_1", "untagged"]);

    // WHEN site:north is typed into the tag filter
    b.type_into("#tag-input", "site:north");
    b.click("#tag-add");
    // THEN only its devices are listed, the URL keeps the filter, and the group chart draws
    // site:north's hours of temperature
    wait_fleet(&b, &["north_1", "north_2"]);
    let hash = b.eval("return decodeURIComponent(location.hash);", vec![]);
    assert_eq!(hash, "#/fleet?tag=site:north");
    let chart = b.eval(
        "const c = document.querySelector('#group-chart .chart'); \
         return c && {tag: c.dataset.tag, metric: c.dataset.metric, points: +c.dataset.points, \
                      min: +c.dataset.min, max: +c.dataset.max, resolution: c.dataset.resolution, \
                      canvas: !!c.querySelector('canvas')};",
        vec![],
    );
    assert_eq!(
        chart,
        json!({"tag": "site:north", "metric": "temperature", "points": 2, "min": 17.5,
               "max": 19.5, "resolution": "1h", "canvas": true}),
        "the group chart"
    );
    // AND, with two hours of data in a day's range, it starts on the hours the data covers
    // rather than crowding them at the right edge
    let shown = b.eval(
        "const c = document.querySelector('#group-chart .chart'); \
         return [+c.dataset.from, +c.dataset.to];",
        vec![],
    );
    let (from, to) = (shown[0].as_f64().unwrap(), shown[1].as_f64().unwrap());
    assert!(
        to - from <= 3.0 * 3_600_000.0,
        "a group chart of {} h for two hours of data",
        (to - from) / 3_600_000.0
    );
    shot(&b, "fleet-tag-filter");
    // AND its range is the page's too: a week of the same hours, then back to the day
    for (range, hash) in [
        ("7d", "#/fleet?tag=site:north&range=7d"),
        ("1d", "#/fleet?tag=site:north"),
    ] {
        b.click(&format!("#group-pickers [data-range='{range}']"));
        b.wait_for(
            &format!(
                "decodeURIComponent(location.hash) === '{hash}' && \
                 document.querySelector('#group-pickers [aria-pressed=true]')?.dataset.range === '{range}' \
                 && document.querySelector('#group-chart .chart')?.dataset.points === '2'"
            ),
            WAIT,
        );
    }

    // WHEN line:2 is added THEN both must match
    b.type_into("#tag-input", "line:2");
    b.click("#tag-add");
    wait_fleet(&b, &["north_2"]);
    let hash = b.eval("return decodeURIComponent(location.hash);", vec![]);
    assert_eq!(hash, "#/fleet?tag=site:north&tag=line:2");
    // AND a reload of the URL shows the same filter and the same devices
    b.eval("location.reload();", vec![]);
    wait_fleet(&b, &["north_2"]);
    let chips = b.eval(
        "return [...document.querySelectorAll('#tag-chips [data-tag]')].map(c => c.dataset.tag);",
        vec![],
    );
    assert_eq!(chips, json!(["site:north", "line:2"]));
    assert_eq!(
        b.eval(
            "return document.querySelector('#group-chart .chart')?.dataset.tag;",
            vec![]
        ),
        json!("site:north")
    );

    // WHEN a malformed tag is typed THEN the page says what a tag is and keeps the filter
    b.type_into("#tag-input", "Site=north");
    b.click("#tag-add");
    let problem = b.wait_for("document.getElementById('tag-problem').innerText", WAIT);
    assert!(
        problem
            .as_str()
            .unwrap()
            .starts_with("Site=north: a tag is key:value"),
        "{problem}"
    );
    assert_eq!(
        b.eval("return decodeURIComponent(location.hash);", vec![]),
        json!("#/fleet?tag=site:north&tag=line:2")
    );

    // WHEN site:north is removed THEN line:2 alone filters
    b.click("#tag-chips [data-remove-tag='site:north']");
    wait_fleet(&b, &["north_2"]);
    assert_eq!(
        b.eval("return decodeURIComponent(location.hash);", vec![]),
        json!("#/fleet?tag=line:2")
    );
    // AND a device's page lists its tags, each a link to the fleet filtered by it
    open_device(&b, api, "north_2", "?range=1h");
    let tags = b.eval(
        "return [...document.querySelectorAll('#device-tags [data-tag]')].map(c => c.dataset.tag);",
        vec![],
    );
    assert_eq!(tags, json!(["line:2", "site:north"]));
    b.click("#device-tags [data-tag='site:north']");
    wait_fleet(&b, &["north_1", "north_2"]);
    // AND on a phone the filtered page with its chart does not scroll sideways
    b.set_size(390, 844);
    b.goto(&format!("http://{api}/ui/#/fleet?tag=site%3Anorth"));
    wait_fleet(&b, &["north_1", "north_2"]);
    b.wait_for("!!document.querySelector('#group-chart canvas')", WAIT);
    let overflow = b.eval(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth;",
        vec![],
    );
    assert!(
        overflow.as_i64().unwrap() <= 0,
        "scrolls sideways by {overflow} px"
    );
    shot(&b, "phone-fleet-tag-filter");
}
