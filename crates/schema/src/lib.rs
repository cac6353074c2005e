//! The contract of Tidemark's single DynamoDB table.
//!
//! Every key, prefix, GSI name and attribute name is built and parsed here and nowhere else,
//! so no other crate can write an item another entity could mistake for its own. The crate is
//! pure (no AWS SDK): the store converts these types to items with `serde_dynamo`.

pub mod clock;
pub mod entities;
pub mod grants;
pub mod group_rules;
pub mod heartbeat;
pub mod history;
pub mod ids;
pub mod keys;
pub mod layout;
pub mod marks;
pub mod packed;
pub mod partition;
pub mod rules;
pub mod sketch;
pub mod slot_item;
pub mod table;
pub mod tags;
pub mod time;

pub use clock::Clock;
pub use entities::*;
pub use group_rules::{GroupRuleSpec, GroupSignal, parse_group_rules};
pub use history::{LayoutEpoch, LayoutHistory, LayoutHistoryError, LayoutLead, Segment};
pub use ids::{AlertId, AlertRule, DeviceId, DeviceStatus, EventId, IdError, MetricName, Severity};
pub use keys::{EntityKey, Key, KeyError};
pub use layout::{Layout, SlotLen};
pub use partition::partition_for;
pub use rules::{Aggregate, RatePer, RuleError, RuleSpec, Side, Signal};
pub use sketch::Sketch;
pub use slot_item::{
    Bitmap, ITEM_OVERHEAD_BYTES, MAX_PART_ITEM_BYTES, SlotItem, SlotItemError, SlotMetadata,
    SlotPart, item_bound, join_parts, metadata_bitmaps, metadata_bytes,
};
pub use table::{TABLE, TableDefinition};
pub use tags::{Tag, TagEpoch, TagError, TagHistory, TagHistoryError, TagKey, TagValue, Tags};
pub use time::{Bucket, Day, Period, Timestamp, TimestampError};
