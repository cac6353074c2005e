//! The ingest handler against DynamoDB Local: what lands in the table, byte for byte.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::common::*;
use aws_sdk_dynamodb::types::{AttributeValue, Select};
use tidemark_ingest::{DeviceDirectory, DynamoLookups, Ingest, UnknownDevices};
use tidemark_schema::keys::{reading_pk, reading_sk};
use tidemark_schema::{
    Clock, DeviceId, DeviceItem, DeviceStatus, EntityKey, LayoutHistory, LayoutHistoryItem,
    QuarantineItem, QuarantinePartItem, QuarantineReason, ReadingItem,
};
use tidemark_store::{from_item, to_item};
use tidemark_testkit::TestTable;

/// The quarantined records of a scan, each with its whole payload put back together from
/// its parts.
fn quarantined(items: &[tidemark_store::Item]) -> Vec<QuarantineItem> {
    let key = |i: &tidemark_store::Item| EntityKey::parse(&s(i, "pk"), &s(i, "sk")).unwrap();
    let mut parts: Vec<(String, QuarantinePartItem)> = items
        .iter()
        .filter(|i| matches!(key(i), EntityKey::QuarantinePart { .. }))
        .map(|i| (s(i, "sk"), from_item(i.clone()).unwrap()))
        .collect();
    parts.sort_by(|a, b| a.0.cmp(&b.0));
    let mut q: Vec<QuarantineItem> = items
        .iter()
        .filter(|i| matches!(key(i), EntityKey::Quarantine { .. }))
        .map(|i| from_item(i.clone()).unwrap())
        .collect();
    for r in &mut q {
        let mine: Vec<_> = parts
            .iter()
            .filter(|(sk, _)| sk.starts_with(&format!("{}#", r.sk)))
            .collect();
        assert_eq!(
            mine.len() + 1,
            r.parts as usize,
            "every part of {} stored",
            r.sk
        );
        for (_, p) in mine {
            r.payload.extend_from_slice(&p.payload);
        }
    }
    q.sort_by(|a, b| a.sequence_number.cmp(&b.sequence_number));
    q
}

#[tokio::test]
async fn the_aws_fixture_event_is_quarantined_and_the_batch_succeeds() {
    // GIVEN the aws_lambda_events example: two records whose data is "Hello World"
    let t = TestTable::new("ingest-fixture").await;
    let ingest = local_ingest(&t.client, config(&t.name), t.client.clone());
    let event = load_event("tests/fixtures/example-kinesis-event.json");

    // WHEN it is handled
    let resp = ingest.handle(event.clone(), soon()).await.unwrap();

    // THEN nothing fails, and both records are kept whole with reason, origin and arrival
    assert!(failures(&resp).is_empty());
    let q = quarantined(&scan(&t.client, &t.name).await);
    assert_eq!(q.len(), 2);
    for (item, record) in q.iter().zip(&event.records) {
        assert_eq!(item.reason, QuarantineReason::NotJson);
        assert_eq!(item.payload, b"Hello World");
        assert_eq!(item.size, 11);
        assert_eq!(item.partition_key, "s1");
        assert_eq!(item.sequence_number, record.kinesis.sequence_number);
        assert_eq!(
            item.received_at.epoch_millis(),
            record
                .kinesis
                .approximate_arrival_timestamp
                .timestamp_millis()
        );
        assert_eq!(
            item.ttl,
            item.received_at
                .ttl_after_days(QuarantineItem::RETENTION_DAYS)
        );
        let key = QuarantineItem::key_for(
            item.received_at.day(),
            item.received_at,
            &item.sequence_number,
        );
        assert_eq!((item.pk.clone(), item.sk.clone()), (key.pk, key.sk));
    }
    assert_eq!(q[0].received_at.to_string(), "2016-12-02T01:18:43.477000Z");
}

