//! Object keys: `<prefix>/readings/dt=YYYY-MM-DD/hour=HH/slice-SS-NNNNN.parquet` for an hour
//! of readings (file `NNNNN` of slice `SS`, [`crate::slice`]), with each slice's summary
//! `_slice-SS-<generation>.json` beside them,
//! `<prefix>/rollups/period=hourly/dt=YYYY-MM-DD/hour-HH-slice-SS-NNNNN.parquet` for an
//! hour's rollups and `<prefix>/rollups/period=daily/dt=YYYY-MM-DD/part-NNNNN.parquet` for a
//! day's, each partition with a manifest (`_manifest.json`; `_manifest-HH.json` per hour in
//! an hourly rollups partition), and `<prefix>/devices/part-NNNNN.parquet` for the devices'
//! tags over time (one folder, rewritten whole by each hour's export, with its
//! `_manifest.json`). Names are a pure function of the bucket and the file's place, so an export run
//! again overwrites the same objects.

use tidemark_schema::{Bucket, Timestamp};

use crate::slicing::Slice;

fn day(t: Timestamp) -> String {
    t.to_string()[..10].to_owned()
}

fn hour(t: Timestamp) -> String {
    t.to_string()[11..13].to_owned()
}

fn trimmed(prefix: &str) -> &str {
    prefix.trim_matches('/')
}

/// The partition folder of an hour of readings (no trailing slash).
pub fn readings_partition(prefix: &str, hour_start: Timestamp) -> String {
    format!(
        "{}/readings/dt={}/hour={}",
        trimmed(prefix),
        day(hour_start),
        hour(hour_start)
    )
}

/// File `part` of slice `slice` of an hour of readings.
pub fn readings_key(prefix: &str, hour_start: Timestamp, slice: Slice, part: usize) -> String {
    format!(
        "{}/slice-{:02}-{part:05}.parquet",
        readings_partition(prefix, hour_start),
        slice.get()
    )
}

/// What every slice summary of an hour starts with.
pub fn slice_summaries(prefix: &str, hour_start: Timestamp) -> String {
    format!("{}/_slice-", readings_partition(prefix, hour_start))
}

/// The summary of slice `slice` of the hour's export `generation` (a leading `_` hides it
/// from Athena and Hive).
pub fn slice_summary(prefix: &str, hour_start: Timestamp, slice: Slice, generation: i64) -> String {
    format!(
        "{}{:02}-{generation}.json",
        slice_summaries(prefix, hour_start),
        slice.get()
    )
}

/// The slice index and generation a key [`slice_summary`] made names.
pub fn parse_slice_summary(key: &str) -> Option<(u16, i64)> {
    let name = key.rsplit_once("/_slice-")?.1.strip_suffix(".json")?;
    let (slice, generation) = name.split_once('-')?;
    let index: u16 = slice.parse().ok()?;
    (index < crate::slicing::MAX_SLICES).then_some((index, generation.parse().ok()?))
}

/// What every rollups file of `bucket` starts with (the rest is `NNNNN.parquet`): an export
/// of the bucket deletes what else starts so, the parts of a larger earlier export.
pub fn rollups_stem(prefix: &str, bucket: Bucket) -> String {
    let (folder, start) = (rollups_partition(prefix, bucket), bucket.start());
    match bucket {
        Bucket::Hourly(_) => format!("{folder}/hour-{}-", hour(start)),
        Bucket::Daily(_) => format!("{folder}/part-"),
    }
}

/// File `part` of a day's rollups.
pub fn rollups_key(prefix: &str, bucket: Bucket, part: usize) -> String {
    format!("{}{part:05}.parquet", rollups_stem(prefix, bucket))
}

/// File `part` of slice `slice` of an hour's rollups.
pub fn slice_rollups_key(prefix: &str, hour: Bucket, slice: Slice, part: usize) -> String {
    format!(
        "{}slice-{:02}-{part:05}.parquet",
        rollups_stem(prefix, hour),
        slice.get()
    )
}

/// The object named `name` (as a manifest lists it) in the partition of `bucket`'s rollups.
pub fn rollups_file(prefix: &str, bucket: Bucket, name: &str) -> String {
    format!("{}/{name}", rollups_partition(prefix, bucket))
}

/// The manifest of a bucket's rollups: `_manifest.json` of a day's partition, and
/// `_manifest-HH.json` for each hour of the hourly partition its day shares (a leading `_`
/// hides a file from Athena and Hive).
pub fn rollups_manifest(prefix: &str, bucket: Bucket) -> String {
    let (folder, start) = (rollups_partition(prefix, bucket), bucket.start());
    match bucket {
        Bucket::Hourly(_) => format!("{folder}/_manifest-{}.json", hour(start)),
        Bucket::Daily(_) => format!("{folder}/_manifest.json"),
    }
}

/// The folder of the devices table (no trailing slash).
pub fn devices_folder(prefix: &str) -> String {
    format!("{}/devices", trimmed(prefix))
}

/// File `part` of the devices table.
pub fn devices_key(prefix: &str, part: usize) -> String {
    format!("{}/part-{part:05}.parquet", devices_folder(prefix))
}

/// The partition folder holding a bucket's rollups (its period's, its day's).
fn rollups_partition(prefix: &str, bucket: Bucket) -> String {
    format!(
        "{}/rollups/period={}/dt={}",
        trimmed(prefix),
        bucket.period().as_str(),
        day(bucket.start())
    )
}

#[cfg(test)]
mod tests {
    use tidemark_schema::Period;

    use super::*;

    #[test]
    fn keys_are_hive_partitions_of_the_bucket() {
        let t = Timestamp::parse_rfc3339("2026-04-20T07:59:59.5Z").unwrap();
        let slice = Slice::new(5, 4).unwrap();
        assert_eq!(
            readings_key("lake/tidemark/", Period::Hourly.bucket(t).start(), slice, 3),
            "lake/tidemark/readings/dt=2026-04-20/hour=07/slice-05-00003.parquet"
        );
        assert_eq!(
            slice_rollups_key("lake", Period::Hourly.bucket(t), slice, 0),
            "lake/rollups/period=hourly/dt=2026-04-20/hour-07-slice-05-00000.parquet"
        );
        let summary = slice_summary("lake", Period::Hourly.bucket(t).start(), slice, 17);
        assert_eq!(
            summary,
            "lake/readings/dt=2026-04-20/hour=07/_slice-05-17.json"
        );
        assert_eq!(parse_slice_summary(&summary), Some((5, 17)));
        assert_eq!(
            parse_slice_summary("lake/readings/dt=2026-04-20/hour=07/_slice-64-1.json"),
            None
        );
        assert_eq!(
            rollups_key("/lake", Period::Daily.bucket(t), 1),
            "lake/rollups/period=daily/dt=2026-04-20/part-00001.parquet"
        );
        assert_eq!(
            rollups_manifest("lake", Period::Hourly.bucket(t)),
            "lake/rollups/period=hourly/dt=2026-04-20/_manifest-07.json"
        );
        assert_eq!(
            rollups_manifest("lake", Period::Daily.bucket(t)),
            "lake/rollups/period=daily/dt=2026-04-20/_manifest.json"
        );
        assert_eq!(devices_key("/lake/", 0), "lake/devices/part-00000.parquet");
    }
}
