//! Tests against the local services (`scripts/services.sh start`), a headless browser or an
//! OpenID provider. Each test makes its own table, stream and bucket (unique names), so
//! tests of different modules run side by side in this one process; the browsers take turns
//! ([`crate::common::browser`]).

mod bootstrap;
mod dashboard;
mod dashboard_auth;
mod dashboard_pages;
mod end_to_end;
mod esm_dynamodb;
mod esm_kinesis;
mod export_flow;
mod layout_change_flow;
mod lose_nothing;
mod never_stall;
mod offline;
mod outage;
mod packed_flow;
mod rules_flow;
mod scoped_access;
