//! Shared test helpers: stream records built from real item images, raw readings written to
//! DynamoDB Local, and the aggregates recomputed from raw readings to compare against.
#![allow(dead_code)]

pub mod slots;

use std::collections::BTreeMap;

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_sdk_dynamodb::types::AttributeValue;
use serde::Serialize;
use tidemark_aggregator::{AggregatorConfig, BothRoles};
use tidemark_schema::{
    AggregateItem, AlertItem, Bucket, DeviceId, DeviceItem, EntityKey, MetricName, Period, Reading,
    ReadingItem, SlotItem, Stats, Timestamp, keys,
};
use tidemark_streams::{DynamoDbStreamSource, EventSource, Start};
use tidemark_testkit::{TestTable, eventually, services};

pub fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

pub fn dev(id: &str) -> DeviceId {
    DeviceId::new(id).unwrap()
}

pub fn metrics(pairs: &[(&str, f64)]) -> BTreeMap<MetricName, f64> {
    pairs
        .iter()
        .map(|(k, v)| (MetricName::new(k).unwrap(), *v))
        .collect()
}

pub fn reading(device: &str, at: &str, pairs: &[(&str, f64)]) -> ReadingItem {
    reading_at(&dev(device), ts(at), metrics(pairs), None)
}

pub fn reading_at(
    device: &DeviceId,
    at: Timestamp,
    m: BTreeMap<MetricName, f64>,
    shard: Option<u16>,
) -> ReadingItem {
    ReadingItem::new(
        &Reading {
            device_id: device.clone(),
            timestamp: at,
            metrics: m,
            metadata: None,
        },
        shard,
        30,
    )
}

use tidemark_aggregator::testing::image;

/// A DynamoDB stream with `shards` shards, each handing out increasing 21-digit sequence
/// numbers as DynamoDB Local does. A partition key always maps to the same shard, unless it
/// is [`StreamSim::split`]: then DynamoDB has split its item collection by sort key, and its
/// records flow through two child shards at once.
pub struct StreamSim {
    /// Sequence counters: one per hashed shard, then one per split key (shared by its two
    /// children, so their numbers interleave: a later write on one child has a higher number
    /// than an earlier write on the other).
    next: Vec<u128>,
    /// Shards partition keys are hashed over.
    shards: usize,
    /// Split partition keys: (pk, first sort key of the upper child).
    splits: Vec<(String, String)>,
}

impl StreamSim {
    pub fn new(shards: usize) -> Self {
        StreamSim {
            next: (0..shards as u128)
                .map(|s| (s + 1) * 100_000_000_000_000_000 + 1)
                .collect(),
            shards,
            splits: Vec::new(),
        }
    }

    /// From now on the records of `pk` go to two new child shards: items with a sort key
    /// below `at_sk` to the first, the others to the second. Both children number their
    /// records above every number of the parent shard, from one counter. Returns the two
    /// child shards (as [`StreamSim::shard_of_item`] and the records' `eventID` name them).
    pub fn split(&mut self, pk: &str, at_sk: &str) -> [usize; 2] {
        assert!(
            self.splits.iter().all(|(p, _)| p != pk),
            "{pk} is split already"
        );
        let k = self.splits.len();
        self.splits.push((pk.to_string(), at_sk.to_string()));
        self.next
            .push((self.shards + k + 1) as u128 * 100_000_000_000_000_000 + 1);
        let lower = self.shards + 2 * k;
        [lower, lower + 1]
    }

    /// Every shard, hashed and child (child shards follow the hashed ones).
    pub fn shard_count(&self) -> usize {
        self.shards + 2 * self.splits.len()
    }

    fn shard_of(&self, pk: &str) -> usize {
        pk.bytes()
            .fold(7usize, |h, b| h.wrapping_mul(31).wrapping_add(b as usize))
            % self.shards
    }

    /// The shard an item's records go to.
    pub fn shard_of_item(&self, pk: &str, sk: &str) -> usize {
        self.place(pk, sk).0
    }

    /// (shard, sequence counter) of an item's records.
    fn place(&self, pk: &str, sk: &str) -> (usize, usize) {
        match self.splits.iter().position(|(p, _)| p == pk) {
            Some(k) => {
                let upper = sk >= self.splits[k].1.as_str();
                (self.shards + 2 * k + usize::from(upper), self.shards + k)
            }
            None => {
                let s = self.shard_of(pk);
                (s, s)
            }
        }
    }

