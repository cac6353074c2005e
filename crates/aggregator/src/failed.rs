//! Work a batch left undone ([`Failed`]): the records to retry from, and the work that failed
//! for good ([`Permanent`]), which [`crate::setaside`] counts and sets aside. A panic in one
//! device's or item's work is caught as a failure of that work ([`guarded`]).

use std::collections::{BTreeMap, BTreeSet};
use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use tidemark_schema::{Bucket, DeviceId, Period, Timestamp};

use crate::AggregatorError;

/// One piece of work that failed for good.
#[derive(Debug, Clone)]
pub(crate) struct Permanent {
    /// The first record of the batch behind it.
    pub index: usize,
    pub device: Option<DeviceId>,
    /// Starts of the hours and days it touched.
    pub hours: BTreeSet<Timestamp>,
    pub days: BTreeSet<Timestamp>,
    pub kind: &'static str,
    pub error: String,
}

/// What a batch left undone: records to retry from, and work that failed for good.
#[derive(Debug, Default)]
pub(crate) struct Failed {
    /// First records behind work left undone for a transient cause (retried as ever).
    pub retry: Vec<usize>,
    /// Work that failed for good, by its first record and device.
    pub permanent: BTreeMap<(usize, Option<DeviceId>), Permanent>,
}

impl Failed {
    /// The work behind record `index` on `device`'s `buckets` failed with `e`: retried when
    /// transient, counted towards setting it aside when permanent.
    pub fn fail(
        &mut self,
        index: usize,
        e: &AggregatorError,
        device: Option<&DeviceId>,
        buckets: impl IntoIterator<Item = Bucket>,
    ) {
        if !e.is_permanent() {
            self.retry.push(index);
            return;
        }
        let p = self
            .permanent
            .entry((index, device.cloned()))
            .or_insert_with(|| Permanent {
                index,
                device: device.cloned(),
                hours: BTreeSet::new(),
                days: BTreeSet::new(),
                kind: e.kind(),
                error: e.to_string(),
            });
        for b in buckets {
            match b.period() {
                Period::Hourly => {
                    p.hours.insert(b.start());
                    p.days.insert(Period::Daily.bucket(b.start()).start());
                }
                Period::Daily => {
                    p.days.insert(b.start());
                }
            }
        }
    }
}

impl Extend<usize> for Failed {
    fn extend<T: IntoIterator<Item = usize>>(&mut self, iter: T) {
        self.retry.extend(iter);
    }
}

/// `work`, a panic in it caught and returned as [`AggregatorError::Panicked`]: one device's
/// or item's bug fails that work, not the invocation.
pub(crate) async fn guarded<T>(
    work: impl Future<Output = Result<T, AggregatorError>>,
) -> Result<T, AggregatorError> {
    match AssertUnwindSafe(work).catch_unwind().await {
        Ok(r) => r,
        Err(panic) => Err(AggregatorError::Panicked(panic_message(panic.as_ref()))),
    }
}

pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}
