//! `template.yaml` declares the same table as `tidemark_schema::TABLE`: the deployed table and
//! every local or test table can never drift apart.

use std::collections::BTreeSet;

use serde_yaml::Value;
use tidemark_schema::TABLE;

fn template() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../template.yaml");
    let text = std::fs::read_to_string(path).expect("read template.yaml");
    serde_yaml::from_str(&text).expect("template.yaml is YAML")
}

fn table_properties(t: &Value) -> &Value {
    let resources = t["Resources"].as_mapping().expect("Resources");
    let tables: Vec<_> = resources
        .values()
        .filter(|r| r["Type"].as_str() == Some("AWS::DynamoDB::Table"))
        .collect();
    assert_eq!(
        tables.len(),
        1,
        "exactly one table: the design is single-table"
    );
    &tables[0]["Properties"]
}

fn key_schema(v: &Value) -> Vec<(String, String)> {
    v.as_sequence()
        .expect("KeySchema is a list")
        .iter()
        .map(|k| {
            (
                k["AttributeName"].as_str().unwrap().to_owned(),
                k["KeyType"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn table_keys_match_the_schema() {
    let t = template();
    let p = table_properties(&t);
    assert_eq!(
        key_schema(&p["KeySchema"]),
        vec![
            (TABLE.partition_key.name.to_owned(), "HASH".to_owned()),
            (TABLE.sort_key.name.to_owned(), "RANGE".to_owned()),
        ]
    );
}

#[test]
fn attribute_definitions_match_the_schema() {
    let t = template();
    let p = table_properties(&t);
    let declared: BTreeSet<(String, String)> = p["AttributeDefinitions"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["AttributeName"].as_str().unwrap().to_owned(),
                a["AttributeType"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected: BTreeSet<(String, String)> = TABLE
        .key_attributes()
        .iter()
        .map(|a| (a.name.to_owned(), a.kind.code().to_owned()))
        .collect();
    assert_eq!(declared, expected);
}

#[test]
fn global_secondary_indexes_match_the_schema() {
    let t = template();
    let p = table_properties(&t);
    let gsis = p["GlobalSecondaryIndexes"].as_sequence().unwrap();
    assert_eq!(gsis.len(), TABLE.global_secondary_indexes.len());
    for def in TABLE.global_secondary_indexes {
        let g = gsis
            .iter()
            .find(|g| g["IndexName"].as_str() == Some(def.name))
            .unwrap_or_else(|| panic!("template lacks index {}", def.name));
        assert_eq!(
            key_schema(&g["KeySchema"]),
            vec![
                (def.partition_key.name.to_owned(), "HASH".to_owned()),
                (def.sort_key.name.to_owned(), "RANGE".to_owned()),
            ]
        );
        assert_eq!(
            g["Projection"]["ProjectionType"].as_str(),
            Some(def.projection)
        );
    }
}

#[test]
fn ttl_and_stream_match_the_schema() {
    let t = template();
    let p = table_properties(&t);
    assert_eq!(
        p["TimeToLiveSpecification"]["AttributeName"].as_str(),
        Some(TABLE.ttl_attribute)
    );
    assert_eq!(
        p["TimeToLiveSpecification"]["Enabled"].as_bool(),
        Some(true)
    );
    assert_eq!(
        p["StreamSpecification"]["StreamViewType"].as_str(),
        Some(TABLE.stream_view_type)
    );
}

#[test]
fn table_is_protected_and_encrypted() {
    let t = template();
    let resources = t["Resources"].as_mapping().unwrap();
    let table = resources
        .values()
        .find(|r| r["Type"].as_str() == Some("AWS::DynamoDB::Table"))
        .unwrap();
    assert_eq!(table["DeletionPolicy"].as_str(), Some("Retain"));
    let p = &table["Properties"];
    assert_eq!(
        p["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"].as_bool(),
        Some(true)
    );
    assert_eq!(p["SSESpecification"]["SSEEnabled"].as_bool(), Some(true));
}

#[test]
fn shard_count_bounds_match_the_schema() {
    let t = template();
    let p = &t["Parameters"]["StatusPartitions"];
    assert_eq!(p["MinValue"].as_u64(), Some(1));
    assert_eq!(
        p["MaxValue"].as_u64(),
        Some(u64::from(tidemark_schema::keys::MAX_STATUS_PARTITIONS))
    );
}
