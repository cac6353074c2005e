//! The scheduled exporter: its table state, source and S3 sink built once, each invocation
//! one [`schedule::run`] within the invocation's deadline. `make run` runs the same.

use tidemark_schema::Timestamp;
use tidemark_store::emf::Metrics;

use crate::ExportError;
use crate::config::ExporterConfig;
use crate::export_table::DynamoExportTable;
use crate::paths;
use crate::s3::S3Sink;
use crate::schedule::{self, DynamoState, RunReport};

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
    ) -> Result<RunReport, ExportError> {
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

    /// Logs the run (a line per partition written, its EMF metrics) and returns it as the
    /// invocation's result.
    pub fn log(&self, r: &RunReport) -> serde_json::Value {
        let prefix = &self.config.schedule.prefix;
        for h in r.exported.iter().chain(&r.reexported) {
            tracing::info!(
                "export: hour {h} written to s3://{}/{}",
                self.sink.bucket,
                paths::readings_partition(prefix, *h)
            );
        }
        Metrics::new("exporter")
            .count("HoursExported", r.exported.len() as u64)
            .count("HoursReexported", r.reexported.len() as u64)
            .count("DaysExported", r.days.len() as u64)
            .count("Readings", r.readings)
            .count("HoursBehind", r.behind as u64)
            .emit();
        let list = |v: &[Timestamp]| v.iter().map(ToString::to_string).collect::<Vec<_>>();
        serde_json::json!({
            "exported": list(&r.exported),
            "reexported": list(&r.reexported),
            "days": list(&r.days),
            "readings": r.readings,
            "behind": r.behind,
        })
    }
}
