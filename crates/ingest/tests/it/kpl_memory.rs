//! What opening a KPL aggregate of many user records sharing one long key costs in memory: a
//! measurement run by hand, not a test of speed. Run it under `/usr/bin/time -v` (its
//! "Maximum resident set size"), with `USER_RECORDS` and `KEY_BYTES` (default: the issue's
//! 80,000 user records sharing a 500 KB key):
//!
//! ```sh
//! cargo test -p tidemark-ingest --test it --no-run
//! USER_RECORDS=80000 KEY_BYTES=512000 /usr/bin/time -v \
//!   target/debug/deps/it-<hash> --ignored --exact kpl_memory::opening_an_aggregate_of_one_shared_key
//! ```
//!
//! Measured (debug build, 2026-11-27): before user records shared their keys, each copied
//! it: 500, 2,000 and 8,000 user records sharing a 500 KB key peaked at 254 MB, 1.0 GB and
//! 4.0 GB (500 KB a user record), and the issue's 80,000 failed to allocate under an 8 GB
//! cap (about 40 GB needed); 65,536 sharing a 256-byte key, 31 MB. Now the 80,000 peak at
//! 14 MB (`corrupt_aggregate`: more user records than the bound), 60,000 sharing the 500 KB
//! key at 10 MB (`corrupt_aggregate`: the key), and 65,536 sharing a 256-byte key, a valid
//! aggregate, at 13 MB.

use md5::{Digest, Md5};
use prost::Message;
use tidemark_ingest::kpl::{self, AggregatedRecord, Payload, Record};

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
#[ignore = "a measurement: run by hand under /usr/bin/time -v"]
fn opening_an_aggregate_of_one_shared_key() {
    let n = setting("USER_RECORDS", 80_000);
    let key_bytes = setting("KEY_BYTES", 500 * 1024);
    let agg = AggregatedRecord {
        partition_key_table: vec!["k".repeat(key_bytes)],
        explicit_hash_key_table: vec![],
        records: vec![
            Record {
                partition_key_index: 0,
                explicit_hash_key_index: None,
                data: Vec::new(),
                tags: vec![],
            };
            n
        ],
    };
    let message = agg.encode_to_vec();
    drop(agg);
    let mut bytes = kpl::MAGIC.to_vec();
    bytes.extend_from_slice(&message);
    bytes.extend_from_slice(&Md5::digest(&message));
    drop(message);
    let opened = kpl::open(&bytes);
    let what = match &opened {
        Payload::Plain => "plain".to_owned(),
        Payload::Corrupt(r) => format!("corrupt: {r}"),
        Payload::Aggregate(rs) => format!("an aggregate of {} user records", rs.len()),
    };
    eprintln!(
        "{n} user records sharing a {key_bytes}-byte key, a record of {} bytes: {what}",
        bytes.len()
    );
}

/// What ingest takes for the largest aggregate it opens whose user records are all bad: each
/// becomes a quarantine item of its own (the memory store keeps them in memory too, so this is
/// an upper bound). Measured (debug build, 2026-11-27): 65,536 bad user records (a record of
/// 460 KB) peaked at 187 MB, 8,192 at 28 MB.
#[tokio::test]
#[ignore = "a measurement: run by hand under /usr/bin/time -v"]
async fn ingesting_an_aggregate_of_the_most_bad_user_records() {
    let n = setting("USER_RECORDS", kpl::MAX_USER_RECORDS);
    let bad: &[u8] = b"x";
    let aggregate = kpl::aggregate(&vec![("kpl_a", None, bad); n]);
    let event = crate::common::event_of(&[aggregate]);
    let store = tidemark_ingest::memory::MemoryStore::default();
    let ingest = tidemark_ingest::memory::memory_ingest(
        &store,
        crate::common::config("t"),
        crate::common::clock(),
    );
    let (response, stats) = ingest.process(&event, crate::common::soon()).await.unwrap();
    assert!(crate::common::failures(&response).is_empty());
    eprintln!(
        "{n} bad user records: {} quarantined, {} items in the store",
        stats.quarantined,
        store.len()
    );
}
