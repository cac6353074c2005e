//! The table definition as data. The store creates local tables from it, and a test checks
//! that `template.yaml` declares the same thing, so the two can never drift.

use crate::entities::field;

/// Attribute names of the table. Only these spellings are used anywhere.
pub mod attr {
    pub const PK: &str = "pk";
    pub const SK: &str = "sk";
    pub const GSI1PK: &str = "gsi1pk";
    pub const GSI1SK: &str = "gsi1sk";
    pub const GSI2PK: &str = "gsi2pk";
    pub const GSI2SK: &str = "gsi2sk";
    pub const TTL: &str = "ttl";
}

pub const GSI1: &str = "GSI1";
/// Devices by connectivity: watched devices by when their silence needs checking, offline
/// devices by ID (docs/design.md §2). Sparse: only devices with `offlineAfterSeconds`.
pub const GSI2: &str = "GSI2";

/// DynamoDB's limit on one item's size (names and values): a write past it is refused for
/// good, so every writer stays under it by construction.
pub const ITEM_LIMIT_BYTES: usize = 400 * 1024;

/// DynamoDB scalar attribute type of a key attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    /// `S`
    String,
}

impl KeyType {
    pub fn code(self) -> &'static str {
        match self {
            KeyType::String => "S",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyAttribute {
    pub name: &'static str,
    pub kind: KeyType,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexDefinition {
    pub name: &'static str,
    pub partition_key: KeyAttribute,
    pub sort_key: KeyAttribute,
    /// `INCLUDE` with `non_key_attributes`, or `KEYS_ONLY`: see [`TABLE`].
    pub projection: &'static str,
    pub non_key_attributes: &'static [&'static str],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableDefinition {
    pub default_name: &'static str,
    pub partition_key: KeyAttribute,
    pub sort_key: KeyAttribute,
    pub global_secondary_indexes: &'static [IndexDefinition],
    pub ttl_attribute: &'static str,
    /// The aggregator needs old images to tell a corrected reading from a new one.
    pub stream_view_type: &'static str,
}

impl TableDefinition {
    /// Every attribute that is a key of the table or an index (the AttributeDefinitions).
    pub fn key_attributes(&self) -> Vec<KeyAttribute> {
        let mut out = vec![self.partition_key, self.sort_key];
        for gsi in self.global_secondary_indexes {
            for a in [gsi.partition_key, gsi.sort_key] {
                if !out.contains(&a) {
                    out.push(a);
                }
            }
        }
        out
    }
}

const fn s(name: &'static str) -> KeyAttribute {
    KeyAttribute {
        name,
        kind: KeyType::String,
    }
}

/// Tidemark's one table (docs/design.md §2).
///
/// GSI1 projects only the attributes the fleet-wide listings return (device summary for AP2,
/// alert for AP6), not `lastSeenAt`/`latest`, which the aggregator rewrites on every batch:
/// with an `ALL` projection each of those device updates costs a second write unit for the
/// index copy (measured with DynamoDB's ConsumedCapacity), with `INCLUDE` it costs none.
pub const TABLE: TableDefinition = TableDefinition {
    default_name: "tidemark",
    partition_key: s(attr::PK),
    sort_key: s(attr::SK),
    global_secondary_indexes: &[
        IndexDefinition {
            name: GSI1,
            partition_key: s(attr::GSI1PK),
            sort_key: s(attr::GSI1SK),
            projection: "INCLUDE",
            non_key_attributes: &[
                // device summary (AP2)
                field::DEVICE_ID,
                field::NAME,
                field::TYPE,
                field::STATUS,
                field::LOCATION,
                field::FIRMWARE,
                field::CREATED_AT,
                field::UPDATED_AT,
                // alert (AP6)
                field::ALERT_ID,
                field::METRIC,
                field::RULE,
                field::SEVERITY,
                field::STATE,
                field::MESSAGE,
                field::VALUE,
                field::THRESHOLD,
                field::BREACH_COUNT,
                field::OPENED_AT,
                field::LAST_BREACH_AT,
                field::ACKNOWLEDGED_AT,
                field::SNOOZED_UNTIL,
            ],
        },
        IndexDefinition {
            name: GSI2,
            partition_key: s(attr::GSI2PK),
            sort_key: s(attr::GSI2SK),
            // Keys only: the alerts role moves a watched device's sort key as it arrives, and a
            // keys-only copy is the smallest index write; the watchdog and the offline listing
            // read the device items they find. An hourly rollup item's entry (its hour's
            // activity partition) is written once: its rewrites leave the keys as they are.
            projection: "KEYS_ONLY",
            non_key_attributes: &[],
        },
    ],
    ttl_attribute: attr::TTL,
    stream_view_type: "NEW_AND_OLD_IMAGES",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_attributes_are_the_six_string_keys() {
        let names: Vec<_> = TABLE.key_attributes().iter().map(|a| a.name).collect();
        assert_eq!(names, ["pk", "sk", "gsi1pk", "gsi1sk", "gsi2pk", "gsi2sk"]);
    }
}
