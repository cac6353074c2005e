//! EventBridge Scheduler, locally: the watchdog run every period (the template's
//! `rate(1 minute)`; `TIDEMARK_WATCHDOG_SECONDS` in `make run`), each run with the deployed
//! function's deadline, what it decided printed; and the Parquet export's schedule
//! (`TIDEMARK_EXPORT_SECONDS`), each hour it writes printed with where.

use std::sync::Arc;
use std::time::Duration;

use tidemark_exporter::function::Exporter;
use tidemark_watchdog::{DynamoWatch, KinesisHeartbeats, Watchdog};
use tokio::sync::watch;

/// The deployed watchdog's timeout (`template.yaml`).
const WATCHDOG_TIMEOUT: Duration = Duration::from_secs(60);

/// Calls `run` at once and then every `period` until `stop` turns true, as EventBridge
/// Scheduler would (a run that overruns delays the next, never doubles it).
async fn every<F: Future<Output = ()>>(
    period: Duration,
    mut stop: watch::Receiver<bool>,
    mut run: impl FnMut() -> F,
) {
    let mut tick = tokio::time::interval(period.max(Duration::from_millis(100)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        run().await;
    }
}

/// Runs `w` at once and then every `period` until `stop` turns true.
pub async fn watchdog(
    w: Watchdog<DynamoWatch, KinesisHeartbeats>,
    period: Duration,
    stop: watch::Receiver<bool>,
) {
    let w = &w;
    every(period, stop, || async move {
        let deadline = tokio::time::Instant::now() + WATCHDOG_TIMEOUT.min(period * 2);
        match w.run(deadline).await {
            Ok(r) => {
                if r.opened > 0 {
                    tracing::info!(
                        opened = r.opened,
                        watermark = ?r.watermark.map(|t| t.to_string()),
                        "watchdog: devices went offline"
                    );
                }
                tracing::debug!(?r, "watchdog run");
            }
            Err(e) => tracing::warn!(error = %e, "watchdog run failed"),
        }
    })
    .await;
}

/// An export run's time budget (as a deployed function's timeout would give it).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(300);

/// Runs the export at once and then every `period` until `stop` turns true.
pub async fn export(e: Arc<Exporter>, period: Duration, stop: watch::Receiver<bool>) {
    let e = &e;
    every(period, stop, || async move {
        let deadline = tokio::time::Instant::now() + EXPORT_TIMEOUT;
        match Box::pin(e.run(tidemark_schema::Timestamp::now(), deadline)).await {
            Ok(r) => {
                e.log(&r);
            }
            Err(err) => tracing::warn!(error = %err, "export run failed"),
        }
    })
    .await;
}

/// The local export queue's name (on moto).
pub const EXPORT_QUEUE: &str = "tidemark-export";

/// The export queue's event source mapping, locally: receives a message at a time and hands
/// it to the exporter as Lambda's SQS trigger would, deleting it once its slice is written
/// (a failed one comes back when its visibility timeout ends), until `stop` turns true.
pub async fn export_slices(e: Arc<Exporter>, mut stop: watch::Receiver<bool>) {
    let Some(queue) = e.queue.clone() else {
        return;
    };
    loop {
        let receive = queue
            .client
            .receive_message()
            .queue_url(&queue.url)
            .max_number_of_messages(1)
            .wait_time_seconds(1)
            .visibility_timeout(30)
            .send();
        let out = tokio::select! {
            out = receive => out,
            _ = stop.wait_for(|s| *s) => return,
        };
        let messages = match out {
            Ok(o) => o.messages.unwrap_or_default(),
            Err(err) => {
                tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(err), "export queue receive failed");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let batch: Vec<(String, String, String)> = messages
            .into_iter()
            .map(|m| {
                (
                    m.message_id.unwrap_or_default(),
                    m.body.unwrap_or_default(),
                    m.receipt_handle.unwrap_or_default(),
                )
            })
            .collect();
        let bodies: Vec<(String, String)> = batch
            .iter()
            .map(|(id, body, _)| (id.clone(), body.clone()))
            .collect();
        let failed = Box::pin(e.work_messages(bodies)).await;
        for (id, _, receipt) in &batch {
            if failed.contains(id) {
                continue;
            }
            let _ = queue
                .client
                .delete_message()
                .queue_url(&queue.url)
                .receipt_handle(receipt)
                .send()
                .await;
        }
    }
}