#[tokio::test]
async fn readings_of_several_devices_and_arrays_are_stored_normalised_with_ttl() {
    let t = TestTable::new("ingest-readings").await;
    let ingest = local_ingest(&t.client, config(&t.name), t.client.clone());
    let (resp, stats) = ingest
        .process(&load_event("events/kinesis-readings.json"), soon())
        .await
        .unwrap();
    assert!(failures(&resp).is_empty());
    assert_eq!(
        (stats.records, stats.readings, stats.quarantined),
        (5, 7, 0)
    );
    assert_eq!(stats.written, 7);

    let items = scan(&t.client, &t.name).await;
    let stored: BTreeMap<(String, String), ReadingItem> = readings(&items)
        .into_iter()
        .map(|r| ((r.pk.clone(), r.sk.clone()), r))
        .collect();
    assert_eq!(
        items.len(),
        7 + 4,
        "readings and each device's metric names of the day (docs/design.md §4), no device \
         item, no other side writes"
    );
    assert_eq!(metric_name_sets(&items), 4);
    let keys: Vec<_> = stored.keys().cloned().collect();
    let want: Vec<(String, String)> = [
        ("DEVICE#gateway_07", "READING#2026-04-20T14:00:30.500000Z"),
        ("DEVICE#sensor_01", "READING#2026-04-20T14:00:00.000000Z"),
        ("DEVICE#sensor_01", "READING#2026-04-20T14:01:00.000000Z"),
        ("DEVICE#sensor_02", "READING#2026-04-20T13:58:00.000000Z"),
        ("DEVICE#sensor_02", "READING#2026-04-20T13:59:00.000000Z"),
        ("DEVICE#sensor_02", "READING#2026-04-20T14:00:00.000000Z"),
        ("DEVICE#sensor_03", "READING#2026-04-20T14:00:30.000000Z"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(keys, want);

    // The docs/design.md §9 sample row, as DynamoDB holds it.
    let raw = get(
        &t.client,
        &t.name,
        "DEVICE#sensor_01",
        "READING#2026-04-20T14:00:00.000000Z",
    )
    .await
    .unwrap();
    assert_eq!(
        raw["ttl"],
        AttributeValue::N((ts("2026-04-20T14:00:00Z").epoch_seconds() + 30 * 86_400).to_string())
    );
    let AttributeValue::M(m) = &raw["metrics"] else {
        panic!("metrics is a map: {raw:?}")
    };
    assert_eq!(m["temperature"], AttributeValue::N("22.4".into()));
    assert_eq!(m["humidity"], AttributeValue::N("45".into()));
    let (r, shard) = stored[&want[1]].to_reading().unwrap();
    assert_eq!(shard, None);
    assert_eq!(r.metadata.unwrap()["fw"], "2.1.0");
    assert_eq!(r.metrics.len(), 4);
}

#[tokio::test]
async fn every_bad_record_is_quarantined_with_its_reason_and_good_ones_still_land() {
    let t = TestTable::new("ingest-bad").await;
    let ingest = local_ingest(&t.client, config(&t.name), t.client.clone());
    let event = load_event("events/kinesis-bad-records.json");
    let (resp, stats) = ingest.process(&event, soon()).await.unwrap();
    assert!(
        failures(&resp).is_empty(),
        "bad input never fails the batch"
    );

    use QuarantineReason::*;
    let expected = [
        NotJson,
        NotObjectOrArray,
        InvalidDeviceId,
        InvalidTimestamp,
        TimestampInFuture,
        TimestampTooOld,
        InvalidMetric,
        TooManyMetrics,
        ArrayTooLong,
        InvalidMetadata,
    ];
    let items = scan(&t.client, &t.name).await;
    let q = quarantined(&items);
    assert_eq!(q.len(), expected.len());
    for ((item, want), record) in q.iter().zip(expected).zip(&event.records) {
        assert_eq!(item.reason, want, "{}", item.message);
        assert_eq!(item.sequence_number, record.kinesis.sequence_number);
        assert_eq!(item.payload, record.kinesis.data.0, "raw bytes kept");
        assert!(!item.message.is_empty());
    }
    assert_eq!(stats.quarantined, expected.len() as u64);
    // The last record is valid and is stored despite the ten bad ones before it.
    let r = readings(&items);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].sk, "READING#2026-04-20T14:02:00.000000Z");
}

