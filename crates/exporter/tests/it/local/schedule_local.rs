//! The export schedule against DynamoDB Local: each run exports the hours closed since the
//! last one, once; an hour marked as changed after its export is exported again and its mark
//! removed, unless a newer mark came meanwhile.

use std::time::Duration;

use tidemark_exporter::dynamo::DynamoExportTable;
use tidemark_exporter::dynamo::DynamoState;
use tidemark_exporter::schedule::{Schedule, due_hour, run_inline};
use tidemark_exporter::sink::MemorySink;
use tidemark_exporter::{Report, State};
use tidemark_schema::{EntityKey, ExportDirtyItem};
use tidemark_testkit::TestTable;

use crate::common::*;

fn schedule() -> Schedule {
    Schedule {
        prefix: "p".into(),
        grace: Duration::from_secs(300),
        max_hours: 24,
        settle: tidemark_exporter::schedule::MARK_SETTLE,
        resend_after: tidemark_exporter::schedule::RESEND_AFTER,
    }
}

/// One schedule run at `at` over the table's state and readings, with a minute to spare.
async fn run_at(t: &TestTable, sink: &MemorySink, schedule: &Schedule, at: &str) -> Report {
    let state = DynamoState::new(t.client.clone(), &t.name);
    let source = DynamoExportTable::new(t.client.clone(), &t.name, 1);
    // A deployed run has its invocation's 900 s; one of these catches up a whole day of
    // hours, 256 activity partition queries each, on DynamoDB Local.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    run_inline(&state, &source, sink, schedule, ts(at), deadline)
        .await
        .unwrap()
}

fn readings_in(sink: &MemorySink, hour: &str) -> u64 {
    let m = sink
        .get(&format!(
            "p/readings/dt=2026-04-20/hour={hour}/_manifest.json"
        ))
        .unwrap_or_else(|| panic!("hour {hour} not exported"));
    serde_json::from_slice::<serde_json::Value>(&m).unwrap()["readings"]
        .as_u64()
        .unwrap()
}

#[test]
fn an_hour_is_due_once_closed_and_its_grace_over() {
    let g = Duration::from_secs(300);
    // 10:00 closes at 11:15; with 5 min of grace it is due at 11:20.
    assert_eq!(
        due_hour(ts("2026-04-20T11:19:59Z"), g),
        Some(ts("2026-04-20T09:00:00Z"))
    );
    assert_eq!(
        due_hour(ts("2026-04-20T11:20:00Z"), g),
        Some(ts("2026-04-20T10:00:00Z"))
    );
}

#[tokio::test]
async fn runs_export_each_closed_hour_once_and_marked_hours_again() {
    // GIVEN a device with readings at 09:30, 10:30 and 11:30
    let t = TestTable::new("export-schedule").await;
    register(&t, "d1").await;
    for at in [
        "2026-04-20T09:30:00Z",
        "2026-04-20T10:30:00Z",
        "2026-04-20T11:30:00Z",
    ] {
        store(&t, &reading("d1", ts(at), &[("t", 1.0)], None)).await;
    }
    let state = DynamoState::new(t.client.clone(), &t.name);
    let sink = MemorySink::default();
    // WHEN the first run comes at 11:20, THEN it exports the due hour, 10:00, only
    let r = run_at(&t, &sink, &schedule(), "2026-04-20T11:20:00Z").await;
    assert_eq!(r.exported, [ts("2026-04-20T10:00:00Z")]);
    assert_eq!(
        state.cursor().await.unwrap(),
        Some(ts("2026-04-20T10:00:00Z"))
    );
    // AND a run again at the same time exports nothing
    let r = run_at(&t, &sink, &schedule(), "2026-04-20T11:25:00Z").await;
    assert!(r.exported.is_empty() && r.reexported.is_empty());
    // WHEN the next runs come two hours later, THEN they catch up hour by hour, oldest first
    let two = Schedule {
        max_hours: 1,
        ..schedule()
    };
    let r = run_at(&t, &sink, &two, "2026-04-20T13:20:00Z").await;
    assert_eq!(
        (r.exported.as_slice(), r.behind),
        ([ts("2026-04-20T11:00:00Z")].as_slice(), 1)
    );
    let r = run_at(&t, &sink, &two, "2026-04-20T13:21:00Z").await;
    assert_eq!(r.exported, [ts("2026-04-20T12:00:00Z")]);
    assert_eq!(readings_in(&sink, "10"), 1);
    assert_eq!(readings_in(&sink, "11"), 1);
    assert_eq!(readings_in(&sink, "12"), 0);

    // WHEN a late reading lands in 10:00 and the rollups role marks the hour
    store(
        &t,
        &reading("d1", ts("2026-04-20T10:45:00Z"), &[("t", 2.0)], None),
    )
    .await;
    let k = EntityKey::ExportDirty(ts("2026-04-20T10:00:00Z")).key();
    let mark = ExportDirtyItem {
        pk: k.pk,
        sk: k.sk,
        hour: ts("2026-04-20T10:00:00Z"),
        marked_at: ts("2026-04-20T13:30:00Z"),
        marks: 1,
    };
    t.put(&mark).await;
    // THEN the next run exports it again, with the late reading, and removes the mark
    let r = run_at(&t, &sink, &schedule(), "2026-04-20T13:40:00Z").await;
    assert_eq!(r.reexported, [ts("2026-04-20T10:00:00Z")]);
    assert_eq!(readings_in(&sink, "10"), 2);
    assert!(state.dirty().await.unwrap().is_empty());

    // AND a mark renewed after a run read it survives that run's clear
    t.put(&mark).await;
    let read = state.dirty().await.unwrap().remove(0);
    t.put(&ExportDirtyItem { marks: 2, ..mark }).await;
    assert!(!state.clear(read.hour, read.marks).await.unwrap());
    assert_eq!(state.dirty().await.unwrap().len(), 1);
}

