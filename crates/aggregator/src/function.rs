//! The aggregator function ([`Aggregator`]): its store, its configuration, and what its
//! container keeps between invocations. What it does is its roles' business: one invocation
//! in [`crate::handler`], the rollups role in [`crate::rollups`], the alerts role in
//! [`crate::alerting`], repairs in [`crate::setaside`].

use crate::config::AggregatorConfig;
use crate::rollups::settled::{SettledDays, SettledHours};
use crate::store::{DynamoStore, Store};

/// The aggregator over a store (DynamoDB in production, the in-memory `memory::MemoryStore` in
/// unit tests).
pub struct Aggregator<S = DynamoStore> {
    pub(crate) store: S,
    pub(crate) config: AggregatorConfig,
    /// Publishes alert state changes (the alerts role only).
    pub(crate) notifier: Option<crate::notify::Notifier>,
    /// Days this container knows are closed for good (the rollups role).
    pub(crate) settled_days: SettledDays,
    /// Per device, the hour before which this container left no placeholder to close.
    pub(crate) settled_hours: SettledHours,
    /// When this container last read its role's open repairs ([`crate::setaside`]).
    pub(crate) repairs_checked: std::sync::Mutex<Option<tidemark_schema::Timestamp>>,
}

impl Aggregator<DynamoStore> {
    pub fn new(client: aws_sdk_dynamodb::Client, config: AggregatorConfig) -> Self {
        let store =
            DynamoStore::new(client, config.table_name.clone()).with_tag_lead(config.tag_lead);
        Aggregator {
            store,
            config,
            notifier: None,
            settled_days: Default::default(),
            settled_hours: Default::default(),
            repairs_checked: Default::default(),
        }
    }
}

impl<S: Store> Aggregator<S> {
    pub fn with_store(store: S, config: AggregatorConfig) -> Self {
        Aggregator {
            store,
            config,
            notifier: None,
            settled_days: Default::default(),
            settled_hours: Default::default(),
            repairs_checked: Default::default(),
        }
    }

    /// Publishes the alert state changes of each batch (used when the role is `alerts`).
    pub fn with_notifier(mut self, notifier: crate::notify::Notifier) -> Self {
        self.notifier = Some(notifier);
        self
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn config(&self) -> &AggregatorConfig {
        &self.config
    }
}
