//! The textbook design, for comparison on the same DynamoDB Local: ingest puts every reading
//! with its own `PutItem`, one after another; the stream consumer updates an hourly and a
//! daily item per reading with `ADD` for count and sums, then a conditional `SET` when the
//! reading moved a minimum or maximum (DynamoDB has no `min()` in update expressions).
//!
//! Items are the same shapes and sizes as Tidemark's readings, so only the write pattern
//! differs. Like the textbook, it keeps no watermark: a replayed batch counts twice.

use std::collections::{BTreeMap, HashMap};

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::kinesis::KinesisEvent;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use tidemark_ingest::{IngestConfig, decode_record, reading_item};
use tidemark_schema::{AggregateItem, MetricName, Period, ReadingItem, Timestamp};

use crate::BenchError;

pub struct Baseline {
    ingest_client: Client,
    aggregator_client: Client,
    config: IngestConfig,
}

fn sdk(op: &'static str) -> impl Fn(String) -> BenchError {
    move |m| BenchError::Baseline(format!("{op}: {m}"))
}

impl Baseline {
    /// Separate clients so a metering proxy can attribute each side's units.
    pub fn new(ingest_client: Client, aggregator_client: Client, table: &str) -> Self {
        Baseline {
            ingest_client,
            aggregator_client,
            config: IngestConfig::new(table),
        }
    }

    /// One `PutItem` per reading, in order; returns the readings written.
    pub async fn ingest(&self, event: &KinesisEvent, now: Timestamp) -> Result<u64, BenchError> {
        let mut n = 0;
        for r in &event.records {
            let Ok(readings) = decode_record(&r.kinesis.data, now, &self.config) else {
                continue;
            };
            for reading in readings {
                let arrived = tidemark_ingest::arrival_time(r);
                let item = reading_item(&reading, None, self.config.retention_days, arrived)
                    .map_err(|e| sdk("item")(e.to_string()))?;
                self.ingest_client
                    .put_item()
                    .table_name(&self.config.table_name)
                    .set_item(Some(item))
                    .send()
                    .await
                    .map_err(|e| {
                        sdk("PutItem")(aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string())
                    })?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Two (or more) updates per inserted reading; returns the readings aggregated.
    pub async fn aggregate(&self, event: &Event) -> Result<u64, BenchError> {
        let mut n = 0;
        for r in &event.records {
            let Some(item) = inserted_reading(r) else {
                continue;
            };
            let Ok((reading, _)) = item.to_reading() else {
                continue;
            };
            for period in [Period::Hourly, Period::Daily] {
                let key =
                    AggregateItem::key_for(&reading.device_id, period.bucket(reading.timestamp));
                self.update(&key.pk, &key.sk, &reading.metrics).await?;
            }
            n += 1;
        }
        Ok(n)
    }

    async fn update(
        &self,
        pk: &str,
        sk: &str,
        metrics: &BTreeMap<MetricName, f64>,
    ) -> Result<(), BenchError> {
        let num = |v: f64| AttributeValue::N(v.to_string());
        let key = HashMap::from([
            ("pk".to_owned(), AttributeValue::S(pk.to_owned())),
            ("sk".to_owned(), AttributeValue::S(sk.to_owned())),
        ]);
        let mut names = HashMap::from([("#c".to_owned(), "count".to_owned())]);
        let mut values = HashMap::from([(":one".to_owned(), num(1.0))]);
        let mut adds = vec!["#c :one".to_owned()];
        for (i, (m, v)) in metrics.iter().enumerate() {
            names.insert(format!("#s{i}"), format!("sum_{m}"));
            values.insert(format!(":v{i}"), num(*v));
            adds.push(format!("#s{i} :v{i}"));
        }
        let out = self
            .aggregator_client
            .update_item()
            .table_name(&self.config.table_name)
            .set_key(Some(key.clone()))
            .update_expression(format!("ADD {}", adds.join(", ")))
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .map_err(|e| {
                sdk("UpdateItem")(aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string())
            })?;
        let after = out.attributes().cloned().unwrap_or_default();
        let current = |name: &str| match after.get(name) {
            Some(AttributeValue::N(s)) => s.parse::<f64>().ok(),
            _ => None,
        };
        // The extremes this reading moves, each set only while still true.
        let (mut sets, mut conds) = (Vec::new(), Vec::new());
        let mut names = HashMap::new();
        let mut values = HashMap::new();
        for (i, (m, v)) in metrics.iter().enumerate() {
            for (kind, better) in [
                (
                    "min",
                    *v < current(&format!("min_{m}")).unwrap_or(f64::INFINITY),
                ),
                (
                    "max",
                    *v > current(&format!("max_{m}")).unwrap_or(f64::NEG_INFINITY),
                ),
            ] {
                if better {
                    let (n, val) = (format!("#{kind}{i}"), format!(":{kind}{i}"));
                    names.insert(n.clone(), format!("{kind}_{m}"));
                    values.insert(val.clone(), num(*v));
                    sets.push(format!("{n} = {val}"));
                    let op = if kind == "min" { ">" } else { "<" };
                    conds.push(format!("(attribute_not_exists({n}) OR {n} {op} {val})"));
                }
            }
        }
        if sets.is_empty() {
            return Ok(());
        }
        let r = self
            .aggregator_client
            .update_item()
            .table_name(&self.config.table_name)
            .set_key(Some(key))
            .update_expression(format!("SET {}", sets.join(", ")))
            .condition_expression(conds.join(" AND "))
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .send()
            .await;
        match r {
            Ok(_) => Ok(()),
            // Another consumer moved an extreme further meanwhile: theirs stands.
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                Ok(())
            }
            Err(e) => Err(sdk("UpdateItem")(
                aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string(),
            )),
        }
    }
}

/// The new image of an inserted reading; `None` for anything else (the aggregate updates
/// echo back through the stream as MODIFYs of non-reading items).
fn inserted_reading(r: &EventRecord) -> Option<ReadingItem> {
    if r.event_name != "INSERT" {
        return None;
    }
    let item: ReadingItem = serde_dynamo::from_item(r.change.new_image.clone()).ok()?;
    item.sk
        .starts_with(tidemark_schema::keys::READING_PREFIX)
        .then_some(item)
}
