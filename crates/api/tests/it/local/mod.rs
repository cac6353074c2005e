//! Tests against DynamoDB Local (`scripts/services.sh start`). Each test makes its own
//! uniquely named table (`tidemark_testkit::TestTable`), so they run side by side.

mod alert_actions;
mod alert_rules;
mod caller_rate_limit;
mod device_tags;
mod events;
mod fleets;
mod gateway_for;
mod grafana;
mod local_dynamodb;
mod packed_layouts;
mod quarantine_reason;
mod request_budget;
mod series;
