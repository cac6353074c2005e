//! What the alerts role keeps on a device item so the watchdog can find it when it falls
//! silent: the newest arrival (`lastArrivalAt`), and the device's GSI2 watch key, whose sort key
//! is when its silence needs checking. Mostly these ride on device writes the role makes anyway;
//! moving the check time, a changed window and a return force a device write of their own.
//!
//! **The invariant**: a watched device's check time is never later than its true deadline
//! (its last arrival plus its offline window), so the watchdog never finds it late. It may be
//! earlier: the alerts role moves it only once an arrival is within a quarter window of it
//! (`arrival + window/4 >= check`, i.e. [`moved_after`] three quarters of a window after the
//! arrival it was set from), so a device sending steadily gets one key change per three
//! quarters of a window however often it sends, and the watchdog, finding a check time
//! passed, looks at the readings themselves before it decides (`crates/watchdog`).

use tidemark_schema::{AlertId, DeviceId, DeviceItem, Tag, Timestamp, keys};

use super::arrivals::Arrivals;

/// The device's GSI2 keys after the write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchKeys {
    Keep,
    /// Watched: `gsi2pk` its watch partition, `gsi2sk` the check time.
    Set {
        pk: String,
        sk: String,
    },
    /// No longer watched.
    Remove,
}

/// What one batch changes about a device's silence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upkeep {
    /// The device item must be written for it (otherwise it rides along with a write that
    /// happens anyway, or waits).
    pub must_write: bool,
    /// The newest arrival to write down (`None`: as stored).
    pub last_arrival_at: Option<Timestamp>,
    pub watch: WatchKeys,
    /// The open offline alert ends: this one, at that time.
    pub resolve: Option<(AlertId, Timestamp)>,
    /// With `resolve`: the tags whose offline counts the device leaves (those the watchdog
    /// counted it in), in the same transaction as the device item.
    pub uncount: Vec<Tag>,
}

impl Upkeep {
    pub fn none() -> Self {
        Upkeep {
            must_write: false,
            last_arrival_at: None,
            watch: WatchKeys::Keep,
            resolve: None,
            uncount: Vec::new(),
        }
    }
}

/// What the batch brings for a device.
#[derive(Debug, Clone, Copy, Default)]
pub struct Seen {
    pub arrivals: Option<Arrivals>,
    /// The newest reading timestamp in the batch.
    pub newest_reading: Option<Timestamp>,
    /// The device item's offline settings changed (the API's `PUT /devices/{id}`).
    pub settings_changed: bool,
}

/// How long after the arrival a check time was set from the alerts role moves it again for a
/// device that keeps sending: three quarters of its window. Later moves are rarer (each is a
/// device write and two index writes) but leave a device sending less often than a quarter
/// window due at the watchdog now and then, which then reads its readings and moves it.
pub fn moved_after(window: u32) -> u32 {
    window - window / 4
}

fn micros(seconds: u32) -> i64 {
    i64::from(seconds) * 1_000_000
}

fn plus(t: Timestamp, us: i64) -> Timestamp {
    t.plus_millis(us / 1000).unwrap_or(Timestamp::MAX)
}

