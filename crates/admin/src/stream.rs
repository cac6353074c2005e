//! Reading a table's stream from "now" on, through [`DynamoDbStreamSource`] (the same
//! GetShardIterator/GetRecords code devstack's emulated mapping uses), and the fence items
//! whose records mark positions in a source partition's stream order.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use aws_lambda_events::event::dynamodb::EventRecord;
use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::keys::FENCE_SK;
use tidemark_streams::{DynamoDbStreamSource, EventSource, Start};

use crate::AdminError;
use crate::window::{ReadingRecord, reading_records};

/// How long a fence may take to show up in the stream before the rebuild gives up.
const FENCE_WAIT: Duration = Duration::from_secs(60);
const IDLE_POLL: Duration = Duration::from_millis(200);

/// Every shard of the stream, read from the moment [`StreamCursor::open`] was called.
pub struct StreamCursor {
    source: DynamoDbStreamSource,
    /// Shard → its iterator (`None` once a closed shard is read to its end).
    shards: BTreeMap<String, Option<String>>,
    /// The source partitions whose reading records are kept.
    partitions: BTreeSet<String>,
    /// Kept reading records, in stream order per partition.
    pub records: Vec<ReadingRecord>,
    /// Fence records seen: (partition, nonce) → sequence number.
    fences: BTreeMap<(String, String), String>,
    /// Per partition, the highest sequence number seen so far.
    pub seen: BTreeMap<String, String>,
    /// Records of slot parts whose images do not decode (skipped, logged with their key).
    pub unreadable: u64,
}

impl StreamCursor {
    /// Iterators at LATEST on every shard: everything written after this call is seen.
    pub async fn open(
        source: DynamoDbStreamSource,
        partitions: BTreeSet<String>,
    ) -> Result<Self, AdminError> {
        let mut shards = BTreeMap::new();
        for s in source.shards().await? {
            let it = source.iterator(&s.id, &Start::Latest).await?;
            shards.insert(s.id, it);
        }
        Ok(StreamCursor {
            source,
            shards,
            partitions,
            records: Vec::new(),
            fences: BTreeMap::new(),
            seen: BTreeMap::new(),
            unreadable: 0,
        })
    }

    /// One GetRecords per open shard; children of shards that closed are picked up from their
    /// start. Returns how many records arrived.
    async fn poll(&mut self) -> Result<usize, AdminError> {
        let mut got = 0;
        let mut closed = false;
        for (shard, it) in self.shards.iter_mut() {
            let Some(iter) = it.clone() else { continue };
            let page = self.source.read(shard, &iter, 1_000).await?;
            *it = page.next;
            closed |= it.is_none();
            got += page.records.len();
            for r in &page.records {
                self.unreadable += absorb(
                    r,
                    &self.partitions,
                    &mut self.records,
                    &mut self.fences,
                    &mut self.seen,
                );
            }
        }
        if closed {
            for s in self.source.shards().await? {
                if !self.shards.contains_key(&s.id) {
                    let it = self.source.iterator(&s.id, &Start::TrimHorizon).await?;
                    self.shards.insert(s.id, it);
                }
            }
        }
        Ok(got)
    }

    /// Reads until `done` holds, or fails once [`FENCE_WAIT`] has passed.
    async fn read_until(
        &mut self,
        what: &str,
        done: impl Fn(&StreamCursor) -> bool,
    ) -> Result<(), AdminError> {
        let started = Instant::now();
        while !done(self) {
            if started.elapsed() > FENCE_WAIT {
                return Err(AdminError::Stream(format!(
                    "{what} did not appear in the table's stream within {FENCE_WAIT:?}"
                )));
            }
            if self.poll().await? == 0 {
                tokio::time::sleep(IDLE_POLL).await;
            }
        }
        Ok(())
    }

    /// Writes a fence item in `partition` and reads the stream until its record appears:
    /// returns the record's sequence number, a position in that partition's stream order.
    pub async fn fence(
        &mut self,
        ddb: &aws_sdk_dynamodb::Client,
        table: &str,
        partition: &str,
    ) -> Result<String, AdminError> {
        let nonce = crate::nonce();
        ddb.put_item()
            .table_name(table)
            .item("pk", AttributeValue::S(partition.to_owned()))
            .item("sk", AttributeValue::S(FENCE_SK.to_owned()))
            .item("nonce", AttributeValue::S(nonce.clone()))
            .send()
            .await
            .map_err(|e| AdminError::dynamodb("PutItem", e))?;
        let key = (partition.to_owned(), nonce);
        self.read_until("the fence", |c| c.fences.contains_key(&key))
            .await?;
        Ok(self.fences[&key].clone())
    }

    /// Reads until a record of `partition` at or after `seq` has been seen.
    pub async fn reach(&mut self, partition: &str, seq: &str) -> Result<(), AdminError> {
        self.read_until("the aggregator's watermark", |c| {
            c.seen
                .get(partition)
                .is_some_and(|s| tidemark_aggregator::records::cmp_seq(s, seq).is_ge())
        })
        .await
    }
}

/// Removes the fence item of `partition` (its REMOVE record is ignored like its INSERT).
pub async fn remove_fence(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    partition: &str,
) -> Result<(), AdminError> {
    ddb.delete_item()
        .table_name(table)
        .key("pk", AttributeValue::S(partition.to_owned()))
        .key("sk", AttributeValue::S(FENCE_SK.to_owned()))
        .send()
        .await
        .map_err(|e| AdminError::dynamodb("DeleteItem", e))?;
    Ok(())
}

/// Keeps what `r` says about the partitions' readings and fences; returns 1 when it is an
/// unreadable slot part's record (skipped).
fn absorb(
    r: &EventRecord,
    partitions: &BTreeSet<String>,
    records: &mut Vec<ReadingRecord>,
    fences: &mut BTreeMap<(String, String), String>,
    seen: &mut BTreeMap<String, String>,
) -> u64 {
    let c = &r.change;
    let s = |img: &serde_dynamo::Item, k: &str| match img.get(k) {
        Some(serde_dynamo::AttributeValue::S(v)) => Some(v.clone()),
        _ => None,
    };
    let Some(pk) = s(&c.keys, "pk") else { return 0 };
    if !partitions.contains(&pk) {
        return 0;
    }
    let Some(seq) = c.sequence_number.clone() else {
        return 0;
    };
    seen.insert(pk.clone(), seq.clone());
    if s(&c.keys, "sk").as_deref() == Some(FENCE_SK) {
        if let Some(nonce) = s(&c.new_image, "nonce") {
            fences.insert((pk, nonce), seq);
        }
        return 0;
    }
    match reading_records(r) {
        Ok(rrs) => {
            records.extend(rrs);
            0
        }
        Err(u) => {
            tracing::warn!(key = %u.key, reason = %u.reason, "unreadable slot part's record skipped");
            1
        }
    }
}
