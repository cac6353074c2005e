//! An hour's export in slices (docs/decisions/0017-export-fans-out-over-sqs.md; the shapes
//! are [`crate::slicing`]). A worker exports one slice ([`export_slice`]): its devices' readings and rollup rows as
//! files of their own names, then a summary of what it wrote
//! (`_slice-SS-<generation>.json`) with its group sums, which add over slices. The hour is
//! sealed from its slices' summaries ([`crate::hour::seal_hour`]). A slice exported again
//! from the same readings writes the same bytes under the same names, so a retried worker
//! duplicates nothing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tidemark_schema::{AggregateItem, DeviceId, GroupBucketItem, Period, Stats, Timestamp};

use crate::ExportError;
use crate::file::{self, ReadingRow, ReadingsWriter, rollup_rows};
use crate::groups::{GroupFold, GroupPair, GroupSum};
use crate::objects::{BucketExport, FileEntry, put_file};
use crate::paths;
use crate::sink::Sink;
use crate::slicing::{Slice, SliceTask};
use crate::store::ExportTable;

/// What a slice's export wrote: its summary object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SliceExport {
    pub hour: Timestamp,
    pub slice: Slice,
    pub generation: i64,
    /// Devices with a reading in the hour.
    pub devices: usize,
    pub readings: u64,
    pub unreadable: u64,
    /// The readings files, in the hour's readings partition.
    pub files: Vec<FileEntry>,
    /// The rollup files, in the hour's rollups partition.
    pub rollup_files: Vec<FileEntry>,
    pub rollup_rows: u64,
    pub groups: Vec<GroupSum>,
}

/// Exports `task`'s slice: files, then the summary, which says the slice is done.
pub async fn export_slice<S: ExportTable, K: Sink>(
    source: &S,
    sink: &K,
    prefix: &str,
    task: &SliceTask,
) -> Result<SliceExport, ExportError> {
    let bucket = Period::Hourly.bucket(task.hour);
    let start = bucket.start();
    let devices = source.active_devices(bucket, task.slice).await?;
    let ids: Vec<DeviceId> = devices.iter().cloned().collect();
    let histories = source.tag_histories(&ids).await?;
    let keys = source.group_tags();
    let mut groups = GroupFold::default();
    let mut report = BucketExport::new(bucket);
    let mut writer = ReadingsWriter::default();
    let mut rollups = Vec::new();
    let mut ignored = Vec::new();
    for device in devices {
        let mut item = AggregateItem::empty(&AggregateItem::key_for(&device, bucket));
        let name = device.to_string();
        let history = histories.get(&device);
        let mut failed = None;
        let seen = report
            .read(source, &device, bucket, |r| {
                item.add_reading(r.timestamp, &r.metrics);
                let of = crate::groups::groups_at(history, keys, r.timestamp);
                groups.add_reading(&device, of, r.timestamp, &r.metrics);
                let metadata = r.metadata.map(|m| serde_json::Value::Object(m).to_string());
                for (metric, value) in r.metrics {
                    let row = ReadingRow {
                        device: name.clone(),
                        time_us: r.timestamp.epoch_micros(),
                        metric: metric.to_string(),
                        value,
                        metadata: metadata.clone(),
                    };
                    if let Err(e) = writer.push(row) {
                        failed.get_or_insert(e);
                    }
                }
            })
            .await?;
        if let Some(e) = failed {
            return Err(e);
        }
        for file in writer.take_done() {
            let key = paths::readings_key(prefix, start, task.slice, report.files.len());
            put_file(sink, &mut report, &mut ignored, key, file).await?;
        }
        if seen {
            rollups.extend(rollup_rows(&device, bucket, item));
        }
    }
    for file in writer.finish()? {
        let key = paths::readings_key(prefix, start, task.slice, report.files.len());
        put_file(sink, &mut report, &mut ignored, key, file).await?;
    }
    let rollup_rows = rollups.len() as u64;
    let mut rolled = BucketExport::new(bucket);
    for (i, file) in file::rollup_files(rollups)?.into_iter().enumerate() {
        let key = paths::slice_rollups_key(prefix, bucket, task.slice, i);
        put_file(sink, &mut rolled, &mut ignored, key, file).await?;
    }
    let summary = SliceExport {
        hour: start,
        slice: task.slice,
        generation: task.generation,
        devices: report.devices,
        readings: report.readings,
        unreadable: report.unreadable,
        files: report.files,
        rollup_files: rolled.files,
        rollup_rows,
        groups: groups.sums(),
    };
    let body = serde_json::to_vec(&summary).map_err(ExportError::Manifest)?;
    let key = paths::slice_summary(prefix, start, task.slice, task.generation);
    sink.put(&key, body, "application/json").await?;
    Ok(summary)
}

/// The hour's group items from its slices' sums (pairs with readings only).
pub fn group_items(
    slices: &[SliceExport],
    hour: tidemark_schema::Bucket,
    computed_at: Timestamp,
) -> Vec<GroupBucketItem> {
    let mut total: BTreeMap<&GroupPair, (Stats, u64)> = BTreeMap::new();
    for g in slices.iter().flat_map(|s| &s.groups) {
        let e = total.entry(&g.pair).or_insert((Stats::EMPTY, 0));
        e.0.merge(&g.stats);
        e.1 += g.members;
    }
    total
        .into_iter()
        .filter(|(_, (s, _))| s.count > 0)
        .map(|(p, (s, members))| {
            GroupBucketItem::new(
                p.tag.clone(),
                p.metric.clone(),
                hour,
                s,
                members,
                computed_at,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_sums_add_over_slices_members_included() {
        let t = Timestamp::parse_rfc3339("2026-04-20T07:10:00Z").unwrap();
        let pair = GroupPair {
            tag: tidemark_schema::Tag::parse("site:A").unwrap(),
            metric: tidemark_schema::MetricName::new("t").unwrap(),
        };
        let slice = |n: u16, v: f64, members: u64| SliceExport {
            hour: t.hour_start(),
            slice: Slice::new(n, 4).unwrap(),
            generation: 1,
            devices: 1,
            readings: 1,
            unreadable: 0,
            files: Vec::new(),
            rollup_files: Vec::new(),
            rollup_rows: 1,
            groups: vec![GroupSum {
                pair: pair.clone(),
                stats: Stats::at_sketched(t, v),
                members,
            }],
        };
        let items = group_items(
            &[slice(0, 1.0, 2), slice(9, 3.0, 1)],
            Period::Hourly.bucket(t),
            t,
        );
        assert_eq!(items.len(), 1);
        assert_eq!((items[0].stats.count, items[0].devices), (2, 3));
        assert_eq!(items[0].stats.sum, 4.0);
    }
}
