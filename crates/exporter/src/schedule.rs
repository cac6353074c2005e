//! The export schedule: each run exports the hours that have closed (plus a grace for late
//! readings) since the last run's, oldest first, then again every hour the rollups role
//! marked as changed after it closed; all within the invocation's deadline, the rest left
//! to the next run. A day's daily rollups are exported with its last hour, and again after
//! its re-exported hours once the day is complete (they are merged from its hours' files). Two runs at once export the same hours with the same bytes, and the
//! cursor only moves forward.

use std::time::Duration;

use tidemark_schema::{CLOSE_GRACE_SECONDS, Period, Timestamp};

use crate::ExportError;
use crate::hour::{ends_day, export_day, export_hour};
use crate::report::Report;
use crate::sink::Sink;
use crate::store::{ExportTable, State};

const HOUR_MS: i64 = 3_600_000;

#[derive(Debug, Clone)]
pub struct Schedule {
    pub prefix: String,
    /// How long after an hour closes it is exported: late readings until then are in it.
    pub grace: Duration,
    /// Hours one run exports at most (a backlog is caught up over several runs).
    pub max_hours: usize,
}

/// The newest hour exportable at `now`: closed ([`CLOSE_GRACE_SECONDS`] after its end) for
/// `grace` more.
pub fn due_hour(now: Timestamp, grace: Duration) -> Option<Timestamp> {
    let wait = CLOSE_GRACE_SECONDS * 1000 + i64::try_from(grace.as_millis()).ok()?;
    let edge = now.minus_millis(wait)?;
    Period::Hourly.bucket(edge).start().minus_millis(HOUR_MS)
}

/// One scheduled run at `now`, ending its work by `deadline`.
pub async fn run<T: State, S: ExportTable, K: Sink>(
    state: &T,
    source: &S,
    sink: &K,
    schedule: &Schedule,
    now: Timestamp,
    deadline: tokio::time::Instant,
) -> Result<Report, ExportError> {
    let mut report = Report::default();
    let Some(due) = due_hour(now, schedule.grace) else {
        return Ok(report);
    };
    // A first run exports the due hour; older ones are `tidemark-admin export`'s to backfill.
    let mut next = match state.cursor().await? {
        Some(c) => c.plus_millis(HOUR_MS).unwrap_or(Timestamp::MAX),
        None => due,
    };
    while next <= due {
        if report.exported.len() >= schedule.max_hours || tokio::time::Instant::now() >= deadline {
            report.behind = ((due.epoch_millis() - next.epoch_millis()) / HOUR_MS + 1) as usize;
            break;
        }
        let h = export_hour(source, sink, &schedule.prefix, next).await?;
        report.readings += h.readings;
        // Before the cursor passes the day's last hour: a run cut short redoes both.
        if ends_day(next) {
            export_day(source, sink, &schedule.prefix, next).await?;
            report.days.push(Period::Daily.bucket(next).start());
        }
        state.advance(next).await?;
        report.exported.push(next);
        next = next.plus_millis(HOUR_MS).unwrap_or(Timestamp::MAX);
    }
    let cursor = state.cursor().await?;
    let mut redone = Vec::new();
    for d in state.dirty().await? {
        // An hour the schedule has not reached yet is exported when it is.
        if cursor.is_none_or(|c| d.hour > c) {
            continue;
        }
        if tokio::time::Instant::now() >= deadline {
            report.behind += 1;
            continue;
        }
        let h = export_hour(source, sink, &schedule.prefix, d.hour).await?;
        report.readings += h.readings;
        redone.push(d);
    }
    // A day the cursor has passed was exported: it changed with its hours, and is merged
    // from them once they are all redone (even if this run exported it already, before).
    let mut days: Vec<Timestamp> = Vec::new();
    for d in &redone {
        let day = Period::Daily.bucket(d.hour);
        let complete =
            cursor.is_some_and(|c| c >= day.end_exclusive().minus_millis(HOUR_MS).unwrap_or(c));
        if complete && !days.contains(&day.start()) {
            export_day(source, sink, &schedule.prefix, d.hour).await?;
            days.push(day.start());
        }
    }
    for day in days {
        if !report.days.contains(&day) {
            report.days.push(day);
        }
    }
    // Marks go last: a run cut short before its days leaves them for the next run.
    for d in redone {
        state.clear(&d).await?;
        report.reexported.push(d.hour);
    }
    Ok(report)
}
