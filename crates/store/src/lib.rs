//! DynamoDB access for Tidemark: the client (DynamoDB Local or AWS), item conversion through
//! `serde_dynamo`, and table creation from the schema crate's definition.

pub mod batch;
pub mod batch_get;
pub mod client;
pub mod deadline;
pub mod emf;
pub mod error;
pub mod failures;
pub mod insert;
pub mod items;
pub mod layout_change;
pub mod layouts;
pub mod limits;
pub mod memory;
pub mod memory_writes;
pub mod merge;
pub mod query;
pub mod read;
pub mod retry;
pub mod settings;
pub mod slots;
pub mod table;
pub mod tag_change;
pub mod tags;

pub use client::{ClientSettings, dynamodb_client, sdk_config};
pub use error::StoreError;
pub use items::{Item, from_item, from_stored, to_item};
pub use table::{create_table, delete_table};
