//! A device's cap on distinct metric names per UTC day (docs/design.md §4, "Metric names per
//! day"): the names its readings of one day (by the reading's timestamp) were admitted with
//! live in one item, `DEVICE#<id>` / `METRICS#<day>` ([`tidemark_schema::MetricNamesItem`]),
//! at most its cap ([`tidemark_schema::DEFAULT_MAX_METRICS_PER_DAY`] unless its device item
//! sets `maxMetricsPerDay`).
//!
//! The rule ([`fit`]): a name already in the day's set always passes; new names are admitted
//! in name order while the set has room; the rest are taken out of their readings and
//! quarantined as `too_many_metrics`. The set only grows, and once a name is refused the set
//! is full, so a replayed batch gets the same answer (unless the device's cap was changed in
//! between).
//!
//! Cost ([`admit`]): the handler caches, per container, the names known to be in each
//! (device, day)'s set; only a name not in that cache costs anything: one conditional
//! `UpdateItem` per (device, day) per batch that adds the batch's new names while the set
//! stays within the cap. When that condition fails (the set is near its cap, or another
//! container added names), one strongly consistent `GetItem` reads the set and one more
//! conditional write adds the names that fit, checking the set has not changed since.

use thiserror::Error;
use tidemark_schema::{Day, DeviceId};
use tidemark_store::StoreError;

pub use crate::store::{DeviceDirectory, Names, Room};

/// How often [`admit`] reads the set again after another container changed it between its
/// read and its write, before giving up (the batch is then retried).
pub const ATTEMPTS: usize = 5;

#[derive(Debug, Error)]
pub enum CapError {
    #[error("could not read or write a device's metric names: {0}")]
    Store(#[source] StoreError),
    #[error(
        "the metric names of device {device} on {day} changed under each of {ATTEMPTS} attempts"
    )]
    Contended { device: DeviceId, day: Day },
}

/// The names of `wanted` to add to a day's set `held` under `cap`: those not held yet, in name
/// order, as many as the set has room for.
pub fn fit(held: &Names, wanted: &Names, cap: u32) -> Names {
    let room = (cap as usize).saturating_sub(held.len());
    wanted
        .iter()
        .filter(|n| !held.contains(*n))
        .take(room)
        .cloned()
        .collect()
}

