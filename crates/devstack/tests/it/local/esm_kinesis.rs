//! The emulated Kinesis mapping against kinesis-mock, with fake functions: ordering, batching,
//! partial-failure checkpoints, bisection, retries and the on-failure record.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::event::kinesis::KinesisEvent;
use aws_lambda_events::event::streams::KinesisEventResponse;
use aws_sdk_kinesis::primitives::Blob;
use tidemark_devstack::esm::{
    FunctionError, KinesisHandler, Mapping, MappingConfig, MappingStats, read_on_failure_records,
};
use tidemark_streams::KinesisSource;
use tidemark_testkit::{TestStream, eventually, unique_name};
use tokio::sync::watch;

use crate::common::LastSeen;

type Behaviour =
    dyn Fn(&[String], usize) -> Result<KinesisEventResponse, FunctionError> + Send + Sync;

/// A function that records every batch (as the record payloads) and answers as told.
#[derive(Clone)]
struct Fake {
    calls: Arc<Mutex<Vec<Vec<String>>>>,
    seqs: Arc<Mutex<Vec<Vec<String>>>>,
    behaviour: Arc<Behaviour>,
}

impl Fake {
    fn new(
        f: impl Fn(&[String], usize) -> Result<KinesisEventResponse, FunctionError>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        Fake {
            calls: Arc::default(),
            seqs: Arc::default(),
            behaviour: Arc::new(f),
        }
    }
    fn ok() -> Self {
        Fake::new(|_, _| Ok(KinesisEventResponse::default()))
    }
    fn calls(&self) -> Vec<Vec<String>> {
        self.calls.lock().unwrap().clone()
    }
}

impl KinesisHandler for Fake {
    async fn handle(&self, event: KinesisEvent) -> Result<KinesisEventResponse, FunctionError> {
        let payloads: Vec<String> = event
            .records
            .iter()
            .map(|r| String::from_utf8(r.kinesis.data.0.clone()).unwrap())
            .collect();
        let seqs: Vec<String> = event
            .records
            .iter()
            .map(|r| r.kinesis.sequence_number.clone())
            .collect();
        let n = {
            let mut c = self.calls.lock().unwrap();
            c.push(payloads.clone());
            c.len()
        };
        self.seqs.lock().unwrap().push(seqs.clone());
        let mut resp = (self.behaviour)(&payloads, n)?;
        // Behaviours name failed records by payload; the wire names them by sequence number.
        for f in &mut resp.batch_item_failures {
            if let Some(id) = &f.item_identifier {
                if let Some(i) = payloads.iter().position(|p| p == id) {
                    f.item_identifier = Some(seqs[i].clone());
                }
            }
        }
        Ok(resp)
    }
}

fn failing(payload: &str) -> KinesisEventResponse {
    let mut r = KinesisEventResponse::default();
    r.add_failure(payload);
    r
}

async fn put(stream: &TestStream, key: &str, payloads: &[String]) {
    for p in payloads {
        stream
            .client
            .put_record()
            .stream_name(&stream.name)
            .partition_key(key)
            .data(Blob::new(p.as_bytes()))
            .send()
            .await
            .unwrap();
    }
}

fn payloads(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:03}")).collect()
}

fn config(dir: &Path) -> MappingConfig {
    MappingConfig {
        batch_size: 100,
        batching_window: Duration::from_millis(300),
        poll_interval: Duration::from_millis(50),
        retry_backoff: Duration::from_millis(10),
        shard_refresh: Duration::from_millis(500),
        max_retries: Some(2),
        on_failure_dir: Some(dir.to_path_buf()),
        ..MappingConfig::new("fake")
    }
}

fn failure_dir() -> PathBuf {
    std::env::temp_dir().join(unique_name("onfailure"))
}

struct Running {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    stats: Arc<MappingStats>,
}