fn daily(sink: &MemorySink, day: &str) -> Option<serde_json::Value> {
    sink.get(&format!("p/rollups/period=daily/dt={day}/_manifest.json"))
        .map(|m| serde_json::from_slice(&m).unwrap())
}

#[tokio::test]
async fn a_day_is_exported_with_its_last_hour_and_again_after_late_readings_in_two_hours() {
    // GIVEN readings at 22:30 and 23:30, and the cursor at the hour before the day
    let t = TestTable::new("export-days").await;
    register(&t, "d1").await;
    for at in ["2026-04-20T22:30:00Z", "2026-04-20T23:30:00Z"] {
        store(&t, &reading("d1", ts(at), &[("t", 1.0)], None)).await;
    }
    let state = DynamoState::new(t.client.clone(), &t.name);
    state.advance(ts("2026-04-19T23:00:00Z")).await.unwrap();
    let sink = MemorySink::default();
    // WHEN a run exports 00:00 to 22:00, THEN the day is not written yet
    let r = run_at(&t, &sink, &schedule(), "2026-04-20T23:20:00Z").await;
    assert_eq!((r.exported.len(), r.days.len()), (23, 0));
    assert!(daily(&sink, "2026-04-20").is_none());
    // WHEN the next exports 23:00, THEN the day's rollups are written with it
    let r = run_at(&t, &sink, &schedule(), "2026-04-21T00:20:00Z").await;
    assert_eq!(r.days, [ts("2026-04-20T00:00:00Z")]);
    assert_eq!(daily(&sink, "2026-04-20").unwrap()["readings"], 2);
    // WHEN late readings land in exported hours 03:00 and 05:00 and both hours are marked
    for hour in ["2026-04-20T03:00:00Z", "2026-04-20T05:00:00Z"] {
        store(&t, &reading("d1", ts(hour), &[("t", 5.0)], None)).await;
        let k = EntityKey::ExportDirty(ts(hour)).key();
        t.put(&ExportDirtyItem {
            pk: k.pk,
            sk: k.sk,
            hour: ts(hour),
            marked_at: ts("2026-04-21T00:30:00Z"),
            marks: 1,
        })
        .await;
    }
    // THEN the next run writes both hours and then the day, merged from all of them: the day
    // counts each late reading once
    let r = run_at(&t, &sink, &schedule(), "2026-04-21T00:40:00Z").await;
    assert_eq!(
        r.reexported,
        [ts("2026-04-20T03:00:00Z"), ts("2026-04-20T05:00:00Z")]
    );
    assert_eq!(r.days, [ts("2026-04-20T00:00:00Z")]);
    assert_eq!(daily(&sink, "2026-04-20").unwrap()["readings"], 4);
    assert_eq!((readings_in(&sink, "03"), readings_in(&sink, "05")), (1, 1));
}
