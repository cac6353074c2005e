//! The cross-crate checks, as one test binary (one link of the AWS SDK, not one per file):
//! each former `tests/tests/<name>.rs` is the module `<name>` here, so
//! `cargo test -p tidemark-tests --test it <name>::` runs what that file ran.
//!
//! - The template, settings and docs checks read files of the repository; they need nothing
//!   running.
//! - `never_stall` is the never-stall property over the in-memory engine; `make soak` runs it
//!   alone with more cases (`cargo test -p tidemark-tests --test it never_stall`,
//!   `TIDEMARK_SOAK_CASES`, `TIDEMARK_SEED`).
//! - `local` needs the local services (`scripts/services.sh start`): DynamoDB Local for
//!   `local::hot_device_resharding`, the running emulators for
//!   `local::local_services_listen_on_loopback`.

mod alert_events_route_by_tag;
mod docs_citations_resolve;
mod local;
mod never_stall;
mod settings_agree;
mod template_agrees_with_schema;
mod template_alarms_on_set_aside;
mod template_export_tables_match_the_exporter;
mod template_grants_what_functions_use;
mod template_iam_grants_routes_by_scope;
mod template_wires_events_and_api;
