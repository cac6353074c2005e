//! The local stack's tests, as one test binary (one link of the AWS SDK, not one per file):
//! each former `tests/<name>.rs` is the module `<name>` here (under `local::` when it needs
//! something running), so `cargo test -p tidemark-devstack --test it <name>::` runs what that
//! file ran, e.g. `--test it local::end_to_end::`.
//!
//! - `http_api`, `invoke_http` and `template_agrees` need nothing running.
//! - `local` needs the local services (`scripts/services.sh start`: DynamoDB Local,
//!   kinesis-mock, moto S3), and its dashboard tests a headless Chromium
//!   (`scripts/browser.sh`) and, for sign-in, the OpenID provider (`scripts/oidc.sh`).
//! - `common` holds what the tests share: HTTP calls to the local API, the fast in-process
//!   pipeline, how long to wait for it and what a wait saw last, and the one browser at a
//!   time; waiting itself is `tidemark_testkit::eventually`.

mod common;
mod http_api;
mod invoke_http;
mod local;
mod template_agrees;
