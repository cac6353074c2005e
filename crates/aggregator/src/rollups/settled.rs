//! What the rollups role takes as settled: when a bucket counts as closed ([`closed`], the
//! role's one notion of it), and what this container already knows it need not look at again
//! (the days before touched days seen closed, [`SettledDays`]; each device's hours with no
//! placeholder left, [`SettledHours`]).

use std::collections::{HashMap, HashSet};

use tidemark_schema::{Bucket, DeviceId, Timestamp, bucket_is_open};

/// How much earlier than a bucket's close ([`tidemark_schema::closes_at`]) this role already
/// treats it as closed, so that two invocations whose clocks differ by less than this never
/// both leave it to the other.
pub const CLOSE_MARGIN_MS: i64 = 60_000;

/// Whether the rollups role treats `bucket` (an hour or a day) as closed at `now`: from
/// [`CLOSE_MARGIN_MS`] before its close on. The role's one notion of "closed": an hour's
/// write (placeholder or rollup from the table), a day's write, the placeholder hours a day's
/// fold closes first, the pending hours and days a device's batch closes, and the late hours
/// marked for the export all ask it, so a day is never written closed over an hour still
/// taken as open (docs/design.md §5).
pub(crate) fn closed(bucket: Bucket, now: Timestamp) -> bool {
    !bucket_is_open(bucket, now.plus_millis(CLOSE_MARGIN_MS).unwrap_or(now))
}

/// The days before touched days that this container has seen closed (folded, or never a
/// placeholder), so its later batches do not read them again: a device's day is looked at
/// once per container, not once per batch. Forgotten whole past [`SETTLED_DAYS_MAX`]
/// entries; forgetting only costs a read.
#[derive(Debug, Default)]
pub struct SettledDays(std::sync::Mutex<HashSet<(DeviceId, Bucket)>>);

const SETTLED_DAYS_MAX: usize = 100_000;

impl SettledDays {
    pub(crate) fn contains(&self, day: &(DeviceId, Bucket)) -> bool {
        self.0.lock().is_ok_and(|s| s.contains(day))
    }

    pub(crate) fn insert(&self, day: (DeviceId, Bucket)) {
        if let Ok(mut s) = self.0.lock() {
            if s.len() >= SETTLED_DAYS_MAX {
                s.clear();
            }
            s.insert(day);
        }
    }
}

/// Per device, the hour before which this container found no placeholder left to close, so
/// its later batches in that hour do not look again. Forgotten whole past
/// [`SETTLED_HOURS_MAX`] devices; forgetting only costs a query.
#[derive(Debug, Default)]
pub struct SettledHours(std::sync::Mutex<HashMap<DeviceId, Bucket>>);

pub const SETTLED_HOURS_MAX: usize = 100_000;

impl SettledHours {
    pub(crate) fn covers(&self, device: &DeviceId, hour: Bucket) -> bool {
        self.0
            .lock()
            .is_ok_and(|s| s.get(device).is_some_and(|b| b.start() >= hour.start()))
    }

    pub(crate) fn insert(&self, device: DeviceId, hour: Bucket) {
        if let Ok(mut s) = self.0.lock() {
            if s.len() >= SETTLED_HOURS_MAX {
                s.clear();
            }
            s.insert(device, hour);
        }
    }
}
