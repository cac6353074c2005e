//! Offline devices through `make run`'s pipeline (kinesis-mock → ingest → DynamoDB Local →
//! its stream → the alerts role → the local EventBridge endpoint) and the watchdog, run
//! here by hand so each decision can be watched: a silent device gets one offline alert and
//! its next reading resolves it; two runs at once open one; a device whose window is
//! removed is resolved; a DynamoDB outage longer than the window declares nobody offline
//! whose readings were waiting in the stream, and decides with their true arrivals once it
//! clears; a device uploading old readings is online while it sends; a site half of which is
//! silent gets its group rule's alert, published to the bus, which resolves when the silent
//! device is back; a site's hot reading opens its group window rule's alert once the
//! rollups role has passed the heartbeat behind it.

use crate::common;

use std::time::Duration;

use aws_sdk_kinesis::primitives::Blob;
use serde_json::{Value, json};
use tidemark_devstack::LocalConfig;
use tidemark_devstack::esm::MappingConfig;
use tidemark_devstack::pipeline::{AlertsConfig, Functions, Pipeline, PipelineConfig};
use tidemark_schema::Timestamp;
use tidemark_testkit::{
    Fault, FaultProxy, TestStream, TestTable, eventually, services, unique_name,
};
use tidemark_watchdog::{DynamoWatch, KinesisHeartbeats, Report, Watchdog, WatchdogConfig};

/// The fleet's window in these tests: short, so silence is quick to come by, and longer than
/// a watchdog run here takes (at most its 3 s heartbeat wait), so a device sending between
/// runs is never silent for a whole window.
const WINDOW: u32 = 8;

/// How long the pipeline may take to show a reading or an alert change.
const SOON: Duration = Duration::from_secs(20);

fn fast(name: &str) -> MappingConfig {
    MappingConfig {
        batch_size: 1000,
        batching_window: Duration::from_millis(300),
        poll_interval: Duration::from_millis(100),
        shard_refresh: Duration::from_secs(1),
        retry_backoff: Duration::from_millis(50),
        on_failure_dir: Some(std::env::temp_dir().join(unique_name("offline-onfailure"))),
        ..MappingConfig::new(name)
    }
}

async fn pipeline(local: LocalConfig, window: u32) -> Pipeline {
    Pipeline::start(PipelineConfig {
        local,
        api_port: 0,
        functions: Functions::InProcess,
        ingest: fast("ingest"),
        rollups: fast("rollups"),
        default_layout: None,
        device_identity: tidemark_schema::DeviceIdentity::Payload,
        default_thresholds: "{}".into(),
        alerts: Some(AlertsConfig::ephemeral(fast("alerts"))),
        sign_in: None,
        offline_after_default: window,
        watchdog: None,
        export: None,
    })
    .await
    .unwrap()
}

/// A watchdog on the test's table and stream, reaching DynamoDB directly (never through a
/// test's fault proxy).
async fn watchdog(
    table: &TestTable,
    stream: &TestStream,
    window: u32,
) -> Watchdog<DynamoWatch, KinesisHeartbeats> {
    Watchdog::new(
        DynamoWatch::new(table.client.clone(), table.name.clone()),
        KinesisHeartbeats {
            client: stream.client.clone(),
            stream: stream.name.clone(),
        },
        WatchdogConfig {
            offline_after_default: window,
            heartbeat_wait: Duration::from_secs(3),
            heartbeat_poll: Duration::from_millis(100),
            ..WatchdogConfig::new(table.name.clone(), stream.name.clone())
        },
    )
}

async fn run(w: &Watchdog<DynamoWatch, KinesisHeartbeats>) -> Report {
    w.run(tokio::time::Instant::now() + Duration::from_secs(30))
        .await
        .unwrap()
}

