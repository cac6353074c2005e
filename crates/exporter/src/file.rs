//! Parquet files of exported rows, byte for byte the same for the same rows in any order, so
//! re-exporting an hour replaces its objects with identical content.
//!
//! Rows are sorted (device, time, metric, then the rest), Zstd-compressed, in row groups of
//! at most [`ROW_GROUP_ROWS`] rows; a file holds at most [`FILE_ROWS`] rows (a few MB to a
//! few tens of MB: an hour of 10,000 devices sending four metrics a minute is 2.4 million
//! rows, three files), and more rows are split into files `00000`, `00001`, … of their slice (or day).

use std::ops::Range;
use std::sync::Arc;

use parquet::basic::{Compression, ZstdLevel};
use parquet::data_type::{ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::{SerializedColumnWriter, SerializedFileWriter};
use parquet::schema::parser::parse_message_type;
use tidemark_schema::{AggregateItem, Bucket, DeviceId, Stats};

use crate::ExportError;
use crate::columns::{self, Column, Kind};

pub const ROW_GROUP_ROWS: usize = 100_000;
pub const FILE_ROWS: usize = 1_000_000;

/// One metric of one reading.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadingRow {
    pub device: String,
    pub time_us: i64,
    pub metric: String,
    pub value: f64,
    pub metadata: Option<String>,
}

/// One metric of one bucket's rollup.
#[derive(Debug, Clone, PartialEq)]
pub struct RollupRow {
    pub device: String,
    pub bucket_start_us: i64,
    pub metric: String,
    pub stats: Stats,
}

/// One span of one device's tag history.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceRow {
    pub device: String,
    /// The tags as a JSON object.
    pub tags: String,
    pub valid_from_us: i64,
    pub valid_to_us: Option<i64>,
}

/// A column's values, one per row (`None`: null, in nullable columns only).
enum Values {
    Text(Vec<Option<String>>),
    Int(Vec<Option<i64>>),
    Double(Vec<Option<f64>>),
}

/// The files holding `rows`, in order: [`ReadingsWriter`] over the rows sorted.
pub fn readings_files(mut rows: Vec<ReadingRow>) -> Result<Vec<Vec<u8>>, ExportError> {
    rows.sort_by(|a, b| {
        (&a.device, a.time_us, &a.metric)
            .cmp(&(&b.device, b.time_us, &b.metric))
            .then(a.value.total_cmp(&b.value))
            .then(a.metadata.cmp(&b.metadata))
    });
    let mut w = ReadingsWriter::default();
    for r in rows {
        w.push(r)?;
    }
    Ok(w.finish()?.into_iter().map(|(body, _)| body).collect())
}

/// Readings rows written as they come, a row group at a time, so an hour of any size (the
/// 2 kHz device's is 7.2 million rows) is never held whole: the rows of one group and the
/// files finished but not yet taken ([`ReadingsWriter::take_done`]). Rows must come in
/// (device, time, metric) order, as the export walks them; a row out of order is an error,
/// since the bytes would no longer be a function of the rows alone.
#[derive(Default)]
pub struct ReadingsWriter {
    group: Vec<ReadingRow>,
    file: Option<SerializedFileWriter<Vec<u8>>>,
    /// Rows in the open file, its groups written so far.
    file_rows: usize,
    done: Vec<(Vec<u8>, u64)>,
    /// The last row's (device, time, metric), which the next must follow.
    last: Option<(String, i64, String)>,
}

impl ReadingsWriter {
    pub fn push(&mut self, row: ReadingRow) -> Result<(), ExportError> {
        let key = (row.device.clone(), row.time_us, row.metric.clone());
        if self.last.as_ref().is_some_and(|last| *last >= key) {
            return Err(ExportError::Unsorted {
                device: row.device,
                time_us: row.time_us,
                metric: row.metric,
            });
        }
        self.last = Some(key);
        self.group.push(row);
        if self.group.len() == ROW_GROUP_ROWS {
            self.flush_group()?;
        }
        Ok(())
    }

