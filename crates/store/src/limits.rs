//! DynamoDB's hard limits, in one place: the writers stay inside them by construction, and
//! the in-memory fakes refuse what DynamoDB would refuse, so a test meets the limit where
//! production would.

use aws_sdk_dynamodb::types::AttributeValue;

use crate::Item;

/// Actions in one `TransactWriteItems` (a larger one is a `ValidationException`, for ever).
pub const MAX_TRANSACT_ACTIONS: usize = 100;

/// The largest item DynamoDB stores (attribute names and values together): a bigger put is a
/// `ValidationException`, for ever.
pub const MAX_ITEM_BYTES: usize = tidemark_schema::table::ITEM_LIMIT_BYTES;

/// Entries one `UpdateItem` sets in a map: its expression stays well under DynamoDB's 4 KB
/// expression limit (`#m.#e99 = :e99, ` is 16 bytes an entry).
pub const MAX_UPDATE_ENTRIES: usize = 100;

/// Puts and deletes in one `BatchWriteItem`.
pub const MAX_BATCH_WRITE: usize = 25;

/// Keys in one `BatchGetItem`.
pub const MAX_BATCH_GET_KEYS: usize = 100;

/// What one `Query` page reads at most: a page ends with the item that brings what it read to
/// 1 MB, whatever its `Limit`, and the caller resumes from its `LastEvaluatedKey`.
pub const MAX_PAGE_BYTES: usize = 1024 * 1024;

/// The error DynamoDB gives a `BatchWriteItem` or `BatchExecuteStatement` of more than
/// [`MAX_BATCH_WRITE`] requests, as a fake returns it.
pub fn too_many_requests(operation: &'static str, requests: usize) -> crate::StoreError {
    crate::StoreError::Request {
        operation,
        message: format!(
            "ValidationException: {requests} requests; a batch takes at most {MAX_BATCH_WRITE}"
        ),
    }
}

/// The error DynamoDB gives a transaction of more than [`MAX_TRANSACT_ACTIONS`] actions, as
/// a fake returns it.
pub fn too_many_actions(actions: usize) -> crate::StoreError {
    crate::StoreError::Request {
        operation: "TransactWriteItems",
        message: format!(
            "ValidationException: {actions} actions; a transaction takes at most {MAX_TRANSACT_ACTIONS}"
        ),
    }
}

/// The error DynamoDB gives a put of an item over [`MAX_ITEM_BYTES`], as a fake returns it.
pub fn item_too_large(bytes: usize) -> crate::StoreError {
    crate::StoreError::Request {
        operation: "PutItem",
        message: format!(
            "ValidationException: Item size has exceeded the maximum allowed size \
             ({bytes} bytes; at most {MAX_ITEM_BYTES})"
        ),
    }
}

/// DynamoDB numbers stay below this magnitude (38 significant digits, exponent to 125).
pub const NUMBER_LIMIT: f64 = 1e126;
/// The smallest magnitude of a non-zero DynamoDB number.
pub const MIN_NUMBER: f64 = 1e-130;

/// The first number in `item` (at any depth) that DynamoDB cannot store, as DynamoDB's
/// `ValidationException` names it: its magnitude [`NUMBER_LIMIT`] or more (overflow) or, not
/// zero, below [`MIN_NUMBER`] (underflow).
pub fn number_out_of_range(item: &Item) -> Option<crate::StoreError> {
    fn bad(n: &str) -> Option<&'static str> {
        let v: f64 = n.trim().parse().ok()?;
        let a = v.abs();
        if !v.is_finite() || a >= NUMBER_LIMIT {
            Some("overflow")
        } else if a != 0.0 && a < MIN_NUMBER {
            Some("underflow")
        } else {
            None
        }
    }
    fn walk(v: &AttributeValue) -> Option<(&'static str, String)> {
        match v {
            AttributeValue::N(n) => bad(n).map(|w| (w, n.clone())),
            AttributeValue::Ns(ns) => ns.iter().find_map(|n| bad(n).map(|w| (w, n.clone()))),
            AttributeValue::L(l) => l.iter().find_map(walk),
            AttributeValue::M(m) => m.values().find_map(walk),
            _ => None,
        }
    }
    let (what, n) = item.values().find_map(walk)?;
    Some(crate::StoreError::Request {
        operation: "PutItem",
        message: format!(
            "ValidationException: Number {what}. Attempting to store a number with magnitude              {} than supported range ({n})",
            if what == "overflow" {
                "larger"
            } else {
                "smaller"
            }
        ),
    })
}

/// An item's size as DynamoDB counts it against [`MAX_ITEM_BYTES`] (and bills writes by):
/// the UTF-8 length of every attribute name plus the size of its value. Values follow
/// DynamoDB's published rules: strings and binaries their length, a number 1 byte per two
/// significant digits plus 1 (plus 1 for a sign), booleans and nulls 1, a list or map 3
/// bytes plus 1 per element plus its elements (a map's keys counted as names), a set its
/// elements. Numbers are the one approximation, never by more than a byte each.
pub fn item_size(item: &Item) -> usize {
    item.iter().map(|(k, v)| k.len() + value_size(v)).sum()
}

