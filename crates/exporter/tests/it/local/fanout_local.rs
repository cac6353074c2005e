//! The export fanned out (docs/decisions/0017-export-fans-out-over-sqs.md) against DynamoDB
//! Local, moto's S3 and moto's SQS (`scripts/services.sh`): a run sends the hour's slices to
//! the queue, workers take them from it, a worker that fails leaves its message to come back,
//! the cursor waits for every slice, and the sealed hour holds each reading once.

use std::time::Duration;

use tidemark_exporter::dynamo::{DynamoExportTable, DynamoState};
use tidemark_exporter::queue::{SqsQueue, client as sqs_client};
use tidemark_exporter::s3::{S3Sink, client as s3_client};
use tidemark_exporter::schedule::{MARK_SETTLE, RESEND_AFTER, Schedule, run};
use tidemark_exporter::sink::{Guarded, Sink};
use tidemark_exporter::slice::export_slice;
use tidemark_exporter::slicing::SliceTask;
use tidemark_exporter::{ExportError, Report, State};
use tidemark_store::ClientSettings;
use tidemark_testkit::{TestTable, services, unique_name};

use crate::common::*;

fn schedule() -> Schedule {
    Schedule {
        prefix: "p".into(),
        grace: Duration::from_secs(300),
        max_hours: 24,
        settle: MARK_SETTLE,
        resend_after: RESEND_AFTER,
    }
}

/// A sink that writes everything but a slice's summary, and fails there: a worker that
/// dies after its files and before it says it is done.
struct DiesBeforeItsSummary<'a>(&'a S3Sink);

impl Sink for DiesBeforeItsSummary<'_> {
    async fn put(&self, key: &str, body: Vec<u8>, ct: &'static str) -> Result<(), ExportError> {
        if key.contains("/_slice-") {
            return Err(ExportError::S3 {
                operation: "PutObject",
                message: "the worker timed out".into(),
            });
        }
        self.0.put(key, body, ct).await
    }
    async fn keys(&self, prefix: &str) -> Result<Vec<String>, ExportError> {
        self.0.keys(prefix).await
    }
    async fn delete(&self, key: &str) -> Result<(), ExportError> {
        self.0.delete(key).await
    }
    async fn read(&self, key: &str) -> Result<Option<Vec<u8>>, ExportError> {
        self.0.read(key).await
    }
}

/// Receives what the queue holds (each message hidden for `hide` seconds), as
/// (receipt, task).
async fn receive(q: &SqsQueue, hide: i32) -> Vec<(String, SliceTask)> {
    let mut out = Vec::new();
    loop {
        let got = q
            .client
            .receive_message()
            .queue_url(&q.url)
            .max_number_of_messages(10)
            .visibility_timeout(hide)
            .send()
            .await
            .unwrap()
            .messages
            .unwrap_or_default();
        if got.is_empty() {
            return out;
        }
        for m in got {
            let task = serde_json::from_str(m.body.as_deref().unwrap()).unwrap();
            out.push((m.receipt_handle.unwrap(), task));
        }
    }
}

async fn delete(q: &SqsQueue, receipt: &str) {
    q.client
        .delete_message()
        .queue_url(&q.url)
        .receipt_handle(receipt)
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_failed_slice_comes_back_from_the_queue_and_the_hour_waits_for_it_without_duplicates() {
    // GIVEN 30 devices with a reading each in the 10:00 hour, and a queue and a bucket on moto
    let t = TestTable::new("export-fanout").await;
    for i in 0..30 {
        let d = format!("dev-{i:02}");
        store(
            &t,
            &reading(&d, ts("2026-04-20T10:30:00Z"), &[("t", i as f64)], None),
        )
        .await;
    }
    let settings = ClientSettings::default();
    let endpoint = services().s3_endpoint.clone();
    let s3 = S3Sink {
        client: s3_client(&settings, Some(&endpoint)).await,
        bucket: unique_name("fanout").to_lowercase().replace('_', "-"),
    };
    s3.client
        .create_bucket()
        .bucket(&s3.bucket)
        .send()
        .await
        .unwrap();
    let sqs = sqs_client(&settings, Some(&endpoint)).await;
    let url = sqs
        .create_queue()
        .queue_name(unique_name("fanout"))
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let queue = SqsQueue { client: sqs, url };
    let state = DynamoState::new(t.client.clone(), &t.name);
    let source = DynamoExportTable::new(t.client.clone(), &t.name, 1);
    let run_at = async |at: &str| -> Report {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        run(&state, &source, &s3, &queue, &schedule(), ts(at), deadline)
            .await
            .unwrap()
    };

    // WHEN the schedule runs at 11:20
    let r = run_at("2026-04-20T11:20:00Z").await;
    // THEN the queue holds one message per slice with devices
    let messages = receive(&queue, 1).await;
    assert_eq!(messages.len(), r.sent);
    assert!(r.sent > 1, "{r:?}");

    // WHEN every worker succeeds but the first, which dies after writing its files
    let (first_receipt, first) = &messages[0];
    let err = export_slice(&source, &DiesBeforeItsSummary(&s3), "p", first).await;
    assert!(err.is_err());
    for (receipt, task) in &messages[1..] {
        export_slice(&source, &s3, "p", task).await.unwrap();
        delete(&queue, receipt).await;
    }
    // THEN a run leaves the cursor where it was and writes no manifest
    let r = run_at("2026-04-20T11:25:00Z").await;
    assert_eq!((r.exported.len(), r.working), (0, 1), "{r:?}");
    assert_eq!(state.cursor().await.unwrap(), None);
    let manifest = "p/readings/dt=2026-04-20/hour=10/_manifest.json";
    assert_eq!(s3.read(manifest).await.unwrap(), None);

    // WHEN its message comes back from the queue (its visibility timeout over) and a worker
    // exports it again
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let again = receive(&queue, 30).await;
    assert_eq!(
        again.iter().map(|(_, t)| t).collect::<Vec<_>>(),
        [first],
        "only the failed slice comes back"
    );
    export_slice(&source, &s3, "p", &again[0].1).await.unwrap();
    delete(&queue, &again[0].0).await;
    let _ = first_receipt;

    // THEN the next run seals the hour and moves the cursor, each reading in it once
    let r = run_at("2026-04-20T11:30:00Z").await;
    assert_eq!(r.exported, [ts("2026-04-20T10:00:00Z")]);
    assert_eq!(
        state.cursor().await.unwrap(),
        Some(ts("2026-04-20T10:00:00Z"))
    );
    let body = s3.read(manifest).await.unwrap().unwrap();
    let m: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (m["readings"].as_u64(), m["rows"].as_u64()),
        (Some(30), Some(30))
    );
    let files: Vec<String> = s3
        .keys("p/readings/dt=2026-04-20/hour=10/slice-")
        .await
        .unwrap();
    assert_eq!(files.len(), m["files"].as_array().unwrap().len());
    assert!(state.jobs().await.unwrap().is_empty());

    // AND a message delivered once more after the seal (SQS delivers at least once) stops
    // at its first put, leaving the sealed hour as it is
    let before = s3.keys("p/").await.unwrap();
    let task = &messages[1].1;
    let guarded = Guarded {
        sink: &s3,
        state: &state,
        task,
    };
    let again = export_slice(&source, &guarded, "p", task).await;
    assert!(
        matches!(again, Err(ExportError::Superseded { .. })),
        "{again:?}"
    );
    assert_eq!(s3.keys("p/").await.unwrap(), before);
}
