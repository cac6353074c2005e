//! The exporter's store traits on DynamoDB: what an export reads from the table and the
//! group rollups it writes there ([`DynamoExportTable`]), and where the schedule stands
//! ([`DynamoState`]).

use std::collections::{BTreeSet, HashMap};

use tidemark_schema::{
    Bucket, DeviceId, EntityKey, ExportCursorItem, ExportDirtyItem, ExportJobItem, GroupBucketItem,
    Key, MetricName, Reading, Tag, TagHistory, TagKey, Timestamp, field,
};
use tidemark_store::batch_get::key_item;
use tidemark_store::read::Queries;

use crate::ExportError;
use crate::slicing::Slice;
use crate::store::{
    ExportTable, State, list_active, list_active_partitions, list_devices, read_dirty,
    read_group_hours, read_jobs, walk_readings,
};

/// Group items put at once (one `PutItem` each: the SDK retries a throttled one).
const GROUP_WRITES_IN_FLIGHT: usize = 16;

/// The table. Readings are read strongly consistent: a re-export of a marked hour must see the
/// late write behind the mark, however soon after it runs. The hour's devices come from its
/// activity partitions of GSI2 ([`list_active`]), the devices table's from the status listing
/// (GSI1), both eventually consistent, which an hour exported minutes after its end does not
/// notice (a re-export waits for its mark to settle, `Schedule::settle`).
pub struct DynamoExportTable {
    pub client: aws_sdk_dynamodb::Client,
    pub table: String,
    pub queries: Queries,
    /// `STATUS_PARTITIONS`: the partitions the status listing is spread over.
    pub status_partitions: u16,
    /// `GROUP_TAGS`.
    pub group_tags: Vec<TagKey>,
    /// Walk every registered device's hour too, not only those the rollups role recorded:
    /// `tidemark-admin export`'s backfill of hours older than the activity index (their
    /// rollup items were written without its entries).
    pub walk_registered: bool,
}

impl DynamoExportTable {
    pub fn new(client: aws_sdk_dynamodb::Client, table: &str, status_partitions: u16) -> Self {
        DynamoExportTable {
            queries: Queries::new(client.clone(), table.to_owned()),
            client,
            table: table.to_owned(),
            status_partitions,
            group_tags: tidemark_store::settings::default_group_tags(),
            walk_registered: false,
        }
    }

    /// The same, walking every registered device's hour as well ([`Self::walk_registered`]).
    pub fn walking_registered(mut self) -> Self {
        self.walk_registered = true;
        self
    }

    /// The same, keeping rollups for the groups of `keys` (`GROUP_TAGS`).
    pub fn with_group_tags(mut self, keys: Vec<TagKey>) -> Self {
        self.group_tags = keys;
        self
    }
}

impl ExportTable for DynamoExportTable {
    async fn active_devices(
        &self,
        hour: Bucket,
        slice: Slice,
    ) -> Result<BTreeSet<DeviceId>, ExportError> {
        let mut out = list_active(&self.queries, hour, slice).await?;
        if self.walk_registered {
            let registered = self.registered_devices().await?;
            out.extend(
                registered
                    .into_iter()
                    .filter(|d| Slice::of(d, slice.width()) == Some(slice)),
            );
        }
        Ok(out)
    }

    async fn active_partitions(&self, hour: Bucket) -> Result<BTreeSet<u16>, ExportError> {
        if self.walk_registered {
            return Ok((0..tidemark_schema::keys::ACTIVE_PARTITIONS).collect());
        }
        list_active_partitions(&self.queries, hour).await
    }

    async fn tag_changes(&self) -> Result<u64, ExportError> {
        Ok(tidemark_store::tags::tag_changes(&self.queries).await?)
    }

    async fn registered_devices(&self) -> Result<BTreeSet<DeviceId>, ExportError> {
        list_devices(&self.queries, self.status_partitions).await
    }

    async fn readings(
        &self,
        device: &DeviceId,
        from: Timestamp,
        to: Timestamp,
        visit: impl FnMut(Reading) + Send,
    ) -> Result<u64, ExportError> {
        let history =
            tidemark_store::layouts::device_history(&self.client, &self.table, device, true)
                .await?
                .0;
        walk_readings(&self.queries, device, &history, from, to, visit).await
    }

    fn group_tags(&self) -> &[TagKey] {
        &self.group_tags
    }

    async fn tag_histories(
        &self,
        devices: &[DeviceId],
    ) -> Result<HashMap<DeviceId, TagHistory>, ExportError> {
        let (found, _unreadable) =
            tidemark_store::tags::read_histories(&self.client, &self.table, devices, true).await?;
        Ok(found.into_iter().map(|(d, (h, _))| (d, h)).collect())
    }

    async fn put_group_buckets(&self, items: &[GroupBucketItem]) -> Result<(), ExportError> {
        use futures::StreamExt;
        let mut puts = Vec::with_capacity(items.len());
        for item in items {
            puts.push(tidemark_store::to_item(item)?);
        }
        let results: Vec<Result<(), ExportError>> = futures::stream::iter(puts)
            .map(|item| async move {
                self.client
                    .put_item()
                    .table_name(&self.table)
                    .set_item(Some(item))
                    .send()
                    .await
                    .map_err(tidemark_store::StoreError::sdk("PutItem"))?;
                Ok(())
            })
            .buffer_unordered(GROUP_WRITES_IN_FLIGHT)
            .collect()
            .await;
        results.into_iter().collect()
    }

