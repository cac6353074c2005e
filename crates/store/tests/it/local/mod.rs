//! Tests against the local emulators.

mod carried_local;
mod layouts_local;
mod local_dynamodb;
mod local_kinesis;
mod readings_local;
mod slots_local;
mod tags_local;