async fn start(stream: &TestStream, f: Fake, cfg: MappingConfig) -> Running {
    let source = KinesisSource::new(stream.client.clone(), &stream.name)
        .await
        .unwrap();
    let mapping = Mapping::new(source, f, cfg);
    let stats = mapping.stats();
    let (stop, rx) = watch::channel(false);
    let task = tokio::spawn(mapping.run(rx));
    Running { stop, task, stats }
}

impl Running {
    /// Waits until the mapping's counts pass `cond` (saying what they were if they never do).
    async fn wait_for(&self, what: &str, cond: impl Fn(&MappingStats) -> bool) {
        let last = LastSeen::default();
        eventually(Duration::from_secs(30), what, || {
            last.set(format!("{:?}", self.stats));
            let done = cond(&self.stats);
            async move { done.then_some(()) }
        })
        .await;
    }
    async fn stop(self) {
        self.stop.send(true).unwrap();
        self.task.await.unwrap();
    }
}

#[tokio::test]
async fn records_reach_the_function_in_order_per_shard_from_every_shard() {
    // GIVEN a 2-shard stream holding 4 devices' numbered records
    let stream = TestStream::new("esm-order", 2).await;
    let dir = failure_dir();
    for d in ["a", "b", "c", "d"] {
        put(&stream, d, &payloads(d, 15)).await;
    }
    // WHEN the mapping runs with small batches
    let f = Fake::ok();
    let cfg = MappingConfig {
        batch_size: 7,
        ..config(&dir)
    };
    let run = start(&stream, f.clone(), cfg).await;
    run.wait_for("60 records", |s| s.delivered() == 60).await;
    run.stop().await;

    // THEN each device's records arrived once each, in order, in batches of at most 7
    let calls = f.calls();
    assert!(calls.iter().all(|c| !c.is_empty() && c.len() <= 7));
    let all: Vec<String> = calls.concat();
    for d in ["a", "b", "c", "d"] {
        let seen: Vec<&String> = all.iter().filter(|p| p.starts_with(d)).collect();
        let want: Vec<String> = payloads(d, 15);
        assert_eq!(seen, want.iter().collect::<Vec<_>>(), "device {d}");
    }
}

#[tokio::test]
async fn a_reported_item_failure_replays_the_batch_from_that_record() {
    // GIVEN ten records and a function that fails record 4 the first time only
    let stream = TestStream::new("esm-partial", 1).await;
    let dir = failure_dir();
    let sent = payloads("r", 10);
    put(&stream, "k", &sent).await;
    let f = Fake::new(|batch, n| {
        if n == 1 {
            Ok(failing(&batch[4]))
        } else {
            Ok(KinesisEventResponse::default())
        }
    });
    // WHEN the mapping runs
    let run = start(&stream, f.clone(), config(&dir)).await;
    run.wait_for("all ten", |s| s.delivered() == 10).await;
    run.stop().await;
    // THEN the second invocation starts at the failed record and nothing before it comes back
    let calls = f.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0], sent);
    assert_eq!(calls[1], sent[4..].to_vec());
    assert!(read_on_failure_records(&dir).is_empty());
}

#[tokio::test]
async fn an_unknown_item_identifier_fails_the_whole_batch() {
    let stream = TestStream::new("esm-badid", 1).await;
    let dir = failure_dir();
    let sent = payloads("r", 3);
    put(&stream, "k", &sent).await;
    let f = Fake::new(|_, n| {
        if n == 1 {
            Ok(failing("no-such-sequence-number"))
        } else {
            Ok(KinesisEventResponse::default())
        }
    });
    let cfg = MappingConfig {
        bisect_on_error: false,
        ..config(&dir)
    };
    let run = start(&stream, f.clone(), cfg).await;
    run.wait_for("all three", |s| s.delivered() == 3).await;
    run.stop().await;
    assert_eq!(f.calls(), vec![sent.clone(), sent]);
}

