//! Group rules against DynamoDB Local: the tag index's member counts (written as
//! `PUT /devices/{id}` writes them), the offline counts the watchdog and the alerts role move
//! in their transactions, the watchdog's judgement of `offlineFraction` and of a window over
//! the members' readings (from the partials the rollups role writes), and the group alerts'
//! events as the notifier publishes them from the table's real stream.

use std::time::Duration;

use crate::common::*;
use serde_json::{Value, json};
use tidemark_aggregator::config::Role;
use tidemark_aggregator::notify::{DynamoMarkers, alert_changes};
use tidemark_aggregator::{Aggregator, AggregatorConfig, Notifier};
use tidemark_schema::keys::{self, ShardName};
use tidemark_schema::{
    Clock, DeviceItem, DeviceStatus, EntityKey, GroupAlertItem, GroupRuleSpec, HeartbeatItem, Tag,
    TagEpoch, TagHistory, TagHistoryItem, TagIndexItem, TagKey, TagValue, Tags, Timestamp,
};
use tidemark_testkit::TestTable;
use tidemark_watchdog::{DynamoWatch, Report, Watchdog, WatchdogConfig};

fn site(v: &str) -> Tag {
    Tag::new(TagKey::new("site").unwrap(), TagValue::new(v).unwrap())
}

fn tags_of(tag: &Tag) -> Tags {
    Tags::new([(tag.key.clone(), tag.value.clone())].into()).unwrap()
}

async fn watchdog_run(t: &TestTable, at: &str, rule: &GroupRuleSpec) -> Report {
    let w = Watchdog::new(
        DynamoWatch::new(t.client.clone(), t.name.clone()),
        CaughtUp(t.client.clone(), t.name.clone()),
        WatchdogConfig {
            heartbeat_wait: Duration::from_secs(2),
            heartbeat_poll: Duration::from_millis(50),
            group_rules: vec![rule.clone()],
            clock: Clock::fixed(ts(at)),
            ..WatchdogConfig::new(t.name.clone(), "readings")
        },
    );
    w.run(tokio::time::Instant::now() + Duration::from_secs(30))
        .await
        .unwrap()
}

/// The group alerts' events the notifier publishes from the table's real stream, once it
/// holds at least `changes` group alert changes.
async fn group_events_published(t: &TestTable, changes: usize) -> Vec<Value> {
    let n = Notifier::with_parts(
        Bus::default(),
        DynamoMarkers::new(t.client.clone(), t.name.clone()),
        "bus",
    );
    let records = stream_records(t, "the group alerts' changes", |r| {
        alert_changes(r)
            .iter()
            .filter(|c| c.detail.group.is_some())
            .count()
            >= changes
    })
    .await;
    let (failure, _) = n.process(&event(records)).await;
    assert_eq!(failure, None);
    n.publisher()
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|e| serde_json::from_str(&e.detail).unwrap())
        .filter(|d: &Value| d["kind"] == "group")
        .collect()
}

