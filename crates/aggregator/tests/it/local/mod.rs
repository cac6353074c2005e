//! Tests against DynamoDB Local (`scripts/services.sh start`). Each makes its own table
//! (`TestTable::new` names it uniquely), so they run concurrently.

mod alert_tags_local;
mod alerts_local;
mod exactly_once;
mod export_marks_local;
mod group_rules_local;
mod groups_local;
mod local_dynamodb;
mod notify_local;
mod open_buckets;
mod packed_local;
mod paged_local;
mod rules_local;
mod set_aside_local;
mod sketches_local;
