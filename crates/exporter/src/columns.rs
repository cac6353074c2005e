//! The exported tables' columns, once: the Parquet schema the files are written with and the
//! Glue column types `template.yaml` declares are both derived from [`READINGS`],
//! [`ROLLUPS`] and [`DEVICES`], and a test holds the template to them.

/// How a column is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// UTF-8 text.
    Text,
    /// Microseconds since the epoch, UTC.
    Time,
    Double,
    /// A 64-bit count.
    Count,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    pub name: &'static str,
    pub kind: Kind,
    pub nullable: bool,
}

const fn col(name: &'static str, kind: Kind, nullable: bool) -> Column {
    Column {
        name,
        kind,
        nullable,
    }
}

/// One row per reading and metric (long format), sorted by device, time, then metric.
pub const READINGS: [Column; 5] = [
    col("device_id", Kind::Text, false),
    col("time", Kind::Time, false),
    col("metric", Kind::Text, false),
    col("value", Kind::Double, false),
    // The reading's metadata object as JSON text, absent without one.
    col("metadata", Kind::Text, true),
];

/// One row per bucket and metric of the hourly or daily rollups, sorted by device, bucket,
/// then metric. `stddev` is the sample standard deviation (absent below two readings or for
/// a rollup from before the spread was kept), `first_*`/`last_*` the earliest and latest
/// reading (absent for such rollups too).
pub const ROLLUPS: [Column; 12] = [
    col("device_id", Kind::Text, false),
    col("bucket_start", Kind::Time, false),
    col("metric", Kind::Text, false),
    col("count", Kind::Count, false),
    col("sum", Kind::Double, false),
    col("min", Kind::Double, false),
    col("max", Kind::Double, false),
    col("stddev", Kind::Double, true),
    col("first_time", Kind::Time, true),
    col("first_value", Kind::Double, true),
    col("last_time", Kind::Time, true),
    col("last_value", Kind::Double, true),
];

/// One row per device and span of its tag history (`docs/design.md` §2 "Tags and groups"):
/// the tags in force from `valid_from` until `valid_to` (absent: still in force), as a JSON
/// object (`{"line":"3","site":"A"}`; `{}` for a span without tags), sorted by device, then
/// `valid_from`. A reading's tags are those of the row with `valid_from <= time` and
/// `valid_to` absent or later.
pub const DEVICES: [Column; 4] = [
    col("device_id", Kind::Text, false),
    col("tags", Kind::Text, false),
    col("valid_from", Kind::Time, false),
    col("valid_to", Kind::Time, true),
];

impl Column {
    /// The column in a Parquet message type.
    pub fn parquet(&self) -> String {
        let repetition = if self.nullable {
            "OPTIONAL"
        } else {
            "REQUIRED"
        };
        let physical = match self.kind {
            Kind::Text => "BYTE_ARRAY",
            Kind::Time | Kind::Count => "INT64",
            Kind::Double => "DOUBLE",
        };
        let logical = match self.kind {
            Kind::Text => " (STRING)",
            Kind::Time => " (TIMESTAMP(MICROS,true))",
            Kind::Double | Kind::Count => "",
        };
        format!("{repetition} {physical} {}{logical};", self.name)
    }

    /// The column's type in the Glue table.
    pub fn glue(&self) -> &'static str {
        match self.kind {
            Kind::Text => "string",
            Kind::Time => "timestamp",
            Kind::Double => "double",
            Kind::Count => "bigint",
        }
    }
}

/// The Parquet message type of `columns`.
pub fn message_type(name: &str, columns: &[Column]) -> String {
    let fields: Vec<String> = columns.iter().map(Column::parquet).collect();
    format!("message {name} {{ {} }}", fields.join(" "))
}
