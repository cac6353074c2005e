//! Part 2, the watchdog runs: a large fleet seeded with a known share offline, and the read
//! and write units of `Watchdog::run` as devices fall due.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tidemark_bench::BenchError;
use tidemark_bench::meter::Meter;
use tidemark_bench::run::Target;
use tidemark_bench::scenario::{
    KinesisRecord, TEMPLATE_INGEST_BATCH, kinesis_records, reading_json,
};
use tidemark_ingest::{Ingest, IngestConfig};
use tidemark_schema::keys;
use tidemark_schema::{Clock, Timestamp};
use tidemark_store::Item;
use tidemark_watchdog::{DynamoWatch, WatchStore, Watchdog, WatchdogConfig};

use crate::fleet::{at_ms, check_of, offline_items, watched_id, watched_item};
use crate::heartbeat::{HeartbeatCost, PassedAtOnce, heartbeat_cost, shard_names};
use crate::metering::{Spent, client_via};
use crate::pipeline::ingest;
use crate::table::{gsi2_count, seed};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WatchRun {
    pub label: String,
    /// Devices whose check time had passed, by construction.
    pub expected_due: u64,
    pub due: u64,
    pub opened: u64,
    pub postponed: u64,
    pub lost: u64,
    pub failed: u64,
    /// What the watchdog counted itself (`Report`).
    pub report_rru: f64,
    pub report_wru: f64,
    /// What the proxy saw.
    pub spent: Spent,
    pub seconds: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WatchPart {
    pub watched: u64,
    pub offline: u64,
    pub window_s: u32,
    pub shards: usize,
    pub seeded_items: u64,
    pub seed_seconds: f64,
    pub heartbeat: HeartbeatCost,
    pub runs: Vec<WatchRun>,
    /// Devices in the offline partition after the runs.
    pub offline_after_runs: u64,
    /// When a run failed devices: the error of `DynamoWatch::postpone` on one of them.
    #[serde(default)]
    pub postpone_error: Option<String>,
}

pub async fn watchdog_part(
    target: &Target,
    watched: u64,
    offline: u64,
    window_s: u32,
    shards: usize,
) -> Result<WatchPart, BenchError> {
    let table = "offline-watch";
    let direct = target.client().await;
    tidemark_store::create_table(&direct, table, &tidemark_schema::TABLE).await?;
    let shard_list = shard_names(shards);
    // Whole milliseconds: check times and arrivals are kept in them.
    let t0 = at_ms(Timestamp::now().epoch_millis());
    let heartbeat = heartbeat_cost(target, table, &shard_list, 10, t0).await?;
    eprintln!(
        "offline: heartbeats: ingest {:.1} WRU, alerts role {:.1} WRU over {} heartbeats",
        heartbeat.ingest.wru,
        heartbeat.alerts.wru,
        heartbeat.rounds * shards as u64
    );

    // The cohorts, in check order: 100 then 1,000 that fall silent, then 100 whose newer
    // readings postpone them; the rest are not due during the runs.
    let (first, second, postponed) = (100u64, 1_000u64, 100u64);
    let cohort_end = (first + second + postponed).min(watched);
    let began = Instant::now();
    let mut items: Vec<Item> = Vec::with_capacity((watched + 2 * offline) as usize);
    for i in 0..watched {
        let d = watched_item(i, check_of(t0, i, watched, window_s), window_s);
        items.push(tidemark_store::to_item(&d)?);
    }
    for i in 0..offline {
        let (d, a) = offline_items(i, t0, window_s);
        items.push(tidemark_store::to_item(&d)?);
        items.push(tidemark_store::to_item(&a)?);
    }
    let seeded = seed(&direct, table, items, 8).await?;
    // The readings of the devices that fall due: each one's last reading (the one its item
    // knows), and for the postponed cohort a newer one, arrived after the device item's last
    // write (not within a quarter window of its check time, so nothing moved it).
    let ingester = Ingest::new(direct.clone(), IngestConfig::new(table));
    let mut records = Vec::new();
    for i in 0..cohort_end {
        let d = watched_item(i, check_of(t0, i, watched, window_s), window_s);
        let (Some(seen), Some(arrived)) = (d.last_seen_at, d.last_arrival_at) else {
            continue;
        };
        let id = d.device_id.clone();
        records.push(KinesisRecord {
            key: id.to_string(),
            data: reading_json(&id, seen, i as u32, 0),
            arrived,
        });
        if i >= first + second {
            let later = seen.plus_millis(i64::from(window_s) * 300).unwrap_or(seen);
            records.push(KinesisRecord {
                key: id.to_string(),
                data: reading_json(&id, later, i as u32, 1),
                arrived: later.plus_millis(300).unwrap_or(later),
            });
        }
    }
    let mut seq = 1_000_000;
    for chunk in records.chunks(TEMPLATE_INGEST_BATCH) {
        ingest(
            &ingester,
            &kinesis_records(chunk, "shardId-000000000000", seq)?,
        )
        .await?;
        seq += chunk.len() as u64;
    }
    let seed_seconds = began.elapsed().as_secs_f64();
    eprintln!(
        "offline: seeded {seeded} items and {} readings in {seed_seconds:.1} s",
        records.len()
    );

    let meter = Meter::start(target.dynamodb).await?;
    let metered = client_via(&meter).await;
    let clock = Clock::fixed(t0);
    let mut config = WatchdogConfig::new(table, "readings");
    config.offline_after_default = 0;
    config.clock = clock.clone();
    let pipeline = PassedAtOnce {
        client: direct.clone(),
        table: table.to_owned(),
        shards: shard_list.clone(),
    };
    let mut runs = Vec::new();
    let check = |i: u64| check_of(t0, i, watched, window_s);
    let plan: Vec<(String, Timestamp, u64)> = vec![
        ("steady, nothing due".into(), t0, 0),
        ("steady, nothing due (again)".into(), t0, 0),
        (format!("{first} fall due, silent"), check(first - 1), first),
        (
            format!("{second} fall due, silent"),
            check(first + second - 1),
            second,
        ),
        (
            format!("{postponed} fall due, a newer arrival on their readings"),
            check(cohort_end - 1),
            postponed,
        ),
        (
            "after them: nothing new due".into(),
            check(cohort_end - 1),
            0,
        ),
    ];
    let mut watchdog = Watchdog::new(DynamoWatch::new(metered.clone(), table), pipeline, config);
    for (label, at, expected_due) in plan {
        clock.set(at);
        // A fresh store per run: its unit counters start at zero.
        watchdog.store = DynamoWatch::new(metered.clone(), table);
        meter.take().await;
        let t = Instant::now();
        let r = watchdog
            .run(tokio::time::Instant::now() + Duration::from_secs(600))
            .await
            .map_err(|e| BenchError::Other(e.to_string()))?;
        let spent = Spent::of(&meter.take().await);
        let run = WatchRun {
            label,
            expected_due,
            due: r.due,
            opened: r.opened,
            postponed: r.postponed,
            lost: r.lost,
            failed: r.failed,
            report_rru: r.read_units,
            report_wru: r.write_units,
            spent,
            seconds: t.elapsed().as_secs_f64(),
        };
        eprintln!(
            "offline: watchdog run \"{}\": due {} (expected {}), opened {}, postponed {}, lost {}, failed {}; RRU {:.1} (report {:.1}), WRU {:.1} (report {:.1}); {:.1} s",
            run.label,
            run.due,
            run.expected_due,
            run.opened,
            run.postponed,
            run.lost,
            run.failed,
            run.spent.rru,
            run.report_rru,
            run.spent.wru,
            run.report_wru,
            run.seconds
        );
        runs.push(run);
    }
    // A postponement that failed: what DynamoDB said (the watchdog logs only the error's
    // kind), from the same call on one of those devices.
    let postpone_error = if runs.iter().any(|r| r.failed > 0) {
        let store = DynamoWatch::new(direct.clone(), table);
        let id = watched_id(first + second);
        match store.device(&id).await {
            Ok(Some(dev)) => {
                let arrived = dev.last_arrival_at.unwrap_or(t0);
                match store.postpone(&dev, arrived, t0).await {
                    Ok(done) => Some(format!("postponing {id} again: Ok({done})")),
                    Err(e) => Some(error_message(&e)),
                }
            }
            other => Some(format!("reading {id}: {other:?}")),
        }
    } else {
        None
    };
    let mut offline_after_runs = 0;
    for pk in keys::offline_gsi2pks() {
        offline_after_runs += gsi2_count(&direct, table, &pk).await?;
    }
    let _ = tidemark_store::delete_table(&direct, table).await;
    Ok(WatchPart {
        watched,
        offline,
        window_s,
        shards,
        seeded_items: seeded,
        seed_seconds,
        heartbeat,
        runs,
        offline_after_runs,
        postpone_error,
    })
}

/// A store error with DynamoDB's own message where the SDK error carries one.
fn error_message(e: &tidemark_store::StoreError) -> String {
    let debug = format!("{e:?}");
    let message = debug
        .split("message: Some(\"")
        .nth(1)
        .and_then(|m| m.split('"').next());
    match message {
        Some(m) => format!("{e}: {m}"),
        None => e.to_string(),
    }
}
