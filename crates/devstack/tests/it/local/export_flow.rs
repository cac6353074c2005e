//! The export end to end: a day of two devices' readings (one packed, one single) flows
//! through the pipeline (Kinesis → ingest → table → stream → rollups role → API) as fleets
//! send it: late, out of order, resent, corrected, and per-sensor records sharing a timestamp.
//! The exporter function's runs write the day to moto's S3, its hours' slices through a
//! queue on moto's SQS to `make run`'s poller of it; DuckDB reads the downloaded
//! objects with Hive partitioning. Per device, metric and hour the export's count, sum, min
//! and max are the API's hourly rollups, its daily rollups the API's daily ones, and every
//! reading the API returns is in the export exactly once. Then a late reading and a
//! correction land in exported hours: the next run exports those hours and the day again,
//! and the same holds, with the late reading counted once.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use tidemark_devstack::pipeline::Pipeline;
use tidemark_exporter::State;
use tidemark_exporter::config::ExporterConfig;
use tidemark_exporter::function::Exporter;
use tidemark_schema::{
    DeviceId, DeviceItem, DeviceStatus, Layout, LayoutHistory, LayoutHistoryItem, Period, SlotLen,
    Timestamp,
};
use tidemark_testkit::{TestStream, TestTable, services, unique_name};

use crate::common;
use crate::common::{encode, try_all_items};

const HOUR_MS: i64 = 3_600_000;
const DEVICES: [&str; 2] = ["pack_01", "solo_01"];

/// (device, metric, bucket start µs) → (count, sum, min, max).
type Summaries = BTreeMap<(String, String, i64), (u64, f64, f64, f64)>;
/// (device, time µs, metric) → every value exported for it.
type Rows = BTreeMap<(String, i64, String), Vec<f64>>;

const QUERY: &str = r#"
import duckdb, json, sys
root = sys.argv[1]
con = duckdb.connect()
rows = con.execute(f"""
  SELECT device_id, epoch_us(time), metric, value
  FROM read_parquet('{root}/lake/readings/*/*/*.parquet', hive_partitioning = true)
  ORDER BY ALL""").fetchall()
hours = con.execute(f"""
  SELECT device_id, metric, epoch_us(date_trunc('hour', time)), count(*), sum(value),
         min(value), max(value)
  FROM read_parquet('{root}/lake/readings/*/*/*.parquet', hive_partitioning = true)
  GROUP BY ALL ORDER BY ALL""").fetchall()
rollups = con.execute(f"""
  SELECT period, device_id, metric, epoch_us(bucket_start), "count", "sum", "min", "max"
  FROM read_parquet('{root}/lake/rollups/*/*/*.parquet', hive_partitioning = true)
  ORDER BY ALL""").fetchall()
print(json.dumps({"rows": rows, "hours": hours, "rollups": rollups}))
"#;

fn record(device: &str, at: Timestamp, metrics: &[(&str, f64)]) -> (String, Vec<u8>) {
    let mut r = json!({"deviceId": device, "timestamp": at.to_string()});
    for (m, v) in metrics {
        r[*m] = json!(v);
    }
    (device.to_owned(), serde_json::to_vec(&r).unwrap())
}

/// What the export holds, read by DuckDB from the objects under `lake/` downloaded.
async fn exported(s3: &aws_sdk_s3::Client, bucket: &str) -> Value {
    let dir = std::env::temp_dir().join(unique_name("export-flow"));
    let list = s3
        .list_objects_v2()
        .bucket(bucket)
        .prefix("lake/")
        .max_keys(1000)
        .send()
        .await
        .unwrap();
    assert_ne!(
        list.is_truncated(),
        Some(true),
        "more objects than one page"
    );
    for o in list.contents() {
        let key = o.key().unwrap();
        let body = s3
            .get_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .unwrap();
        let bytes = body.body.collect().await.unwrap().into_bytes();
        let path = dir.join(key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    let got = tidemark_testkit::duckdb::query(QUERY, Path::new(&dir));
    std::fs::remove_dir_all(&dir).ok();
    got
}

fn summaries(rows: &Value, skip: usize) -> Summaries {
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let r = &r.as_array().unwrap()[skip..];
            (
                (
                    r[0].as_str().unwrap().to_owned(),
                    r[1].as_str().unwrap().to_owned(),
                    r[2].as_i64().unwrap(),
                ),
                (
                    r[3].as_u64().unwrap(),
                    r[4].as_f64().unwrap(),
                    r[5].as_f64().unwrap(),
                    r[6].as_f64().unwrap(),
                ),
            )
        })
        .collect()
}

