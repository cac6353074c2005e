//! What a case is: steps of a clock that crosses hour and midnight closes, each putting
//! records into the readings stream, changing a device's layout, or letting ingest or one of
//! the aggregator's roles take a batch. Records are described here, relative to the clock of
//! the step that puts them; the driver turns them into bytes ([`super::driver`]).

use proptest::prelude::*;
use tidemark_schema::MetricName;

use super::Known;

/// The devices whose readings are checked: the last has the longest ID the validator allows.
pub const DEVICES: usize = 4;

pub fn device_id(i: usize) -> String {
    match i {
        0..3 => format!("dev-{i}"),
        _ => format!("gw.{}", "x".repeat(tidemark_schema::DeviceId::MAX_LEN - 3)),
    }
}

/// The device of hostile records: whatever of it is stored is never checked.
pub const EVIL: &str = "evil";

/// The metric alert states are checked on (default threshold: max [`LIMIT`]).
pub const ALERTED: &str = "t";
pub const LIMIT: f64 = 20.0;

/// The longest metric name the validator allows.
pub fn longest_metric() -> String {
    format!("Z{}", "z9_".repeat(21))
}

/// Values at the validator's edges: every one of them valid.
pub const EDGE_VALUES: [f64; 6] = [1e100, -1e100, 1e-100, -1e-100, 0.0, -0.0];
/// Values just past them: every one of them invalid.
pub const PAST_EDGE_VALUES: [f64; 4] = [1.000_000_1e100, -1.000_000_1e100, 9.9e-101, 5e-324];

/// One case: the clock starts at [`super::driver::base`] and each step may move it on.
#[derive(Debug, Clone)]
pub struct Case {
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone)]
pub struct Step {
    /// Where the clock moves before the action (see [`Tick`]).
    pub tick: Tick,
    pub action: Action,
}

/// How the clock moves: on by some seconds, or to a moment just before or after a close.
#[derive(Debug, Clone, Copy)]
pub enum Tick {
    Stay,
    By(i64),
    /// To the next hour's start plus this many seconds (negative: before it).
    HourEdge(i64),
    /// To the next midnight plus this many seconds (840..900: the last minute of a day's close grace).
    MidnightEdge(i64),
}

#[derive(Debug, Clone)]
pub enum Action {
    /// One `PutRecords`: records into the stream, in order.
    Put(Vec<Rec>),
    /// A device's layout changes (`device` [`DEVICES`]: the fleet's default), planned at the
    /// step's clock as the API plans it, taking effect `delay` seconds after the earliest
    /// instant the lead time allows.
    Layout {
        device: usize,
        layout: LayoutKind,
        delay: i64,
    },
    /// Ingest takes up to `batch` records from its checkpoint, `replay` records before it
    /// again first (a retried invocation, a timeout after the writes).
    Ingest { batch: usize, replay: usize },
    /// One role (0: rollups, 1: alerts) takes up to `batch` stream records, `replay` before
    /// its checkpoint again first.
    Aggregate {
        role: usize,
        batch: usize,
        replay: usize,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutKind {
    Single { shards: u16 },
    Packed { slot: i64, shards: u16 },
}

/// A reading's time, relative to the clock of its step.
#[derive(Debug, Clone, Copy)]
pub enum When {
    /// This many milliseconds before now (negative: ahead of it, at most the 300 s ingest
    /// accepts).
    Ago(i64),
    /// An hour start (`hours` back from now's hour) plus `ms` (never after now + 300 s).
    HourEdge { hours: i64, ms: i64 },
    /// The device's newest planned layout change plus `ms` (now, without one).
    LayoutEdge { ms: i64 },
}

/// One reading: a device, a time, metrics (an empty list: a keep-alive).
#[derive(Debug, Clone)]
pub struct Read {
    pub device: usize,
    pub when: When,
    pub metrics: Vec<(String, f64)>,
    /// The time as epoch milliseconds rather than RFC 3339.
    pub millis: bool,
}

#[derive(Debug, Clone)]
pub enum Rec {
    /// A JSON reading.
    One(Read),
    /// A store-and-forward upload: one device's readings in one JSON array.
    Upload(Vec<Read>),
    /// A SenML pack of one reading (whole seconds, absolute time).
    SenMl(Read),
    /// An earlier record of the case again, byte for byte (index into the records put so
    /// far, modulo their number).
    Resend(usize),
    /// A reading at the device and time of an earlier reading of the case, with new values.
    Correction {
        of: usize,
        metrics: Vec<(String, f64)>,
    },
    /// A KPL aggregate of these user records (each under the partition key of its device).
    Kpl(Vec<Rec>),
    /// The watchdog's heartbeat, `ms` before its arrival (under the reserved key).
    Heartbeat {
        ms: i64,
    },
    Hostile(Hostile),
}

/// Records a hostile or unlucky producer sends: none holds a reading the oracle counts.
#[derive(Debug, Clone)]
pub enum Hostile {
    /// Not JSON.
    Garbage { len: usize },
    /// A reading with a metric just past the validator's edges.
    PastEdge(Read, usize),
    /// Near Kinesis' 1 MiB record limit, not JSON (or, when `json`, a string too long to
    /// be a device ID).
    Maximal { json: bool },
    /// A KPL aggregate whose partition key is `key_len` long (over Kinesis' 256), with an
    /// explicit hash key of `hash_digits` digits when given (over 38), holding a user
    /// record that is not JSON and one of [`EVIL`]'s readings.
    LongKeys {
        key_len: usize,
        hash_digits: Option<usize>,
        users: usize,
    },
    /// `{"tidemarkHeartbeat":"2099-01-01T00:00:00Z"}` under an ordinary key.
    ForgedHeartbeat,
    /// A KPL aggregate of `users` tiny user records (past the 65,536 a KPL aggregate holds)
    /// sharing one partition key of `key_len` characters (once a copy of the key per user record).
    ManyUsers { users: usize, key_len: usize },
}

fn metric_name() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => Just(ALERTED.to_owned()),
        3 => Just("h".to_owned()),
        1 => Just("a".to_owned()),
    ]
}

