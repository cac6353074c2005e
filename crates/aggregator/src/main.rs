//! The aggregator Lambda: DynamoDB Streams → rollups, alerts, device latest.

use aws_lambda_events::event::dynamodb::Event;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use tidemark_aggregator::{Aggregator, AggregatorConfig};
use tidemark_store::ClientSettings;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let config = AggregatorConfig::from_env()?;
    let client = tidemark_store::dynamodb_client(&ClientSettings::from_env()).await;
    let aggregator = Aggregator::new(client, config);
    let aggregator = &aggregator;
    lambda_runtime::run(service_fn(move |e: LambdaEvent<Event>| async move {
        aggregator.handle(e.payload).await.map_err(Error::from)
    }))
    .await
}