/// Admits `wanted` (every name of one device's readings of one day in a batch) into the day's
/// set under `cap`, given `known`, names this container already knows are in the set.
/// Returns the names known to be in the set afterwards (to cache): a name of `wanted` outside
/// it is refused.
///
/// Costs nothing when `known` holds every wanted name, or when `known` already fills the cap
/// (the set only grows, so nothing new can fit).
pub async fn admit<D: DeviceDirectory>(
    store: &D,
    device: &DeviceId,
    day: Day,
    wanted: &Names,
    known: &Names,
    cap: u32,
) -> Result<Names, CapError> {
    let new: Names = wanted.difference(known).cloned().collect();
    if new.is_empty() || known.len() >= cap as usize {
        return Ok(known.clone());
    }
    // The set only grows, so what was known before a write is still in it, whatever the
    // write's answer holds (a directory that keeps no set answers only what it added).
    let with_known = |after: Names| -> Names { known.union(&after).cloned().collect() };
    if let Some(room) = (cap as usize).checked_sub(new.len())
        && let Some(after) = store
            .add_metric_names(device, day, &new, Room::AtMost(room))
            .await
            .map_err(CapError::Store)?
    {
        return Ok(with_known(after));
    }
    for _ in 0..ATTEMPTS {
        let held = store
            .read_metric_names(device, day)
            .await
            .map_err(CapError::Store)?;
        let take = fit(&held, wanted, cap);
        if take.is_empty() {
            return Ok(held);
        }
        if let Some(after) = store
            .add_metric_names(device, day, &take, Room::Exactly(held.len()))
            .await
            .map_err(CapError::Store)?
        {
            return Ok(with_known(after));
        }
    }
    Err(CapError::Contended {
        device: device.clone(),
        day,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, HashMap, HashSet};
    use std::sync::Mutex;
    use tidemark_schema::MetricName;

    fn names(ns: &[&str]) -> Names {
        ns.iter().map(|n| MetricName::new(n).unwrap()).collect()
    }

    fn numbered(range: std::ops::Range<usize>) -> Names {
        range
            .map(|i| MetricName::new(&format!("m{i:04}")).unwrap())
            .collect()
    }

    fn dev() -> DeviceId {
        DeviceId::new("gw_1").unwrap()
    }

    fn day() -> Day {
        Day::parse("2026-04-20").unwrap()
    }

    /// One table's day sets, counting writes and reads; `race` names are added by "another
    /// container" right after the next consistent read.
    #[derive(Default)]
    struct Table {
        sets: Mutex<HashMap<(DeviceId, Day), Names>>,
        race: Mutex<Option<Names>>,
        writes: Mutex<usize>,
        reads: Mutex<usize>,
    }

    impl DeviceDirectory for Table {
        async fn existing_devices(&self, _: &[DeviceId]) -> Result<HashSet<DeviceId>, StoreError> {
            Ok(HashSet::new())
        }

        async fn add_metric_names(
            &self,
            device: &DeviceId,
            day: Day,
            new: &Names,
            room: Room,
        ) -> Result<Option<Names>, StoreError> {
            *self.writes.lock().unwrap() += 1;
            let mut sets = self.sets.lock().unwrap();
            let held = sets.get(&(device.clone(), day)).map(BTreeSet::len);
            if !room.holds(held) {
                return Ok(None);
            }
            let set = sets.entry((device.clone(), day)).or_default();
            set.extend(new.iter().cloned());
            Ok(Some(set.clone()))
        }

        async fn read_metric_names(
            &self,
            device: &DeviceId,
            day: Day,
        ) -> Result<Names, StoreError> {
            *self.reads.lock().unwrap() += 1;
            let mut sets = self.sets.lock().unwrap();
            let held = sets
                .get(&(device.clone(), day))
                .cloned()
                .unwrap_or_default();
            if let Some(other) = self.race.lock().unwrap().take() {
                sets.entry((device.clone(), day)).or_default().extend(other);
            }
            Ok(held)
        }
    }

    async fn admitted(t: &Table, wanted: &Names, known: &Names, cap: u32) -> Names {
        let after = admit(t, &dev(), day(), wanted, known, cap).await.unwrap();
        wanted.intersection(&after).cloned().collect()
    }

    /// A directory that keeps no set (the trait's defaults): the answer to a write is only
    /// what it added.
    struct NoSet;

    impl DeviceDirectory for NoSet {
        async fn existing_devices(
            &self,
            ids: &[DeviceId],
        ) -> Result<HashSet<DeviceId>, tidemark_store::StoreError> {
            Ok(ids.iter().cloned().collect())
        }
    }

    #[tokio::test]
    async fn names_known_before_a_write_still_pass_whatever_the_write_answers() {
        // GIVEN a container that knows "h" is admitted, and a batch bringing "h" and "t"
        let after = admit(
            &NoSet,
            &dev(),
            day(),
            &names(&["h", "t"]),
            &names(&["h"]),
            1000,
        )
        .await
        .unwrap();
        // THEN both pass: the set only grows, so what was known stays known
        assert_eq!(after, names(&["h", "t"]));
    }

    #[test]
    fn held_names_pass_and_new_ones_fit_in_name_order() {
        let held = names(&["b", "d"]);
        assert_eq!(
            fit(&held, &names(&["a", "b", "c", "e"]), 4),
            names(&["a", "c"])
        );
        assert_eq!(fit(&held, &names(&["a", "b"]), 2), names(&[]));
        assert_eq!(fit(&names(&["a", "b", "c"]), &names(&["z"]), 2), names(&[]));
    }

    #[tokio::test]
    async fn a_batch_reaching_the_cap_exactly_is_admitted_with_one_write() {
        let t = Table::default();
        let wanted = numbered(0..1000);
        assert_eq!(admitted(&t, &wanted, &Names::new(), 1000).await, wanted);
        assert_eq!(
            (*t.writes.lock().unwrap(), *t.reads.lock().unwrap()),
            (1, 0)
        );
    }

    #[tokio::test]
    async fn one_name_past_the_cap_is_refused_and_the_others_pass() {
        let t = Table::default();
        admit(&t, &dev(), day(), &numbered(0..1000), &Names::new(), 1000)
            .await
            .unwrap();
        let wanted: Names = numbered(990..1001);
        let got = admitted(&t, &wanted, &Names::new(), 1000).await;
        assert_eq!(got, numbered(990..1000));
        assert_eq!(t.sets.lock().unwrap()[&(dev(), day())].len(), 1000);
    }

    #[tokio::test]
    async fn a_batch_over_the_cap_admits_the_first_names_in_name_order() {
        let t = Table::default();
        let got = admitted(&t, &numbered(0..12), &Names::new(), 10).await;
        assert_eq!(got, numbered(0..10));
    }

    #[tokio::test]
    async fn a_replay_gets_the_same_answer_from_the_stored_set_whatever_its_cache() {
        let t = Table::default();
        admit(&t, &dev(), day(), &numbered(0..8), &Names::new(), 10)
            .await
            .unwrap();
        let batch = numbered(5..14);
        let first = admitted(&t, &batch, &Names::new(), 10).await;
        assert_eq!(first, numbered(5..10));
        // Replayed by a fresh container (nothing cached) and by one that cached the set.
        assert_eq!(admitted(&t, &batch, &Names::new(), 10).await, first);
        let cached = t.sets.lock().unwrap()[&(dev(), day())].clone();
        let writes = *t.writes.lock().unwrap();
        assert_eq!(admitted(&t, &batch, &cached, 10).await, first);
        assert_eq!(
            *t.writes.lock().unwrap(),
            writes,
            "a full cached set costs no write"
        );
    }

    #[tokio::test]
    async fn names_known_to_the_cache_cost_nothing() {
        let t = Table::default();
        let known = names(&["humidity", "temperature"]);
        let after = admit(&t, &dev(), day(), &names(&["temperature"]), &known, 1000)
            .await
            .unwrap();
        assert_eq!(after, known);
        assert_eq!(
            (*t.writes.lock().unwrap(), *t.reads.lock().unwrap()),
            (0, 0)
        );
    }

    #[tokio::test]
    async fn two_containers_racing_never_pass_the_cap_and_each_answer_stands_on_replay() {
        let t = Table::default();
        admit(&t, &dev(), day(), &numbered(0..7), &Names::new(), 10)
            .await
            .unwrap();
        // Container B adds three names between container A's read and its write.
        *t.race.lock().unwrap() = Some(numbered(100..103));
        let a = numbered(50..54);
        let got_a = admitted(&t, &a, &Names::new(), 10).await;
        let set = t.sets.lock().unwrap()[&(dev(), day())].clone();
        assert_eq!(set.len(), 10, "{set:?}");
        assert!(got_a.is_empty(), "B filled the set first: {got_a:?}");
        assert!(numbered(100..103).is_subset(&set));
        // B's replay keeps its names; A's replay is refused again.
        assert_eq!(
            admitted(&t, &numbered(100..103), &Names::new(), 10).await,
            numbered(100..103)
        );
        assert!(admitted(&t, &a, &Names::new(), 10).await.is_empty());
    }

    #[tokio::test]
    async fn a_raised_cap_admits_more_of_the_same_day() {
        let t = Table::default();
        admit(&t, &dev(), day(), &numbered(0..10), &Names::new(), 10)
            .await
            .unwrap();
        assert!(
            admitted(&t, &numbered(10..12), &Names::new(), 10)
                .await
                .is_empty()
        );
        assert_eq!(
            admitted(&t, &numbered(10..12), &Names::new(), 5000).await,
            numbered(10..12)
        );
    }
}