#[tokio::test]
async fn a_bad_record_of_a_whole_megabyte_is_quarantined_whole() {
    // GIVEN a record as large as Kinesis allows (1 MiB), not valid JSON, and an oversized one
    let t = TestTable::new("ingest-large").await;
    let mut c = config(&t.name);
    c.max_payload_bytes = 100 * 1024;
    let ingest = local_ingest(&t.client, c, t.client.clone());
    let garbage: String = (0..1024 * 1024)
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    let big = format!(
        r#"{{"deviceId":"a","timestamp":"2026-04-20T14:00:00Z","metadata":{{"blob":"{}"}}}}"#,
        "x".repeat(150 * 1024)
    );
    let (resp, _) = ingest
        .process(&event_of(&[garbage.clone(), big.clone()]), soon())
        .await
        .unwrap();
    assert!(failures(&resp).is_empty());
    // THEN both are kept byte for byte, the megabyte over several items
    let items = scan(&t.client, &t.name).await;
    let q = quarantined(&items);
    assert_eq!(q.len(), 2);
    assert_eq!(q[0].reason, QuarantineReason::PayloadTooLarge);
    assert_eq!(q[0].size, garbage.len() as u64);
    assert_eq!(q[0].parts, 4);
    assert_eq!(q[0].payload, garbage.as_bytes(), "the whole payload");
    assert_eq!(q[1].reason, QuarantineReason::PayloadTooLarge);
    assert_eq!(q[1].payload, big.as_bytes());
    assert_eq!(
        items.len(),
        4 + 1,
        "four items for the megabyte, one for the other"
    );
}

#[tokio::test]
async fn quarantine_mode_rejects_unregistered_devices_and_passes_registered_ones() {
    let t = TestTable::new("ingest-unknown").await;
    let device = DeviceItem::new(
        dev("sensor_01"),
        DeviceStatus::Active,
        ts("2026-01-01T00:00:00Z"),
    );
    t.put(&device).await;
    let mut c = config(&t.name);
    c.unknown_devices = UnknownDevices::Quarantine;
    let ingest = local_ingest(&t.client, c, t.client.clone());
    let e = event_of(&[
        reading_json("sensor_01", "2026-04-20T14:00:00Z", 1.0),
        format!(
            "[{},{}]",
            reading_json("sensor_01", "2026-04-20T14:01:00Z", 1.0),
            reading_json("ghost_9", "2026-04-20T14:01:00Z", 1.0)
        ),
    ]);
    let (resp, stats) = ingest.process(&e, soon()).await.unwrap();
    assert!(failures(&resp).is_empty());
    assert_eq!(stats.readings, 1);
    let items = scan(&t.client, &t.name).await;
    let q = quarantined(&items);
    assert_eq!(q.len(), 1);
    assert_eq!(q[0].reason, QuarantineReason::UnknownDevice);
    assert_eq!(
        q[0].sequence_number,
        seq(1),
        "the whole record, both readings"
    );
    assert_eq!(readings(&items).len(), 1);
}

#[tokio::test]
async fn a_replayed_batch_leaves_the_table_byte_for_byte_identical() {
    let t = TestTable::new("ingest-replay").await;
    let ingest = local_ingest(&t.client, config(&t.name), t.client.clone());
    let good = load_event("events/kinesis-readings.json");
    let bad = load_event("events/kinesis-bad-records.json");
    ingest.process(&good, soon()).await.unwrap();
    ingest.process(&bad, soon()).await.unwrap();
    let before = scan(&t.client, &t.name).await;
    assert_eq!(before.len(), 7 + 10 + 1 + metric_name_sets(&before));

    // WHEN the batches are delivered again, whole and bisected, in another container
    let other = local_ingest(&t.client, config(&t.name), t.client.clone());
    other.process(&bad, soon()).await.unwrap();
    let mut half = good.clone();
    half.records.truncate(2);
    other.process(&half, soon()).await.unwrap();
    other.process(&good, soon()).await.unwrap();

    // THEN not one attribute changed
    assert_eq!(scan(&t.client, &t.name).await, before);
}

