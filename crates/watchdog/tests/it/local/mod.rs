//! Tests against DynamoDB Local (`scripts/services.sh start`); each makes its own table.

mod watchdog_local;