    fn record<T: Serialize>(
        &mut self,
        name: &str,
        pk: &str,
        sk: &str,
        new: Option<&T>,
        old: Option<&T>,
    ) -> EventRecord {
        let (shard, counter) = self.place(pk, sk);
        let seq = self.next[counter];
        self.next[counter] += 1 + (seq % 7) * 13;
        let mut r =
            tidemark_aggregator::testing::change_record(seq, old.map(image), new.map(image));
        r.event_name = name.into();
        r.change.size_bytes = 200;
        r.change.stream_view_type =
            Some(aws_lambda_events::event::dynamodb::StreamViewType::NewAndOldImages);
        r.aws_region = "us-east-1".into();
        r.event_id = format!("{shard}-{seq}");
        r.event_name = name.into();
        r.event_source = Some("aws:dynamodb".into());
        r.event_version = Some("1.1".into());
        r.event_source_arn = Some(
            "arn:aws:dynamodb:us-east-1:000000000000:table/tidemark/stream/2026-04-20T00:00:00.000"
                .into(),
        );
        r
    }

    pub fn insert(&mut self, r: &ReadingItem) -> EventRecord {
        self.record("INSERT", &r.pk, &r.sk, Some(r), None)
    }

    pub fn modify(&mut self, old: &ReadingItem, new: &ReadingItem) -> EventRecord {
        self.record("MODIFY", &new.pk, &new.sk, Some(new), Some(old))
    }

    pub fn user_remove(&mut self, old: &ReadingItem) -> EventRecord {
        self.record("REMOVE", &old.pk, &old.sk, None, Some(old))
    }

    /// A slot part's record: INSERT without `old`, user REMOVE without `new`, else MODIFY.
    pub fn slot(&mut self, old: Option<&SlotItem>, new: Option<&SlotItem>) -> EventRecord {
        let any = new.or(old).expect("an image");
        let name = match (old, new) {
            (None, _) => "INSERT",
            (_, None) => "REMOVE",
            _ => "MODIFY",
        };
        self.record(name, &any.pk, &any.sk, new, old)
    }

    pub fn ttl_remove(&mut self, old: &ReadingItem) -> EventRecord {
        tidemark_aggregator::testing::as_ttl_expiry(self.record(
            "REMOVE",
            &old.pk,
            &old.sk,
            None,
            Some(old),
        ))
    }
}

pub fn event(records: Vec<EventRecord>) -> Event {
    let mut e = Event::default();
    e.records = records;
    e
}

/// Stores `rs`, then hands their INSERT records to `agg` as one batch, which must succeed.
pub async fn store_and_process(
    t: &TestTable,
    agg: &BothRoles,
    s: &mut StreamSim,
    rs: &[ReadingItem],
) {
    put_readings(t, rs).await;
    let (resp, _) = agg
        .process(&event(rs.iter().map(|r| s.insert(r)).collect()))
        .await;
    assert!(resp.batch_item_failures.is_empty(), "{resp:?}");
}

/// Both stream readers (rollups and alerts), as the template runs them.
pub fn aggregator(t: &TestTable) -> BothRoles {
    BothRoles::new(t.client.clone(), AggregatorConfig::new(&t.name))
}

pub async fn put_readings(t: &TestTable, items: &[ReadingItem]) {
    t.put_all(
        items
            .iter()
            .map(|r| tidemark_store::to_item(r).unwrap())
            .collect(),
    )
    .await;
}

/// Stores slot part items as they are (a test's final state of packed readings).
pub async fn put_items<T: Serialize>(t: &TestTable, items: &[T]) {
    for i in items {
        t.client
            .put_item()
            .table_name(&t.name)
            .set_item(Some(tidemark_store::to_item(i).unwrap()))
            .send()
            .await
            .unwrap();
    }
}

pub async fn delete_reading(t: &TestTable, r: &ReadingItem) {
    t.client
        .delete_item()
        .table_name(&t.name)
        .key("pk", AttributeValue::S(r.pk.clone()))
        .key("sk", AttributeValue::S(r.sk.clone()))
        .send()
        .await
        .unwrap();
}

/// What an aggregate item must hold: stats per metric, first and last reading time.
/// Equal as [`tidemark_testkit::rollups::same_stats`] says (sums and spreads added up in
/// another order differ in their last bits).
#[derive(Debug, Clone)]
pub struct Expected {
    pub metrics: BTreeMap<MetricName, Stats>,
    pub first_at: Timestamp,
    pub last_at: Timestamp,
}

