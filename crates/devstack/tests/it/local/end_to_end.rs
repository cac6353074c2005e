//! The whole pipeline through Kinesis: simulated fleet → Kinesis → ingest → table → stream →
//! aggregator → table → local HTTP API, checked only through HTTP against a recomputation of
//! what the simulator sent, and the alert events through the local EventBridge endpoint.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::Value;
use tidemark_devstack::esm::{MappingConfig, read_on_failure_records};
use tidemark_devstack::pipeline::{AlertsConfig, Functions, Pipeline, PipelineConfig};
use tidemark_devstack::simulator::{Fleet, Outgoing, RecordKind, SimConfig, SimStats, put_records};
use tidemark_schema::{Period, Timestamp};
use tidemark_streams::{DynamoDbStreamSource, EventSource, Start};
use tidemark_testkit::{TestStream, TestTable, eventually, unique_name};

use crate::common;
use crate::common::{PATIENCE, all_items, encode, get, post, try_all_items};

const THRESHOLDS: &str =
    r#"{"temperature":{"max":35,"severity":"critical"},"battery":{"min":10,"severity":"warning"}}"#;

/// A reading with every number as f64, so `71` and `71.0` compare equal.
fn normalised(v: &Value) -> Value {
    match v {
        Value::Number(n) => serde_json::json!(n.as_f64().unwrap()),
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), normalised(v))).collect())
        }
        other => other.clone(),
    }
}

const METRICS: [&str; 4] = ["temperature", "humidity", "pressure", "battery"];

#[derive(Debug, Clone, PartialEq)]
struct Bucket {
    count: u64,
    sum: f64,
    min: f64,
    max: f64,
}

/// (device, period, bucket start) → metric → stats, from the distinct readings sent.
fn recompute(
    readings: &BTreeMap<(String, String), Value>,
) -> BTreeMap<(String, String, String), BTreeMap<String, Bucket>> {
    let mut out: BTreeMap<(String, String, String), BTreeMap<String, Bucket>> = BTreeMap::new();
    for ((device, ts), r) in readings {
        let t = Timestamp::parse_flexible(ts).unwrap();
        for period in [Period::Hourly, Period::Daily] {
            let start = period.bucket(t).start().to_string();
            let b = out
                .entry((device.clone(), period.as_str().to_owned(), start))
                .or_default();
            for m in METRICS {
                let v = r[m].as_f64().unwrap();
                b.entry(m.to_owned())
                    .and_modify(|s| {
                        s.count += 1;
                        s.sum += v;
                        s.min = s.min.min(v);
                        s.max = s.max.max(v);
                    })
                    .or_insert(Bucket {
                        count: 1,
                        sum: v,
                        min: v,
                        max: v,
                    });
            }
        }
    }
    out
}

