//! A day is written when it closes, not on every batch (docs/design.md §5), against
//! DynamoDB Local: while open its item is a placeholder that readers sum from its hours;
//! the device's first batch after the close folds it; late readings after that correct it.

mod common;

use common::*;
use tidemark_aggregator::{AggregatorConfig, BothRoles};
use tidemark_schema::{
    AggregateItem, Clock, DAY_CLOSE_GRACE_SECONDS, MetricName, Period, Timestamp,
};
use tidemark_testkit::TestTable;

fn day_key(device: &str, at: &str) -> (String, String) {
    bucket_key(device, Period::Daily.bucket(ts(at)))
}

async fn day(t: &TestTable, device: &str, at: &str) -> Option<AggregateItem> {
    stored_aggregates(t, &[dev(device)])
        .await
        .remove(&day_key(device, at))
}

/// The aggregator with its clock at `now` (the clock the test moves).
fn aggregator_at(t: &TestTable, now: &str) -> (BothRoles, Clock) {
    let clock = Clock::fixed(ts(now));
    let mut config = AggregatorConfig::new(&t.name);
    config.clock = clock.clone();
    (BothRoles::new(t.client.clone(), config), clock)
}

fn temperature(d: &AggregateItem) -> (u64, f64, f64, f64) {
    let s = d.metrics[&MetricName::new("t").unwrap()];
    (s.count, s.sum, s.min, s.max)
}

#[tokio::test]
async fn an_open_day_is_written_once_as_a_placeholder_and_its_batches_write_only_their_hours() {
    // GIVEN a device sending through the evening of 2026-04-20, the clock in that evening
    let t = TestTable::new("agg-open-day").await;
    let (agg, clock) = aggregator_at(&t, "2026-04-20T22:00:00Z");
    let mut s = StreamSim::new(1);
    // WHEN three batches of it arrive, each as its readings are stored
    for (k, minute) in ["21:00", "21:05", "22:10"].iter().enumerate() {
        clock.set(ts(&format!("2026-04-20T{minute}:30Z")));
        let rs = vec![reading(
            "d-open",
            &format!("2026-04-20T{minute}:00Z"),
            &[("t", 10.0 + k as f64)],
        )];
        store_and_process(&t, &agg, &mut s, &rs).await;
    }
    // THEN the day is a placeholder, written by the first batch only
    let d = day(&t, "d-open", "2026-04-20T00:00:00Z").await.unwrap();
    assert!(d.open, "{d:?}");
    assert_eq!(d.version, 1, "one write of the open day in three batches");
    // AND the hours are exact, and the day as a reader sees it is the sum of its hours
    assert!(
        tidemark_testkit::rollups::differences(&t.scan().await).is_empty(),
        "{:?}",
        tidemark_testkit::rollups::differences(&t.scan().await)
    );
    let hours: Vec<AggregateItem> = stored_aggregates(&t, &[dev("d-open")])
        .await
        .into_values()
        .filter(|a| a.sk.contains("hourly"))
        .collect();
    assert_eq!(hours.len(), 2);
    let seen = AggregateItem::day_of_hours(&d, hours);
    assert_eq!(temperature(&seen), (3, 33.0, 10.0, 12.0));
    assert_eq!(seen.first_at, ts("2026-04-20T21:00:00Z"));
    assert_eq!(seen.last_at, ts("2026-04-20T22:10:00Z"));
}

#[tokio::test]
async fn the_first_batch_after_a_day_closes_folds_it_and_a_late_reading_then_corrects_it() {
    // GIVEN a device's open day: readings at 23:50 and 23:58, batches at 23:59
    let t = TestTable::new("agg-close-day").await;
    let (agg, clock) = aggregator_at(&t, "2026-04-20T23:59:00Z");
    let mut s = StreamSim::new(1);
    let evening = vec![
        reading("d-close", "2026-04-20T23:50:00Z", &[("t", 5.0)]),
        reading("d-close", "2026-04-20T23:58:00Z", &[("t", 7.0)]),
    ];
    store_and_process(&t, &agg, &mut s, &evening).await;
    assert!(
        day(&t, "d-close", "2026-04-20T00:00:00Z")
            .await
            .unwrap()
            .open
    );

    // WHEN, past the day's grace, the device's next batch (of the new day) arrives
    let closes = Period::Daily
        .bucket(ts("2026-04-20T00:00:00Z"))
        .end_exclusive()
        .plus_millis(DAY_CLOSE_GRACE_SECONDS * 1000)
        .unwrap();
    clock.set(closes.plus_millis(5_000).unwrap());
    let morning = vec![reading("d-close", "2026-04-21T00:14:00Z", &[("t", 1.0)])];
    store_and_process(&t, &agg, &mut s, &morning).await;

    // THEN the closed day holds the fold of its hours, and the new day is a placeholder
    let closed = day(&t, "d-close", "2026-04-20T00:00:00Z").await.unwrap();
    assert!(!closed.open, "{closed:?}");
    assert_eq!(temperature(&closed), (2, 12.0, 5.0, 7.0));
    assert_eq!(closed.version, 2);
    assert!(
        day(&t, "d-close", "2026-04-21T00:00:00Z")
            .await
            .unwrap()
            .open
    );

    // WHEN a late reading of the closed day arrives
    let late = vec![reading("d-close", "2026-04-20T12:00:00Z", &[("t", 9.0)])];
    store_and_process(&t, &agg, &mut s, &late).await;
    // THEN the closed day takes it, once, and every rollup is exact
    let corrected = day(&t, "d-close", "2026-04-20T00:00:00Z").await.unwrap();
    assert!(!corrected.open);
    assert_eq!(temperature(&corrected), (3, 21.0, 5.0, 9.0));
    assert_eq!(corrected.version, 3);
    let diffs = tidemark_testkit::rollups::differences(&t.scan().await);
    assert!(diffs.is_empty(), "{diffs:?}");
}

#[tokio::test]
async fn a_batch_writing_a_day_moments_before_its_close_folds_it_itself() {
    // GIVEN a clock within a minute of the day's close (clocks of two invocations may
    // disagree by that much: the batch that wrote the hour cannot leave the day to the other)
    let t = TestTable::new("agg-margin-day").await;
    let closes: Timestamp = Period::Daily
        .bucket(ts("2026-04-20T00:00:00Z"))
        .end_exclusive()
        .plus_millis(DAY_CLOSE_GRACE_SECONDS * 1000)
        .unwrap();
    let (agg, _clock) = aggregator_at(&t, &closes.minus_millis(30_000).unwrap().to_string());
    let mut s = StreamSim::new(1);
    let rs = vec![reading("d-margin", "2026-04-20T23:59:00Z", &[("t", 4.0)])];
    put_readings(&t, &rs).await;
    // WHEN its last readings are rolled up
    let (resp, _) = agg
        .process(&event(rs.iter().map(|r| s.insert(r)).collect()))
        .await;
    assert!(resp.batch_item_failures.is_empty());
    // THEN the day is written as a rollup, not left open
    let d = day(&t, "d-margin", "2026-04-20T00:00:00Z").await.unwrap();
    assert!(!d.open);
    assert_eq!(temperature(&d), (1, 4.0, 4.0, 4.0));
}
