//! What an export puts in the bucket: Parquet files under the names their partition gives
//! them, and the manifest that lists them, which a reader takes as the partition's
//! completeness record (so files go first and stale ones go after it).

use serde::{Deserialize, Serialize};
use tidemark_schema::{Bucket, DeviceId, Period, Reading};

use crate::ExportError;
use crate::groups::GroupPair;
use crate::sink::Sink;
use crate::store::ExportTable;

pub const MANIFEST: &str = "_manifest.json";
const PARQUET: &str = "application/vnd.apache.parquet";

/// What one bucket's export wrote; also its manifest. An hour's readings partition counts
/// its readings files; a rollups manifest (the hour's, the day's) counts its rollup files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BucketExport {
    pub period: Period,
    /// The bucket's start, RFC 3339.
    pub start: String,
    /// Devices with a reading in the bucket.
    pub devices: usize,
    pub readings: u64,
    /// Rows of the files: one per reading and metric (readings), per device and metric
    /// (rollups).
    pub rows: u64,
    /// Stored items that did not parse, left out (as every reader leaves them out).
    pub unreadable: u64,
    pub files: Vec<FileEntry>,
    /// Rollups manifests: the (group, metric) pairs whose group rollup item of the bucket
    /// this export wrote, so the next export of the bucket deletes those left without readings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupPair>,
    /// The devices table's manifest: the table's count of tag changes it was made at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag_changes: Option<u64>,
    /// An hour's readings manifest: the activity partitions each of its slices covered, so
    /// the hour's next export cuts it the same way and its files replace these under the
    /// same names (others would stand beside them, each device's rows twice, until its seal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileEntry {
    /// The object's name in its partition folder.
    pub name: String,
    pub rows: u64,
    pub bytes: u64,
}

impl BucketExport {
    pub(crate) fn new(bucket: Bucket) -> Self {
        BucketExport {
            period: bucket.period(),
            start: bucket.start().to_string(),
            devices: 0,
            readings: 0,
            rows: 0,
            unreadable: 0,
            files: Vec::new(),
            groups: Vec::new(),
            tag_changes: None,
            width: None,
        }
    }

    /// Bytes written to the bucket's Parquet files.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.bytes).sum()
    }

    /// Hands `visit` the device's readings of `bucket`, counting them in; whether there was one.
    pub(crate) async fn read<S: ExportTable>(
        &mut self,
        source: &S,
        device: &DeviceId,
        bucket: Bucket,
        mut visit: impl FnMut(Reading) + Send,
    ) -> Result<bool, ExportError> {
        let mut n = 0u64;
        let unreadable = source
            .readings(device, bucket.start(), bucket.end_exclusive(), |r| {
                n += 1;
                visit(r);
            })
            .await?;
        self.unreadable += unreadable;
        self.readings += n;
        if n > 0 {
            self.devices += 1;
        }
        Ok(n > 0)
    }
}

fn name_of(key: &str) -> String {
    key.rsplit_once('/').map_or(key, |(_, n)| n).to_owned()
}

/// Puts one Parquet file of `rows` rows under `key`, listing it in `report` and in `keep`.
pub(crate) async fn put_file<K: Sink>(
    sink: &K,
    report: &mut BucketExport,
    keep: &mut Vec<String>,
    key: String,
    (body, rows): (Vec<u8>, u64),
) -> Result<(), ExportError> {
    report.files.push(FileEntry {
        name: name_of(&key),
        rows,
        bytes: body.len() as u64,
    });
    sink.put(&key, body, PARQUET).await?;
    keep.push(key);
    Ok(())
}

/// Puts `report` as the manifest `manifest`, then deletes what else starts with `stale` and
/// is not in `keep` (the parts of a larger earlier export). Files go before the manifest,
/// which a reader takes as the partition's completeness record, and stale ones after it.
pub(crate) async fn seal<K: Sink>(
    sink: &K,
    report: &BucketExport,
    mut keep: Vec<String>,
    manifest: String,
    stale: &str,
) -> Result<(), ExportError> {
    let body = serde_json::to_vec_pretty(report).map_err(ExportError::Manifest)?;
    sink.put(&manifest, body, "application/json").await?;
    keep.push(manifest);
    for old in sink.keys(stale).await? {
        if !keep.contains(&old) {
            sink.delete(&old).await?;
        }
    }
    Ok(())
}

/// `files` put under the keys `key` names, then the manifest: [`put_file`], [`seal`].
pub(crate) async fn write<K: Sink>(
    sink: &K,
    files: Vec<(Vec<u8>, u64)>,
    report: &mut BucketExport,
    key: impl Fn(usize) -> String,
    manifest: String,
    stale: &str,
) -> Result<(), ExportError> {
    let mut keep = Vec::with_capacity(files.len() + 1);
    report.files.clear();
    for (i, file) in files.into_iter().enumerate() {
        put_file(sink, report, &mut keep, key(i), file).await?;
    }
    seal(sink, report, keep, manifest, stale).await
}
