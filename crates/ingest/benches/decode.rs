//! CPU per reading of decode + validate + item build (the target is at most 2 µs).
//!
//! `cargo bench -p tidemark-ingest --bench decode`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tidemark_ingest::{IngestConfig, decode_record, reading_item};
use tidemark_schema::Timestamp;

fn reading(i: usize) -> String {
    format!(
        r#"{{"deviceId":"sensor_{:04}","timestamp":"2026-04-20T14:{:02}:{:02}Z","temperature":22.4,"humidity":45,"pressure":1013.2,"battery":87,"metadata":{{"fw":"2.1.0"}}}}"#,
        i % 1000,
        (i / 60) % 60,
        i % 60
    )
}

fn bench(c: &mut Criterion) {
    let config = IngestConfig::new("bench");
    let now = Timestamp::parse_rfc3339("2026-04-20T15:00:00Z").unwrap();
    let one = reading(7).into_bytes();
    let array = format!("[{}]", (0..100).map(reading).collect::<Vec<_>>().join(",")).into_bytes();

    let mut g = c.benchmark_group("ingest");
    g.throughput(Throughput::Elements(1));
    g.bench_function("decode_validate_item/one_reading_record", |b| {
        b.iter(|| {
            let readings = decode_record(black_box(&one), now, &config).unwrap();
            for r in &readings {
                black_box(reading_item(r, None, config.retention_days).unwrap());
            }
        })
    });
    g.throughput(Throughput::Elements(100));
    g.bench_function("decode_validate_item/array_of_100_per_reading", |b| {
        b.iter(|| {
            let readings = decode_record(black_box(&array), now, &config).unwrap();
            for r in &readings {
                black_box(reading_item(r, None, config.retention_days).unwrap());
            }
        })
    });
    g.throughput(Throughput::Elements(1));
    g.bench_function("decode_validate_only/one_reading_record", |b| {
        b.iter(|| black_box(decode_record(black_box(&one), now, &config).unwrap()))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