/// The API's rollups of `period` for every device over `[from, to)`.
async fn api_rollups(
    api: std::net::SocketAddr,
    period: Period,
    from: Timestamp,
    to: Timestamp,
) -> Summaries {
    let mut out = Summaries::new();
    for d in DEVICES {
        let path = format!(
            "/devices/{d}/aggregates?period={}&from={}&to={}",
            period.as_str(),
            encode(&from.to_string()),
            encode(&to.to_string())
        );
        for a in try_all_items(api, &path).await.unwrap_or_default() {
            let start = Timestamp::parse_rfc3339(a["start"].as_str().unwrap()).unwrap();
            for (m, s) in a["metrics"].as_object().unwrap() {
                if s["count"].as_u64().unwrap_or(0) == 0 {
                    continue;
                }
                out.insert(
                    (d.to_owned(), m.clone(), start.epoch_micros()),
                    (
                        s["count"].as_u64().unwrap(),
                        s["sum"].as_f64().unwrap(),
                        s["min"].as_f64().unwrap(),
                        s["max"].as_f64().unwrap(),
                    ),
                );
            }
        }
    }
    out
}

/// Every reading the API returns over `[from, to)`, one entry per metric.
async fn api_rows(api: std::net::SocketAddr, from: Timestamp, to: Timestamp) -> Rows {
    let mut out = Rows::new();
    for d in DEVICES {
        let path = format!(
            "/devices/{d}/readings?from={}&to={}&limit=100",
            encode(&from.to_string()),
            encode(&to.to_string())
        );
        for r in try_all_items(api, &path).await.unwrap() {
            let at = Timestamp::parse_rfc3339(r["timestamp"].as_str().unwrap()).unwrap();
            for (m, v) in r.as_object().unwrap() {
                if let Some(v) = v.as_f64() {
                    out.entry((d.to_owned(), at.epoch_micros(), m.clone()))
                        .or_default()
                        .push(v);
                }
            }
        }
    }
    out
}

fn close(a: &Summaries, b: &Summaries) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|((ka, va), (kb, vb))| {
            ka == kb && va.0 == vb.0 && (va.1 - vb.1).abs() < 1e-9 && va.2 == vb.2 && va.3 == vb.3
        })
}

/// The export of `[day, day + 1 day)` against the API's answers for it.
async fn assert_export_is_the_apis(api: std::net::SocketAddr, got: &Value, day: Timestamp) {
    let end = day.plus_millis(24 * HOUR_MS).unwrap();
    let in_day = |t: i64| t >= day.epoch_micros() && t < end.epoch_micros();
    // Every reading the API returns is exported exactly once, with its value.
    let mut rows = Rows::new();
    for r in got["rows"].as_array().unwrap() {
        let t = r[1].as_i64().unwrap();
        if in_day(t) {
            rows.entry((
                r[0].as_str().unwrap().to_owned(),
                t,
                r[2].as_str().unwrap().to_owned(),
            ))
            .or_default()
            .push(r[3].as_f64().unwrap());
        }
    }
    let want = api_rows(api, day, end).await;
    assert!(want.values().all(|v| v.len() == 1));
    assert_eq!(rows, want, "the export's readings are the API's, once each");
    // Per device, metric and hour: the readings' count, sum, min and max are the API's hourly
    // rollups, and so are the exported hourly rollups; the daily ones are the API's daily.
    let hours: Summaries = summaries(&got["hours"], 0)
        .into_iter()
        .filter(|(k, _)| in_day(k.2))
        .collect();
    let api_hours = api_rollups(api, Period::Hourly, day, end).await;
    assert!(
        close(&hours, &api_hours),
        "readings per hour {hours:?}\nAPI hourly {api_hours:?}"
    );
    let rollups = got["rollups"].as_array().unwrap();
    let of = |period: &str| -> Summaries {
        let picked: Vec<Value> = rollups
            .iter()
            .filter(|r| r[0] == period && in_day(r[3].as_i64().unwrap()))
            .cloned()
            .collect();
        summaries(&Value::Array(picked), 1)
    };
    assert!(close(&of("hourly"), &api_hours), "exported hourly rollups");
    let api_days = api_rollups(api, Period::Daily, day, end).await;
    assert!(!api_days.is_empty());
    assert!(
        close(&of("daily"), &api_days),
        "exported daily {:?}\nAPI daily {api_days:?}",
        of("daily")
    );
}