/// Quarter values (their sums are exact in any order), around the alert limit.
fn value() -> impl Strategy<Value = f64> {
    (-120..=160i32).prop_map(|q| f64::from(q) / 4.0)
}

fn metrics(max: usize) -> impl Strategy<Value = Vec<(String, f64)>> {
    prop::collection::vec((metric_name(), value()), 1..=max).prop_map(|v| {
        let mut seen = std::collections::BTreeSet::new();
        v.into_iter()
            .filter(|(n, _)| seen.insert(n.clone()))
            .collect()
    })
}

/// Metrics at the validator's edges: the longest name, edge values, or a gateway's 32.
fn edge_metrics() -> impl Strategy<Value = Vec<(String, f64)>> {
    prop_oneof![
        prop::sample::select(EDGE_VALUES.to_vec()).prop_map(|v| vec![(longest_metric(), v)]),
        (1..=32usize, value()).prop_map(|(n, v)| {
            (0..n)
                .map(|i| (format!("g{i}"), v + i as f64))
                .collect::<Vec<_>>()
        }),
        Just(
            (0..32)
                .map(|i| {
                    let mut name = longest_metric();
                    name.truncate(MetricName::MAX_LEN - 2);
                    (format!("{name}{i:02}"), f64::from(i))
                })
                .collect()
        ),
    ]
}

fn when(layout_edges: bool) -> impl Strategy<Value = When> {
    let edge = if layout_edges { 3 } else { 0 };
    prop_oneof![
        5 => (0..60_000i64).prop_map(When::Ago),
        3 => (60_000..7_200_000i64).prop_map(When::Ago),
        1 => (-300_000..0i64).prop_map(When::Ago),
        3 => (0..3i64, prop_oneof![Just(0i64), Just(-1), Just(1), -5_000..5_000i64])
            .prop_map(|(hours, ms)| When::HourEdge { hours, ms }),
        edge => (-400_000..400_000i64).prop_map(|ms| When::LayoutEdge { ms }),
    ]
}

fn read(device: impl Strategy<Value = usize> + 'static, known: Known) -> BoxedStrategy<Read> {
    let keep_alive = if known.keep_alives { 1 } else { 0 };
    (
        device,
        when(true),
        prop_oneof![
            12 => metrics(3),
            2 => edge_metrics(),
            keep_alive => Just(Vec::new()),
        ],
        any::<bool>(),
    )
        .prop_map(|(device, when, metrics, millis)| Read {
            device,
            when,
            metrics,
            millis,
        })
        .boxed()
}

fn device() -> impl Strategy<Value = usize> {
    0..DEVICES
}

