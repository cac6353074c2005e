//! EventBridge Scheduler, locally: the watchdog run every period (the template's
//! `rate(1 minute)`; `TIDEMARK_WATCHDOG_SECONDS` in `make run`), each run with the deployed
//! function's deadline, what it decided printed; and the Parquet export's schedule
//! (`TIDEMARK_EXPORT_SECONDS`), each hour it writes printed with where.

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
pub async fn export(e: Exporter, period: Duration, stop: watch::Receiver<bool>) {
    let e = &e;
    every(period, stop, || async move {
        let deadline = tokio::time::Instant::now() + EXPORT_TIMEOUT;
        match e.run(tidemark_schema::Timestamp::now(), deadline).await {
            Ok(r) => {
                e.log(&r);
            }
            Err(err) => tracing::warn!(error = %err, "export run failed"),
        }
    })
    .await;
}