#[tokio::test]
async fn hot_device_readings_go_to_the_shard_of_their_time() {
    let t = TestTable::new("ingest-hot").await;
    let history = LayoutHistory::default()
        .with_change(ts("2026-04-20T14:00:00Z"), 4)
        .unwrap();
    let config_item = LayoutHistoryItem::new(&dev("hot_01"), history.clone());
    t.client
        .put_item()
        .table_name(&t.name)
        .set_item(Some(to_item(&config_item).unwrap()))
        .send()
        .await
        .unwrap();
    let ingest = local_ingest(&t.client, config(&t.name), t.client.clone());
    let times = [
        "2026-04-20T13:59:59.999000Z",
        "2026-04-20T14:00:00.000000Z",
        "2026-04-20T14:00:00.001000Z",
        "2026-04-20T14:00:00.002000Z",
        "2026-04-20T14:00:00.003000Z",
        "2026-04-20T14:00:00.004000Z",
        "2026-04-20T14:00:00.005000Z",
    ];
    let payloads: Vec<String> = times
        .iter()
        .map(|at| reading_json("hot_01", at, 1.0))
        .chain([reading_json("cold_01", "2026-04-20T14:00:00Z", 1.0)])
        .collect();
    let (resp, _) = ingest.process(&event_of(&payloads), soon()).await.unwrap();
    assert!(failures(&resp).is_empty());
    let mut used = std::collections::BTreeSet::new();
    for at in times {
        let at = ts(at);
        let shard = history.partition_at(at);
        used.insert(shard);
        let pk = reading_pk(&dev("hot_01"), shard);
        assert!(
            get(&t.client, &t.name, &pk, &reading_sk(at))
                .await
                .is_some(),
            "{at} not in {pk}"
        );
    }
    assert!(
        used.contains(&None),
        "before the change: the device's own partition"
    );
    assert!(used.len() > 2, "after it: spread over shards {used:?}");
    assert!(
        get(
            &t.client,
            &t.name,
            "DEVICE#cold_01",
            "READING#2026-04-20T14:00:00.000000Z"
        )
        .await
        .is_some()
    );
    let items = scan(&t.client, &t.name).await;
    assert_eq!(items.len(), 1 + times.len() + 1 + metric_name_sets(&items));
}

fn many_records(n: usize, devices: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let at = ts("2026-04-20T13:00:00Z")
                .plus_millis(i as i64 * 250)
                .unwrap();
            reading_json(
                &format!("dev_{:03}", i % devices),
                &at.to_string(),
                i as f64,
            )
        })
        .collect()
}

#[tokio::test]
async fn unprocessed_items_and_throttling_are_retried_with_nothing_lost() {
    let t = TestTable::new("ingest-flaky").await;
    let flaky = Flaky::new(t.client.clone());
    flaky.throttle_calls.store(3, Ordering::SeqCst);
    flaky.stingy_calls.store(8, Ordering::SeqCst);
    let ingest = local_ingest(&t.client, config(&t.name), flaky);
    let payloads = many_records(500, 20);
    let (resp, stats) = ingest.process(&event_of(&payloads), soon()).await.unwrap();
    assert!(failures(&resp).is_empty());
    // At least the injected ones (a busy DynamoDB Local may time out a few more). Readings
    // are inserts, 25 a call: a stingy call throttles half of its statements.
    assert!(stats.throttled + stats.unprocessed >= 11, "{stats:?}");
    assert!(stats.retries >= 11, "{stats:?}");
    assert_eq!(stats.written, 500);
    let items = scan(&t.client, &t.name).await;
    assert_eq!(readings(&items).len(), 500, "nothing lost");
}

