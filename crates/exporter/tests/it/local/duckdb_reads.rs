//! The exported files read back by DuckDB (a Parquet reader we did not write, from PyPI via
//! `scripts/duckdb.sh`), as Athena or a data scientist would: with Hive partitioning, the
//! partition columns come from the keys, `time` is a UTC timestamp, and per device, metric
//! and hour the readings' count, sum, min and max equal both the stored readings and the
//! exported hourly rollups.

use std::collections::BTreeMap;

use tidemark_exporter::dynamo::DynamoExportTable;
use tidemark_exporter::hour::export_hour;
use tidemark_exporter::sink::MemorySink;
use tidemark_testkit::{TestTable, unique_name};

use crate::common::*;

/// (device, metric, UTC hour of the day).
type Group = (String, String, i64);
/// count, sum, min, max.
type Summary = (i64, f64, f64, f64);

const QUERY: &str = r#"
import duckdb, json, sys
root = sys.argv[1]
con = duckdb.connect()
readings = con.execute(f"""
  SELECT device_id, metric, dt, hour, count(*), sum(value), min(value), max(value),
         typeof(min(time)), count(metadata)
  FROM read_parquet('{root}/p/readings/*/*/*.parquet', hive_partitioning = true)
  GROUP BY ALL ORDER BY ALL""").fetchall()
rollups = con.execute(f"""
  SELECT device_id, metric, period, dt, strftime(bucket_start AT TIME ZONE 'UTC', '%H'),
         "count", "sum", "min", "max"
  FROM read_parquet('{root}/p/rollups/*/*/*.parquet', hive_partitioning = true)
  ORDER BY ALL""").fetchall()
print(json.dumps({"readings": readings, "rollups": rollups}, default=str))
"#;

#[tokio::test]
async fn duckdb_reads_the_export_with_hive_partitions_and_the_counts_agree() {
    // GIVEN two devices' readings over two hours, some with metadata, exported
    let t = TestTable::new("export-duckdb").await;
    let mut want: BTreeMap<Group, Summary> = BTreeMap::new();
    for d in ["a1", "b2"] {
        register(&t, d).await;
        for i in 0..90i64 {
            let at = ts("2026-04-20T10:15:00Z").plus_millis(i * 60_000).unwrap();
            let metrics: Vec<(&str, f64)> =
                vec![("t", (i % 13) as f64 - 4.5), ("h", 30.0 + i as f64)];
            for (m, v) in &metrics {
                let hour = at.epoch_micros() / 3_600_000_000 % 24;
                let e = want
                    .entry((d.to_owned(), (*m).to_owned(), hour))
                    .or_insert((0, 0.0, f64::MAX, f64::MIN));
                *e = (e.0 + 1, e.1 + v, e.2.min(*v), e.3.max(*v));
            }
            let meta = (i % 2 == 0).then_some(r#"{"fw":"2.1"}"#);
            store(&t, &reading(d, at, &metrics, meta)).await;
        }
    }
    let source = DynamoExportTable::new(t.client.clone(), &t.name, 1);
    let sink = MemorySink::default();
    for h in ["2026-04-20T10:00:00Z", "2026-04-20T11:00:00Z"] {
        export_hour(&source, &sink, "p", ts(h)).await.unwrap();
    }
    // WHEN DuckDB reads the downloaded objects with Hive partitioning
    let dir = std::env::temp_dir().join(unique_name("export-duckdb"));
    for (k, body) in sink.all() {
        let path = dir.join(&k);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, body).unwrap();
    }
    let got = tidemark_testkit::duckdb::query(QUERY, &dir);
    std::fs::remove_dir_all(&dir).ok();
    // THEN every (device, metric, hour) has the stored readings' count, sum, min and max
    let readings = got["readings"].as_array().unwrap();
    assert_eq!(readings.len(), want.len());
    for r in readings {
        let key = (
            r[0].as_str().unwrap().to_owned(),
            r[1].as_str().unwrap().to_owned(),
            r[3].as_i64().unwrap(),
        );
        let (n, sum, lo, hi) = want[&key];
        assert_eq!(r[2], "2026-04-20", "{r}");
        assert_eq!(
            (r[4].as_i64(), r[6].as_f64(), r[7].as_f64()),
            (Some(n), Some(lo), Some(hi)),
            "{r}"
        );
        assert!((r[5].as_f64().unwrap() - sum).abs() < 1e-9, "{r}");
        // AND time is a timestamp with time zone (UTC-adjusted micros), metadata kept on half
        assert_eq!(r[8], "TIMESTAMP WITH TIME ZONE", "{r}");
        assert!(
            r[9].as_i64().unwrap() > 0 && r[9].as_i64().unwrap() < n,
            "{r}"
        );
    }
    // AND the hourly rollups say the same
    let rollups = got["rollups"].as_array().unwrap();
    assert_eq!(rollups.len(), want.len());
    for r in rollups {
        let hour: i64 = r[4].as_str().unwrap().parse().unwrap();
        let key = (
            r[0].as_str().unwrap().to_owned(),
            r[1].as_str().unwrap().to_owned(),
            hour,
        );
        let (n, sum, lo, hi) = want[&key];
        assert_eq!(
            (r[2].as_str(), r[3].as_str()),
            (Some("hourly"), Some("2026-04-20")),
            "{r}"
        );
        assert_eq!(
            (r[5].as_i64(), r[7].as_f64(), r[8].as_f64()),
            (Some(n), Some(lo), Some(hi)),
            "{r}"
        );
        assert!((r[6].as_f64().unwrap() - sum).abs() < 1e-9, "{r}");
    }
}