impl PartialEq for Expected {
    fn eq(&self, o: &Expected) -> bool {
        self.first_at == o.first_at
            && self.last_at == o.last_at
            && self.metrics.len() == o.metrics.len()
            && self.metrics.iter().all(|(m, s)| {
                o.metrics
                    .get(m)
                    .is_some_and(|t| tidemark_testkit::rollups::same_stats(s, t))
            })
    }
}

/// Every aggregate recomputed from raw readings, keyed by (pk, sk) of the aggregate item.
pub fn recompute(readings: &[ReadingItem]) -> BTreeMap<(String, String), Expected> {
    let mut out: BTreeMap<(String, String), Expected> = BTreeMap::new();
    for r in readings {
        let (reading, _) = r.to_reading().unwrap();
        for p in [Period::Hourly, Period::Daily] {
            let k = AggregateItem::key_for(&reading.device_id, p.bucket(reading.timestamp));
            let e = out.entry((k.pk, k.sk)).or_insert(Expected {
                metrics: BTreeMap::new(),
                first_at: reading.timestamp,
                last_at: reading.timestamp,
            });
            e.first_at = e.first_at.min(reading.timestamp);
            e.last_at = e.last_at.max(reading.timestamp);
            for (m, v) in &reading.metrics {
                e.metrics
                    .entry(m.clone())
                    .and_modify(|s| s.merge(&Stats::at(reading.timestamp, *v)))
                    .or_insert_with(|| Stats::at(reading.timestamp, *v));
            }
        }
    }
    out
}

/// Every aggregate item of `devices` in the table.
pub async fn stored_aggregates(
    t: &TestTable,
    devices: &[DeviceId],
) -> BTreeMap<(String, String), AggregateItem> {
    let mut out = BTreeMap::new();
    for d in devices {
        let mut start = None;
        loop {
            let resp = t
                .client
                .query()
                .table_name(&t.name)
                .consistent_read(true)
                .key_condition_expression("pk = :pk AND begins_with(sk, :agg)")
                .expression_attribute_values(":pk", AttributeValue::S(keys::device_pk(d)))
                .expression_attribute_values(":agg", AttributeValue::S(keys::AGG_PREFIX.into()))
                .set_exclusive_start_key(start)
                .send()
                .await
                .unwrap();
            for i in resp.items.unwrap_or_default() {
                let a: AggregateItem = tidemark_store::from_item(i).unwrap();
                let a = if a.sealed {
                    merged_pages(t, a).await
                } else {
                    a
                };
                out.insert((a.pk.clone(), a.sk.clone()), a);
            }
            start = resp.last_evaluated_key;
            if start.is_none() {
                break;
            }
        }
    }
    out
}

/// The overflow pages of the bucket whose page 0 is `page0`, as stored (consistent).
pub async fn overflow_pages(t: &TestTable, page0: &AggregateItem) -> Vec<AggregateItem> {
    let Ok(EntityKey::Aggregate { bucket, .. }) = EntityKey::parse(&page0.pk, &page0.sk) else {
        panic!("{} / {} is not an aggregate", page0.pk, page0.sk);
    };
    let mut out = Vec::new();
    let mut pages = t
        .client
        .query()
        .table_name(&t.name)
        .consistent_read(true)
        .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
        .expression_attribute_values(":pk", AttributeValue::S(page0.pk.clone()))
        .expression_attribute_values(
            ":prefix",
            AttributeValue::S(keys::aggregate_page_sk_prefix(bucket)),
        )
        .into_paginator()
        .items()
        .send();
    while let Some(i) = pages.next().await {
        out.push(tidemark_store::from_item(i.unwrap()).unwrap());
    }
    out
}

/// A paged bucket's rollup as a reader sees it: page 0 merged with its overflow pages.
pub async fn merged_pages(t: &TestTable, page0: AggregateItem) -> AggregateItem {
    let mut pages = vec![page0.clone()];
    pages.extend(overflow_pages(t, &page0).await);
    AggregateItem::merge_pages(pages).unwrap()
}

/// Asserts the table's aggregates are exactly those recomputed from `readings`.
pub async fn assert_exact(t: &TestTable, devices: &[DeviceId], readings: &[ReadingItem]) {
    let want = recompute(readings);
    let got = stored_aggregates(t, devices).await;
    let got_view: BTreeMap<_, _> = got
        .iter()
        .map(|(k, a)| {
            (
                k.clone(),
                Expected {
                    metrics: a.metrics.clone(),
                    first_at: a.first_at,
                    last_at: a.last_at,
                },
            )
        })
        .collect();
    assert_eq!(got_view, want);
}

