//! KPL aggregates past a limit Kinesis sets on records, which nothing enforces inside an
//! aggregate (docs/design.md §3): a partition key over 256 characters, an explicit hash key
//! that is not a 128-bit decimal, more user records than any aggregate of readings holds.
//! Each is quarantined whole as `corrupt_aggregate`, in items DynamoDB takes (the memory
//! store refuses items over 400 KB as DynamoDB does), and the batch moves on: the record after it
//! is stored.

use crate::common::*;
use tidemark_ingest::kpl;
use tidemark_ingest::memory::{MemoryStore, memory_ingest};
use tidemark_schema::{QuarantineItem, QuarantinePartItem, QuarantineReason};
use tidemark_store::limits::{MAX_ITEM_BYTES, item_size};

/// The quarantined records of the store, with their payloads joined from their parts.
fn quarantined(store: &MemoryStore) -> Vec<(QuarantineItem, Vec<u8>)> {
    let items = store.items.scan();
    let mut out = Vec::new();
    for i in &items {
        assert!(
            item_size(i) <= MAX_ITEM_BYTES,
            "an item of {} bytes",
            item_size(i)
        );
    }
    for i in items
        .iter()
        .filter(|i| s(i, "pk").starts_with("QUARANTINE#"))
    {
        let Ok(q) = tidemark_store::from_item::<QuarantineItem>(i.clone()) else {
            continue; // a part
        };
        let mut payload = q.payload.clone();
        for k in q.part_keys() {
            let part: QuarantinePartItem =
                tidemark_store::from_item(store.items.get(&k).expect("every part is written"))
                    .unwrap();
            payload.extend(part.payload);
        }
        out.push((q, payload));
    }
    out
}

/// A batch of the aggregate, then an ordinary reading of another device.
async fn after(aggregate: &[u8]) -> (MemoryStore, tidemark_ingest::Report) {
    let store = MemoryStore::default();
    let next = reading_json("sensor_02", "2026-04-20T14:01:00Z", 21.5);
    let event = event_of(&[aggregate, next.as_bytes()]);
    let ingest = memory_ingest(&store, config("t"), clock());
    let (response, stats) = ingest.process(&event, soon()).await.unwrap();
    assert!(
        failures(&response).is_empty(),
        "the batch moves on: {stats:?}"
    );
    (store, stats)
}

fn assert_quarantined_whole(store: &MemoryStore, aggregate: &[u8], limit: &str) {
    let q = quarantined(store);
    assert_eq!(
        q.len(),
        1,
        "{:#?}",
        q.iter().map(|x| &x.0).collect::<Vec<_>>()
    );
    let (item, payload) = &q[0];
    assert_eq!(item.reason, QuarantineReason::CorruptAggregate);
    assert_eq!(item.sub_record, None, "the aggregate is quarantined whole");
    assert_eq!(item.sequence_number, seq(0));
    assert_eq!(payload, aggregate, "its bytes, whole");
    assert!(item.message.contains(limit), "{}", item.message);
}

fn assert_next_record_stored(store: &MemoryStore) {
    let stored = readings(&store.items.scan());
    assert!(
        stored
            .iter()
            .any(|r| r.pk == "DEVICE#sensor_02" && r.sk.contains("14:01:00")),
        "the record after the aggregate is stored: {stored:?}"
    );
}

#[tokio::test]
async fn an_aggregate_with_a_partition_key_over_256_characters_is_quarantined_whole() {
    // GIVEN an aggregate whose table holds a 300-character key, naming a non-JSON user
    // record, and a valid user record beside it
    let long = "k".repeat(300);
    let valid = reading_json("kpl_a", "2026-04-20T14:00:00Z", 20.0);
    let aggregate = kpl::aggregate(&[
        (&long, None, b"not json {"),
        ("kpl_a", None, valid.as_bytes()),
    ]);
    let (store, stats) = after(&aggregate).await;
    // THEN the whole aggregate is quarantined, naming the limit, and nothing of it stored
    assert_quarantined_whole(&store, &aggregate, "300 characters");
    assert_eq!(
        stats
            .quarantined_by_reason
            .get(&QuarantineReason::CorruptAggregate),
        Some(&1)
    );
    let stored = readings(&store.items.scan());
    assert!(stored.iter().all(|r| r.pk != "DEVICE#kpl_a"), "{stored:?}");
    // AND the record after it is stored
    assert_next_record_stored(&store);
}

#[tokio::test]
async fn an_aggregate_whose_500_kb_key_would_make_a_quarantine_item_too_large_moves_on() {
    // GIVEN the issue's aggregate: a non-JSON user record under a 500 KB partition key (its
    // quarantine item, key included, would pass DynamoDB's 400 KB)
    let long = "k".repeat(500 * 1024);
    let aggregate = kpl::aggregate(&[(&long, None, b"not json {")]);
    let (store, _) = after(&aggregate).await;
    // THEN it is quarantined whole, in items DynamoDB takes, and the next record is stored
    assert_quarantined_whole(&store, &aggregate, "512000 characters");
    assert_next_record_stored(&store);
}

#[tokio::test]
async fn an_aggregate_with_an_explicit_hash_key_past_128_bits_is_quarantined_whole() {
    let aggregate = kpl::aggregate(&[(
        "kpl_a",
        Some("340282366920938463463374607431768211456"),
        br#"{"deviceId":"kpl_a","timestamp":"2026-04-20T14:00:00Z","t":1}"#,
    )]);
    let (store, _) = after(&aggregate).await;
    assert_quarantined_whole(&store, &aggregate, "explicit hash key");
    assert_next_record_stored(&store);
}

#[tokio::test]
async fn an_aggregate_of_more_user_records_than_the_bound_is_quarantined_whole() {
    // GIVEN an aggregate of one more empty user record than the bound (each would otherwise
    // be a quarantine item of its own)
    let empty: &[u8] = b"";
    let records = vec![("kpl_a", None, empty); kpl::MAX_USER_RECORDS + 1];
    let aggregate = kpl::aggregate(&records);
    let (store, stats) = after(&aggregate).await;
    assert_quarantined_whole(&store, &aggregate, "65537 user records");
    assert_eq!(stats.quarantined, 1, "one item, not one per user record");
    assert_next_record_stored(&store);
}

#[test]
fn the_units_of_an_aggregate_share_its_keys_rather_than_copying_them() {
    // GIVEN an aggregate of a thousand user records naming one 256-character key
    let key = "k".repeat(kpl::MAX_PARTITION_KEY_CHARS);
    let valid = reading_json("kpl_a", "2026-04-20T14:00:00Z", 20.0);
    let records = vec![(key.as_str(), Some("1234"), valid.as_bytes()); 1000];
    let event = event_of(&[kpl::aggregate(&records)]);
    // THEN every unit holds the one allocation of each key
    let (units, _) = tidemark_ingest::units::units(&event.records, now(), &config("t"));
    assert_eq!(units.len(), 1000);
    let shared = |u: &tidemark_ingest::units::Unit<'_>| match &u.partition_key {
        tidemark_ingest::units::Key::Shared(k) => k.clone(),
        other => panic!("a user record's key is shared: {other:?}"),
    };
    let first = shared(&units[0]);
    let first_ehk = units[0].explicit_hash_key.clone().unwrap();
    assert_eq!(&*first, key);
    for u in &units {
        assert!(std::sync::Arc::ptr_eq(&first, &shared(u)));
        assert!(std::sync::Arc::ptr_eq(
            &first_ehk,
            u.explicit_hash_key.as_ref().unwrap()
        ));
    }
}
