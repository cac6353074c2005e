//! Inserting up to 25 items in one call, each only if its key is free.
//!
//! `BatchWriteItem` has no conditions, so it cannot write readings (a second record with the
//! same key must add to the first, never erase it). PartiQL's `INSERT` is a put on the
//! condition that no item has the key, and `BatchExecuteStatement` sends 25 of them in one
//! call, each succeeding or failing on its own. New readings, the common case, go out this
//! way; an item whose key is taken (a same-timestamp record, a correction, a resend) then goes
//! through the one-item merge ([`crate::write::map_merge::merge_item`]), which reads what is there.
//!
//! A successful `INSERT` consumes the same write units as `PutItem`; a refused one is billed
//! like a failed conditional write.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{BatchStatementErrorCodeEnum as Code, BatchStatementRequest};

use crate::error::BatchCallError;
use crate::retry::is_retryable;
use crate::{Item, StoreError};

/// What became of one item of a batched insert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inserted {
    /// Written: no item had the key.
    Yes,
    /// An item has the key already: merge into it instead.
    Taken,
    /// Throttled or a transient server error: worth sending again.
    Retry(String),
    /// Refused for this item alone (too large, invalid): the one-item path reports why.
    Refused(String),
}

/// The PartiQL statement inserting an item with these attribute names, values as parameters
/// in the same (sorted) order.
fn statement(table: &str, names: &[&String]) -> String {
    let fields: Vec<String> = names
        .iter()
        .map(|n| format!("'{}': ?", n.replace('\'', "''")))
        .collect();
    format!(
        "INSERT INTO \"{}\" VALUE {{{}}}",
        table.replace('"', "\"\""),
        fields.join(", ")
    )
}

fn request(table: &str, item: Item) -> Result<BatchStatementRequest, BatchCallError> {
    let mut fields: Vec<(String, _)> = item.into_iter().collect();
    fields.sort_by(|a, b| a.0.cmp(&b.0));
    let names: Vec<&String> = fields.iter().map(|(n, _)| n).collect();
    let text = statement(table, &names);
    BatchStatementRequest::builder()
        .statement(text)
        .set_parameters(Some(fields.into_iter().map(|(_, v)| v).collect()))
        .build()
        .map_err(|e| BatchCallError::request(false, "BatchExecuteStatement", e.to_string()))
}

/// Inserts `items` (at most 25, distinct keys) with one `BatchExecuteStatement`; the answer
/// has one entry per item, in order.
pub async fn insert_batch(
    client: &Client,
    table: &str,
    items: Vec<Item>,
) -> Result<Vec<Inserted>, BatchCallError> {
    let n = items.len();
    let statements = items
        .into_iter()
        .map(|i| request(table, i))
        .collect::<Result<Vec<_>, _>>()?;
    let out = client
        .batch_execute_statement()
        .set_statements(Some(statements))
        .send()
        .await
        .map_err(|e| BatchCallError {
            retryable: is_retryable(&e),
            error: StoreError::sdk("BatchExecuteStatement")(e),
        })?;
    let responses = out.responses.unwrap_or_default();
    if responses.len() != n {
        return Err(BatchCallError::request(
            true,
            "BatchExecuteStatement",
            format!("{} responses for {n} statements", responses.len()),
        ));
    }
    Ok(responses
        .into_iter()
        .map(|r| match r.error {
            None => Inserted::Yes,
            Some(e) => {
                let message = format!(
                    "{}: {}",
                    e.code.as_ref().map_or("unknown", |c| c.as_str()),
                    e.message.unwrap_or_default()
                );
                match e.code {
                    Some(Code::DuplicateItem | Code::ConditionalCheckFailed) => Inserted::Taken,
                    Some(
                        Code::ProvisionedThroughputExceeded
                        | Code::RequestLimitExceeded
                        | Code::ThrottlingError
                        | Code::InternalServerError
                        | Code::TransactionConflict,
                    ) => Inserted::Retry(message),
                    _ => Inserted::Refused(message),
                }
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_quote_the_table_and_every_attribute_name() {
        let (pk, odd) = ("pk".to_owned(), "it's".to_owned());
        assert_eq!(
            statement("tide-mark", &[&odd, &pk]),
            "INSERT INTO \"tide-mark\" VALUE {'it''s': ?, 'pk': ?}"
        );
    }
}
