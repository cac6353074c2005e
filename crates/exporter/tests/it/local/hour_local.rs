//! One hour exported from DynamoDB Local: every reading of the hour exactly once, long
//! format, metadata kept, the hour's rollups equal to the readings' fold, a manifest that
//! counts them, and a second export of the same hour byte for byte the same, or, after a
//! late reading, with it, once.

use std::collections::BTreeMap;

use bytes::Bytes;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;
use tidemark_exporter::dynamo::DynamoExportTable;
use tidemark_exporter::hour::export_hour;
use tidemark_exporter::objects::MANIFEST;
use tidemark_exporter::sink::MemorySink;
use tidemark_testkit::TestTable;

use crate::common::*;

/// (device, time µs, metric).
type RowKey = (String, i64, String);
/// Every (value, metadata) a row key has.
type RowValues = Vec<(f64, Option<String>)>;

/// Every row of the Parquet files under `folder`, duplicates kept.
fn rows(sink: &MemorySink, folder: &str) -> BTreeMap<RowKey, RowValues> {
    let mut out: BTreeMap<_, Vec<_>> = BTreeMap::new();
    for (k, body) in sink.all() {
        if !k.starts_with(folder) || !k.ends_with(".parquet") {
            continue;
        }
        let r = SerializedFileReader::new(Bytes::from(body)).unwrap();
        for row in r.get_row_iter(None).unwrap() {
            let f: Vec<Field> = row
                .unwrap()
                .get_column_iter()
                .map(|(_, f)| f.clone())
                .collect();
            let (Field::Str(d), Field::TimestampMicros(t), Field::Str(m), Field::Double(v)) =
                (&f[0], &f[1], &f[2], &f[3])
            else {
                panic!("{f:?}");
            };
            let meta = match &f[4] {
                Field::Str(s) => Some(s.clone()),
                _ => None,
            };
            out.entry((d.clone(), *t, m.clone()))
                .or_default()
                .push((*v, meta));
        }
    }
    out
}

