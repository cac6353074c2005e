//! Both designs over a tiny fleet on DynamoDB Local: every reading is stored and aggregated
//! once, the units are metered per function, and the baseline's rollups are right.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_bench::run::{self, Design, Target};
use tidemark_bench::scenario::{Scenario, SimReading, TEMPLATE_AGGREGATOR_BATCH};
use tidemark_schema::{AggregateItem, Period, Timestamp};
use tidemark_testkit::{TestTable, services};

fn target() -> Target {
    Target {
        dynamodb: services().dynamodb_addr(),
    }
}

fn tiny() -> Scenario {
    // 2 devices, one reading a minute, 6 minutes: two batching windows.
    let mut s = Scenario::standard(2, 6, TEMPLATE_AGGREGATOR_BATCH);
    s.warmup_window = false;
    s
}

/// A run of `sc` through `design` on a fresh table: (the run, the table, the readings,
/// the simulated start).
async fn run_on_fresh_table(
    sc: &Scenario,
    design: Design,
    label: &str,
) -> (run::DesignRun, TestTable, Vec<SimReading>, Timestamp) {
    let start = run::simulated_start(Timestamp::now());
    let readings = sc.readings(start);
    let table = TestTable::new(label).await;
    let r = run::run(&target(), sc, design, &table.name, &readings, start)
        .await
        .unwrap();
    (r, table, readings, start)
}

fn num(item: &std::collections::HashMap<String, AttributeValue>, name: &str) -> f64 {
    match item.get(name) {
        Some(AttributeValue::N(n)) => n.parse().unwrap(),
        other => panic!("{name}: {other:?}"),
    }
}

#[tokio::test]
async fn baseline_rolls_up_every_reading_into_hourly_and_daily_items() {
    // GIVEN a tiny fleet's readings
    let sc = tiny();
    // WHEN the textbook design ingests and aggregates them
    let (r, table, readings, start) =
        run_on_fresh_table(&sc, Design::Baseline, "bench-baseline").await;
    // THEN each reading was put once and aggregated once
    assert_eq!(r.readings_stored, 12);
    assert_eq!(r.readings_aggregated, 12);
    assert_eq!(r.ingest.units.wru_total, 12.0);
    assert_eq!(r.ingest.units.write_calls, 12);
    // AND every reading cost at least its hourly and daily updates
    assert!(
        r.aggregator.units.wru_total >= 24.0,
        "{}",
        r.aggregator.units.wru_total
    );
    // AND the hourly item of device 0 holds the count, sum, min and max of its temperatures
    let temps: Vec<f64> = readings
        .iter()
        .filter(|x| x.device == 0)
        .map(|x| {
            serde_json::from_slice::<serde_json::Value>(&x.body).unwrap()["temperature"]
                .as_f64()
                .unwrap()
        })
        .collect();
    let key = AggregateItem::key_for(&sc.device_id(0), Period::Hourly.bucket(start));
    let item = table
        .client
        .get_item()
        .table_name(&table.name)
        .key("pk", AttributeValue::S(key.pk))
        .key("sk", AttributeValue::S(key.sk))
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    assert_eq!(num(&item, "count"), temps.len() as f64);
    let sum: f64 = temps.iter().sum();
    assert!((num(&item, "sum_temperature") - sum).abs() < 1e-9);
    assert_eq!(
        num(&item, "min_temperature"),
        temps.iter().copied().fold(f64::INFINITY, f64::min)
    );
    assert_eq!(
        num(&item, "max_temperature"),
        temps.iter().copied().fold(f64::NEG_INFINITY, f64::max)
    );
}

#[tokio::test]
async fn tidemark_meters_one_unit_per_reading_at_ingest_and_aggregates_each_once() {
    let sc = tiny();
    let (r, _table, _, _) = run_on_fresh_table(&sc, Design::Tidemark, "bench-tidemark").await;
    assert_eq!(r.failed_batches, 0);
    assert_eq!(r.readings_aggregated, r.readings_stored);
    // Readings are under 1 KB and outside the GSI: exactly one unit each, all on the table;
    // and each device's first batch of the day adds its metric names to the day's set
    // (docs/design.md §4 "Metric names per day"): one unit per device.
    assert_eq!(r.ingest.units.wru_total, 12.0 + 2.0);
    assert_eq!(r.ingest.units.wru_gsi, 0.0);
    // The aggregator writes per device and window, not per reading: 2 devices × 2 windows ×
    // (hourly, daily, device) at most, plus the GSI copy of each new device item and each
    // device's hourly item's entry in its hour's activity partition (GSI2, written once).
    let writes_by_op: BTreeMap<_, _> = r
        .aggregator
        .units
        .totals
        .by_operation
        .iter()
        .map(|(op, s)| (op.clone(), s.calls))
        .collect();
    let calls: u64 = writes_by_op
        .iter()
        .filter(|(op, _)| ["PutItem", "UpdateItem"].contains(&op.as_str()))
        .map(|(_, c)| c)
        .sum();
    assert!(calls <= 12, "{writes_by_op:?}");
    assert!(r.aggregator.units.wru_total <= 12.0 + 2.0);
    assert_eq!(r.aggregator.units.wru_gsi, 2.0 + 2.0);
}

#[tokio::test]
async fn the_first_window_is_a_warm_up_measured_apart() {
    // GIVEN the tiny fleet measured from its second window on
    let mut sc = tiny();
    sc.warmup_window = true;
    let (r, _table, _, _) = run_on_fresh_table(&sc, Design::Tidemark, "bench-warmup").await;
    // THEN the first 5 minutes (10 readings) are the warm-up, with the devices' registration
    // and their metric names of the day (one unit a device), and their hour's activity
    // entries (one a device and hour)
    let w = r.warmup.as_ref().unwrap();
    assert_eq!((w.readings_stored, r.readings_stored), (10, 2));
    assert_eq!(w.ingest.wru_total, 10.0 + 2.0);
    assert_eq!(w.aggregator.wru_gsi, 2.0 + 2.0);
    // AND the steady state pays one unit per reading at ingest and no GSI at all
    assert_eq!(r.ingest.units.wru_total, 2.0);
    assert_eq!(r.aggregator.units.wru_gsi, 0.0);
    assert_eq!(r.readings_aggregated, 2);
}
