//! One closed hour sealed from its slices ([`crate::slice`]): the readings' and the hourly
//! rollups' manifests listing every slice's files, the hour's group rollups in the table
//! summed from the slices' sums ([`crate::groups`]), the devices table remade when a tag
//! changed, and any object an earlier export of the hour left that this one no longer
//! writes deleted; likewise a closed day's daily rollups. Objects are written before the
//! manifest, which a reader takes as the partition's completeness record, and stale ones
//! removed after it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tidemark_schema::{
    AggregateItem, Bucket, DeviceId, EntityKey, GroupBucketItem, Key, Period, Stats, TagHistory,
    Timestamp,
};

use crate::ExportError;
use crate::file::{self, RollupRow};
use crate::groups::{GroupFold, GroupPair};
use crate::objects::{BucketExport, MANIFEST, seal, write};
use crate::paths;
use crate::sink::Sink;
use crate::slice::{SliceExport, export_slice};
use crate::slicing::{Slice, SliceTask};
use crate::store::ExportTable;

/// Exports the hour starting at `hour` (closed: the caller's schedule sees to it) in one
/// go: one slice of every partition ([`export_slice`], as generation 0), then the seal
/// ([`seal_hour`]). The
/// backfill and a schedule without a queue run this; the fanned-out schedule runs the same
/// two steps apart.
pub async fn export_hour<S: ExportTable, K: Sink>(
    source: &S,
    sink: &K,
    prefix: &str,
    hour: Timestamp,
) -> Result<BucketExport, ExportError> {
    let task = SliceTask {
        hour,
        slice: Slice::whole(),
        generation: 0,
    };
    export_slice(source, sink, prefix, &task).await?;
    seal_hour(source, sink, prefix, hour, 0, &BTreeSet::from([task.slice])).await
}

/// The hour's readings manifest (`None`: not exported): what a job sizes its slices by, from
/// the hour itself or the one before.
pub async fn exported<K: Sink>(
    sink: &K,
    prefix: &str,
    hour: Timestamp,
) -> Result<Option<BucketExport>, ExportError> {
    let key = format!("{}/{MANIFEST}", paths::readings_partition(prefix, hour));
    let Some(body) = sink.read(&key).await? else {
        return Ok(None);
    };
    Ok(Some(
        serde_json::from_slice(&body).map_err(ExportError::Manifest)?,
    ))
}

/// The slice indices of `hour` whose summary of the export `generation` is written.
pub async fn slices_done<K: Sink>(
    sink: &K,
    prefix: &str,
    hour: Timestamp,
    generation: i64,
) -> Result<BTreeSet<u16>, ExportError> {
    Ok(sink
        .keys(&paths::slice_summaries(prefix, hour))
        .await?
        .iter()
        .filter_map(|k| paths::parse_slice_summary(k))
        .filter(|(_, g)| *g == generation)
        .map(|(s, _)| s)
        .collect())
}

