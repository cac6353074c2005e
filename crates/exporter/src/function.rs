//! The scheduled exporter: its table state, source and S3 sink built once, each invocation
//! one [`schedule::run`] within the invocation's deadline. `make run` runs the same.

use tidemark_schema::Timestamp;

use crate::ExportError;
use crate::config::ExporterConfig;
use crate::dynamo::{DynamoExportTable, DynamoState};
use crate::report::Report;
use crate::s3::S3Sink;
use crate::schedule;

pub struct Exporter {
    pub state: DynamoState,
    pub source: DynamoExportTable,
    pub sink: S3Sink,
    pub config: ExporterConfig,
}

impl Exporter {
    pub fn new(
        ddb: aws_sdk_dynamodb::Client,
        s3: aws_sdk_s3::Client,
        config: ExporterConfig,
    ) -> Self {
        Exporter {
            state: DynamoState::new(ddb.clone(), &config.table_name),
            source: DynamoExportTable::new(ddb, &config.table_name, config.status_partitions)
                .with_group_tags(config.group_tags.clone()),
            sink: S3Sink {
                client: s3,
                bucket: config.bucket.clone(),
            },
            config,
        }
    }

    /// One scheduled run at `now`.
    pub async fn run(
        &self,
        now: Timestamp,
        deadline: tokio::time::Instant,
    ) -> Result<Report, ExportError> {
        schedule::run(
            &self.state,
            &self.source,
            &self.sink,
            &self.config.schedule,
            now,
            deadline,
        )
        .await
    }

    /// Logs the run ([`Report::log`]) and returns it as the invocation's result.
    pub fn log(&self, r: &Report) -> serde_json::Value {
        r.log(&self.sink.bucket, &self.config.schedule.prefix)
    }
}
