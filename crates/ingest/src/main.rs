//! The ingest Lambda: configuration and the DynamoDB client are built once per container,
//! every invocation goes to [`Ingest::handle`] with the invocation's deadline.

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use tidemark_ingest::{Ingest, IngestConfig, KinesisBatch, deadline_from_epoch_millis};
use tidemark_store::ClientSettings;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let config = IngestConfig::from_env()?;
    let client = tidemark_store::dynamodb_client(&ClientSettings::from_env()).await;
    let ingest = Ingest::new(client, config);
    let ingest = &ingest;
    run(service_fn(
        move |event: LambdaEvent<KinesisBatch>| async move {
            let deadline = deadline_from_epoch_millis(event.context.deadline);
            Ok::<_, Error>(ingest.handle(event.payload.0, deadline).await?)
        },
    ))
    .await
}
