//! Emulated Lambda event-source mappings: the poller that, on AWS, reads a Kinesis stream or a
//! DynamoDB stream and invokes a function with batches.
//!
//! The semantics are the ones Tidemark's handlers are written against, so a local run exercises
//! the same failure paths as a deployment:
//! - one poller per shard, records in order, a child shard only after its parents are drained;
//! - a batch is up to `batch_size` records, or what arrived within `batching_window`;
//! - `ReportBatchItemFailures`: the batch is retried from the lowest reported sequence number
//!   (an identifier that is not in the batch fails the whole batch, as on AWS);
//! - a function error with `BisectBatchOnFunctionError` splits the batch in two and retries the
//!   halves in order (a split does not use up a retry attempt);
//! - by default (`max_retries: None`, the template's `MaximumRetryAttempts: -1`) a failing
//!   batch is retried with backoff (doubling up to 5 s) until it succeeds: the shard waits, and
//!   nothing is skipped for a function error, however long DynamoDB is down;
//! - with a finite `max_retries`, after that many retries the records are written as an
//!   on-failure record (the JSON AWS sends to an on-failure destination) and the shard moves
//!   on; `tidemark-admin redrive` feeds such records through the function again.
//!
//! Checkpoints live in memory: a restart starts from the configured starting position again,
//! which is harmless because every handler is idempotent.
//!
//! Not emulated: `ParallelizationFactor` (one poller per shard is the strictest ordering the
//! real one allows, per partition key and per shard alike), `MaximumRecordAgeInSeconds` (the
//! template sets -1, no limit, which is what this poller does), tumbling windows and filters
//! (Tidemark uses neither).
//!
//! The sources (shards, lineage, iterators, records in the event's shape) are
//! `tidemark_streams`'; this module is the engine that polls them.

pub mod handlers;
pub mod invoke;

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use thiserror::Error;
use tokio::sync::watch;
use tokio::task::JoinSet;

pub use handlers::{KinesisHandler, StreamHandler};
pub use invoke::HttpFunction;
use tidemark_streams::{EventSource, LOCAL_ACCOUNT, LOCAL_REGION, Start};

/// A function error as the mapping sees it: the message goes to the log and the on-failure
/// record, never anywhere the function's caller could act on it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0}")]
pub struct FunctionError(pub String);

impl FunctionError {
    pub fn new(e: impl std::fmt::Display) -> Self {
        FunctionError(e.to_string())
    }
}

/// Where a new mapping starts reading (the `StartingPosition` of the real one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartingPosition {
    TrimHorizon,
    Latest,
}

/// What an invocation returned, reduced to what the mapping acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    Success,
    /// `batchItemFailures[].itemIdentifier`, as returned (may hold `None`s or strangers).
    ItemFailures(Vec<Option<String>>),
    Error(FunctionError),
}

/// A function invoked with batches of `R` records.
pub trait BatchFunction<R>: Send + Sync + 'static {
    fn invoke(&self, records: Vec<R>) -> impl Future<Output = Invocation> + Send;
}

/// The settings of one mapping, with the real service's names.
#[derive(Debug, Clone)]
pub struct MappingConfig {
    pub function_name: String,
    pub batch_size: usize,
    pub batching_window: Duration,
    pub starting_position: StartingPosition,
    pub report_batch_item_failures: bool,
    pub bisect_on_error: bool,
    /// `None` (the default, as in the template) retries until the batch succeeds, like
    /// `MaximumRetryAttempts = -1`; `Some(n)` gives up after `n` retries.
    pub max_retries: Option<u32>,
    /// Where on-failure records go (the on-failure destination); `None` only logs.
    pub on_failure_dir: Option<PathBuf>,
    /// Wait between GetRecords calls on a shard that is caught up.
    pub poll_interval: Duration,
    /// First retry delay, doubled per attempt up to 5 s.
    pub retry_backoff: Duration,
    /// How often to look for new shards.
    pub shard_refresh: Duration,
}

