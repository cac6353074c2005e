//! `tidemark-admin redrive --set-aside` against DynamoDB Local: records the pipeline set
//! aside are fed through ingest again after a fix; what ingest stores leaves the quarantine,
//! what it now rejects stays with its new reason.

use tidemark_admin::set_aside::{redrive_set_aside, set_aside_of};
use tidemark_ingest::{Ingest, IngestConfig, Rejection, quarantine_items};
use tidemark_schema::{QuarantineReason, QuarantineSource, Timestamp};
use tidemark_testkit::TestTable;

/// Now, to the millisecond (Kinesis stamps arrivals in milliseconds), at half past the
/// second before: an arrival whose milliseconds end in zeros is written `….5` in an event's
/// epoch seconds, which a decoder reading the fraction's digits as milliseconds takes for
/// 5 ms, and a re-driven record would then miss its own quarantine item.
fn now() -> Timestamp {
    let ms = Timestamp::now().epoch_millis();
    Timestamp::from_epoch_millis(ms - ms.rem_euclid(1000) - 500).unwrap()
}

/// Sets `data` aside as ingest does on a record's third permanent failure.
async fn set_aside(t: &TestTable, sequence: &str, data: &[u8]) {
    let source = QuarantineSource {
        received: now(),
        sequence,
        sub_record: None,
        partition_key: "sensor_01",
        explicit_hash_key: None,
    };
    let rejection = Rejection::new(
        QuarantineReason::Unprocessable,
        "set aside after failing 3 times: a bug since fixed",
    );
    for item in quarantine_items(source, data, &rejection, Some("41")).unwrap() {
        t.put_item(item).await;
    }
}

#[tokio::test]
async fn set_aside_records_are_stored_after_a_fix_and_leave_the_quarantine() {
    let t = TestTable::new("admin-set-aside").await;
    let at = now().minus_millis(60_000).unwrap();
    let reading = format!(r#"{{"deviceId":"sensor_01","timestamp":"{at}","temperature":21.5}}"#);
    // A large one too: its bytes span several quarantine items.
    let big_meta = "x".repeat(500);
    let wide = format!(
        r#"{{"deviceId":"sensor_02","timestamp":"{at}","temperature":3,"metadata":{{"note":"{big_meta}"}}}}"#
    );
    set_aside(
        &t,
        "49590338271490256608559692538361571095921575989136580001",
        reading.as_bytes(),
    )
    .await;
    set_aside(
        &t,
        "49590338271490256608559692538361571095921575989136580002",
        wide.as_bytes(),
    )
    .await;
    set_aside(
        &t,
        "49590338271490256608559692538361571095921575989136580003",
        b"not json",
    )
    .await;
    let day = now().day();
    assert_eq!(
        set_aside_of(&t.client, &t.name, day).await.unwrap().len(),
        3
    );

    let ingest = Ingest::new(t.client.clone(), IngestConfig::new(t.name.clone()));
    let r = redrive_set_aside(&t.client, &t.name, &ingest, &[day])
        .await
        .unwrap();
    assert_eq!((r.found, r.stored, r.rejected), (3, 2, 1), "{r:?}");
    assert!(r.still_failing.is_empty());

    let items = t.scan().await;
    let sk = |i: &tidemark_store::Item| i["sk"].as_s().unwrap().clone();
    let readings = items
        .iter()
        .filter(|i| sk(i).starts_with("READING#"))
        .count();
    assert_eq!(readings, 2, "both readings stored");
    let left = set_aside_of(&t.client, &t.name, day).await.unwrap();
    let left: Vec<&str> = left.iter().map(|s| s.record.sk.as_str()).collect();
    assert!(left.is_empty(), "still set aside: {left:?}");
    let reasons: Vec<String> = items
        .iter()
        .filter_map(|i| i.get("reason").and_then(|r| r.as_s().ok()).cloned())
        .collect();
    assert_eq!(
        reasons,
        vec!["not_json"],
        "the bad one stays, with its reason"
    );

    // Run again: nothing left to do.
    let r = redrive_set_aside(&t.client, &t.name, &ingest, &[day])
        .await
        .unwrap();
    assert_eq!(r.found, 0);
}