/// Seals the hour's export `generation` once the summary of each of its `slices` (those with
/// devices in the hour) is written: its readings
/// manifest, the devices table, its rollups manifest and the hour's group items, each
/// written after the files it counts, and then what no summary lists deleted (files of an
/// earlier, larger export, summaries of other generations). Answers `Incomplete` while a
/// slice's summary is missing.
pub async fn seal_hour<S: ExportTable, K: Sink>(
    source: &S,
    sink: &K,
    prefix: &str,
    hour: Timestamp,
    generation: i64,
    of: &BTreeSet<Slice>,
) -> Result<BucketExport, ExportError> {
    let bucket = Period::Hourly.bucket(hour);
    let start = bucket.start();
    let mut slices = Vec::with_capacity(of.len());
    for &slice in of {
        let key = paths::slice_summary(prefix, start, slice, generation);
        let body = sink.read(&key).await?.ok_or(ExportError::Incomplete {
            hour,
            slice: slice.get(),
        })?;
        let summary: SliceExport = serde_json::from_slice(&body).map_err(ExportError::Manifest)?;
        slices.push((key, summary));
    }
    let folder = paths::readings_partition(prefix, start);
    let mut report = BucketExport::new(bucket);
    report.width = of.first().map(|s| s.width());
    let mut rollup_files = Vec::new();
    let mut keep = Vec::new();
    let mut rollup_keep = Vec::new();
    let mut rollup_rows = 0;
    for (key, s) in &slices {
        report.devices += s.devices;
        report.readings += s.readings;
        report.unreadable += s.unreadable;
        report.files.extend(s.files.iter().cloned());
        keep.extend(s.files.iter().map(|f| format!("{folder}/{}", f.name)));
        keep.push(key.clone());
        rollup_files.extend(s.rollup_files.iter().cloned());
        rollup_keep.extend(
            s.rollup_files
                .iter()
                .map(|f| paths::rollups_file(prefix, bucket, &f.name)),
        );
        rollup_rows += s.rollup_rows;
    }
    report.rows = report.files.iter().map(|f| f.rows).sum();
    seal(
        sink,
        &report,
        keep,
        format!("{folder}/{MANIFEST}"),
        &format!("{folder}/"),
    )
    .await?;
    export_devices(source, sink, prefix, bucket).await?;
    let summaries: Vec<SliceExport> = slices.into_iter().map(|(_, s)| s).collect();
    let items = crate::slice::group_items(&summaries, bucket, Timestamp::now());
    let pairs: BTreeSet<GroupPair> = items
        .iter()
        .map(|i| GroupPair {
            tag: i.tag.clone(),
            metric: i.metric.clone(),
        })
        .collect();
    let manifest = paths::rollups_manifest(prefix, bucket);
    let previous = exported_groups(sink, &manifest).await?;
    let mut rollup_report = BucketExport {
        rows: rollup_rows,
        files: rollup_files,
        groups: listed(&pairs, &previous),
        ..report.clone()
    };
    seal(
        sink,
        &rollup_report,
        rollup_keep,
        manifest.clone(),
        &paths::rollups_stem(prefix, bucket),
    )
    .await?;
    write_groups(
        source,
        sink,
        bucket,
        (&items, &pairs),
        &previous,
        &mut rollup_report,
        &manifest,
    )
    .await?;
    Ok(report)
}

/// The pairs the manifest `key` lists as written (none: never exported, or before groups).
async fn exported_groups<K: Sink>(sink: &K, key: &str) -> Result<Vec<GroupPair>, ExportError> {
    let Some(body) = sink.read(key).await? else {
        return Ok(Vec::new());
    };
    let manifest: BucketExport = serde_json::from_slice(&body).map_err(ExportError::Manifest)?;
    Ok(manifest.groups)
}

/// What a rollups manifest lists before the bucket's group items are written: the pairs
/// written now and those an earlier export listed, so an export that stops before it deletes
/// the stale ones leaves them listed for the next.
fn listed(pairs: &BTreeSet<GroupPair>, previous: &[GroupPair]) -> Vec<GroupPair> {
    let mut all = pairs.clone();
    all.extend(previous.iter().cloned());
    all.into_iter().collect()
}

/// Puts the bucket's group items and deletes those of `previous` pairs it no longer has,
/// after the rollups manifest (`report`, under `manifest`) listed both; then, if some were
/// deleted, the manifest again, listing the pairs written only.
async fn write_groups<S: ExportTable, K: Sink>(
    source: &S,
    sink: &K,
    bucket: Bucket,
    (items, now): (&[GroupBucketItem], &BTreeSet<GroupPair>),
    previous: &[GroupPair],
    report: &mut BucketExport,
    manifest: &str,
) -> Result<(), ExportError> {
    source.put_group_buckets(items).await?;
    let stale: Vec<Key> = previous
        .iter()
        .filter(|p| !now.contains(*p))
        .map(|p| {
            EntityKey::GroupBucket {
                tag: p.tag.clone(),
                metric: p.metric.clone(),
                bucket,
            }
            .key()
        })
        .collect();
    if stale.is_empty() {
        return Ok(());
    }
    source.delete_group_buckets(&stale).await?;
    report.groups = now.iter().cloned().collect();
    let body = serde_json::to_vec_pretty(report).map_err(ExportError::Manifest)?;
    sink.put(manifest, body, "application/json").await
}

