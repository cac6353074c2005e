//! The functions a mapping feeds: the aggregator's roles behind a DynamoDB stream mapping and
//! ingest behind the Kinesis one (or fakes in tests), as batch functions of the engine.

use std::future::Future;

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use aws_lambda_events::event::streams::{DynamoDbEventResponse, KinesisEventResponse};

use super::{BatchFunction, FunctionError, Invocation};

/// A function fed by a DynamoDB stream mapping (the aggregator, or a fake in tests).
pub trait StreamHandler: Send + Sync + 'static {
    fn handle(
        &self,
        event: Event,
    ) -> impl Future<Output = Result<DynamoDbEventResponse, FunctionError>> + Send;
}

impl<H: StreamHandler> BatchFunction<EventRecord> for H {
    async fn invoke(&self, records: Vec<EventRecord>) -> Invocation {
        let mut event = Event::default();
        event.records = records;
        match self.handle(event).await {
            Ok(r) if r.batch_item_failures.is_empty() => Invocation::Success,
            Ok(r) => Invocation::ItemFailures(
                r.batch_item_failures
                    .into_iter()
                    .map(|f| f.item_identifier)
                    .collect(),
            ),
            Err(e) => Invocation::Error(e),
        }
    }
}

/// A function fed by a Kinesis mapping (the ingest function, or a fake in tests).
pub trait KinesisHandler: Send + Sync + 'static {
    fn handle(
        &self,
        event: KinesisEvent,
    ) -> impl Future<Output = Result<KinesisEventResponse, FunctionError>> + Send;
}

impl<H: KinesisHandler> BatchFunction<KinesisEventRecord> for H {
    async fn invoke(&self, records: Vec<KinesisEventRecord>) -> Invocation {
        let mut event = KinesisEvent::default();
        event.records = records;
        match self.handle(event).await {
            Ok(r) if r.batch_item_failures.is_empty() => Invocation::Success,
            Ok(r) => Invocation::ItemFailures(
                r.batch_item_failures
                    .into_iter()
                    .map(|f| f.item_identifier)
                    .collect(),
            ),
            Err(e) => Invocation::Error(e),
        }
    }
}
