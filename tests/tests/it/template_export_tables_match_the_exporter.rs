//! The Glue tables `template.yaml` declares for the Parquet export read what the exporter
//! writes: the same columns with the types the files carry, partition keys and projection
//! that produce the exporter's object keys, so Athena needs no crawler and the two cannot
//! drift apart.

use serde_yaml::Value;
use tidemark_exporter::columns::{self, Column};
use tidemark_exporter::paths;
use tidemark_schema::{Period, Timestamp};

fn template() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../template.yaml");
    let text = std::fs::read_to_string(path).expect("read template.yaml");
    serde_yaml::from_str(&text).expect("template.yaml is YAML")
}

/// The `TableInput` of the Glue table named `name`.
fn table(t: &Value, name: &str) -> Value {
    let resources = t["Resources"].as_mapping().expect("Resources");
    let found: Vec<&Value> = resources
        .values()
        .filter(|r| r["Type"].as_str() == Some("AWS::Glue::Table"))
        .map(|r| &r["Properties"]["TableInput"])
        .filter(|i| i["Name"].as_str() == Some(name))
        .collect();
    assert_eq!(found.len(), 1, "one Glue table named {name}");
    found[0].clone()
}

fn pairs(v: &Value) -> Vec<(String, String)> {
    v.as_sequence()
        .expect("a list of columns")
        .iter()
        .map(|c| {
            (
                c["Name"].as_str().unwrap().to_owned(),
                c["Type"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn expected(cols: &[Column]) -> Vec<(String, String)> {
    cols.iter()
        .map(|c| (c.name.to_owned(), c.glue().to_owned()))
        .collect()
}

/// The `Fn::Sub` string of the location template, with the projected partition values put in.
fn location(input: &Value, values: &[(&str, &str)]) -> String {
    let template = &input["Parameters"]["storage.location.template"];
    let sub = template
        .as_str()
        .map(str::to_owned)
        .or_else(|| {
            // `!Sub` parses as a tagged value.
            serde_yaml::to_string(template).ok()
        })
        .unwrap();
    let mut s = sub
        .trim()
        .trim_start_matches("!Sub")
        .trim()
        .trim_matches('\'')
        .trim_matches('"')
        .replace("${ExportBucket}", "bucket")
        .replace("${ExportPrefix}", "tidemark");
    for (k, v) in values {
        s = s.replace(&format!("${{!{k}}}"), v);
    }
    s
}

/// The S3 folder (with its trailing slash) of an object key in the bucket.
fn folder_of(key: &str) -> String {
    let (folder, _) = key.rsplit_once('/').unwrap();
    format!("s3://bucket/{folder}/")
}

#[test]
fn the_readings_table_has_the_exporters_columns_and_finds_its_objects() {
    let input = table(&template(), "readings");
    assert_eq!(
        pairs(&input["StorageDescriptor"]["Columns"]),
        expected(&columns::READINGS)
    );
    assert_eq!(
        pairs(&input["PartitionKeys"]),
        [("dt", "string"), ("hour", "int")].map(|(a, b)| (a.to_owned(), b.to_owned()))
    );
    let p = &input["Parameters"];
    assert_eq!(p["projection.enabled"].as_str(), Some("true"));
    assert_eq!(p["projection.dt.type"].as_str(), Some("date"));
    assert_eq!(p["projection.hour.type"].as_str(), Some("integer"));
    assert_eq!(p["projection.hour.digits"].as_str(), Some("2"));
    // An object the exporter writes lies in the partition the projection computes.
    let hour = Timestamp::parse_rfc3339("2026-04-20T07:00:00Z").unwrap();
    let slice = tidemark_exporter::slicing::Slice::new(3, 4).unwrap();
    let key = paths::readings_key("tidemark", hour, slice, 0);
    let folder = location(&input, &[("dt", "2026-04-20"), ("hour", "07")]);
    assert_eq!(folder_of(&key), folder);
}

#[test]
fn the_rollups_table_has_the_exporters_columns_and_finds_its_objects() {
    let input = table(&template(), "rollups");
    assert_eq!(
        pairs(&input["StorageDescriptor"]["Columns"]),
        expected(&columns::ROLLUPS)
    );
    assert_eq!(
        pairs(&input["PartitionKeys"]),
        [("period", "string"), ("dt", "string")].map(|(a, b)| (a.to_owned(), b.to_owned()))
    );
    assert_eq!(
        input["Parameters"]["projection.period.values"].as_str(),
        Some("hourly,daily")
    );
    let at = Timestamp::parse_rfc3339("2026-04-20T07:30:00Z").unwrap();
    for (period, name) in [(Period::Hourly, "hourly"), (Period::Daily, "daily")] {
        let key = match period {
            Period::Daily => paths::rollups_key("tidemark", period.bucket(at), 0),
            Period::Hourly => {
                let slice = tidemark_exporter::slicing::Slice::new(3, 4).unwrap();
                paths::slice_rollups_key("tidemark", period.bucket(at), slice, 0)
            }
        };
        let folder = location(&input, &[("period", name), ("dt", "2026-04-20")]);
        assert_eq!(folder_of(&key), folder);
    }
}

#[test]
fn the_devices_table_has_the_exporters_columns_and_finds_its_objects() {
    let input = table(&template(), "devices");
    assert_eq!(
        pairs(&input["StorageDescriptor"]["Columns"]),
        expected(&columns::DEVICES)
    );
    let location = serde_yaml::to_string(&input["StorageDescriptor"]["Location"]).unwrap();
    let location = location
        .trim()
        .trim_start_matches("!Sub")
        .trim()
        .trim_matches('\'')
        .trim_matches('"')
        .replace("${ExportBucket}", "bucket")
        .replace("${ExportPrefix}", "tidemark");
    assert_eq!(folder_of(&paths::devices_key("tidemark", 0)), location);
}

#[test]
fn the_files_declare_the_types_the_glue_columns_name() {
    // Parquet INT64 TIMESTAMP(MICROS, UTC) is what Athena reads as `timestamp`, INT64 as
    // `bigint`, DOUBLE as `double`, BYTE_ARRAY (STRING) as `string`.
    for c in columns::READINGS
        .iter()
        .chain(&columns::ROLLUPS)
        .chain(&columns::DEVICES)
    {
        let parquet = c.parquet();
        let want = match c.glue() {
            "timestamp" => "INT64 ",
            "bigint" => "INT64 ",
            "double" => "DOUBLE ",
            "string" => "BYTE_ARRAY ",
            other => panic!("{other}"),
        };
        assert!(parquet.contains(want), "{}: {parquet}", c.name);
        assert_eq!(
            parquet.contains("TIMESTAMP(MICROS,true)"),
            c.glue() == "timestamp",
            "{parquet}"
        );
    }
}