/// Rewrites the devices table (every device's tag history, a row per epoch) whole, with its
/// manifest, when a tag history changed since it was last written (the table's count of tag
/// changes moved from the one its manifest holds, read before the histories so that a change
/// during the walk is caught by the next); files an earlier, larger table had past these are
/// deleted. So an hour costs one Query and one manifest read, and the walk of every
/// registered device's history (a million reads at a million devices) only follows changes.
async fn export_devices<S: ExportTable, K: Sink>(
    source: &S,
    sink: &K,
    prefix: &str,
    bucket: Bucket,
) -> Result<(), ExportError> {
    let changes = source.tag_changes().await?;
    let folder = paths::devices_folder(prefix);
    let manifest = format!("{folder}/{MANIFEST}");
    if let Some(body) = sink.read(&manifest).await? {
        let written: BucketExport = serde_json::from_slice(&body).map_err(ExportError::Manifest)?;
        if written.tag_changes == Some(changes) {
            return Ok(());
        }
    }
    let everyone: Vec<DeviceId> = source.registered_devices().await?.into_iter().collect();
    let histories = source.tag_histories(&everyone).await?;
    let rows = crate::groups::device_rows(&histories);
    let mut report = BucketExport::new(bucket);
    report.devices = histories.len();
    report.rows = rows.len() as u64;
    report.tag_changes = Some(changes);
    write(
        sink,
        file::device_files(rows)?,
        &mut report,
        |i| paths::devices_key(prefix, i),
        manifest,
        &format!("{folder}/part-"),
    )
    .await
}

/// The hourly rollups an earlier export of `hour` left (its manifest, then its files), or
/// `None` when the hour was never exported.
async fn exported_hour<K: Sink>(
    sink: &K,
    prefix: &str,
    hour: Bucket,
) -> Result<Option<(BucketExport, Vec<RollupRow>)>, ExportError> {
    let Some(body) = sink.read(&paths::rollups_manifest(prefix, hour)).await? else {
        return Ok(None);
    };
    let manifest: BucketExport = serde_json::from_slice(&body).map_err(ExportError::Manifest)?;
    let mut rows = Vec::new();
    for f in &manifest.files {
        let key = paths::rollups_file(prefix, hour, &f.name);
        let Some(file) = sink.read(&key).await? else {
            // A manifest listing what is not there (an export overtaken mid-way): the
            // hour's readings say it instead.
            return Ok(None);
        };
        rows.extend(file::read_rollup_rows(file)?);
    }
    Ok(Some((manifest, rows)))
}

