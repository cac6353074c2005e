//! Group rollups of closed buckets, written by the export against DynamoDB Local: each
//! group's hour equals a recomputation from its members' readings (each reading in the groups
//! of its own time: a member moving between groups mid-hour, a member leaving every group),
//! again after a correction, a delete and a late reading once the hour is exported again (the
//! items of a (group, metric) left without readings deleted), and a day is the merge of its
//! hours. Also the `devices` table: each device's tags over time (docs/design.md §5
//! "Groups", §6 "Export").

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;
use tidemark_exporter::dynamo::DynamoExportTable;
use tidemark_exporter::hour::{export_day, export_hour};
use tidemark_exporter::sink::MemorySink;
use tidemark_schema::{
    DeviceId, GroupBucketItem, MetricName, Period, ReadingItem, Stats, Tag, TagEpoch, TagHistory,
    TagHistoryItem, TagKey, TagValue, Tags, Timestamp, keys,
};
use tidemark_testkit::TestTable;

use crate::common::*;

fn tags(pairs: &[(&str, &str)]) -> Tags {
    Tags::new(
        pairs
            .iter()
            .map(|(k, v)| (TagKey::new(k).unwrap(), TagValue::new(v).unwrap()))
            .collect(),
    )
    .unwrap()
}

/// d0, d1 at site A on line 1; d2 at site B; d3 moves from A to B at 10:30; d4 leaves every
/// group at 11:20. `GROUP_TAGS` is `site,line`.
fn histories() -> BTreeMap<String, TagHistory> {
    let e = |from: &str, t: Tags| TagEpoch {
        from: ts(from),
        tags: t,
    };
    let a1 = tags(&[("site", "A"), ("line", "1")]);
    BTreeMap::from([
        (
            "d0".into(),
            TagHistory::from_epochs(vec![e("2026-04-20T00:00:00Z", a1.clone())]),
        ),
        (
            "d1".into(),
            TagHistory::from_epochs(vec![e("2026-04-20T00:00:00Z", a1)]),
        ),
        (
            "d2".into(),
            TagHistory::from_epochs(vec![e("2026-04-20T00:00:00Z", tags(&[("site", "B")]))]),
        ),
        (
            "d3".into(),
            TagHistory::from_epochs(vec![
                e("2026-04-20T00:00:00Z", tags(&[("site", "A")])),
                e(
                    "2026-04-20T10:30:00Z",
                    tags(&[("site", "B"), ("line", "2")]),
                ),
            ]),
        ),
        (
            "d4".into(),
            TagHistory::from_epochs(vec![
                e(
                    "2026-04-20T00:00:00Z",
                    tags(&[("site", "A"), ("line", "2")]),
                ),
                e("2026-04-20T11:20:00Z", Tags::empty()),
            ]),
        ),
    ])
}

fn group_keys() -> Vec<TagKey> {
    vec![TagKey::new("site").unwrap(), TagKey::new("line").unwrap()]
}

type Table = BTreeMap<(String, Timestamp), ReadingItem>;

/// Per (group, metric, bucket): the fold of the members' readings and the members.
fn recompute(
    table: &Table,
    period: Period,
) -> BTreeMap<(Tag, MetricName, Timestamp), (Stats, usize)> {
    let h = histories();
    let mut out: BTreeMap<(Tag, MetricName, Timestamp), (Stats, BTreeSet<String>)> =
        BTreeMap::new();
    for ((d, at), r) in table {
        let Some(history) = h.get(d) else { continue };
        for tag in history.at(*at).groups(&group_keys()) {
            for (m, v) in &r.metrics {
                let e = out
                    .entry((tag.clone(), m.clone(), period.bucket(*at).start()))
                    .or_insert_with(|| (Stats::EMPTY, BTreeSet::new()));
                e.0.merge(&Stats::at_sketched(*at, *v));
                e.1.insert(d.clone());
            }
        }
    }
    out.into_iter()
        .map(|(k, (s, m))| (k, (s, m.len())))
        .collect()
}

/// Every group bucket item of `period` in the table.
async fn stored(
    t: &TestTable,
    period: Period,
) -> BTreeMap<(Tag, MetricName, Timestamp), GroupBucketItem> {
    let mut out = BTreeMap::new();
    for item in t.scan().await {
        let Some(aws_sdk_dynamodb::types::AttributeValue::S(pk)) = item.get("pk") else {
            continue;
        };
        if !pk.starts_with(keys::GROUP_PREFIX) {
            continue;
        }
        let g: GroupBucketItem = tidemark_store::from_item(item.clone()).unwrap();
        let b = g.bucket().unwrap();
        if b.period() == period {
            out.insert((g.tag.clone(), g.metric.clone(), b.start()), g);
        }
    }
    out
}

async fn assert_groups_equal(t: &TestTable, table: &Table, period: Period, context: &str) {
    let want = recompute(table, period);
    let got = stored(t, period).await;
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "{context}: the (group, metric, bucket)s"
    );
    for (k, (e, members)) in &want {
        let g = &got[k];
        assert_eq!(
            (
                g.stats.count,
                g.stats.sum,
                g.stats.min,
                g.stats.max,
                g.devices
            ),
            (e.count, e.sum, e.min, e.max, *members as u64),
            "{context}: {k:?}"
        );
        let (gm, em) = (g.stats.m2.unwrap_or(0.0), e.m2.unwrap_or(0.0));
        assert!(
            (gm - em).abs() <= 1e-6 * em.abs().max(1.0),
            "{context}: {k:?}"
        );
        assert!(g.stats.sketch.is_some(), "{context}: {k:?} is sketched");
    }
}

