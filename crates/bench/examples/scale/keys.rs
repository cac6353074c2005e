//! Part `keys`: the write rate on every partition key, table and indexes, across a top of
//! the hour that is also a midnight, with a threshold storm and a mass outage and return in
//! it. The real rollups role, alerts role and watchdog run over one in-memory table that
//! logs where each write lands ([`tidemark_store::write_log`]).
//!
//! One stream shard's devices are simulated: at a million devices the table's stream has
//! about `shards` shards, each feeding its own invocations of both roles, so a key that is
//! not a device's own gets, at worst, every shard's writes in the same second (their batches
//! line up at the top of the hour, when every device's first reading of the new hour
//! arrives). Shared keys are scaled by `shards`; a device's keys are not. The watchdog is
//! one function for the whole fleet: its rate is bounded by its own concurrency, not by the
//! fleet, and is modelled from its writes per decision.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use aws_lambda_events::event::dynamodb::EventRecord;
use serde::{Deserialize, Serialize};
use tidemark_aggregator::config::{AggregatorConfig, Role};
use tidemark_aggregator::memory::MemoryStore;
use tidemark_aggregator::{Aggregator, testing};
use tidemark_bench::windows;
use tidemark_schema::keys::{self, ShardName};
use tidemark_schema::{
    Clock, DeviceId, DeviceItem, DeviceStatus, HeartbeatItem, MetricName, Reading, ReadingItem,
    Severity, TagEpoch, TagHistory, TagHistoryItem, TagKey, TagValue, Tags, Threshold, Timestamp,
};
use tidemark_store::memory::MemTable;
use tidemark_store::write_log::KeyWrite;
use tidemark_watchdog::{Heartbeats, Watchdog, WatchdogConfig, WatchdogError};

/// What the simulation is given.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Setup {
    /// Devices of the one simulated stream shard.
    pub devices: u32,
    /// Stream shards at the fleet size the shared keys are scaled to.
    pub shards: u32,
    /// Modelled time of one write request (AWS: single-digit milliseconds).
    pub write_ms: f64,
    /// Sites (`site` tag values) the devices are spread over.
    pub sites: u32,
    /// `OFFLINE_AFTER_SECONDS`.
    pub window_s: u32,
}

/// Which function made a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Source {
    Ingest,
    Rollups,
    Alerts,
    Watchdog,
}

/// One partition key's busiest second.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HotKey {
    /// `table`, `GSI1`, `GSI2`.
    pub index: String,
    /// The key, with a device's id or an hour written as a pattern.
    pub pk: String,
    pub pattern: String,
    pub source: Source,
    /// A device's own key (not scaled) or shared by the fleet (scaled by shards).
    pub shared: bool,
    /// Write units in its busiest simulated second, in the simulated shard.
    pub peak_units: u64,
    /// When (simulated, RFC 3339 second).
    pub at: String,
    /// What the simulation was doing then ([`phase_of`]).
    pub phase: String,
    /// The partitions a hash spreads the key's family over (1: a key of its own); the
    /// busiest second is then the whole family's.
    pub partitions: u16,
    /// At the scaled fleet.
    pub scaled_units: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KeysPart {
    pub setup: Setup,
    pub readings: u64,
    pub batches_rollups: usize,
    pub batches_alerts: usize,
    pub watchdog_runs: usize,
    pub opened: u64,
    /// Writes and units per source, over the whole simulation.
    pub writes: BTreeMap<Source, (u64, u64)>,
    /// Per (index, key pattern, source): the hottest key of that pattern.
    pub hottest: Vec<HotKey>,
    /// The watchdog's decisions (alerts opened, devices postponed) after the warm-up.
    pub watchdog_decisions: u64,
    /// Per index and key pattern, the write units per decision of its busiest key (modelled
    /// against the watchdog's decision rate).
    pub watchdog_units_per_decision: BTreeMap<String, f64>,
    /// Decisions a second the watchdog makes at most: its concurrency over four requests.
    pub watchdog_decisions_per_second: f64,
    /// Devices one run decides at most (`max_devices`).
    pub watchdog_max_devices: usize,
}

fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).expect("a valid time")
}

fn metric(s: &str) -> MetricName {
    MetricName::new(s).expect("a metric name")
}

fn device(i: u32) -> DeviceId {
    DeviceId::new(&format!("dev-{i:06}")).expect("a device id")
}

