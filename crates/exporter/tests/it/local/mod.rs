//! Tests against DynamoDB Local, moto's S3 and SQS, and DuckDB (`scripts/services.sh start`). Each
//! makes its own table and bucket (uniquely named), so they run concurrently.

mod duckdb_reads;
mod fanout_local;
mod groups_local;
mod hour_local;
mod s3_local;
mod schedule_local;
