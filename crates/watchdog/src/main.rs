//! The watchdog Lambda: run once per scheduled invocation (EventBridge Scheduler's payload is
//! not read), within the invocation's deadline.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use tidemark_store::ClientSettings;
use tidemark_watchdog::{DynamoWatch, KinesisHeartbeats, Watchdog, WatchdogConfig};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let config = WatchdogConfig::from_env()?;
    let settings = ClientSettings::from_env();
    let client = tidemark_store::dynamodb_client(&settings).await;
    let kinesis =
        tidemark_watchdog::pipeline::kinesis_client(config.kinesis_endpoint.as_deref()).await;
    let pipeline = KinesisHeartbeats {
        client: kinesis,
        stream: config.stream_name.clone(),
    };
    let store = DynamoWatch::new(client, config.table_name.clone());
    let watchdog = Watchdog::new(store, pipeline, config);
    let watchdog = &watchdog;
    lambda_runtime::run(service_fn(
        move |e: LambdaEvent<serde_json::Value>| async move {
            let deadline = tidemark_store::deadline::from_epoch_millis(e.context.deadline);
            // Two seconds kept back to log what was done.
            let deadline = tokio::time::Instant::from_std(deadline)
                .checked_sub(std::time::Duration::from_secs(2))
                .unwrap_or_else(tokio::time::Instant::now);
            let report = watchdog.run(deadline).await?;
            Ok::<_, Error>(tidemark_watchdog::report::log(
                &report,
                watchdog.config.clock.now(),
            ))
        },
    ))
    .await
}
