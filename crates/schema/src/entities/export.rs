//! The Parquet export's state (`EXPORT` partition, [`crate::keys::EXPORT_PK`]).

use serde::{Deserialize, Serialize};

use crate::keys::EntityKey;
use crate::time::Timestamp;

/// `EXPORT` / `#CURSOR`: the newest hour the export schedule has exported; the next run
/// starts after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportCursorItem {
    pub pk: String,
    pub sk: String,
    pub hour: Timestamp,
}

impl ExportCursorItem {
    pub fn new(hour: Timestamp) -> Self {
        let k = EntityKey::ExportCursor.key();
        ExportCursorItem {
            pk: k.pk,
            sk: k.sk,
            hour,
        }
    }
}

/// `EXPORT` / `DIRTY#<hour>`: a reading of the hour changed after the hour closed (the rollups
/// role marks it when it applies such a change), so its export is to be written again.
/// `marks` counts the markings: the export removes the item only if no marking came after
/// the one it read, so a change during a re-export is exported by the next run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportDirtyItem {
    pub pk: String,
    pub sk: String,
    pub hour: Timestamp,
    pub marked_at: Timestamp,
    pub marks: u64,
}

/// `EXPORT` / `JOB#<hour>`: an hour being exported in slices (runs of its activity
/// partitions, [`crate::keys::ACTIVE_PARTITIONS`]; at most 64), each by a worker of its own. `generation` names this
/// export of the hour: a slice's summary counts only if it carries it, so a worker of an
/// earlier export finishing late cannot stand in for this one. `marks` is the dirty mark's
/// count it answers (0: the schedule's first export of the hour); `sent_at` when its
/// missing slices were last sent; `width` how many activity partitions each of its slices
/// covers (4 to 256, from the fleet's size); `slices` which slices have devices in the hour
/// (bit `n`: slice `n`), the only ones sent and waited for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportJobItem {
    pub pk: String,
    pub sk: String,
    pub hour: Timestamp,
    pub generation: i64,
    pub marks: u64,
    pub sent_at: Timestamp,
    pub width: u16,
    pub slices: u64,
}

impl ExportJobItem {
    pub fn new(
        hour: Timestamp,
        generation: i64,
        marks: u64,
        sent_at: Timestamp,
        (width, slices): (u16, u64),
    ) -> Self {
        let k = EntityKey::ExportJob(hour).key();
        ExportJobItem {
            pk: k.pk,
            sk: k.sk,
            hour,
            generation,
            marks,
            sent_at,
            width,
            slices,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entities::field;

    #[test]
    fn a_dirty_hours_fields_are_named_as_the_update_expressions_name_them() {
        let hour = Timestamp::parse_rfc3339("2026-04-20T07:00:00Z").unwrap();
        let k = EntityKey::ExportDirty(hour).key();
        let item = ExportDirtyItem {
            pk: k.pk,
            sk: k.sk,
            hour,
            marked_at: hour,
            marks: 2,
        };
        let v = serde_json::to_value(&item).unwrap();
        for f in [field::HOUR, field::MARKED_AT, field::MARKS] {
            assert!(v.get(f).is_some(), "{f}: {v}");
        }
    }
}
