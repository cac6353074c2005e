//! Writing readings into a packed slot (issue 16) so that concurrent writers lose nothing.
//!
//! A slot is one or more part items (`SLOT#<start>#<part>`), each holding readings of the
//! device in one binary attribute ([`tidemark_schema::packed`]), so DynamoDB cannot merge into
//! them entry by entry as it does into a single reading's metrics map. Instead each write is
//! a read-merge-write under an optimistic lock:
//! 1. query the slot's parts (eventually consistent is enough: a stale read only makes
//!    step 3 fail);
//! 2. merge each incoming reading into the part that holds it (a correction, a new metric),
//!    and the readings no part holds into the open part, the last one; if nothing changes
//!    (a replay, a resend) stop: nothing is written;
//! 3. put each changed part on the condition that its `version` is still the one read (or,
//!    for a new part, that no item has its key), with `version` + 1.
//!
//! Two writers of one slot (two shards of the stream, a retry racing a late batch) both read
//! version *v*; one put succeeds, the other's condition fails, and it starts again from step 1
//! with the winner's readings in hand. So no write is ever based on readings it did not see,
//! and none is lost. A lost race is retried with the store's backoff until the deadline.
//!
//! A part stays well under DynamoDB's 400 KB: when new readings would grow the open part
//! past [`MAX_PART_BYTES`], it is first *sealed* (rewritten unchanged with `sealed`, which
//! bumps its version) and the readings go to a new part. New readings only ever go to the
//! open part, and a part is sealed before the next one exists, so a writer that missed a
//! newer part always fails its condition: a reading is in exactly one part. Sealed parts
//! still take corrections of the readings they hold. Parts are bounded, so a write never
//! rewrites more than one part's worth of bytes plus what it adds.
//!
//! A reading's `metadata` (free-form JSON) is kept in the part holding the reading: a map from
//! each distinct JSON text to a bitmap of the readings carrying it, so a device's unchanging
//! metadata is stored once a part. As for single items, a later record's metadata replaces
//! an earlier one's, and a record without metadata keeps what is stored.
//!
//! A part that cannot be read (corrupt, or written by another tool) is left exactly as it is
//! and counted: it takes no new readings (as if sealed), and the slot goes on in later parts.
//! Nothing it may hold is overwritten, and one bad item never stops ingest.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::keys;
use tidemark_schema::packed::SlotReadings;
use tidemark_schema::table::attr;
use tidemark_schema::{MAX_ITEM_BYTES, SlotItem, Timestamp, field, metadata_bitmaps};
use tokio::time::Instant;

mod content;

use content::encoded;
pub use content::{Content, read_part};

use crate::retry::RetryPolicy;
use crate::{Item, StoreError, to_item};

/// The encoded size at which a part is sealed. Every write of a part is billed by its
/// whole size, so this also bounds what one write costs (64 WCU).
pub const MAX_PART_BYTES: usize = 64 * 1024;
const _: () = assert!(MAX_PART_BYTES < 400 * 1024 / 4, "well under the item limit");

/// Where a slot lives and when it starts (its readings are encoded relative to the start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotKey {
    pub pk: String,
    pub start: Timestamp,
}

impl SlotKey {
    fn sk(&self, part: u16) -> String {
        keys::slot_sk(self.start, part)
    }
}

/// What a slot write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotWrite {
    /// False when the slot already held every reading as sent: nothing was written.
    pub written: bool,
    /// Races lost to another writer before this write went through.
    pub conflicts: u32,
    /// Readings in the slot after the write.
    pub readings: usize,
    /// Part items the slot has after the write.
    pub parts: usize,
    /// Parts that could not be read: left as they were (see the module docs).
    pub unreadable_parts: usize,
}

/// Writes packed slots: the client, table and retry policy of one function.
#[derive(Debug, Clone)]
pub struct SlotWriter {
    pub client: Client,
    pub table: String,
    pub retry: RetryPolicy,
    /// [`MAX_PART_BYTES`] except in tests of splitting.
    pub part_bytes: usize,
    /// [`MAX_ITEM_BYTES`] except in tests of the cap.
    pub item_bytes: usize,
}

/// Where ingest writes packed slots: DynamoDB (through a [`SlotWriter`]), or a test's fake.
pub trait SlotStore: Send + Sync {
    fn write_slot(
        &self,
        table: &str,
        retry: RetryPolicy,
        key: &SlotKey,
        incoming: &Content,
        ttl: i64,
        deadline: Instant,
    ) -> impl std::future::Future<Output = Result<SlotWrite, StoreError>> + Send;
}