/// A small deterministic spread (0..n) for device `i`, salt `k`.
fn spread(i: u32, k: i64, n: i64) -> i64 {
    let mut x = u64::from(i) ^ ((k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    (x % n.max(1) as u64) as i64
}

/// The simulated span: from `START` to `END`; writes before `MEASURED_FROM` are the warm-up
/// (every device registered, watched and its first hour written) and are not counted.
pub const START: &str = "2026-04-20T23:44:00Z";
pub const MEASURED_FROM: &str = "2026-04-20T23:49:00Z";
pub const END: &str = "2026-04-21T00:12:00Z";
/// The outage: 1 % of devices send nothing in this span (the watchdog opens their alerts),
/// then flush what they kept, all in the ten seconds after it.
pub const OUTAGE: (&str, &str) = ("2026-04-20T23:49:30Z", "2026-04-20T23:56:00Z");
pub const FLUSH_MS: i64 = 10_000;
/// The top of the hour, a midnight too: every device's new hour and day.
pub const CLOSE: &str = "2026-04-21T00:00:00Z";
/// The threshold storm: every tenth device reads above the threshold in this span.
pub const STORM: (&str, &str) = ("2026-04-21T00:07:00Z", "2026-04-21T00:10:00Z");

/// The part of the simulation a second belongs to (each event's effects last until the next
/// begins: the rollups role's 300 s windows deliver an hour's first readings up to five
/// minutes after it starts).
pub fn phase_of(at_ms: i64) -> &'static str {
    let t = |s| ts(s).epoch_millis();
    if at_ms < t(OUTAGE.1) {
        "steady, an outage found"
    } else if at_ms < t(OUTAGE.1) + 60_000 {
        "the outage's return"
    } else if at_ms < t(CLOSE) {
        "steady"
    } else if at_ms < t(STORM.0) {
        "the top of the hour and day"
    } else {
        "a threshold storm"
    }
}

/// The phases in order, as [`phase_of`] names them.
pub const PHASES: [&str; 5] = [
    "steady, an outage found",
    "the outage's return",
    "steady",
    "the top of the hour and day",
    "a threshold storm",
];

fn in_storm(i: u32) -> bool {
    i % 10 == 0
}

fn in_outage(i: u32) -> bool {
    i % 100 == 1
}

/// One reading: (arrival ms, stream record).
struct Arrival {
    at_ms: i64,
    record: EventRecord,
}

fn readings(setup: &Setup) -> Vec<Arrival> {
    let (start, end) = (ts(START).epoch_millis(), ts(END).epoch_millis());
    let (storm, outage) = (
        (ts(STORM.0).epoch_millis(), ts(STORM.1).epoch_millis()),
        (ts(OUTAGE.0).epoch_millis(), ts(OUTAGE.1).epoch_millis()),
    );
    let mut out = Vec::new();
    for i in 0..setup.devices {
        let phase = spread(i, 0, 60_000);
        let mut t = start + phase;
        let mut k = 0i64;
        while t < end {
            let hot = in_storm(i) && (storm.0..storm.1).contains(&t);
            let temperature = if hot {
                45.0
            } else {
                21.0 + (spread(i, k, 20) as f64) / 10.0
            };
            let metrics = BTreeMap::from([
                (metric("temperature"), temperature),
                (
                    metric("humidity"),
                    40.0 + (spread(i, k + 7, 100) as f64) / 10.0,
                ),
            ]);
            let mut arrival = t + 50 + spread(i, k + 3, 950);
            if in_outage(i) && (outage.0..outage.1).contains(&t) {
                arrival = outage.1 + spread(i, k + 5, FLUSH_MS);
            }
            let reading = Reading {
                device_id: device(i),
                timestamp: Timestamp::from_epoch_millis(t).expect("in range"),
                metrics,
                metadata: None,
            };
            let mut item = ReadingItem::new(&reading, None, 30);
            // As ingest writes it: when its record arrived, which the alerts role watches.
            item.arrived_at = Some(Timestamp::from_epoch_millis(arrival).expect("in range"));
            out.push(Arrival {
                at_ms: arrival,
                record: testing::change_record(0, None, Some(testing::image(&item))),
            });
            t += 60_000;
            k += 1;
        }
    }
    out.sort_by_key(|a| a.at_ms);
    for (n, a) in out.iter_mut().enumerate() {
        a.record.change.sequence_number = Some(format!("{:021}", n + 1));
    }
    out
}

fn tags_of(i: u32, sites: u32) -> Tags {
    Tags::new(
        [(
            TagKey::new("site").expect("a key"),
            TagValue::new(&format!("site{}", i % sites.max(1))).expect("a value"),
        )]
        .into(),
    )
    .expect("one tag")
}

/// The devices as the API registers them: the item with its tags, and the tags' history.
fn register(table: &MemTable, setup: &Setup) {
    let since = ts("2026-01-01T00:00:00Z");
    for i in 0..setup.devices {
        let d = device(i);
        let mut item = DeviceItem::new(d.clone(), DeviceStatus::Active, since);
        item.tags = tags_of(i, setup.sites);
        table.put_entity(&item).expect("a device item");
        let key = TagHistoryItem::key(&d);
        table
            .put_entity(&TagHistoryItem {
                pk: key.pk,
                sk: key.sk,
                epochs: TagHistory::from_epochs(vec![TagEpoch {
                    from: since,
                    tags: tags_of(i, setup.sites),
                }]),
                version: 1,
            })
            .expect("a tag history");
    }
}

/// The stream records of `arrivals`, as one batch.
fn stream_event(arrivals: &[Arrival]) -> aws_lambda_events::event::dynamodb::Event {
    testing::event(arrivals.iter().map(|a| a.record.clone()).collect())
}

/// Heartbeats that every shard has passed the moment they are sent (the pipeline's share of
/// a run is not what this part measures).
struct PassedAtOnce(Arc<MemTable>);

impl Heartbeats for PassedAtOnce {
    async fn send(&self, at: Timestamp) -> Result<Vec<ShardName>, WatchdogError> {
        let shard = ShardName::new("shardId-000000000000")
            .ok_or_else(|| WatchdogError::Config("a shard name".into()))?;
        self.0
            .put_entity(&HeartbeatItem::passed_at_once(&shard, at))
            .map_err(WatchdogError::Store)?;
        Ok(vec![shard])
    }
}

/// A key's pattern: a device's id, an hour and a number replaced, so keys of one kind
/// group together.
fn pattern(pk: &str) -> String {
    let mut out = String::new();
    for (n, part) in pk.split('#').enumerate() {
        if n > 0 {
            out.push('#');
        }
        let p = if part.starts_with("dev-") {
            "<device>"
        } else if part.len() >= 8 && part.starts_with("2026") {
            "<time>"
        } else if !part.is_empty() && part.chars().all(|c| c.is_ascii_digit()) {
            "<n>"
        } else if part.starts_with("site:site") {
            "<site>"
        } else {
            part
        };
        out.push_str(p);
    }
    out
}

/// The family of a key a hash spreads over partitions (`OFFLINE_WATCH#<n>`,
/// `ACTIVE#<hour>#<n>`, ...): the key without its partition number, and how many there are.
fn family(pk: &str) -> Option<(String, u16)> {
    let (stem, n) = pk.rsplit_once('#')?;
    n.parse::<u16>().ok()?;
    let partitions = if pk.starts_with(keys::OFFLINE_WATCH_PREFIX) {
        keys::OFFLINE_WATCH_PARTITIONS
    } else if pk.starts_with(keys::ACTIVE_PREFIX) {
        keys::ACTIVE_PARTITIONS
    } else if pk.starts_with(keys::OFFLINE_GSI2PK) || pk.starts_with(keys::ALERT_SEVERITY_PREFIX) {
        keys::LISTING_PARTITIONS
    } else if pk.starts_with(keys::TAG_INDEX_PREFIX) {
        keys::TAG_INDEX_PARTITIONS
    } else {
        return None;
    };
    Some((format!("{stem}#<n>"), partitions))
}

/// The busiest partition of a family at the scaled fleet, from the family's writes in a
/// second of one shard: every shard's writes in that second, spread by the hash over its
/// partitions (a mean of λ each), the busiest about three standard deviations above it.
fn busiest_partition(family_units: u64, shards: u32, partitions: u16) -> u64 {
    let lambda = family_units as f64 * f64::from(shards) / f64::from(partitions.max(1));
    (lambda + 3.0 * lambda.sqrt()).ceil() as u64
}

fn shared(w: &KeyWrite) -> bool {
    !(w.index.is_none() && w.pk.starts_with(tidemark_schema::keys::DEVICE_PREFIX))
}

/// A key (or a family of keys), in the table (`None`) or an index, and who wrote it.
type KeyOf = (Option<&'static str>, String, Source);

/// Write units per simulated second.
type PerSecond = BTreeMap<i64, u64>;

/// Units per (index, key) per simulated second, per source.
#[derive(Default)]
struct Tally {
    per_second: HashMap<KeyOf, PerSecond>,
    totals: BTreeMap<Source, (u64, u64)>,
}

impl Tally {
    /// Spreads `writes` (one invocation's, in order) from `start_ms` at `per_second` writes a
    /// second: the invocation's concurrency over a request's time.
    fn add(&mut self, source: Source, start_ms: i64, writes: Vec<KeyWrite>, per_second: f64) {
        for (k, w) in writes.into_iter().enumerate() {
            let at_ms = start_ms + (k as f64 * 1000.0 / per_second.max(1.0)) as i64;
            let t = self.totals.entry(source).or_default();
            t.0 += 1;
            t.1 += w.units;
            *self
                .per_second
                .entry((w.index, w.pk, source))
                .or_default()
                .entry(at_ms.div_euclid(1000))
                .or_default() += w.units;
        }
    }
}

pub async fn keys_part(setup: Setup) -> KeysPart {
    let table = Arc::new(MemTable::new());
    register(&table, &setup);
    let table = {
        // The log starts after the registration (the API's writes, long before).
        let t = Arc::try_unwrap(table).expect("one owner");
        Arc::new(t.with_write_log())
    };
    let _ = table.take_writes();
    let clock = Clock::fixed(ts(START));
    let role = |r: Role| {
        let mut store = MemoryStore::default();
        store.table = table.clone();
        let mut config = AggregatorConfig::new("scale").with_role(r);
        config.clock = clock.clone();
        config.offline_after_default = setup.window_s;
        config.default_thresholds = BTreeMap::from([(
            metric("temperature"),
            Threshold::new(None, Some(40.0), Severity::Warning),
        )]);
        Aggregator::with_store(store, config)
    };
    let rollups = role(Role::Rollups);
    let alerts = role(Role::Alerts);
    let mut wconfig = WatchdogConfig::new("scale", "readings");
    wconfig.offline_after_default = setup.window_s;
    wconfig.clock = clock.clone();
    wconfig.heartbeat_wait = std::time::Duration::ZERO;
    let watchdog = Watchdog::new(
        tidemark_watchdog::MemoryStore::over(table.clone()),
        PassedAtOnce(table.clone()),
        wconfig.clone(),
    );

    let arrivals = readings(&setup);
    let times: Vec<i64> = arrivals.iter().map(|a| a.at_ms).collect();
    let rollup_batches = windows::batches(&times, 300_000, 10_000);
    let alert_batches = windows::batches(&times, 1_000, 1_000);
    // Every step in time order: (delivered ms, kind, batch index).
    let mut steps: Vec<(i64, u8, usize)> = Vec::new();
    steps.extend(
        rollup_batches
            .iter()
            .enumerate()
            .map(|(n, b)| (b.closed_ms, 0, n)),
    );
    steps.extend(
        alert_batches
            .iter()
            .enumerate()
            .map(|(n, b)| (b.closed_ms, 1, n)),
    );
    let (start, end) = (ts(START).epoch_millis(), ts(END).epoch_millis());
    let runs: Vec<i64> = (start / 60_000 + 1..=end / 60_000)
        .map(|m| m * 60_000 + 7_000)
        .collect();
    steps.extend(runs.iter().enumerate().map(|(n, t)| (*t, 2, n)));
    steps.sort();

    let measured = ts(MEASURED_FROM).epoch_millis();
    let aggregator_rate = 16.0 * 1000.0 / setup.write_ms;
    // A decision: the device item, its arrivals, its layout, then the transaction.
    let decisions_per_second = wconfig.concurrency as f64 * 1000.0 / (4.0 * setup.write_ms);
    let mut tally = Tally::default();
    let mut stored = 0usize;
    let mut opened = 0u64;
    // Per run after the warm-up: its writes and its decisions.
    let mut watchdog_runs: Vec<(Vec<KeyWrite>, u64)> = Vec::new();
    let mut watchdog_decisions = 0u64;
    let mut decisions = 0u64;
    for (at_ms, kind, n) in &steps {
        let at = Timestamp::from_epoch_millis(*at_ms).expect("in range");
        clock.set(at);
        // What ingest stored by now.
        let upto = times.partition_point(|t| t <= at_ms);
        if upto > stored {
            rollups
                .store()
                .apply_records(&stream_event(&arrivals[stored..upto]));
            stored = upto;
            let w = table.take_writes();
            if *at_ms >= measured {
                tally.add(Source::Ingest, *at_ms, w, aggregator_rate);
            }
        }
        let (source, rate) = match kind {
            0 | 1 => {
                let (role, batch, source) = if *kind == 0 {
                    (&rollups, &rollup_batches[*n], Source::Rollups)
                } else {
                    (&alerts, &alert_batches[*n], Source::Alerts)
                };
                let event = stream_event(&arrivals[batch.records.clone()]);
                let (resp, _) = role.process(&event).await;
                assert!(
                    resp.batch_item_failures.is_empty(),
                    "{source:?} failed a batch"
                );
                (source, aggregator_rate)
            }
            _ => {
                let far = tokio::time::Instant::now() + std::time::Duration::from_secs(600);
                let report = watchdog.run(far).await.expect("a watchdog run");
                decisions = report.opened + report.postponed + report.lost;
                if *at_ms >= measured {
                    opened += report.opened;
                    watchdog_decisions += decisions;
                }
                (Source::Watchdog, decisions_per_second)
            }
        };
        let mut w = table.take_writes();
        // The heartbeats are the stand-in's, not the watchdog's.
        w.retain(|k| k.pk != tidemark_schema::keys::PIPELINE_PK);
        // The watchdog's writes come a decision's at a time.
        let rate = if source == Source::Watchdog {
            rate * w.len() as f64 / decisions.max(1) as f64
        } else {
            rate
        };
        if source == Source::Watchdog && *at_ms >= measured && decisions > 0 {
            watchdog_runs.push((w.clone(), decisions));
        }
        if *at_ms >= measured {
            tally.add(source, *at_ms, w, rate);
        }
    }

    // A family's keys added up per second: what scales is their sum over shards, spread
    // again over the family's partitions.
    let mut series: HashMap<KeyOf, (u16, PerSecond)> = HashMap::new();
    for ((index, pk, source), seconds) in &tally.per_second {
        let (key, partitions) = family(pk).unwrap_or((pk.clone(), 1));
        let e = series
            .entry((*index, key, *source))
            .or_insert((partitions, BTreeMap::new()));
        for (sec, units) in seconds {
            *e.1.entry(*sec).or_default() += units;
        }
    }
    // Per phase, the busiest second of each key (of each family).
    let mut hottest: BTreeMap<(&str, String, String, Source), HotKey> = BTreeMap::new();
    for ((index, pk, source), (partitions, seconds)) in &series {
        let mut busiest: BTreeMap<&str, (i64, u64)> = BTreeMap::new();
        for (sec, units) in seconds {
            let e = busiest.entry(phase_of(sec * 1000)).or_insert((*sec, 0));
            if *units > e.1 {
                *e = (*sec, *units);
            }
        }
        for (phase, (sec, units)) in busiest {
            let (sec, units) = (&sec, &units);
            let w = KeyWrite {
                index: *index,
                pk: pk.clone(),
                units: 0,
            };
            let is_shared = shared(&w);
            let scaled = if !is_shared || *source == Source::Watchdog {
                *units
            } else if *partitions > 1 {
                busiest_partition(*units, setup.shards, *partitions)
            } else {
                units * u64::from(setup.shards)
            };
            let index = index.unwrap_or("table").to_owned();
            let pat = pattern(pk);
            let hot = HotKey {
                index: index.clone(),
                pk: pk.clone(),
                pattern: pat.clone(),
                source: *source,
                shared: is_shared,
                peak_units: *units,
                at: Timestamp::from_epoch_millis(sec * 1000)
                    .expect("in range")
                    .to_string()
                    .replace(".000000Z", "Z"),
                scaled_units: scaled,
                phase: phase.to_owned(),
                partitions: *partitions,
            };
            let e = hottest
                .entry((phase, index, pat, *source))
                .or_insert(hot.clone());
            if hot.scaled_units > e.scaled_units {
                *e = hot;
            }
        }
    }
    let mut hottest: Vec<HotKey> = hottest.into_values().collect();
    hottest.sort_by_key(|h| std::cmp::Reverse(h.scaled_units));

    // Per key, units per decision in the run that decided the most (the outage's: nearly
    // every decision an alert opened, as in a large outage); the busiest key of a pattern.
    let mut per_decision: BTreeMap<String, f64> = BTreeMap::new();
    if let Some((writes, decisions)) = watchdog_runs.iter().max_by_key(|(_, d)| *d) {
        let mut per_key: BTreeMap<(Option<&'static str>, &str), u64> = BTreeMap::new();
        for w in writes {
            *per_key.entry((w.index, w.pk.as_str())).or_default() += w.units;
        }
        for ((index, pk), units) in per_key {
            let k = format!("{} {}", index.unwrap_or("table"), pattern(pk));
            let v = units as f64 / *decisions as f64;
            let e = per_decision.entry(k).or_default();
            *e = e.max(v);
        }
    }
    KeysPart {
        setup,
        readings: arrivals.len() as u64,
        batches_rollups: rollup_batches.len(),
        batches_alerts: alert_batches.len(),
        watchdog_runs: runs.len(),
        opened,
        writes: tally.totals,
        hottest,
        watchdog_decisions,
        watchdog_units_per_decision: per_decision,
        watchdog_decisions_per_second: decisions_per_second,
        watchdog_max_devices: wconfig.max_devices,
    }
}
