//! Hours and days are written when they close, not on every batch (docs/design.md §5),
//! against DynamoDB Local: while open a bucket's item is a placeholder (readers take an hour
//! from its readings and sum a day from its hours); the device's first batch after the close
//! writes it; late readings after that correct it, once.

use crate::common::*;
use tidemark_aggregator::{AggregatorConfig, BothRoles};
use tidemark_schema::{AggregateItem, CLOSE_GRACE_SECONDS, Clock, MetricName, Period, Timestamp};
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
    let s = &d.metrics[&MetricName::new("t").unwrap()];
    (s.count, s.sum, s.min, s.max)
}

#[tokio::test]
async fn an_open_day_and_its_open_hours_are_placeholders_written_once_each() {
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
    // AND its hours, open too, are placeholders written once each (readers take an open hour
    // from its readings)
    assert_eq!(hours.len(), 2);
    assert!(
        hours
            .iter()
            .all(|h| h.open && h.version == 1 && h.metrics.is_empty()),
        "{hours:?}"
    );
    let day_key = AggregateItem::key_for(
        &dev("d-open"),
        Period::Daily.bucket(ts("2026-04-20T00:00:00Z")),
    );
    let seen = &tidemark_testkit::rollups::stored(&t.scan().await)[&day_key];
    let s = &seen.metrics[&MetricName::new("t").unwrap()];
    assert_eq!((s.count, s.sum, s.min, s.max), (3, 33.0, 10.0, 12.0));
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
        .plus_millis(CLOSE_GRACE_SECONDS * 1000)
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
        .plus_millis(CLOSE_GRACE_SECONDS * 1000)
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

#[tokio::test]
async fn a_day_folded_in_the_last_minute_before_its_close_holds_its_last_hour() {
    // GIVEN a device's evening rolled up at 23:30: its hour 23:00 and its day placeholders
    let t = TestTable::new("agg-last-minute").await;
    let (agg, clock) = aggregator_at(&t, "2026-04-20T23:30:00Z");
    let mut s = StreamSim::new(1);
    let evening = vec![
        reading("d-last", "2026-04-20T23:10:00Z", &[("t", 1.0)]),
        reading("d-last", "2026-04-20T23:20:00Z", &[("t", 2.0)]),
    ];
    store_and_process(&t, &agg, &mut s, &evening).await;
    // WHEN a late reading of an earlier hour of that day is rolled up in the last minute
    // before the day closes (00:15), and then the device's next batch
    clock.set(ts("2026-04-21T00:14:30Z"));
    let late = vec![reading("d-last", "2026-04-20T22:30:00Z", &[("t", 4.0)])];
    store_and_process(&t, &agg, &mut s, &late).await;
    clock.set(ts("2026-04-21T00:40:00Z"));
    let morning = vec![reading("d-last", "2026-04-21T00:35:00Z", &[("t", 8.0)])];
    store_and_process(&t, &agg, &mut s, &morning).await;
    // THEN the closed day holds its three readings, the 23:00 hour's among them, and every
    // rollup is what the table's readings say
    let d = day(&t, "d-last", "2026-04-20T00:00:00Z").await.unwrap();
    assert!(!d.open, "{d:?}");
    assert_eq!(temperature(&d), (3, 7.0, 1.0, 4.0));
    let diffs = tidemark_testkit::rollups::differences(&t.scan().await);
    assert!(diffs.is_empty(), "{diffs:?}");
}

fn hour(
    t: &TestTable,
    device: &str,
    at: &str,
) -> impl std::future::Future<Output = Option<AggregateItem>> {
    let key = bucket_key(device, Period::Hourly.bucket(ts(at)));
    let devices = [dev(device)];
    async move { stored_aggregates(t, &devices).await.remove(&key) }
}

#[tokio::test]
async fn an_hour_is_a_placeholder_while_open_and_written_once_when_its_device_moves_on() {
    // GIVEN a device sending every 5 minutes through 14:00-15:00, each reading in its own
    // batch a few seconds after it
    let t = TestTable::new("agg-open-hour").await;
    let (agg, clock) = aggregator_at(&t, "2026-04-20T14:00:00Z");
    let mut s = StreamSim::new(1);
    for k in 0..12 {
        let at = ts("2026-04-20T14:00:00Z").plus_millis(k * 300_000).unwrap();
        clock.set(at.plus_millis(20_000).unwrap());
        let rs = vec![reading_at(
            &dev("d-hour"),
            at,
            metrics(&[("t", k as f64)]),
            None,
        )];
        store_and_process(&t, &agg, &mut s, &rs).await;
    }
    // THEN the open hour is a placeholder written once, and readers see every reading
    let open = hour(&t, "d-hour", "2026-04-20T14:00:00Z").await.unwrap();
    assert!(open.open && open.version == 1, "{open:?}");
    let diffs = tidemark_testkit::rollups::differences(&t.scan().await);
    assert!(diffs.is_empty(), "{diffs:?}");

    // WHEN, past the hour's grace, the device's next batch (of the next hour) arrives
    let closes = tidemark_schema::closes_at(Period::Hourly.bucket(ts("2026-04-20T14:00:00Z")));
    clock.set(closes.plus_millis(10_000).unwrap());
    let next = vec![reading("d-hour", "2026-04-20T15:15:00Z", &[("t", 100.0)])];
    put_readings(&t, &next).await;
    let records: Vec<_> = next.iter().map(|r| s.insert(r)).collect();
    let (resp, _) = agg.process(&event(records.clone())).await;
    assert!(resp.batch_item_failures.is_empty());
    // THEN the hour is written with its twelve readings: its second and last write
    let closed = hour(&t, "d-hour", "2026-04-20T14:00:00Z").await.unwrap();
    assert!(!closed.open, "{closed:?}");
    assert_eq!(temperature(&closed), (12, 66.0, 0.0, 11.0));
    assert_eq!(closed.version, 2);
    assert!(
        hour(&t, "d-hour", "2026-04-20T15:00:00Z")
            .await
            .unwrap()
            .open
    );
    // AND a replay of that batch writes nothing
    let (_, again) = agg.process(&event(records)).await;
    assert_eq!(again.items_written, 0, "{again:?}");

    // WHEN a late reading of the closed hour arrives, and is delivered twice
    let late = vec![reading("d-hour", "2026-04-20T14:31:00Z", &[("t", 50.0)])];
    put_readings(&t, &late).await;
    let records: Vec<_> = late.iter().map(|r| s.insert(r)).collect();
    agg.process(&event(records.clone())).await;
    let (_, replay) = agg.process(&event(records)).await;
    // THEN the hour takes it, written once more; the replay writes nothing
    let corrected = hour(&t, "d-hour", "2026-04-20T14:00:00Z").await.unwrap();
    assert_eq!(temperature(&corrected), (13, 116.0, 0.0, 50.0));
    assert_eq!(corrected.version, 3);
    assert_eq!(replay.items_written, 0, "{replay:?}");
    let diffs = tidemark_testkit::rollups::differences(&t.scan().await);
    assert!(diffs.is_empty(), "{diffs:?}");
}

#[tokio::test]
async fn a_device_back_after_hours_of_silence_closes_the_hour_it_left_open() {
    // GIVEN a device whose last reading, at 10:10, left its hour a placeholder
    let t = TestTable::new("agg-silent-hour").await;
    let (agg, clock) = aggregator_at(&t, "2026-04-20T10:10:20Z");
    let mut s = StreamSim::new(1);
    store_and_process(
        &t,
        &agg,
        &mut s,
        &[reading("d-quiet", "2026-04-20T10:10:00Z", &[("t", 3.0)])],
    )
    .await;
    assert!(
        hour(&t, "d-quiet", "2026-04-20T10:00:00Z")
            .await
            .unwrap()
            .open
    );
    // WHEN it sends again at 14:00, hours later
    clock.set(ts("2026-04-20T14:00:20Z"));
    store_and_process(
        &t,
        &agg,
        &mut s,
        &[reading("d-quiet", "2026-04-20T14:00:00Z", &[("t", 4.0)])],
    )
    .await;
    // THEN the hour it left open is written, and every rollup is exact
    let closed = hour(&t, "d-quiet", "2026-04-20T10:00:00Z").await.unwrap();
    assert!(!closed.open, "{closed:?}");
    assert_eq!(temperature(&closed), (1, 3.0, 3.0, 3.0));
    let diffs = tidemark_testkit::rollups::differences(&t.scan().await);
    assert!(diffs.is_empty(), "{diffs:?}");
}
