//! `tidemark-admin redrive --set-aside`: what the pipeline set aside (docs/design.md §4, "What
//! is retried, what is set aside"), handled again once the cause is fixed.
//!
//! Ingest's set-aside records are the quarantine's `unprocessable` records: each is put back
//! together from its parts and fed through ingest as the Kinesis record it was (same bytes,
//! partition key, sequence number and arrival), which is idempotent; once ingest stores it
//! without setting it aside again, its quarantine items are deleted. A record that still fails
//! stays where it is (ingest sets it aside again at once, its count being past the limit), and
//! the report says so.

use std::time::{Duration, Instant};

use aws_lambda_events::event::kinesis::KinesisEvent;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_kinesis::primitives::{Blob, DateTime};
use tidemark_ingest::Ingest;
use tidemark_schema::table::attr;
use tidemark_schema::{
    Day, Key, QuarantineItem, QuarantinePartItem, QuarantineReason, keys::QUARANTINE_PARTITIONS,
};
use tidemark_streams::KinesisSource;

use crate::AdminError;

/// What a set-aside re-drive did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetAsideReport {
    /// Set-aside records found.
    pub found: usize,
    /// Stored by ingest this time: their quarantine items are gone.
    pub stored: usize,
    /// Found bad by ingest this time (the fix made it a record ingest rejects, e.g. not
    /// JSON): quarantined in its place with that reason.
    pub rejected: usize,
    /// Still failing (set aside again, or not written): left in the quarantine.
    pub still_failing: Vec<String>,
}

/// A set-aside record, whole.
#[derive(Debug, Clone)]
pub struct SetAside {
    pub record: QuarantineItem,
    pub payload: Vec<u8>,
    /// Its items: the record's own and its payload's further parts.
    pub keys: Vec<Key>,
}

fn key_of(pk: &str, sk: &str) -> Vec<(String, AttributeValue)> {
    vec![
        (attr::PK.to_owned(), AttributeValue::S(pk.to_owned())),
        (attr::SK.to_owned(), AttributeValue::S(sk.to_owned())),
    ]
}

/// The `unprocessable` records of `day`, oldest first in each quarantine partition.
pub async fn set_aside_of(
    client: &Client,
    table: &str,
    day: Day,
) -> Result<Vec<SetAside>, AdminError> {
    let mut out = Vec::new();
    for n in 0..QUARANTINE_PARTITIONS {
        let req = client
            .query()
            .table_name(table)
            .consistent_read(true)
            .key_condition_expression("#pk = :pk")
            .expression_attribute_names("#pk", attr::PK)
            .expression_attribute_values(
                ":pk",
                AttributeValue::S(tidemark_schema::keys::quarantine_pk(day, n)),
            );
        let mut records = Vec::new();
        tidemark_store::query::each(req, |item| {
            let unprocessable = matches!(item.get("reason"), Some(AttributeValue::S(r))
                if QuarantineReason::parse(r) == Some(QuarantineReason::Unprocessable));
            if unprocessable {
                records.push(item);
            }
            true
        })
        .await?;
        for item in records {
            let record: QuarantineItem = tidemark_store::from_item(item)?;
            let mut payload = record.payload.clone();
            let mut keys = vec![Key {
                pk: record.pk.clone(),
                sk: record.sk.clone(),
            }];
            for k in record.part_keys() {
                let got = client
                    .get_item()
                    .table_name(table)
                    .consistent_read(true)
                    .set_key(Some(key_of(&k.pk, &k.sk).into_iter().collect()))
                    .send()
                    .await
                    .map_err(|e| AdminError::dynamodb("GetItem", e))?;
                let Some(item) = got.item else {
                    return Err(AdminError::Input(format!(
                        "set-aside record {} lacks its payload part {} (expired?)",
                        record.sequence_number, k.sk
                    )));
                };
                let part: QuarantinePartItem = tidemark_store::from_item(item)?;
                payload.extend_from_slice(&part.payload);
                keys.push(k);
            }
            out.push(SetAside {
                record,
                payload,
                keys,
            });
        }
    }
    Ok(out)
}

/// Feeds each set-aside record of `days` through `ingest` again, deleting those it stores.
pub async fn redrive_set_aside(
    client: &Client,
    table: &str,
    ingest: &Ingest,
    days: &[Day],
) -> Result<SetAsideReport, AdminError> {
    let mut report = SetAsideReport::default();
    for day in days {
        for s in set_aside_of(client, table, *day).await? {
            report.found += 1;
            let id = match s.record.sub_record {
                Some(i) => format!("{}.{i}", s.record.sequence_number),
                None => s.record.sequence_number.clone(),
            };
            let arrived = DateTime::from_millis(s.record.received_at.epoch_millis());
            let kinesis = aws_sdk_kinesis::types::Record::builder()
                .sequence_number(&s.record.sequence_number)
                .partition_key(&s.record.partition_key)
                .data(Blob::new(s.payload.clone()))
                .approximate_arrival_timestamp(arrived)
                .build()
                .map_err(|e| AdminError::Input(e.to_string()))?;
            let record = KinesisSource::event_record("redrive", "shardId-redrive", &kinesis)
                .map_err(|e| AdminError::Input(e.to_string()))?;
            let mut event = KinesisEvent::default();
            event.records = vec![record];
            let deadline = Instant::now() + Duration::from_secs(60);
            match ingest.process(&event, deadline).await {
                Ok((resp, stats))
                    if resp.batch_item_failures.is_empty() && stats.set_aside == 0 =>
                {
                    if stats.quarantined > 0 {
                        // Its quarantine item (the same key) now holds the new reason.
                        report.rejected += 1;
                        continue;
                    }
                }
                Ok(_) => {
                    report.still_failing.push(id);
                    continue;
                }
                Err(e) => {
                    tracing::warn!(record = %id, error = %e, "set-aside record still fails");
                    report.still_failing.push(id);
                    continue;
                }
            }
            for k in &s.keys {
                client
                    .delete_item()
                    .table_name(table)
                    .set_key(Some(key_of(&k.pk, &k.sk).into_iter().collect()))
                    .send()
                    .await
                    .map_err(|e| AdminError::dynamodb("DeleteItem", e))?;
            }
            report.stored += 1;
        }
    }
    Ok(report)
}
