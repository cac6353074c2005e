//! Direct access to a run's table, not metered: seeding it in bulk and counting what the
//! runs left in GSI2.

use std::time::Duration;

use aws_sdk_dynamodb::types::{PutRequest, WriteRequest};
use futures::StreamExt;
use tidemark_bench::BenchError;
use tidemark_schema::keys;
use tidemark_store::Item;

fn sdk_err(e: impl std::fmt::Debug) -> BenchError {
    BenchError::Other(format!("{e:?}"))
}

/// Device items with a GSI2 watch key (a scan, not metered).
pub async fn watched(client: &aws_sdk_dynamodb::Client, table: &str) -> Result<u64, BenchError> {
    let mut n = 0;
    let mut pages = client
        .scan()
        .table_name(table)
        .index_name(tidemark_schema::table::GSI2)
        .into_paginator()
        .items()
        .send();
    while let Some(item) = pages.next().await {
        let item = item.map_err(sdk_err)?;
        if let Some(aws_sdk_dynamodb::types::AttributeValue::S(pk)) =
            item.get(tidemark_schema::table::attr::GSI2PK)
            && pk.starts_with(keys::OFFLINE_WATCH_PREFIX)
        {
            n += 1;
        }
    }
    Ok(n)
}

/// Writes `items` with `BatchWriteItem`, 25 a call, `concurrency` calls in flight, sending
/// unprocessed items again.
pub async fn seed(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    items: Vec<Item>,
    concurrency: usize,
) -> Result<u64, BenchError> {
    let n = items.len() as u64;
    let chunks: Vec<Vec<Item>> = items.chunks(25).map(<[Item]>::to_vec).collect();
    let results = futures::stream::iter(chunks)
        .map(|chunk| async move {
            let mut pending: Vec<WriteRequest> = chunk
                .into_iter()
                .map(|item| {
                    PutRequest::builder()
                        .set_item(Some(item))
                        .build()
                        .map(|p| WriteRequest::builder().put_request(p).build())
                        .map_err(sdk_err)
                })
                .collect::<Result<_, _>>()?;
            for attempt in 0..20 {
                if pending.is_empty() {
                    break;
                }
                if attempt > 0 {
                    tokio::time::sleep(Duration::from_millis(50 * attempt)).await;
                }
                let out = client
                    .batch_write_item()
                    .request_items(table, std::mem::take(&mut pending))
                    .send()
                    .await
                    .map_err(sdk_err)?;
                pending = out
                    .unprocessed_items
                    .and_then(|mut m| m.remove(table))
                    .unwrap_or_default();
            }
            if pending.is_empty() {
                Ok(())
            } else {
                Err(BenchError::Setup("seeding: items left unprocessed".into()))
            }
        })
        .buffer_unordered(concurrency)
        .collect::<Vec<Result<(), BenchError>>>()
        .await;
    results.into_iter().collect::<Result<Vec<()>, _>>()?;
    Ok(n)
}

/// Counts the items of a GSI2 partition (a query, not metered).
pub async fn gsi2_count(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    pk: &str,
) -> Result<u64, BenchError> {
    let mut n = 0;
    let mut pages = client
        .query()
        .table_name(table)
        .index_name(tidemark_schema::table::GSI2)
        .key_condition_expression("#p = :p")
        .expression_attribute_names("#p", tidemark_schema::table::attr::GSI2PK)
        .expression_attribute_values(
            ":p",
            aws_sdk_dynamodb::types::AttributeValue::S(pk.to_owned()),
        )
        .into_paginator()
        .items()
        .send();
    while let Some(i) = pages.next().await {
        i.map_err(sdk_err)?;
        n += 1;
    }
    Ok(n)
}
