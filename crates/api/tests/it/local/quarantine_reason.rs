//! `GET /quarantine?reason=…`: what the pipeline set aside (`unprocessable`) is found among a
//! day's bad records without reading them all by eye. Against DynamoDB Local.

use crate::common::*;
use tidemark_schema::{QuarantineItem, QuarantineReason, QuarantineSource};
use tidemark_testkit::TestTable;

#[tokio::test]
async fn the_quarantine_lists_one_reason_when_asked_and_names_the_code_that_set_a_record_aside() {
    let t = TestTable::new("api-quarantine-reason").await;
    let mut set_aside = Vec::new();
    for i in 0..12u64 {
        let received = ts("2026-04-20T14:00:00Z")
            .plus_millis(i as i64 * 1000)
            .unwrap();
        let seq = format!("4959033827149025660855969253836157109592157598913658{i:04}");
        let reason = if i % 3 == 0 {
            QuarantineReason::Unprocessable
        } else {
            QuarantineReason::NotJson
        };
        let mut q = QuarantineItem::split(
            QuarantineSource {
                received,
                sequence: &seq,
                sub_record: None,
                partition_key: "sensor_01",
                explicit_hash_key: None,
            },
            reason,
            "why".into(),
            b"{}",
        );
        if reason == QuarantineReason::Unprocessable {
            q.record.function_version = Some("7".into());
            set_aside.push(seq);
        }
        put(&t, &q.record).await;
    }
    let app = app(&t);
    let (items, _) = walk(
        &app,
        "/quarantine?day=2026-04-20&reason=unprocessable&limit=2",
    )
    .await;
    let seqs: Vec<&str> = items
        .iter()
        .map(|q| q["sequenceNumber"].as_str().unwrap())
        .collect();
    assert_eq!(
        seqs, set_aside,
        "only the set-aside records, in order, over pages"
    );
    assert!(items.iter().all(|q| q["reason"] == "unprocessable"));
    assert!(items.iter().all(|q| q["functionVersion"] == "7"));

    let (all, _) = walk(&app, "/quarantine?day=2026-04-20&limit=5").await;
    assert_eq!(all.len(), 12, "without a reason, every record");

    // A cursor of one reason's listing is not one of another's.
    let (_, page) = get(
        &app,
        "/quarantine?day=2026-04-20&reason=unprocessable&limit=1",
    )
    .await;
    let cursor = page["cursor"].as_str().unwrap();
    let (status, _) = get(
        &app,
        &format!("/quarantine?day=2026-04-20&reason=not_json&limit=1&cursor={cursor}"),
    )
    .await;
    assert_eq!(status, 400);

    let (status, body) = get(&app, "/quarantine?reason=bogus").await;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("reason"),
        "{body}"
    );
}

#[test]
fn the_openapi_reason_filter_names_every_quarantine_reason() {
    let spec = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml"));
    let at = spec
        .find("        - name: reason")
        .expect("the reason parameter");
    let enum_text = &spec[at..at + spec[at..].find("]\n").unwrap()];
    let named: Vec<&str> = enum_text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .collect();
    for r in QuarantineReason::ALL {
        assert!(
            named.contains(&r.as_str()),
            "{} is missing from the reason enum",
            r.as_str()
        );
    }
}