#[tokio::test]
async fn a_function_error_bisects_until_the_poison_record_is_alone_then_skips_it() {
    // GIVEN eight records, the sixth of which always makes the function fail
    let stream = TestStream::new("esm-bisect", 1).await;
    let dir = failure_dir();
    let sent = payloads("r", 8);
    put(&stream, "k", &sent).await;
    let poison = sent[5].clone();
    let p = poison.clone();
    let f = Fake::new(move |batch, _| {
        if batch.contains(&p) {
            Err(FunctionError("poison".into()))
        } else {
            Ok(KinesisEventResponse::default())
        }
    });
    // WHEN the mapping runs with bisection and two retries
    let run = start(&stream, f.clone(), config(&dir)).await;
    run.wait_for("7 delivered, 1 discarded", |s| {
        s.delivered() == 7 && s.discarded() == 1
    })
    .await;
    run.stop().await;

    // THEN the batch was halved down to the poison record, which got 1 + 2 tries alone
    let calls = f.calls();
    let expected: Vec<Vec<String>> = vec![
        sent.clone(),
        sent[..4].to_vec(),
        sent[4..].to_vec(),
        sent[4..6].to_vec(),
        vec![sent[4].clone()],
        vec![poison.clone()],
        vec![poison.clone()],
        vec![poison.clone()],
        sent[6..].to_vec(),
    ];
    assert_eq!(calls, expected);
    // AND the on-failure record names exactly that record
    let seq = f.seqs.lock().unwrap()[5][0].clone();
    let records = read_on_failure_records(&dir);
    assert_eq!(records.len(), 1);
    let info = &records[0]["KinesisBatchInfo"];
    assert_eq!(info["startSequenceNumber"], seq.as_str());
    assert_eq!(info["endSequenceNumber"], seq.as_str());
    assert_eq!(info["batchSize"], 1);
    assert_eq!(info["shardId"], "shardId-000000000000");
    assert_eq!(
        records[0]["requestContext"]["condition"],
        "RetryAttemptsExhausted"
    );
    assert_eq!(records[0]["reason"], "poison");
}

#[tokio::test]
async fn without_bisection_exhausted_retries_skip_the_batch_and_the_shard_moves_on() {
    // GIVEN a function that fails every batch holding "bad" records
    let stream = TestStream::new("esm-retries", 1).await;
    let dir = failure_dir();
    let bad = payloads("bad", 3);
    put(&stream, "k", &bad).await;
    let f = Fake::new(|batch, _| {
        if batch.iter().any(|p| p.starts_with("bad")) {
            Err(FunctionError("boom".into()))
        } else {
            Ok(KinesisEventResponse::default())
        }
    });
    let cfg = MappingConfig {
        bisect_on_error: false,
        max_retries: Some(1),
        ..config(&dir)
    };
    let run = start(&stream, f.clone(), cfg).await;
    run.wait_for("the bad batch discarded", |s| s.discarded() == 3)
        .await;
    // WHEN good records follow
    let good = payloads("good", 2);
    put(&stream, "k", &good).await;
    run.wait_for("the good records", |s| s.delivered() == 2)
        .await;
    run.stop().await;
    // THEN the bad batch was tried twice (1 + 1 retry), recorded, and the good ones delivered
    let calls = f.calls();
    assert_eq!(calls, vec![bad.clone(), bad.clone(), good]);
    let records = read_on_failure_records(&dir);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["KinesisBatchInfo"]["batchSize"], 3);
    assert_eq!(records[0]["requestContext"]["approximateInvokeCount"], 2);
}

#[tokio::test]
async fn batches_are_cut_at_the_batch_size_and_the_rest_waits_for_the_window() {
    // GIVEN 25 records waiting
    let stream = TestStream::new("esm-window", 1).await;
    let dir = failure_dir();
    let sent = payloads("r", 25);
    put(&stream, "k", &sent).await;
    // WHEN the mapping reads with batch size 10 and a 1 s window
    let f = Fake::ok();
    let cfg = MappingConfig {
        batch_size: 10,
        batching_window: Duration::from_secs(1),
        ..config(&dir)
    };
    let run = start(&stream, f.clone(), cfg).await;
    run.wait_for("all 25", |s| s.delivered() == 25).await;
    run.stop().await;
    // THEN two full batches, then the remainder as one batch
    let sizes: Vec<usize> = f.calls().iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![10, 10, 5]);
}

