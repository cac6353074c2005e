//! The dashboard's pages in a real headless Chromium (WebDriver) against the API function over
//! the in-memory store (`tidemark_api::memory::MemoryStore`), behind the local HTTP server:
//! no pipeline and no database, so each test seeds what it needs through the schema types or
//! the API itself in milliseconds. (`dashboard.rs` drives the pages over the whole pipeline.)
//! Screenshots go to `target/dashboard/`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};
use tidemark_api::memory::MemoryStore;
use tidemark_api::{ApiConfig, App, UiAuth};
use tidemark_devstack::http_api::{bind, serve};
use tidemark_schema::{
    DeviceId, DeviceItem, DeviceStatus, MetricName, Reading, ReadingItem, Timestamp,
};
use tidemark_testkit::browser::{Browser, screenshot_dir};
use tokio::sync::watch;

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

/// One browser at a time: the machine's two cores are shared.
fn browser(width: u32, height: u32) -> (MutexGuard<'static, ()>, Browser) {
    static ONE: Mutex<()> = Mutex::new(());
    let guard = ONE.lock().unwrap_or_else(|e| e.into_inner());
    (guard, Browser::start(width, height))
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
    let (_one, b) = browser(1280, 900);
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
    let (_one, b) = browser(1280, 900);
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