impl MappingConfig {
    /// The settings of `template.yaml`'s mappings, scaled for a laptop.
    pub fn new(function_name: &str) -> Self {
        MappingConfig {
            function_name: function_name.to_owned(),
            batch_size: 100,
            batching_window: Duration::from_secs(1),
            starting_position: StartingPosition::TrimHorizon,
            report_batch_item_failures: true,
            bisect_on_error: true,
            max_retries: None,
            on_failure_dir: None,
            poll_interval: Duration::from_millis(250),
            retry_backoff: Duration::from_millis(200),
            shard_refresh: Duration::from_secs(5),
        }
    }

    fn function_arn(&self) -> String {
        format!(
            "arn:aws:lambda:{LOCAL_REGION}:{LOCAL_ACCOUNT}:function:{}",
            self.function_name
        )
    }

    fn retries_exhausted(&self, attempts: u32) -> bool {
        self.max_retries.is_some_and(|m| attempts > m)
    }

    fn backoff(&self, attempts: u32) -> Duration {
        let factor = 1u32 << attempts.saturating_sub(1).min(6);
        (self.retry_backoff * factor).min(Duration::from_secs(5))
    }
}

/// Counters of a running mapping, readable while it runs (progress, tests, `make run`).
#[derive(Debug, Default)]
pub struct MappingStats {
    /// Records of successful invocations (a record retried and then accepted counts once per
    /// accepted delivery).
    pub records_delivered: AtomicU64,
    pub invocations: AtomicU64,
    pub function_errors: AtomicU64,
    pub partial_failures: AtomicU64,
    /// Records given up on and written to the on-failure destination.
    pub records_discarded: AtomicU64,
    /// Arrival time (epoch ms) of the newest record handed over successfully.
    pub last_arrival_millis: AtomicI64,
}

impl MappingStats {
    pub fn delivered(&self) -> u64 {
        self.records_delivered.load(Ordering::Relaxed)
    }
    pub fn discarded(&self) -> u64 {
        self.records_discarded.load(Ordering::Relaxed)
    }
}

/// An event-source mapping: a source, a function, settings.
pub struct Mapping<S: EventSource, F> {
    source: Arc<S>,
    function: Arc<F>,
    config: Arc<MappingConfig>,
    stats: Arc<MappingStats>,
}

impl<S: EventSource, F: BatchFunction<S::Record>> Mapping<S, F> {
    pub fn new(source: S, function: F, config: MappingConfig) -> Self {
        Mapping {
            source: Arc::new(source),
            function: Arc::new(function),
            config: Arc::new(config),
            stats: Arc::default(),
        }
    }

    pub fn stats(&self) -> Arc<MappingStats> {
        self.stats.clone()
    }

    /// Polls until `shutdown` turns true (or its sender is dropped). An invocation in flight
    /// finishes first, so a stop never leaves a half-handled batch behind.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let mut started: HashSet<String> = HashSet::new();
        let mut finished: HashSet<String> = HashSet::new();
        let mut tasks: JoinSet<String> = JoinSet::new();
        let mut next_refresh = Instant::now();
        loop {
            if stop_requested(&shutdown) {
                break;
            }
            if Instant::now() >= next_refresh {
                match self.source.shards().await {
                    Ok(shards) => {
                        let known: HashSet<&str> = shards.iter().map(|s| s.id.as_str()).collect();
                        for s in &shards {
                            if started.contains(&s.id) {
                                continue;
                            }
                            let parents_done = [&s.parent, &s.adjacent_parent]
                                .into_iter()
                                .flatten()
                                .filter(|p| known.contains(p.as_str()))
                                .all(|p| finished.contains(p));
                            if parents_done {
                                started.insert(s.id.clone());
                                tasks.spawn(self.shard_poller(s.id.clone(), shutdown.clone()));
                            }
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "listing shards failed; retrying"),
                }
                next_refresh = Instant::now() + self.config.shard_refresh;
            }
            tokio::select! {
                changed = shutdown.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
                done = tasks.join_next(), if !tasks.is_empty() => {
                    if let Some(Ok(shard)) = done {
                        finished.insert(shard);
                        // A drained parent may unblock its children right away.
                        next_refresh = Instant::now();
                    }
                }
                _ = tokio::time::sleep_until(next_refresh.into()) => {}
            }
        }
        while tasks.join_next().await.is_some() {}
    }

