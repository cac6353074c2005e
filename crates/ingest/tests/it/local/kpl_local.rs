//! KPL-aggregated records against DynamoDB Local, from `events/kinesis-kpl.json`, which
//! AWS's own aggregation library wrote (`scripts/kpl-fixtures.sh`): each user record is a
//! record of its own, a bad one is quarantined alone, a corrupt aggregate whole, and the
//! checkpoint stays on Kinesis records.

use std::time::{Duration, Instant};

use crate::common::*;
use tidemark_schema::{QuarantineItem, QuarantineReason};
use tidemark_store::from_item;
use tidemark_testkit::TestTable;

const EVENT: &str = "events/kinesis-kpl.json";

fn quarantined(items: &[tidemark_store::Item]) -> Vec<QuarantineItem> {
    items
        .iter()
        .filter(|i| s(i, "pk").starts_with("QUARANTINE#"))
        .map(|i| from_item(i.clone()).unwrap())
        .collect()
}

/// (device, time, metric, value) of every stored reading, sorted.
fn stored(items: &[tidemark_store::Item]) -> Vec<(String, String, String, f64)> {
    let mut out = Vec::new();
    for r in readings(items) {
        for (m, v) in &r.metrics {
            out.push((
                r.pk.trim_start_matches("DEVICE#").to_owned(),
                r.sk.trim_start_matches("READING#").to_owned(),
                m.to_string(),
                *v,
            ));
        }
    }
    out.sort_by(|a, b| a.partial_cmp(b).unwrap());
    out
}

#[tokio::test]
async fn each_user_record_of_an_aggregate_is_stored_and_a_bad_one_quarantined_alone() {
    let t = TestTable::new("ingest-kpl").await;
    let ingest = local_ingest(&t.client, config(&t.name), t.client.clone());
    let event = load_event(EVENT);
    let (resp, stats) = ingest.process(&event, soon()).await.unwrap();
    assert!(
        failures(&resp).is_empty(),
        "bad input never fails the batch"
    );
    assert_eq!(stats.records, 4);
    assert_eq!(
        stats.user_records, 5,
        "five user records in the good aggregate"
    );

    let items = scan(&t.client, &t.name).await;
    let v = |d: &str, at: &str, m: &str, x: f64| (d.into(), at.into(), m.into(), x);
    assert_eq!(
        stored(&items),
        vec![
            v("kpl_a", "2026-04-20T14:00:00.000000Z", "humidity", 40.0),
            v("kpl_a", "2026-04-20T14:00:00.000000Z", "temperature", 20.5),
            v("kpl_a", "2026-04-20T14:00:10.000000Z", "temperature", 20.6),
            v("kpl_a", "2026-04-20T14:00:20.000000Z", "temperature", 20.7),
            v("kpl_b", "2026-04-20T14:00:00.000000Z", "temperature", 21.0),
            v(
                "sensor_01",
                "2026-04-20T14:00:00.000000Z",
                "temperature",
                22.4
            ),
        ],
        "every valid user record stored, same-timestamp ones merged into one reading"
    );

    let mut q = quarantined(&items);
    q.sort_by(|a, b| a.sk.cmp(&b.sk));
    assert_eq!(q.len(), 3, "{q:#?}");
    let seq = |i: usize| event.records[i].kinesis.sequence_number.clone();
    // The bad user record alone: its index, its own partition key and bytes.
    let alone = q.iter().find(|x| x.sub_record.is_some()).unwrap();
    assert_eq!(alone.reason, QuarantineReason::NotJson);
    assert_eq!(alone.sequence_number, seq(0));
    assert_eq!(alone.sub_record, Some(2));
    assert_eq!(alone.partition_key, "kpl_a");
    assert_eq!(alone.payload, b"not json {");
    assert!(alone.message.contains("user record 2"), "{}", alone.message);
    // The damaged aggregates whole, with the reason.
    for i in [2, 3] {
        let whole = q.iter().find(|x| x.sequence_number == seq(i)).unwrap();
        assert_eq!(whole.reason, QuarantineReason::CorruptAggregate);
        assert_eq!(whole.sub_record, None);
        assert_eq!(whole.payload, event.records[i].kinesis.data.0);
        assert!(whole.message.contains("MD5"), "{}", whole.message);
    }
    assert_eq!(stats.quarantined, 3);

    // A replay, whole and bisected, changes nothing.
    let again = local_ingest(&t.client, config(&t.name), t.client.clone());
    let mut half = event.clone();
    half.records.truncate(1);
    again.process(&half, soon()).await.unwrap();
    again.process(&event, soon()).await.unwrap();
    assert_eq!(scan(&t.client, &t.name).await, items);
}

#[tokio::test]
async fn a_write_failing_inside_an_aggregate_reports_the_aggregates_sequence_number() {
    // GIVEN writes of kpl_b's partition that never succeed: kpl_b is a user record of the
    // first Kinesis record
    let t = TestTable::new("ingest-kpl-fail").await;
    let mut flaky = Flaky::new(t.client.clone());
    flaky.poison_pk = Some("DEVICE#kpl_b".into());
    let ingest = local_ingest(&t.client, config(&t.name), flaky);
    let event = load_event(EVENT);
    let deadline = Instant::now() + Duration::from_secs(20);
    let (resp, _) = ingest.process(&event, deadline).await.unwrap();

    // THEN the checkpoint is the aggregate's own Kinesis record
    assert_eq!(
        failures(&resp),
        [event.records[0].kinesis.sequence_number.clone()]
    );

    // WHEN the mapping retries from it with the store healthy
    let healthy = local_ingest(&t.client, config(&t.name), t.client.clone());
    let (resp, _) = healthy.process(&event, soon()).await.unwrap();
    assert!(failures(&resp).is_empty());
    // THEN everything is there once: the siblings written the first time are not doubled
    let items = scan(&t.client, &t.name).await;
    assert_eq!(readings(&items).len(), 5);
    assert_eq!(quarantined(&items).len(), 3);
    let kpl_a = readings(&items)
        .into_iter()
        .find(|r| r.pk == "DEVICE#kpl_a" && r.sk.ends_with("14:00:00.000000Z"))
        .unwrap();
    assert_eq!(kpl_a.metrics.len(), 2);
}
