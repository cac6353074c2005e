//! The ingest handler: a Kinesis batch → reading items and quarantine items → the table, with
//! a partial-batch response that never skips an unwritten record.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use aws_lambda_events::event::kinesis::KinesisEvent;
use aws_lambda_events::event::streams::KinesisEventResponse;
use futures::{FutureExt, StreamExt};
use tidemark_schema::field;
use tidemark_schema::table::attr;
use tidemark_schema::{
    Clock, DEFAULT_MAX_METRICS_PER_DAY, Day, DeviceId, DeviceIdentity, GatewayFor, MetricName,
    QuarantineReason, QuarantineSource, Reading, Timestamp,
};
use tidemark_store::write::batch::{
    BatchWriteApi, BatchWriter, PendingWrite, Refused, WriteMode, WriteReport,
};
use tidemark_store::write::slots::SlotStore;

use crate::config::{IngestConfig, UnknownDevices};
use crate::decode::{Rejection, reading_item};
use crate::dynamo::DynamoLookups;
pub use crate::error::IngestError;
use crate::event::arrival_time;
use crate::heartbeat;
use crate::metric_cap::Names;
use crate::packing::{SlotBatch, SlotReport};
use crate::rejection::quarantine_items;
use crate::report::Report;
use crate::set_aside::{self, Failed};
use crate::store::{DeviceDirectory, LayoutHistorySource};
use crate::units::Unit;
use tidemark_store::layouts::LayoutBook;

/// A device's `gatewayFor`, `None` when it lists none (or is not registered).
type Gateway = Option<Arc<GatewayFor>>;

struct ShardSnapshot {
    /// By the injected clock, so tests can age it.
    loaded: Timestamp,
    layouts: Arc<LayoutBook>,
}

/// Above this many cached existence answers the cache starts over (a bound on memory for a
/// container that sees an unbounded fleet).
const DEVICE_CACHE_MAX: usize = 200_000;
/// Above this many cached (device, day) name sets the cache starts over.
const NAMES_CACHE_MAX: usize = 100_000;
/// At most this many refused metric names are named in a rejection's message.
const NAMED_METRICS: usize = 5;

/// The ingest function. Build once per container (it holds the caches), call
/// [`Ingest::handle`] per batch. Type parameters are the store operations, so tests swap any
/// of them, and the clock is injected; [`Ingest::new`] wires DynamoDB and the system clock.
pub struct Ingest<W = aws_sdk_dynamodb::Client, S = DynamoLookups, D = DynamoLookups> {
    config: IngestConfig,
    writer: BatchWriter<W>,
    layout_source: S,
    devices: D,
    clock: Clock,
    layout_cache: Mutex<Option<ShardSnapshot>>,
    device_cache: Mutex<HashMap<DeviceId, (bool, Instant)>>,
    /// Gateways' `gatewayFor` (`None`: none), trusted for [`IngestConfig::device_cache_ttl`].
    gateway_cache: Mutex<HashMap<DeviceId, (Gateway, Instant)>>,
    /// Each device's cap on metric names per day, trusted for
    /// [`IngestConfig::device_cache_ttl`].
    cap_cache: Mutex<HashMap<DeviceId, (u32, Instant)>>,
    /// The names known to be in each (device, day)'s set ([`crate::metric_cap`]): only a
    /// name outside it costs a write.
    names_cache: Mutex<HashMap<(DeviceId, Day), Arc<Names>>>,
}

impl Ingest {
    pub fn new(client: aws_sdk_dynamodb::Client, config: IngestConfig) -> Self {
        let lookups = DynamoLookups::new(client.clone(), config.table_name.clone());
        Ingest::from_parts(config, client, lookups.clone(), lookups, Clock::system())
    }
}

