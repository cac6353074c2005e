//! Both readers of the table stream in one value, for tools and tests that feed one event to
//! what the template runs as two functions (the rollups and the alerts mapping).

use aws_lambda_events::event::dynamodb::Event;
use aws_lambda_events::event::streams::DynamoDbEventResponse;

use crate::AggregatorConfig;
use crate::config::Role;
use crate::function::Aggregator;
use crate::report::Report;
use crate::store::{DynamoStore, Store};

pub struct BothRoles<S = DynamoStore> {
    pub rollups: Aggregator<S>,
    pub alerts: Aggregator<S>,
}

impl BothRoles<DynamoStore> {
    pub fn new(client: aws_sdk_dynamodb::Client, config: AggregatorConfig) -> Self {
        BothRoles {
            rollups: Aggregator::new(client.clone(), config.clone().with_role(Role::Rollups)),
            alerts: Aggregator::new(client, config.with_role(Role::Alerts)),
        }
    }
}

impl<S: Store> BothRoles<S> {
    /// The event through each role, one after the other; the counts add up and the earlier
    /// failure point wins (as each mapping would retry from its own).
    pub async fn process(&self, event: &Event) -> (DynamoDbEventResponse, Report) {
        let (mut resp, mut report) = self.rollups.process(event).await;
        let (resp2, report2) = self.alerts.process(event).await;
        report.merge(&report2);
        resp.batch_item_failures.extend(resp2.batch_item_failures);
        resp.batch_item_failures.sort_by(|a, b| {
            let seq = |f: &aws_lambda_events::event::streams::DynamoDbBatchItemFailure| {
                f.item_identifier.clone().unwrap_or_default()
            };
            crate::records::cmp_seq(&seq(a), &seq(b))
        });
        resp.batch_item_failures.truncate(1);
        (resp, report)
    }
}
