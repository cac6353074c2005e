//! Partition-heat simulator: for a fleet and a burst profile, the highest writes per second
//! any partition key receives, with and without write partitioning of hot devices.
//!
//! A DynamoDB partition takes at most 1,000 write units per second; a key above that is
//! throttled however much capacity the table has. Readings go to `DEVICE#<id>` (or, partitioned,
//! `DEVICE#<id>#S<hash(ts) % N>`), so one chatty device can exceed it alone.
//!
//! A packed device (docs/decisions/0001-packed-readings.md) writes one slot item per ingest batch instead: the hot device's
//! readings of each `--window` seconds are merged into their `--slot`-second slot, and that
//! write costs the slot item's whole size (its exact encoding, plus its keys and counters) in
//! 1 KB write units, all in the second the batch ends. (It counts a slot as one item; the
//! store seals a part at 64 KB and never rewrites it, so long slots cost less than shown.)
//!
//!   cargo run -p tidemark-schema --example partition_heat -- \
//!       [--devices 1000] [--per-minute 1] [--hot-rate 2000] [--hot-seconds 60] [--shards 0]
//!       [--slot 1] [--window 1]
//!
//! `--shards 0` picks the smallest count that keeps every key under 70 % of the limit.

use std::collections::HashMap;

use std::collections::BTreeMap;

use tidemark_schema::keys::reading_pk;
use tidemark_schema::packed::{self, SlotReadings};
use tidemark_schema::{DeviceId, MetricName, SlotLen, Timestamp, partition_for};

const PARTITION_LIMIT: u64 = 1_000;

struct Profile {
    devices: u32,
    per_minute: u32,
    hot_rate: u32,
    hot_seconds: u32,
}

/// Keys, version, count and TTL of a slot item, besides its packed readings.
const SLOT_ITEM_OVERHEAD: usize = 120;

/// The hot device packed: write units per second on its one key, the highest second.
fn hottest_packed(p: &Profile, slot: SlotLen, window_s: i64) -> u64 {
    let start = Timestamp::parse_rfc3339("2026-04-20T14:00:00Z").expect("valid start");
    let metric = MetricName::new("vibration").expect("valid name");
    let mut slots: BTreeMap<Timestamp, SlotReadings> = BTreeMap::new();
    let mut per_second: HashMap<i64, u64> = HashMap::new();
    let rate = i64::from(p.hot_rate.max(1));
    for batch in 0..(i64::from(p.hot_seconds) / window_s.max(1)) {
        let mut touched = Vec::new();
        for us in (batch * window_s * 1_000_000..(batch + 1) * window_s * 1_000_000)
            .step_by((1_000_000 / rate).max(1) as usize)
        {
            let at = start.plus_micros(us).expect("in range");
            let s = slot.start_of(at);
            // A vibration-like signal: a few distinct values, as sensors quantise.
            let v = ((us / 500) % 17) as f64 * 0.25;
            slots
                .entry(s)
                .or_default()
                .insert(at, BTreeMap::from([(metric.clone(), v)]));
            if touched.last() != Some(&s) {
                touched.push(s);
            }
        }
        let second = (batch + 1) * window_s;
        for s in touched {
            let bytes = packed::encode(s, &slots[&s]).expect("encodes").len() + SLOT_ITEM_OVERHEAD;
            *per_second.entry(second).or_default() += bytes.div_ceil(1024) as u64;
        }
    }
    per_second.values().copied().max().unwrap_or(0)
}

fn arg(args: &[String], name: &str, default: u32) -> u32 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Writes per (second, partition key) over the run; returns the hottest key and its rate.
fn hottest(p: &Profile, hot_partitions: u16) -> (String, u64) {
    let start = Timestamp::parse_rfc3339("2026-04-20T14:00:00Z").expect("valid start");
    let mut per_key_second: HashMap<(i64, String), u64> = HashMap::new();
    let seconds = i64::from(p.hot_seconds.max(60));
    // The fleet: each device spreads its readings evenly over each minute.
    for d in 0..p.devices {
        let id = DeviceId::new(&format!("sensor_{d:05}")).expect("valid id");
        let interval_ms = 60_000 / i64::from(p.per_minute.max(1));
        let offset = i64::from(d) * 7_919 % interval_ms;
        let mut t = offset;
        while t < seconds * 1000 {
            *per_key_second
                .entry((t / 1000, reading_pk(&id, None)))
                .or_default() += 1;
            t += interval_ms;
        }
    }
    // The hot device: `hot_rate` readings a second, evenly spaced at sub-second offsets.
    let hot = DeviceId::new("hot_device").expect("valid id");
    for s in 0..i64::from(p.hot_seconds) {
        for i in 0..i64::from(p.hot_rate) {
            let ms = s * 1000 + i * 1000 / i64::from(p.hot_rate.max(1));
            let at = start.plus_millis(ms).expect("in range");
            let pk = reading_pk(&hot, partition_for(at, hot_partitions));
            *per_key_second.entry((s, pk)).or_default() += 1;
        }
    }
    per_key_second
        .into_iter()
        .map(|((_, k), n)| (k, n))
        .max_by_key(|(_, n)| *n)
        .unwrap_or_default()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let p = Profile {
        devices: arg(&args, "--devices", 1000),
        per_minute: arg(&args, "--per-minute", 1),
        hot_rate: arg(&args, "--hot-rate", 2000),
        hot_seconds: arg(&args, "--hot-seconds", 60),
    };
    let slot = SlotLen::new(i64::from(arg(&args, "--slot", 1))).expect("--slot divides 3600");
    let window = i64::from(arg(&args, "--window", 1).max(1));
    let mut shards = arg(&args, "--shards", 0) as u16;
    if shards == 0 {
        shards = 2;
        while shards < tidemark_schema::partition::MAX_PARTITIONS
            && hottest(&p, shards).1 * 10 > PARTITION_LIMIT * 7
        {
            shards += 1;
        }
    }
    println!(
        "fleet: {} devices x {}/min; hot device: {}/s for {} s; partition limit {} writes/s",
        p.devices, p.per_minute, p.hot_rate, p.hot_seconds, PARTITION_LIMIT
    );
    println!(
        "{:<12} {:>8} {:>26} {:>10}",
        "sharding", "shards", "hottest key", "writes/s"
    );
    for (label, n) in [("none", 1u16), ("by time", shards)] {
        let (key, rate) = hottest(&p, n);
        let verdict = if rate > PARTITION_LIMIT {
            "THROTTLED"
        } else {
            "ok"
        };
        println!("{label:<12} {n:>8} {key:>26} {rate:>10}  {verdict}");
    }
    let rate = hottest_packed(&p, slot, window);
    let verdict = if rate > PARTITION_LIMIT {
        "THROTTLED"
    } else {
        "ok"
    };
    println!(
        "{:<12} {:>8} {:>26} {rate:>10}  {verdict}   (slot {} s, ingest window {window} s; write units/s)",
        "packed",
        1,
        reading_pk(&DeviceId::new("hot_device").expect("valid id"), None),
        slot.seconds()
    );
}