    /// The files finished so far, with their rows, in order (each once).
    pub fn take_done(&mut self) -> Vec<(Vec<u8>, u64)> {
        std::mem::take(&mut self.done)
    }

    /// Writes what is left; every file not yet taken, with its rows, in order. No rows, no
    /// file.
    pub fn finish(mut self) -> Result<Vec<(Vec<u8>, u64)>, ExportError> {
        if !self.group.is_empty() {
            self.flush_group()?;
        }
        self.finish_file()?;
        Ok(self.done)
    }

    /// The buffered rows as one row group; the file is finished once it holds
    /// [`FILE_ROWS`] (a whole number of groups).
    fn flush_group(&mut self) -> Result<(), ExportError> {
        let rows = std::mem::take(&mut self.group);
        let data = vec![
            Values::Text(rows.iter().map(|r| Some(r.device.clone())).collect()),
            Values::Int(rows.iter().map(|r| Some(r.time_us)).collect()),
            Values::Text(rows.iter().map(|r| Some(r.metric.clone())).collect()),
            Values::Double(rows.iter().map(|r| Some(r.value)).collect()),
            Values::Text(rows.iter().map(|r| r.metadata.clone()).collect()),
        ];
        let w = match &mut self.file {
            Some(w) => w,
            None => self.file.insert(open("readings", &columns::READINGS)?),
        };
        write_group(w, &columns::READINGS, &data, 0..rows.len())?;
        self.file_rows += rows.len();
        if self.file_rows >= FILE_ROWS {
            self.finish_file()?;
        }
        Ok(())
    }

    fn finish_file(&mut self) -> Result<(), ExportError> {
        if let Some(w) = self.file.take() {
            self.done.push((w.into_inner()?, self.file_rows as u64));
            self.file_rows = 0;
        }
        Ok(())
    }
}

/// The files holding `rows`, in order, each with its row count.
pub fn rollup_files(mut rows: Vec<RollupRow>) -> Result<Vec<(Vec<u8>, u64)>, ExportError> {
    rows.sort_by(|a, b| {
        (&a.device, a.bucket_start_us, &a.metric).cmp(&(&b.device, b.bucket_start_us, &b.metric))
    });
    rows.chunks(FILE_ROWS)
        .map(|chunk| {
            let s = |f: fn(&Stats) -> Option<f64>| -> Values {
                Values::Double(chunk.iter().map(|r| f(&r.stats)).collect())
            };
            let t = |f: fn(&Stats) -> Option<i64>| -> Values {
                Values::Int(chunk.iter().map(|r| f(&r.stats)).collect())
            };
            let data = vec![
                Values::Text(chunk.iter().map(|r| Some(r.device.clone())).collect()),
                Values::Int(chunk.iter().map(|r| Some(r.bucket_start_us)).collect()),
                Values::Text(chunk.iter().map(|r| Some(r.metric.clone())).collect()),
                Values::Int(
                    chunk
                        .iter()
                        .map(|r| i64::try_from(r.stats.count).ok())
                        .collect(),
                ),
                s(|s| Some(s.sum)),
                s(|s| Some(s.min)),
                s(|s| Some(s.max)),
                s(Stats::stddev),
                t(|s| s.first.map(|f| f.0.epoch_micros())),
                s(|s| s.first.map(|f| f.1)),
                t(|s| s.last.map(|l| l.0.epoch_micros())),
                s(|s| s.last.map(|l| l.1)),
            ];
            Ok((
                write("rollups", &columns::ROLLUPS, &data)?,
                chunk.len() as u64,
            ))
        })
        .collect()
}

