//! Parquet files of exported rows, byte for byte the same for the same rows in any order, so
//! re-exporting an hour replaces its objects with identical content.
//!
//! Rows are sorted (device, time, metric, then the rest), Zstd-compressed, in row groups of
//! at most [`ROW_GROUP_ROWS`] rows; a file holds at most [`FILE_ROWS`] rows (a few MB to a
//! few tens of MB: an hour of 10,000 devices sending four metrics a minute is 2.4 million
//! rows, three files), and an hour with more is split into `part-00000`, `part-00001`, ….

use std::ops::Range;
use std::sync::Arc;

use parquet::basic::{Compression, ZstdLevel};
use parquet::data_type::{ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::{SerializedColumnWriter, SerializedFileWriter};
use parquet::schema::parser::parse_message_type;
use tidemark_schema::Stats;

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

/// A column's values, one per row (`None`: null, in nullable columns only).
enum Values {
    Text(Vec<Option<String>>),
    Int(Vec<Option<i64>>),
    Double(Vec<Option<f64>>),
}

/// The files holding `rows`, in order.
pub fn readings_files(mut rows: Vec<ReadingRow>) -> Result<Vec<Vec<u8>>, ExportError> {
    rows.sort_by(|a, b| {
        (&a.device, a.time_us, &a.metric)
            .cmp(&(&b.device, b.time_us, &b.metric))
            .then(a.value.total_cmp(&b.value))
            .then(a.metadata.cmp(&b.metadata))
    });
    rows.chunks(FILE_ROWS)
        .map(|chunk| {
            let data = vec![
                Values::Text(chunk.iter().map(|r| Some(r.device.clone())).collect()),
                Values::Int(chunk.iter().map(|r| Some(r.time_us)).collect()),
                Values::Text(chunk.iter().map(|r| Some(r.metric.clone())).collect()),
                Values::Double(chunk.iter().map(|r| Some(r.value)).collect()),
                Values::Text(chunk.iter().map(|r| r.metadata.clone()).collect()),
            ];
            write("readings", &columns::READINGS, &data)
        })
        .collect()
}

/// The files holding `rows`, in order.
pub fn rollup_files(mut rows: Vec<RollupRow>) -> Result<Vec<Vec<u8>>, ExportError> {
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
            write("rollups", &columns::ROLLUPS, &data)
        })
        .collect()
}

fn properties() -> Result<WriterProperties, ExportError> {
    Ok(WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3)?))
        .set_max_row_group_size(ROW_GROUP_ROWS)
        // Fixed, so the bytes do not change with the library's version string.
        .set_created_by("tidemark-exporter".into())
        .build())
}

/// One Parquet file of `data` (one [`Values`] per column of `columns`, all as long).
fn write(name: &str, columns: &[Column], data: &[Values]) -> Result<Vec<u8>, ExportError> {
    let rows = data.first().map_or(0, Values::len);
    let schema = Arc::new(parse_message_type(&columns::message_type(name, columns))?);
    let mut w = SerializedFileWriter::new(Vec::new(), schema, Arc::new(properties()?))?;
    let mut start = 0;
    while start < rows {
        let range = start..(start + ROW_GROUP_ROWS).min(rows);
        let mut group = w.next_row_group()?;
        for (column, values) in columns.iter().zip(data) {
            let Some(mut cw) = group.next_column()? else {
                break;
            };
            write_column(&mut cw, column, values, range.clone())?;
            cw.close()?;
        }
        group.close()?;
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
    fn rollups_carry_every_aggregate_and_null_where_the_rollup_has_none() {
        let at = |s: i64| Timestamp::from_epoch_millis(1_776_693_600_000 + s * 1000).unwrap();
        let mut full = Stats::at(at(3), 1.0);
        full.merge(&Stats::at(at(9), 3.0));
        let old = Stats {
            count: 2,
            sum: 4.0,
            min: 1.0,
            max: 3.0,
            ..Stats::EMPTY
        };
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
        let back = rows_of(&files[0]);
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
}
