//! Runs a case through the pipeline over one in-memory table: records into a Kinesis shard,
//! ingest taking batches of it (cut at random sizes, replayed, retried from the record it
//! reports, a failed invocation bisected, as the event source mapping does), every change ingest and the aggregator make
//! to the table into a DynamoDB stream, and each role (rollups, alerts) taking batches of
//! that stream on its own checkpoint. Every batch must come through within a few tries.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::kinesis::KinesisEvent;
use base64::Engine;
use serde_json::{Value, json};
use tidemark_aggregator::memory::MemoryStore;
use tidemark_aggregator::{Aggregator, AggregatorConfig, Role};
use tidemark_ingest::{Ingest, IngestConfig};
use tidemark_schema::{
    Clock, DeviceId, EntityKey, Layout, LayoutHistory, LayoutHistoryItem, MetricName, Severity,
    SlotLen, Threshold, Timestamp,
};
use tidemark_store::memory::MemTable;
use tidemark_store::{Item, StoreError};

use super::generator::{
    self, Action, EVIL, Hostile, LayoutKind, PAST_EDGE_VALUES, Read, Rec, Tick, When,
};
use super::oracle::{Expect, Oracle, Sent};
use super::shared::Shared;

/// Tries of one batch (from the same first record) before the partition counts as stalled:
/// above the three permanent failures after which a record is set aside.
pub const MAX_TRIES: usize = 8;

/// The clock at the start of every case: 22:40 UTC, so cases cross hour and midnight closes.
pub fn base() -> Timestamp {
    Timestamp::parse_rfc3339("2026-04-20T22:40:00Z").expect("a timestamp")
}

const SHARD: &str = "shardId-000000000000";

/// Ingest's layout source and device directory: the `CONFIG` items of the table.
struct Lookups<'a>(&'a MemTable);

impl tidemark_ingest::LayoutHistorySource for Lookups<'_> {
    async fn load_layout_histories(
        &self,
    ) -> Result<Vec<Result<LayoutHistoryItem, StoreError>>, StoreError> {
        let items = self.0.lock();
        Ok(items
            .iter()
            .filter(|((pk, sk), _)| {
                matches!(
                    EntityKey::parse(pk, sk),
                    Ok(EntityKey::DeviceLayout(_) | EntityKey::DefaultLayout)
                )
            })
            .map(|(_, i)| tidemark_store::from_item(i.clone()))
            .collect())
    }

    async fn replace_default_layout(&self, _: &LayoutHistory, _: u64) -> Result<bool, StoreError> {
        Ok(false)
    }
}

impl tidemark_ingest::DeviceDirectory for Lookups<'_> {
    async fn existing_devices(&self, ids: &[DeviceId]) -> Result<HashSet<DeviceId>, StoreError> {
        Ok(ids.iter().cloned().collect())
    }
}

/// The table's items whose stream records the roles act on: readings and slot parts (the
/// records of everything else, the aggregator's own writes among them, are ignored by both
/// roles; thresholds and offline settings never change here).
type Snapshot = BTreeMap<(String, String), Item>;