#[tokio::test]
async fn records_arriving_within_the_window_share_one_invocation() {
    let stream = TestStream::new("esm-gather", 1).await;
    let dir = failure_dir();
    let f = Fake::ok();
    let cfg = MappingConfig {
        batching_window: Duration::from_secs(5),
        ..config(&dir)
    };
    let run = start(&stream, f.clone(), cfg).await;
    // GIVEN records put one by one, well within the window
    let sent = payloads("r", 5);
    put(&stream, "k", &sent).await;
    run.wait_for("five", |s| s.delivered() == 5).await;
    run.stop().await;
    // THEN they were gathered into one invocation
    assert_eq!(f.calls(), vec![sent]);
}

#[tokio::test]
async fn events_carry_what_lambda_puts_in_a_kinesis_event() {
    let stream = TestStream::new("esm-shape", 1).await;
    let dir = failure_dir();
    put(&stream, "sensor_01", &["{\"x\":1}".to_owned()]).await;
    let seen: Arc<Mutex<Option<KinesisEvent>>> = Arc::default();
    struct Capture(Arc<Mutex<Option<KinesisEvent>>>);
    impl KinesisHandler for Capture {
        async fn handle(&self, e: KinesisEvent) -> Result<KinesisEventResponse, FunctionError> {
            *self.0.lock().unwrap() = Some(e);
            Ok(KinesisEventResponse::default())
        }
    }
    let source = KinesisSource::new(stream.client.clone(), &stream.name)
        .await
        .unwrap();
    let mapping = Mapping::new(source, Capture(seen.clone()), config(&dir));
    let stats = mapping.stats();
    let (stop, rx) = watch::channel(false);
    let task = tokio::spawn(mapping.run(rx));
    eventually(Duration::from_secs(30), "the record delivered", || async {
        (stats.delivered() == 1).then_some(())
    })
    .await;
    stop.send(true).unwrap();
    task.await.unwrap();
    let e = seen.lock().unwrap().clone().expect("one event");
    let r = &e.records[0];
    assert_eq!(r.kinesis.data.0, b"{\"x\":1}");
    assert_eq!(r.kinesis.partition_key, "sensor_01");
    assert!(!r.kinesis.sequence_number.is_empty());
    assert_eq!(r.event_source.as_deref(), Some("aws:kinesis"));
    assert!(
        r.event_source_arn
            .as_deref()
            .unwrap()
            .ends_with(&stream.name)
    );
    assert_eq!(
        r.event_id.as_deref().unwrap(),
        format!("shardId-000000000000:{}", r.kinesis.sequence_number)
    );
    let age = tidemark_schema::Timestamp::now().epoch_millis()
        - r.kinesis.approximate_arrival_timestamp.timestamp_millis();
    assert!(
        (0..600_000).contains(&age),
        "arrival time is recent: {age} ms"
    );
}

