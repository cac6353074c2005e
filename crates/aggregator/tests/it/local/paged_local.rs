//! A gateway with thousands of tags under one device ID against DynamoDB Local: its hourly
//! and daily rollups are split into pages, every page under DynamoDB's 400 KB item limit,
//! and the shard goes on.

use std::collections::BTreeMap;

use crate::common::*;
use tidemark_aggregator::{Aggregator, AggregatorConfig};
use tidemark_schema::{DeviceId, EntityKey, MetricName, Period, Reading, ReadingItem};
use tidemark_store::limits::{MAX_ITEM_BYTES, item_size};
use tidemark_testkit::TestTable;

#[tokio::test]
async fn an_8000_tag_gateway_gets_exact_paged_rollups_and_the_shard_goes_on() {
    // GIVEN an 8,000-tag gateway, 32 metrics a record, every tag read twice in one hour
    let t = TestTable::new("agg-paged").await;
    let agg = Aggregator::new(t.client.clone(), AggregatorConfig::new(&t.name));
    let mut sim = StreamSim::new(1);
    let hour = ts("2026-04-20T14:00:00Z");
    let mut readings = Vec::new();
    for round in 0..2i64 {
        for (j, tags) in (0..8_000).collect::<Vec<_>>().chunks(32).enumerate() {
            let metrics: BTreeMap<MetricName, f64> = tags
                .iter()
                .map(|i| {
                    let m = MetricName::new(&format!("ns2_s{:02}_tag{i:05}", i % 40)).unwrap();
                    (m, *i as f64 * 0.5 - round as f64 * 3.25)
                })
                .collect();
            let at = hour
                .plus_millis(round * 1_800_000 + j as i64 * 1_000)
                .unwrap();
            readings.push(ReadingItem::new(
                &Reading {
                    device_id: dev("gw"),
                    timestamp: at,
                    metrics,
                    metadata: None,
                },
                None,
                30,
            ));
        }
    }
    put_readings(&t, &readings).await;
    let records: Vec<_> = readings.iter().map(|r| sim.insert(r)).collect();

    // WHEN the rollups role gets them in batches on one shard
    let mut units = Vec::new();
    for batch in records.chunks(100) {
        let (resp, report) = agg.process(&event(batch.to_vec())).await;
        assert!(resp.batch_item_failures.is_empty(), "the batch failed");
        units.push(report.write_units);
    }
    eprintln!("write units per batch of 100 records: {units:?}");

    // THEN every metric's hourly and daily rollup is exact, and every item is under 400 KB
    assert_exact(&t, &[dev("gw")], &readings).await;
    let items = t.scan().await;
    let mut pages: BTreeMap<String, usize> = BTreeMap::new();
    for i in &items {
        let size = item_size(i);
        assert!(size < MAX_ITEM_BYTES, "an item of {size} bytes");
        let (pk, sk) = (i["pk"].as_s().unwrap(), i["sk"].as_s().unwrap());
        if let Ok(EntityKey::Aggregate { bucket, .. } | EntityKey::AggregatePage { bucket, .. }) =
            EntityKey::parse(pk, sk)
        {
            *pages.entry(bucket.label()).or_default() += 1;
        }
    }
    eprintln!("pages per bucket: {pages:?}");
    assert!(pages.values().all(|n| *n > 1), "both buckets are paged");

    // WHEN a reading of another device comes next on the same shard THEN it is counted
    let other = reading("d2", "2026-04-20T14:30:00Z", &[("t", 21.5)]);
    put_readings(&t, std::slice::from_ref(&other)).await;
    let (resp, _) = agg.process(&event(vec![sim.insert(&other)])).await;
    assert!(resp.batch_item_failures.is_empty());
    let mut all = readings.clone();
    all.push(other);
    assert_exact(&t, &[dev("gw"), DeviceId::new("d2").unwrap()], &all).await;
    let hourly = bucket_key("d2", Period::Hourly.bucket(ts("2026-04-20T14:30:00Z")));
    assert!(
        stored_aggregates(&t, &[dev("d2")])
            .await
            .contains_key(&hourly)
    );
}