/// The upkeep of device `id` (`dev` as stored, `None` for a device this batch registers)
/// in a fleet whose default window is `fleet_window` seconds; `now` dates a resolution that
/// no arrival dates (the window was switched off).
pub fn upkeep(
    id: &DeviceId,
    dev: Option<&DeviceItem>,
    fleet_window: u32,
    seen: Seen,
    now: Timestamp,
) -> Upkeep {
    let mut u = Upkeep::none();
    let window = match dev {
        Some(d) => d.offline_after(fleet_window),
        None => Some(fleet_window).filter(|w| *w > 0),
    };
    let stored_arrival = dev.and_then(|d| d.last_arrival_at);
    let newest = match (stored_arrival, seen.arrivals.map(|a| a.last)) {
        (Some(s), Some(a)) => Some(s.max(a)),
        (s, a) => s.or(a),
    };
    if newest != stored_arrival {
        u.last_arrival_at = newest;
    }
    let offline = dev.and_then(|d| d.offline.as_ref());
    if let Some(off) = offline {
        let back = seen.arrivals.filter(|a| a.last > off.since);
        let at = match back {
            Some(a) if a.first > off.since => Some(a.first),
            Some(a) => Some(a.last),
            None if window.is_none() => Some(dev.and_then(|d| d.updated_at).unwrap_or(now)),
            None => None,
        };
        if let Some(at) = at {
            u.resolve = Some((off.alert.clone(), at));
            u.uncount = off.counted.clone();
            u.must_write = true;
        }
    }
    let Some(w) = window else {
        if dev.is_some_and(|d| d.gsi2pk.is_some()) {
            u.watch = WatchKeys::Remove;
            u.must_write = true;
        }
        return u;
    };
    if offline.is_some() && u.resolve.is_none() {
        // Offline it stays: listed under the offline partition until it is back.
        return u;
    }
    let Some(arrived) = newest else {
        return u;
    };
    let due = plus(arrived, micros(w));
    let set = WatchKeys::Set {
        pk: keys::watch_gsi2pk(id),
        sk: keys::watch_gsi2sk(due),
    };
    let check = dev.and_then(DeviceItem::watch_check);
    let push = match check {
        None => true,
        Some(check) => {
            u.resolve.is_some()
                || seen.settings_changed
                || check > due
                || seen
                    .arrivals
                    .is_some_and(|a| plus(a.last, micros(w - moved_after(w))) >= check)
        }
    };
    if push {
        u.watch = set;
        u.must_write = true;
    }
    // A batch of old readings only (an upload from a store-and-forward buffer) is not where
    // the watchdog looks for arrivals (it reads from the newest stored reading on), so its
    // arrival is written down at once.
    let last_seen = dev.and_then(|d| d.last_seen_at);
    if seen.arrivals.is_some()
        && u.last_arrival_at.is_some()
        && seen
            .newest_reading
            .is_some_and(|n| last_seen.is_some_and(|l| n <= l))
    {
        u.must_write = true;
    }
    u
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_schema::{DeviceStatus, OfflineState};

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }
    fn id() -> DeviceId {
        DeviceId::new("d1").unwrap()
    }
    fn watched(arrived: &str, check: &str) -> DeviceItem {
        let mut d = DeviceItem::new(id(), DeviceStatus::Active, ts("2026-04-20T00:00:00Z"));
        d.offline_after_seconds = Some(300);
        d.last_arrival_at = Some(ts(arrived));
        d.last_seen_at = Some(ts(arrived));
        d.gsi2pk = Some(keys::watch_gsi2pk(&id()));
        d.gsi2sk = Some(keys::watch_gsi2sk(ts(check)));
        d
    }
    fn seen(first: &str, last: &str) -> Seen {
        Seen {
            arrivals: Some(Arrivals {
                first: ts(first),
                last: ts(last),
            }),
            newest_reading: Some(ts(last)),
            settings_changed: false,
        }
    }
    fn now() -> Timestamp {
        ts("2026-04-20T15:00:00Z")
    }

    #[test]
    fn a_steady_device_moves_its_check_time_once_per_three_quarters_of_a_window() {
        let d = watched("2026-04-20T14:00:00Z", "2026-04-20T14:05:00Z");
        let u = upkeep(
            &id(),
            Some(&d),
            0,
            seen("2026-04-20T14:03:44Z", "2026-04-20T14:03:44Z"),
            now(),
        );
        assert!(!u.must_write, "{u:?}");
        assert_eq!(u.watch, WatchKeys::Keep);
        assert_eq!(u.last_arrival_at, Some(ts("2026-04-20T14:03:44Z")));
        let u = upkeep(
            &id(),
            Some(&d),
            0,
            seen("2026-04-20T14:03:45Z", "2026-04-20T14:03:45Z"),
            now(),
        );
        assert!(u.must_write);
        assert_eq!(
            u.watch,
            WatchKeys::Set {
                pk: keys::watch_gsi2pk(&id()),
                sk: keys::watch_gsi2sk(ts("2026-04-20T14:08:45Z"))
            }
        );
    }

    #[test]
    fn the_next_arrival_resolves_an_offline_device_at_that_arrival_and_watches_it_again() {
        let mut d = watched("2026-04-20T14:00:00Z", "2026-04-20T14:05:00Z");
        let alert = AlertId::for_offline(ts("2026-04-20T14:05:00Z"));
        d.offline = Some(OfflineState {
            alert: alert.clone(),
            since: ts("2026-04-20T14:00:00Z"),
            counted: Vec::new(),
        });
        d.gsi2pk = Some(keys::offline_gsi2pk(&id()));
        d.gsi2sk = Some(keys::offline_gsi2sk(&id()));
        let u = upkeep(
            &id(),
            Some(&d),
            0,
            seen("2026-04-20T14:20:00Z", "2026-04-20T14:20:05Z"),
            now(),
        );
        assert_eq!(u.resolve, Some((alert.clone(), ts("2026-04-20T14:20:00Z"))));
        assert!(matches!(u.watch, WatchKeys::Set { .. }));
        // No arrival: it stays offline, nothing written.
        let u = upkeep(&id(), Some(&d), 0, Seen::default(), now());
        assert_eq!(u, Upkeep::none());
        // The window switched off: resolved at the change, no longer watched.
        d.offline_after_seconds = Some(0);
        d.updated_at = Some(ts("2026-04-20T14:30:00Z"));
        let u = upkeep(
            &id(),
            Some(&d),
            600,
            Seen {
                settings_changed: true,
                ..Seen::default()
            },
            now(),
        );
        assert_eq!(u.resolve, Some((alert, ts("2026-04-20T14:30:00Z"))));
        assert_eq!(u.watch, WatchKeys::Remove);
    }

    #[test]
    fn an_upload_of_old_readings_writes_its_arrival_down_at_once() {
        let d = watched("2026-04-20T14:00:00Z", "2026-04-20T14:05:00Z");
        let mut s = seen("2026-04-20T14:01:00Z", "2026-04-20T14:01:00Z");
        s.newest_reading = Some(ts("2026-04-19T09:00:00Z"));
        let u = upkeep(&id(), Some(&d), 0, s, now());
        assert!(u.must_write);
        assert_eq!(u.last_arrival_at, Some(ts("2026-04-20T14:01:00Z")));
    }

    #[test]
    fn unwatched_devices_cost_nothing_and_a_new_one_is_watched_by_the_fleet_default() {
        let mut d = watched("2026-04-20T14:00:00Z", "2026-04-20T14:05:00Z");
        d.offline_after_seconds = None;
        d.gsi2pk = None;
        d.gsi2sk = None;
        let u = upkeep(
            &id(),
            Some(&d),
            0,
            seen("2026-04-20T14:09:00Z", "2026-04-20T14:09:00Z"),
            now(),
        );
        assert!(!u.must_write);
        assert_eq!(u.watch, WatchKeys::Keep);
        let u = upkeep(
            &id(),
            None,
            120,
            seen("2026-04-20T14:09:00Z", "2026-04-20T14:09:00Z"),
            now(),
        );
        assert_eq!(
            u.watch,
            WatchKeys::Set {
                pk: keys::watch_gsi2pk(&id()),
                sk: keys::watch_gsi2sk(ts("2026-04-20T14:11:00Z"))
            }
        );
    }
}