async fn index(t: &TestTable, puts: &[TagIndexItem], deletes: &[keys::Key]) {
    tidemark_store::write::tag_change::write_index(&t.client, &t.name, puts, deletes)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_sites_offline_fraction_opens_one_group_alert_whose_events_carry_the_group() {
    let t = TestTable::new("group-rules").await;
    let a = site("A");
    let rule = GroupRuleSpec::from_value(
        &json!({"group":"site:A","offlineFraction":{"above":0.25},"severity":"critical"}),
    )
    .unwrap();
    // GIVEN site A's four devices, watched with a 300 s window: a1 and a2 silent since
    // 14:00, a3 and a4 heard from at 14:09; and a fifth that joins and leaves again
    let mut entries = Vec::new();
    for (name, arrived) in [
        ("a1", "2026-04-20T14:00:00Z"),
        ("a2", "2026-04-20T14:00:00Z"),
        ("a3", "2026-04-20T14:09:00Z"),
        ("a4", "2026-04-20T14:09:00Z"),
    ] {
        let mut d = DeviceItem::new(dev(name), DeviceStatus::Active, ts(arrived));
        d.tags = tags_of(&a);
        d.offline_after_seconds = Some(300);
        d.last_arrival_at = Some(ts(arrived));
        d.last_seen_at = Some(ts(arrived));
        d.version = Some(3);
        d.gsi2pk = Some(keys::watch_gsi2pk(&d.device_id));
        d.gsi2sk = Some(keys::watch_gsi2sk(
            ts(arrived).plus_millis(300_000).unwrap(),
        ));
        put_items(&t, &[d]).await;
        entries.push(TagIndexItem::new(
            &a,
            &dev(name),
            DeviceStatus::Active,
            tags_of(&a),
        ));
    }
    let fifth = TagIndexItem::new(&a, &dev("a5"), DeviceStatus::Active, tags_of(&a));
    // AND their index entries written as PUT /devices/{id} writes them, twice (a retried
    // request), the fifth's put and deleted
    index(&t, &entries, &[]).await;
    index(&t, &entries, &[]).await;
    index(&t, std::slice::from_ref(&fifth), &[]).await;
    assert_eq!(t.group_counts(&a).await, (5, 0));
    let gone = keys::Key {
        pk: fifth.pk.clone(),
        sk: fifth.sk.clone(),
    };
    index(&t, &[], std::slice::from_ref(&gone)).await;
    index(&t, &[], std::slice::from_ref(&gone)).await;
    assert_eq!(
        t.group_counts(&a).await,
        (4, 0),
        "a repeated delete counts once"
    );

    // WHEN the watchdog runs at 14:10 with "more than a quarter of site A offline"
    let first = watchdog_run(&t, "2026-04-20T14:10:00Z", &rule).await;

    // THEN a1 and a2 are offline and counted, and site A has one open group alert
    assert_eq!((first.opened, first.group_opened), (2, 1), "{first:?}");
    assert_eq!(t.group_counts(&a).await, (4, 2));
    // AND a second run at once opens nothing more
    let again = watchdog_run(&t, "2026-04-20T14:10:30Z", &rule).await;
    assert_eq!((again.opened, again.group_opened), (0, 0), "{again:?}");

    // WHEN a1 is heard from again at 14:11 and the alerts role takes its reading
    let alerts = Aggregator::new(
        t.client.clone(),
        AggregatorConfig::new(&t.name).with_role(Role::Alerts),
    );
    let mut s = StreamSim::new(1);
    let mut back = reading("a1", "2026-04-20T14:11:00Z", &[("temperature", 20.0)]);
    back.arrived_at = Some(ts("2026-04-20T14:11:00Z"));
    put_readings(&t, std::slice::from_ref(&back)).await;
    let (resp, _) = alerts.process(&event(vec![s.insert(&back)])).await;
    assert!(resp.batch_item_failures.is_empty(), "{resp:?}");

    // THEN it leaves site A's offline count, and the next run resolves the group alert
    // (a quarter is not above a quarter)
    assert_eq!(t.group_counts(&a).await, (4, 1));
    assert!(device_item(&t, "a1").await.unwrap().offline.is_none());
    let later = watchdog_run(&t, "2026-04-20T14:12:00Z", &rule).await;
    assert_eq!(later.group_resolved, 1, "{later:?}");

    // AND the notifier, fed the table's stream, publishes the group alert's opening and
    // resolution with its group and rule, and no device
    let sent = group_events_published(&t, 2).await;
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(
        (&sent[0]["change"], &sent[1]["change"]),
        (&json!("opened"), &json!("resolved"))
    );
    for d in &sent {
        assert_eq!(d["group"], "site:A");
        assert_eq!(d["tags"], json!({"site": "A"}));
        assert_eq!(d["severity"], "critical");
        assert_eq!(d["ruleSpec"]["offlineFraction"], json!({"above": 0.25}));
        assert!(d.get("deviceId").is_none(), "{d}");
        assert_eq!(
            d["path"],
            format!("/groups/site:A/alerts/{}", d["alertId"].as_str().unwrap())
        );
    }
    assert_eq!(sent[0]["value"], json!(0.5));
}

/// The pipeline as far as the rollups role: each heartbeat is stored as ingest stores it (and
/// passed by the alerts role), then every record of the table's stream so far goes through
/// the rollups role (a replay of what it had, plus what is new), the heartbeat's write last.
struct RollupsFeed<'a> {
    t: &'a TestTable,
    rollups: Aggregator,
}

fn heartbeat_sent_at(r: &aws_lambda_events::event::dynamodb::EventRecord) -> Option<Timestamp> {
    serde_dynamo::from_item::<_, HeartbeatItem>(r.change.new_image.clone())
        .ok()
        .filter(|h| h.pk == keys::PIPELINE_PK)
        .map(|h| h.sent_at)
}

impl tidemark_watchdog::Heartbeats for RollupsFeed<'_> {
    async fn send(
        &self,
        at: Timestamp,
    ) -> Result<Vec<ShardName>, tidemark_watchdog::WatchdogError> {
        let shard = ShardName::new("shardId-000000000000").unwrap();
        let key = EntityKey::Heartbeat(shard.clone()).key();
        put_items(
            self.t,
            &[HeartbeatItem {
                pk: key.pk,
                sk: key.sk,
                sent_at: at,
                stored_at: Some(at),
                passed_at: Some(at),
                rollups_passed_at: None,
            }],
        )
        .await;
        let records = stream_records(self.t, "the heartbeat's write", |rs| {
            rs.iter().any(|r| heartbeat_sent_at(r) == Some(at))
        })
        .await;
        let (resp, _) = self.rollups.process(&event(records)).await;
        assert!(resp.batch_item_failures.is_empty(), "{resp:?}");
        Ok(vec![shard])
    }
}

