//! The exporter Lambda: a scheduled run per EventBridge Scheduler invocation (its payload is
//! not read), or the slices of a batch from the export queue (an SQS event), within the
//! invocation's deadline.

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use tidemark_exporter::config::ExporterConfig;
use tidemark_exporter::function::Exporter;
use tidemark_store::ClientSettings;

/// Whether `event` is a batch of SQS messages.
fn is_sqs(event: &serde_json::Value) -> bool {
    event["Records"][0]["eventSource"] == "aws:sqs"
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let config = ExporterConfig::from_env()?;
    let settings = ClientSettings::from_env();
    let ddb = tidemark_store::dynamodb_client(&settings).await;
    let s3 = tidemark_exporter::s3::client(&settings, config.s3_endpoint.as_deref()).await;
    let sqs = tidemark_exporter::queue::client(&settings, None).await;
    let exporter = Exporter::new(ddb, s3, Some(sqs), config);
    let exporter = &exporter;
    lambda_runtime::run(service_fn(
        move |e: LambdaEvent<serde_json::Value>| async move {
            if is_sqs(&e.payload) {
                let batch: SqsEvent = serde_json::from_value(e.payload)?;
                // Boxed, as the run below: the export's futures are deep for the compiler.
                let answer = Box::pin(exporter.work_batch(batch)).await;
                return Ok::<_, Error>(serde_json::to_value(answer)?);
            }
            let deadline = tidemark_store::deadline::from_epoch_millis(e.context.deadline);
            // No hour is begun in the last third of the timeout: an hour started before it
            // ends well within it (and one cut short is redone by the next run, the same).
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let deadline = tokio::time::Instant::now() + left * 2 / 3;
            let report =
                Box::pin(exporter.run(tidemark_schema::Timestamp::now(), deadline)).await?;
            Ok::<_, Error>(exporter.log(&report))
        },
    ))
    .await
}
