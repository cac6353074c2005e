//! `tidemark-admin count-members`: sets a group's member counts (`TAG#<tag>#<n>` / `#COUNT`,
//! `members`) to the number of entries each partition of its tag index holds.
//!
//! `PUT /devices/{id}` keeps the counts exact from the moment they exist (each entry created
//! or deleted moves its partition's count in the same transaction), so this is for a table
//! whose devices were tagged before the counts existed: until it runs, their groups count no
//! members, and a group rule's `offlineFraction` reads 0 (or, once some are offline, 1). It
//! reads each partition's entries (a Query that counts them) and writes each count; a
//! registration of the group landing between the two is miscounted by one, so run it when the
//! group's registrations are quiet, or twice.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, Select};
use tidemark_schema::keys::{self, DEVICE_PREFIX};
use tidemark_schema::table::attr;
use tidemark_schema::{Tag, TagCountItem, field};
use tidemark_store::batch_get::key_item;

use crate::AdminError;

/// One partition's count, before and after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recounted {
    pub partition: u16,
    /// What the count item said (0 when there was none).
    pub was: i64,
    pub now: i64,
}

/// Counts `tag`'s index entries partition by partition and writes each count.
pub async fn count_members(
    client: &Client,
    table: &str,
    tag: &Tag,
) -> Result<Vec<Recounted>, AdminError> {
    let mut out = Vec::new();
    for n in 0..keys::TAG_INDEX_PARTITIONS {
        let entries = entries(client, table, tag, n).await?;
        let key = TagCountItem::key(tag, n);
        let old = client
            .update_item()
            .table_name(table)
            .set_key(Some(key_item(&key)))
            .update_expression("SET #m = :m")
            .expression_attribute_names("#m", field::MEMBERS)
            .expression_attribute_values(":m", AttributeValue::N(entries.to_string()))
            .return_values(ReturnValue::AllOld)
            .send()
            .await
            .map_err(|e| AdminError::dynamodb("UpdateItem", e))?;
        let was = old
            .attributes()
            .and_then(|a| a.get(field::MEMBERS))
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        out.push(Recounted {
            partition: n,
            was,
            now: entries,
        });
    }
    Ok(out)
}

/// How many devices partition `n` of `tag`'s index lists (a counting Query, strongly
/// consistent, page after page).
async fn entries(client: &Client, table: &str, tag: &Tag, n: u16) -> Result<i64, AdminError> {
    let mut count = 0i64;
    let mut start = None;
    loop {
        let page = client
            .query()
            .table_name(table)
            .consistent_read(true)
            .select(Select::Count)
            .key_condition_expression("#pk = :pk AND begins_with(#sk, :dev)")
            .expression_attribute_names("#pk", attr::PK)
            .expression_attribute_names("#sk", attr::SK)
            .expression_attribute_values(":pk", AttributeValue::S(keys::tag_index_pk(tag, n)))
            .expression_attribute_values(":dev", AttributeValue::S(DEVICE_PREFIX.to_owned()))
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| AdminError::dynamodb("Query", e))?;
        count += i64::from(page.count());
        start = page.last_evaluated_key().cloned();
        if start.is_none() {
            return Ok(count);
        }
    }
}
