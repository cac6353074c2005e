//! Which reader of the table's stream a function is ([`Role`]): its own module, so the store
//! traits (a heartbeat is marked by a role) and the configuration both name it without the
//! store depending on the configuration.

use tidemark_store::settings;

use crate::AggregatorError;

/// The two readers of the table's stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Role {
    /// Hourly and daily rollups, behind a mapping with a long batching window (cheap writes).
    #[default]
    Rollups,
    /// Alert state, the device item and alert notifications, behind a mapping with a short
    /// window (fast alerts; writes only on changes).
    Alerts,
}

impl std::str::FromStr for Role {
    type Err = AggregatorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "rollups" => Ok(Role::Rollups),
            "alerts" => Ok(Role::Alerts),
            other => Err(AggregatorError::Config(format!(
                "{}={other:?} is neither \"rollups\" nor \"alerts\"",
                settings::AGGREGATOR_ROLE.name
            ))),
        }
    }
}