#[tokio::test]
async fn a_persisting_failure_reports_the_earliest_record_not_fully_written() {
    // GIVEN writes of one partition that never succeed, first touched by record 20
    let t = TestTable::new("ingest-poison").await;
    let mut flaky = Flaky::new(t.client.clone());
    flaky.poison_pk = Some("DEVICE#poison".into());
    let ingest = local_ingest(&t.client, config(&t.name), flaky);
    let mut payloads = many_records(60, 5);
    payloads[20] = format!(
        "[{},{}]",
        reading_json("dev_000", "2026-04-20T14:03:00Z", 1.0),
        reading_json("poison", "2026-04-20T14:03:00Z", 1.0)
    );
    payloads[41] = reading_json("poison", "2026-04-20T14:04:00Z", 1.0);
    let event = event_of(&payloads);

    // WHEN the batch runs out of time retrying
    // Long enough for the healthy writes even on a busy shared DynamoDB Local; the poisoned
    // partition keeps the writer retrying until then.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (resp, stats) = ingest.process(&event, deadline).await.unwrap();

    // THEN exactly record 20 is reported, and every record before it is durable
    assert_eq!(failures(&resp), [seq(20)]);
    assert_eq!(stats.failed_items, 2);
    assert!(
        Instant::now() < deadline + Duration::from_secs(2),
        "kept to the deadline"
    );
    let items = scan(&t.client, &t.name).await;
    let stored: std::collections::HashSet<(String, String)> =
        items.iter().map(|i| (s(i, "pk"), s(i, "sk"))).collect();
    for (i, p) in payloads.iter().enumerate().take(20) {
        let v: serde_json::Value = serde_json::from_str(p).unwrap();
        let key = (
            format!("DEVICE#{}", v["deviceId"].as_str().unwrap()),
            format!("READING#{}", ts(v["timestamp"].as_str().unwrap())),
        );
        assert!(stored.contains(&key), "record {i} not durable");
    }
    // WHEN the mapping resumes from the reported record with the store healthy again
    let healthy = local_ingest(&t.client, config(&t.name), t.client.clone());
    let mut rest = event.clone();
    rest.records.drain(..20);
    let resp = healthy.handle(rest, soon()).await.unwrap();
    // THEN everything is there, once
    assert!(failures(&resp).is_empty());
    assert_eq!(readings(&scan(&t.client, &t.name).await).len(), 61);
}

#[tokio::test]
async fn a_large_batch_goes_through_whole() {
    // 3,000 records of 100 devices. Kinesis allows 10,000 a batch; the path is the same (one
    // conditional write per reading, 64 in flight), and DynamoDB Local serialises requests, so
    // the full size would only make the suite slower.
    let t = TestTable::new("ingest-large-batch").await;
    let ingest = local_ingest(&t.client, config(&t.name), t.client.clone());
    let event = event_of(&many_records(3_000, 100));
    let (resp, stats) = ingest
        .process(&event, Instant::now() + Duration::from_secs(1800))
        .await
        .unwrap();
    assert!(failures(&resp).is_empty());
    assert_eq!(stats.written, 3_000);
    let mut count = 0;
    let mut start = None;
    loop {
        let page = t
            .client
            .scan()
            .table_name(&t.name)
            .select(Select::Count)
            .set_exclusive_start_key(start)
            .send()
            .await
            .unwrap();
        count += page.count;
        match page.last_evaluated_key {
            Some(k) if !k.is_empty() => start = Some(k),
            _ => break,
        }
    }
    // every reading, and each of the 100 devices' metric names of the day
    assert_eq!(count, 3_000 + 100);
}

#[tokio::test]
async fn metric_values_whose_sums_stay_storable_are_stored_and_the_rest_quarantined() {
    // A value whose hourly or daily sum could leave DynamoDB's range (magnitude below 1e126)
    // would fail the aggregator's writes for good; a number DynamoDB refuses outright would
    // fail the reading's write on every retry. Metadata is only stored, so it may use
    // DynamoDB's whole range.
    let t = TestTable::new("ingest-numbers").await;
    let ingest = local_ingest(&t.client, config(&t.name), t.client.clone());
    let edge = [1e100, -1e100, 1e-100, -1e-100, 0.0];
    let mut payloads: Vec<String> = edge
        .iter()
        .enumerate()
        .map(|(i, v)| {
            serde_json::json!({"deviceId": "edge", "timestamp": 1_776_693_600_000_i64 + i as i64,
                "v": v, "metadata": {"n": 9.999_999_999_999_99e125, "deep": [[[{"x": -2e-130}]]]}})
            .to_string()
        })
        .collect();
    for beyond in ["1.1e100", "-9e-101", "1e126", "1e-131"] {
        payloads.push(format!(
            r#"{{"deviceId":"edge","timestamp":"2026-04-20T14:00:01Z","v":{beyond}}}"#
        ));
    }
    let (resp, stats) = ingest.process(&event_of(&payloads), soon()).await.unwrap();
    assert!(failures(&resp).is_empty(), "{stats:?}");
    assert_eq!(stats.readings, edge.len() as u64);
    assert_eq!(
        stats
            .quarantined_by_reason
            .get(&QuarantineReason::InvalidMetric),
        Some(&4)
    );
    let items = scan(&t.client, &t.name).await;
    let stored: Vec<f64> = readings(&items)
        .iter()
        .map(|r| r.metrics.values().next().copied().unwrap())
        .collect();
    // serde_json (without `float_roundtrip`) may parse extreme exponents 1 ulp off.
    for (got, want) in stored.iter().zip(edge) {
        assert!(
            *got == want || ((got - want) / want).abs() < 1e-15,
            "{got} != {want}"
        );
    }
    assert_eq!(stored.len(), edge.len());
}