/// Exports the daily rollups of the UTC day holding `day` (closed: the caller sees to it):
/// each device's day is its exported hours' rollups merged in hour order, as readers sum a
/// day from its hours, and an hour never exported (before the schedule's first) is folded
/// from its readings. So a day costs 24 small reads, not a walk of its readings, which for a
/// large fleet would not fit in one invocation and would be retried forever.
pub async fn export_day<S: ExportTable, K: Sink>(
    source: &S,
    sink: &K,
    prefix: &str,
    day: Timestamp,
) -> Result<BucketExport, ExportError> {
    let bucket = Period::Daily.bucket(day);
    let mut report = BucketExport::new(bucket);
    let keys = source.group_tags();
    // Groups: the pairs the day's exported hours wrote items for, the readings of hours never
    // exported folded here, and each hour's members with a reading, by device.
    let mut pairs: BTreeSet<GroupPair> = BTreeSet::new();
    let mut direct = GroupFold::default();
    let mut hour_members: Vec<(String, tidemark_schema::MetricName, Bucket)> = Vec::new();
    // Tag histories, read once per device as the day's hours name them.
    let mut histories: HashMap<DeviceId, TagHistory> = HashMap::new();
    let mut asked: BTreeSet<DeviceId> = BTreeSet::new();
    let mut days: BTreeMap<(String, String), Stats> = BTreeMap::new();
    let mut devices = BTreeSet::new();
    let mut add = |device: String, metric: String, stats: &Stats| {
        devices.insert(device.clone());
        match days.entry((device, metric)) {
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(stats.clone());
            }
            std::collections::btree_map::Entry::Occupied(mut e) => e.get_mut().merge(stats),
        }
    };
    let mut hour = Period::Hourly.bucket(bucket.start());
    while hour.start() < bucket.end_exclusive() {
        if let Some((manifest, rows)) = exported_hour(sink, prefix, hour).await? {
            report.readings += manifest.readings;
            report.unreadable += manifest.unreadable;
            pairs.extend(manifest.groups);
            for r in rows {
                if let Ok(m) = tidemark_schema::MetricName::new(&r.metric) {
                    hour_members.push((r.device.clone(), m, hour));
                }
                add(r.device, r.metric, &r.stats);
            }
        } else {
            let devices = source.active_devices(hour, Slice::whole()).await?;
            let new: Vec<DeviceId> = devices
                .iter()
                .filter(|d| asked.insert((*d).clone()))
                .cloned()
                .collect();
            if !new.is_empty() {
                histories.extend(source.tag_histories(&new).await?);
            }
            for device in devices {
                let mut item = AggregateItem::empty(&AggregateItem::key_for(&device, hour));
                let history = histories.get(&device);
                report
                    .read(source, &device, hour, |r| {
                        item.add_reading(r.timestamp, &r.metrics);
                        let of = crate::groups::groups_at(history, keys, r.timestamp);
                        direct.add_reading(&device, of, r.timestamp, &r.metrics);
                    })
                    .await?;
                for (metric, stats) in &item.metrics {
                    add(device.to_string(), metric.to_string(), stats);
                }
            }
        }
        hour = Period::Hourly.bucket(hour.end_exclusive());
    }
    report.devices = devices.len();
    let missing: Vec<DeviceId> = devices
        .iter()
        .filter_map(|d| DeviceId::new(d).ok())
        .filter(|d| asked.insert(d.clone()))
        .collect();
    if !missing.is_empty() {
        histories.extend(source.tag_histories(&missing).await?);
    }
    let mut groups = GroupFold::default();
    for pair in pairs {
        for h in source.group_hours(&pair.tag, &pair.metric, bucket).await? {
            groups.add_stats(pair.clone(), &h.stats);
        }
    }
    groups.absorb(direct);
    for (device, metric, hour) in hour_members {
        let Ok(id) = DeviceId::new(&device) else {
            continue;
        };
        for tag in crate::groups::groups_within(histories.get(&id), keys, hour) {
            let pair = GroupPair {
                tag,
                metric: metric.clone(),
            };
            groups.member(&id, pair);
        }
    }
    let manifest = paths::rollups_manifest(prefix, bucket);
    let previous = exported_groups(sink, &manifest).await?;
    let pairs = groups.pairs();
    report.groups = listed(&pairs, &previous);
    let start_us = bucket.start().epoch_micros();
    let rollups: Vec<RollupRow> = days
        .into_iter()
        .map(|((device, metric), stats)| RollupRow {
            device,
            bucket_start_us: start_us,
            metric,
            stats,
        })
        .collect();
    report.rows = rollups.len() as u64;
    write(
        sink,
        file::rollup_files(rollups)?,
        &mut report,
        |i| paths::rollups_key(prefix, bucket, i),
        manifest.clone(),
        &paths::rollups_stem(prefix, bucket),
    )
    .await?;
    let items = groups.items(bucket, Timestamp::now());
    write_groups(
        source,
        sink,
        bucket,
        (&items, &pairs),
        &previous,
        &mut report,
        &manifest,
    )
    .await?;
    Ok(report)
}

/// Whether `hour` is the last of its UTC day: exporting it completes the day.
pub fn ends_day(hour: Timestamp) -> bool {
    Period::Hourly.bucket(hour).end_exclusive() == Period::Daily.bucket(hour).end_exclusive()
}

/// What exporting a range of hours did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RangeExport {
    /// Hours exported (each closed hour of the range).
    pub hours: usize,
    /// Days whose daily rollups were exported: those whose last hour was.
    pub days: usize,
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

/// Exports every closed hour (at `now`) whose start lies in `[from, to)`, oldest first, and
/// the daily rollups of each day whose last hour is one of them, telling `progress` after
/// each hour: the backfill `tidemark-admin export` runs.
pub async fn export_range<S: ExportTable, K: Sink>(
    source: &S,
    sink: &K,
    prefix: &str,
    from: Timestamp,
    to: Timestamp,
    now: Timestamp,
    mut progress: impl FnMut(&BucketExport),
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
        if ends_day(hour) {
            out.bytes += export_day(source, sink, prefix, hour).await?.bytes();
            out.days += 1;
        }
        progress(&rep);
    }
    Ok(out)
}