#[tokio::test]
async fn a_sites_fifteen_minute_mean_opens_one_group_alert_up_to_where_the_rollups_role_has_come() {
    let t = TestTable::new("group-window").await;
    let a = site("A");
    let rule = GroupRuleSpec::from_value(&json!(
        {"group":"site:A","metric":"temperature","aggregate":"avg","window":"15m","above":28}
    ))
    .unwrap();
    // GIVEN three devices of site A (their tag histories, as PUT /devices/{id} writes them)
    for d in ["a1", "a2", "a3"] {
        let key = TagHistoryItem::key(&dev(d));
        put_items(
            &t,
            &[TagHistoryItem {
                pk: key.pk,
                sk: key.sk,
                epochs: TagHistory::from_epochs(vec![TagEpoch {
                    from: ts("2026-04-20T00:00:00Z"),
                    tags: tags_of(&a),
                }]),
                version: 1,
            }],
        )
        .await;
    }
    let run = |at: &str| {
        let w = Watchdog::new(
            DynamoWatch::new(t.client.clone(), t.name.clone()),
            RollupsFeed {
                t: &t,
                rollups: Aggregator::new(
                    t.client.clone(),
                    AggregatorConfig::new(&t.name).with_role(Role::Rollups),
                ),
            },
            WatchdogConfig {
                heartbeat_wait: Duration::from_secs(2),
                heartbeat_poll: Duration::from_millis(50),
                group_rules: vec![rule.clone()],
                clock: Clock::fixed(ts(at)),
                ..WatchdogConfig::new(t.name.clone(), "readings")
            },
        );
        async move {
            w.run(tokio::time::Instant::now() + Duration::from_secs(30))
                .await
                .unwrap()
        }
    };
    let minute_readings = |from: i64, value: &dyn Fn(&str, i64) -> f64| {
        let mut out = Vec::new();
        for m in from..from + 15 {
            for d in ["a1", "a2", "a3"] {
                let at = ts("2026-04-20T14:00:00Z")
                    .plus_millis(m * 60_000 + 20_000)
                    .unwrap();
                out.push(reading_at(
                    &dev(d),
                    at,
                    metrics(&[("temperature", value(d, m))]),
                    None,
                ));
            }
        }
        out
    };
    // AND 14:00–14:15 at 27, with a spike to 40 at 14:05: the mean is 27.3
    let calm = minute_readings(0, &|d, m| if (d, m) == ("a1", 5) { 40.0 } else { 27.0 });
    put_readings(&t, &calm).await;

    // WHEN the watchdog runs at 14:15:30, the rollups role having come as far
    let first = run("2026-04-20T14:15:30Z").await;
    // THEN the window [14:00, 14:15) is judged and opens nothing
    assert_eq!(first.rollups_watermark, Some(ts("2026-04-20T14:15:30Z")));
    assert_eq!(first.group_opened, 0, "{first:?}");

    // WHEN 14:15–14:30 are all at 29 and the watchdog runs at 14:30:10, then again
    put_readings(&t, &minute_readings(15, &|_, _| 29.0)).await;
    let second = run("2026-04-20T14:30:10Z").await;
    let third = run("2026-04-20T14:30:40Z").await;
    // THEN the window [14:15, 14:30) opens one group alert, at the window's end, valued 29
    // over its 45 readings; the same window again changes nothing
    assert_eq!((second.group_opened, third.group_opened), (1, 0));
    let alerts: Vec<GroupAlertItem> = t
        .scan()
        .await
        .into_iter()
        .filter_map(|i| tidemark_store::from_item::<GroupAlertItem>(i).ok())
        .collect();
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(alerts[0].opened_at, ts("2026-04-20T14:30:00Z"));
    assert_eq!((alerts[0].value, alerts[0].readings), (29.0, Some(45)));
    assert_eq!(
        alerts[0].message,
        "site:A temperature avg over 15m above 28"
    );

    // AND its opened event carries the group and the rule
    let sent = group_events_published(&t, 1).await;
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["group"], "site:A");
    assert_eq!(sent[0]["value"], json!(29.0));
    assert_eq!(
        sent[0]["ruleSpec"],
        json!({"group":"site:A","metric":"temperature","aggregate":"avg","window":"15m","above":28.0,"severity":"warning"})
    );
}
