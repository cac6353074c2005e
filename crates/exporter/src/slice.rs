//! An hour's export in slices (docs/decisions/0017-export-fans-out-over-sqs.md): a slice is
//! the devices of a run of the hour's activity partitions (GSI2 `ACTIVE#<hour>#<n>`, decision
//! 0016), so the slices split an hour without a listing of their own and a device is in
//! exactly one; how many partitions a slice covers follows the fleet's size ([`width_for`]).
//! A worker exports one slice ([`export_slice`]): its devices' readings and rollup rows as
//! files of their own names, then a summary of what it wrote
//! (`_slice-SS-<generation>.json`) with its group sums, which add over slices. The hour is
//! sealed from its slices' summaries ([`crate::hour::seal_hour`]). A slice exported again
//! from the same readings writes the same bytes under the same names, so a retried worker
//! duplicates nothing.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use tidemark_schema::{AggregateItem, DeviceId, GroupBucketItem, Period, Stats, Timestamp, keys};

use crate::ExportError;
use crate::file::{self, ReadingRow, ReadingsWriter};
use crate::groups::{GroupFold, GroupPair};
use crate::hour::{BucketExport, FileEntry, put_file, rollup_rows};
use crate::paths;
use crate::sink::Sink;
use crate::store::ExportTable;

/// Activity partitions an hour's devices are spread over: at most this many slices.
pub const PARTITIONS: u16 = keys::ACTIVE_PARTITIONS;

/// Devices one slice is sized for: about 80 s of strongly consistent queries at ~5 ms each,
/// well inside a worker's 900 s.
pub const DEVICES_PER_SLICE: usize = 16_384;

/// One slice of an hour: `width` consecutive activity partitions (a power of two dividing
/// [`PARTITIONS`]), the `index`-th run of them. Cannot hold another shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "SliceFields", into = "SliceFields")]
pub struct Slice {
    index: u16,
    width: u16,
}

#[derive(Serialize, Deserialize)]
struct SliceFields {
    index: u16,
    width: u16,
}

impl Slice {
    pub fn new(index: u16, width: u16) -> Option<Slice> {
        let ok = width.is_power_of_two() && width <= PARTITIONS && index < PARTITIONS / width;
        ok.then_some(Slice { index, width })
    }

    pub fn get(self) -> u16 {
        self.index
    }

    pub fn width(self) -> u16 {
        self.width
    }

    /// The activity partitions it covers.
    pub fn partitions(self) -> std::ops::Range<u16> {
        self.index * self.width..(self.index + 1) * self.width
    }

    /// Every slice of `width` partitions, in order.
    pub fn all(width: u16) -> impl Iterator<Item = Slice> {
        let n = if width.is_power_of_two() && width <= PARTITIONS {
            PARTITIONS / width
        } else {
            0
        };
        (0..n).map(move |index| Slice { index, width })
    }

    /// The slice of `width` partitions holding `device`.
    pub fn of(device: &DeviceId, width: u16) -> Option<Slice> {
        Slice::new(keys::active_partition_of(device) / width.max(1), width)
    }

    /// The whole hour in one slice (a backfill, exporting one hour after another in one
    /// process, has nothing to spread).
    pub fn whole() -> Slice {
        Slice {
            index: 0,
            width: PARTITIONS,
        }
    }
}

/// How many partitions a slice should cover for an hour of about `devices` devices (`None`:
/// not known, every partition a slice of its own): as few slices as keep each near
/// [`DEVICES_PER_SLICE`], so a small fleet's hour is one slice (two files and a summary, as
/// before slicing) and a million devices' is 64.
pub fn width_for(devices: Option<usize>) -> u16 {
    let Some(n) = devices else {
        return 1;
    };
    let slices = n
        .div_ceil(DEVICES_PER_SLICE)
        .clamp(1, usize::from(PARTITIONS));
    let slices = u16::try_from(slices.next_power_of_two()).unwrap_or(PARTITIONS);
    PARTITIONS / slices.min(PARTITIONS)
}

