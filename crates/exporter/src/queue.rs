//! Where the schedule sends an hour's slices (docs/decisions/0017-export-fans-out-over-sqs.md):
//! an SQS queue deployed (and in `make run`, on moto), whose messages invoke the exporter
//! once per slice; or memory, for tests and for a run with no queue, which then exports the
//! slices itself ([`crate::function::Exporter::run`]).

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::ExportError;
use crate::slicing::SliceTask;

/// SQS's most messages in one `SendMessageBatch`.
const SQS_BATCH: usize = 10;

pub trait SliceQueue {
    /// Sends each task as a message of its own.
    fn send(&self, tasks: &[SliceTask]) -> impl Future<Output = Result<(), ExportError>> + Send;
}

/// Tasks held in memory until taken.
#[derive(Debug, Default)]
pub struct MemoryQueue(Mutex<VecDeque<SliceTask>>);

impl MemoryQueue {
    /// Every task sent and not yet taken, oldest first.
    pub fn take(&self) -> Vec<SliceTask> {
        self.0
            .lock()
            .map(|mut q| q.drain(..).collect())
            .unwrap_or_default()
    }
}

impl SliceQueue for MemoryQueue {
    async fn send(&self, tasks: &[SliceTask]) -> Result<(), ExportError> {
        if let Ok(mut q) = self.0.lock() {
            q.extend(tasks.iter().cloned());
        }
        Ok(())
    }
}

/// An SQS queue.
#[derive(Debug, Clone)]
pub struct SqsQueue {
    pub client: aws_sdk_sqs::Client,
    pub url: String,
}

fn sqs_error(operation: &'static str, e: impl std::fmt::Display) -> ExportError {
    ExportError::Queue {
        operation,
        message: e.to_string(),
    }
}

impl SliceQueue for SqsQueue {
    async fn send(&self, tasks: &[SliceTask]) -> Result<(), ExportError> {
        for chunk in tasks.chunks(SQS_BATCH) {
            let mut entries = Vec::with_capacity(chunk.len());
            for (i, t) in chunk.iter().enumerate() {
                let body = serde_json::to_string(t).map_err(ExportError::Manifest)?;
                let entry = aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(body)
                    .build()
                    .map_err(|e| sqs_error("SendMessageBatch", e))?;
                entries.push(entry);
            }
            let out = self
                .client
                .send_message_batch()
                .queue_url(&self.url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| {
                    sqs_error(
                        "SendMessageBatch",
                        aws_sdk_sqs::error::DisplayErrorContext(e),
                    )
                })?;
            // A message SQS refused is sent again when its job is next looked at.
            if let Some(f) = out.failed.first() {
                return Err(sqs_error(
                    "SendMessageBatch",
                    format!(
                        "{} of {} refused: {}",
                        out.failed.len(),
                        chunk.len(),
                        f.code
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// An SQS client with the project's retry and timeout settings; `endpoint` (a local SQS,
/// moto in `make run`) with dummy credentials.
pub async fn client(
    settings: &tidemark_store::ClientSettings,
    endpoint: Option<&str>,
) -> aws_sdk_sqs::Client {
    let local = tidemark_store::ClientSettings {
        endpoint: endpoint.map(str::to_owned),
        ..settings.clone()
    };
    let shared = tidemark_store::sdk_config(&local).await;
    let mut b = aws_sdk_sqs::config::Builder::from(&shared);
    if let Some(e) = endpoint {
        b = b.endpoint_url(e);
    }
    aws_sdk_sqs::Client::from_conf(b.build())
}