#[tokio::test]
async fn a_child_shard_is_read_only_after_its_parent_is_drained() {
    // GIVEN records in a shard that is then resharded, and more records of the same key in
    // its children
    let stream = TestStream::new("esm-lineage", 1).await;
    let dir = failure_dir();
    let before = payloads("a", 6);
    put(&stream, "a", &before).await;
    stream
        .client
        .update_shard_count()
        .stream_name(&stream.name)
        .target_shard_count(2)
        .scaling_type(aws_sdk_kinesis::types::ScalingType::UniformScaling)
        .send()
        .await
        .unwrap();
    eventually(
        Duration::from_secs(10),
        "the resharded stream is active",
        || async {
            let d = stream
                .client
                .describe_stream_summary()
                .stream_name(&stream.name)
                .send()
                .await
                .unwrap();
            (d.stream_description_summary().unwrap().stream_status()
                == &aws_sdk_kinesis::types::StreamStatus::Active)
                .then_some(())
        },
    )
    .await;
    let after = payloads("b", 6);
    put(&stream, "a", &after).await;
    let shards = stream
        .client
        .list_shards()
        .stream_name(&stream.name)
        .send()
        .await
        .unwrap();
    assert!(
        shards
            .shards()
            .iter()
            .any(|s| s.parent_shard_id().is_some()),
        "the emulator made child shards"
    );

    // WHEN a slow function reads them in small batches
    let f = Fake::new(|_, _| {
        // Paces the reads only (a slow function); the outcome is waited for below.
        std::thread::sleep(Duration::from_millis(30));
        Ok(KinesisEventResponse::default())
    });
    let cfg = MappingConfig {
        batch_size: 2,
        batching_window: Duration::ZERO,
        ..config(&dir)
    };
    let run = start(&stream, f.clone(), cfg).await;
    run.wait_for("all twelve", |s| s.delivered() == 12).await;
    run.stop().await;

    // THEN every record of the parent came before any record of a child
    let all: Vec<String> = f.calls().concat();
    let mut want = before.clone();
    want.extend(after);
    assert_eq!(all, want);
}

#[tokio::test]
async fn by_default_a_failing_batch_is_retried_until_it_succeeds_and_nothing_is_skipped() {
    // GIVEN five records and a function that errors on its first 15 invocations (an outage
    // longer than the 10 retries the mappings used to allow), then recovers
    let stream = TestStream::new("esm-forever", 1).await;
    let dir = failure_dir();
    let sent = payloads("r", 5);
    put(&stream, "k", &sent).await;
    let f = Fake::new(|_, n| {
        if n <= 15 {
            Err(FunctionError("ThrottlingException".into()))
        } else {
            Ok(KinesisEventResponse::default())
        }
    });
    // WHEN the mapping runs with the default retry setting (the template's -1)
    let cfg = MappingConfig {
        max_retries: MappingConfig::new("fake").max_retries,
        ..config(&dir)
    };
    assert_eq!(cfg.max_retries, None);
    let run = start(&stream, f.clone(), cfg).await;
    run.wait_for("all five", |s| s.delivered() == 5).await;
    let discarded = run.stats.discarded();
    run.stop().await;
    // THEN every record reached the function, in order, none was discarded or recorded
    let calls = f.calls();
    assert!(calls.len() > 15);
    let mut accepted: Vec<String> = calls[15..].concat();
    accepted.dedup();
    assert_eq!(accepted, sent);
    assert!(read_on_failure_records(&dir).is_empty());
    assert_eq!(discarded, 0);
}

#[tokio::test]
async fn by_default_reported_item_failures_are_retried_from_the_checkpoint_forever() {
    // GIVEN four records and a function that reports the third as failed 12 times
    let stream = TestStream::new("esm-partial-forever", 1).await;
    let dir = failure_dir();
    let sent = payloads("r", 4);
    put(&stream, "k", &sent).await;
    let third = sent[2].clone();
    let f = Fake::new(move |batch, n| {
        if n <= 12 && batch.contains(&third) {
            Ok(failing(&third))
        } else {
            Ok(KinesisEventResponse::default())
        }
    });
    let cfg = MappingConfig {
        max_retries: None,
        ..config(&dir)
    };
    let run = start(&stream, f.clone(), cfg).await;
    run.wait_for("all four", |s| s.delivered() == 4).await;
    let discarded = run.stats.discarded();
    run.stop().await;
    // THEN the records before the failure were checkpointed once, the rest retried until
    // accepted, and nothing was skipped
    let calls = f.calls();
    assert_eq!(calls.len(), 13);
    assert_eq!(calls[0], sent);
    assert!(calls[1..].iter().all(|c| c == &sent[2..].to_vec()));
    assert_eq!(discarded, 0);
    assert!(read_on_failure_records(&dir).is_empty());
}
