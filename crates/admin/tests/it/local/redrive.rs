//! `tidemark-admin redrive` against kinesis-mock and DynamoDB Local: on-failure records that
//! devstack's mappings wrote after giving up (a finite retry count, as a user may configure)
//! are handled again and nothing is lost or counted twice.

use std::time::Duration;

use crate::common::{Stack, ago, reading};
use tidemark_admin::files::{DONE_DIR, files, redrive_files};
use tidemark_admin::{AdminError, OnFailure, Rebuilder, Redriver};
use tidemark_devstack::esm::MappingConfig;
use tidemark_devstack::esm::read_on_failure_records;
use tidemark_testkit::{Fault, FaultProxy, rollups, services};

async fn redriver(stack: &Stack) -> Redriver {
    let local = tidemark_devstack::LocalConfig {
        dynamodb_endpoint: services().dynamodb_endpoint.clone(),
        kinesis_endpoint: services().kinesis_endpoint.clone(),
        ..tidemark_devstack::LocalConfig::from_env()
    };
    let ddb = stack.table.client.clone();
    let streams = local.dynamodb_streams().await;
    Redriver {
        kinesis: stack.stream.client.clone(),
        streams: streams.clone(),
        ingest: tidemark_ingest::Ingest::new(
            ddb.clone(),
            tidemark_ingest::IngestConfig::new(stack.table.name.clone()),
        ),
        rebuilder: Rebuilder::new(ddb, streams, stack.table.name.clone()),
    }
}

async fn wait(what: &str, cond: impl Fn() -> bool) {
    tidemark_testkit::eventually(Duration::from_secs(90), what, || async {
        cond().then_some(())
    })
    .await;
}

