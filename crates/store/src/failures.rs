//! Counting a function's permanent failures on one record (docs/design.md §4, "What is
//! retried, what is set aside"). A record that fails with an error no retry cures
//! ([`crate::StoreError::is_permanent`], a panic, an invariant of ours) is counted under
//! `PIPELINE` / `FAILURES#<function>#<record>`; at [`SET_ASIDE_AFTER`] the function sets it
//! aside and its shard moves on. The count is an item, not the container's memory, so a
//! cold start (or a crash) between attempts does not start it over. It is written only when
//! something fails for good, so it costs nothing while nothing does.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use tidemark_schema::EntityKey;
use tidemark_schema::keys::FailedRecord;
use tidemark_schema::table::attr;

use crate::StoreError;
use crate::memory::MemTable;

/// Failures with the same permanent error after which a record is set aside. More than one,
/// so that an error misjudged as permanent (a deployment half rolled out, say) gets retried
/// before anything is set aside; few, so a shard waits seconds, not hours.
pub const SET_ASIDE_AFTER: u32 = 3;

/// How long a count is kept after its last failure (the count only matters while its record
/// is being retried).
pub const COUNT_TTL_SECONDS: i64 = 7 * 86_400;

/// The count's attributes: how many failures, and the last error.
pub const FAILURES_ATTR: &str = "failures";
pub const LAST_ERROR_ATTR: &str = "lastError";

/// Errors are cut to this many characters in the count (they can quote huge values).
const ERROR_CHARS: usize = 1000;

/// The version of the running function (Lambda's `AWS_LAMBDA_FUNCTION_VERSION`, `$LATEST`
/// when unpublished; none outside Lambda), recorded with what it sets aside so an operator
/// can tell which code failed on a record.
pub fn function_version() -> Option<String> {
    std::env::var("AWS_LAMBDA_FUNCTION_VERSION")
        .ok()
        .filter(|v| !v.is_empty())
}

/// The error, cut to a bounded length (errors can quote huge values).
pub fn cut(error: &str) -> String {
    match error.char_indices().nth(ERROR_CHARS) {
        Some((i, _)) => format!("{}…", &error[..i]),
        None => error.to_owned(),
    }
}

/// Adds one failure of `record` with `error` in DynamoDB and returns the count so far.
pub async fn count_in_dynamodb(
    client: &Client,
    table: &str,
    record: &FailedRecord,
    error: &str,
    ttl: i64,
) -> Result<u32, StoreError> {
    let key = EntityKey::Failures(record.clone()).key();
    let out = client
        .update_item()
        .table_name(table)
        .key(attr::PK, AttributeValue::S(key.pk))
        .key(attr::SK, AttributeValue::S(key.sk))
        .update_expression("ADD #f :one SET #e = :e, #t = :t")
        .expression_attribute_names("#f", FAILURES_ATTR)
        .expression_attribute_names("#e", LAST_ERROR_ATTR)
        .expression_attribute_names("#t", attr::TTL)
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .expression_attribute_values(":e", AttributeValue::S(cut(error)))
        .expression_attribute_values(":t", AttributeValue::N(ttl.to_string()))
        .return_values(ReturnValue::UpdatedNew)
        .send()
        .await
        .map_err(StoreError::sdk("UpdateItem"))?;
    Ok(out
        .attributes
        .as_ref()
        .and_then(|a| a.get(FAILURES_ATTR))
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse().ok())
        .unwrap_or(1))
}

/// [`count_in_dynamodb`] on the in-memory test engine: the same item, the same count.
pub fn count_in_memory(table: &MemTable, record: &FailedRecord, error: &str, ttl: i64) -> u32 {
    let key = EntityKey::Failures(record.clone()).key();
    let mut items = table.lock();
    let item = items
        .entry((key.pk.clone(), key.sk.clone()))
        .or_insert_with(|| {
            [
                (attr::PK.to_owned(), AttributeValue::S(key.pk)),
                (attr::SK.to_owned(), AttributeValue::S(key.sk)),
            ]
            .into_iter()
            .collect()
        });
    let n = item
        .get(FAILURES_ATTR)
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or(0)
        .saturating_add(1);
    item.insert(FAILURES_ATTR.into(), AttributeValue::N(n.to_string()));
    item.insert(LAST_ERROR_ATTR.into(), AttributeValue::S(cut(error)));
    item.insert(attr::TTL.into(), AttributeValue::N(ttl.to_string()));
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_per_record_and_keep_the_last_error_cut() {
        let t = MemTable::new();
        let a = FailedRecord::new("ingest", "1").unwrap();
        let b = FailedRecord::new("ingest", "2").unwrap();
        assert_eq!(count_in_memory(&t, &a, "x", 10), 1);
        assert_eq!(count_in_memory(&t, &b, "y", 10), 1);
        let long = "e".repeat(5000);
        assert_eq!(count_in_memory(&t, &a, &long, 10), 2);
        let item = t.get(&EntityKey::Failures(a).key()).unwrap();
        let kept = item[LAST_ERROR_ATTR].as_s().unwrap();
        assert!(kept.chars().count() <= ERROR_CHARS + 1);
    }
}