/// The rollups of `rows` per `period` bucket, as the API's readings give them.
fn fold(rows: &Rows, period: Period) -> Summaries {
    let mut out = Summaries::new();
    for ((d, t, m), vs) in rows {
        let at = Timestamp::from_epoch_millis(t / 1000).unwrap();
        let key = (
            d.clone(),
            m.clone(),
            period.bucket(at).start().epoch_micros(),
        );
        for v in vs {
            let e = out
                .entry(key.clone())
                .or_insert((0, 0.0, f64::MAX, f64::MIN));
            *e = (e.0 + 1, e.1 + v, e.2.min(*v), e.3.max(*v));
        }
    }
    out
}

/// Waits until the API serves what was sent (`ready` says so of its readings) and its hourly
/// and daily rollups are the fold of those readings: the pipeline has caught up.
async fn settle(api: std::net::SocketAddr, day: Timestamp, ready: impl Fn(&Rows) -> bool) {
    let end = day.plus_millis(24 * HOUR_MS).unwrap();
    tidemark_testkit::eventually(
        Duration::from_secs(120),
        "the pipeline catches up with what was sent",
        || async {
            let rows = api_rows(api, day, end).await;
            (ready(&rows)
                && close(
                    &fold(&rows, Period::Hourly),
                    &api_rollups(api, Period::Hourly, day, end).await,
                )
                && close(
                    &fold(&rows, Period::Daily),
                    &api_rollups(api, Period::Daily, day, end).await,
                ))
            .then_some(())
        },
    )
    .await;
}

/// How many readings of `metric` `rows` hold, and the value at (`device`, `at`).
fn count(rows: &Rows, metric: &str) -> usize {
    rows.keys().filter(|k| k.2 == metric).count()
}