    fn shard_poller(
        &self,
        shard: String,
        shutdown: watch::Receiver<bool>,
    ) -> impl Future<Output = String> + Send + 'static {
        let poller = ShardPoller {
            source: self.source.clone(),
            function: self.function.clone(),
            config: self.config.clone(),
            stats: self.stats.clone(),
            shard,
            shutdown,
        };
        async move {
            poller.run().await;
            poller.shard
        }
    }
}

struct ShardPoller<S: EventSource, F> {
    source: Arc<S>,
    function: Arc<F>,
    config: Arc<MappingConfig>,
    stats: Arc<MappingStats>,
    shard: String,
    shutdown: watch::Receiver<bool>,
}

impl<S: EventSource, F: BatchFunction<S::Record>> ShardPoller<S, F> {
    fn stopping(&self) -> bool {
        stop_requested(&self.shutdown)
    }

    /// Sleeps, returning early (true) when asked to stop.
    async fn pause(&self, d: Duration) -> bool {
        let mut rx = self.shutdown.clone();
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = rx.wait_for(|stop| *stop) => {}
        }
        self.stopping()
    }

    fn start(&self, checkpoint: &Option<String>) -> Start {
        match (checkpoint, self.config.starting_position) {
            (Some(seq), _) => Start::After(seq.clone()),
            (None, StartingPosition::TrimHorizon) => Start::TrimHorizon,
            (None, StartingPosition::Latest) => Start::Latest,
        }
    }

    /// Reads the shard to its end (or until stopped), handing batches to the function.
    async fn run(&self) {
        let mut checkpoint: Option<String> = None;
        let mut iterator: Option<String> = None;
        let mut fresh = true;
        let mut buf: Vec<S::Record> = Vec::new();
        let mut window_start: Option<Instant> = None;
        let cfg = &self.config;
        while !self.stopping() {
            if fresh {
                match self
                    .source
                    .iterator(&self.shard, &self.start(&checkpoint))
                    .await
                {
                    Ok(it) => {
                        iterator = it;
                        fresh = false;
                    }
                    Err(e) => {
                        tracing::warn!(shard = %self.shard, error = %e, "no shard iterator; retrying");
                        if self
                            .pause(cfg.poll_interval.max(Duration::from_millis(500)))
                            .await
                        {
                            return;
                        }
                        continue;
                    }
                }
            }
            let Some(it) = iterator.clone() else {
                // The shard is closed and read to its end.
                if !buf.is_empty() {
                    self.deliver(std::mem::take(&mut buf)).await;
                }
                return;
            };
            let limit = cfg
                .batch_size
                .saturating_sub(buf.len())
                .clamp(1, self.source.max_read());
            let page = match self.source.read(&self.shard, &it, limit).await {
                Ok(p) => p,
                Err(e) => {
                    // Expired or invalid iterator, throttling, emulator restart: start again
                    // from the checkpoint, dropping what was read after it.
                    buf.clear();
                    if e.is_trimmed() && checkpoint.is_none() {
                        // DynamoDB Local says this of a new, still empty shard: just read again.
                        tracing::debug!(shard = %self.shard, error = %e, "shard not readable yet");
                    } else if e.is_trimmed() {
                        // The records after the checkpoint are gone (retention): like Lambda,
                        // carry on from the oldest record still there.
                        tracing::warn!(shard = %self.shard, error = %e, "records trimmed; continuing at the trim horizon");
                        checkpoint = None;
                    } else {
                        tracing::warn!(shard = %self.shard, error = %e, "GetRecords failed; re-reading from the checkpoint");
                    }
                    window_start = None;
                    fresh = true;
                    if self
                        .pause(cfg.poll_interval.max(Duration::from_millis(500)))
                        .await
                    {
                        return;
                    }
                    continue;
                }
            };
            let got = page.records.len();
            iterator = page.next;
            buf.extend(page.records);
            if window_start.is_none() && !buf.is_empty() {
                window_start = Some(Instant::now());
            }
            let full = buf.len() >= cfg.batch_size;
            let closed = iterator.is_none();
            let window_over = window_start.is_some_and(|t| t.elapsed() >= cfg.batching_window);
            if !buf.is_empty() && (full || closed || window_over) {
                let batch = std::mem::take(&mut buf);
                window_start = None;
                if let Some(last) = batch.last() {
                    checkpoint = Some(S::sequence(last).to_owned());
                }
                self.deliver(batch).await;
                continue;
            }
            let behind = page.millis_behind.is_some_and(|m| m > 0);
            if got < limit && !behind {
                let wait = match window_start {
                    Some(t) => cfg
                        .poll_interval
                        .min(cfg.batching_window.saturating_sub(t.elapsed())),
                    None => cfg.poll_interval,
                };
                if self.pause(wait).await {
                    return;
                }
            }
        }
    }

    /// Hands `records` to the function until each is accepted or given up on.
    async fn deliver(&self, records: Vec<S::Record>) {
        let cfg = &self.config;
        // (batch, retries used so far), processed front first so order is kept.
        let mut queue: VecDeque<(Vec<S::Record>, u32)> = VecDeque::from([(records, 0)]);
        while let Some((batch, attempts)) = queue.pop_front() {
            if self.stopping() {
                // Not checkpointed: a later run reads these records again.
                return;
            }
            self.stats.invocations.fetch_add(1, Ordering::Relaxed);
            let started = Instant::now();
            let outcome = self.function.invoke(batch.clone()).await;
            tracing::debug!(
                function = %cfg.function_name,
                shard = %self.shard,
                records = batch.len(),
                ms = started.elapsed().as_millis() as u64,
                "invoked"
            );

            let failure = match outcome {
                Invocation::Success => None,
                // Without ReportBatchItemFailures the response body means nothing to Lambda.
                Invocation::ItemFailures(ids)
                    if !cfg.report_batch_item_failures || ids.is_empty() =>
                {
                    None
                }
                Invocation::ItemFailures(ids) => {
                    self.stats.partial_failures.fetch_add(1, Ordering::Relaxed);
                    let index: HashMap<&str, usize> = batch
                        .iter()
                        .enumerate()
                        .map(|(i, r)| (S::sequence(r), i))
                        .collect();
                    let positions: Option<Vec<usize>> = ids
                        .iter()
                        .map(|id| id.as_deref().and_then(|id| index.get(id).copied()))
                        .collect();
                    match positions.and_then(|p| p.into_iter().min()) {
                        Some(first) => Some((
                            first,
                            FunctionError("the function reported failed items".into()),
                            false,
                        )),
                        // An identifier that is null, empty or not in the batch: the whole
                        // batch failed.
                        None => Some((
                            0,
                            FunctionError(
                                "batchItemFailures named a record not in the batch".into(),
                            ),
                            true,
                        )),
                    }
                }
                Invocation::Error(e) => {
                    self.stats.function_errors.fetch_add(1, Ordering::Relaxed);
                    Some((0, e, true))
                }
            };
            let Some((first_failed, error, function_error)) = failure else {
                self.delivered(&batch[..]);
                continue;
            };
            // Everything before the first failed record is checkpointed.
            self.delivered(&batch[..first_failed]);
            let rest = batch[first_failed..].to_vec();
            if function_error && cfg.bisect_on_error && rest.len() > 1 {
                let mid = rest.len() / 2;
                tracing::info!(shard = %self.shard, size = rest.len(), error = %error, "function error; bisecting the batch");
                queue.push_front((rest[mid..].to_vec(), attempts));
                queue.push_front((rest[..mid].to_vec(), attempts));
                continue;
            }
            let attempts = attempts + 1;
            if cfg.retries_exhausted(attempts) {
                self.discard(&rest, &error, attempts).await;
                continue;
            }
            tracing::info!(shard = %self.shard, size = rest.len(), attempt = attempts, error = %error, "retrying");
            if self.pause(cfg.backoff(attempts)).await {
                return;
            }
            queue.push_front((rest, attempts));
        }
    }

    fn delivered(&self, records: &[S::Record]) {
        if let Some(last) = records.last() {
            self.stats
                .records_delivered
                .fetch_add(records.len() as u64, Ordering::Relaxed);
            self.stats
                .last_arrival_millis
                .fetch_max(S::arrival_millis(last), Ordering::Relaxed);
        }
    }

    /// Gives up on `records`: the on-failure record of the real service, then move on.
    async fn discard(&self, records: &[S::Record], error: &FunctionError, attempts: u32) {
        let (Some(first), Some(last)) = (records.first(), records.last()) else {
            return;
        };
        let doc = on_failure_record(
            &self.config,
            self.source.batch_info_key(),
            json!({
                "shardId": self.shard,
                "startSequenceNumber": S::sequence(first),
                "endSequenceNumber": S::sequence(last),
                "approximateArrivalOfFirstRecord": iso_millis(S::arrival_millis(first)),
                "approximateArrivalOfLastRecord": iso_millis(S::arrival_millis(last)),
                "batchSize": records.len(),
                "streamArn": self.source.arn(),
            }),
            error,
            attempts,
        );
        tracing::error!(shard = %self.shard, records = records.len(), error = %error, "retries exhausted; records skipped");
        if let Some(dir) = &self.config.on_failure_dir {
            let name = format!(
                "{}-{}-{}.json",
                tidemark_schema::Timestamp::now().epoch_millis(),
                self.shard,
                S::sequence(first)
            );
            let body = serde_json::to_vec_pretty(&doc).unwrap_or_default();
            let written = async {
                tokio::fs::create_dir_all(dir).await?;
                tokio::fs::write(dir.join(name), body).await
            };
            if let Err(e) = written.await {
                tracing::error!(error = %e, dir = %dir.display(), "could not write the on-failure record");
            }
        }
        // Counted once the on-failure record is on disk: whoever waits for the count (a
        // test, before re-driving the records) then finds every file.
        self.stats
            .records_discarded
            .fetch_add(records.len() as u64, Ordering::Relaxed);
    }
}

