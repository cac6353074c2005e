//! No record stalls a shard (docs/design.md §4, "What is retried, what is set aside"): a
//! record that fails for good is retried until it has failed
//! [`SET_ASIDE_AFTER`] times, then set aside in the quarantine as `unprocessable` and the
//! batch moves on; a transient failure is retried for as long as it lasts and never set aside.

use crate::common::*;
use aws_lambda_events::event::kinesis::KinesisEvent;
use tidemark_ingest::memory::{MemoryStore, memory_ingest};
use tidemark_schema::{QuarantineItem, QuarantineReason};
use tidemark_store::failures::SET_ASIDE_AFTER;

fn quarantined(store: &MemoryStore) -> Vec<QuarantineItem> {
    store
        .items
        .scan()
        .into_iter()
        .filter(|i| s(i, "pk").starts_with("QUARANTINE#") && i.contains_key("reason"))
        .map(|i| tidemark_store::from_item(i).unwrap())
        .collect()
}

fn failure_counts(store: &MemoryStore) -> usize {
    store
        .items
        .scan()
        .iter()
        .filter(|i| s(i, "sk").starts_with("FAILURES#"))
        .count()
}

fn stored_devices(store: &MemoryStore) -> Vec<String> {
    let mut d: Vec<String> = readings(&store.items.scan())
        .iter()
        .map(|r| r.pk.clone())
        .collect();
    d.sort();
    d
}

/// A reading of `bad` (whose item DynamoDB refuses), then one of `good`.
fn two_devices() -> KinesisEvent {
    event_of(&[
        reading_json("bad", "2026-04-20T14:01:00Z", 1.0),
        reading_json("good", "2026-04-20T14:01:00Z", 2.0),
    ])
}

#[tokio::test]
async fn a_record_refused_for_good_is_retried_then_set_aside_and_the_shard_moves_on() {
    let store = MemoryStore::default();
    *store.refuse_pk.lock().unwrap() = Some("DEVICE#bad".into());
    let ingest = memory_ingest(&store, config("t"), clock());
    let ev = two_devices();
    for attempt in 1..SET_ASIDE_AFTER {
        let r = ingest.handle(ev.clone(), soon()).await.unwrap();
        assert_eq!(failures(&r), vec![seq(0)], "attempt {attempt} is retried");
        assert!(quarantined(&store).is_empty(), "nothing set aside yet");
    }
    let r = ingest.handle(ev.clone(), soon()).await.unwrap();
    assert!(failures(&r).is_empty(), "the shard moves on");
    let q = quarantined(&store);
    assert_eq!(q.len(), 1, "{q:?}");
    assert_eq!(q[0].reason, QuarantineReason::Unprocessable);
    assert_eq!(q[0].sequence_number, seq(0));
    assert!(
        q[0].message.contains("ValidationException"),
        "{}",
        q[0].message
    );
    assert_eq!(
        q[0].payload, ev.records[0].kinesis.data.0,
        "its bytes, whole"
    );
    assert_eq!(stored_devices(&store), vec!["DEVICE#good"]);

    // A replay of the batch (Lambda may deliver it again) sets it aside again, to the same
    // quarantine item, and still moves on.
    let r = ingest.handle(ev, soon()).await.unwrap();
    assert!(failures(&r).is_empty());
    assert_eq!(quarantined(&store).len(), 1);
}

#[tokio::test]
async fn a_transient_failure_is_retried_as_long_as_it_lasts_and_never_set_aside() {
    let store = MemoryStore::default();
    let flaky = Flaky {
        poison_pk: Some("DEVICE#bad".into()),
        ..Flaky::new(&store)
    };
    let ingest = tidemark_ingest::Ingest::from_parts(
        config("t"),
        flaky,
        &store,
        &store,
        tidemark_schema::Clock::fixed(now()),
    );
    for _ in 0..(SET_ASIDE_AFTER * 3) {
        let r = ingest
            .handle(
                two_devices(),
                std::time::Instant::now() + std::time::Duration::from_millis(300),
            )
            .await
            .unwrap();
        assert_eq!(failures(&r), vec![seq(0)]);
    }
    assert!(
        quarantined(&store).is_empty(),
        "an outage sets nothing aside"
    );
    assert_eq!(failure_counts(&store), 0, "and counts nothing");
}

#[tokio::test]
async fn a_panic_fails_the_batch_until_bisected_to_its_record_which_is_then_set_aside() {
    let store = MemoryStore::default();
    *store.panic_pk.lock().unwrap() = Some("DEVICE#bad".into());
    let ingest = memory_ingest(&store, config("t"), clock());
    let ev = two_devices();
    // Two records: not yet known whose the panic is, so the invocation fails and Lambda
    // bisects the batch.
    let e = ingest.handle(ev.clone(), soon()).await.unwrap_err();
    assert!(e.to_string().contains("injected bug"), "{e}");
    assert!(quarantined(&store).is_empty());
    let mut first = ev.clone();
    first.records.truncate(1);
    let mut second = ev.clone();
    second.records.remove(0);
    for _ in 1..SET_ASIDE_AFTER {
        assert!(ingest.handle(first.clone(), soon()).await.is_err());
    }
    let r = ingest.handle(first, soon()).await.unwrap();
    assert!(failures(&r).is_empty(), "set aside on its third failure");
    let q = quarantined(&store);
    assert_eq!(q.len(), 1);
    assert_eq!(q[0].reason, QuarantineReason::Unprocessable);
    assert!(q[0].message.contains("panicked"), "{}", q[0].message);
    let r = ingest.handle(second, soon()).await.unwrap();
    assert!(failures(&r).is_empty());
    assert_eq!(stored_devices(&store), vec!["DEVICE#good"]);
}

#[tokio::test]
async fn a_packed_slot_refused_for_good_sets_aside_every_record_with_a_reading_in_it() {
    let store = MemoryStore::default();
    *store.refuse_pk.lock().unwrap() = Some("DEVICE#bad".into());
    // The fleet packs in 60 s slots, recorded long before these readings.
    store.layout_histories.lock().unwrap().push(
        tidemark_schema::LayoutHistoryItem::default_layout(
            tidemark_schema::LayoutHistory::default()
                .with_layout(
                    ts("2026-04-20T00:00:00Z"),
                    tidemark_schema::Layout::packed(tidemark_schema::SlotLen::new(60).unwrap()),
                )
                .unwrap(),
        ),
    );
    let ingest = memory_ingest(&store, config("t"), clock());
    // Two records of the refused device in one slot, then one of a healthy device.
    let ev = event_of(&[
        reading_json("bad", "2026-04-20T14:01:00Z", 1.0),
        reading_json("bad", "2026-04-20T14:01:30Z", 2.0),
        reading_json("good", "2026-04-20T14:01:00Z", 3.0),
    ]);
    for _ in 1..SET_ASIDE_AFTER {
        let r = ingest.handle(ev.clone(), soon()).await.unwrap();
        assert_eq!(failures(&r), vec![seq(0)]);
    }
    let r = ingest.handle(ev, soon()).await.unwrap();
    assert!(failures(&r).is_empty(), "the shard moves on");
    let mut q: Vec<String> = quarantined(&store)
        .into_iter()
        .map(|q| {
            assert_eq!(q.reason, QuarantineReason::Unprocessable);
            q.sequence_number
        })
        .collect();
    q.sort();
    assert_eq!(q, vec![seq(0), seq(1)], "both records of the refused slot");
}