/// The files of the devices table holding `rows`, in order, each with its row count.
pub fn device_files(mut rows: Vec<DeviceRow>) -> Result<Vec<(Vec<u8>, u64)>, ExportError> {
    rows.sort_by(|a, b| {
        (&a.device, a.valid_from_us, a.valid_to_us, &a.tags).cmp(&(
            &b.device,
            b.valid_from_us,
            b.valid_to_us,
            &b.tags,
        ))
    });
    rows.chunks(FILE_ROWS)
        .map(|chunk| {
            let data = vec![
                Values::Text(chunk.iter().map(|r| Some(r.device.clone())).collect()),
                Values::Text(chunk.iter().map(|r| Some(r.tags.clone())).collect()),
                Values::Int(chunk.iter().map(|r| Some(r.valid_from_us)).collect()),
                Values::Int(chunk.iter().map(|r| r.valid_to_us).collect()),
            ];
            Ok((
                write("devices", &columns::DEVICES, &data)?,
                chunk.len() as u64,
            ))
        })
        .collect()
}

/// The rows of a rollups file, as [`rollup_files`] wrote them: a day's export merges its
/// hours' rows instead of walking the day's readings again. `m2` comes back from the
/// standard deviation (to within rounding), absent where the file has no spread for a
/// rollup of two readings or more.
pub fn read_rollup_rows(file: Vec<u8>) -> Result<Vec<RollupRow>, ExportError> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;
    let reader = SerializedFileReader::new(bytes::Bytes::from(file))?;
    let mut out = Vec::new();
    for row in reader.get_row_iter(None)? {
        let row = row?;
        let fields: Vec<&Field> = row.get_column_iter().map(|(_, f)| f).collect();
        let at = |i: usize| fields.get(i).copied().unwrap_or(&Field::Null);
        let long = |i: usize| match at(i) {
            Field::Long(v) | Field::TimestampMicros(v) => Some(*v),
            _ => None,
        };
        let double = |i: usize| match at(i) {
            Field::Double(v) => Some(*v),
            _ => None,
        };
        let text = |i: usize| match at(i) {
            Field::Str(v) => Some(v.clone()),
            _ => None,
        };
        let need = |i: usize| columns::ROLLUPS[i].name;
        let count = long(3)
            .and_then(|c| u64::try_from(c).ok())
            .ok_or(ExportError::Missing(need(3)))?;
        let point = |t: usize, v: usize| -> Option<(tidemark_schema::Timestamp, f64)> {
            Some((
                tidemark_schema::Timestamp::from_epoch_micros(long(t)?).ok()?,
                double(v)?,
            ))
        };
        let (first, last) = (point(8, 9), point(10, 11));
        let m2 = match double(7) {
            Some(sd) => Some(sd * sd * (count.saturating_sub(1)) as f64),
            // No spread below two readings; none kept before the spread was.
            None if count < 2 && first.is_some() => Some(0.0),
            None => None,
        };
        out.push(RollupRow {
            device: text(0).ok_or(ExportError::Missing(need(0)))?,
            bucket_start_us: long(1).ok_or(ExportError::Missing(need(1)))?,
            metric: text(2).ok_or(ExportError::Missing(need(2)))?,
            stats: Stats {
                count,
                sum: double(4).ok_or(ExportError::Missing(need(4)))?,
                min: double(5).ok_or(ExportError::Missing(need(5)))?,
                max: double(6).ok_or(ExportError::Missing(need(6)))?,
                m2,
                first,
                last,
                sketch: None,
            },
        });
    }
    Ok(out)
}

fn properties() -> Result<WriterProperties, ExportError> {
    Ok(WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3)?))
        .set_max_row_group_size(ROW_GROUP_ROWS)
        // Fixed, so the bytes do not change with the library's version string.
        .set_created_by("tidemark-exporter".into())
        .build())
}

fn open(name: &str, columns: &[Column]) -> Result<SerializedFileWriter<Vec<u8>>, ExportError> {
    let schema = Arc::new(parse_message_type(&columns::message_type(name, columns))?);
    Ok(SerializedFileWriter::new(
        Vec::new(),
        schema,
        Arc::new(properties()?),
    )?)
}

