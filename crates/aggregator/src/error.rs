use thiserror::Error;
use tidemark_store::StoreError;

#[derive(Debug, Error)]
pub enum AggregatorError {
    #[error("configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("item {key} still conflicted after {attempts} attempts")]
    Contended { key: String, attempts: u32 },
    #[error("not finished before the invocation's deadline")]
    OutOfTime,
    /// The work of one device or item panicked (a bug of ours, caught where it ran).
    #[error("panicked: {0}")]
    Panicked(String),
}

impl AggregatorError {
    /// Whether the same records, processed again, fail the same way: the aggregator's one
    /// classification of its failures (docs/design.md §5, "What is retried, what is set
    /// aside"). Permanent: what [`StoreError::is_permanent`] calls so (a `ValidationException`,
    /// an item or transaction over DynamoDB's limits, an item we cannot convert or parse, a
    /// request we built wrong) and a panic. Transient, retried for as long as it takes:
    /// throttling, server errors, timeouts, a race still lost after every attempt
    /// ([`AggregatorError::Contended`]), the invocation's deadline
    /// ([`AggregatorError::OutOfTime`]), and configuration, which an operator fixes.
    pub fn is_permanent(&self) -> bool {
        match self {
            AggregatorError::Store(e) => e.is_permanent(),
            AggregatorError::Panicked(_) => true,
            AggregatorError::Config(_)
            | AggregatorError::Contended { .. }
            | AggregatorError::OutOfTime => false,
        }
    }

    /// A short name of the failure, for the failure counts (the same record failing the same
    /// way) and the repair item.
    pub fn kind(&self) -> &'static str {
        match self {
            AggregatorError::Config(_) => "config",
            AggregatorError::Contended { .. } => "contended",
            AggregatorError::OutOfTime => "out-of-time",
            AggregatorError::Panicked(_) => "panic",
            AggregatorError::Store(StoreError::TooLarge { .. }) => "too-large",
            AggregatorError::Store(e @ StoreError::Dynamo { .. }) if e.is_permanent() => {
                "validation"
            }
            AggregatorError::Store(e) if e.is_permanent() => "invalid",
            AggregatorError::Store(_) => "store",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn races_deadlines_and_outages_are_retried_and_refusals_and_panics_are_permanent() {
        let contended = AggregatorError::Contended {
            key: "k".into(),
            attempts: 5,
        };
        assert!(!contended.is_permanent());
        assert!(!AggregatorError::OutOfTime.is_permanent());
        assert!(AggregatorError::Panicked("boom".into()).is_permanent());
        let too_large = AggregatorError::Store(StoreError::TooLarge {
            key: "k".into(),
            bytes: 500_000,
        });
        assert!(too_large.is_permanent());
        assert_eq!(too_large.kind(), "too-large");
        let timeout = AggregatorError::Store(StoreError::Timeout {
            table: "t".into(),
            state: "ACTIVE",
            seconds: 1,
        });
        assert!(!timeout.is_permanent());
    }
}
