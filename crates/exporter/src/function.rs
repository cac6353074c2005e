//! The exporter: its table state, source, S3 sink and slice queue built once. An
//! invocation is either a scheduled run ([`Exporter::run`], EventBridge Scheduler's payload
//! not read) or a batch of slices from the queue ([`Exporter::work`]), each within the
//! invocation's deadline. `make run` runs the same.

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use tidemark_schema::Timestamp;

use crate::ExportError;
use crate::config::ExporterConfig;
use crate::dynamo::{DynamoExportTable, DynamoState};
use crate::queue::SqsQueue;
use crate::report::Report;
use crate::s3::S3Sink;
use crate::schedule;
use crate::sink::Guarded;
use crate::slice::{SliceExport, export_slice};
use crate::slicing::SliceTask;

pub struct Exporter {
    pub state: DynamoState,
    pub source: DynamoExportTable,
    pub sink: S3Sink,
    /// Where the schedule sends slices; `None`: each run exports them itself.
    pub queue: Option<SqsQueue>,
    pub config: ExporterConfig,
}

impl Exporter {
    pub fn new(
        ddb: aws_sdk_dynamodb::Client,
        s3: aws_sdk_s3::Client,
        sqs: Option<aws_sdk_sqs::Client>,
        config: ExporterConfig,
    ) -> Self {
        let queue = match (sqs, &config.queue_url) {
            (Some(client), Some(url)) => Some(SqsQueue {
                client,
                url: url.clone(),
            }),
            _ => None,
        };
        Exporter {
            state: DynamoState::new(ddb.clone(), &config.table_name),
            source: DynamoExportTable::new(ddb, &config.table_name, config.status_partitions)
                .with_group_tags(config.group_tags.clone()),
            sink: S3Sink {
                client: s3,
                bucket: config.bucket.clone(),
            },
            queue,
            config,
        }
    }

    /// One scheduled run at `now`.
    pub async fn run(
        &self,
        now: Timestamp,
        deadline: tokio::time::Instant,
    ) -> Result<Report, ExportError> {
        let (state, source, sink, s) =
            (&self.state, &self.source, &self.sink, &self.config.schedule);
        match &self.queue {
            Some(q) => schedule::run(state, source, sink, q, s, now, deadline).await,
            None => schedule::run_inline(state, source, sink, s, now, deadline).await,
        }
    }

    /// Exports one slice, as long as its export is still its hour's ([`Guarded`]).
    pub async fn work(&self, task: &SliceTask) -> Result<SliceExport, ExportError> {
        let sink = Guarded {
            sink: &self.sink,
            state: &self.state,
            task,
        };
        export_slice(&self.source, &sink, &self.config.schedule.prefix, task).await
    }

    /// Exports each slice of a batch from the queue; those that failed (or did not parse:
    /// logged, and left to the dead-letter queue) are answered as failures, to come back.
    pub async fn work_batch(&self, event: SqsEvent) -> SqsBatchResponse {
        let messages = event
            .records
            .into_iter()
            .map(|m| (m.message_id.unwrap_or_default(), m.body.unwrap_or_default()));
        let mut answer = SqsBatchResponse::default();
        for id in self.work_messages(messages).await {
            let mut f = BatchItemFailure::default();
            f.item_identifier = id;
            answer.batch_item_failures.push(f);
        }
        answer
    }

    /// Exports the slice each `(id, body)` message names; the ids of those that failed.
    pub async fn work_messages(
        &self,
        messages: impl IntoIterator<Item = (String, String)>,
    ) -> Vec<String> {
        let mut failed = Vec::new();
        for (id, body) in messages {
            let result = match serde_json::from_str::<SliceTask>(&body) {
                Ok(t) => self.work(&t).await.map(|s| {
                    tracing::info!(
                        hour = %t.hour,
                        slice = t.slice.get(),
                        devices = s.devices,
                        readings = s.readings,
                        "export: slice written"
                    );
                }),
                Err(e) => Err(ExportError::Manifest(e)),
            };
            if let Err(e @ ExportError::Superseded { .. }) = &result {
                // Done with: a newer export of the hour (or its seal) has it.
                tracing::info!(message = %id, "export: {e}");
                continue;
            }
            if let Err(e) = result {
                tracing::warn!(message = %id, error = %e, "export: slice failed");
                failed.push(id);
            }
        }
        failed
    }

    /// Logs the run ([`Report::log`]) and returns it as the invocation's result.
    pub fn log(&self, r: &Report) -> serde_json::Value {
        r.log(&self.sink.bucket, &self.config.schedule.prefix)
    }
}