#[tokio::test]
async fn an_hour_exports_each_reading_once_and_again_identically_or_with_a_late_one() {
    // GIVEN three devices, two with readings in 10:00–11:00 (and around it), one silent
    let t = TestTable::new("export-hour").await;
    for d in ["d1", "d2", "d3"] {
        register(&t, d).await;
    }
    let mut stored = vec![
        reading("d1", ts("2026-04-20T09:59:59.999999Z"), &[("t", 1.0)], None),
        reading("d1", ts("2026-04-20T11:00:00Z"), &[("t", 1.0)], None),
        reading(
            "d2",
            ts("2026-04-20T10:30:00Z"),
            &[("t", 7.5), ("h", 40.0)],
            Some(r#"{"fw":"2.1","site":"A"}"#),
        ),
    ];
    for m in 0..60 {
        stored.push(reading(
            "d1",
            ts(&format!("2026-04-20T10:{m:02}:00Z")),
            &[("t", 20.0 + m as f64 / 10.0), ("h", 50.0)],
            None,
        ));
    }
    for r in &stored {
        store(&t, r).await;
    }
    let source = DynamoExportTable::new(t.client.clone(), &t.name, 1);
    let sink = MemorySink::default();
    // WHEN the hour is exported
    let rep = export_hour(&source, &sink, "lake/tidemark", ts("2026-04-20T10:00:00Z"))
        .await
        .unwrap();
    // THEN each reading of the hour is there once per metric, with its metadata
    let folder = "lake/tidemark/readings/dt=2026-04-20/hour=10/";
    let got = rows(&sink, folder);
    assert_eq!(got.len(), 60 * 2 + 2);
    assert!(got.values().all(|v| v.len() == 1), "duplicates");
    let d2 = &got[&(
        "d2".into(),
        ts("2026-04-20T10:30:00Z").epoch_micros(),
        "h".into(),
    )];
    assert_eq!(d2[0], (40.0, Some(r#"{"fw":"2.1","site":"A"}"#.into())));
    assert!(
        !got.keys()
            .any(|(d, t, _)| d == "d1" && *t >= ts("2026-04-20T11:00:00Z").epoch_micros())
    );
    // AND the manifest counts them
    let manifest: serde_json::Value =
        serde_json::from_slice(&sink.get(&format!("{folder}{MANIFEST}")).unwrap()).unwrap();
    assert_eq!(
        (
            manifest["readings"].as_u64(),
            manifest["rows"].as_u64(),
            manifest["devices"].as_u64()
        ),
        (Some(61), Some(122), Some(2))
    );
    assert_eq!((rep.readings, rep.rows, rep.devices), (61, 122, 2));
    // AND the hour's rollups are the fold of its readings
    // (one slice: a backfill exports an hour in one go)
    let slice = tidemark_exporter::slicing::Slice::whole();
    let rollup = sink
        .get(&format!(
            "lake/tidemark/rollups/period=hourly/dt=2026-04-20/hour-10-slice-{:02}-00000.parquet",
            slice.get()
        ))
        .unwrap();
    let r = SerializedFileReader::new(Bytes::from(rollup)).unwrap();
    let first: Vec<(String, Field)> = r
        .get_row_iter(None)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .get_column_iter()
        .map(|(n, f)| (n.clone(), f.clone()))
        .collect();
    let get = |n: &str| first.iter().find(|(k, _)| k == n).unwrap().1.clone();
    // d1's "h" sorts first: sixty readings of 50.0
    assert_eq!(
        (get("device_id"), get("metric"), get("count"), get("sum")),
        (
            Field::Str("d1".into()),
            Field::Str("h".into()),
            Field::Long(60),
            Field::Double(3000.0)
        )
    );

    // WHEN it is exported again, THEN every object is byte for byte the same
    let before = sink.all();
    export_hour(&source, &sink, "lake/tidemark", ts("2026-04-20T10:00:00Z"))
        .await
        .unwrap();
    assert_eq!(sink.all(), before);

    // WHEN a late reading lands in the hour and the hour is exported again
    store(
        &t,
        &reading("d3", ts("2026-04-20T10:59:59Z"), &[("t", -3.0)], None),
    )
    .await;
    let rep = export_hour(&source, &sink, "lake/tidemark", ts("2026-04-20T10:00:00Z"))
        .await
        .unwrap();
    // THEN it is in the export, once, and the rest unchanged
    let again = rows(&sink, folder);
    assert_eq!(again.len(), got.len() + 1);
    assert_eq!(
        again[&(
            "d3".into(),
            ts("2026-04-20T10:59:59Z").epoch_micros(),
            "t".into()
        )],
        [(-3.0, None)]
    );
    assert_eq!((rep.readings, rep.devices), (62, 3));
}

#[tokio::test]
async fn a_smaller_export_removes_the_parts_an_earlier_one_left() {
    // GIVEN an hour exported once into more parts than it needs now (an extra part left)
    let t = TestTable::new("export-stale").await;
    register(&t, "d1").await;
    store(
        &t,
        &reading("d1", ts("2026-04-20T10:00:00Z"), &[("t", 1.0)], None),
    )
    .await;
    let sink = MemorySink::default();
    let stale = "p/readings/dt=2026-04-20/hour=10/part-00001.parquet";
    use tidemark_exporter::sink::Sink;
    sink.put(stale, b"old".to_vec(), "application/octet-stream")
        .await
        .unwrap();
    sink.put(
        "p/readings/dt=2026-04-20/hour=11/part-00001.parquet",
        b"another hour".to_vec(),
        "x",
    )
    .await
    .unwrap();
    // WHEN it is exported
    let source = DynamoExportTable::new(t.client.clone(), &t.name, 1);
    export_hour(&source, &sink, "p", ts("2026-04-20T10:00:00Z"))
        .await
        .unwrap();
    // THEN the stale part is gone, the new part and manifest are there, other hours untouched
    assert_eq!(sink.get(stale), None);
    let slice = tidemark_exporter::slicing::Slice::whole();
    assert!(
        sink.get(&format!(
            "p/readings/dt=2026-04-20/hour=10/slice-{:02}-00000.parquet",
            slice.get()
        ))
        .is_some()
    );
    assert!(
        sink.get("p/readings/dt=2026-04-20/hour=11/part-00001.parquet")
            .is_some()
    );
}

#[tokio::test]
async fn a_range_exports_its_closed_hours_and_leaves_the_open_one() {
    use tidemark_exporter::hour::{export_range, hours_of};
    // GIVEN readings in three hours, the last still open at the clock
    let t = TestTable::new("export-range").await;
    register(&t, "d1").await;
    for at in [
        "2026-04-20T08:10:00Z",
        "2026-04-20T09:10:00Z",
        "2026-04-20T10:10:00Z",
    ] {
        store(&t, &reading("d1", ts(at), &[("t", 1.0)], None)).await;
    }
    let source = DynamoExportTable::new(t.client.clone(), &t.name, 1);
    let sink = MemorySink::default();
    // WHEN 08:30 to 11:00 is exported at 11:05 (10:00 closes at 11:15)
    let mut seen = Vec::new();
    let rep = export_range(
        &source,
        &sink,
        "p",
        ts("2026-04-20T08:30:00Z"),
        ts("2026-04-20T11:00:00Z"),
        ts("2026-04-20T11:05:00Z"),
        |h| seen.push(h.start.clone()),
    )
    .await
    .unwrap();
    // THEN the hours starting in the range and closed are exported: 09:00 only
    assert_eq!((rep.hours, rep.open, rep.readings), (1, 1, 1));
    assert_eq!(seen, ["2026-04-20T09:00:00.000000Z"]);
    assert!(
        sink.get("p/readings/dt=2026-04-20/hour=09/_manifest.json")
            .is_some()
    );
    assert!(
        sink.get("p/readings/dt=2026-04-20/hour=08/_manifest.json")
            .is_none()
    );
    assert_eq!(
        hours_of(ts("2026-04-20T23:00:00Z"), ts("2026-04-21T01:00:01Z")).len(),
        3
    );
}

#[tokio::test]
async fn a_day_exports_each_devices_daily_rollups_folded_from_its_readings() {
    use tidemark_exporter::hour::export_day;
    // GIVEN d1 with readings through the day (and either side of it), d2 with one
    let t = TestTable::new("export-day").await;
    for d in ["d1", "d2"] {
        register(&t, d).await;
    }
    store(
        &t,
        &reading("d1", ts("2026-04-19T23:59:59Z"), &[("t", 99.0)], None),
    )
    .await;
    store(
        &t,
        &reading("d1", ts("2026-04-21T00:00:00Z"), &[("t", 99.0)], None),
    )
    .await;
    for h in 0..24 {
        let at = ts(&format!("2026-04-20T{h:02}:30:00Z"));
        store(&t, &reading("d1", at, &[("t", h as f64)], None)).await;
    }
    store(
        &t,
        &reading("d2", ts("2026-04-20T12:00:00Z"), &[("h", -3.5)], None),
    )
    .await;
    let source = DynamoExportTable::new(t.client.clone(), &t.name, 1);
    let sink = MemorySink::default();
    // WHEN the day is exported
    let rep = export_day(&source, &sink, "p", ts("2026-04-20T17:00:00Z"))
        .await
        .unwrap();
    // THEN there is one row per device and metric, the fold of that day's readings
    assert_eq!((rep.devices, rep.readings, rep.rows), (2, 25, 2));
    let body = sink
        .get("p/rollups/period=daily/dt=2026-04-20/part-00000.parquet")
        .unwrap();
    let r = SerializedFileReader::new(Bytes::from(body)).unwrap();
    let rows: Vec<Vec<(String, Field)>> = r
        .get_row_iter(None)
        .unwrap()
        .map(|row| {
            row.unwrap()
                .get_column_iter()
                .map(|(n, f)| (n.clone(), f.clone()))
                .collect()
        })
        .collect();
    let get =
        |row: &[(String, Field)], n: &str| row.iter().find(|(k, _)| k == n).unwrap().1.clone();
    assert_eq!(rows.len(), 2);
    assert_eq!(get(&rows[0], "device_id"), Field::Str("d1".into()));
    assert_eq!(get(&rows[0], "count"), Field::Long(24));
    assert_eq!(
        get(&rows[0], "sum"),
        Field::Double((0..24).sum::<i32>() as f64)
    );
    assert_eq!(
        (get(&rows[0], "min"), get(&rows[0], "max")),
        (Field::Double(0.0), Field::Double(23.0))
    );
    assert_eq!(get(&rows[1], "min"), Field::Double(-3.5));
    // AND the day's manifest says so
    let m: serde_json::Value = serde_json::from_slice(
        &sink
            .get("p/rollups/period=daily/dt=2026-04-20/_manifest.json")
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        (&m["period"], &m["readings"]),
        (&"daily".into(), &25.into())
    );
}

#[tokio::test]
async fn a_day_merges_its_exported_hours_and_folds_from_readings_only_the_hours_never_exported() {
    use tidemark_exporter::hour::export_day;
    // GIVEN a device with two readings in every hour of the day, hours 00 to 22 exported
    let t = TestTable::new("export-day-hours").await;
    register(&t, "d1").await;
    let mut values = Vec::new();
    for h in 0..24 {
        for (m, v) in [(10, h as f64), (40, h as f64 + 0.5)] {
            let at = ts(&format!("2026-04-20T{h:02}:{m}:00Z"));
            store(&t, &reading("d1", at, &[("t", v)], None)).await;
            values.push(v);
        }
    }
    let source = DynamoExportTable::new(t.client.clone(), &t.name, 1);
    let sink = MemorySink::default();
    for h in 0..23 {
        let hour = ts(&format!("2026-04-20T{h:02}:00:00Z"));
        export_hour(&source, &sink, "p", hour).await.unwrap();
    }
    // AND a late reading into exported hour 05 that has not been re-exported yet, and one
    // into hour 23, which never was
    store(
        &t,
        &reading("d1", ts("2026-04-20T05:59:00Z"), &[("t", 1000.0)], None),
    )
    .await;
    store(
        &t,
        &reading("d1", ts("2026-04-20T23:59:00Z"), &[("t", 50.0)], None),
    )
    .await;
    values.push(50.0);
    // WHEN the day is exported
    let rep = export_day(&source, &sink, "p", ts("2026-04-20T00:00:00Z"))
        .await
        .unwrap();
    // THEN it is the exported hours as they were (no 1000: hour 05's re-export brings it,
    // and the day with it) and hour 23 from its readings
    assert_eq!((rep.devices, rep.readings, rep.rows), (1, 49, 1));
    let body = sink
        .get("p/rollups/period=daily/dt=2026-04-20/part-00000.parquet")
        .unwrap();
    let row = tidemark_exporter::file::read_rollup_rows(body).unwrap();
    let s = &row[0].stats;
    assert_eq!(
        (s.count, s.sum, s.min, s.max),
        (49, values.iter().sum(), 0.0, 50.0)
    );
    // AND its spread is the readings' (the hours' files keep the standard deviation)
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let sd = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    assert!(
        (s.stddev().unwrap() - sd).abs() < 1e-9,
        "{:?} vs {sd}",
        s.stddev()
    );
    assert_eq!(s.first.unwrap().1, 0.0);
    assert_eq!(s.last.unwrap().1, 50.0);
}

#[tokio::test]
async fn a_device_not_registered_yet_has_its_hour_exported_from_what_the_rollups_role_saw() {
    // GIVEN a registered device and a newcomer, both with readings of 10:00 stored and seen by
    // the rollups role, the newcomer not registered yet (the alerts role, which registers
    // devices, is behind)
    let t = TestTable::new("export-newcomer").await;
    register(&t, "known").await;
    store(
        &t,
        &reading("known", ts("2026-04-20T10:06:00Z"), &[("t", 4.0)], None),
    )
    .await;
    store(
        &t,
        &reading("newcomer", ts("2026-04-20T10:05:00Z"), &[("t", 3.0)], None),
    )
    .await;
    // AND a registered device silent all hour, whose readings the hour's walk never reads
    register(&t, "silent").await;
    store(
        &t,
        &reading("silent", ts("2026-04-20T09:59:00Z"), &[("t", 1.0)], None),
    )
    .await;
    let source = DynamoExportTable::new(t.client.clone(), &t.name, 1);
    let sink = MemorySink::default();
    // WHEN the hour is exported
    let rep = export_hour(&source, &sink, "p", ts("2026-04-20T10:00:00Z"))
        .await
        .unwrap();
    // THEN both devices with readings are in it, the newcomer included
    let got = rows(&sink, "p/readings/dt=2026-04-20/hour=10/");
    let devices: Vec<&str> = got.keys().map(|(d, _, _)| d.as_str()).collect();
    assert_eq!(devices, ["known", "newcomer"]);
    assert_eq!(rep.readings, 2);
}