impl<W, S, D> Ingest<W, S, D>
where
    W: BatchWriteApi + SlotStore,
    S: LayoutHistorySource,
    D: DeviceDirectory,
{
    pub fn from_parts(
        config: IngestConfig,
        writes: W,
        layout_source: S,
        devices: D,
        clock: Clock,
    ) -> Self {
        let writer = BatchWriter::new(
            writes,
            config.table_name.clone(),
            config.max_in_flight,
            config.retry,
        );
        Ingest {
            config,
            writer,
            layout_source,
            devices,
            clock,
            layout_cache: Mutex::new(None),
            device_cache: Mutex::new(HashMap::new()),
            gateway_cache: Mutex::new(HashMap::new()),
            cap_cache: Mutex::new(HashMap::new()),
            names_cache: Mutex::new(HashMap::new()),
        }
    }

    pub fn config(&self) -> &IngestConfig {
        &self.config
    }

    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The device directory it asks (tests count its reads).
    pub fn devices(&self) -> &D {
        &self.devices
    }

    /// Handles one batch, logging its counts and printing them as an EMF line. Must return by
    /// `deadline` (the invocation's; [`IngestConfig::deadline_margin`] is kept back).
    ///
    /// `Ok` with `batchItemFailures` naming the earliest record not fully written when writes
    /// fail past their retries (records before it are durable, so the event source mapping
    /// resumes there and skips nothing); `Err` when nothing could be attempted (partition counts
    /// or device registry unreadable), which makes Lambda retry the batch.
    ///
    /// A failure of the whole invocation that no retry cures (a panic, an item we cannot
    /// build) is returned as `Err` while the batch holds more than one record, so that
    /// Lambda bisects it; once it is down to one record, that record's failure is counted and
    /// on the [`tidemark_store::failures::SET_ASIDE_AFTER`]-th the record is set aside
    /// ([`crate::set_aside`]) and the batch succeeds.
    pub async fn handle(
        &self,
        event: KinesisEvent,
        deadline: Instant,
    ) -> Result<KinesisEventResponse, IngestError> {
        let (response, stats) = self.process(&event, deadline).await?;
        stats.metrics().emit();
        Ok(response)
    }

    /// [`Ingest::handle`] without the EMF line (the log line is written), returning the counts.
    pub async fn process(
        &self,
        event: &KinesisEvent,
        deadline: Instant,
    ) -> Result<(KinesisEventResponse, Report), IngestError> {
        let outcome = AssertUnwindSafe(self.process_batch(event, deadline))
            .catch_unwind()
            .await;
        let error = match outcome {
            Ok(Ok(done)) => return Ok(done),
            Ok(Err(e)) => e,
            Err(panic) => IngestError::Panicked(panic_message(&*panic)),
        };
        tracing::error!(error = %error, records = event.records.len(), "ingest invocation failed");
        if !error.is_permanent() || event.records.len() != 1 {
            return Err(error);
        }
        let record = &event.records[0];
        let failed = Failed {
            source: QuarantineSource {
                received: arrival_time(record),
                sequence: &record.kinesis.sequence_number,
                sub_record: None,
                partition_key: &record.kinesis.partition_key,
                explicit_hash_key: None,
            },
            data: &record.kinesis.data,
            error: error.to_string(),
        };
        let write_by = tokio::time::Instant::from_std(
            deadline
                .checked_sub(self.config.deadline_margin)
                .unwrap_or(deadline),
        );
        let done = set_aside::settle(
            &self.writer,
            BTreeMap::from([(0, failed)]),
            self.clock.now(),
            write_by,
        )
        .await?;
        if done.is_empty() {
            return Err(error);
        }
        let stats = Report {
            records: 1,
            set_aside: 1,
            ..Report::default()
        };
        Ok((KinesisEventResponse::default(), stats))
    }

    /// One batch, record by record: what [`Ingest::process`] guards.
    async fn process_batch(
        &self,
        event: &KinesisEvent,
        deadline: Instant,
    ) -> Result<(KinesisEventResponse, Report), IngestError> {
        let now = self.clock.now();
        let records = &event.records;
        let mut stats = Report {
            records: records.len() as u64,
            ..Report::default()
        };
        let (units, mut decoded) = crate::units::units(records, now, &self.config);
        stats.user_records = units.iter().filter(|u| u.sub_record.is_some()).count() as u64;
        let mut mismatched = self.check_identity(&units, &mut decoded).await?;
        if self.config.unknown_devices == UnknownDevices::Quarantine {
            self.quarantine_unknown_devices(&mut decoded).await?;
        }
        // Before readings are routed to single items or slots, so both are capped alike.
        self.cap_metric_names(&units, &mut decoded, &mut mismatched)
            .await?;
        let (layouts, unreadable) = self.layouts().await?;
        stats.unreadable_items = unreadable;

        let mut puts = Vec::with_capacity(records.len());
        let mut slots = SlotBatch::default();
        let mut heartbeats = Vec::new();
        // Writes are tagged with their unit's index; units are in record order.
        for (i, (unit, d)) in units.iter().zip(decoded).enumerate() {
            if unit.sub_record.is_none()
                && let Some(sent) =
                    heartbeat::accepted(&unit.data, &unit.partition_key, unit.received)
                && let Some(shard) = heartbeat::shard_of(&records[unit.record])
            {
                heartbeats.push((i, shard, sent));
                continue;
            }
            match d {
                Ok(readings) => {
                    for r in readings {
                        let layout = layouts.of(&r.device_id).layout_at(r.timestamp);
                        let shard = layout.partition_of(r.timestamp);
                        stats.readings += 1;
                        if let Some(len) = layout.slot {
                            let days = self.config.retention_days;
                            slots.add(i, &r, shard, len, days, unit.received);
                            continue;
                        }
                        let item =
                            reading_item(&r, shard, self.config.retention_days, unit.received)
                                .map_err(IngestError::Item)?;
                        puts.push(PendingWrite::merge(i, item, field::METRICS));
                    }
                    // Its readings that name a device it may not speak for, or metric names
                    // past their device's daily cap: the record's bytes are kept with them,
                    // its other readings (and metrics) stored above.
                    if let Some(rejection) = &mismatched[i] {
                        stats.quarantined += 1;
                        *stats
                            .quarantined_by_reason
                            .entry(rejection.reason)
                            .or_default() += 1;
                        for item in quarantine_items(unit.source(), &unit.data, rejection, None)
                            .map_err(IngestError::Item)?
                        {
                            puts.push(PendingWrite::put(i, item));
                        }
                    }
                }
                Err(rejection) => {
                    stats.quarantined += 1;
                    *stats
                        .quarantined_by_reason
                        .entry(rejection.reason)
                        .or_default() += 1;
                    for item in quarantine_items(unit.source(), &unit.data, &rejection, None)
                        .map_err(IngestError::Item)?
                    {
                        puts.push(PendingWrite::put(i, item));
                    }
                }
            }
        }

        let write_by = deadline
            .checked_sub(self.config.deadline_margin)
            .unwrap_or(deadline);
        let write_by = tokio::time::Instant::from_std(write_by);
        let packed = async {
            if slots.is_empty() {
                return SlotReport::default();
            }
            slots
                .write(
                    self.writer.api(),
                    self.writer.table(),
                    self.config.retry,
                    self.config.max_in_flight,
                    write_by,
                )
                .await
        };
        let sources = reading_sources(&puts);
        let (report, packed) = tokio::join!(self.writer.write_all(puts, write_by), packed);
        let (refused_failed, refused_written, refused_for_good) = self
            .quarantine_refused(&units, &report, &sources, write_by, &mut stats)
            .await?;
        // Items refused with an error no retry cures, blamed on every record they merge.
        let mut permanent: BTreeMap<usize, Failed<'_>> = BTreeMap::new();
        for r in report.permanent.iter().chain(&refused_for_good) {
            let key = (r.pk.clone(), r.sk.clone());
            for i in sources.get(&key).into_iter().flatten().chain([&r.tag]) {
                permanent.entry(*i).or_insert_with(|| Failed {
                    source: units[*i].source(),
                    data: &units[*i].data,
                    error: r.why.clone(),
                });
            }
        }
        for (tags, why) in &packed.permanent {
            for i in tags {
                permanent.entry(*i).or_insert_with(|| Failed {
                    source: units[*i].source(),
                    data: &units[*i].data,
                    error: why.clone(),
                });
            }
        }
        let blamed: Vec<usize> = permanent.keys().copied().collect();
        let set_aside = set_aside::settle(&self.writer, permanent, now, write_by).await?;
        stats.set_aside = set_aside.len() as u64;
        let mut response = KinesisEventResponse::default();
        let first_failed = report
            .failed_tags
            .iter()
            .copied()
            .chain(packed.failed_tags.iter().copied())
            .chain(refused_failed)
            .chain(blamed)
            .filter(|t| !set_aside.contains(t))
            .min();
        let (passed, heartbeat_failed) =
            heartbeat::pass_on(&self.writer, heartbeats, first_failed, now, write_by).await?;
        stats.heartbeats = passed;
        let first_failed = heartbeat_failed.or(first_failed);
        if let Some(first) = first_failed {
            let seq = records[units[first].record].kinesis.sequence_number.clone();
            response.add_failure(seq.clone());
            stats.failed_from = Some(seq);
        }
        absorb(&mut stats, &report);
        stats.written += refused_written as u64;
        stats.packed = packed.readings;
        stats.slot_writes = packed.written;
        stats.slots_unchanged = packed.unchanged;
        stats.slot_conflicts = packed.conflicts;
        stats.unreadable_items += packed.unreadable_parts;
        stats.failed_items += packed.failed_tags.len() as u64;
        stats.written += packed.written;
        let error = report
            .last_error
            .as_deref()
            .or(packed.last_error.as_deref());
        stats.log(error);
        Ok((response, stats))
    }

    /// The layout histories (partition counts and packing) of the fleet. Refreshed once half of
    /// [`IngestConfig::layout_cache_ttl`] has passed; a failed refresh keeps the previous
    /// answer until the whole TTL has passed (that is the age the API's layout-change lead
    /// time allows for), and fails the batch after that, so Lambda retries it rather than
    /// writing with layouts that may be out of date.
    /// Also returns how many unreadable `CONFIG` items a fresh load skipped.
    async fn layouts(&self) -> Result<(Arc<LayoutBook>, u64), IngestError> {
        let now = self.clock.now();
        let ttl_ms = i64::try_from(self.config.layout_cache_ttl.as_millis()).unwrap_or(i64::MAX);
        let age = |loaded: Timestamp| now.epoch_millis().saturating_sub(loaded.epoch_millis());
        let cached = {
            let guard = self.layout_cache.lock().unwrap_or_else(|p| p.into_inner());
            guard.as_ref().map(|s| (s.loaded, s.layouts.clone()))
        };
        if let Some((loaded, h)) = &cached
            && age(*loaded) < ttl_ms / 2
        {
            return Ok((h.clone(), 0));
        }
        // Taken before the read: the snapshot is at least as old as the request.
        let loading = now;
        match self.layout_source.load_layout_histories().await {
            Ok(items) => {
                let (layouts, unreadable) = LayoutBook::from_items(items);
                let layouts = Arc::new(self.apply_default_layout(layouts, now).await);
                let mut guard = self.layout_cache.lock().unwrap_or_else(|p| p.into_inner());
                *guard = Some(ShardSnapshot {
                    loaded: loading,
                    layouts: layouts.clone(),
                });
                Ok((layouts, unreadable))
            }
            Err(e) => match cached {
                Some((loaded, h)) if age(loaded) < ttl_ms => {
                    tracing::warn!(error = %e, "layout configuration refresh failed; using the cached one");
                    Ok((h, 0))
                }
                _ => Err(IngestError::LayoutHistory(e)),
            },
        }
    }

    /// Makes the fleet's default layout the configured one (`DEFAULT_LAYOUT`) from the
    /// earliest instant no container can already be writing with the old one, as a layout
    /// change through the API would. A container that loses the race, or cannot write, keeps
    /// the stored default: it is what every other container follows.
    async fn apply_default_layout(&self, layouts: LayoutBook, now: Timestamp) -> LayoutBook {
        let Some(wanted) = self.config.default_layout else {
            return layouts;
        };
        let (current, version) = layouts.default_history();
        if current.layout_at(Timestamp::MAX) == wanted {
            return layouts;
        }
        let lead = self.config.layout_lead();
        let Ok(next) = current.planned_layout(lead.earliest_change(now), wanted, now, lead) else {
            return layouts;
        };
        match self
            .layout_source
            .replace_default_layout(&next, version)
            .await
        {
            Ok(true) => {
                tracing::info!(layout = %wanted, "fleet default layout changed");
                layouts.with_default(next, version + 1)
            }
            Ok(false) => layouts,
            Err(e) => {
                tracing::warn!(error = %e, "could not record the default layout; keeping the stored one");
                layouts
            }
        }
    }

    /// Quarantines every record behind a reading DynamoDB refused for good (past its 400 KB
    /// item limit) with `reading_too_large`, so the shard moves on and nothing is dropped.
    /// Returns the records whose quarantine could not be written (a batch failure), the
    /// items it wrote, and the quarantine items refused for good (their records are blamed).
    async fn quarantine_refused(
        &self,
        units: &[Unit<'_>],
        report: &WriteReport,
        sources: &HashMap<(String, String), BTreeSet<usize>>,
        write_by: tokio::time::Instant,
        stats: &mut Report,
    ) -> Result<(Vec<usize>, usize, Vec<Refused>), IngestError> {
        let mut behind: BTreeMap<usize, &str> = BTreeMap::new();
        for r in &report.refused {
            let key = (r.pk.clone(), r.sk.clone());
            for i in sources.get(&key).into_iter().flatten().chain([&r.tag]) {
                behind.entry(*i).or_insert(r.why.as_str());
            }
        }
        let mut puts = Vec::new();
        for (i, why) in &behind {
            tracing::warn!(
                sequence_number = %units[*i].sequence, sub_record = ?units[*i].sub_record,
                error = %why, "record quarantined: its reading is too large for one item"
            );
            let rejection = Rejection::new(
                QuarantineReason::ReadingTooLarge,
                format!(
                    "its reading (this device's metrics at this timestamp, merged over the \
                     records that carry it) would pass DynamoDB's 400 KB item limit; send \
                     fewer or shorter metric names per timestamp, or pack the device \
                     (PUT /devices/{{id}}/layout); DynamoDB said: {why}"
                ),
            );
            let u = &units[*i];
            for item in quarantine_items(u.source(), &u.data, &rejection, None)
                .map_err(IngestError::Item)?
            {
                puts.push(PendingWrite::put(*i, item));
            }
        }
        if puts.is_empty() {
            return Ok((Vec::new(), 0, Vec::new()));
        }
        stats.quarantined += behind.len() as u64;
        *stats
            .quarantined_by_reason
            .entry(QuarantineReason::ReadingTooLarge)
            .or_default() += behind.len() as u64;
        let r = self.writer.write_all(puts, write_by).await;
        Ok((r.failed_tags, r.written, r.permanent))
    }

    /// Enforces `DEVICE_IDENTITY` ([`crate::identity`]): takes out of each unit the readings
    /// naming a device it may not speak for, and returns, per unit, the `identity_mismatch`
    /// rejection naming them (a unit left with no reading becomes that rejection). The
    /// gateway lists it needs are read once per container and
    /// [`IngestConfig::device_cache_ttl`], only for partition keys whose records name other
    /// devices, so a fleet whose devices send their own readings costs no read.
    async fn check_identity(
        &self,
        units: &[Unit<'_>],
        decoded: &mut [Result<Vec<Reading>, Rejection>],
    ) -> Result<Vec<Option<Rejection>>, IngestError> {
        let mode = self.config.device_identity;
        let mut out = vec![None; decoded.len()];
        if mode == DeviceIdentity::Payload {
            return Ok(out);
        }
        let mut wanted: BTreeSet<DeviceId> = BTreeSet::new();
        for (u, d) in units.iter().zip(decoded.iter()) {
            if let Ok(readings) = d
                && let Some(key) = crate::identity::gateway_needed(
                    mode,
                    &u.partition_key,
                    u.thing.as_ref(),
                    readings,
                )
            {
                wanted.insert(key);
            }
        }
        let gateways = self.gateway_lists(wanted).await?;
        for ((u, d), mismatch) in units.iter().zip(decoded.iter_mut()).zip(out.iter_mut()) {
            let Ok(readings) = d else { continue };
            let gateway = DeviceId::new(&u.partition_key)
                .ok()
                .and_then(|k| gateways.get(&k).cloned().flatten());
            let (kept, rejected) = crate::identity::check(
                mode,
                &u.partition_key,
                u.thing.as_ref(),
                gateway.as_deref(),
                std::mem::take(readings),
            );
            match rejected {
                Some(r) if kept.is_empty() => *d = Err(r),
                r => {
                    *readings = kept;
                    *mismatch = r;
                }
            }
        }
        Ok(out)
    }

    /// Enforces each device's cap on distinct metric names per UTC day
    /// ([`crate::metric_cap`]): takes the names past it out of their readings (a reading left
    /// with no metric is not stored) and adds, per unit, a `too_many_metrics` rejection naming
    /// them to `partial` (after the unit's `identity_mismatch` one, if any: one quarantine
    /// item per record, with the first reason); a unit left with no reading becomes that
    /// rejection. Heartbeat records are not readings and are left alone.
    async fn cap_metric_names(
        &self,
        units: &[Unit<'_>],
        decoded: &mut [Result<Vec<Reading>, Rejection>],
        partial: &mut [Option<Rejection>],
    ) -> Result<(), IngestError> {
        let mut wanted: BTreeMap<(DeviceId, Day), Names> = BTreeMap::new();
        for (u, d) in units.iter().zip(decoded.iter()) {
            let Ok(readings) = d else { continue };
            if u.sub_record.is_none()
                && heartbeat::accepted(&u.data, &u.partition_key, u.received).is_some()
            {
                continue;
            }
            for r in readings {
                wanted
                    .entry((r.device_id.clone(), r.timestamp.day()))
                    .or_default()
                    .extend(r.metrics.keys().cloned());
            }
        }
        let empty = Arc::new(Names::new());
        let need: Vec<((DeviceId, Day), Arc<Names>)> = {
            let cache = self.names_cache.lock().unwrap_or_else(|p| p.into_inner());
            wanted
                .iter()
                .filter_map(|(k, w)| {
                    let known = cache.get(k).unwrap_or(&empty);
                    (!w.is_subset(known)).then(|| (k.clone(), known.clone()))
                })
                .collect()
        };
        if need.is_empty() {
            return Ok(());
        }
        let caps = self
            .metric_caps(need.iter().map(|((d, _), _)| d.clone()).collect())
            .await?;
        let devices = &self.devices;
        let outcomes: Vec<_> = futures::stream::iter(need)
            .map(|(key, known)| {
                let cap = caps
                    .get(&key.0)
                    .copied()
                    .unwrap_or(DEFAULT_MAX_METRICS_PER_DAY);
                let names = &wanted[&key];
                async move {
                    let after =
                        crate::metric_cap::admit(devices, &key.0, key.1, names, &known, cap).await;
                    (key, cap, after)
                }
            })
            .buffer_unordered(self.config.max_in_flight.max(1))
            .collect()
            .await;
        let mut held: HashMap<(DeviceId, Day), (Arc<Names>, u32)> = HashMap::new();
        {
            let mut cache = self.names_cache.lock().unwrap_or_else(|p| p.into_inner());
            if cache.len() + outcomes.len() > NAMES_CACHE_MAX {
                cache.clear();
            }
            for (key, cap, after) in outcomes {
                let after = Arc::new(after.map_err(IngestError::MetricNames)?);
                cache.insert(key.clone(), after.clone());
                held.insert(key, (after, cap));
            }
        }
        for ((d, p), u) in decoded.iter_mut().zip(partial.iter_mut()).zip(units) {
            let Ok(readings) = d else { continue };
            if u.sub_record.is_none()
                && heartbeat::accepted(&u.data, &u.partition_key, u.received).is_some()
            {
                continue;
            }
            let mut refused: BTreeMap<(DeviceId, Day), (BTreeSet<MetricName>, u32)> =
                BTreeMap::new();
            readings.retain_mut(|r| {
                let key = (r.device_id.clone(), r.timestamp.day());
                let Some((set, cap)) = held.get(&key) else {
                    return true;
                };
                let had = r.metrics.len();
                r.metrics.retain(|m, _| {
                    let ok = set.contains(m);
                    if !ok {
                        let e = refused
                            .entry(key.clone())
                            .or_insert((BTreeSet::new(), *cap));
                        e.0.insert(m.clone());
                    }
                    ok
                });
                had == 0 || !r.metrics.is_empty()
            });
            if refused.is_empty() {
                continue;
            }
            let rejection = Rejection::new(
                QuarantineReason::TooManyMetrics,
                too_many_message(&refused, readings.is_empty()),
            );
            let rejection = match p.take() {
                Some(first) => Rejection::new(
                    first.reason,
                    format!("{}; and {}", first.message, rejection.message),
                ),
                None => rejection,
            };
            if readings.is_empty() {
                *d = Err(rejection);
            } else {
                *p = Some(rejection);
            }
        }
        Ok(())
    }

    /// Each of `ids`' cap on metric names per day, from the cache or one batch read of the
    /// rest (only asked when a batch brings a name its container has not seen admitted).
    async fn metric_caps(
        &self,
        ids: BTreeSet<DeviceId>,
    ) -> Result<HashMap<DeviceId, u32>, IngestError> {
        let ttl = self.config.device_cache_ttl;
        let mut known = HashMap::with_capacity(ids.len());
        let mut ask = Vec::new();
        {
            let cache = self.cap_cache.lock().unwrap_or_else(|p| p.into_inner());
            for id in ids {
                match cache.get(&id) {
                    Some((cap, at)) if at.elapsed() < ttl => {
                        known.insert(id, *cap);
                    }
                    _ => ask.push(id),
                }
            }
        }
        if ask.is_empty() {
            return Ok(known);
        }
        let found = self
            .devices
            .metric_caps(&ask)
            .await
            .map_err(IngestError::DeviceLookup)?;
        let now = Instant::now();
        let mut cache = self.cap_cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() + ask.len() > DEVICE_CACHE_MAX {
            cache.clear();
        }
        for id in ask {
            let cap = found
                .get(&id)
                .copied()
                .unwrap_or(DEFAULT_MAX_METRICS_PER_DAY);
            cache.insert(id.clone(), (cap, now));
            known.insert(id, cap);
        }
        Ok(known)
    }

    /// The `gatewayFor` of each of `ids`, from the cache or one batch read of the rest.
    async fn gateway_lists(
        &self,
        ids: BTreeSet<DeviceId>,
    ) -> Result<HashMap<DeviceId, Gateway>, IngestError> {
        let ttl = self.config.device_cache_ttl;
        let mut known = HashMap::with_capacity(ids.len());
        let mut ask = Vec::new();
        {
            let cache = self.gateway_cache.lock().unwrap_or_else(|p| p.into_inner());
            for id in ids {
                match cache.get(&id) {
                    Some((list, at)) if at.elapsed() < ttl => {
                        known.insert(id, list.clone());
                    }
                    _ => ask.push(id),
                }
            }
        }
        if ask.is_empty() {
            return Ok(known);
        }
        let mut found = self
            .devices
            .gateway_lists(&ask)
            .await
            .map_err(IngestError::DeviceLookup)?;
        let now = Instant::now();
        let mut cache = self.gateway_cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() + ask.len() > DEVICE_CACHE_MAX {
            cache.clear();
        }
        for id in ask {
            let list = found.remove(&id).filter(|g| !g.is_empty()).map(Arc::new);
            cache.insert(id.clone(), (list.clone(), now));
            known.insert(id, list);
        }
        Ok(known)
    }

    /// Replaces every record naming an unregistered device with an `unknown_device` rejection.
    async fn quarantine_unknown_devices(
        &self,
        decoded: &mut [Result<Vec<Reading>, Rejection>],
    ) -> Result<(), IngestError> {
        let ttl = self.config.device_cache_ttl;
        let mut wanted: HashSet<&DeviceId> = HashSet::new();
        for d in decoded.iter().flatten() {
            wanted.extend(d.iter().map(|r| &r.device_id));
        }
        let mut known: HashMap<DeviceId, bool> = HashMap::with_capacity(wanted.len());
        let mut ask = Vec::new();
        {
            let cache = self.device_cache.lock().unwrap_or_else(|p| p.into_inner());
            for id in wanted {
                match cache.get(id) {
                    Some((exists, at)) if at.elapsed() < ttl => {
                        known.insert(id.clone(), *exists);
                    }
                    _ => ask.push(id.clone()),
                }
            }
        }
        if !ask.is_empty() {
            let found = self
                .devices
                .existing_devices(&ask)
                .await
                .map_err(IngestError::DeviceLookup)?;
            let now = Instant::now();
            let mut cache = self.device_cache.lock().unwrap_or_else(|p| p.into_inner());
            if cache.len() + ask.len() > DEVICE_CACHE_MAX {
                cache.clear();
            }
            for id in ask {
                let exists = found.contains(&id);
                cache.insert(id.clone(), (exists, now));
                known.insert(id, exists);
            }
        }
        for d in decoded.iter_mut() {
            let unknown = match d {
                Ok(readings) => readings
                    .iter()
                    .find(|r| !known.get(&r.device_id).copied().unwrap_or(false))
                    .map(|r| r.device_id.clone()),
                Err(_) => None,
            };
            if let Some(id) = unknown {
                *d = Err(Rejection::new(
                    QuarantineReason::UnknownDevice,
                    format!("device {id} is not registered (UNKNOWN_DEVICES=quarantine)"),
                ));
            }
        }
        Ok(())
    }
}

/// Which records each reading item of the batch merges (a combined write carries only the
/// earliest record's tag).
fn reading_sources(puts: &[PendingWrite]) -> HashMap<(String, String), BTreeSet<usize>> {
    let mut out: HashMap<(String, String), BTreeSet<usize>> = HashMap::new();
    for p in puts {
        if p.mode == WriteMode::Put {
            continue;
        }
        let attr = |n: &str| p.item.get(n).and_then(|v| v.as_s().ok()).cloned();
        if let (Some(pk), Some(sk)) = (attr(attr::PK), attr(attr::SK)) {
            out.entry((pk, sk)).or_default().insert(p.tag);
        }
    }
    out
}

/// The message of a `too_many_metrics` rejection: which names of which device and day were
/// past its cap, a few of them by name.
fn too_many_message(
    refused: &BTreeMap<(DeviceId, Day), (BTreeSet<MetricName>, u32)>,
    nothing_left: bool,
) -> String {
    let parts: Vec<String> = refused
        .iter()
        .map(|((device, day), (names, cap))| {
            let shown: Vec<String> = names
                .iter()
                .take(NAMED_METRICS)
                .map(|m| format!("{:?}", m.as_str()))
                .collect();
            let more = if names.len() > NAMED_METRICS {
                format!(" … ({} names)", names.len())
            } else {
                String::new()
            };
            format!(
                "device {:?} already has its cap of {cap} distinct metric names on {day} \
                 (UTC); new names {}{more} were not stored",
                device.as_str(),
                shown.join(", ")
            )
        })
        .collect();
    let rest = if nothing_left {
        "nothing else of the record was left to store"
    } else {
        "the record's other metrics are stored"
    };
    format!(
        "{}; {rest} (a device's cap is maxMetricsPerDay on PUT /devices/{{id}}, default \
         {DEFAULT_MAX_METRICS_PER_DAY})",
        parts.join("; ")
    )
}

fn absorb(stats: &mut Report, r: &WriteReport) {
    stats.written = r.written as u64;
    stats.duplicates = r.duplicates as u64;
    stats.merged = r.merged;
    stats.calls = r.calls;
    stats.retries = r.retries;
    stats.unprocessed = r.unprocessed;
    stats.throttled = r.throttled;
    stats.failed_items = r.failed_tags.len() as u64;
}

pub use tidemark_store::deadline::from_epoch_millis as deadline_from_epoch_millis;

/// What a panic said, for the log and the set-aside record.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}
