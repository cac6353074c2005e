//! What an export reads from the table, one small trait, implemented for DynamoDB.

use std::collections::BTreeSet;

use tidemark_schema::{DeviceId, DeviceStatus, EntityKey, Reading, Timestamp, keys};
use tidemark_store::Item;
use tidemark_store::read::{Queries, QuerySpec, SkRange, query_all, walk_whole_readings_while};

use crate::ExportError;

/// Devices listed per GSI1 query page.
const DEVICE_PAGE: i32 = 1000;

pub trait Source {
    /// Every registered device (each status, each status shard).
    fn devices(&self) -> impl Future<Output = Result<BTreeSet<DeviceId>, ExportError>> + Send;
    /// Hands `visit` the device's readings in `[from, to)`, whole (metadata included), in
    /// time order, one at a time (a day of a 2 kHz device is never held at once); answers how
    /// many stored items did not parse (left out, as every reader leaves them out).
    fn readings(
        &self,
        device: &DeviceId,
        from: Timestamp,
        to: Timestamp,
        visit: impl FnMut(Reading) + Send,
    ) -> impl Future<Output = Result<u64, ExportError>> + Send;
}

/// The table. Readings are read strongly consistent: a re-export of a marked hour must see the
/// late write behind the mark, however soon after it runs. The device listing (GSI1) is
/// eventually consistent, which an hour exported 20 minutes after its end does not notice: a
/// device is registered seconds after its first reading arrives.
pub struct DynamoSource {
    pub client: aws_sdk_dynamodb::Client,
    pub table: String,
    pub queries: Queries,
    /// `STATUS_SHARDS`: the partitions the status listing is spread over.
    pub status_shards: u16,
}

impl DynamoSource {
    pub fn new(client: aws_sdk_dynamodb::Client, table: &str, status_shards: u16) -> Self {
        DynamoSource {
            queries: Queries::new(client.clone(), table.to_owned()),
            client,
            table: table.to_owned(),
            status_shards,
        }
    }
}

fn device_of(item: &Item) -> Option<DeviceId> {
    let s = |a: &str| item.get(a).and_then(|v| v.as_s().ok()).cloned();
    match EntityKey::parse(&s("pk")?, &s("sk")?) {
        Ok(EntityKey::Device(d)) => Some(d),
        _ => None,
    }
}

impl Source for DynamoSource {
    async fn devices(&self) -> Result<BTreeSet<DeviceId>, ExportError> {
        let mut out = BTreeSet::new();
        for status in DeviceStatus::ALL.iter().copied() {
            // Unsharded and sharded partitions both: a device is in exactly one of them.
            let mut partitions = vec![keys::status_gsi1pk(status, None)];
            if self.status_shards > 1 {
                partitions.extend(keys::status_gsi1pks(status, self.status_shards));
            }
            for pk in partitions {
                let spec = QuerySpec::gsi1(
                    pk,
                    SkRange::BeginsWith(keys::DEVICE_PREFIX.to_owned()),
                    true,
                );
                query_all(&self.queries, &spec, DEVICE_PAGE, |item| {
                    out.extend(device_of(&item));
                })
                .await?;
            }
        }
        Ok(out)
    }

    async fn readings(
        &self,
        device: &DeviceId,
        from: Timestamp,
        to: Timestamp,
        mut visit: impl FnMut(Reading) + Send,
    ) -> Result<u64, ExportError> {
        let history =
            tidemark_store::layouts::device_history(&self.client, &self.table, device, true)
                .await?
                .0;
        let Some(last) = to.pred() else {
            return Ok(0);
        };
        let walked = walk_whole_readings_while(
            &self.queries,
            device,
            &history,
            from,
            last,
            false,
            None,
            true,
            |r| {
                visit(r);
                true
            },
        )
        .await?;
        Ok(walked.unreadable)
    }
}