pub fn bucket_key(device: &str, b: Bucket) -> (String, String) {
    let k = AggregateItem::key_for(&dev(device), b);
    (k.pk, k.sk)
}

pub async fn device_item(t: &TestTable, id: &str) -> Option<DeviceItem> {
    let k = EntityKey::Device(dev(id)).key();
    t.client
        .get_item()
        .table_name(&t.name)
        .key("pk", AttributeValue::S(k.pk))
        .key("sk", AttributeValue::S(k.sk))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .map(|i| tidemark_store::from_item(i).unwrap())
}

pub async fn alerts_of(t: &TestTable, id: &str) -> Vec<AlertItem> {
    t.client
        .query()
        .table_name(&t.name)
        .consistent_read(true)
        .key_condition_expression("pk = :pk AND begins_with(sk, :a)")
        .expression_attribute_values(":pk", AttributeValue::S(keys::device_pk(&dev(id))))
        .expression_attribute_values(":a", AttributeValue::S(keys::ALERT_PREFIX.into()))
        .send()
        .await
        .unwrap()
        .items
        .unwrap_or_default()
        .into_iter()
        .map(|i| tidemark_store::from_item(i).unwrap())
        .collect()
}

/// Stores `device`'s layout history, as `PUT /devices/{id}/shards` would (a hot device).
pub async fn put_layout_history(
    t: &TestTable,
    device: &DeviceId,
    h: &tidemark_schema::LayoutHistory,
) {
    t.client
        .put_item()
        .table_name(&t.name)
        .set_item(Some(
            tidemark_store::to_item(&tidemark_schema::LayoutHistoryItem::new(device, h.clone()))
                .unwrap(),
        ))
        .send()
        .await
        .unwrap();
}

/// Every record of the table's real stream (DynamoDB Local's), in stream order per shard,
/// once `enough` says they are all there; panics naming `what` after 20 s.
pub async fn stream_records(
    t: &TestTable,
    what: &str,
    enough: impl Fn(&[EventRecord]) -> bool,
) -> Vec<EventRecord> {
    let streams = tidemark_streams::local_streams::client(&services().dynamodb_endpoint).await;
    let source = DynamoDbStreamSource::for_table(&t.client, streams, &t.name)
        .await
        .unwrap();
    let (source, enough) = (&source, &enough);
    eventually(std::time::Duration::from_secs(20), what, || async move {
        let mut out = Vec::new();
        for shard in source.shards().await.unwrap() {
            let mut it = source
                .iterator(&shard.id, &Start::TrimHorizon)
                .await
                .unwrap();
            while let Some(i) = it {
                let page = source.read(&shard.id, &i, 1000).await.unwrap();
                if page.records.is_empty() {
                    break;
                }
                out.extend(page.records);
                it = page.next;
            }
        }
        enough(&out).then_some(out)
    })
    .await
}

/// An event bus that records what was put on it.
#[derive(Default)]
pub struct Bus(pub std::sync::Mutex<Vec<tidemark_aggregator::notify::EventEntry>>);

impl tidemark_aggregator::notify::Publisher for Bus {
    async fn put_events(
        &self,
        entries: &[tidemark_aggregator::notify::EventEntry],
    ) -> Result<tidemark_aggregator::notify::EntryOutcomes, String> {
        self.0.lock().unwrap().extend(entries.iter().cloned());
        Ok(vec![None; entries.len()])
    }
}

/// The watchdog's heartbeats as a pipeline that has caught up passes them: marked passed the
/// moment they are sent (into the table `.1` through the client `.0`).
pub struct CaughtUp(pub aws_sdk_dynamodb::Client, pub String);

impl tidemark_watchdog::Heartbeats for CaughtUp {
    async fn send(
        &self,
        at: Timestamp,
    ) -> Result<Vec<tidemark_schema::keys::ShardName>, tidemark_watchdog::WatchdogError> {
        let shard = tidemark_schema::keys::ShardName::new("shardId-000000000000").unwrap();
        let beat = tidemark_schema::HeartbeatItem::passed_at_once(&shard, at);
        self.0
            .put_item()
            .table_name(&self.1)
            .set_item(Some(tidemark_store::to_item(&beat).unwrap()))
            .send()
            .await
            .unwrap();
        Ok(vec![shard])
    }
}