impl TryFrom<SliceFields> for Slice {
    type Error = String;
    fn try_from(f: SliceFields) -> Result<Self, Self::Error> {
        Slice::new(f.index, f.width).ok_or_else(|| {
            format!(
                "slice {} of {} partitions is not one of {PARTITIONS}'s",
                f.index, f.width
            )
        })
    }
}

impl From<Slice> for SliceFields {
    fn from(s: Slice) -> SliceFields {
        SliceFields {
            index: s.index,
            width: s.width,
        }
    }
}

/// A set of slice indices as the bits of a number (bit `n`: index `n`), as a job stores it.
pub fn to_bits(indices: &BTreeSet<u16>) -> u64 {
    indices
        .iter()
        .filter(|i| **i < 64)
        .fold(0, |bits, i| bits | (1 << i))
}

/// The indices `bits` holds ([`to_bits`]).
pub fn from_bits(bits: u64) -> BTreeSet<u16> {
    (0..64).filter(|i| bits & (1 << i) != 0).collect()
}

/// One slice of one export of an hour: the body of its queue message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SliceTask {
    pub hour: Timestamp,
    pub slice: Slice,
    /// The export of the hour it belongs to ([`tidemark_schema::ExportJobItem::generation`]).
    pub generation: i64,
}

/// A group's fold over a slice's members. Slices hold disjoint devices, so the hour's group
/// is the sum of its slices' sums, members included.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupSum {
    #[serde(flatten)]
    pub pair: GroupPair,
    pub stats: Stats,
    pub members: u64,
}

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
    fn a_slice_is_a_run_of_partitions_and_every_device_is_in_one() {
        assert!(Slice::new(63, 1).is_some());
        assert!(Slice::new(64, 1).is_none());
        assert!(Slice::new(1, 32).is_some());
        assert!(Slice::new(2, 32).is_none());
        assert!(Slice::new(0, 3).is_none());
        assert!(serde_json::from_str::<Slice>(r#"{"index":64,"width":1}"#).is_err());
        assert_eq!(Slice::all(1).count(), 64);
        assert_eq!(Slice::all(16).count(), 4);
        assert_eq!(Slice::new(2, 16).unwrap().partitions(), 32..48);
        let d = DeviceId::new("sensor-7").unwrap();
        let hour = Period::Hourly.bucket(Timestamp::parse_rfc3339("2026-04-20T07:00:00Z").unwrap());
        let p = Slice::of(&d, 1).unwrap().get();
        assert_eq!(
            keys::active_gsi2pk(hour, &d),
            keys::active_gsi2pk_of(hour, p)
        );
        assert!(Slice::of(&d, 8).unwrap().partitions().contains(&p));
        let some: BTreeSet<u16> = [0, 5, 63].into();
        assert_eq!(from_bits(to_bits(&some)), some);
    }

    #[test]
    fn a_small_fleets_hour_is_one_slice_and_a_millions_is_64() {
        assert_eq!(
            width_for(None),
            1,
            "not known: every partition its own slice"
        );
        assert_eq!(width_for(Some(0)), 64);
        assert_eq!(width_for(Some(1_000)), 64);
        assert_eq!(width_for(Some(16_384)), 64);
        assert_eq!(width_for(Some(16_385)), 32);
        assert_eq!(width_for(Some(100_000)), 8);
        assert_eq!(width_for(Some(1_000_000)), 1);
        assert_eq!(width_for(Some(10_000_000)), 1);
    }

    #[test]
    fn group_sums_add_over_slices_members_included() {
        let t = Timestamp::parse_rfc3339("2026-04-20T07:10:00Z").unwrap();
        let pair = GroupPair {
            tag: tidemark_schema::Tag::parse("site:A").unwrap(),
            metric: tidemark_schema::MetricName::new("t").unwrap(),
        };
        let slice = |n: u16, v: f64, members: u64| SliceExport {
            hour: t.hour_start(),
            slice: Slice::new(n, 1).unwrap(),
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