fn same_stats(want: &BTreeMap<String, Bucket>, got: &Value) -> bool {
    want.iter().all(|(m, w)| {
        let g = &got[m.as_str()];
        g["count"].as_u64() == Some(w.count)
            && g["min"].as_f64() == Some(w.min)
            && g["max"].as_f64() == Some(w.max)
            && g["sum"]
                .as_f64()
                .is_some_and(|s| (s - w.sum).abs() <= 1e-6 * w.sum.abs().max(1.0))
    }) && got.as_object().map(|o| o.len()) == Some(want.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulated_fleet_flows_through_kinesis_ingest_aggregator_and_api() {
    // GIVEN a fresh table and stream, and the pipeline running over them
    let table = TestTable::new("e2e").await;
    let stream = TestStream::new("e2e", 2).await;
    let local = common::local_config(&table, &stream, 2);
    let on_failure = std::env::temp_dir().join(unique_name("e2e-onfailure"));
    let fast = |name: &str, batch: usize, window_ms: u64| MappingConfig {
        batch_size: batch,
        batching_window: Duration::from_millis(window_ms),
        poll_interval: Duration::from_millis(100),
        shard_refresh: Duration::from_secs(1),
        max_retries: Some(10),
        on_failure_dir: Some(on_failure.join(name)),
        ..MappingConfig::new(name)
    };
    let pipeline = Pipeline::start(PipelineConfig {
        sign_in: None,
        offline_after_default: 0,
        watchdog: None,
        export: None,
        local,
        api_port: 0,
        functions: Functions::InProcess,
        ingest: fast("ingest", 100, 300),
        rollups: fast("rollups", 1000, 500),
        default_layout: None,
        device_identity: tidemark_schema::DeviceIdentity::PartitionKey,
        default_thresholds: THRESHOLDS.into(),
        alerts: Some(AlertsConfig::ephemeral(fast("alerts", 1000, 200))),
    })
    .await
    .unwrap();
    let api = pipeline.api_addr;

    // AND a seeded fleet's last five minutes of readings, misbehaviour included
    let now = Timestamp::now();
    let start = now.minus_millis(5 * 60_000).unwrap();
    let cfg = SimConfig {
        devices: 4,
        readings_per_minute: 6.0,
        seed: 20260420,
        breach_probability: 0.06,
        late_probability: 0.08,
        duplicate_probability: 0.08,
        malformed_probability: 0.06,
        array_probability: 0.08,
        ..SimConfig::default()
    };
    let mut fleet = Fleet::new(cfg, start);
    let mut sent: Vec<Outgoing> = fleet.tick(now);
    sent.extend(fleet.flush());
    let readings = tidemark_devstack::simulator::expected_readings(&sent);
    let malformed: Vec<&str> = sent
        .iter()
        .filter_map(|o| match o.kind {
            RecordKind::Malformed(why) => Some(why),
            _ => None,
        })
        .collect();
    // The seed was chosen so every kind of trouble occurs; guard against a simulator change.
    assert!(!malformed.is_empty(), "the run must hold malformed records");
    assert!(
        sent.iter()
            .any(|o| matches!(o.kind, RecordKind::Duplicate(_)))
    );
    let breaching = |m: &str, bad: &dyn Fn(f64) -> bool| -> BTreeSet<String> {
        readings
            .iter()
            .filter(|(_, r)| bad(r[m].as_f64().unwrap()))
            .map(|((d, _), _)| d.clone())
            .collect()
    };
    let hot = breaching("temperature", &|v| v > 35.0);
    let flat = breaching("battery", &|v| v < 10.0);
    assert!(
        !hot.is_empty() || !flat.is_empty(),
        "the run must breach a threshold"
    );

    // WHEN the fleet's records go into Kinesis
    put_records(&stream.client, &stream.name, &sent, &SimStats::default())
        .await
        .unwrap();

    // THEN, once the pipeline has caught up, the API serves exactly what was sent
    let expected = recompute(&readings);
    let devices: BTreeSet<String> = readings.keys().map(|(d, _)| d.clone()).collect();
    let from = encode(&start.minus_millis(3_600_000).unwrap().to_string());
    let to = encode(&now.plus_millis(3_600_000).unwrap().to_string());
    let t0 = std::time::Instant::now();
    let last = common::LastSeen::default();
    eventually(
        Duration::from_secs(120),
        "aggregates match the recomputation",
        || async {
            if pipeline.ingest.delivered() < sent.len() as u64 {
                last.set(format!(
                    "ingest has taken {} of {}",
                    pipeline.ingest.delivered(),
                    sent.len()
                ));
                return None;
            }
            for d in &devices {
                for period in ["hourly", "daily"] {
                    let got = match try_all_items(
                        api,
                        &format!("/devices/{d}/aggregates?period={period}&from={from}&to={to}"),
                    )
                    .await
                    {
                        Ok(items) => items,
                        Err(e) => {
                            last.set(e);
                            return None;
                        }
                    };
                    let want: Vec<_> = expected
                        .iter()
                        .filter(|((dev, p, _), _)| dev == d && p == period)
                        .collect();
                    let matches = got.len() == want.len()
                        && want.iter().all(|((_, _, start), stats)| {
                            got.iter().any(|g| {
                                g["start"] == start.as_str() && same_stats(stats, &g["metrics"])
                            })
                        });
                    if !matches {
                        last.set(format!("{d} {period}: want {want:?}\ngot {got:?}"));
                        return None;
                    }
                }
            }
            Some(())
        },
    )
    .await;
    eprintln!(
        "{} records, {} readings: caught up after {:?} ({} ingest, {} aggregator records)",
        sent.len(),
        readings.len(),
        t0.elapsed(),
        pipeline.ingest.delivered(),
        pipeline.rollups.delivered()
    );

    // Readings: every distinct reading, once, as sent (late and duplicate sends collapse).
    for d in &devices {
        let got = all_items(
            api,
            &format!("/devices/{d}/readings?from={from}&to={to}&limit=50"),
        )
        .await;
        let got: Vec<Value> = got.iter().map(normalised).collect();
        let want: Vec<Value> = readings
            .iter()
            .filter(|((dev, _), _)| dev == d)
            .map(|(_, r)| normalised(r))
            .collect();
        assert_eq!(got, want, "readings of {d}");
        // The latest reading is the newest by reading time, whatever the arrival order.
        let (status, latest) = get(api, &format!("/devices/{d}/readings/latest")).await;
        assert_eq!(status, 200);
        assert_eq!(normalised(&latest), *want.last().unwrap(), "latest of {d}");
    }

    // Alerts from the fleet: only devices that breached a threshold alert on it, with a peak
    // taken from their breaching readings. (Which breaches alert also depends on arrival
    // order: a late reading never flips an alert, so no more is asserted per device.)
    let mut alerted = 0;
    for d in &devices {
        let alerts = all_items(api, &format!("/devices/{d}/alerts")).await;
        for (metric, severity, breached) in [
            ("temperature", "critical", &hot),
            ("battery", "warning", &flat),
        ] {
            let mine: Vec<&Value> = alerts.iter().filter(|a| a["metric"] == metric).collect();
            if !breached.contains(d) {
                assert!(mine.is_empty(), "{d} never breached {metric}: {mine:?}");
            }
            for a in mine {
                alerted += 1;
                assert_eq!(a["severity"], severity);
                let v = a["value"].as_f64().unwrap();
                let sent_values: Vec<f64> = readings
                    .iter()
                    .filter(|((dev, _), _)| dev == d)
                    .map(|(_, r)| r[metric].as_f64().unwrap())
                    .collect();
                assert!(sent_values.contains(&v), "alert value {v} was sent by {d}");
                assert!(if metric == "temperature" {
                    v > 35.0
                } else {
                    v < 10.0
                });
            }
        }
    }
    assert!(alerted > 0, "the fleet's breaches raised alerts");
    eprintln!("readings and alerts checked after {:?}", t0.elapsed());

    // Quarantine: each malformed record, kept with its reason; nothing else.
    let mut days = BTreeSet::new();
    days.insert(Timestamp::now().day().to_string());
    days.insert(now.day().to_string());
    let mut reasons: Vec<String> = Vec::new();
    let mut seqs = BTreeSet::new();
    for day in days {
        for q in all_items(api, &format!("/quarantine?day={day}")).await {
            if seqs.insert(q["sequenceNumber"].as_str().unwrap().to_owned()) {
                reasons.push(q["reason"].as_str().unwrap().to_owned());
            }
        }
    }
    reasons.sort();
    let mut want: Vec<String> = malformed.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(reasons, want);

    // AND a fresh breach through Kinesis opens an alert that the next normal reading resolves
    let device = devices.iter().next().unwrap().clone();
    let newest = readings
        .keys()
        .map(|(_, ts)| Timestamp::parse_flexible(ts).unwrap())
        .max()
        .unwrap();
    let t1 = newest.plus_millis(1_000).unwrap();
    let t2 = newest.plus_millis(2_000).unwrap();
    let send = |t: Timestamp, temperature: f64| {
        Outgoing {
        partition_key: device.clone(),
        data: serde_json::json!({"deviceId": device, "timestamp": t.to_string(), "temperature": temperature})
            .to_string()
            .into_bytes(),
        kind: RecordKind::Readings(vec![]),
        due: t,
    }
    };
    put_records(
        &stream.client,
        &stream.name,
        &[send(t1, 50.5)],
        &SimStats::default(),
    )
    .await
    .unwrap();
    let opened = eventually(PATIENCE, "the breach opened an alert", || async {
        all_items(api, "/alerts?severity=critical&state=open")
            .await
            .into_iter()
            .find(|a| {
                a["deviceId"] == device.as_str() && a["lastBreachAt"] == t1.to_string().as_str()
            })
    })
    .await;
    assert_eq!(opened["value"], 50.5);
    assert_eq!(opened["state"], "open");
    let id = opened["alertId"].as_str().unwrap().to_owned();
    let events_addr = pipeline.events_addr.expect("the local event bus runs");
    let changes_of = |id: String| async move {
        let (status, body) = get(events_addr, "/events").await;
        assert_eq!(status, 200);
        body["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["detail"]["alertId"] == id.as_str())
            .map(|e| e["detail"]["change"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    eventually(PATIENCE, "the opened alert was published", || async {
        changes_of(id.clone())
            .await
            .contains(&"opened".to_owned())
            .then_some(())
    })
    .await;
    let (status, _) = post(api, &format!("/devices/{device}/alerts/{id}/ack"), "").await;
    assert_eq!(status, 200, "acknowledged through the API");
    eventually(PATIENCE, "the acknowledgement was published", || async {
        changes_of(id.clone())
            .await
            .contains(&"acknowledged".to_owned())
            .then_some(())
    })
    .await;
    put_records(
        &stream.client,
        &stream.name,
        &[send(t2, 21.0)],
        &SimStats::default(),
    )
    .await
    .unwrap();
    let resolved = eventually(
        PATIENCE,
        "the normal reading resolved the alert",
        || async {
            all_items(api, &format!("/devices/{device}/alerts"))
                .await
                .into_iter()
                .find(|a| a["alertId"] == id.as_str() && a["state"] == "resolved")
        },
    )
    .await;
    assert_eq!(resolved["resolvedAt"], t2.to_string().as_str());
    assert!(
        !all_items(api, "/alerts?severity=critical&state=open")
            .await
            .iter()
            .any(|a| a["alertId"] == id.as_str())
    );

    eventually(PATIENCE, "the resolution was published", || async {
        changes_of(id.clone())
            .await
            .contains(&"resolved".to_owned())
            .then_some(())
    })
    .await;
    assert_eq!(
        changes_of(id.clone()).await,
        ["opened", "acknowledged", "resolved"],
        "each change of the alert published exactly once, in order"
    );
    let events = pipeline.events.clone().unwrap();
    let published = events.events().await;
    for e in &published {
        assert_eq!(e["source"], "tidemark");
        assert_eq!(e["detail-type"], "Alert State Change");
        let d = &e["detail"];
        assert_eq!(
            d["path"].as_str().unwrap(),
            format!(
                "/devices/{}/alerts/{}",
                d["deviceId"].as_str().unwrap(),
                d["alertId"].as_str().unwrap()
            )
        );
    }
    // Every alert of the run was opened once, whichever of the two aggregator mappings
    // wrote it and however often the mappings retried.
    for d in &devices {
        for a in all_items(api, &format!("/devices/{d}/alerts")).await {
            let opened = published
                .iter()
                .filter(|e| {
                    e["detail"]["alertId"] == a["alertId"]
                        && e["detail"]["deviceId"] == a["deviceId"]
                        && e["detail"]["change"] == "opened"
                })
                .count();
            assert_eq!(opened, 1, "opened events of {a}");
        }
    }

    // AND the whole stream replayed to the alerts function as one batch publishes nothing
    // (once the alerts mapping has settled: a record it has not seen yet is no replay)
    // Settled: its count of delivered records has not moved for two seconds.
    let alerts = pipeline.alerts.as_ref().unwrap();
    let mut seen = (alerts.delivered(), std::time::Instant::now());
    eventually(
        Duration::from_secs(120),
        "the alerts mapping settles",
        || {
            let now_seen = alerts.delivered();
            if now_seen != seen.0 {
                seen = (now_seen, std::time::Instant::now());
            }
            let settled = seen.1.elapsed() >= Duration::from_secs(2);
            async move { settled.then_some(()) }
        },
    )
    .await;
    let source = DynamoDbStreamSource::for_table(
        &table.client,
        common::local_config(&table, &stream, 2)
            .dynamodb_streams()
            .await,
        &table.name,
    )
    .await
    .unwrap();
    let mut records = Vec::new();
    for shard in source.shards().await.unwrap() {
        let mut it = source
            .iterator(&shard.id, &Start::TrimHorizon)
            .await
            .unwrap();
        while let Some(i) = it {
            let page = source.read(&shard.id, &i, 1000).await.unwrap();
            if page.records.is_empty() {
                break;
            }
            records.extend(page.records);
            it = page.next;
        }
    }
    let alert_records = records
        .iter()
        .filter(|r| {
            r.change.keys.get("sk").is_some_and(
                |v| matches!(v, serde_dynamo::AttributeValue::S(s) if s.starts_with("ALERT#")),
            )
        })
        .count();
    assert!(alert_records >= 3, "the stream holds the alert's writes");
    let notifier = tidemark_aggregator::Notifier::with_parts(
        tidemark_aggregator::notify::SdkPublisher(
            tidemark_aggregator::notify::eventbridge_client(Some(&format!("http://{events_addr}")))
                .await,
        ),
        tidemark_aggregator::notify::DynamoMarkers::new(table.client.clone(), table.name.clone()),
        "tidemark-local",
    );
    let mut replay = aws_lambda_events::event::dynamodb::Event::default();
    replay.records = records;
    let (not_done, report) = notifier.process(&replay).await;
    assert_eq!(not_done, None);
    assert_eq!(report.published, 0, "{report:?}");
    assert!(report.already_published > 0, "{report:?}");
    assert_eq!(events.events().await.len(), published.len(), "no new event");

    eprintln!(
        "alert lifecycle and events checked after {:?}",
        t0.elapsed()
    );
    // AND nothing was given up on
    assert!(read_on_failure_records(&on_failure.join("ingest")).is_empty());
    assert!(read_on_failure_records(&on_failure.join("rollups")).is_empty());
    assert!(read_on_failure_records(&on_failure.join("alerts")).is_empty());
    assert_eq!(
        pipeline.ingest.discarded() + pipeline.rollups.discarded(),
        0
    );
    pipeline.stop().await;
}