fn snapshot(t: &MemTable) -> Snapshot {
    t.lock()
        .iter()
        .filter(|((pk, sk), _)| {
            pk.starts_with(tidemark_schema::keys::DEVICE_PREFIX)
                && matches!(
                    EntityKey::parse(pk, sk),
                    Ok(EntityKey::Reading { .. } | EntityKey::Slot { .. })
                )
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// One stream consumer: its checkpoint in the stream.
#[derive(Default)]
struct Checkpoint(usize);

pub struct World<'a> {
    store: &'a MemoryStore,
    clock: Clock,
    ingest_config: IngestConfig,
    ingest: Ingest<&'a MemTable, Lookups<'a>, Lookups<'a>>,
    roles: [Aggregator<Shared<'a>>; 2],
    /// The Kinesis shard and ingest's checkpoint in it.
    pub kinesis: Vec<Sent>,
    ingested: usize,
    /// The DynamoDB stream and each role's checkpoint.
    stream: Vec<EventRecord>,
    checkpoints: [Checkpoint; 2],
    seen: Snapshot,
    stream_seq: u64,
    /// Per device, the newest layout change planned.
    edges: HashMap<usize, Timestamp>,
    pub oracle: Oracle,
    /// What the case did, for a failure's message.
    pub log: Vec<String>,
}

/// A partial-batch response's first failed record, by its sequence number, among `seqs`.
fn position(seqs: &[&str], failed: Option<&str>) -> Option<usize> {
    let failed = failed?;
    Some(seqs.iter().position(|s| *s == failed).unwrap_or(0))
}

impl<'a> World<'a> {
    pub fn new(store: &'a MemoryStore) -> Self {
        let clock = Clock::fixed(base());
        let mut ingest_config = IngestConfig::new("t");
        ingest_config.deadline_margin = Duration::ZERO;
        ingest_config.retry.base_delay = Duration::from_millis(1);
        ingest_config.retry.max_delay = Duration::from_millis(4);
        let ingest = Ingest::from_parts(
            ingest_config.clone(),
            &*store.table,
            Lookups(&store.table),
            Lookups(&store.table),
            clock.clone(),
        );
        let mut config = AggregatorConfig::new("t").with_default_thresholds(BTreeMap::from([(
            MetricName::new(generator::ALERTED).expect("a metric name"),
            Threshold::new(None, Some(generator::LIMIT), Severity::Critical),
        )]));
        config.clock = clock.clone();
        config.retry.base_delay = Duration::from_millis(1);
        config.retry.max_delay = Duration::from_millis(4);
        config.deadline_margin = Duration::ZERO;
        let roles = [
            Aggregator::with_store(Shared(store), config.clone().with_role(Role::Rollups)),
            Aggregator::with_store(Shared(store), config.with_role(Role::Alerts)),
        ];
        World {
            store,
            clock,
            ingest_config,
            ingest,
            roles,
            kinesis: Vec::new(),
            ingested: 0,
            stream: Vec::new(),
            checkpoints: Default::default(),
            seen: Snapshot::new(),
            stream_seq: 0,
            edges: HashMap::new(),
            oracle: Oracle::default(),
            log: Vec::new(),
        }
    }

    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    fn at(&self, s: i64) -> Timestamp {
        self.now().plus_millis(s * 1000).unwrap_or(Timestamp::MAX)
    }

    pub fn tick(&mut self, t: Tick) {
        let now = self.now();
        let next_hour = now.hour_start().plus_millis(3_600_000).unwrap_or(now);
        let next_midnight = now.day().next().map_or(now, |d| d.start());
        let to = match t {
            Tick::Stay => now,
            Tick::By(s) => self.at(s),
            Tick::HourEdge(s) => next_hour.plus_millis(s * 1000).unwrap_or(now),
            Tick::MidnightEdge(s) => {
                // The midnight just passed while its grace runs, else the next one.
                let past = now.day().start();
                let target = past.plus_millis(s * 1000).unwrap_or(now);
                if target > now {
                    target
                } else {
                    next_midnight.plus_millis(s * 1000).unwrap_or(now)
                }
            }
        };
        if to > now {
            self.clock.set(to);
        }
    }

    pub async fn step(&mut self, action: &Action) -> Result<(), String> {
        match action {
            Action::Put(recs) => {
                for r in recs {
                    self.put(r);
                }
                Ok(())
            }
            Action::Layout {
                device,
                layout,
                delay,
            } => {
                self.layout(*device, *layout, *delay);
                Ok(())
            }
            Action::Ingest { batch, replay } => self.ingest(*batch, *replay).await,
            Action::Aggregate {
                role,
                batch,
                replay,
            } => self.aggregate(*role, *batch, *replay).await,
        }
    }

    /// A stored layout history and its item's version (0: none).
    fn stored(&self, key: &tidemark_schema::Key) -> (LayoutHistory, u64) {
        self.store
            .table
            .get(key)
            .and_then(|i| tidemark_store::from_item::<LayoutHistoryItem>(i).ok())
            .map_or((LayoutHistory::default(), 0), |c| (c.epochs, c.version))
    }

    /// A layout change of a device (`device` < [`generator::DEVICES`]) or of the fleet's
    /// default (any other), planned as the API plans one (lead time, a change not yet in use
    /// replaced), stored where ingest reads it, and given to the aggregator's store as every
    /// device's history over the default.
    fn layout(&mut self, device: usize, kind: LayoutKind, delay: i64) {
        let fleet = device >= generator::DEVICES;
        let id = DeviceId::new(&generator::device_id(device)).expect("a device ID");
        let key = if fleet {
            EntityKey::DefaultLayout.key()
        } else {
            EntityKey::DeviceLayout(id.clone()).key()
        };
        let (own, version) = self.stored(&key);
        let layout = match kind {
            LayoutKind::Single { shards } => Layout {
                partitions: shards,
                slot: None,
            },
            LayoutKind::Packed { slot, shards } => Layout {
                partitions: shards,
                slot: SlotLen::new(slot).ok(),
            },
        };
        let now = self.now();
        let lead = self.ingest_config.layout_lead();
        let from = lead
            .earliest_change(now)
            .plus_millis(delay * 1000)
            .unwrap_or(Timestamp::MAX);
        let Ok(next) = own.planned_layout(from, layout, now, lead) else {
            return;
        };
        if next == own {
            return;
        }
        let mut item = if fleet {
            LayoutHistoryItem::default_layout(next)
        } else {
            LayoutHistoryItem::new(&id, next)
        };
        item.version = version + 1;
        self.store
            .table
            .put_entity(&item)
            .expect("a layout item fits");
        let (default, _) = self.stored(&EntityKey::DefaultLayout.key());
        let mut histories = self
            .store
            .histories
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for d in 0..generator::DEVICES {
            let id = DeviceId::new(&generator::device_id(d)).expect("a device ID");
            let (own, _) = self.stored(&EntityKey::DeviceLayout(id.clone()).key());
            histories.insert(id, own.under(&default));
            if fleet || d == device {
                self.edges.insert(d, from);
            }
        }
        let whose = if fleet {
            "the fleet's default".to_owned()
        } else {
            format!("device {device}")
        };
        self.log
            .push(format!("{now}: {whose} becomes {layout} from {from}"));
    }

    /// A reading's time: `when` at the clock now, never past what ingest accepts ahead.
    fn time(&self, device: usize, when: When) -> Timestamp {
        let now = self.now();
        let latest = now.plus_millis(299_000).unwrap_or(now);
        let t = match when {
            When::Ago(ms) => now.minus_millis(ms),
            When::HourEdge { hours, ms } => now
                .hour_start()
                .minus_millis(hours * 3_600_000)
                .and_then(|h| h.plus_millis(ms)),
            When::LayoutEdge { ms } => self.edges.get(&device).and_then(|e| e.plus_millis(ms)),
        };
        let t = t.unwrap_or(now).min(latest);
        // Kinesis order decides between records; whole milliseconds, as devices send.
        Timestamp::from_epoch_millis(t.epoch_millis()).unwrap_or(now)
    }

    fn reading_json(&self, r: &Read, device: &str, at: Timestamp) -> Value {
        let mut o = serde_json::Map::new();
        o.insert("deviceId".into(), json!(device));
        o.insert(
            "timestamp".into(),
            if r.millis {
                json!(at.epoch_millis())
            } else {
                json!(at.to_string())
            },
        );
        for (m, v) in &r.metrics {
            o.insert(m.clone(), json!(v));
        }
        Value::Object(o)
    }

    /// The bytes of a record and what the oracle expects of each of its units.
    fn materialize(&self, rec: &Rec, nested: bool) -> Option<(String, Vec<u8>, Vec<Expect>)> {
        let now = self.now();
        match rec {
            Rec::One(r) => {
                let id = generator::device_id(r.device);
                let at = self.time(r.device, r.when);
                let data = self.reading_json(r, &id, at).to_string().into_bytes();
                Some((id, data, vec![Expect::valid(r.device, at, &r.metrics)]))
            }
            Rec::Upload(rs) => {
                let id = generator::device_id(rs[0].device);
                let mut readings = Vec::new();
                let mut values = Vec::new();
                for r in rs {
                    let at = self.time(r.device, r.when);
                    values.push(self.reading_json(r, &id, at));
                    readings.push((r.device, at, r.metrics.clone()));
                }
                let data = Value::Array(values).to_string().into_bytes();
                Some((id, data, vec![Expect::Valid(readings)]))
            }
            Rec::SenMl(r) => {
                let id = generator::device_id(r.device);
                let at = self.time(r.device, r.when);
                let at = Timestamp::from_epoch_millis(at.epoch_seconds() * 1000).unwrap_or(now);
                let mut pack = Vec::new();
                for (i, (m, v)) in r.metrics.iter().enumerate() {
                    pack.push(if i == 0 {
                        json!({"bn": format!("{id}/"), "bt": at.epoch_seconds(), "n": m, "v": v})
                    } else {
                        json!({"n": m, "v": v})
                    });
                }
                let data = Value::Array(pack).to_string().into_bytes();
                Some((id, data, vec![Expect::valid(r.device, at, &r.metrics)]))
            }
            Rec::Resend(i) => {
                if self.kinesis.is_empty() {
                    return None;
                }
                let s = &self.kinesis[i % self.kinesis.len()];
                // A user record is a plain record: not an aggregate, not a heartbeat.
                let plain = s.units.len() == 1
                    && !matches!(s.units[0], Expect::Heartbeat(_))
                    && !s.data.starts_with(&tidemark_ingest::kpl::MAGIC);
                if nested && !plain {
                    return None;
                }
                Some((s.partition_key.clone(), s.data.clone(), s.units.clone()))
            }
            Rec::Correction { of, metrics } => {
                let (device, at) = self.oracle.nth_reading(*of)?;
                let r = Read {
                    device,
                    when: When::Ago(0),
                    metrics: metrics.clone(),
                    millis: false,
                };
                let id = generator::device_id(device);
                let data = self.reading_json(&r, &id, at).to_string().into_bytes();
                Some((id, data, vec![Expect::valid(device, at, metrics)]))
            }
            Rec::Kpl(users) => {
                if nested {
                    return None;
                }
                let mut parts = Vec::new();
                for u in users {
                    if let Some(p) = self.materialize(u, true) {
                        parts.push(p);
                    }
                }
                if parts.is_empty() {
                    return None;
                }
                let records: Vec<(&str, Option<&str>, &[u8])> = parts
                    .iter()
                    .map(|(pk, data, _)| (pk.as_str(), None, data.as_slice()))
                    .collect();
                let data = tidemark_ingest::kpl::aggregate(&records);
                let units = parts.into_iter().flat_map(|(_, _, e)| e).collect();
                Some((parts_key(users), data, units))
            }
            Rec::Heartbeat { ms } => {
                if nested {
                    return None;
                }
                let at = now.minus_millis(*ms).unwrap_or(now);
                Some((
                    tidemark_schema::heartbeat::PARTITION_KEY.to_owned(),
                    tidemark_schema::heartbeat::record(at),
                    vec![Expect::Heartbeat(at)],
                ))
            }
            Rec::Hostile(h) => {
                let (pk, data) = self.hostile(h)?;
                Some((pk, data, vec![Expect::SetAside]))
            }
        }
    }

    fn hostile(&self, h: &Hostile) -> Option<(String, Vec<u8>)> {
        let evil = |at: Timestamp| {
            json!({"deviceId": EVIL, "timestamp": at.to_string(), "t": 1.0})
                .to_string()
                .into_bytes()
        };
        Some(match h {
            Hostile::Garbage { len } => (
                EVIL.to_owned(),
                (0..*len).map(|i| b"~#@!"[i % 4]).collect::<Vec<u8>>(),
            ),
            Hostile::PastEdge(r, i) => {
                let id = generator::device_id(r.device);
                let at = self.time(r.device, r.when);
                let mut v = self.reading_json(r, &id, at);
                v[generator::ALERTED] = json!(PAST_EDGE_VALUES[*i % PAST_EDGE_VALUES.len()]);
                (id, v.to_string().into_bytes())
            }
            Hostile::Maximal { json } => {
                let n = 1024 * 1024 - 600;
                let data = if *json {
                    format!(r#"{{"deviceId":"{}","timestamp":1,"t":1}}"#, "x".repeat(n))
                        .into_bytes()
                } else {
                    vec![b'~'; n]
                };
                (EVIL.to_owned(), data)
            }
            Hostile::LongKeys {
                key_len,
                hash_digits,
                users,
            } => {
                let key = "k".repeat(*key_len);
                let hash = hash_digits.map(|n| "9".repeat(n));
                let reading = evil(self.now());
                let mut records: Vec<(&str, Option<&str>, &[u8])> =
                    vec![(key.as_str(), hash.as_deref(), b"not json".as_slice())];
                for _ in 0..*users {
                    records.push((key.as_str(), hash.as_deref(), reading.as_slice()));
                }
                (EVIL.to_owned(), tidemark_ingest::kpl::aggregate(&records))
            }
            Hostile::ManyUsers { users, key_len } => {
                let key = "k".repeat(*key_len);
                let records: Vec<(&str, Option<&str>, &[u8])> =
                    vec![(key.as_str(), None, b"1".as_slice()); *users];
                (EVIL.to_owned(), tidemark_ingest::kpl::aggregate(&records))
            }
            Hostile::ForgedHeartbeat => (
                generator::device_id(0),
                br#"{"tidemarkHeartbeat":"2099-01-01T00:00:00Z"}"#.to_vec(),
            ),
        })
    }

    fn put(&mut self, rec: &Rec) {
        let Some((partition_key, data, units)) = self.materialize(rec, false) else {
            return;
        };
        let seq = format!(
            "49590338271490256608559692538361571095921575989{:09}",
            self.kinesis.len()
        );
        for u in &units {
            if let Expect::Valid(rs) = u {
                for (device, at, metrics) in rs {
                    self.oracle.apply(*device, *at, metrics);
                }
            }
        }
        self.log.push(format!(
            "{}: put {seq} ({} bytes, key {} chars): {}",
            self.now(),
            data.len(),
            partition_key.len(),
            describe(&data, &units)
        ));
        self.kinesis.push(Sent {
            seq,
            partition_key,
            data,
            arrival: self.now(),
            units,
        });
    }

    fn kinesis_event(&self, records: &[Sent]) -> KinesisEvent {
        let b64 = base64::engine::general_purpose::STANDARD;
        let records: Vec<Value> = records
            .iter()
            .map(|s| {
                json!({
                    "kinesis": {
                        "kinesisSchemaVersion": "1.0",
                        "partitionKey": s.partition_key,
                        "sequenceNumber": s.seq,
                        "data": b64.encode(&s.data),
                        "approximateArrivalTimestamp": s.arrival.epoch_millis() as f64 / 1000.0,
                    },
                    "eventSource": "aws:kinesis",
                    "eventVersion": "1.0",
                    "eventID": format!("{SHARD}:{}", s.seq),
                    "eventName": "aws:kinesis:record",
                    "awsRegion": "us-east-1",
                    "eventSourceARN": "arn:aws:kinesis:us-east-1:123456789012:stream/tidemark-readings",
                })
            })
            .collect();
        serde_json::from_value::<tidemark_ingest::KinesisBatch>(json!({ "Records": records }))
            .expect("a Kinesis event")
            .0
    }

    /// Ingest takes `batch` records from its checkpoint (and `replay` before it again), as
    /// the event source mapping does, retrying from the record a failure names.
    pub async fn ingest(&mut self, batch: usize, replay: usize) -> Result<(), String> {
        let to = (self.ingested + batch).min(self.kinesis.len());
        let mut from = self.ingested.saturating_sub(replay);
        // The end of the batch tried: a failed invocation is bisected, as the mapping's
        // BisectBatchOnFunctionError does, until it is one record.
        let mut end = to;
        let mut tries = 0;
        while from < to {
            tries += 1;
            if tries > MAX_TRIES {
                return Err(format!(
                    "ingest stalled: the batch {}..{end} from {} failed {MAX_TRIES} times",
                    from, self.kinesis[from].seq
                ));
            }
            let event = self.kinesis_event(&self.kinesis[from..end]);
            let deadline = Instant::now() + Duration::from_secs(5);
            let outcome = self.ingest.process(&event, deadline).await;
            self.publish();
            match outcome {
                Err(e) => {
                    self.log
                        .push(format!("ingest of {from}..{end} failed whole: {e}"));
                    if end - from > 1 {
                        end = from + (end - from) / 2;
                        tries = 0;
                    }
                }
                Ok((resp, stats)) => {
                    let seqs: Vec<&str> = self.kinesis[from..end]
                        .iter()
                        .map(|s| s.seq.as_str())
                        .collect();
                    let failed = resp
                        .batch_item_failures
                        .first()
                        .and_then(|f| f.item_identifier.as_deref());
                    match position(&seqs, failed) {
                        None => {
                            self.ingested = self.ingested.max(end);
                            from = end;
                            end = to;
                            tries = 0;
                        }
                        Some(p) => {
                            self.log.push(format!(
                                "ingest of {from}..{end} failed from {}: {stats:?}",
                                seqs[p]
                            ));
                            let p = from + p;
                            if p > from {
                                tries = 0;
                            }
                            self.ingested = self.ingested.max(p);
                            from = p;
                        }
                    }
                }
            }
        }
        self.ingested = self.ingested.max(to);
        Ok(())
    }

    /// Every change since the last look, into the stream, as DynamoDB Streams records it
    /// (one record per changed item with its old and new image).
    fn publish(&mut self) {
        let now = snapshot(&self.store.table);
        let keys: Vec<(String, String)> = now
            .keys()
            .chain(self.seen.keys())
            .cloned()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        for k in keys {
            let (old, new) = (self.seen.get(&k), now.get(&k));
            if old == new {
                continue;
            }
            self.stream_seq += 1;
            let r = tidemark_aggregator::testing::change_record(
                self.stream_seq.into(),
                old.map(|o| o.clone().into()),
                new.map(|n| n.clone().into()),
            );
            self.stream.push(r);
        }
        self.seen = now;
    }

    /// One role takes `batch` stream records from its checkpoint (and `replay` before it).
    pub async fn aggregate(
        &mut self,
        role: usize,
        batch: usize,
        replay: usize,
    ) -> Result<(), String> {
        let role = role % 2;
        let cp = self.checkpoints[role].0;
        let to = (cp + batch).min(self.stream.len());
        let mut from = cp.saturating_sub(replay);
        let mut tries = 0;
        while from < to {
            tries += 1;
            if tries > MAX_TRIES {
                return Err(format!(
                    "the {} role stalled: the batch from stream record {from} failed {MAX_TRIES} times",
                    ["rollups", "alerts"][role]
                ));
            }
            let mut event = Event::default();
            event.records = self.stream[from..to].to_vec();
            let deadline = Instant::now() + Duration::from_secs(20);
            let (resp, report) = self.roles[role].process_until(&event, deadline).await;
            self.publish();
            let seqs: Vec<&str> = self.stream[from..to]
                .iter()
                .map(|r| r.change.sequence_number.as_deref().unwrap_or(""))
                .collect();
            let failed = resp
                .batch_item_failures
                .first()
                .and_then(|f| f.item_identifier.as_deref());
            match position(&seqs, failed) {
                None => break,
                Some(p) => {
                    self.log.push(format!(
                        "{} role: stream records {from}..{to} failed from {}: {report:?}",
                        ["rollups", "alerts"][role],
                        seqs[p]
                    ));
                    if p > 0 {
                        tries = 0;
                    }
                    from += p;
                    self.checkpoints[role].0 = self.checkpoints[role].0.max(from);
                }
            }
        }
        self.checkpoints[role].0 = self.checkpoints[role].0.max(to);
        Ok(())
    }

    /// The end of a case: a day later, a reading of every device (so that every hour and day
    /// the case touched has closed and been written by a batch after its close), then
    /// everything delivered to the end.
    pub async fn finish(&mut self) -> Result<(), String> {
        let later = self
            .now()
            .plus_millis(26 * 3_600_000)
            .unwrap_or(Timestamp::MAX);
        self.clock.set(later);
        for d in 0..generator::DEVICES {
            self.put(&Rec::One(Read {
                device: d,
                when: When::Ago(0),
                metrics: vec![("c".to_owned(), 0.0)],
                millis: false,
            }));
        }
        let mut rounds = 0;
        loop {
            rounds += 1;
            if rounds > 200 {
                return Err("the pipeline never came to rest".into());
            }
            if self.ingested < self.kinesis.len() {
                self.ingest(10, 0).await?;
                continue;
            }
            let mut idle = true;
            for role in 0..2 {
                if self.checkpoints[role].0 < self.stream.len() {
                    self.aggregate(role, 25, 0).await?;
                    idle = false;
                }
            }
            if idle {
                return Ok(());
            }
        }
    }

    pub fn store(&self) -> &MemoryStore {
        self.store
    }
}

/// The Kinesis partition key of an aggregate: its first user record's device.
fn parts_key(users: &[Rec]) -> String {
    match users.first() {
        Some(Rec::One(r) | Rec::SenMl(r)) => generator::device_id(r.device),
        _ => "kpl".to_owned(),
    }
}

fn describe(data: &[u8], units: &[Expect]) -> String {
    let text = String::from_utf8_lossy(&data[..data.len().min(160)]).into_owned();
    let kinds: Vec<&str> = units
        .iter()
        .map(|u| match u {
            Expect::Valid(_) => "valid",
            Expect::Heartbeat(_) => "heartbeat",
            Expect::SetAside => "hostile",
        })
        .collect();
    format!("{kinds:?} {text}")
}
