//! DynamoDB access for Tidemark: the client (DynamoDB Local or AWS), item conversion through
//! `serde_dynamo`, and table creation from the schema crate's definition.

pub mod batch_get;
pub mod client;
pub mod deadline;
pub mod emf;
pub mod error;
pub mod failures;
pub mod items;
pub mod layouts;
pub mod limits;
pub mod memory;
pub mod query;
pub mod read;
pub mod retry;
pub mod settings;
pub mod table;
pub mod tags;
pub mod write;
pub mod write_log;

pub use client::{ClientSettings, dynamodb_client, sdk_config};
pub use error::StoreError;
pub use items::{Item, aggregate_item, from_item, from_stored, to_item};
pub use table::{create_table, delete_table};
