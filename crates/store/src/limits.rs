//! DynamoDB's hard limits, in one place: the writers stay inside them by construction, and
//! the in-memory fakes refuse what DynamoDB would refuse, so a test meets the limit where
//! production would.

/// Actions in one `TransactWriteItems` (a larger one is a `ValidationException`, for ever).
pub const MAX_TRANSACT_ACTIONS: usize = 100;

/// An item's size, as DynamoDB counts it (attribute names and values).
pub const MAX_ITEM_BYTES: usize = tidemark_schema::table::ITEM_LIMIT_BYTES;

/// Entries one `UpdateItem` sets in a map: its expression stays well under DynamoDB's 4 KB
/// expression limit (`#m.#e99 = :e99, ` is 16 bytes an entry).
pub const MAX_UPDATE_ENTRIES: usize = 100;

/// Puts and deletes in one `BatchWriteItem`.
pub use crate::batch::MAX_BATCH_WRITE;

/// Keys in one `BatchGetItem`.
pub use crate::batch_get::MAX_KEYS as MAX_BATCH_GET_KEYS;

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

/// The size DynamoDB bills and limits `item` by: each attribute's name plus its value (a
/// string or binary its bytes, a number about one byte per two digits plus one, a map or list
/// 3 bytes plus its elements (and a map's names) plus one byte each). A close estimate, never
/// under the real size by more than a number's rounding.
pub fn item_size(item: &crate::Item) -> usize {
    item.iter().map(|(k, v)| k.len() + value_size(v)).sum()
}

fn value_size(v: &aws_sdk_dynamodb::types::AttributeValue) -> usize {
    use aws_sdk_dynamodb::types::AttributeValue as A;
    match v {
        A::S(s) => s.len(),
        A::N(n) => n.len().div_ceil(2) + 1,
        A::B(b) => b.as_ref().len(),
        A::Bool(_) | A::Null(_) => 1,
        A::M(m) => {
            3 + m
                .iter()
                .map(|(k, v)| k.len() + value_size(v) + 1)
                .sum::<usize>()
        }
        A::L(l) => 3 + l.iter().map(|v| value_size(v) + 1).sum::<usize>(),
        A::Ss(x) => x.iter().map(String::len).sum(),
        A::Ns(x) => x.iter().map(|n| n.len().div_ceil(2) + 1).sum(),
        A::Bs(x) => x.iter().map(|b| b.as_ref().len()).sum(),
        _ => 0,
    }
}
