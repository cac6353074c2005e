//! Writing an item that must never erase what an earlier write stored under the same key.
//!
//! Readings are identified by device and timestamp only, and gateways often send one record
//! per sensor with the same timestamp. A plain put would let the second record erase the first
//! one's metrics, so a reading is written as a *merge*: the entries of one map attribute (the
//! metrics) are merged key by key, the later write winning for a key both carry; every other
//! attribute is replaced by the later write. An exact resend moves no value but writes its
//! later `arrivedAt` (an arrival, docs/design.md §4): the rollups ignore a MODIFY whose
//! metrics are unchanged, the alerts role counts the arrival. A replay of the same record
//! (same arrival) writes nothing, after the failed condition.
//!
//! On DynamoDB, per item:
//! 1. `PutItem` if no item has the key (`attribute_not_exists(pk)`): the common case, one
//!    write unit, the same as a blind put;
//! 2. otherwise `UpdateItem` setting each map entry by its path, on the condition that the map
//!    exists as a map — atomic, so two writers of one key cannot lose each other's entries;
//! 3. if it does not (the item expired in between, or it is not ours: a foreign or corrupt
//!    item under a reading's key), `PutItem` replacing it, on the condition that it still has
//!    no such map; if that fails, someone wrote a proper item meanwhile: back to step 1.
//!
//! The batch writer tries step 1 for 25 items a call first ([`crate::write::insert`]); only the items
//! whose key is taken come here.

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use tidemark_schema::table::attr;

use crate::Item;
use crate::StoreError;
use crate::error::BatchCallError;
use crate::limits::{MAX_ITEM_BYTES, MAX_UPDATE_ENTRIES, item_size};
use crate::retry::is_retryable;

/// What a merge did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merged {
    /// No item had the key: written whole.
    Inserted,
    /// Merged into the item that was there.
    Merged,
    /// The item there already held everything: nothing written.
    Unchanged,
    /// An item without the map (expired meanwhile, foreign or corrupt) was replaced.
    Replaced,
}

/// Rounds of put-then-update before a key is given up as contended (and retried later).
const MAX_ROUNDS: usize = 4;