fn value(rows: &Rows, device: &str, at: Timestamp, metric: &str) -> Option<f64> {
    rows.get(&(device.to_owned(), at.epoch_micros(), metric.to_owned()))
        .and_then(|v| v.first().copied())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exported_day_is_the_apis_day_and_a_late_reading_is_exported_once() {
    let table = TestTable::new("export-flow").await;
    let stream = TestStream::new("export-flow", 1).await;
    // GIVEN the UTC day before yesterday (closed, whatever the time now), a packed device
    // (300 s slots since long before it) and a single one, both registered
    let day = Period::Daily
        .bucket(Timestamp::now().minus_millis(48 * HOUR_MS).unwrap())
        .start();
    let at = |min: i64| day.plus_millis(min * 60_000).unwrap();
    let history = LayoutHistory::default()
        .with_layout(
            day.minus_millis(24 * HOUR_MS).unwrap(),
            Layout::packed(SlotLen::new(300).unwrap()),
        )
        .unwrap();
    let packed = DeviceId::new("pack_01").unwrap();
    table.put(&LayoutHistoryItem::new(&packed, history)).await;
    for d in DEVICES {
        let id = DeviceId::new(d).unwrap();
        table
            .put(&DeviceItem::new(
                id,
                DeviceStatus::Active,
                day.minus_millis(HOUR_MS).unwrap(),
            ))
            .await;
    }
    let pipeline = Pipeline::start(common::in_process(&table, &stream, 100))
        .await
        .unwrap();
    let api = pipeline.api_addr;

    // WHEN a reading every 10 minutes of the day arrives from each device, late (the day has
    // closed), newest block first, the first half sent twice; the packed device sends its
    // two sensors as two records sharing a timestamp on the hour
    let mut records = Vec::new();
    for i in 0..144i64 {
        let t = (i % 17) as f64 * 0.5 - 3.0;
        let h = 40.0 + (i % 29) as f64;
        if i % 6 == 0 {
            records.push(record("pack_01", at(i * 10), &[("t", t)]));
            records.push(record("pack_01", at(i * 10), &[("h", h)]));
        } else {
            records.push(record("pack_01", at(i * 10), &[("t", t), ("h", h)]));
        }
        records.push(record(
            "solo_01",
            at(i * 10 + 3),
            &[("t", -t), ("h", h + 0.25)],
        ));
    }
    let blocks: Vec<Vec<(String, Vec<u8>)>> = records.chunks(48).map(<[_]>::to_vec).collect();
    for b in blocks.iter().rev() {
        stream.put(b).await;
    }
    stream.put(&records[..records.len() / 2]).await;
    // AND then a correction of one reading of each
    stream
        .put(&[
            record("pack_01", at(300), &[("t", 99.5), ("h", 1.0)]),
            record("solo_01", at(303), &[("t", -99.5), ("h", 2.0)]),
        ])
        .await;
    settle(api, day, |rows| {
        count(rows, "t") == 288
            && value(rows, "pack_01", at(300), "t") == Some(99.5)
            && value(rows, "solo_01", at(303), "t") == Some(-99.5)
    })
    .await;

    // AND the exporter function runs, its cursor just before the day (as if it had run then)
    let s = services();
    let s3 = tidemark_exporter::s3::client(&Default::default(), Some(&s.s3_endpoint)).await;
    let bucket = unique_name("export-flow").to_lowercase();
    s3.create_bucket().bucket(&bucket).send().await.unwrap();
    let mut config = ExporterConfig::new(&table.name, &bucket);
    config.schedule.prefix = "lake".into();
    config.schedule.max_hours = 96;
    // DynamoDB Local writes an index with its item: a mark needs no time to settle (as in
    // `make run`; its own test is the schedule's).
    config.schedule.settle = std::time::Duration::ZERO;
    // The hours' slices go through a queue on moto to `make run`'s poller of it, as Lambda's
    // SQS trigger hands them to the function deployed.
    let sqs = tidemark_exporter::queue::client(&Default::default(), Some(&s.s3_endpoint)).await;
    let queue = sqs
        .create_queue()
        .queue_name(unique_name("export-flow"))
        .send()
        .await
        .unwrap();
    config.queue_url = queue.queue_url;
    let exporter = std::sync::Arc::new(Exporter::new(
        table.client.clone(),
        s3.clone(),
        Some(sqs),
        config,
    ));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let workers = tokio::spawn(tidemark_devstack::schedule::export_slices(
        exporter.clone(),
        stopped,
    ));
    exporter
        .state
        .advance(day.minus_millis(HOUR_MS).unwrap())
        .await
        .unwrap();
    // Scheduled runs until `done` holds of what they did together (each seals what the
    // slices sent by the runs before wrote) and no hour is left half exported: an hour whose
    // export was started but not sealed yet holds the new slices' files beside those its
    // manifest lists.
    let runs = async |done: &dyn Fn(&tidemark_exporter::Report) -> bool| {
        let mut all = tidemark_exporter::Report::default();
        let until = tokio::time::Instant::now() + Duration::from_secs(600);
        loop {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
            let r = Box::pin(exporter.run(Timestamp::now(), deadline))
                .await
                .unwrap();
            all.absorb(r);
            if done(&all) && exporter.state.jobs().await.unwrap().is_empty() {
                return all;
            }
            assert!(
                tokio::time::Instant::now() < until,
                "the export's runs did not finish: {all:?}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    let r = runs(&|r| r.exported.contains(&day) && r.days.contains(&day)).await;
    assert_eq!(r.exported.first(), Some(&day));
    assert!(r.days.contains(&day), "{r:?}");

    // THEN the export of the day is the API's day
    let got = exported(&s3, &bucket).await;
    assert_export_is_the_apis(api, &got, day).await;

    // WHEN a late reading lands in an exported hour (05:00) and a correction in another (10:00)
    stream
        .put(&[
            record("solo_01", at(5 * 60 + 7), &[("t", 123.0)]),
            record("pack_01", at(10 * 60), &[("t", -42.0), ("h", 3.0)]),
        ])
        .await;
    settle(api, day, |rows| {
        count(rows, "t") == 289 && value(rows, "pack_01", at(600), "t") == Some(-42.0)
    })
    .await;
    // AND the rollups role has marked both hours (it marks before it reports the batch done)
    let marked = |d: &[tidemark_schema::ExportDirtyItem], h: i64| {
        d.iter()
            .any(|m| m.hour == day.plus_millis(h * HOUR_MS).unwrap())
    };
    tidemark_testkit::eventually(common::PATIENCE, "both hours marked", || async {
        let d = exporter.state.dirty().await.unwrap();
        (marked(&d, 5) && marked(&d, 10)).then_some(())
    })
    .await;
    let hours = [5, 10].map(|h| day.plus_millis(h * HOUR_MS).unwrap());
    let r =
        runs(&|r| hours.iter().all(|h| r.reexported.contains(h)) && r.days.contains(&day)).await;
    // THEN the next runs export those hours and the day again
    for h in [5, 10] {
        assert!(
            r.reexported
                .contains(&day.plus_millis(h * HOUR_MS).unwrap()),
            "{r:?}"
        );
    }
    assert!(r.days.contains(&day), "{r:?}");
    // AND the export holds the late reading once and the corrected value only
    let got = exported(&s3, &bucket).await;
    let late = got["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r[0] == "solo_01" && r[1].as_i64() == Some(at(5 * 60 + 7).epoch_micros()))
        .count();
    assert_eq!(late, 1);
    assert_export_is_the_apis(api, &got, day).await;
    let _ = stop.send(true);
    workers.await.unwrap();
    pipeline.stop().await;
}
