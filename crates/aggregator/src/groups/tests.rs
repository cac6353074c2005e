//! The group step's failure paths, over the in-memory store.

use std::collections::BTreeMap;

use tidemark_schema::{
    EntityKey, GroupPartialItem, MetricName, Tag, TagEpoch, TagHistory, TagHistoryItem, TagKey,
    TagValue, Tags, Timestamp, fold_partials, keys,
};

use crate::memory::MemoryStore;
use crate::testing::{event, heartbeat_record, insert};
use crate::{Aggregator, AggregatorConfig};

fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

fn aggregator() -> Aggregator<MemoryStore> {
    let agg = Aggregator::with_store(MemoryStore::default(), AggregatorConfig::new("t"));
    for d in ["d1", "d2"] {
        let id = tidemark_schema::DeviceId::new(d).unwrap();
        let key = TagHistoryItem::key(&id);
        let tags = Tags::new(
            [(TagKey::new("site").unwrap(), TagValue::new("A").unwrap())]
                .into_iter()
                .collect::<BTreeMap<_, _>>(),
        )
        .unwrap();
        agg.store()
            .table
            .put_entity(&TagHistoryItem {
                pk: key.pk,
                sk: key.sk,
                epochs: TagHistory::from_epochs(vec![TagEpoch {
                    from: ts("2026-01-01T00:00:00Z"),
                    tags,
                }]),
                version: 1,
            })
            .unwrap();
    }
    agg
}

fn site_a_hour(agg: &Aggregator<MemoryStore>) -> Vec<GroupPartialItem> {
    let tag = Tag::parse("site:A").unwrap();
    let pk = keys::group_partial_pk(&tag, ts("2026-04-20T14:00:00Z"));
    agg.store()
        .table
        .scan()
        .into_iter()
        .filter_map(|i| tidemark_store::from_item::<GroupPartialItem>(i).ok())
        .filter(|p| p.pk == pk)
        .collect()
}

fn count_sum(agg: &Aggregator<MemoryStore>) -> Option<(u64, f64)> {
    let m = MetricName::new("t").unwrap();
    fold_partials(&site_a_hour(agg), &m).map(|f| (f.stats.count, f.stats.sum))
}

fn batch() -> Vec<aws_lambda_events::event::dynamodb::EventRecord> {
    (1..=4)
        .map(|i| {
            let d = if i % 2 == 0 { "d2" } else { "d1" };
            insert(i, d, ts(&format!("2026-04-20T14:0{i}:00Z")), "t", i as f64)
        })
        .collect()
}

#[tokio::test]
async fn only_the_records_before_the_first_reported_failure_are_in_the_batchs_partial() {
    // GIVEN the hour 15:00 cannot be written (an outage): the batch fails from its record 2,
    // the only one of that hour
    let agg = aggregator();
    *agg.store().failing.lock().unwrap() = Some("T15:".into());
    let mut records = batch();
    records[1] = insert(2, "d2", ts("2026-04-20T15:02:00Z"), "t", 2.0);
    let (resp, _) = agg.process_written(&event(records.clone())).await;
    assert_eq!(
        resp.batch_item_failures[0].item_identifier.as_deref(),
        Some(format!("{:021}", 2).as_str())
    );
    // THEN the partial holds record 1 only
    assert_eq!(count_sum(&agg), Some((1, 1.0)));
    // WHEN the retry starts at record 2 once the outage is over
    *agg.store().failing.lock().unwrap() = None;
    let (resp, _) = agg.process_written(&event(records[1..].to_vec())).await;
    assert!(resp.batch_item_failures.is_empty());
    // THEN every reading counts once, in two partials
    assert_eq!(count_sum(&agg), Some((3, 8.0)));
    assert_eq!(site_a_hour(&agg).len(), 2);
}

#[tokio::test]
async fn a_group_write_outage_retries_the_batch_from_its_first_record() {
    let agg = aggregator();
    *agg.store().failing.lock().unwrap() = Some(keys::GROUP_PARTIAL_PREFIX.into());
    let (resp, report) = agg.process_written(&event(batch())).await;
    assert_eq!(
        resp.batch_item_failures[0].item_identifier.as_deref(),
        Some(format!("{:021}", 1).as_str())
    );
    assert_eq!(report.set_aside, 0);
    *agg.store().failing.lock().unwrap() = None;
    let (resp, _) = agg.process_written(&event(batch())).await;
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(count_sum(&agg), Some((4, 10.0)));
}

#[tokio::test]
async fn a_group_write_refused_for_good_is_set_aside_at_the_third_failure() {
    let agg = aggregator();
    *agg.store().refusing.lock().unwrap() = Some(keys::GROUP_PARTIAL_PREFIX.into());
    for attempt in 1..=3 {
        let (resp, report) = agg.process_written(&event(batch())).await;
        if attempt < 3 {
            assert_eq!(resp.batch_item_failures.len(), 1, "attempt {attempt}");
        } else {
            assert!(
                resp.batch_item_failures.is_empty(),
                "set aside: the shard goes on"
            );
            assert_eq!(report.set_aside, 1);
        }
    }
    let repairs: Vec<_> = agg
        .store()
        .table
        .scan()
        .into_iter()
        .filter_map(|i| tidemark_store::from_item::<tidemark_schema::RepairItem>(i).ok())
        .collect();
    assert_eq!(repairs.len(), 1);
    assert_eq!(repairs[0].hours, [ts("2026-04-20T14:00:00Z")]);
    assert!(matches!(
        EntityKey::parse(&repairs[0].pk, &repairs[0].sk),
        Ok(EntityKey::Repair { .. })
    ));
}

#[tokio::test]
async fn the_rollups_role_marks_a_heartbeat_passed_only_behind_the_group_partials_before_it() {
    // GIVEN a batch of four readings and a heartbeat behind them, while the group partials
    // cannot be written
    let agg = aggregator();
    *agg.store().failing.lock().unwrap() = Some(keys::GROUP_PARTIAL_PREFIX.into());
    let mut records = batch();
    let sent = ts("2026-04-20T14:05:00Z");
    records.push(heartbeat_record(5, "shardId-000000000000", sent));
    agg.process_written(&event(records.clone())).await;
    // THEN the heartbeat is not marked: a group window judged up to it would miss them
    assert!(agg.store().passed.lock().unwrap().is_empty());
    // WHEN the retry writes them
    *agg.store().failing.lock().unwrap() = None;
    let (resp, _) = agg.process_written(&event(records)).await;
    assert!(resp.batch_item_failures.is_empty());
    // THEN the rollups role marks it as its own
    assert_eq!(count_sum(&agg), Some((4, 10.0)));
    assert_eq!(
        *agg.store().passed.lock().unwrap(),
        [(
            "shardId-000000000000".to_owned(),
            sent,
            crate::Role::Rollups
        )]
    );
}