fn number_size(n: &str) -> usize {
    let mantissa = n.split(['e', 'E']).next().unwrap_or(n);
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let significant = digits
        .trim_start_matches('0')
        .trim_end_matches('0')
        .len()
        .max(1);
    significant.div_ceil(2) + 1 + usize::from(n.starts_with('-'))
}

/// The size of one attribute value (see [`item_size`]).
pub fn value_size(v: &AttributeValue) -> usize {
    match v {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => number_size(n),
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::Ss(ss) => ss.iter().map(String::len).sum(),
        AttributeValue::Ns(ns) => ns.iter().map(|n| number_size(n)).sum(),
        AttributeValue::Bs(bs) => bs.iter().map(|b| b.as_ref().len()).sum(),
        AttributeValue::L(l) => 3 + l.iter().map(|v| 1 + value_size(v)).sum::<usize>(),
        AttributeValue::M(m) => {
            3 + m
                .iter()
                .map(|(k, v)| 1 + k.len() + value_size(v))
                .sum::<usize>()
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.into())
    }
    fn n(v: &str) -> AttributeValue {
        AttributeValue::N(v.into())
    }

    #[test]
    fn item_size_counts_names_and_values_as_dynamodb_does() {
        let item: Item = HashMap::from([
            ("pk".to_owned(), s("DEVICE#a")),                  // 2 + 8
            ("version".to_owned(), n("12345")),                // 7 + 4
            ("sealed".to_owned(), AttributeValue::Bool(true)), // 6 + 1
            (
                "m".to_owned(),
                AttributeValue::M(HashMap::from([("x".to_owned(), n("-1.5"))])),
            ), // 1 + 3 + (1 + 1 + 3)
        ]);
        assert_eq!(item_size(&item), 10 + 11 + 7 + 9);
        assert_eq!(number_size("0.000120"), 2);
        assert_eq!(number_size("1e-7"), 2);
        assert_eq!(number_size("123456789012345678901"), 12);
    }

    #[test]
    fn numbers_outside_dynamodbs_range_are_found_at_any_depth() {
        let item = |v: AttributeValue| -> Item { HashMap::from([("m".to_owned(), v)]) };
        for ok in ["0", "-0", "1e-130", "9.99e125", "-1e100", "1e-100"] {
            assert!(number_out_of_range(&item(n(ok))).is_none(), "{ok}");
        }
        for bad in ["2e200", "-1e126", "2e-200", "1e-131"] {
            assert!(number_out_of_range(&item(n(bad))).is_some(), "{bad}");
        }
        let nested = AttributeValue::M(HashMap::from([(
            "t".to_owned(),
            AttributeValue::L(vec![n("1"), n("2.0000000000000003e200")]),
        )]));
        let e = number_out_of_range(&item(nested)).unwrap();
        assert!(e.to_string().contains("ValidationException"), "{e}");
    }

    /// Values at the validator's edges (±1e100, ±1e-100) are valid readings; their hour's
    /// spread (`m2`, ~1e200 or ~1e-200) is outside DynamoDB's numbers, and a rollup storing
    /// it as one was refused for good (found by tests/tests/it/never_stall).
    #[test]
    fn a_rollup_of_values_at_the_validators_edges_is_an_item_dynamodb_stores() {
        use tidemark_schema::{AggregateItem, DeviceId, Period, Stats, Timestamp};
        let at = Timestamp::parse_rfc3339("2026-04-20T14:00:00Z").unwrap();
        let device = DeviceId::new("d").unwrap();
        let key = AggregateItem::key_for(&device, Period::Hourly.bucket(at));
        for (a, b) in [(1e100, -1e100), (1e-100, -1e-100), (1e-100, 3e-100)] {
            let mut stats = Stats::at(at, a);
            stats.merge(&Stats::at(at, b));
            let m2 = stats.m2.unwrap();
            assert!(
                !(1e-130..=1e126).contains(&m2),
                "{m2}: outside DynamoDB's numbers"
            );
            let mut rollup = AggregateItem::empty(&key);
            rollup.metrics.insert("v".parse().unwrap(), stats.clone());
            let item = crate::to_item(&rollup).unwrap();
            assert!(
                number_out_of_range(&item).is_none(),
                "m2 {m2} stored as a number"
            );
            let back: AggregateItem = crate::from_item(item).unwrap();
            let read = back.metrics.values().next().unwrap().m2;
            assert_eq!(read, Some(m2), "read back as the same spread");
        }
        // Any other spread is the number it always was.
        let mut stats = Stats::at(at, 1.0);
        stats.merge(&Stats::at(at, 3.0));
        let mut rollup = AggregateItem::empty(&key);
        rollup.metrics.insert("v".parse().unwrap(), stats);
        let item = crate::to_item(&rollup).unwrap();
        let m = item["metrics"].as_m().unwrap()["v"].as_m().unwrap();
        assert_eq!(m["m2"], AttributeValue::N("2".into()));
    }

    #[test]
    fn a_large_string_is_over_the_item_limit() {
        let item: Item = HashMap::from([("d".to_owned(), s(&"x".repeat(MAX_ITEM_BYTES)))]);
        assert!(item_size(&item) > MAX_ITEM_BYTES);
    }
}
