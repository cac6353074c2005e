//! One closed hour exported: every device's readings of the hour as long rows, the hour's
//! rollups computed from the same readings, a manifest, and any object an earlier export of
//! the hour left that this one no longer writes deleted. Objects are written before the
//! manifest, which a reader takes as the hour's completeness record, and stale ones removed
//! after it.

use std::collections::BTreeMap;

use serde::Serialize;
use tidemark_schema::{MetricName, Period, Stats, Timestamp};

use crate::ExportError;
use crate::file::{self, FILE_ROWS, ReadingRow, RollupRow};
use crate::paths;
use crate::sink::Sink;
use crate::source::Source;

pub const MANIFEST: &str = "_manifest.json";
const PARQUET: &str = "application/vnd.apache.parquet";

/// What one hour's export wrote; also its `_manifest.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HourExport {
    pub hour: String,
    /// Devices with a reading in the hour.
    pub devices: usize,
    pub readings: u64,
    /// Rows of the readings files: one per reading and metric.
    pub rows: u64,
    /// Stored items that did not parse, left out (as every reader leaves them out).
    pub unreadable: u64,
    pub files: Vec<FileEntry>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileEntry {
    /// The object's name in its partition folder.
    pub name: String,
    pub rows: u64,
    pub bytes: u64,
}

impl HourExport {
    /// Bytes written to the readings partition's Parquet files.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.bytes).sum()
    }
}

fn name_of(key: &str) -> String {
    key.rsplit_once('/').map_or(key, |(_, n)| n).to_owned()
}

/// The keys and manifest entries of `files` (holding `rows` rows in order) named by `key`.
fn entries(
    files: &[Vec<u8>],
    key: impl Fn(usize) -> String,
    rows: u64,
) -> Vec<(String, FileEntry)> {
    let mut left = rows;
    files
        .iter()
        .enumerate()
        .map(|(i, body)| {
            let k = key(i);
            let n = left.min(FILE_ROWS as u64);
            left -= n;
            let e = FileEntry {
                name: name_of(&k),
                rows: n,
                bytes: body.len() as u64,
            };
            (k, e)
        })
        .collect()
}

/// Puts `files` under `keys`, then `manifest`, then deletes what else is under `folder` (the
/// parts of a larger earlier export).
async fn replace<K: Sink>(
    sink: &K,
    keys: Vec<String>,
    files: Vec<Vec<u8>>,
    manifest: Option<(String, Vec<u8>)>,
    folder: &str,
) -> Result<(), ExportError> {
    let mut keep = keys.clone();
    for (k, body) in keys.into_iter().zip(files) {
        sink.put(&k, body, PARQUET).await?;
    }
    if let Some((k, body)) = manifest {
        sink.put(&k, body, "application/json").await?;
        keep.push(k);
    }
    for old in sink.keys(folder).await? {
        if !keep.contains(&old) {
            sink.delete(&old).await?;
        }
    }
    Ok(())
}

/// Exports the hour starting at `hour` (closed: the caller's schedule sees to it).
pub async fn export_hour<S: Source, K: Sink>(
    source: &S,
    sink: &K,
    prefix: &str,
    hour: Timestamp,
) -> Result<HourExport, ExportError> {
    let bucket = Period::Hourly.bucket(hour);
    let end = bucket.end_exclusive();
    let mut report = HourExport {
        hour: bucket.start().to_string(),
        ..HourExport::default()
    };
    let mut rows = Vec::new();
    let mut rollups = Vec::new();
    for device in source.devices().await? {
        let (readings, unreadable) = source.readings(&device, bucket.start(), end).await?;
        report.unreadable += unreadable;
        if readings.is_empty() {
            continue;
        }
        report.devices += 1;
        report.readings += readings.len() as u64;
        let mut stats: BTreeMap<MetricName, Stats> = BTreeMap::new();
        for r in readings {
            let metadata = r.metadata.map(|m| serde_json::Value::Object(m).to_string());
            for (metric, value) in r.metrics {
                stats
                    .entry(metric.clone())
                    .and_modify(|s| s.merge(&Stats::at(r.timestamp, value)))
                    .or_insert_with(|| Stats::at(r.timestamp, value));
                rows.push(ReadingRow {
                    device: device.to_string(),
                    time_us: r.timestamp.epoch_micros(),
                    metric: metric.to_string(),
                    value,
                    metadata: metadata.clone(),
                });
            }
        }
        rollups.extend(stats.into_iter().map(|(metric, stats)| RollupRow {
            device: device.to_string(),
            bucket_start_us: bucket.start().epoch_micros(),
            metric: metric.to_string(),
            stats,
        }));
    }
    report.rows = rows.len() as u64;
    let rollup_rows = rollups.len() as u64;

    let folder = paths::readings_partition(prefix, bucket.start());
    let files = file::readings_files(rows)?;
    let (keys, listed): (Vec<String>, Vec<FileEntry>) = entries(
        &files,
        |i| paths::readings_key(prefix, bucket.start(), i),
        report.rows,
    )
    .into_iter()
    .unzip();
    report.files = listed;
    let manifest = serde_json::to_vec_pretty(&report).map_err(ExportError::Manifest)?;
    let manifest = (format!("{folder}/{MANIFEST}"), manifest);
    replace(sink, keys, files, Some(manifest), &format!("{folder}/")).await?;

    // The hour's rollups share their day's partition: this hour's objects start alike.
    let files = file::rollup_files(rollups)?;
    let (keys, _): (Vec<String>, Vec<FileEntry>) = entries(
        &files,
        |i| paths::rollups_key(prefix, bucket, i),
        rollup_rows,
    )
    .into_iter()
    .unzip();
    let first = paths::rollups_key(prefix, bucket, 0);
    let stale = first.trim_end_matches("00000.parquet");
    replace(sink, keys, files, None, stale).await?;
    Ok(report)
}

/// What exporting a range of hours did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RangeExport {
    /// Hours exported (each closed hour of the range).
    pub hours: usize,
    /// Hours of the range still open at `now`: not exported (their readings may still change
    /// without the export being told).
    pub open: usize,
    pub readings: u64,
    pub rows: u64,
    pub bytes: u64,
}

/// The hours whose start lies in `[from, to)`, oldest first.
pub fn hours_of(from: Timestamp, to: Timestamp) -> Vec<Timestamp> {
    let mut out = Vec::new();
    let mut h = Period::Hourly.bucket(from);
    if h.start() < from {
        h = Period::Hourly.bucket(h.end_exclusive());
    }
    while h.start() < to {
        out.push(h.start());
        let next = h.end_exclusive();
        if next <= h.start() {
            break;
        }
        h = Period::Hourly.bucket(next);
    }
    out
}

/// Exports every closed hour (at `now`) whose start lies in `[from, to)`, oldest first,
/// telling `progress` after each: the backfill `tidemark-admin export` runs.
pub async fn export_range<S: Source, K: Sink>(
    source: &S,
    sink: &K,
    prefix: &str,
    from: Timestamp,
    to: Timestamp,
    now: Timestamp,
    mut progress: impl FnMut(&HourExport),
) -> Result<RangeExport, ExportError> {
    let mut out = RangeExport::default();
    for hour in hours_of(from, to) {
        if tidemark_schema::bucket_is_open(Period::Hourly.bucket(hour), now) {
            out.open += 1;
            continue;
        }
        let rep = export_hour(source, sink, prefix, hour).await?;
        out.hours += 1;
        out.readings += rep.readings;
        out.rows += rep.rows;
        out.bytes += rep.bytes();
        progress(&rep);
    }
    Ok(out)
}
