//! The aggregator Lambda: DynamoDB Streams → rollups, alerts, device latest.

use aws_lambda_events::event::dynamodb::Event;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use tidemark_aggregator::{Aggregator, AggregatorConfig, Notifier, Role};
use tidemark_store::ClientSettings;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let config = AggregatorConfig::from_env()?;
    let client = tidemark_store::dynamodb_client(&ClientSettings::from_env()).await;
    let notifier = match config.role {
        Role::Alerts => Some(Notifier::new(client.clone(), &config).await?),
        Role::Rollups => None,
    };
    let mut aggregator = Aggregator::new(client, config);
    if let Some(n) = notifier {
        aggregator = aggregator.with_notifier(n);
    }
    let aggregator = &aggregator;
    lambda_runtime::run(service_fn(move |e: LambdaEvent<Event>| async move {
        let deadline = tidemark_store::deadline::from_epoch_millis(e.context.deadline);
        aggregator
            .handle(e.payload, deadline)
            .await
            .map_err(Error::from)
    }))
    .await
}