/// Rows `range` of `data` (one [`Values`] per column of `columns`) as one row group.
fn write_group(
    w: &mut SerializedFileWriter<Vec<u8>>,
    columns: &[Column],
    data: &[Values],
    range: Range<usize>,
) -> Result<(), ExportError> {
    let mut group = w.next_row_group()?;
    for (column, values) in columns.iter().zip(data) {
        let Some(mut cw) = group.next_column()? else {
            break;
        };
        write_column(&mut cw, column, values, range.clone())?;
        cw.close()?;
    }
    group.close()?;
    Ok(())
}

/// One Parquet file of `data` (one [`Values`] per column of `columns`, all as long), in row
/// groups of [`ROW_GROUP_ROWS`].
fn write(name: &str, columns: &[Column], data: &[Values]) -> Result<Vec<u8>, ExportError> {
    let rows = data.first().map_or(0, Values::len);
    let mut w = open(name, columns)?;
    let mut start = 0;
    while start < rows {
        let range = start..(start + ROW_GROUP_ROWS).min(rows);
        write_group(&mut w, columns, data, range.clone())?;
        start = range.end;
    }
    Ok(w.into_inner()?)
}

impl Values {
    fn len(&self) -> usize {
        match self {
            Values::Text(v) => v.len(),
            Values::Int(v) => v.len(),
            Values::Double(v) => v.len(),
        }
    }
}

/// Definition levels of a nullable column (1: a value, 0: null), and its values.
fn split<T: Clone>(
    column: &Column,
    values: &[Option<T>],
) -> Result<(Option<Vec<i16>>, Vec<T>), ExportError> {
    let present: Vec<T> = values.iter().flatten().cloned().collect();
    if !column.nullable {
        if present.len() != values.len() {
            return Err(ExportError::Missing(column.name));
        }
        return Ok((None, present));
    }
    let levels = values.iter().map(|v| i16::from(v.is_some())).collect();
    Ok((Some(levels), present))
}

fn write_column(
    cw: &mut SerializedColumnWriter<'_>,
    column: &Column,
    values: &Values,
    range: Range<usize>,
) -> Result<(), ExportError> {
    match (values, column.kind) {
        (Values::Text(v), Kind::Text) => {
            let (levels, present) = split(column, &v[range])?;
            let present: Vec<ByteArray> = present.iter().map(|s| s.as_str().into()).collect();
            cw.typed::<ByteArrayType>()
                .write_batch(&present, levels.as_deref(), None)?;
        }
        (Values::Int(v), Kind::Time | Kind::Count) => {
            let (levels, present) = split(column, &v[range])?;
            cw.typed::<Int64Type>()
                .write_batch(&present, levels.as_deref(), None)?;
        }
        (Values::Double(v), Kind::Double) => {
            let (levels, present) = split(column, &v[range])?;
            cw.typed::<DoubleType>()
                .write_batch(&present, levels.as_deref(), None)?;
        }
        _ => return Err(ExportError::Mismatch(column.name)),
    }
    Ok(())
}

