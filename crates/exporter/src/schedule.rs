//! The export schedule (docs/decisions/0017-export-fans-out-over-sqs.md). Each run:
//! - looks at the hours being exported in slices (their jobs, `EXPORT / JOB#<hour>`): an
//!   hour whose every slice has written its summary is sealed ([`seal_hour`]); one whose
//!   slices have not all come back after [`Schedule::resend_after`] has the missing ones
//!   sent again (a worker that failed, timed out or whose message went to the dead-letter
//!   queue);
//! - starts the hours that have closed (plus a grace for late readings) since the cursor,
//!   oldest first, at most [`Schedule::max_hours`] at a time, and again every hour the
//!   rollups role marked as changed after it closed once its mark has settled: a job each,
//!   its slices sent to the queue.
//!
//! The cursor moves over an hour only when it is sealed, and only in order, so it never
//! passes an hour with a slice missing. A day's daily rollups are exported with its last
//! hour, and again after its re-exported hours once the day is complete (they are merged
//! from its hours' files). Two runs at once start each hour once (the job is written
//! conditionally) and seal it with the same bytes; the cursor only moves forward.

use std::collections::BTreeSet;
use std::time::Duration;

use tidemark_schema::{CLOSE_GRACE_SECONDS, ExportJobItem, Period, Timestamp};

use crate::ExportError;
use crate::hour::{ends_day, export_day, exported, seal_hour, slices_done};
use crate::queue::SliceQueue;
use crate::report::Report;
use crate::sink::Sink;
use crate::slicing::{Slice, SliceTask, from_bits, to_bits, width_for};
use crate::store::{ExportTable, State};

const HOUR_MS: i64 = 3_600_000;

/// How old a mark must be, by default, before a run exports its hour again
/// ([`Schedule::settle`]).
pub const MARK_SETTLE: Duration = Duration::from_secs(30);

/// How long, by default, a job's slices have before the missing ones are sent again: a
/// worker's timeout (900 s) and a minute.
pub const RESEND_AFTER: Duration = Duration::from_secs(960);

#[derive(Debug, Clone)]
pub struct Schedule {
    pub prefix: String,
    /// How long after an hour closes it is exported: late readings until then are in it.
    pub grace: Duration,
    /// Hours being exported for the first time at once, at most (a backlog is caught up
    /// over several runs).
    pub max_hours: usize,
    /// How old a mark must be before a run exports its hour again: the export finds an
    /// hour's devices from an index (GSI2, eventually consistent), and the rollups role
    /// writes a late device's hourly item just before the mark, so the index has had this
    /// long to show it (DynamoDB propagates within a second in the normal case; DynamoDB
    /// Local at once). A younger mark waits for the next run.
    pub settle: Duration,
    /// How long a job's slices have before the missing ones are sent again.
    pub resend_after: Duration,
}

/// The newest hour exportable at `now`: closed ([`CLOSE_GRACE_SECONDS`] after its end) for
/// `grace` more.
pub fn due_hour(now: Timestamp, grace: Duration) -> Option<Timestamp> {
    let wait = CLOSE_GRACE_SECONDS * 1000 + i64::try_from(grace.as_millis()).ok()?;
    let edge = now.minus_millis(wait)?;
    Period::Hourly.bucket(edge).start().minus_millis(HOUR_MS)
}