/// `later` merged into `earlier`: entries of the `map_attr` map merge key by key (`later`
/// wins), every other attribute of `later` replaces the one of `earlier`.
pub fn merge_items(earlier: &Item, later: &Item, map_attr: &str) -> Item {
    let mut out = earlier.clone();
    for (name, value) in later {
        match (name == map_attr, out.get_mut(name), value) {
            (true, Some(AttributeValue::M(old)), AttributeValue::M(new)) => {
                old.extend(new.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            _ => {
                out.insert(name.clone(), value.clone());
            }
        }
    }
    out
}

/// True when writing `item` as a merge over `existing` would change nothing.
pub fn merge_is_noop(existing: &Item, item: &Item, map_attr: &str) -> bool {
    merge_items(existing, item, map_attr) == *existing
}

/// Writes `item` into `table` as a merge (see the module docs). Errors say whether a retry
/// may succeed; a key still contended after a few rounds is a retryable error.
pub async fn merge_item(
    client: &Client,
    table: &str,
    item: Item,
    map_attr: &str,
) -> Result<Merged, BatchCallError> {
    for _ in 0..MAX_ROUNDS {
        // 1. Insert if new.
        let put = client
            .put_item()
            .table_name(table)
            .set_item(Some(item.clone()))
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", attr::PK)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let existing = match put {
            Ok(_) => return Ok(Merged::Inserted),
            Err(e) => {
                let retryable = is_retryable(&e);
                let store = StoreError::sdk("PutItem")(e);
                if !store.is_conditional_check_failed() {
                    return Err(BatchCallError {
                        retryable,
                        error: store,
                    });
                }
                match store.dynamo() {
                    Some(aws_sdk_dynamodb::Error::ConditionalCheckFailedException(c)) => {
                        c.item().cloned()
                    }
                    _ => None,
                }
            }
        };
        if let Some(old) = &existing {
            let merged = merge_items(old, &item, map_attr);
            if merged == *old {
                return Ok(Merged::Unchanged);
            }
            // Refused before any entry is written, so a reading is never stored in part.
            let bytes = item_size(&merged);
            if bytes > MAX_ITEM_BYTES {
                let key = format!("{:?}/{:?}", item.get(attr::PK), item.get(attr::SK));
                return Err(BatchCallError {
                    retryable: false,
                    error: StoreError::TooLarge { key, bytes },
                });
            }
        }
        // 2. Merge into the item that is there.
        match update_entries(client, table, &item, map_attr).await {
            Ok(true) => return Ok(Merged::Merged),
            Ok(false) => {}
            Err(e) => return Err(e),
        }
        // 3. There is no map to merge into: replace, unless a proper item appeared meanwhile.
        let replace = client
            .put_item()
            .table_name(table)
            .set_item(Some(item.clone()))
            .condition_expression("NOT attribute_type(#m, :map)")
            .expression_attribute_names("#m", map_attr)
            .expression_attribute_values(":map", AttributeValue::S("M".into()))
            .send()
            .await;
        match replace {
            Ok(_) => {
                tracing::warn!(
                    pk = ?item.get(attr::PK),
                    sk = ?item.get(attr::SK),
                    "replaced an item without a {map_attr} map under a reading key"
                );
                return Ok(Merged::Replaced);
            }
            Err(e) => {
                let retryable = is_retryable(&e);
                let store = StoreError::sdk("PutItem")(e);
                if !store.is_conditional_check_failed() {
                    return Err(BatchCallError {
                        retryable,
                        error: store,
                    });
                }
            }
        }
    }
    Err(BatchCallError::request(
        true,
        "UpdateItem",
        format!("key still contended after {MAX_ROUNDS} rounds"),
    ))
}

/// `UpdateItem` setting every map entry by path and every other attribute whole, if the map
/// exists as a map. `Ok(false)`: it does not.
async fn update_entries(
    client: &Client,
    table: &str,
    item: &Item,
    map_attr: &str,
) -> Result<bool, BatchCallError> {
    let mut key = HashMap::new();
    let mut names = HashMap::from([("#m".to_owned(), map_attr.to_owned())]);
    let mut values = HashMap::from([(":map".to_owned(), AttributeValue::S("M".into()))]);
    let mut sets = Vec::new();
    let mut entries: Vec<(&String, &AttributeValue)> = Vec::new();
    for (i, (name, value)) in item.iter().enumerate() {
        if name == attr::PK || name == attr::SK {
            key.insert(name.clone(), value.clone());
        } else if name == map_attr {
            if let AttributeValue::M(m) = value {
                entries.extend(m.iter());
            }
        } else {
            names.insert(format!("#a{i}"), name.clone());
            values.insert(format!(":a{i}"), value.clone());
            sets.push(format!("#a{i} = :a{i}"));
        }
    }
    // Map entries go [`MAX_UPDATE_ENTRIES`] an update, the other attributes with the first:
    // each update sets entries by path, so a retry after a partial run ends the same.
    let mut chunks = entries.chunks(MAX_UPDATE_ENTRIES);
    let first = chunks.next().unwrap_or(&[]);
    if !update_chunk(client, table, &key, names, values, sets, first).await? {
        return Ok(false);
    }
    for chunk in chunks {
        let names = HashMap::from([("#m".to_owned(), map_attr.to_owned())]);
        let values = HashMap::from([(":map".to_owned(), AttributeValue::S("M".into()))]);
        if !update_chunk(client, table, &key, names, values, Vec::new(), chunk).await? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// One `UpdateItem` of [`update_entries`]: `sets` plus `entries` of the map.
async fn update_chunk(
    client: &Client,
    table: &str,
    key: &HashMap<String, AttributeValue>,
    mut names: HashMap<String, String>,
    mut values: HashMap<String, AttributeValue>,
    mut sets: Vec<String>,
    entries: &[(&String, &AttributeValue)],
) -> Result<bool, BatchCallError> {
    for (j, (k, v)) in entries.iter().enumerate() {
        names.insert(format!("#e{j}"), (*k).clone());
        values.insert(format!(":e{j}"), (*v).clone());
        sets.push(format!("#m.#e{j} = :e{j}"));
    }
    if sets.is_empty() {
        return Ok(true);
    }
    let out = client
        .update_item()
        .table_name(table)
        .set_key(Some(key.clone()))
        .update_expression(format!("SET {}", sets.join(", ")))
        .condition_expression("attribute_type(#m, :map)")
        .set_expression_attribute_names(Some(names))
        .set_expression_attribute_values(Some(values))
        .send()
        .await;
    match out {
        Ok(_) => Ok(true),
        Err(e) => {
            let retryable = is_retryable(&e);
            let store = StoreError::sdk("UpdateItem")(e);
            if store.is_conditional_check_failed() {
                Ok(false)
            } else {
                Err(BatchCallError {
                    retryable,
                    error: store,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(v: &str) -> AttributeValue {
        AttributeValue::N(v.into())
    }

    fn reading(metrics: &[(&str, &str)], extra: &[(&str, AttributeValue)]) -> Item {
        let mut item = HashMap::from([
            ("pk".to_owned(), AttributeValue::S("DEVICE#d".into())),
            ("sk".to_owned(), AttributeValue::S("READING#t".into())),
            (
                "metrics".to_owned(),
                AttributeValue::M(
                    metrics
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), n(v)))
                        .collect(),
                ),
            ),
        ]);
        item.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
        item
    }

    #[test]
    fn merging_keeps_every_metric_and_the_later_value_of_a_metric_both_carry() {
        let a = reading(&[("temperature", "22.4"), ("battery", "87")], &[]);
        let b = reading(&[("humidity", "45"), ("battery", "86")], &[("ttl", n("9"))]);
        let m = merge_items(&a, &b, "metrics");
        assert_eq!(
            m["metrics"],
            reading(
                &[
                    ("temperature", "22.4"),
                    ("humidity", "45"),
                    ("battery", "86")
                ],
                &[]
            )["metrics"]
        );
        assert_eq!(m["ttl"], n("9"));
    }

    #[test]
    fn a_resend_or_a_subset_is_a_noop_and_anything_new_is_not() {
        let stored = reading(&[("temperature", "22.4"), ("humidity", "45")], &[]);
        assert!(merge_is_noop(&stored, &stored, "metrics"));
        assert!(merge_is_noop(
            &stored,
            &reading(&[("humidity", "45")], &[]),
            "metrics"
        ));
        assert!(!merge_is_noop(
            &stored,
            &reading(&[("humidity", "46")], &[]),
            "metrics"
        ));
        assert!(!merge_is_noop(
            &stored,
            &reading(&[("pressure", "1013")], &[]),
            "metrics"
        ));
    }
}
