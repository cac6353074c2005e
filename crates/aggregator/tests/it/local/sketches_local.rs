//! Quantile sketches in the rollups of devices with `percentiles: true`, against DynamoDB
//! Local: every closed hour keeps one per metric, a day's is exactly the sketch of its
//! readings (merged from its hours), late readings land in both, and devices without the
//! flag pay nothing.

use crate::common::*;
use tidemark_aggregator::pages;
use tidemark_aggregator::{AggregatorConfig, BothRoles};
use tidemark_schema::{
    AggregateItem, Clock, DeviceItem, DeviceStatus, MetricName, Period, ReadingItem, Sketch,
    sketch::RELATIVE_ACCURACY,
};
use tidemark_testkit::TestTable;

const METRICS: [(&str, f64, f64); 4] = [
    ("temperature", 21.0, 3.0),
    ("humidity", 50.0, 10.0),
    ("pressure", 1013.0, 5.0),
    ("battery", 3.7, 0.1),
];

/// A minute's reading of the four metrics, spread pseudo-randomly around their means.
fn minute(device: &str, hour: u32, m: u32, seed: u64) -> ReadingItem {
    let mut x =
        seed ^ (u64::from(hour) * 60 + u64::from(m) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let pairs: Vec<(&str, f64)> = METRICS
        .iter()
        .map(|(name, mean, spread)| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            (
                *name,
                ((mean + spread * (2.0 * u - 1.0)) * 100.0).round() / 100.0,
            )
        })
        .collect();
    reading(device, &format!("2026-04-20T{hour:02}:{m:02}:00Z"), &pairs)
}

async fn register(t: &TestTable, id: &str, percentiles: bool) {
    let mut d = DeviceItem::new(dev(id), DeviceStatus::Active, ts("2026-04-01T00:00:00Z"));
    d.percentiles = percentiles;
    t.put(&d).await;
}

/// Both roles with the clock well after the day closed.
fn aggregator_after_the_day(t: &TestTable) -> BothRoles {
    let mut config = AggregatorConfig::new(&t.name);
    config.clock = Clock::fixed(ts("2026-04-21T03:00:00Z"));
    BothRoles::new(t.client.clone(), config)
}

fn sketch_of(readings: &[ReadingItem], metric: &str) -> Sketch {
    let name = MetricName::new(metric).unwrap();
    let mut s = Sketch::default();
    for r in readings {
        s.add(r.metrics[&name]);
    }
    s
}

fn exact_at_rank(readings: &[ReadingItem], metric: &str, q: u64) -> (u64, f64) {
    let name = MetricName::new(metric).unwrap();
    let mut v: Vec<f64> = readings.iter().map(|r| r.metrics[&name]).collect();
    v.sort_by(f64::total_cmp);
    let rank = q * (v.len() as u64 - 1) / 100;
    (rank, v[rank as usize])
}

fn rollups(
    all: &std::collections::BTreeMap<(String, String), AggregateItem>,
    period: Period,
) -> Vec<&AggregateItem> {
    let prefix = tidemark_schema::keys::aggregate_sk_prefix(period);
    all.values().filter(|a| a.sk.starts_with(&prefix)).collect()
}