#[tokio::test]
async fn an_unreadable_config_item_is_skipped_and_counted_and_ingest_goes_on() {
    // GIVEN a hot device's layout history and, beside it, a CONFIG item nobody can read
    let t = TestTable::new("ingest-poison-config").await;
    let history = LayoutHistory::default()
        .with_change(ts("2026-04-20T14:00:00Z"), 4)
        .unwrap();
    let good = to_item(&LayoutHistoryItem::new(&dev("hot_01"), history.clone())).unwrap();
    let mut bad = to_item(&LayoutHistoryItem::new(&dev("broken"), history.clone())).unwrap();
    bad.insert("epochs".into(), AttributeValue::S("garbage".into()));
    for item in [good, bad] {
        t.client
            .put_item()
            .table_name(&t.name)
            .set_item(Some(item))
            .send()
            .await
            .unwrap();
    }
    let ingest = local_ingest(&t.client, config(&t.name), t.client.clone());
    // WHEN a batch arrives
    let at = "2026-04-20T14:00:00.003000Z";
    let payloads = [
        reading_json("hot_01", at, 1.0),
        reading_json("broken", at, 2.0),
    ];
    let (resp, stats) = ingest.process(&event_of(&payloads), soon()).await.unwrap();
    // THEN it is written, the hot device still partitioned, the bad item counted
    assert!(failures(&resp).is_empty(), "{stats:?}");
    assert_eq!((stats.unreadable_items, stats.written), (1, 2));
    let pk = reading_pk(&dev("hot_01"), history.partition_at(ts(at)));
    assert!(
        get(&t.client, &t.name, &pk, &reading_sk(ts(at)))
            .await
            .is_some()
    );
    let pk = reading_pk(&dev("broken"), None);
    assert!(
        get(&t.client, &t.name, &pk, &reading_sk(ts(at)))
            .await
            .is_some()
    );
}

/// How many items are a device's metric names of a day (`DEVICE#<id>` / `METRICS#<day>`).
fn metric_name_sets(items: &[tidemark_store::Item]) -> usize {
    items
        .iter()
        .filter(|i| {
            matches!(
                EntityKey::parse(&s(i, "pk"), &s(i, "sk")),
                Ok(EntityKey::MetricNames { .. })
            )
        })
        .count()
}

/// The table's device directory without the daily cap on metric names (it keeps no name
/// sets and gives every device an unbounded cap): for readings larger than any capped device can send.
struct Uncapped(DynamoLookups);

impl DeviceDirectory for Uncapped {
    async fn existing_devices(
        &self,
        ids: &[DeviceId],
    ) -> Result<std::collections::HashSet<DeviceId>, tidemark_store::StoreError> {
        self.0.existing_devices(ids).await
    }

    async fn metric_caps(
        &self,
        ids: &[DeviceId],
    ) -> Result<std::collections::HashMap<DeviceId, u32>, tidemark_store::StoreError> {
        Ok(ids.iter().map(|id| (id.clone(), u32::MAX)).collect())
    }
}

/// [`local_ingest`] with the cap on metric names out of play ([`Uncapped`]).
fn uncapped_ingest(t: &TestTable) -> Ingest<aws_sdk_dynamodb::Client, DynamoLookups, Uncapped> {
    let lookups = DynamoLookups::new(t.client.clone(), t.name.clone());
    Ingest::from_parts(
        config(&t.name),
        t.client.clone(),
        lookups.clone(),
        Uncapped(lookups),
        Clock::fixed(now()),
    )
}