/// One reading of `device` at `at`, into the stream now.
async fn send(stream: &TestStream, device: &str, at: Timestamp, t: f64) {
    let data = json!({"deviceId": device, "timestamp": at.to_string(), "t": t}).to_string();
    stream
        .client
        .put_record()
        .stream_name(&stream.name)
        .partition_key(device)
        .data(Blob::new(data.into_bytes()))
        .send()
        .await
        .unwrap();
}

async fn device(p: &Pipeline, id: &str) -> Value {
    common::get(p.api_addr, &format!("/devices/{id}")).await.1
}

async fn alerts(p: &Pipeline, id: &str) -> Vec<Value> {
    common::all_items(p.api_addr, &format!("/devices/{id}/alerts")).await
}

/// The alert events published for `device`, as `(change, detail)`.
async fn events(p: &Pipeline, id: &str) -> Vec<(String, Value)> {
    let log = p.events.as_ref().expect("the alerts mapping runs");
    log.since(0)
        .await
        .into_iter()
        .map(|(_, e)| e["detail"].clone())
        .filter(|d| d["deviceId"] == id)
        .map(|d| (d["change"].as_str().unwrap_or_default().to_owned(), d))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_silent_device_gets_one_offline_alert_and_its_next_reading_resolves_it() {
    let table = TestTable::new("offline").await;
    let stream = TestStream::new("offline", 2).await;
    let p = pipeline(common::local_config(&table, &stream, 2), WINDOW).await;
    let w1 = watchdog(&table, &stream, WINDOW).await;
    let w2 = watchdog(&table, &stream, WINDOW).await;

    // GIVEN a device that sent three readings, and one that keeps sending
    for i in 0..3 {
        send(&stream, "quiet", Timestamp::now(), f64::from(i)).await;
        send(&stream, "chatty", Timestamp::now(), 1.0).await;
        // Paces the sends only: three readings, half a second apart.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eventually(SOON, "quiet is watched", || async {
        (device(&p, "quiet").await["connectivity"] == "online").then_some(())
    })
    .await;

    // WHEN it stays silent past its window while two watchdog runs go at once, over and over
    let runs_opened = std::cell::Cell::new(0);
    eventually(
        Duration::from_secs(40),
        "an offline alert opens",
        || async {
            if !alerts(&p, "quiet").await.is_empty() {
                return Some(());
            }
            send(&stream, "chatty", Timestamp::now(), 1.0).await;
            let (a, b) = tokio::join!(run(&w1), run(&w2));
            runs_opened.set(runs_opened.get() + a.opened + b.opened);
            None
        },
    )
    .await;
    let mut opened = runs_opened.get();
    for _ in 0..3 {
        send(&stream, "chatty", Timestamp::now(), 1.0).await;
        let (a, b) = tokio::join!(run(&w1), run(&w2));
        opened += a.opened + b.opened;
    }

    // THEN exactly one offline alert opened, at its last arrival plus the window
    assert_eq!(opened, 1);
    let list = alerts(&p, "quiet").await;
    assert_eq!(list.len(), 1, "{list:#?}");
    let a = &list[0];
    assert_eq!(
        (a["kind"].as_str(), a["rule"].as_str()),
        (Some("offline"), Some("offline"))
    );
    assert!(a.get("metric").is_none(), "{a}");
    assert_eq!(a["state"], "open");
    assert_eq!(a["severity"], "warning");
    let d = device(&p, "quiet").await;
    assert_eq!(d["connectivity"], "offline");
    let since = Timestamp::parse_rfc3339(d["offline"]["since"].as_str().unwrap()).unwrap();
    let opened_at = Timestamp::parse_rfc3339(a["openedAt"].as_str().unwrap()).unwrap();
    assert_eq!(
        opened_at,
        since.plus_millis(i64::from(WINDOW) * 1000).unwrap()
    );
    let offline: Vec<_> = common::all_items(p.api_addr, "/devices?connectivity=offline")
        .await
        .into_iter()
        .map(|d| d["deviceId"].clone())
        .collect();
    assert_eq!(offline, [json!("quiet")]);
    assert_eq!(device(&p, "chatty").await["connectivity"], "online");
    // AND one `opened` event went out for it
    eventually(SOON, "the opened event", || async {
        (events(&p, "quiet").await.iter().any(|(c, _)| c == "opened")).then_some(())
    })
    .await;
    let ev = events(&p, "quiet").await;
    assert_eq!(ev.len(), 1, "{ev:#?}");
    assert_eq!(ev[0].1["kind"], "offline");

    // WHEN it sends again THEN the alert resolves, once, and it is online
    send(&stream, "quiet", Timestamp::now(), 9.0).await;
    eventually(SOON, "the resolved event", || async {
        (events(&p, "quiet")
            .await
            .iter()
            .any(|(c, _)| c == "resolved"))
        .then_some(())
    })
    .await;
    let a = &alerts(&p, "quiet").await[0];
    assert_eq!(a["state"], "resolved");
    assert_eq!(device(&p, "quiet").await["connectivity"], "online");
    let (_, listed) = common::get(p.api_addr, "/devices?connectivity=offline").await;
    assert_eq!(listed["items"], json!([]));
    let changes: Vec<String> = events(&p, "quiet").await.into_iter().map(|e| e.0).collect();
    assert_eq!(changes, ["opened", "resolved"]);
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_device_whose_window_is_removed_has_its_offline_alert_resolved() {
    // GIVEN a fleet without a window, and a device given one of its own
    let table = TestTable::new("offline-rm").await;
    let stream = TestStream::new("offline-rm", 1).await;
    let p = pipeline(common::local_config(&table, &stream, 1), 0).await;
    let w = watchdog(&table, &stream, 0).await;
    let (status, _) = common::put(p.api_addr, "/devices/gone", r#"{"name":"Gate"}"#).await;
    assert_eq!(status, 201);
    // (4 s is below what the API takes, so it is written straight into the item.)
    table
        .client
        .update_item()
        .table_name(&table.name)
        .key(
            "pk",
            aws_sdk_dynamodb::types::AttributeValue::S("DEVICE#gone".into()),
        )
        .key(
            "sk",
            aws_sdk_dynamodb::types::AttributeValue::S("#METADATA".into()),
        )
        .update_expression("SET offlineAfterSeconds = :w")
        .expression_attribute_values(
            ":w",
            aws_sdk_dynamodb::types::AttributeValue::N(WINDOW.to_string()),
        )
        .send()
        .await
        .unwrap();
    send(&stream, "gone", Timestamp::now(), 1.0).await;
    eventually(Duration::from_secs(40), "gone goes offline", || async {
        if device(&p, "gone").await["connectivity"] == "offline" {
            return Some(());
        }
        run(&w).await;
        None
    })
    .await;
    // WHEN its window is removed (a PUT without it)
    let (status, _) = common::put(p.api_addr, "/devices/gone", r#"{"name":"Gate"}"#).await;
    assert_eq!(status, 200);
    // THEN its offline alert resolves and its connectivity is unknown
    eventually(SOON, "resolved", || async {
        (alerts(&p, "gone")
            .await
            .first()
            .is_some_and(|a| a["state"] == "resolved"))
        .then_some(())
    })
    .await;
    assert_eq!(device(&p, "gone").await["connectivity"], "unknown");
    eventually(SOON, "the resolved event", || async {
        (events(&p, "gone")
            .await
            .iter()
            .any(|(c, _)| c == "resolved"))
        .then_some(())
    })
    .await;
    // AND the watchdog leaves it alone from now on
    assert_eq!(run(&w).await.opened, 0);
    assert_eq!(alerts(&p, "gone").await.len(), 1);
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_outage_longer_than_the_window_declares_nobody_offline_whose_readings_waited() {
    // GIVEN the pipeline reaching DynamoDB through a fault proxy, and two devices sending
    // every half second
    let table = TestTable::new("offline-out").await;
    let stream = TestStream::new("offline-out", 1).await;
    let proxy = FaultProxy::start(services().dynamodb_addr()).await.unwrap();
    let local = LocalConfig {
        dynamodb_endpoint: proxy.endpoint(),
        ..common::local_config(&table, &stream, 1)
    };
    let p = pipeline(local, WINDOW).await;
    let w = watchdog(&table, &stream, WINDOW).await;
    eventually(Duration::from_secs(30), "both devices watched", || async {
        send(&stream, "steady", Timestamp::now(), 1.0).await;
        send(&stream, "dying", Timestamp::now(), 1.0).await;
        let r = run(&w).await;
        assert_eq!(r.opened, 0, "{r:?}");
        (r.heartbeat_passed
            && device(&p, "steady").await["connectivity"] == "online"
            && device(&p, "dying").await["connectivity"] == "online")
            .then_some(())
    })
    .await;

    // WHEN DynamoDB fails every call of the pipeline for two windows, while `steady` keeps
    // sending and `dying` sends its last reading just after the outage began
    proxy.fail_with(Fault::Both);
    send(&stream, "dying", Timestamp::now(), 2.0).await;
    let last_sent = Timestamp::now();
    let outage_end = tokio::time::Instant::now() + Duration::from_secs(2 * u64::from(WINDOW));
    while tokio::time::Instant::now() < outage_end {
        // Over the whole outage (not a wait for an outcome: every run is checked).
        send(&stream, "steady", Timestamp::now(), 1.0).await;
        let r = run(&w).await;
        // THEN nobody is declared offline while the heartbeats wait behind the backlog
        assert_eq!(r.opened, 0, "{r:?}");
        assert!(!r.heartbeat_passed, "{r:?}");
    }
    proxy.recover();

    // WHEN the backlog clears
    let last = common::LastSeen::default();
    eventually(
        Duration::from_secs(60),
        "the watchdog catches up",
        || async {
            send(&stream, "steady", Timestamp::now(), 1.0).await;
            let r = run(&w).await;
            last.set(format!("{r:?}"));
            (r.heartbeat_passed && !alerts(&p, "dying").await.is_empty()).then_some(())
        },
    )
    .await;
    // THEN the device that kept sending is online, never alerted
    assert!(alerts(&p, "steady").await.is_empty());
    assert_eq!(device(&p, "steady").await["connectivity"], "online");
    // AND the one that stopped is offline from its true last arrival (during the outage,
    // not when the backlog was stored) plus its window
    let a = &alerts(&p, "dying").await[0];
    let opened = Timestamp::parse_rfc3339(a["openedAt"].as_str().unwrap()).unwrap();
    let deadline = last_sent.plus_millis(i64::from(WINDOW) * 1000).unwrap();
    let off = (opened.epoch_millis() - deadline.epoch_millis()).abs();
    assert!(
        off < 1_500,
        "opened at {opened}, its last arrival + window is about {deadline}"
    );
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_device_uploading_old_readings_is_online_while_it_sends() {
    let table = TestTable::new("offline-old").await;
    let stream = TestStream::new("offline-old", 1).await;
    let p = pipeline(common::local_config(&table, &stream, 1), WINDOW).await;
    let w = watchdog(&table, &stream, WINDOW).await;
    // GIVEN a device whose newest reading is from now
    send(&stream, "backfill", Timestamp::now(), 0.0).await;
    eventually(SOON, "watched", || async {
        (device(&p, "backfill").await["connectivity"] == "online").then_some(())
    })
    .await;
    // WHEN for three windows it uploads only readings from three days ago, one a second
    let old = Timestamp::now().minus_millis(3 * 86_400_000).unwrap();
    let end = tokio::time::Instant::now() + Duration::from_secs(3 * u64::from(WINDOW));
    let mut i = 0;
    while tokio::time::Instant::now() < end {
        i += 1;
        send(
            &stream,
            "backfill",
            old.plus_millis(i * 60_000).unwrap(),
            1.0,
        )
        .await;
        // Paces the uploads only (about one a second with the run below).
        tokio::time::sleep(Duration::from_millis(500)).await;
        // THEN the watchdog never takes it for silent
        let r = run(&w).await;
        assert_eq!(r.opened, 0, "{r:?}");
    }
    assert!(alerts(&p, "backfill").await.is_empty());
    assert_eq!(device(&p, "backfill").await["connectivity"], "online");
    // AND once it stops, it is offline one window after its last upload
    eventually(Duration::from_secs(40), "backfill goes offline", || async {
        if !alerts(&p, "backfill").await.is_empty() {
            return Some(());
        }
        run(&w).await;
        None
    })
    .await;
    p.stop().await;
}

/// The group alert events published for `group`, as `(change, detail)`.
async fn group_events(p: &Pipeline, group: &str) -> Vec<(String, Value)> {
    let log = p.events.as_ref().expect("the alerts mapping runs");
    log.since(0)
        .await
        .into_iter()
        .map(|(_, e)| e["detail"].clone())
        .filter(|d| d["group"] == group)
        .map(|d| (d["change"].as_str().unwrap_or_default().to_owned(), d))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn half_a_site_silent_opens_its_group_alert_and_the_silent_device_back_resolves_it() {
    let table = TestTable::new("offline-group").await;
    let stream = TestStream::new("offline-group", 2).await;
    let p = pipeline(common::local_config(&table, &stream, 2), WINDOW).await;
    let mut w = watchdog(&table, &stream, WINDOW).await;
    w.config.group_rules = vec![
        tidemark_schema::GroupRuleSpec::from_value(
            &json!({"group": "site:G", "offlineFraction": {"above": 0.25}, "severity": "critical"}),
        )
        .unwrap(),
    ];
    // GIVEN site G's two devices, registered through the API, one silent after three
    // readings and one that keeps sending
    for d in ["g_quiet", "g_chatty"] {
        let body = json!({"tags": {"site": "G"}}).to_string();
        let (status, resp) = common::put(p.api_addr, &format!("/devices/{d}"), &body).await;
        assert_eq!(status, 201, "{resp}");
    }
    for i in 0..3 {
        send(&stream, "g_quiet", Timestamp::now(), f64::from(i)).await;
        send(&stream, "g_chatty", Timestamp::now(), 1.0).await;
        // Paces the sends only: three readings, half a second apart.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eventually(SOON, "g_quiet is watched", || async {
        (device(&p, "g_quiet").await["connectivity"] == "online").then_some(())
    })
    .await;

    // WHEN the watchdog runs until g_quiet is past its window
    let mut group_opened = eventually(
        Duration::from_secs(40),
        "site G's group alert opens",
        || async {
            send(&stream, "g_chatty", Timestamp::now(), 1.0).await;
            let r = run(&w).await;
            (r.group_opened > 0).then_some(r.group_opened)
        },
    )
    .await;
    let again = run(&w).await;
    group_opened += again.group_opened;

    // THEN site G has one group alert, listed with its group, and its opened event reaches
    // the bus with the group and no device
    assert_eq!(group_opened, 1);
    let listed: Vec<Value> = common::all_items(p.api_addr, "/alerts?tag=site:G")
        .await
        .into_iter()
        .filter(|a| a["kind"] == "group")
        .collect();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(
        (
            &listed[0]["group"],
            &listed[0]["value"],
            &listed[0]["members"]
        ),
        (&json!("site:G"), &json!(0.5), &json!(2))
    );
    let opened = eventually(SOON, "the group alert's opened event", || async {
        let got = group_events(&p, "site:G").await;
        got.iter()
            .find(|(c, _)| c == "opened")
            .map(|(_, d)| d.clone())
    })
    .await;
    assert_eq!(opened["kind"], "group");
    assert_eq!(opened["severity"], "critical");
    assert!(opened.get("deviceId").is_none(), "{opened}");

    // WHEN g_quiet sends again and the watchdog runs once its offline alert has resolved
    send(&stream, "g_quiet", Timestamp::now(), 9.0).await;
    eventually(SOON, "g_quiet is back", || async {
        (device(&p, "g_quiet").await["connectivity"] == "online").then_some(())
    })
    .await;
    let r = run(&w).await;

    // THEN the group alert resolves, and its resolved event reaches the bus, once
    assert_eq!(r.group_resolved, 1, "{r:?}");
    eventually(SOON, "the group alert's resolved event", || async {
        let got = group_events(&p, "site:G").await;
        got.iter().any(|(c, _)| c == "resolved").then_some(())
    })
    .await;
    let changes: Vec<String> = group_events(&p, "site:G")
        .await
        .into_iter()
        .map(|(c, _)| c)
        .collect();
    assert_eq!(changes, ["opened", "resolved"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sites_hot_reading_opens_its_group_window_alert_once_the_rollups_role_has_passed_it() {
    let table = TestTable::new("group-window").await;
    let stream = TestStream::new("group-window", 2).await;
    let p = pipeline(common::local_config(&table, &stream, 2), WINDOW).await;
    let mut w = watchdog(&table, &stream, WINDOW).await;
    w.config.group_rules = vec![
        tidemark_schema::GroupRuleSpec::from_value(
            &json!({"group": "site:H", "metric": "t", "aggregate": "max", "window": "2m", "above": 40}),
        )
        .unwrap(),
    ];
    // GIVEN site H's two devices, tagged since long ago (a tag change through the API takes
    // effect after a lead time: docs/design.md §2, "Tags and groups")
    for d in ["h_one", "h_two"] {
        let id = tidemark_schema::DeviceId::new(d).unwrap();
        let key = tidemark_schema::TagHistoryItem::key(&id);
        let tags: Value = json!({"site": "H"});
        table
            .put(&tidemark_schema::TagHistoryItem {
                pk: key.pk,
                sk: key.sk,
                epochs: tidemark_schema::TagHistory::from_epochs(vec![tidemark_schema::TagEpoch {
                    from: Timestamp::parse_rfc3339("2026-01-01T00:00:00Z").unwrap(),
                    tags: serde_json::from_value(tags).unwrap(),
                }]),
                version: 1,
            })
            .await;
    }
    // AND their readings of the minute before this one, one of them 45
    let last_minute = Timestamp::now()
        .minute_start()
        .plus_millis(-30_000)
        .unwrap();
    send(&stream, "h_one", last_minute, 20.0).await;
    send(&stream, "h_two", last_minute, 45.0).await;

    // WHEN the watchdog runs (its heartbeats go through ingest and both roles) until the
    // rollups role has passed the minute
    let opened = eventually(
        Duration::from_secs(60),
        "site H's window alert opens",
        || async {
            let r = run(&w).await;
            (r.group_opened > 0).then_some(r)
        },
    )
    .await;
    assert!(opened.rollups_watermark.is_some(), "{opened:?}");
    let again = run(&w).await;

    // THEN one group alert, whose opened event reaches the bus with the group, the rule and
    // the window's maximum
    assert_eq!(again.group_opened, 0, "{again:?}");
    let sent = eventually(SOON, "the window alert's opened event", || async {
        let got = group_events(&p, "site:H").await;
        (!got.is_empty()).then_some(got)
    })
    .await;
    assert_eq!(sent.len(), 1, "{sent:?}");
    let (change, d) = &sent[0];
    assert_eq!(change, "opened");
    assert_eq!((&d["kind"], &d["value"]), (&json!("group"), &json!(45.0)));
    assert_eq!(d["ruleSpec"]["aggregate"], "max");
    p.stop().await;
}