/// The rollup rows of one device's bucket, folded as readers and the rollups role fold it.
pub(crate) fn rollup_rows(
    device: &DeviceId,
    bucket: Bucket,
    item: AggregateItem,
) -> Vec<RollupRow> {
    item.metrics
        .into_iter()
        .map(|(metric, stats)| RollupRow {
            device: device.to_string(),
            bucket_start_us: bucket.start().epoch_micros(),
            metric: metric.to_string(),
            stats,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;
    use tidemark_schema::Timestamp;

    use super::*;

    fn reading(device: &str, s: i64, metric: &str, value: f64, meta: Option<&str>) -> ReadingRow {
        ReadingRow {
            device: device.into(),
            time_us: 1_776_693_600_000_000 + s * 1_000_000,
            metric: metric.into(),
            value,
            metadata: meta.map(str::to_owned),
        }
    }

    fn rows_of(file: &[u8]) -> Vec<Vec<(String, Field)>> {
        let r = SerializedFileReader::new(Bytes::copy_from_slice(file)).unwrap();
        r.get_row_iter(None)
            .unwrap()
            .map(|row| {
                row.unwrap()
                    .get_column_iter()
                    .map(|(n, f)| (n.clone(), f.clone()))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn readings_come_back_sorted_typed_and_with_null_metadata() {
        let rows = vec![
            reading("b", 5, "t", 2.5, None),
            reading("a", 9, "t", -1.0, Some(r#"{"fw":"2.1"}"#)),
            reading("a", 9, "h", 40.0, Some(r#"{"fw":"2.1"}"#)),
            reading("a", 1, "t", 0.0, None),
        ];
        let files = readings_files(rows).unwrap();
        assert_eq!(files.len(), 1);
        let back = rows_of(&files[0]);
        let names: Vec<&str> = back[0].iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["device_id", "time", "metric", "value", "metadata"]);
        let key: Vec<(String, String)> = back
            .iter()
            .map(|r| (r[0].1.to_string(), r[2].1.to_string()))
            .collect();
        assert_eq!(
            key,
            [
                ("\"a\"", "\"t\""),
                ("\"a\"", "\"h\""),
                ("\"a\"", "\"t\""),
                ("\"b\"", "\"t\"")
            ]
            .map(|(d, m)| (d.to_owned(), m.to_owned()))
        );
        assert_eq!(back[0][1].1, Field::TimestampMicros(1_776_693_601_000_000));
        assert_eq!(back[1][3].1, Field::Double(40.0));
        assert_eq!(back[0][4].1, Field::Null);
        assert_eq!(back[1][4].1, Field::Str(r#"{"fw":"2.1"}"#.into()));
    }

    #[test]
    fn the_same_rows_in_any_order_make_the_same_bytes() {
        let rows: Vec<ReadingRow> = (0..500)
            .map(|i| {
                reading(
                    &format!("d{}", i % 7),
                    i / 7,
                    ["t", "h"][i as usize % 2],
                    i as f64,
                    None,
                )
            })
            .collect();
        let mut shuffled = rows.clone();
        shuffled.reverse();
        shuffled.rotate_left(123);
        assert_eq!(
            readings_files(rows).unwrap(),
            readings_files(shuffled).unwrap()
        );
    }

    #[test]
    fn a_large_hour_is_split_into_files_and_row_groups() {
        let rows: Vec<ReadingRow> = (0..(FILE_ROWS + ROW_GROUP_ROWS + 7) as i64)
            .map(|i| reading("d", i, "t", 1.0, None))
            .collect();
        let files = readings_files(rows).unwrap();
        assert_eq!(files.len(), 2);
        let r = SerializedFileReader::new(Bytes::from(files[0].clone())).unwrap();
        let groups = r.metadata().row_groups();
        assert_eq!(groups.len(), FILE_ROWS / ROW_GROUP_ROWS);
        assert!(
            groups
                .iter()
                .all(|g| g.num_rows() as usize == ROW_GROUP_ROWS)
        );
        let r = SerializedFileReader::new(Bytes::from(files[1].clone())).unwrap();
        assert_eq!(
            r.metadata().file_metadata().num_rows() as usize,
            ROW_GROUP_ROWS + 7
        );
    }

    #[test]
    fn streamed_rows_hand_over_each_finished_file_once_and_refuse_a_row_out_of_order() {
        let mut w = ReadingsWriter::default();
        for i in 0..(FILE_ROWS + 3) as i64 {
            w.push(reading("d", i, "t", 1.0, None)).unwrap();
        }
        let done = w.take_done();
        assert_eq!(
            done.iter().map(|f| f.1).collect::<Vec<_>>(),
            [FILE_ROWS as u64]
        );
        assert!(w.take_done().is_empty());
        let e = w.push(reading("d", 5, "t", 1.0, None)).unwrap_err();
        assert!(matches!(e, ExportError::Unsorted { .. }), "{e}");
        let rest = w.finish().unwrap();
        assert_eq!(rest.iter().map(|f| f.1).collect::<Vec<_>>(), [3]);
        assert!(ReadingsWriter::default().finish().unwrap().is_empty());
    }

    /// A rollup written before the spread, first and last were kept.
    fn kept_before_the_spread() -> Stats {
        Stats {
            count: 2,
            sum: 4.0,
            min: 1.0,
            max: 3.0,
            ..Stats::EMPTY
        }
    }

    #[test]
    fn rollups_carry_every_aggregate_and_null_where_the_rollup_has_none() {
        let at = |s: i64| Timestamp::from_epoch_millis(1_776_693_600_000 + s * 1000).unwrap();
        let mut full = Stats::at(at(3), 1.0);
        full.merge(&Stats::at(at(9), 3.0));
        let old = kept_before_the_spread();
        let start = at(0).epoch_micros();
        let rows = vec![
            RollupRow {
                device: "d".into(),
                bucket_start_us: start,
                metric: "old".into(),
                stats: old,
            },
            RollupRow {
                device: "d".into(),
                bucket_start_us: start,
                metric: "new".into(),
                stats: full,
            },
        ];
        let files = rollup_files(rows).unwrap();
        assert_eq!(files[0].1, 2);
        let back = rows_of(&files[0].0);
        let get =
            |r: &Vec<(String, Field)>, n: &str| r.iter().find(|(k, _)| k == n).unwrap().1.clone();
        // "new" sorts before "old"
        assert_eq!(get(&back[0], "count"), Field::Long(2));
        assert_eq!(get(&back[0], "stddev"), Field::Double(2f64.sqrt()));
        assert_eq!(
            get(&back[0], "first_time"),
            Field::TimestampMicros(at(3).epoch_micros())
        );
        assert_eq!(get(&back[0], "last_value"), Field::Double(3.0));
        assert_eq!(get(&back[1], "stddev"), Field::Null);
        assert_eq!(get(&back[1], "first_time"), Field::Null);
        assert_eq!(get(&back[1], "sum"), Field::Double(4.0));
        let names: Vec<&str> = back[0].iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, columns::ROLLUPS.map(|c| c.name));
    }

    #[test]
    fn rollup_rows_read_back_as_written_with_the_spread_from_the_deviation() {
        let at = |s: i64| Timestamp::from_epoch_millis(1_776_693_600_000 + s * 1000).unwrap();
        let mut spread = Stats::at(at(3), 1.0);
        spread.merge(&Stats::at(at(9), 3.0));
        spread.merge(&Stats::at(at(12), 8.5));
        let row = |metric: &str, stats: Stats| RollupRow {
            device: "d".into(),
            bucket_start_us: at(0).epoch_micros(),
            metric: metric.into(),
            stats,
        };
        let old = kept_before_the_spread();
        let rows = vec![
            row("a_spread", spread.clone()),
            row("b_one", Stats::at(at(5), -2.0)),
            row("c_old", old.clone()),
        ];
        let files = rollup_files(rows.clone()).unwrap();
        let back = read_rollup_rows(files[0].0.clone()).unwrap();
        assert_eq!(back.len(), 3);
        // A spread comes back to within rounding; everything else exactly.
        let m2 = back[0].stats.m2.unwrap();
        assert!((m2 - spread.m2.unwrap()).abs() < 1e-12, "{m2}");
        let exact = |mut s: Stats| {
            s.m2 = s.m2.map(|_| 0.0);
            s
        };
        assert_eq!(exact(back[0].stats.clone()), exact(spread));
        assert_eq!(back[1].stats, Stats::at(at(5), -2.0));
        assert_eq!(back[2].stats, old);
        assert_eq!(
            (back[2].device.as_str(), back[2].metric.as_str()),
            ("d", "c_old")
        );
    }
}