impl SlotStore for Client {
    async fn write_slot(
        &self,
        table: &str,
        retry: RetryPolicy,
        key: &SlotKey,
        incoming: &Content,
        ttl: i64,
        deadline: Instant,
    ) -> Result<SlotWrite, StoreError> {
        SlotWriter::new(self.clone(), table, retry)
            .write_content(key, incoming, ttl, deadline)
            .await
    }
}

/// One part as stored; `content` is `None` for an unreadable part.
#[derive(Debug, Clone)]
struct Part {
    number: u16,
    content: Option<Content>,
    version: u64,
    sealed: bool,
}

impl Part {
    fn holds(&self, at: &Timestamp) -> bool {
        self.content
            .as_ref()
            .is_some_and(|c| c.readings.contains_key(at))
    }
}

/// One conditional put of a step 3.
#[derive(Debug)]
struct Put {
    number: u16,
    content: Content,
    /// `None`: a new part.
    expected: Option<u64>,
    sealed: bool,
}

/// A part of the slot `key`: `None` when its sort key is not one of ours (a foreign item
/// under the slot's prefix, which no write of ours can collide with).
fn parse_part(key: &SlotKey, item: &Item) -> Option<Part> {
    let sk = item.get(attr::SK).and_then(|v| v.as_s().ok())?;
    let number = sk
        .strip_prefix(&keys::slot_sk_prefix(key.start))
        .and_then(|n| n.parse::<u16>().ok())?;
    Some(match read_part(item) {
        Ok(p) => Part {
            number,
            version: p.version,
            sealed: p.sealed,
            content: Some(p.into()),
        },
        Err(message) => {
            tracing::warn!(pk = %key.pk, sk = %sk, error = %message, "unreadable slot part left as it is");
            Part {
                number,
                content: None,
                version: 0,
                sealed: true,
            }
        }
    })
}

impl SlotWriter {
    pub fn new(client: Client, table: impl Into<String>, retry: RetryPolicy) -> Self {
        SlotWriter {
            client,
            table: table.into(),
            retry,
            part_bytes: MAX_PART_BYTES,
            item_bytes: MAX_ITEM_BYTES,
        }
    }

    async fn read(&self, key: &SlotKey) -> Result<Vec<Part>, StoreError> {
        let mut pages = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("#pk = :pk AND begins_with(#sk, :prefix)")
            .expression_attribute_names("#pk", attr::PK)
            .expression_attribute_names("#sk", attr::SK)
            .expression_attribute_values(":pk", AttributeValue::S(key.pk.clone()))
            .expression_attribute_values(
                ":prefix",
                AttributeValue::S(keys::slot_sk_prefix(key.start)),
            )
            .into_paginator()
            .items()
            .send();
        let mut parts = Vec::new();
        while let Some(item) = pages.next().await {
            let item = item.map_err(StoreError::sdk("Query"))?;
            parts.extend(parse_part(key, &item));
        }
        parts.sort_by_key(|p| p.number);
        Ok(parts)
    }

    /// Step 2: the puts that merge `incoming` into `parts` (empty: nothing changes).
    fn plan(
        &self,
        key: &SlotKey,
        parts: &[Part],
        incoming: &Content,
    ) -> Result<Vec<Put>, StoreError> {
        let open = parts.last().filter(|p| !p.sealed).map(|p| p.number);
        let fresh = incoming.only(|at| !parts.iter().any(|p| p.holds(at)));
        let mut placed = false;
        let mut puts = Vec::new();
        for part in parts {
            let Some(stored) = &part.content else {
                continue;
            };
            let own = incoming.only(|at| part.holds(at));
            if Some(part.number) == open && !fresh.readings.is_empty() {
                let mut with_fresh = own.clone();
                with_fresh.readings.extend(fresh.readings.clone());
                with_fresh.metadata.extend(fresh.metadata.clone());
                let merged = stored.merged(&with_fresh).unwrap_or_else(|| stored.clone());
                if merged.size(key.start)? <= self.part_bytes {
                    placed = true;
                    puts.push(Put {
                        number: part.number,
                        content: merged,
                        expected: Some(part.version),
                        sealed: false,
                    });
                    continue;
                }
                // Too big with the new readings: seal it with only its own corrections; the
                // new readings start a new part below.
                puts.push(Put {
                    number: part.number,
                    content: stored.merged(&own).unwrap_or_else(|| stored.clone()),
                    expected: Some(part.version),
                    sealed: true,
                });
                continue;
            }
            if let Some(content) = stored.merged(&own) {
                puts.push(Put {
                    number: part.number,
                    content,
                    expected: Some(part.version),
                    sealed: part.sealed,
                });
            }
        }
        if placed || fresh.readings.is_empty() {
            return Ok(puts);
        }
        let mut number = parts.last().map_or(Some(0), |p| p.number.checked_add(1));
        let chunks = self.chunks(key.start, fresh)?;
        let last = chunks.len() - 1;
        for (i, content) in chunks.into_iter().enumerate() {
            let n = number.ok_or_else(|| StoreError::Request {
                operation: "PutItem",
                message: format!("slot {}/{} has too many parts", key.pk, key.start),
            })?;
            // Created in order, each sealed before the next exists (see the module docs).
            puts.push(Put {
                number: n,
                content,
                expected: None,
                sealed: i < last,
            });
            number = n.checked_add(1);
        }
        Ok(puts)
    }

