//! Creates the table from `tidemark_schema::TABLE`, the same definition `template.yaml`
//! declares, so a local table is the deployed table.

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, StreamSpecification, StreamViewType, TableStatus,
    TimeToLiveSpecification,
};
use tidemark_schema::table::{IndexDefinition, KeyAttribute, TableDefinition};

use crate::StoreError;

fn key(a: KeyAttribute, kind: KeyType) -> Result<KeySchemaElement, StoreError> {
    KeySchemaElement::builder()
        .attribute_name(a.name)
        .key_type(kind)
        .build()
        .map_err(|e| build_err(e.to_string()))
}

fn build_err(message: String) -> StoreError {
    StoreError::Request {
        operation: "CreateTable",
        message,
    }
}

fn attribute(a: KeyAttribute) -> Result<AttributeDefinition, StoreError> {
    AttributeDefinition::builder()
        .attribute_name(a.name)
        .attribute_type(ScalarAttributeType::from(a.kind.code()))
        .build()
        .map_err(|e| build_err(e.to_string()))
}

fn projection(gsi: &IndexDefinition) -> Result<Projection, StoreError> {
    Ok(Projection::builder()
        .projection_type(ProjectionType::from(gsi.projection))
        .set_non_key_attributes((!gsi.non_key_attributes.is_empty()).then(|| {
            gsi.non_key_attributes
                .iter()
                .map(|a| (*a).to_owned())
                .collect()
        }))
        .build())
}

/// Creates `name` (on-demand, stream on, TTL on) and waits until it is active.
/// A table that already exists is left as it is.
pub async fn create_table(
    client: &Client,
    name: &str,
    def: &TableDefinition,
) -> Result<(), StoreError> {
    let attrs = def
        .key_attributes()
        .into_iter()
        .map(attribute)
        .collect::<Result<Vec<_>, _>>()?;
    let mut req = client
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .set_attribute_definitions(Some(attrs))
        .key_schema(key(def.partition_key, KeyType::Hash)?)
        .key_schema(key(def.sort_key, KeyType::Range)?)
        .stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::from(def.stream_view_type))
                .build()
                .map_err(|e| build_err(e.to_string()))?,
        );
    for gsi in def.global_secondary_indexes {
        req = req.global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name(gsi.name)
                .key_schema(key(gsi.partition_key, KeyType::Hash)?)
                .key_schema(key(gsi.sort_key, KeyType::Range)?)
                .projection(projection(gsi)?)
                .build()
                .map_err(|e| build_err(e.to_string()))?,
        );
    }
    match req.send().await {
        Ok(_) => {}
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_in_use_exception()) =>
        {
            return add_missing_indexes(client, name, def).await;
        }
        Err(e) => return Err(StoreError::sdk("CreateTable")(e)),
    }
    wait_for(client, name, Some(TableStatus::Active)).await?;
    client
        .update_time_to_live()
        .table_name(name)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .enabled(true)
                .attribute_name(def.ttl_attribute)
                .build()
                .map_err(|e| build_err(e.to_string()))?,
        )
        .send()
        .await
        .map_err(StoreError::sdk("UpdateTimeToLive"))?;
    Ok(())
}

/// A local table made by an older checkout gains the indexes it lacks, one at a time (what
/// DynamoDB allows), so `make run` keeps its data across an upgrade.
async fn add_missing_indexes(
    client: &Client,
    name: &str,
    def: &TableDefinition,
) -> Result<(), StoreError> {
    let out = client
        .describe_table()
        .table_name(name)
        .send()
        .await
        .map_err(StoreError::sdk("DescribeTable"))?;
    let have: Vec<String> = out
        .table()
        .map(|t| {
            t.global_secondary_indexes()
                .iter()
                .filter_map(|g| g.index_name().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    for gsi in def.global_secondary_indexes {
        if have.iter().any(|h| h == gsi.name) {
            continue;
        }
        let attrs = [gsi.partition_key, gsi.sort_key]
            .into_iter()
            .map(attribute)
            .collect::<Result<Vec<_>, _>>()?;
        let create = aws_sdk_dynamodb::types::CreateGlobalSecondaryIndexAction::builder()
            .index_name(gsi.name)
            .key_schema(key(gsi.partition_key, KeyType::Hash)?)
            .key_schema(key(gsi.sort_key, KeyType::Range)?)
            .projection(projection(gsi)?)
            .build()
            .map_err(|e| build_err(e.to_string()))?;
        client
            .update_table()
            .table_name(name)
            .set_attribute_definitions(Some(attrs))
            .global_secondary_index_updates(
                aws_sdk_dynamodb::types::GlobalSecondaryIndexUpdate::builder()
                    .create(create)
                    .build(),
            )
            .send()
            .await
            .map_err(StoreError::sdk("UpdateTable"))?;
        wait_for(client, name, Some(TableStatus::Active)).await?;
    }
    Ok(())
}

/// Deletes `name` and waits until it is gone; a missing table is fine.
pub async fn delete_table(client: &Client, name: &str) -> Result<(), StoreError> {
    match client.delete_table().table_name(name).send().await {
        Ok(_) => wait_for(client, name, None).await,
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_not_found_exception()) =>
        {
            Ok(())
        }
        Err(e) => Err(StoreError::sdk("DeleteTable")(e)),
    }
}

/// Polls until the table has `want` status, or is gone when `want` is `None`.
async fn wait_for(
    client: &Client,
    name: &str,
    want: Option<TableStatus>,
) -> Result<(), StoreError> {
    const SECONDS: u64 = 60;
    for _ in 0..SECONDS * 10 {
        match client.describe_table().table_name(name).send().await {
            Ok(out) => {
                let status = out.table().and_then(|t| t.table_status()).cloned();
                if want.is_some() && status == want {
                    return Ok(());
                }
            }
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_resource_not_found_exception()) =>
            {
                if want.is_none() {
                    return Ok(());
                }
            }
            Err(e) => return Err(StoreError::sdk("DescribeTable")(e)),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(StoreError::Timeout {
        table: name.to_owned(),
        state: if want.is_some() { "active" } else { "deleted" },
        seconds: SECONDS,
    })
}
