//! Tests against DynamoDB Local (`scripts/services.sh start`). Each test makes its own
//! uniquely named table (`tidemark_testkit::TestTable`), so they run side by side.

mod identity_local;
mod iot_rule_local;
mod kpl_local;
mod local_dynamodb;
mod metric_cap_local;
mod packed_local;