async fn redrive_dir(r: &Redriver, dir: &std::path::Path) -> (usize, usize) {
    let (mut records, mut rebuilt) = (0, 0);
    let found = files(dir);
    assert!(
        !found.is_empty(),
        "no on-failure records in {}",
        dir.display()
    );
    for f in found {
        let doc = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
        let rep = r.redrive(&OnFailure::parse(&doc).unwrap()).await.unwrap();
        records += rep.records;
        rebuilt += rep.rebuilt.len();
    }
    (records, rebuilt)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ingest_batch_given_up_on_is_re_read_from_kinesis_and_stored_once() {
    // GIVEN a pipeline whose ingest mapping gives up after one retry, and DynamoDB down
    let stack = Stack::new("redrive-ingest").await;
    let proxy = FaultProxy::start(services().dynamodb_addr()).await.unwrap();
    let pipeline = stack
        .pipeline(proxy.endpoint(), |name, m| match name {
            "ingest" => MappingConfig {
                max_retries: Some(1),
                bisect_on_error: false,
                ..m
            },
            _ => m,
        })
        .await;
    proxy.fail_with(Fault::InternalServerError);
    let sent: Vec<_> = (0..12)
        .map(|i| reading(&format!("rd-{}", i % 3), ago(90 - i * 5), i))
        .collect();
    stack.publish(&sent).await;
    wait("ingest to give up", || pipeline.ingest.discarded() == 12).await;
    proxy.recover();
    assert!(stack.table.scan().await.is_empty(), "nothing was written");

    // WHEN the on-failure records are re-driven (twice: it is idempotent)
    let dir = stack.on_failure.join("ingest");
    let r = redriver(&stack).await;
    let (records, _) = redrive_dir(&r, &dir).await;
    let (again, _) = redrive_dir(&r, &dir).await;
    // AND as the command does it: handled files move aside, so a second run finds none
    let n = files(&dir).len();
    let by_files = redrive_files(&r, std::slice::from_ref(&dir)).await;
    assert!(by_files.failed.is_empty(), "{:?}", by_files.failed);
    assert_eq!(by_files.handled.len(), n);
    assert!(files(&dir).is_empty());
    assert_eq!(files(&dir.join(DONE_DIR)).len(), n);

    // THEN each record was read back from Kinesis, and every reading is stored once and
    // rolled up exactly by the running aggregator
    assert_eq!((records, again), (12, 12));
    stack.wait_exact(12, Duration::from_secs(60)).await;
    pipeline.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_aggregator_batch_given_up_on_becomes_a_rebuild_and_every_rollup_is_exact() {
    // GIVEN a pipeline whose aggregator mapping gives up after one retry, and first invokes
    // the aggregator 5 s after the first stream record (20 readings make far fewer records
    // than a batch holds), so the throttling below starts before it has rolled any up: with
    // a 1 s window a slow machine let it roll them all up first, give up only on a later
    // batch of its own rollup writes, and leave nothing to rebuild
    let stack = Stack::new("redrive-agg").await;
    let proxy = FaultProxy::start(services().dynamodb_addr()).await.unwrap();
    let pipeline = stack
        .pipeline(proxy.endpoint(), |name, m| match name {
            "rollups" => MappingConfig {
                max_retries: Some(1),
                batching_window: Duration::from_secs(5),
                ..m
            },
            _ => m,
        })
        .await;
    let sent: Vec<_> = (0..20)
        .map(|i| reading(&format!("ra-{}", i % 2), ago(100 - i * 4), i))
        .collect();
    stack.publish(&sent).await;
    // AND DynamoDB throttling every call once the readings are stored, until the aggregator
    // has given up on them
    wait("ingest", || pipeline.ingest.delivered() == 20).await;
    proxy.fail_with(Fault::Throttling);
    wait("the aggregator to give up", || {
        pipeline.rollups.discarded() > 0
    })
    .await;
    proxy.recover();
    let records = read_on_failure_records(&stack.on_failure.join("rollups"));
    assert!(
        records
            .iter()
            .all(|r| r.get("DDBStreamBatchInfo").is_some())
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!rollups::differences(&stack.table.scan().await).is_empty());

    // WHEN its on-failure records are re-driven
    let r = redriver(&stack).await;
    let (_, rebuilt) = redrive_dir(&r, &stack.on_failure.join("rollups")).await;

    // THEN the devices they touched were rebuilt and every rollup is exact
    assert!(rebuilt > 0);
    stack.wait_exact(20, Duration::from_secs(60)).await;
    pipeline.stop().await;
}

#[tokio::test]
async fn a_range_kinesis_no_longer_holds_is_reported_as_not_retained() {
    let stack = Stack::new("redrive-gone").await;
    let seqs = stack.publish(&[reading("rg", ago(5), 1)]).await;
    let doc = serde_json::json!({
        "requestContext": {"condition": "RetryAttemptsExhausted"},
        "KinesisBatchInfo": {
            "shardId": "shardId-000000000042",
            "startSequenceNumber": seqs[0],
            "endSequenceNumber": seqs[0],
            "streamArn": format!("arn:aws:kinesis:us-east-1:000000000000:stream/{}", stack.stream.name),
        }
    });
    let r = redriver(&stack).await;
    let e = r
        .redrive(&OnFailure::parse(&doc).unwrap())
        .await
        .unwrap_err();
    assert!(matches!(e, AdminError::NotRetained(_)), "{e}");
    assert!(stack.table.scan().await.is_empty());
}

#[tokio::test]
async fn an_aggregator_range_the_table_stream_no_longer_holds_says_what_to_rebuild() {
    let stack = Stack::new("redrive-gone-ddb").await;
    let r = redriver(&stack).await;
    let source = tidemark_streams::DynamoDbStreamSource::for_table(
        &stack.table.client,
        r.streams.clone(),
        &stack.table.name,
    )
    .await
    .unwrap();
    let doc = serde_json::json!({
        "DDBStreamBatchInfo": {
            "shardId": "shardId-00000000000000000000-00000000",
            "startSequenceNumber": "000000000000000000001",
            "endSequenceNumber": "000000000000000000002",
            "approximateArrivalOfFirstRecord": "2026-04-20T14:00:00.000Z",
            "approximateArrivalOfLastRecord": "2026-04-20T14:00:05.000Z",
            "streamArn": source.arn(),
        }
    });
    let e = r
        .redrive(&OnFailure::parse(&doc).unwrap())
        .await
        .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, AdminError::NotRetained(_)), "{msg}");
    assert!(msg.contains("tidemark-admin rebuild"), "{msg}");
    assert!(msg.contains("2026-04-20T14:00:00.000Z"), "{msg}");
}