    async fn delete_group_buckets(&self, keys: &[Key]) -> Result<(), ExportError> {
        for k in keys {
            self.client
                .delete_item()
                .table_name(&self.table)
                .set_key(Some(key_item(k)))
                .send()
                .await
                .map_err(tidemark_store::StoreError::sdk("DeleteItem"))?;
        }
        Ok(())
    }

    async fn group_hours(
        &self,
        tag: &Tag,
        metric: &MetricName,
        day: Bucket,
    ) -> Result<Vec<GroupBucketItem>, ExportError> {
        read_group_hours(&self.queries, tag, metric, day).await
    }
}

/// [`State`] in the table.
pub struct DynamoState {
    pub client: aws_sdk_dynamodb::Client,
    pub table: String,
    pub queries: Queries,
}

impl DynamoState {
    pub fn new(client: aws_sdk_dynamodb::Client, table: &str) -> Self {
        DynamoState {
            queries: Queries::new(client.clone(), table.to_owned()),
            client,
            table: table.to_owned(),
        }
    }
}

impl State for DynamoState {
    async fn cursor(&self) -> Result<Option<Timestamp>, ExportError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key_item(&EntityKey::ExportCursor.key())))
            .consistent_read(true)
            .send()
            .await
            .map_err(tidemark_store::StoreError::sdk("GetItem"))?;
        Ok(match out.item {
            Some(i) => Some(tidemark_store::from_item::<ExportCursorItem>(i)?.hour),
            None => None,
        })
    }

    async fn advance(&self, hour: Timestamp) -> Result<(), ExportError> {
        let r = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(tidemark_store::to_item(&ExportCursorItem::new(hour))?))
            .condition_expression("attribute_not_exists(pk) OR #hour < :hour")
            .expression_attribute_names("#hour", field::HOUR)
            .expression_attribute_values(
                ":hour",
                serde_dynamo::to_attribute_value(hour).map_err(tidemark_store::StoreError::from)?,
            )
            .send()
            .await
            .map_err(tidemark_store::StoreError::sdk("PutItem"));
        match r {
            Ok(_) => Ok(()),
            // Another run got there first.
            Err(e) if e.is_conditional_check_failed() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn dirty(&self) -> Result<Vec<ExportDirtyItem>, ExportError> {
        read_dirty(&self.queries).await
    }

    async fn clear(&self, hour: Timestamp, marks: u64) -> Result<bool, ExportError> {
        let r = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(key_item(&EntityKey::ExportDirty(hour).key())))
            .condition_expression("#marks = :marks")
            .expression_attribute_names("#marks", field::MARKS)
            .expression_attribute_values(
                ":marks",
                aws_sdk_dynamodb::types::AttributeValue::N(marks.to_string()),
            )
            .send()
            .await
            .map_err(tidemark_store::StoreError::sdk("DeleteItem"));
        match r {
            Ok(_) => Ok(true),
            Err(e) if e.is_conditional_check_failed() => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    async fn job(&self, hour: Timestamp) -> Result<Option<ExportJobItem>, ExportError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key_item(&EntityKey::ExportJob(hour).key())))
            .consistent_read(true)
            .send()
            .await
            .map_err(tidemark_store::StoreError::sdk("GetItem"))?;
        Ok(out
            .item
            .map(tidemark_store::from_item::<ExportJobItem>)
            .transpose()?)
    }

    async fn jobs(&self) -> Result<Vec<ExportJobItem>, ExportError> {
        read_jobs(&self.queries).await
    }

    async fn start(&self, job: &ExportJobItem) -> Result<bool, ExportError> {
        let r = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(tidemark_store::to_item(job)?))
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await
            .map_err(tidemark_store::StoreError::sdk("PutItem"));
        match r {
            Ok(_) => Ok(true),
            Err(e) if e.is_conditional_check_failed() => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    async fn resent(&self, job: &ExportJobItem) -> Result<(), ExportError> {
        let r = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(tidemark_store::to_item(job)?))
            .condition_expression("#generation = :generation")
            .expression_attribute_names("#generation", field::GENERATION)
            .expression_attribute_values(":generation", generation(job))
            .send()
            .await
            .map_err(tidemark_store::StoreError::sdk("PutItem"));
        match r {
            // A newer export of the hour (or none) stands there now: it sends its own.
            Err(e) if !e.is_conditional_check_failed() => Err(e.into()),
            _ => Ok(()),
        }
    }

    async fn finish(&self, job: &ExportJobItem) -> Result<(), ExportError> {
        let r = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(key_item(&EntityKey::ExportJob(job.hour).key())))
            .condition_expression("#generation = :generation")
            .expression_attribute_names("#generation", field::GENERATION)
            .expression_attribute_values(":generation", generation(job))
            .send()
            .await
            .map_err(tidemark_store::StoreError::sdk("DeleteItem"));
        match r {
            Err(e) if !e.is_conditional_check_failed() => Err(e.into()),
            _ => Ok(()),
        }
    }
}

fn generation(job: &ExportJobItem) -> aws_sdk_dynamodb::types::AttributeValue {
    aws_sdk_dynamodb::types::AttributeValue::N(job.generation.to_string())
}