#[tokio::test]
async fn a_device_with_percentiles_keeps_a_sketch_per_metric_and_its_day_is_the_sketch_of_its_readings()
 {
    // GIVEN a device with percentiles on and one without, three hours of minute readings each
    let t = TestTable::new("agg-sketch").await;
    register(&t, "d-p", true).await;
    register(&t, "d-n", false).await;
    let agg = aggregator_after_the_day(&t);
    let mut s = StreamSim::new(1);
    let mut sent: Vec<ReadingItem> = Vec::new();
    // WHEN they arrive in batches that cut across the hours, as batching windows do
    let all: Vec<ReadingItem> = (10..13)
        .flat_map(|h| (0..60).map(move |m| (h, m)))
        .flat_map(|(h, m)| [minute("d-p", h, m, 7), minute("d-n", h, m, 7)])
        .collect();
    for batch in all.chunks(77) {
        store_and_process(&t, &agg, &mut s, batch).await;
        sent.extend_from_slice(batch);
    }
    let ours: Vec<ReadingItem> = sent
        .iter()
        .filter(|r| r.pk.contains("d-p"))
        .cloned()
        .collect();
    // THEN every closed hour of d-p has a sketch per metric, holding that hour's readings
    let stored = stored_aggregates(&t, &[dev("d-p")]).await;
    let hours = rollups(&stored, Period::Hourly);
    assert_eq!(hours.len(), 3);
    for h in &hours {
        assert!(!h.open, "{h:?}");
        for (name, _, _) in METRICS {
            let st = &h.metrics[&MetricName::new(name).unwrap()];
            let sk = st
                .sketch
                .as_ref()
                .unwrap_or_else(|| panic!("{} {name}: no sketch", h.sk));
            assert_eq!(sk.count(), st.count);
        }
        // AND a sketched hour of four metrics still fits one write unit
        let size = pages::size(h).unwrap();
        assert!(size <= 1024, "{}: {size} bytes", h.sk);
    }
    // AND the day's sketch is exactly the sketch of the day's readings, its p95 within 1 %
    let days = rollups(&stored, Period::Daily);
    assert_eq!(days.len(), 1);
    for (name, _, _) in METRICS {
        let st = &days[0].metrics[&MetricName::new(name).unwrap()];
        let sk = st.sketch.as_ref().unwrap();
        assert_eq!(sk, &sketch_of(&ours, name), "{name}");
        let (rank, exact) = exact_at_rank(&ours, name, 95);
        let est = sk.value_at_rank(rank).unwrap();
        assert!(
            (est - exact).abs() <= RELATIVE_ACCURACY * exact.abs(),
            "{name} p95: {est} vs {exact}"
        );
    }
    // AND the device without the flag keeps none
    let other = stored_aggregates(&t, &[dev("d-n")]).await;
    assert!(!other.is_empty());
    assert!(
        other
            .values()
            .flat_map(|a| a.metrics.values())
            .all(|st| st.sketch.is_none())
    );
    let diffs = tidemark_testkit::rollups::differences(&t.scan().await);
    assert!(diffs.is_empty(), "{diffs:?}");
}

#[tokio::test]
async fn a_late_reading_and_a_correction_reach_the_hour_and_day_sketches_once() {
    // GIVEN a device with percentiles on whose hours and day are closed and written
    let t = TestTable::new("agg-sketch-late").await;
    register(&t, "d-p", true).await;
    let agg = aggregator_after_the_day(&t);
    let mut s = StreamSim::new(1);
    let mut ours: Vec<ReadingItem> = (10..12)
        .flat_map(|h| (0..60).map(move |m| minute("d-p", h, m, 3)))
        .collect();
    store_and_process(&t, &agg, &mut s, &ours).await;
    // WHEN a late reading lands in 10:00 (twice, as a replay would) and 11:30 is corrected
    let late = reading(
        "d-p",
        "2026-04-20T10:30:30Z",
        &[
            ("temperature", 99.5),
            ("humidity", 1.0),
            ("pressure", 900.0),
            ("battery", 4.2),
        ],
    );
    store_and_process(&t, &agg, &mut s, std::slice::from_ref(&late)).await;
    let (resp, _) = agg.process(&event(vec![s.insert(&late)])).await;
    assert!(resp.batch_item_failures.is_empty());
    let i = ours
        .iter()
        .position(|r| r.sk.contains("2026-04-20T11:30:00"))
        .unwrap();
    let old = ours[i].clone();
    let fixed = reading(
        "d-p",
        "2026-04-20T11:30:00Z",
        &[
            ("temperature", -4.0),
            ("humidity", 0.0),
            ("pressure", 1000.0),
            ("battery", 3.0),
        ],
    );
    put_readings(&t, std::slice::from_ref(&fixed)).await;
    let (resp, _) = agg.process(&event(vec![s.modify(&old, &fixed)])).await;
    assert!(resp.batch_item_failures.is_empty());
    ours[i] = fixed;
    ours.push(late);
    // THEN the day's sketch is the sketch of the readings now stored, each counted once
    let stored = stored_aggregates(&t, &[dev("d-p")]).await;
    let day = rollups(&stored, Period::Daily)[0];
    for (name, _, _) in METRICS {
        let sk = day.metrics[&MetricName::new(name).unwrap()]
            .sketch
            .as_ref()
            .unwrap();
        assert_eq!(sk, &sketch_of(&ours, name), "{name}");
        assert_eq!(sk.count(), 121);
    }
    // AND every hour matches its readings (the oracle compares sketches where kept)
    let diffs = tidemark_testkit::rollups::differences(&t.scan().await);
    assert!(diffs.is_empty(), "{diffs:?}");
}