fn valid_rec(known: Known) -> impl Strategy<Value = Rec> {
    let plain = read(device(), known);
    let leaf = prop_oneof![
        10 => plain.clone().prop_map(Rec::One),
        2 => (device(), prop::collection::vec(read(device(), known), 2..16)).prop_map(|(d, rs)| {
            Rec::Upload(rs.into_iter().map(|r| Read { device: d, ..r }).collect())
        }),
        2 => read(device(), known)
            .prop_filter("SenML carries metrics", |r| !r.metrics.is_empty())
            .prop_map(Rec::SenMl),
        3 => any::<usize>().prop_map(Rec::Resend),
        3 => (any::<usize>(), metrics(2)).prop_map(|(of, metrics)| Rec::Correction { of, metrics }),
        1 => (0..4_000i64).prop_map(|ms| Rec::Heartbeat { ms }),
    ]
    .boxed();
    prop_oneof![
        8 => leaf.clone(),
        1 => prop::collection::vec(leaf, 1..6).prop_map(Rec::Kpl),
    ]
}

fn hostile_rec(known: Known) -> impl Strategy<Value = Rec> {
    let long_keys = if known.kpl_long_keys { 2 } else { 0 };
    let forged = if known.forged_heartbeats { 2 } else { 0 };
    let many = if known.kpl_long_keys { 1 } else { 0 };
    prop_oneof![
        3 => (1..2_000usize).prop_map(|len| Hostile::Garbage { len }),
        2 => (read(device(), known), 0..PAST_EDGE_VALUES.len())
            .prop_map(|(r, i)| Hostile::PastEdge(r, i)),
        1 => any::<bool>().prop_map(|json| Hostile::Maximal { json }),
        long_keys => (
            prop_oneof![257..400usize, 300_000..500_000usize],
            prop::option::of(39..200usize),
            1..4usize,
        )
            .prop_map(|(key_len, hash_digits, users)| Hostile::LongKeys {
                key_len,
                hash_digits,
                users,
            }),
        forged => Just(Hostile::ForgedHeartbeat),
        many => (65_537..70_000usize, prop_oneof![Just(1usize), 257..300_000usize])
            .prop_map(|(users, key_len)| Hostile::ManyUsers { users, key_len }),
    ]
    .prop_map(Rec::Hostile)
}

fn layout(known: Known) -> impl Strategy<Value = LayoutKind> {
    let slots = if known.longer_slots {
        vec![10i64, 60, 300, 3600]
    } else {
        vec![60i64]
    };
    prop_oneof![
        (1..=2u16).prop_map(|shards| LayoutKind::Single { shards }),
        (prop::sample::select(slots), 1..=2u16)
            .prop_map(|(slot, shards)| LayoutKind::Packed { slot, shards }),
    ]
}

fn tick(known: Known) -> impl Strategy<Value = Tick> {
    // A day's close grace ends at 00:15: its last minute folded a day without its last hour.
    let grace = if known.day_closing_minute { 2 } else { 0 };
    prop_oneof![
        6 => Just(Tick::Stay),
        6 => (1..120i64).prop_map(Tick::By),
        2 => (120..1_800i64).prop_map(Tick::By),
        2 => (-30..30i64).prop_map(Tick::HourEdge),
        2 => (-60..60i64).prop_map(Tick::MidnightEdge),
        2 => (900..1_000i64).prop_map(Tick::MidnightEdge),
        grace => (840..900i64).prop_map(Tick::MidnightEdge),
    ]
}

fn action(known: Known, hostile: bool) -> impl Strategy<Value = Action> {
    let hostile_weight = if hostile { 1 } else { 0 };
    let rec = prop_oneof![
        8 => valid_rec(known),
        hostile_weight => hostile_rec(known),
    ];
    prop_oneof![
        6 => prop::collection::vec(rec, 1..6).prop_map(Action::Put),
        1 => (0..=DEVICES, layout(known), prop_oneof![Just(0i64), 0..400i64])
            .prop_map(|(device, layout, delay)| Action::Layout { device, layout, delay }),
        4 => (1..12usize, prop_oneof![4 => Just(0usize), 1 => 1..6usize])
            .prop_map(|(batch, replay)| Action::Ingest { batch, replay }),
        4 => (0..2usize, 1..20usize, prop_oneof![4 => Just(0usize), 1 => 1..8usize])
            .prop_map(|(role, batch, replay)| Action::Aggregate { role, batch, replay }),
    ]
}

/// A case of `steps` steps; hostile records only when `hostile`.
pub fn case(
    known: Known,
    hostile: bool,
    steps: std::ops::Range<usize>,
) -> impl Strategy<Value = Case> {
    prop::collection::vec(
        (tick(known), action(known, hostile)).prop_map(|(tick, action)| Step { tick, action }),
        steps,
    )
    .prop_map(|steps| Case { steps })
}
