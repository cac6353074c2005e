//! CPU per reading of decode + validate + item build (the target is at most 2 µs), and of
//! decode + validate + packing into a slot item's encoding (target: at most 3 µs, `bench/PACKING.md`).
//!
//! `cargo bench -p tidemark-ingest --bench decode`

use std::hint::black_box;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tidemark_ingest::{IngestConfig, decode_record, reading_item};
use tidemark_schema::{SlotLen, Timestamp};
use tidemark_store::write::slots::Content;

fn reading(i: usize) -> String {
    format!(
        r#"{{"deviceId":"sensor_{:04}","timestamp":"2026-04-20T14:{:02}:{:02}Z","temperature":22.4,"humidity":45,"pressure":1013.2,"battery":87,"metadata":{{"fw":"2.1.0"}}}}"#,
        i % 1000,
        (i / 60) % 60,
        i % 60
    )
}

/// CPU time of the benchmark thread (`CLOCK_THREAD_CPUTIME_ID`, nanoseconds), so the number
/// means "CPU per reading" even on a machine busy with other work, where wall time would also
/// count the time the thread waited for a core.
struct ThreadCpu;

#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

unsafe extern "C" {
    fn clock_gettime(clock: i32, tp: *mut Timespec) -> i32;
}

/// Linux' clock ID for the calling thread's CPU time.
const CLOCK_THREAD_CPUTIME_ID: i32 = 3;

fn thread_cpu_ns() -> u64 {
    let mut t = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec (two 64-bit fields on 64-bit Linux) to `t`.
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut t) };
    if rc != 0 {
        return 0;
    }
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

impl Measurement for ThreadCpu {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns().saturating_sub(start)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        WallTime.formatter()
    }
}

/// What ingest does per record before writing: decode, validate, build each item.
fn decode_and_build(bytes: &[u8], now: Timestamp, config: &IngestConfig) {
    let readings = decode_record(bytes, now, config).unwrap();
    for r in &readings {
        black_box(reading_item(r, None, config.retention_days, now).unwrap());
    }
}

/// What ingest does per reading of a packed device: decode, validate, merge into its slot's
/// content, and encode the slot (once per batch, here a 60 s slot of one device at 1 Hz).
fn decode_and_pack(records: &[Vec<u8>], now: Timestamp, config: &IngestConfig) {
    let slot = SlotLen::new(60).unwrap();
    let mut content = Content::default();
    let mut start = Timestamp::MAX;
    for bytes in records {
        for r in decode_record(bytes, now, config).unwrap() {
            start = start.min(slot.start_of(r.timestamp));
            content
                .readings
                .entry(r.timestamp)
                .or_default()
                .extend(r.metrics.iter().map(|(k, v)| (k.clone(), *v)));
            if let Some(m) = &r.metadata {
                content
                    .metadata
                    .insert(r.timestamp, serde_json::to_string(m).unwrap());
            }
        }
    }
    black_box(content.size(start).unwrap());
}

/// One device's minute at 1 Hz, each reading its own record.
fn one_device_minute() -> Vec<Vec<u8>> {
    (0..60)
        .map(|s| {
            format!(
                r#"{{"deviceId":"sensor_0007","timestamp":"2026-04-20T14:07:{s:02}Z","temperature":{},"humidity":45,"pressure":1013.2,"battery":87,"metadata":{{"fw":"2.1.0"}}}}"#,
                22.0 + f64::from(s % 7) * 0.1
            )
            .into_bytes()
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let config = IngestConfig::new("bench");
    let now = Timestamp::parse_rfc3339("2026-04-20T15:00:00Z").unwrap();
    let one = reading(7).into_bytes();
    let array = format!("[{}]", (0..100).map(reading).collect::<Vec<_>>().join(",")).into_bytes();

    let mut g = c.benchmark_group("ingest");
    g.throughput(Throughput::Elements(1));
    g.bench_function("decode_validate_item/one_reading_record", |b| {
        b.iter(|| decode_and_build(black_box(&one), now, &config))
    });
    g.throughput(Throughput::Elements(100));
    g.bench_function("decode_validate_item/array_of_100_per_reading", |b| {
        b.iter(|| decode_and_build(black_box(&array), now, &config))
    });
    g.throughput(Throughput::Elements(1));
    g.bench_function("decode_validate_only/one_reading_record", |b| {
        b.iter(|| black_box(decode_record(black_box(&one), now, &config).unwrap()))
    });
    let minute = one_device_minute();
    g.throughput(Throughput::Elements(60));
    g.bench_function("decode_validate_pack/slot_of_60_per_reading", |b| {
        b.iter(|| decode_and_pack(black_box(&minute), now, &config))
    });
    g.finish();
}

fn bench_cpu(c: &mut Criterion<ThreadCpu>) {
    let config = IngestConfig::new("bench");
    let now = Timestamp::parse_rfc3339("2026-04-20T15:00:00Z").unwrap();
    let one = reading(7).into_bytes();
    let mut g = c.benchmark_group("ingest_thread_cpu");
    g.throughput(Throughput::Elements(1));
    g.bench_function("decode_validate_item/one_reading_record", |b| {
        b.iter(|| decode_and_build(black_box(&one), now, &config))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_group! {
    name = cpu;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = bench_cpu
}
criterion_main!(benches, cpu);
