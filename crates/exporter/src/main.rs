//! The exporter Lambda: one schedule run per invocation (EventBridge Scheduler's payload is
//! not read), within the invocation's deadline.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use tidemark_exporter::config::ExporterConfig;
use tidemark_exporter::function::Exporter;
use tidemark_store::ClientSettings;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let config = ExporterConfig::from_env()?;
    let settings = ClientSettings::from_env();
    let ddb = tidemark_store::dynamodb_client(&settings).await;
    let s3 = tidemark_exporter::s3::client(&settings, config.s3_endpoint.as_deref()).await;
    let exporter = Exporter::new(ddb, s3, config);
    let exporter = &exporter;
    lambda_runtime::run(service_fn(
        move |e: LambdaEvent<serde_json::Value>| async move {
            let deadline = tidemark_store::deadline::from_epoch_millis(e.context.deadline);
            // No hour is begun in the last third of the timeout: an hour started before it
            // ends well within it (and one cut short is redone by the next run, the same).
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let deadline = tokio::time::Instant::now() + left * 2 / 3;
            let report = exporter
                .run(tidemark_schema::Timestamp::now(), deadline)
                .await?;
            Ok::<_, Error>(exporter.log(&report))
        },
    ))
    .await
}
