//! Partition-heat simulator: for a fleet and a burst profile, the highest writes per second
//! any partition key receives, with and without write sharding of hot devices.
//!
//! A DynamoDB partition takes at most 1,000 write units per second; a key above that is
//! throttled however much capacity the table has. Readings go to `DEVICE#<id>` (or, sharded,
//! `DEVICE#<id>#S<hash(ts) % N>`), so one chatty device can exceed it alone.
//!
//!   cargo run -p tidemark-schema --example partition_heat -- \
//!       [--devices 1000] [--per-minute 1] [--hot-rate 2000] [--hot-seconds 60] [--shards 0]
//!
//! `--shards 0` picks the smallest count that keeps every key under 70 % of the limit.

use std::collections::HashMap;

use tidemark_schema::keys::reading_pk;
use tidemark_schema::{DeviceId, Timestamp, shard_for};

const PARTITION_LIMIT: u64 = 1_000;

struct Profile {
    devices: u32,
    per_minute: u32,
    hot_rate: u32,
    hot_seconds: u32,
}

fn arg(args: &[String], name: &str, default: u32) -> u32 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Writes per (second, partition key) over the run; returns the hottest key and its rate.
fn hottest(p: &Profile, hot_shards: u16) -> (String, u64) {
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
            let pk = reading_pk(&hot, shard_for(at, hot_shards));
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
    let mut shards = arg(&args, "--shards", 0) as u16;
    if shards == 0 {
        shards = 2;
        while shards < tidemark_schema::shard::MAX_SHARDS
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
}