    /// New readings cut into runs that each fit in a part.
    fn chunks(&self, start: Timestamp, content: Content) -> Result<Vec<Content>, StoreError> {
        if content.readings.len() <= 1 || content.size(start)? <= self.part_bytes {
            return Ok(vec![content]);
        }
        let middle = *content
            .readings
            .keys()
            .nth(content.readings.len() / 2)
            .expect("more than one reading");
        let mut out = self.chunks(start, content.only(|at| *at < middle))?;
        out.extend(self.chunks(start, content.only(|at| *at >= middle))?);
        Ok(out)
    }

    fn item(&self, key: &SlotKey, put: &Put, ttl: i64) -> Result<Item, StoreError> {
        let c = &put.content;
        to_item(&SlotItem {
            pk: key.pk.clone(),
            sk: key.sk(put.number),
            packed: encoded(key.start, &c.readings)?,
            reading_count: c.readings.len() as u64,
            version: put.expected.map_or(1, |v| v + 1),
            ttl,
            sealed: put.sealed,
            full: false,
            metadata: metadata_bitmaps(&c.readings, &c.metadata),
        })
    }

    /// Step 3 for one part. `Ok(false)`: another writer changed it first.
    async fn put(&self, key: &SlotKey, put: &Put, ttl: i64) -> Result<bool, StoreError> {
        let req = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(self.item(key, put, ttl)?));
        let req = match put.expected {
            None => req
                .condition_expression("attribute_not_exists(#pk)")
                .expression_attribute_names("#pk", attr::PK),
            Some(v) => req
                .condition_expression("#v = :v")
                .expression_attribute_names("#v", field::VERSION)
                .expression_attribute_values(":v", AttributeValue::N(v.to_string())),
        };
        match req.send().await.map_err(StoreError::sdk("PutItem")) {
            Ok(_) => Ok(true),
            Err(e) if e.is_conditional_check_failed() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Merges `incoming` readings into the slot `key` (see the module docs).
    pub async fn write(
        &self,
        key: &SlotKey,
        incoming: &SlotReadings,
        ttl: i64,
        deadline: Instant,
    ) -> Result<SlotWrite, StoreError> {
        let content = Content {
            readings: incoming.clone(),
            metadata: Default::default(),
        };
        self.write_content(key, &content, ttl, deadline).await
    }

    /// Merges `incoming` readings and metadata into the slot `key` (see the module docs).
    pub async fn write_content(
        &self,
        key: &SlotKey,
        incoming: &Content,
        ttl: i64,
        deadline: Instant,
    ) -> Result<SlotWrite, StoreError> {
        let mut conflicts = 0u32;
        let mut written = false;
        loop {
            let parts = self.read(key).await?;
            let puts = self.plan(key, &parts, incoming)?;
            let mut lost = false;
            for put in &puts {
                if self.put(key, put, ttl).await? {
                    written = true;
                } else {
                    lost = true;
                    break;
                }
            }
            if !lost {
                let (readings, count) = counts(&parts, &puts);
                return Ok(SlotWrite {
                    written,
                    conflicts,
                    readings,
                    parts: count,
                    unreadable_parts: parts.iter().filter(|p| p.content.is_none()).count(),
                });
            }
            conflicts += 1;
            let wait = self.retry.delay(conflicts);
            if Instant::now() + wait >= deadline {
                return Err(StoreError::Request {
                    operation: "PutItem",
                    message: format!(
                        "slot {}/{} still contended after {conflicts} tries",
                        key.pk, key.start
                    ),
                });
            }
            tokio::time::sleep(wait).await;
        }
    }
}

/// (readable readings, parts) of the slot once `puts` landed on `parts`.
fn counts(parts: &[Part], puts: &[Put]) -> (usize, usize) {
    let mut counts: BTreeMap<u16, usize> = parts
        .iter()
        .map(|p| (p.number, p.content.as_ref().map_or(0, |c| c.readings.len())))
        .collect();
    for p in puts {
        counts.insert(p.number, p.content.readings.len());
    }
    (counts.values().sum(), counts.len())
}
