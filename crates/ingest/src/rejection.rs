//! Why a record cannot be stored as readings ([`Rejection`]), and the quarantine items that
//! keep it ([`quarantine_items`]): what decoding, the handler and the set-aside path share.

use std::fmt;

use tidemark_schema::{QuarantineItem, QuarantineReason, QuarantineSource};
use tidemark_store::{Item, StoreError};

/// A message longer than this is cut: messages name values, and values can be huge.
const MAX_MESSAGE_CHARS: usize = 1000;

/// Why a record cannot be stored as readings: the quarantine reason and a message for the
/// person reading the quarantine (it names the reading, the field and the rule).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reason: QuarantineReason,
    pub message: String,
}

impl Rejection {
    pub fn new(reason: QuarantineReason, message: impl Into<String>) -> Self {
        Rejection {
            reason,
            message: message.into(),
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.reason.as_str(), self.message)
    }
}

impl std::error::Error for Rejection {}

/// The items of a rejected record (or user record of an aggregate): its raw bytes, whole
/// (split over several items when too large for one, [`QuarantineItem::split`]), reason,
/// message, partition key, sequence number, arrival time, and a 14-day TTL from arrival.
/// Every field comes from the record and the rejection, none from the clock, so replays
/// rewrite the very same items. `function_version` names the code that set the record aside
/// (`unprocessable` only).
pub fn quarantine_items(
    source: QuarantineSource<'_>,
    data: &[u8],
    rejection: &Rejection,
    function_version: Option<&str>,
) -> Result<Vec<Item>, StoreError> {
    let mut message = rejection.message.clone();
    if let Some((cut, _)) = message.char_indices().nth(MAX_MESSAGE_CHARS) {
        message.truncate(cut);
        message.push('…');
    }
    let mut q = QuarantineItem::split(source, rejection.reason, message, data);
    q.record.function_version = function_version.map(str::to_owned);
    let mut items = vec![tidemark_store::to_item(&q.record)?];
    for part in &q.parts {
        items.push(tidemark_store::to_item(part)?);
    }
    Ok(items)
}
