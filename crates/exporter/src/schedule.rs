//! The export schedule: each run exports the hours that have closed (plus a grace for late
//! readings) since the last run's, oldest first, then again every hour the rollups role
//! marked as changed after it closed; all within the invocation's deadline, the rest left
//! to the next run. A day's daily rollups are exported with its last hour, and again after
//! its re-exported hours once the day is complete (they are merged from its hours' files). Two runs at once export the same hours with the same bytes, and the
//! cursor only moves forward.

use std::time::Duration;

use tidemark_schema::{
    CLOSE_GRACE_SECONDS, EntityKey, ExportCursorItem, ExportDirtyItem, Period, Timestamp, field,
    keys,
};
use tidemark_store::read::{Queries, QuerySpec, SkRange, query_all};

use crate::ExportError;
use crate::export_table::ExportTable;
use crate::hour::{ends_day, export_day, export_hour};
use crate::sink::Sink;

const HOUR_MS: i64 = 3_600_000;

/// Where the schedule stands, in the table's `EXPORT` partition.
pub trait State {
    fn cursor(&self) -> impl Future<Output = Result<Option<Timestamp>, ExportError>> + Send;
    /// Moves the cursor to `hour` unless it already stands there or later.
    fn advance(&self, hour: Timestamp) -> impl Future<Output = Result<(), ExportError>> + Send;
    fn dirty(&self) -> impl Future<Output = Result<Vec<ExportDirtyItem>, ExportError>> + Send;
    /// Removes the mark if no marking came after `d` was read; whether it did.
    fn clear(&self, d: &ExportDirtyItem) -> impl Future<Output = Result<bool, ExportError>> + Send;
}

#[derive(Debug, Clone)]
pub struct Schedule {
    pub prefix: String,
    /// How long after an hour closes it is exported: late readings until then are in it.
    pub grace: Duration,
    /// Hours one run exports at most (a backlog is caught up over several runs).
    pub max_hours: usize,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunReport {
    pub exported: Vec<Timestamp>,
    pub reexported: Vec<Timestamp>,
    /// Days whose daily rollups were written (their start).
    pub days: Vec<Timestamp>,
    pub readings: u64,
    /// Due hours left for the next run (deadline or `max_hours`).
    pub behind: usize,
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
) -> Result<RunReport, ExportError> {
    let mut report = RunReport::default();
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

/// [`State`] in the table.
pub struct DynamoState {
    pub client: aws_sdk_dynamodb::Client,
    pub table: String,
    pub queries: Queries,
}

impl DynamoState {
    pub fn new(client: aws_sdk_dynamodb::Client, table: &str) -> Self {
        DynamoState {
            queries: Queries::new(client.clone(), table.to_owned()),
            client,
            table: table.to_owned(),
        }
    }
}

fn key_item(k: &tidemark_schema::Key) -> tidemark_store::Item {
    tidemark_store::batch_get::key_item(k)
}

impl State for DynamoState {
    async fn cursor(&self) -> Result<Option<Timestamp>, ExportError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key_item(&EntityKey::ExportCursor.key())))
            .consistent_read(true)
            .send()
            .await
            .map_err(tidemark_store::StoreError::sdk("GetItem"))?;
        Ok(match out.item {
            Some(i) => Some(tidemark_store::from_item::<ExportCursorItem>(i)?.hour),
            None => None,
        })
    }

    async fn advance(&self, hour: Timestamp) -> Result<(), ExportError> {
        let r = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(tidemark_store::to_item(&ExportCursorItem::new(hour))?))
            .condition_expression("attribute_not_exists(pk) OR #hour < :hour")
            .expression_attribute_names("#hour", field::HOUR)
            .expression_attribute_values(
                ":hour",
                serde_dynamo::to_attribute_value(hour).map_err(tidemark_store::StoreError::from)?,
            )
            .send()
            .await
            .map_err(tidemark_store::StoreError::sdk("PutItem"));
        match r {
            Ok(_) => Ok(()),
            // Another run got there first.
            Err(e) if e.is_conditional_check_failed() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn dirty(&self) -> Result<Vec<ExportDirtyItem>, ExportError> {
        let spec = QuerySpec {
            consistent: true,
            ..QuerySpec::table(
                keys::EXPORT_PK.to_owned(),
                SkRange::BeginsWith(keys::EXPORT_DIRTY_PREFIX.to_owned()),
                true,
            )
        };
        let mut items = Vec::new();
        query_all(&self.queries, &spec, 1000, |i| items.push(i)).await?;
        let mut out = Vec::new();
        for i in items {
            match tidemark_store::from_item::<ExportDirtyItem>(i) {
                Ok(d) => out.push(d),
                Err(e) => tracing::warn!(error = %e, "unreadable export mark skipped"),
            }
        }
        Ok(out)
    }

    async fn clear(&self, d: &ExportDirtyItem) -> Result<bool, ExportError> {
        let r = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(key_item(&EntityKey::ExportDirty(d.hour).key())))
            .condition_expression("#marks = :marks")
            .expression_attribute_names("#marks", field::MARKS)
            .expression_attribute_values(
                ":marks",
                aws_sdk_dynamodb::types::AttributeValue::N(d.marks.to_string()),
            )
            .send()
            .await
            .map_err(tidemark_store::StoreError::sdk("DeleteItem"));
        match r {
            Ok(_) => Ok(true),
            Err(e) if e.is_conditional_check_failed() => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}