/// True once a stop was asked for, or nobody can ask any more (the sender is gone).
pub fn stop_requested(rx: &watch::Receiver<bool>) -> bool {
    rx.has_changed().is_err() || *rx.borrow()
}

fn iso_millis(ms: i64) -> String {
    tidemark_schema::Timestamp::from_epoch_millis(ms)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// The document Lambda sends to an on-failure destination, plus the error message.
fn on_failure_record(
    cfg: &MappingConfig,
    info_key: &str,
    info: Value,
    error: &FunctionError,
    attempts: u32,
) -> Value {
    let mut doc = json!({
        "requestContext": {
            "functionArn": cfg.function_arn(),
            "condition": "RetryAttemptsExhausted",
            "approximateInvokeCount": attempts,
        },
        "responseContext": {
            "statusCode": 200,
            "executedVersion": "$LATEST",
            "functionError": "Unhandled",
        },
        "version": "1.0",
        "timestamp": tidemark_schema::Timestamp::now().to_string(),
        "reason": error.0,
    });
    if let Some(m) = doc.as_object_mut() {
        m.insert(info_key.to_owned(), info);
    }
    doc
}

/// Reads every on-failure record in `dir` (tests and `make run`'s summary).
pub fn read_on_failure_records(dir: &std::path::Path) -> Vec<Value> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    files.sort();
    files
        .into_iter()
        .filter_map(|p| std::fs::read(p).ok())
        .filter_map(|b| serde_json::from_slice(&b).ok())
        .collect()
}