fn next_hour(h: Timestamp) -> Timestamp {
    h.plus_millis(HOUR_MS).unwrap_or(Timestamp::MAX)
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// `job`'s slices (those with devices in its hour).
fn slices_of(job: &ExportJobItem) -> BTreeSet<Slice> {
    from_bits(job.slices)
        .into_iter()
        .filter_map(|i| Slice::new(i, job.width))
        .collect()
}

/// The tasks of `job`'s slices whose index is not in `done`.
fn tasks(job: &ExportJobItem, done: &BTreeSet<u16>) -> Vec<SliceTask> {
    slices_of(job)
        .into_iter()
        .filter(|s| !done.contains(&s.get()))
        .map(|slice| SliceTask {
            hour: job.hour,
            slice,
            generation: job.generation,
        })
        .collect()
}

/// A run with no queue: [`run`] into memory, the slices it sent exported here, one after
/// another, and [`run`] again to seal them (and start what is due next), until a run sends
/// nothing or the deadline passes. `make run` without a queue, `sam local invoke`
/// and the unit tests run this; the deployed function hands its slices to SQS.
pub async fn run_inline<T: State + Sync, S: ExportTable, K: Sink + Sync>(
    state: &T,
    source: &S,
    sink: &K,
    schedule: &Schedule,
    now: Timestamp,
    deadline: tokio::time::Instant,
) -> Result<Report, ExportError> {
    let queue = crate::queue::MemoryQueue::default();
    let mut report = run(state, source, sink, &queue, schedule, now, deadline).await?;
    // Each run seals what the one before sent and may start the next hours.
    loop {
        let tasks = queue.take();
        if tasks.is_empty() || tokio::time::Instant::now() >= deadline {
            return Ok(report);
        }
        for t in &tasks {
            let guarded = crate::sink::Guarded {
                sink,
                state,
                task: t,
            };
            crate::slice::export_slice(source, &guarded, &schedule.prefix, t).await?;
        }
        report.absorb(run(state, source, sink, &queue, schedule, now, deadline).await?);
    }
}

/// One scheduled run at `now`, ending its work by `deadline`.
pub async fn run<T: State, S: ExportTable, K: Sink, Q: SliceQueue>(
    state: &T,
    source: &S,
    sink: &K,
    queue: &Q,
    schedule: &Schedule,
    now: Timestamp,
    deadline: tokio::time::Instant,
) -> Result<Report, ExportError> {
    let mut report = Report::default();
    let mut jobs = state.jobs().await?;
    let mut cursor = state.cursor().await?;
    let prefix = schedule.prefix.as_str();
    // Hours to start: those closed since the cursor (a first run starts the due hour; older
    // ones are `tidemark-admin export`'s to backfill), then the settled marks.
    let started: BTreeSet<Timestamp> = jobs.iter().map(|j| j.hour).collect();
    let mut working = jobs
        .iter()
        .filter(|j| cursor.is_none_or(|c| j.hour > c))
        .count();
    let mut start = Vec::new();
    if let Some(due) = due_hour(now, schedule.grace) {
        let newest = started
            .last()
            .copied()
            .filter(|n| cursor.is_none_or(|c| *n > c));
        let mut next = match (newest, cursor) {
            (Some(n), _) => next_hour(n),
            (None, Some(c)) => next_hour(c),
            (None, None) => due,
        };
        while next <= due {
            if working >= schedule.max_hours {
                report.behind +=
                    ((due.epoch_millis() - next.epoch_millis()) / HOUR_MS + 1) as usize;
                break;
            }
            start.push((next, 0));
            working += 1;
            next = next_hour(next);
        }
    }
    for d in state.dirty().await? {
        // An hour the schedule has not reached yet is exported when it is.
        if cursor.is_none_or(|c| d.hour > c) || started.contains(&d.hour) {
            continue;
        }
        if now.epoch_millis() - d.marked_at.epoch_millis() < millis(schedule.settle) {
            report.behind += 1;
            continue;
        }
        start.push((d.hour, d.marks));
    }
    for (hour, marks) in start {
        if tokio::time::Instant::now() >= deadline {
            report.behind += 1;
            continue;
        }
        // Only the slices with devices in the hour are sent (and an hour without any is
        // sealed below at once).
        // Slices as wide as the hour's size (its own export, or the hour before) asks for;
        // an hour exported before keeps its cut where that is as fine, so the new files
        // replace those readers see under the same names instead of standing beside them.
        let own = exported(sink, prefix, hour).await?;
        let mut devices = own.as_ref().map(|m| m.devices);
        if devices.is_none()
            && let Some(before) = hour.minus_millis(HOUR_MS)
        {
            devices = exported(sink, prefix, before).await?.map(|m| m.devices);
        }
        let width = match own.and_then(|m| m.width) {
            Some(w) if Slice::all(w).next().is_some() && w <= width_for(devices) => w,
            _ => width_for(devices),
        };
        let partitions = source
            .active_partitions(Period::Hourly.bucket(hour))
            .await?;
        let indices: BTreeSet<u16> = partitions.iter().map(|p| p / width).collect();
        let job = ExportJobItem::new(
            hour,
            now.epoch_millis(),
            marks,
            now,
            (width, to_bits(&indices)),
        );
        if state.start(&job).await? {
            let all = tasks(&job, &BTreeSet::new());
            queue.send(&all).await?;
            report.sent += all.len();
            jobs.push(job);
        }
    }
    jobs.sort_by_key(|j| j.hour);
    let mut redone = Vec::new();
    for job in &jobs {
        if tokio::time::Instant::now() >= deadline {
            report.behind += 1;
            continue;
        }
        let first = cursor.is_none_or(|c| job.hour > c);
        let wanted = from_bits(job.slices);
        let done = if wanted.is_empty() {
            BTreeSet::new()
        } else {
            slices_done(sink, prefix, job.hour, job.generation).await?
        };
        if !wanted.is_subset(&done) {
            if now.epoch_millis() - job.sent_at.epoch_millis() >= millis(schedule.resend_after) {
                let missing = tasks(job, &done);
                queue.send(&missing).await?;
                report.sent += missing.len();
                state
                    .resent(&ExportJobItem {
                        sent_at: now,
                        ..job.clone()
                    })
                    .await?;
            }
            report.working += 1;
            continue;
        }
        // The cursor passes hours in order: a later hour sealed first waits for it.
        if first && cursor.is_some_and(|c| job.hour != next_hour(c)) {
            report.working += 1;
            continue;
        }
        let h = seal_hour(
            source,
            sink,
            prefix,
            job.hour,
            job.generation,
            &slices_of(job),
        )
        .await?;
        report.readings += h.readings;
        if first {
            // Before the cursor passes the day's last hour: a run cut short redoes both.
            if ends_day(job.hour) {
                export_day(source, sink, prefix, job.hour).await?;
                report.days.push(Period::Daily.bucket(job.hour).start());
            }
            state.advance(job.hour).await?;
            cursor = Some(job.hour);
            report.exported.push(job.hour);
            state.finish(job).await?;
        } else {
            redone.push(job.clone());
        }
    }
    // A day the cursor has passed was exported: it changed with its hours, and is merged
    // from them once they are all redone (even if this run exported it already, before).
    let mut days: Vec<Timestamp> = Vec::new();
    for job in &redone {
        let day = Period::Daily.bucket(job.hour);
        let complete =
            cursor.is_some_and(|c| c >= day.end_exclusive().minus_millis(HOUR_MS).unwrap_or(c));
        if complete && !days.contains(&day.start()) {
            export_day(source, sink, prefix, job.hour).await?;
            days.push(day.start());
        }
    }
    for day in days {
        if !report.days.contains(&day) {
            report.days.push(day);
        }
    }
    // Marks go last: a run cut short before its days leaves them (and the job) for the next.
    for job in redone {
        state.clear(job.hour, job.marks).await?;
        state.finish(&job).await?;
        report.reexported.push(job.hour);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    //! [`run`] over the in-memory store ([`crate::MemoryStore`]) and sink: the schedule's
    //! logic, as `crates/exporter/tests/it/local/schedule_local.rs` checks it on DynamoDB.

    use std::collections::{BTreeMap, BTreeSet};

    use tidemark_schema::{
        DeviceId, DeviceItem, DeviceStatus, EntityKey, ExportDirtyItem, Layout, LayoutHistory,
        LayoutHistoryItem, MetricName, Reading, ReadingItem, SlotLen, keys,
    };
    use tidemark_store::write::slots::{SlotKey, SlotWriter};

    use super::*;
    use crate::MemoryStore;
    use crate::paths;
    use crate::queue::MemoryQueue;
    use crate::sink::MemorySink;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    fn schedule() -> Schedule {
        Schedule {
            prefix: "p".into(),
            grace: Duration::from_secs(300),
            max_hours: 24,
            settle: MARK_SETTLE,
            resend_after: RESEND_AFTER,
        }
    }

    fn reading(device: &str, at: &str, metrics: &[(&str, f64)]) -> Reading {
        Reading {
            device_id: DeviceId::new(device).unwrap(),
            timestamp: ts(at),
            metrics: metrics
                .iter()
                .map(|(m, v)| (MetricName::new(m).unwrap(), *v))
                .collect(),
            metadata: None,
        }
    }

    /// A table with `device` registered (in GSI1's status listing, which the export's devices
    /// table lists).
    fn table_with(device: &str) -> MemoryStore {
        let store = MemoryStore::new();
        store
            .put_entity(&DeviceItem::new(
                DeviceId::new(device).unwrap(),
                DeviceStatus::Active,
                ts("2026-04-01T00:00:00Z"),
            ))
            .unwrap();
        store
    }

    /// Stores a single reading item, as ingest does, and its hour's rollup placeholder with its
    /// activity index entry, as the rollups role does ([`seen_by_rollups`]).
    fn put_reading(store: &MemoryStore, device: &str, at: &str, metrics: &[(&str, f64)]) {
        let item = ReadingItem::new(&reading(device, at, metrics), None, 3650);
        store.put_entity(&item).unwrap();
        seen_by_rollups(store, device, at);
    }

    /// The rollups role's hourly placeholder of `device`'s hour holding `at`, written as it
    /// writes it (with its index entry in the hour's activity partition).
    fn seen_by_rollups(store: &MemoryStore, device: &str, at: &str) {
        let key = tidemark_schema::AggregateItem::key_for(
            &DeviceId::new(device).unwrap(),
            Period::Hourly.bucket(ts(at)),
        );
        let mut placeholder = tidemark_schema::AggregateItem::empty(&key);
        placeholder.open = true;
        placeholder.version = 1;
        let item = tidemark_store::aggregate_item(&placeholder).unwrap();
        store.table().put(item).unwrap();
    }

    fn mark(hour: &str, marks: u64) -> ExportDirtyItem {
        let k = EntityKey::ExportDirty(ts(hour)).key();
        ExportDirtyItem {
            pk: k.pk,
            sk: k.sk,
            hour: ts(hour),
            marked_at: ts("2026-04-20T11:25:00Z"),
            marks,
        }
    }

    /// One run at `at` over the store's state and readings, with a minute to spare, its
    /// slices exported in the run ([`run_inline`]).
    async fn run_at(store: &MemoryStore, sink: &MemorySink, s: &Schedule, at: &str) -> Report {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        run_inline(store, store, sink, s, ts(at), deadline)
            .await
            .unwrap()
    }

    /// One run at `at` that sends its slices to `queue`.
    async fn run_queued(
        store: &MemoryStore,
        sink: &MemorySink,
        queue: &MemoryQueue,
        at: &str,
    ) -> Report {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        run(store, store, sink, queue, &schedule(), ts(at), deadline)
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

    #[tokio::test]
    async fn a_closed_hour_is_exported_once_and_the_cursor_moves() {
        // GIVEN a device with readings at 09:30, 10:30 and 11:30
        let store = table_with("d1");
        for at in [
            "2026-04-20T09:30:00Z",
            "2026-04-20T10:30:00Z",
            "2026-04-20T11:30:00Z",
        ] {
            put_reading(&store, "d1", at, &[("t", 1.0)]);
        }
        let sink = MemorySink::default();

        // WHEN the first run comes at 11:20
        let r = run_at(&store, &sink, &schedule(), "2026-04-20T11:20:00Z").await;

        // THEN it exports the due hour, 10:00, only, and the cursor stands there
        assert_eq!(r.exported, [ts("2026-04-20T10:00:00Z")]);
        assert_eq!(r.readings, 1);
        assert_eq!(readings_in(&sink, "10"), 1);
        assert_eq!(
            store.cursor().await.unwrap(),
            Some(ts("2026-04-20T10:00:00Z"))
        );
        // AND a run again with nothing new exports nothing and writes the same bytes
        let before = sink.all();
        let r = run_at(&store, &sink, &schedule(), "2026-04-20T11:25:00Z").await;
        assert_eq!(r, Report::default());
        assert_eq!(sink.all(), before);
        // AND two hours later the runs catch up hour by hour, oldest first
        let one = Schedule {
            max_hours: 1,
            ..schedule()
        };
        let r = run_at(&store, &sink, &one, "2026-04-20T13:20:00Z").await;
        assert_eq!(
            (r.exported.as_slice(), r.behind),
            ([ts("2026-04-20T11:00:00Z")].as_slice(), 1)
        );
        let r = run_at(&store, &sink, &one, "2026-04-20T13:21:00Z").await;
        assert_eq!(r.exported, [ts("2026-04-20T12:00:00Z")]);
        assert_eq!((readings_in(&sink, "11"), readings_in(&sink, "12")), (1, 0));
    }

    /// `n` devices with a reading each at `at`; the slices holding them.
    fn fleet(store: &MemoryStore, n: usize, at: &str) -> BTreeSet<Slice> {
        (0..n)
            .map(|i| {
                let d = format!("dev-{i}");
                put_reading(store, &d, at, &[("t", i as f64)]);
                Slice::of(&DeviceId::new(&d).unwrap(), crate::slicing::MIN_WIDTH).unwrap()
            })
            .collect()
    }

    /// Writes `id`'s tag history as at site `site` since the day's start (directly: no change
    /// is counted), at `version`.
    fn at_site(store: &MemoryStore, id: &DeviceId, site: &str, version: u64) {
        use tidemark_schema::{Tag, TagEpoch, TagHistory, TagHistoryItem, Tags};
        let key = TagHistoryItem::key(id);
        let tag = Tag::parse(&format!("site:{site}")).unwrap();
        store
            .put_entity(&TagHistoryItem {
                pk: key.pk,
                sk: key.sk,
                epochs: TagHistory::from_epochs(vec![TagEpoch {
                    from: ts("2026-04-20T00:00:00Z"),
                    tags: Tags::new([(tag.key, tag.value)].into()).unwrap(),
                }]),
                version,
            })
            .unwrap();
    }

    /// Exports `tasks` as the queue's workers would.
    async fn work(store: &MemoryStore, sink: &MemorySink, tasks: &[SliceTask]) {
        for t in tasks {
            crate::slice::export_slice(store, sink, "p", t)
                .await
                .unwrap();
        }
    }

    #[tokio::test]
    async fn an_hours_slices_go_to_the_queue_and_it_is_sealed_once_every_slice_is_in() {
        // GIVEN 20 devices with readings in the 10:00 hour
        let store = table_with("d1");
        let slices = fleet(&store, 20, "2026-04-20T10:30:00Z");
        let (sink, queue) = (MemorySink::default(), MemoryQueue::default());

        // WHEN the first run comes at 11:20
        let r = run_queued(&store, &sink, &queue, "2026-04-20T11:20:00Z").await;

        // THEN it sends the slices holding them, one export of the hour, and exports nothing
        // itself
        let tasks = queue.take();
        assert_eq!((r.sent, r.working, r.exported.len()), (slices.len(), 1, 0));
        assert_eq!(
            tasks.iter().map(|t| t.slice).collect::<BTreeSet<_>>(),
            slices
        );
        assert!(tasks.iter().all(|t| t.hour == ts("2026-04-20T10:00:00Z")));
        assert_eq!(
            tasks
                .iter()
                .map(|t| t.generation)
                .collect::<BTreeSet<_>>()
                .len(),
            1
        );
        // AND with all but one slice written, the next run waits and the cursor stays
        work(&store, &sink, &tasks[1..]).await;
        let r = run_queued(&store, &sink, &queue, "2026-04-20T11:25:00Z").await;
        assert_eq!((r.sent, r.working, r.exported.len()), (0, 1, 0));
        assert_eq!(store.cursor().await.unwrap(), None);
        assert!(
            sink.get("p/readings/dt=2026-04-20/hour=10/_manifest.json")
                .is_none()
        );
        // AND once the last is in, the run after seals the hour and moves the cursor
        work(&store, &sink, &tasks[..1]).await;
        let r = run_queued(&store, &sink, &queue, "2026-04-20T11:30:00Z").await;
        assert_eq!(r.exported, [ts("2026-04-20T10:00:00Z")]);
        assert_eq!((r.readings, readings_in(&sink, "10")), (20, 20));
        assert_eq!(
            store.cursor().await.unwrap(),
            Some(ts("2026-04-20T10:00:00Z"))
        );
        assert!(store.jobs().await.unwrap().is_empty());

        // WHEN the next hour's readings come from the same 20 devices
        fleet(&store, 20, "2026-04-20T11:30:00Z");
        let r = run_queued(&store, &sink, &queue, "2026-04-20T12:20:00Z").await;
        // THEN its export is sized by the hour before: 20 devices are one slice of every
        // partition, exported by one invocation into one file
        let tasks = queue.take();
        assert_eq!((r.sent, tasks.len()), (1, 1));
        assert_eq!(tasks[0].slice, Slice::whole());
        work(&store, &sink, &tasks).await;
        let r = run_queued(&store, &sink, &queue, "2026-04-20T12:25:00Z").await;
        assert_eq!(r.exported, [ts("2026-04-20T11:00:00Z")]);
        let files: Vec<String> = sink
            .all()
            .into_keys()
            .filter(|k| k.starts_with("p/readings/dt=2026-04-20/hour=11/slice-"))
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        assert_eq!(readings_in(&sink, "11"), 20);
    }

    #[tokio::test]
    async fn a_slice_delivered_again_after_its_hour_was_sealed_writes_nothing() {
        // GIVEN an hour exported through the queue, by workers guarded by the job, and sealed
        let store = table_with("d1");
        fleet(&store, 20, "2026-04-20T10:30:00Z");
        let (sink, queue) = (MemorySink::default(), MemoryQueue::default());
        run_queued(&store, &sink, &queue, "2026-04-20T11:20:00Z").await;
        let tasks = queue.take();
        for t in &tasks {
            let guarded = crate::sink::Guarded {
                sink: &sink,
                state: &store,
                task: t,
            };
            crate::slice::export_slice(&store, &guarded, "p", t)
                .await
                .unwrap();
        }
        let r = run_queued(&store, &sink, &queue, "2026-04-20T11:25:00Z").await;
        assert_eq!(r.exported, [ts("2026-04-20T10:00:00Z")]);
        let sealed = sink.all();
        // WHEN a late reading lands and one of the old messages comes again
        put_reading(&store, "dev-3", "2026-04-20T10:45:00Z", &[("t", 9.0)]);
        let guarded = crate::sink::Guarded {
            sink: &sink,
            state: &store,
            task: &tasks[0],
        };
        let again = crate::slice::export_slice(&store, &guarded, "p", &tasks[0]).await;
        // THEN its worker stops as superseded, and the sealed hour is as it was
        assert!(
            matches!(again, Err(ExportError::Superseded { .. })),
            "{again:?}"
        );
        assert_eq!(sink.all(), sealed);
    }

    #[tokio::test]
    async fn slices_that_never_came_back_are_sent_again_and_only_they() {
        // GIVEN an hour whose slices went out at 11:20, of which all but 3 were written
        let store = table_with("d1");
        fleet(&store, 20, "2026-04-20T10:30:00Z");
        let (sink, queue) = (MemorySink::default(), MemoryQueue::default());
        run_queued(&store, &sink, &queue, "2026-04-20T11:20:00Z").await;
        let tasks = queue.take();
        let kept = tasks.len() - 3;
        work(&store, &sink, &tasks[..kept]).await;

        // WHEN runs come before and after the slices' time is up
        let before = run_queued(&store, &sink, &queue, "2026-04-20T11:35:00Z").await;
        assert_eq!((before.sent, queue.take().len()), (0, 0));
        let after = run_queued(&store, &sink, &queue, "2026-04-20T11:36:00Z").await;

        // THEN the later sends the 3 missing slices again, of the same export
        let again = queue.take();
        assert_eq!(after.sent, 3);
        assert_eq!(again, tasks[kept..]);
        // AND not again at its next run, and the hour is sealed once they are in
        let r = run_queued(&store, &sink, &queue, "2026-04-20T11:40:00Z").await;
        assert_eq!(r.sent, 0);
        work(&store, &sink, &again).await;
        let r = run_queued(&store, &sink, &queue, "2026-04-20T11:45:00Z").await;
        assert_eq!(r.exported, [ts("2026-04-20T10:00:00Z")]);
        assert_eq!(readings_in(&sink, "10"), 20);
    }

    #[tokio::test]
    async fn a_slice_of_another_export_of_the_hour_does_not_stand_in_for_this_ones() {
        // GIVEN an hour's slices sent, and every slice written by an earlier export of it
        let store = table_with("d1");
        put_reading(&store, "d1", "2026-04-20T10:30:00Z", &[("t", 1.0)]);
        let (sink, queue) = (MemorySink::default(), MemoryQueue::default());
        run_queued(&store, &sink, &queue, "2026-04-20T11:20:00Z").await;
        let tasks = queue.take();
        let earlier: Vec<SliceTask> = tasks
            .iter()
            .map(|t| SliceTask {
                generation: t.generation - 1,
                ..t.clone()
            })
            .collect();
        work(&store, &sink, &earlier).await;
        // WHEN a run comes, THEN the hour is not sealed
        let r = run_queued(&store, &sink, &queue, "2026-04-20T11:25:00Z").await;
        assert_eq!((r.exported.len(), r.working), (0, 1));
        // AND once this export's slices are in, it is, and the earlier summaries are gone
        work(&store, &sink, &tasks).await;
        let r = run_queued(&store, &sink, &queue, "2026-04-20T11:30:00Z").await;
        assert_eq!(r.exported, [ts("2026-04-20T10:00:00Z")]);
        let summaries = sink
            .all()
            .into_keys()
            .filter(|k| k.contains("/_slice-"))
            .filter_map(|k| paths::parse_slice_summary(&k))
            .map(|(_, g)| g)
            .collect::<BTreeSet<_>>();
        assert_eq!(summaries, BTreeSet::from([tasks[0].generation]));
    }

    #[tokio::test]
    async fn at_most_max_hours_are_in_flight_and_the_cursor_passes_them_in_order() {
        // GIVEN the cursor at 10:00 and readings in 11:00 and 12:00
        let store = table_with("d1");
        for at in ["2026-04-20T11:30:00Z", "2026-04-20T12:30:00Z"] {
            put_reading(&store, "d1", at, &[("t", 1.0)]);
        }
        store.advance(ts("2026-04-20T10:00:00Z")).await.unwrap();
        let (sink, queue) = (MemorySink::default(), MemoryQueue::default());
        // WHEN a run with two hours due comes (both go: up to 24 are in flight)
        run_queued(&store, &sink, &queue, "2026-04-20T13:20:00Z").await;
        let tasks = queue.take();
        assert_eq!(tasks.len(), 2, "d1's slice of each hour");
        // AND the later hour's slices are all in first
        let (eleven, twelve): (Vec<_>, Vec<_>) = tasks
            .into_iter()
            .partition(|t| t.hour == ts("2026-04-20T11:00:00Z"));
        work(&store, &sink, &twelve).await;
        let r = run_queued(&store, &sink, &queue, "2026-04-20T13:25:00Z").await;
        // THEN it waits for the earlier, the cursor where it was
        assert_eq!((r.exported.len(), r.working), (0, 2));
        // AND once the earlier is in, one run seals both, in order
        work(&store, &sink, &eleven).await;
        let r = run_queued(&store, &sink, &queue, "2026-04-20T13:30:00Z").await;
        assert_eq!(
            r.exported,
            [ts("2026-04-20T11:00:00Z"), ts("2026-04-20T12:00:00Z")]
        );
        // AND with max_hours 1, a run three hours behind starts only the oldest
        let store = table_with("d1");
        store.advance(ts("2026-04-20T10:00:00Z")).await.unwrap();
        let one = Schedule {
            max_hours: 1,
            ..schedule()
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let r = run(
            &store,
            &store,
            &sink,
            &queue,
            &one,
            ts("2026-04-20T14:20:00Z"),
            deadline,
        )
        .await
        .unwrap();
        // (an hour without readings has no slice to send: it is sealed at once)
        assert_eq!((r.sent, r.behind), (0, 2));
        assert_eq!(r.exported, [ts("2026-04-20T11:00:00Z")]);
        assert!(store.jobs().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn an_hour_exported_again_from_the_same_readings_has_the_same_bytes() {
        // GIVEN an hour exported by one run
        let store = table_with("d1");
        put_reading(&store, "d1", "2026-04-20T10:30:00Z", &[("t", 1.0)]);
        let first = MemorySink::default();
        run_at(&store, &first, &schedule(), "2026-04-20T11:20:00Z").await;
        // WHEN it is marked (nothing changed) and a run exports it again into another store
        store.put_entity(&mark("2026-04-20T10:00:00Z", 1)).unwrap();
        let second = MemorySink::default();
        let r = run_at(&store, &second, &schedule(), "2026-04-20T11:30:00Z").await;
        // THEN the objects are the same, byte for byte
        assert_eq!(r.reexported, [ts("2026-04-20T10:00:00Z")]);
        // (the slices' summaries, named by their export's generation, aside)
        let hour = |s: &MemorySink| {
            s.all()
                .into_iter()
                .filter(|(k, _)| k.starts_with("p/readings/") && !k.contains("/_slice-"))
                .collect::<BTreeMap<_, _>>()
        };
        assert!(!hour(&first).is_empty());
        assert_eq!(hour(&second), hour(&first));
    }

    /// The data files of the 10:00 hour's readings partition.
    fn files_of_ten(sink: &MemorySink) -> BTreeSet<String> {
        sink.all()
            .into_keys()
            .filter(|k| k.starts_with("p/readings/dt=2026-04-20/hour=10/slice-"))
            .collect()
    }

    #[tokio::test]
    async fn an_hour_exported_again_is_cut_as_before_so_its_files_replace_those_readers_see() {
        // GIVEN 20 devices' 10:00 hour exported when nothing was known of the fleet's size:
        // in the narrowest slices, a file for each slice holding a device
        let store = table_with("d1");
        let slices = fleet(&store, 20, "2026-04-20T10:30:00Z");
        let (sink, queue) = (MemorySink::default(), MemoryQueue::default());
        run_queued(&store, &sink, &queue, "2026-04-20T11:20:00Z").await;
        work(&store, &sink, &queue.take()).await;
        let r = run_queued(&store, &sink, &queue, "2026-04-20T11:25:00Z").await;
        assert_eq!(r.exported, [ts("2026-04-20T10:00:00Z")]);
        let before = files_of_ten(&sink);
        assert_eq!(before.len(), slices.len());

        // WHEN a late reading marks the hour (20 devices alone would be one slice now)
        put_reading(&store, "dev-3", "2026-04-20T10:45:00Z", &[("t", 9.0)]);
        store.put_entity(&mark("2026-04-20T10:00:00Z", 1)).unwrap();
        run_queued(&store, &sink, &queue, "2026-04-20T11:40:00Z").await;
        let tasks = queue.take();

        // THEN the export is cut as before, so while its slices are written the folder
        // holds the same files, never a second copy of a device's rows beside the first
        assert_eq!(
            tasks.iter().map(|t| t.slice).collect::<BTreeSet<_>>(),
            slices
        );
        work(&store, &sink, &tasks).await;
        assert_eq!(files_of_ten(&sink), before);
        // AND once sealed, the hour holds the late reading
        let r = run_queued(&store, &sink, &queue, "2026-04-20T11:45:00Z").await;
        assert_eq!(r.reexported, [ts("2026-04-20T10:00:00Z")]);
        assert_eq!(readings_in(&sink, "10"), 21);
    }

    #[tokio::test]
    async fn an_hour_marked_changed_after_its_close_is_exported_again() {
        // GIVEN an exported hour, 10:00
        let store = table_with("d1");
        put_reading(&store, "d1", "2026-04-20T10:30:00Z", &[("t", 1.0)]);
        let sink = MemorySink::default();
        run_at(&store, &sink, &schedule(), "2026-04-20T11:20:00Z").await;
        assert_eq!(readings_in(&sink, "10"), 1);

        // WHEN a late reading lands in it and the rollups role marks the hour
        put_reading(&store, "d1", "2026-04-20T10:45:00Z", &[("t", 2.0)]);
        store.put_entity(&mark("2026-04-20T10:00:00Z", 1)).unwrap();
        let r = run_at(&store, &sink, &schedule(), "2026-04-20T11:40:00Z").await;

        // THEN the run exports it again, with the late reading, and removes the mark
        assert_eq!(r.reexported, [ts("2026-04-20T10:00:00Z")]);
        assert!(r.exported.is_empty());
        assert_eq!(readings_in(&sink, "10"), 2);
        assert!(store.dirty().await.unwrap().is_empty());
        // AND an hour the schedule has not reached yet stays marked, for when it is
        store.put_entity(&mark("2026-04-20T11:00:00Z", 1)).unwrap();
        let r = run_at(&store, &sink, &schedule(), "2026-04-20T11:50:00Z").await;
        assert!(r.reexported.is_empty(), "{r:?}");
        assert_eq!(store.dirty().await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_mark_younger_than_its_settle_time_waits_for_the_next_run() {
        // GIVEN an exported hour, marked 10 s before a run (the index may not show the late
        // device the rollups role has just written yet)
        let store = table_with("d1");
        put_reading(&store, "d1", "2026-04-20T10:30:00Z", &[("t", 1.0)]);
        let sink = MemorySink::default();
        run_at(&store, &sink, &schedule(), "2026-04-20T11:20:00Z").await;
        put_reading(&store, "d2", "2026-04-20T10:45:00Z", &[("t", 2.0)]);
        store
            .put_entity(&ExportDirtyItem {
                marked_at: ts("2026-04-20T11:29:50Z"),
                ..mark("2026-04-20T10:00:00Z", 1)
            })
            .unwrap();
        // WHEN a run comes at 11:30
        let r = run_at(&store, &sink, &schedule(), "2026-04-20T11:30:00Z").await;
        // THEN it leaves the hour for the next run, marked
        assert!(r.reexported.is_empty(), "{r:?}");
        assert_eq!((r.behind, store.dirty().await.unwrap().len()), (1, 1));
        // AND the next run exports it again, the late device with it
        let r = run_at(&store, &sink, &schedule(), "2026-04-20T11:35:00Z").await;
        assert_eq!(r.reexported, [ts("2026-04-20T10:00:00Z")]);
        assert_eq!(readings_in(&sink, "10"), 2);
    }

    #[tokio::test]
    async fn a_mark_renewed_after_a_run_read_it_survives_that_runs_clear() {
        let store = MemoryStore::new();
        store.put_entity(&mark("2026-04-20T10:00:00Z", 1)).unwrap();
        let read = store.dirty().await.unwrap().remove(0);
        store.put_entity(&mark("2026-04-20T10:00:00Z", 2)).unwrap();
        assert!(!store.clear(read.hour, read.marks).await.unwrap());
        assert_eq!(store.dirty().await.unwrap().len(), 1);
        let renewed = store.dirty().await.unwrap().remove(0);
        assert!(store.clear(renewed.hour, renewed.marks).await.unwrap());
        assert!(store.dirty().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn the_cursor_only_moves_forward() {
        let store = MemoryStore::new();
        store.advance(ts("2026-04-20T10:00:00Z")).await.unwrap();
        store.advance(ts("2026-04-20T09:00:00Z")).await.unwrap();
        assert_eq!(
            store.cursor().await.unwrap(),
            Some(ts("2026-04-20T10:00:00Z"))
        );
        store.advance(ts("2026-04-20T11:00:00Z")).await.unwrap();
        assert_eq!(
            store.cursor().await.unwrap(),
            Some(ts("2026-04-20T11:00:00Z"))
        );
    }

    #[tokio::test]
    async fn a_packed_devices_readings_are_exported_as_a_single_items_are() {
        // GIVEN a device whose readings are packed in 60 s slots, two in the 10:00 hour
        let store = table_with("packed");
        let len = SlotLen::new(60).unwrap();
        let layouts = LayoutHistory::default()
            .with_layout(ts("2026-04-20T00:00:00Z"), Layout::packed(len))
            .unwrap();
        let device = DeviceId::new("packed").unwrap();
        store
            .put_entity(&LayoutHistoryItem::new(&device, layouts))
            .unwrap();
        for at in ["2026-04-20T10:30:00Z", "2026-04-20T10:30:30Z"] {
            let r = reading("packed", at, &[("t", 1.0)]);
            let key = SlotKey {
                pk: keys::reading_pk(&device, None),
                start: len.start_of(r.timestamp),
                len,
            };
            let readings: BTreeMap<_, _> = [(r.timestamp, r.metrics)].into();
            SlotWriter::new(store.table(), "t", Default::default())
                .write(
                    &key,
                    &readings,
                    i64::MAX,
                    tokio::time::Instant::now() + Duration::from_secs(30),
                )
                .await
                .unwrap();
            seen_by_rollups(&store, "packed", at);
        }
        // WHEN the hour is exported, THEN both readings are in it
        let sink = MemorySink::default();
        let r = run_at(&store, &sink, &schedule(), "2026-04-20T11:20:00Z").await;
        assert_eq!((r.exported.len(), r.readings), (1, 2), "{r:?}");
        assert_eq!(readings_in(&sink, "10"), 2);
    }

    #[tokio::test]
    async fn the_devices_table_is_remade_only_when_a_tag_change_was_counted() {
        // GIVEN d1 at site A, with readings in three hours
        let store = table_with("d1");
        let id = DeviceId::new("d1").unwrap();
        let tagged = |site: &str, version: u64| at_site(&store, &id, site, version);
        let counted = || {
            let mut items = store.table().lock();
            tidemark_store::write::tag_counts::add_in_memory(
                &mut items,
                &keys::tag_changes_of(&id).key(),
                tidemark_schema::field::CHANGES,
                1,
            )
            .unwrap();
        };
        tagged("A", 1);
        counted();
        for at in [
            "2026-04-20T10:30:00Z",
            "2026-04-20T11:30:00Z",
            "2026-04-20T12:30:00Z",
        ] {
            put_reading(&store, "d1", at, &[("t", 1.0)]);
        }
        let sink = MemorySink::default();
        let table = |sink: &MemorySink| sink.get("p/devices/part-00000.parquet").unwrap();
        run_at(&store, &sink, &schedule(), "2026-04-20T11:20:00Z").await;
        let first = table(&sink);
        // WHEN the history changes without its count moving, THEN the next hour leaves the
        // table as it was (it reads no history)
        tagged("B", 2);
        run_at(&store, &sink, &schedule(), "2026-04-20T12:20:00Z").await;
        assert_eq!(table(&sink), first);
        // WHEN a change is counted, as every tag change is, THEN the next hour remakes it
        counted();
        run_at(&store, &sink, &schedule(), "2026-04-20T13:20:00Z").await;
        assert_ne!(table(&sink), first);
        let histories = store
            .tag_histories(std::slice::from_ref(&id))
            .await
            .unwrap();
        let expected = crate::file::device_files(crate::groups::device_rows(&histories)).unwrap();
        assert_eq!(table(&sink), expected[0].0, "d1 at site B");
    }

    #[tokio::test]
    async fn group_hours_follow_their_members_readings_at_each_export() {
        use tidemark_schema::Tag;
        // GIVEN d0 and d1 at site A, d2 at site B, one reading each in the 10:00 hour
        let store =
            MemoryStore::new().with_group_tags(vec![tidemark_schema::TagKey::new("site").unwrap()]);
        for (d, site) in [("d0", "A"), ("d1", "A"), ("d2", "B")] {
            let id = DeviceId::new(d).unwrap();
            store
                .put_entity(&DeviceItem::new(
                    id.clone(),
                    DeviceStatus::Active,
                    ts("2026-04-01T00:00:00Z"),
                ))
                .unwrap();
            at_site(&store, &id, site, 1);
            put_reading(&store, d, "2026-04-20T10:30:00Z", &[("t", 1.0)]);
        }
        let sink = MemorySink::default();
        let t = MetricName::new("t").unwrap();
        let day = Period::Daily.bucket(ts("2026-04-20T10:00:00Z"));
        let group = async |site: &str| {
            let tag = Tag::parse(&format!("site:{site}")).unwrap();
            let hours = store.group_hours(&tag, &t, day).await.unwrap();
            hours
                .iter()
                .map(|g| (g.stats.count, g.devices))
                .collect::<Vec<_>>()
        };

        // WHEN the hour is exported, THEN each site's hour counts its members' readings
        run_at(&store, &sink, &schedule(), "2026-04-20T11:20:00Z").await;
        assert_eq!(group("A").await, [(2, 2)]);
        assert_eq!(group("B").await, [(1, 1)]);

        // WHEN d1's and d2's readings are deleted and the hour is marked
        for d in ["d1", "d2"] {
            let item = ReadingItem::new(&reading(d, "2026-04-20T10:30:00Z", &[]), None, 1);
            store.table().lock().remove(&(item.pk, item.sk));
        }
        store.put_entity(&mark("2026-04-20T10:00:00Z", 1)).unwrap();
        run_at(&store, &sink, &schedule(), "2026-04-20T11:30:00Z").await;

        // THEN site A's hour is recomputed from d0 alone, and site B's, left without
        // readings, is deleted
        assert_eq!(group("A").await, [(1, 1)]);
        assert!(group("B").await.is_empty());
    }
}
