//! The devices the runs are about: the standard fleet whose readings part 1 sends, and the
//! watched and offline devices part 2 seeds. Deterministic (stable pseudo-random numbers), no
//! I/O.

use std::collections::BTreeMap;

use tidemark_bench::scenario::unit;
use tidemark_schema::keys;
use tidemark_schema::{
    AlertItem, DeviceId, DeviceItem, DeviceStatus, LatestReading, MetricName, OfflineState,
    Timestamp,
};

/// A reading is sent up to this far before or after its minute.
pub const JITTER_MS: i64 = 10_000;

pub fn at_ms(ms: i64) -> Timestamp {
    Timestamp::from_epoch_millis(ms).unwrap_or(Timestamp::MIN)
}

fn device_id(s: &str) -> DeviceId {
    DeviceId::new(s).unwrap_or_else(|_| unreachable!("generated IDs are valid"))
}

pub struct FleetSend {
    pub device: u32,
    pub n: u64,
    pub at: Timestamp,
    pub arrived: Timestamp,
}

/// `devices` devices, one reading a minute each from `start` for `minutes`: a device's n-th
/// reading is at its phase + n minutes ± up to 10 s, arriving 50 ms to 1 s later. In
/// arrival order.
pub fn fleet(devices: u32, start: Timestamp, minutes: i64) -> Vec<FleetSend> {
    let start_ms = start.epoch_millis();
    let end_ms = start_ms + minutes * 60_000;
    let mut out = Vec::new();
    for d in 0..devices {
        let phase = 60_000 * i64::from(d) / i64::from(devices);
        for n in 0.. {
            let nominal = start_ms + phase + n * 60_000;
            let jitter = ((unit(u64::from(d), n as u64, 1) * 2.0 - 1.0) * JITTER_MS as f64) as i64;
            let at = (nominal + jitter).max(start_ms);
            let latency = 50 + (unit(u64::from(d), n as u64, 2) * 950.0) as i64;
            let arrived = at + latency;
            if arrived >= end_ms {
                break;
            }
            out.push(FleetSend {
                device: d,
                n: n as u64,
                at: at_ms(at),
                arrived: at_ms(arrived),
            });
        }
    }
    out.sort_by_key(|s| (s.arrived, s.device));
    out
}

pub fn fleet_device(d: u32) -> DeviceId {
    device_id(&format!("dev-{d:04}"))
}

/// Check time of the i-th watched device (in check order): spread evenly over the window
/// after `t0`.
pub fn check_of(t0: Timestamp, i: u64, watched: u64, window_s: u32) -> Timestamp {
    let span_ms = i64::from(window_s) * 1000;
    at_ms(t0.epoch_millis() + ((i as i64 + 1) * span_ms) / watched as i64)
}

fn latest(at: Timestamp, i: u64) -> LatestReading {
    let m = |s: &str| MetricName::new(s).unwrap_or_else(|_| unreachable!("valid metric name"));
    let r1 = |x: f64| (x * 10.0).round() / 10.0;
    LatestReading {
        timestamp: at,
        metrics: BTreeMap::from([
            (m("temperature"), r1(18.0 + 6.0 * unit(i, 0, 1))),
            (m("humidity"), r1(35.0 + 20.0 * unit(i, 0, 2))),
            (m("pressure"), r1(1005.0 + 15.0 * unit(i, 0, 3))),
            (m("battery"), r1(100.0 - unit(i, 0, 4))),
        ]),
    }
}

pub fn watched_id(i: u64) -> DeviceId {
    device_id(&format!("dev-{i:06}"))
}

/// The i-th watched device: its check time `check`, its last known arrival a window before.
pub fn watched_item(i: u64, check: Timestamp, window_s: u32) -> DeviceItem {
    let id = watched_id(i);
    let arrived = check
        .minus_millis(i64::from(window_s) * 1000)
        .unwrap_or(check);
    let seen = arrived.minus_millis(300).unwrap_or(arrived);
    let mut d = DeviceItem::new(
        id.clone(),
        DeviceStatus::Active,
        seen.minus_millis(30 * 86_400_000).unwrap_or(seen),
    );
    d.offline_after_seconds = Some(window_s);
    d.last_arrival_at = Some(arrived);
    d.last_seen_at = Some(seen);
    d.latest = Some(latest(seen, i));
    d.gsi2pk = Some(keys::watch_gsi2pk(&id));
    d.gsi2sk = Some(keys::watch_gsi2sk(check));
    d.version = Some(1 + i % 97);
    d
}

/// The i-th offline device and its open alert.
pub fn offline_items(i: u64, t0: Timestamp, window_s: u32) -> (DeviceItem, AlertItem) {
    let id = device_id(&format!("off-{i:06}"));
    // Silent for a while: since 1 to 48 hours.
    let since = t0
        .minus_millis(3_600_000 + (unit(i, 0, 9) * 47.0 * 3_600_000.0) as i64)
        .unwrap_or(t0);
    let mut d = DeviceItem::new(
        id.clone(),
        DeviceStatus::Active,
        since.minus_millis(30 * 86_400_000).unwrap_or(since),
    );
    d.offline_after_seconds = Some(window_s);
    d.last_arrival_at = Some(since);
    let seen = since.minus_millis(300).unwrap_or(since);
    d.last_seen_at = Some(seen);
    d.latest = Some(latest(seen, i + 1_000_000));
    d.version = Some(2);
    let alert = tidemark_watchdog::run::offline_alert(&d, window_s, since);
    d.offline = Some(OfflineState {
        alert: alert.alert_id.clone(),
        since,
        counted: Vec::new(),
    });
    d.gsi2pk = Some(keys::offline_gsi2pk(&d.device_id));
    d.gsi2sk = Some(keys::offline_gsi2sk(&id));
    (d, alert)
}
