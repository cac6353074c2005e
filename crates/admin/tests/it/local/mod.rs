//! Tests against the local services (`scripts/services.sh start`). Each makes its own
//! table, stream and bucket (uniquely named), so they run concurrently.

mod export;
mod members;
mod rebuild;
mod redrive;
mod set_aside;