async fn put(t: &TestTable, table: &mut Table, device: &str, at: Timestamp, pairs: &[(&str, f64)]) {
    let r = reading(device, at, pairs, None);
    store(t, &r).await;
    table.insert((device.to_owned(), at), r);
}

async fn delete(t: &TestTable, table: &mut Table, device: &str, at: Timestamp) {
    let r = table.remove(&(device.to_owned(), at)).unwrap();
    t.client
        .delete_item()
        .table_name(&t.name)
        .key("pk", aws_sdk_dynamodb::types::AttributeValue::S(r.pk))
        .key("sk", aws_sdk_dynamodb::types::AttributeValue::S(r.sk))
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn group_rollups_are_recomputed_from_the_members_readings_at_every_export() {
    // GIVEN five tagged devices and one without tags, readings of two hours (values in
    // quarters, so sums are exact in any order), d3 moving from A to B mid-hour and d4
    // leaving every group at 11:20
    let t = TestTable::new("export-groups").await;
    for d in ["d0", "d1", "d2", "d3", "d4", "d5"] {
        register(&t, d).await;
    }
    for (d, h) in histories() {
        let key = TagHistoryItem::key(&DeviceId::new(&d).unwrap());
        t.put(&TagHistoryItem {
            pk: key.pk,
            sk: key.sk,
            epochs: h,
            version: 1,
        })
        .await;
    }
    let mut table = Table::new();
    let mut x: u64 = 88_172_645_463_325_252;
    for i in 0..90 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let d = format!("d{}", i % 6);
        let at = ts("2026-04-20T10:00:00Z")
            .plus_millis((x % 7200) as i64 * 1000)
            .unwrap();
        let v = ((x >> 20) % 400) as f64 / 4.0 - 25.0;
        if i % 3 == 0 {
            put(&t, &mut table, &d, at, &[("t", v), ("h", v + 10.0)]).await;
        } else {
            put(&t, &mut table, &d, at, &[("t", v)]).await;
        }
    }
    // site B's only `x` reading: its item goes once it is deleted
    put(
        &t,
        &mut table,
        "d2",
        ts("2026-04-20T11:40:00Z"),
        &[("x", 1.5)],
    )
    .await;
    let source = DynamoExportTable::new(t.client.clone(), &t.name, 1).with_group_tags(group_keys());
    let sink = MemorySink::default();
    // WHEN both hours are exported
    for h in ["2026-04-20T10:00:00Z", "2026-04-20T11:00:00Z"] {
        export_hour(&source, &sink, "lake", ts(h)).await.unwrap();
    }
    // THEN each group's hours equal the recomputation
    assert_groups_equal(&t, &table, Period::Hourly, "first export").await;
    // WHEN readings change after the export: a correction, a delete (the last `x` of site
    // B), a late reading of d3 after its move; and hour 11 is exported again
    let (d, at) = table
        .keys()
        .find(|(d, at)| d == "d1" && *at >= ts("2026-04-20T11:00:00Z"))
        .cloned()
        .unwrap();
    put(&t, &mut table, &d, at, &[("t", 99.25)]).await;
    delete(&t, &mut table, "d2", ts("2026-04-20T11:40:00Z")).await;
    put(
        &t,
        &mut table,
        "d3",
        ts("2026-04-20T11:59:59Z"),
        &[("t", -3.5)],
    )
    .await;
    export_hour(&source, &sink, "lake", ts("2026-04-20T11:00:00Z"))
        .await
        .unwrap();
    // THEN the hour is the recomputation again, and site B's `x` item is gone
    assert_groups_equal(&t, &table, Period::Hourly, "re-export").await;
    // AND the hour's rollups manifest no longer lists it
    let manifest: serde_json::Value = serde_json::from_slice(
        &sink
            .get("lake/rollups/period=hourly/dt=2026-04-20/_manifest-11.json")
            .unwrap(),
    )
    .unwrap();
    let listed = manifest["groups"].as_array().unwrap();
    assert!(!listed.is_empty());
    assert!(listed.iter().all(|p| p["metric"] != "x"), "{listed:?}");
    // WHEN the day is exported
    export_day(&source, &sink, "lake", ts("2026-04-20T23:00:00Z"))
        .await
        .unwrap();
    // THEN each group's day is the fold of its members' readings, members counted once
    assert_groups_equal(&t, &table, Period::Daily, "day").await;
    // AND the devices table holds each device's tags over time
    let mut rows: Vec<(String, String, i64, Option<i64>)> = Vec::new();
    for (k, body) in sink.all() {
        if !k.starts_with("lake/devices/") || !k.ends_with(".parquet") {
            continue;
        }
        let r = SerializedFileReader::new(Bytes::from(body)).unwrap();
        for row in r.get_row_iter(None).unwrap() {
            let f: Vec<Field> = row
                .unwrap()
                .get_column_iter()
                .map(|(_, f)| f.clone())
                .collect();
            let (Field::Str(d), Field::Str(tags), Field::TimestampMicros(from)) =
                (&f[0], &f[1], &f[2])
            else {
                panic!("{f:?}");
            };
            let to = match &f[3] {
                Field::TimestampMicros(t) => Some(*t),
                _ => None,
            };
            rows.push((d.clone(), tags.clone(), *from, to));
        }
    }
    let d3: Vec<_> = rows.iter().filter(|r| r.0 == "d3").collect();
    assert_eq!(rows.len(), 7, "{rows:?}");
    assert_eq!(d3[0].1, r#"{"site":"A"}"#);
    assert_eq!(d3[0].3, Some(ts("2026-04-20T10:30:00Z").epoch_micros()));
    assert_eq!(d3[1].1, r#"{"line":"2","site":"B"}"#);
    assert_eq!(d3[1].3, None);
}