/// A gateway's record: `tags` metrics with long names, numbered from `first`, at `at`.
fn gateway_record(device: &str, at: &str, first: usize, tags: usize) -> String {
    let mut o = serde_json::Map::new();
    o.insert("deviceId".into(), device.into());
    o.insert("timestamp".into(), at.into());
    for i in first..first + tags {
        o.insert(format!("plc_{i:05}_{}", "x".repeat(50)), (i as f64).into());
    }
    serde_json::Value::Object(o).to_string()
}

#[tokio::test]
async fn a_reading_too_large_for_one_item_is_quarantined_whole_and_the_shard_moves_on() {
    // GIVEN a gateway that sends 8,000 tags with one timestamp, 32 a record (long tag names:
    // one item would hold about 600 KB, past DynamoDB's 400 KB; past any device's cap on
    // names per day too, which is out of play here), then another device's reading
    let t = TestTable::new("ingest-too-large").await;
    let ingest = uncapped_ingest(&t);
    let at = now().to_string();
    let mut payloads: Vec<String> = (0..250)
        .map(|r| gateway_record("gw", &at, r * 32, 32))
        .collect();
    payloads.push(reading_json("other", &at, 21.5));
    // WHEN the batch is handled, and handled again (a replay)
    let resp = ingest.handle(event_of(&payloads), soon()).await.unwrap();
    let again = ingest.handle(event_of(&payloads), soon()).await.unwrap();
    // THEN no record fails the batch: the shard moves on
    assert!(failures(&resp).is_empty(), "{:?}", failures(&resp));
    assert!(failures(&again).is_empty());
    // AND the gateway's records are kept whole, each with the reason; the other device's
    // reading is stored
    let items = scan(&t.client, &t.name).await;
    let q = quarantined(&items);
    let gw: Vec<_> = q
        .iter()
        .filter(|r| r.reason == QuarantineReason::ReadingTooLarge)
        .collect();
    assert_eq!(gw.len(), 250, "every record of the reading, once");
    assert!(
        gw.iter().all(|r| r.message.contains("400 KB")),
        "{}",
        gw[0].message
    );
    let stored = readings(&items);
    assert!(stored.iter().any(|r| r.pk == "DEVICE#other"), "{stored:?}");
}

#[tokio::test]
async fn a_reading_grown_past_one_item_by_later_batches_quarantines_only_what_does_not_fit() {
    let t = TestTable::new("ingest-grown").await;
    // (8,000 names: past any device's cap on names per day, out of play here)
    let ingest = uncapped_ingest(&t);
    let at = now().to_string();
    // GIVEN a reading of 3,200 tags stored (about 240 KB)
    let first: Vec<String> = (0..100)
        .map(|r| gateway_record("gw", &at, r * 32, 32))
        .collect();
    let (resp, stats) = ingest.process(&event_of(&first), soon()).await.unwrap();
    assert!(failures(&resp).is_empty(), "{stats:?}");
    // WHEN a later batch brings 4,800 more tags for the same timestamp
    let more: Vec<String> = (100..250)
        .map(|r| gateway_record("gw", &at, r * 32, 32))
        .collect();
    let (resp, stats) = ingest.process(&event_of(&more), soon()).await.unwrap();
    // THEN the batch succeeds, the stored reading keeps its 3,200 tags, and the records
    // that would not fit are quarantined with the reason
    assert!(failures(&resp).is_empty(), "{stats:?}");
    let items = scan(&t.client, &t.name).await;
    let stored = readings(&items);
    let gw = stored.iter().find(|r| r.pk == "DEVICE#gw").unwrap();
    assert!(gw.metrics.len() >= 3_200, "{}", gw.metrics.len());
    let q = quarantined(&items);
    assert!(!q.is_empty());
    assert!(
        q.iter()
            .all(|r| r.reason == QuarantineReason::ReadingTooLarge)
    );
    assert_eq!(
        gw.metrics.len() + q.len() * 32,
        8_000,
        "every tag stored or kept"
    );
}
