//! Every quarantine item fits in DynamoDB's 400 KB whatever the input (docs/design.md §4): keys and
//! message are cut to a bounded length with a hash of the whole value, and the payload is
//! split over as many items as it needs, each item sized as `tidemark_store::limits` counts
//! what DynamoDB counts.

use proptest::prelude::*;
use tidemark_schema::{QuarantineItem, QuarantineReason, QuarantineSource, Timestamp};
use tidemark_store::limits::{MAX_ITEM_BYTES, item_size};
use tidemark_store::{Item, to_item};

/// The items of a quarantined record as ingest writes them (the function version set, as a
/// set-aside record has it), and its payload joined back from them.
fn items(
    source: QuarantineSource<'_>,
    message: String,
    data: &[u8],
) -> (Vec<Item>, Vec<u8>, QuarantineItem) {
    let mut q = QuarantineItem::split(source, QuarantineReason::Unprocessable, message, data);
    q.record.function_version = Some("$LATEST".into());
    let mut out = vec![to_item(&q.record).unwrap()];
    let mut joined = q.record.payload.clone();
    for p in &q.parts {
        out.push(to_item(p).unwrap());
        joined.extend_from_slice(&p.payload);
    }
    (out, joined, q.record)
}

fn received() -> Timestamp {
    Timestamp::parse_rfc3339("2026-04-20T23:59:59.999999Z").unwrap()
}

/// Kinesis's longest sequence number: 129 digits.
fn longest_sequence() -> String {
    "9".repeat(129)
}

#[test]
fn the_worst_inputs_make_items_under_400_kb_and_keep_the_whole_payload() {
    let sequence = longest_sequence();
    let mib = 1024 * 1024;
    let widest_key = "𝄞".repeat(256); // Kinesis's longest key: 256 characters, 1,024 bytes
    let huge_key = "é".repeat(250 * 1024); // 500 KB: only an aggregate's table holds one
    let hash_key = "340282366920938463463374607431768211455";
    let huge_hash_key = "9".repeat(mib);
    let long_message = "ü".repeat(mib);
    let payloads: [Vec<u8>; 3] = [Vec::new(), vec![0xff; mib], vec![b'x'; 2 * mib + 17]];
    let mut worst = 0;
    for (pk, ehk) in [
        (widest_key.as_str(), Some(hash_key)),
        (huge_key.as_str(), Some(huge_hash_key.as_str())),
        (huge_key.as_str(), None),
    ] {
        for sub_record in [None, Some(u32::MAX)] {
            for data in &payloads {
                let source = QuarantineSource {
                    received: received(),
                    sequence: &sequence,
                    sub_record,
                    partition_key: pk,
                    explicit_hash_key: ehk,
                };
                let (items, joined, record) = items(source, long_message.clone(), data);
                for i in &items {
                    let size = item_size(i);
                    worst = worst.max(size);
                    assert!(size <= MAX_ITEM_BYTES, "an item of {size} bytes");
                }
                assert!(joined == *data, "the whole payload, in order");
                assert_eq!(record.size, data.len() as u64);
                assert_eq!(usize::from(record.parts), items.len());
            }
        }
    }
    eprintln!("largest quarantine item: {worst} bytes (limit {MAX_ITEM_BYTES})");
    assert!(
        worst > QuarantineItem::PART_BYTES,
        "a full part was measured"
    );
}

/// A string of `n` characters, each `width` bytes of UTF-8.
fn text(n: usize, width: u8) -> String {
    let c = match width {
        1 => 'k',
        2 => 'é',
        3 => '€',
        _ => '𝄞',
    };
    std::iter::repeat_n(c, n).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn every_quarantine_item_fits_in_400_kb_whatever_the_sizes(
        payload in 0usize..=(2 * 1024 * 1024 + 1),
        pk in (0usize..=300_000, 1u8..=4),
        ehk in proptest::option::of(0usize..=200_000),
        message in (0usize..=200_000, 1u8..=4),
        sub_record in proptest::option::of(any::<u32>()),
        sequence in 1usize..=129,
    ) {
        let pk = text(pk.0, pk.1);
        let ehk = ehk.map(|n| "9".repeat(n));
        let data = vec![0x5a; payload];
        let sequence = "7".repeat(sequence);
        let source = QuarantineSource {
            received: received(),
            sequence: &sequence,
            sub_record,
            partition_key: &pk,
            explicit_hash_key: ehk.as_deref(),
        };
        let (items, joined, record) = items(source, text(message.0, message.1), &data);
        for i in &items {
            prop_assert!(item_size(i) <= MAX_ITEM_BYTES, "an item of {} bytes", item_size(i));
        }
        prop_assert!(joined == data);
        // A field is cut exactly when it is longer than its bound, and then carries a hash.
        prop_assert_eq!(record.partition_key_sha256.is_some(), pk.len() > QuarantineItem::MAX_KEY_BYTES);
        prop_assert!(pk.starts_with(&record.partition_key));
        prop_assert_eq!(
            record.explicit_hash_key_sha256.is_some(),
            ehk.as_ref().is_some_and(|k| k.len() > QuarantineItem::MAX_KEY_BYTES)
        );
    }
}
