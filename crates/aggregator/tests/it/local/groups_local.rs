//! Group partials against DynamoDB Local: whatever the stream does — readings out of order,
//! a batch delivered twice, a retry that starts at the same record with fewer or more
//! records, a bisected batch — the partials of every group's hour fold
//! ([`tidemark_schema::fold_partials`]) to a recomputation from the members' readings as the
//! table finally holds them, each reading counted in the groups of its own time (a member
//! moving between groups mid-hour, a member removed from a group), corrections and deletes
//! included (docs/design.md §5 "Groups").

use std::collections::{BTreeMap, BTreeSet};

use crate::common::*;
use aws_lambda_events::event::dynamodb::EventRecord;
use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_aggregator::{Aggregator, AggregatorConfig, Role};
use tidemark_schema::{
    DeviceId, GroupPartialItem, MetricName, ReadingItem, Stats, Tag, TagEpoch, TagHistory,
    TagHistoryItem, TagKey, TagValue, Tags, Timestamp, fold_minutes, fold_partials, keys,
};
use tidemark_testkit::TestTable;

fn tags(pairs: &[(&str, &str)]) -> Tags {
    Tags::new(
        pairs
            .iter()
            .map(|(k, v)| (TagKey::new(k).unwrap(), TagValue::new(v).unwrap()))
            .collect(),
    )
    .unwrap()
}

/// Six devices over 10:00–12:00: d0, d1 at site A on line 1; d2 at site B; d3 moves from A
/// to B at 10:30; d4 leaves every group at 11:20; d5 has no tags. `GROUP_TAGS` is
/// `site,line`.
fn histories() -> BTreeMap<DeviceId, TagHistory> {
    let e = |from: &str, t: Tags| TagEpoch {
        from: ts(from),
        tags: t,
    };
    let a1 = tags(&[("site", "A"), ("line", "1"), ("serial", "x")]);
    BTreeMap::from([
        (
            dev("d0"),
            TagHistory::from_epochs(vec![e("2026-04-20T00:00:00Z", a1.clone())]),
        ),
        (
            dev("d1"),
            TagHistory::from_epochs(vec![e("2026-04-20T00:00:00Z", a1)]),
        ),
        (
            dev("d2"),
            TagHistory::from_epochs(vec![e("2026-04-20T00:00:00Z", tags(&[("site", "B")]))]),
        ),
        (
            dev("d3"),
            TagHistory::from_epochs(vec![
                e("2026-04-20T00:00:00Z", tags(&[("site", "A")])),
                e(
                    "2026-04-20T10:30:00Z",
                    tags(&[("site", "B"), ("line", "2")]),
                ),
            ]),
        ),
        (
            dev("d4"),
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

/// A small deterministic generator (no dependency on the order tests run in).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The writes of one case, in stream order, and the readings the table finally holds.
struct Case {
    records: Vec<EventRecord>,
    /// Final readings by (device, time).
    last: BTreeMap<(DeviceId, Timestamp), ReadingItem>,
}

/// Readings of six devices, arriving out of time order, some corrected (a metric changed,
/// one added) or deleted later; values in quarters so sums are exact in any order.
fn case(seed: u64, s: &mut StreamSim) -> Case {
    let mut rng = Rng(seed);
    let mut records = Vec::new();
    let mut last: BTreeMap<(DeviceId, Timestamp), ReadingItem> = BTreeMap::new();
    let base = ts("2026-04-20T10:00:00Z");
    for _ in 0..70 {
        let d = dev(&format!("d{}", rng.below(6)));
        // On whole minutes, so a device often writes one instant again: corrections and deletes.
        let at = base.plus_millis(rng.below(120) as i64 * 60_000).unwrap();
        let q = |r: &mut Rng| (r.below(400) as f64 - 100.0) / 4.0;
        let key = (d.clone(), at);
        let new = reading_at(&d, at, metrics(&[("t", q(&mut rng))]), None);
        match last.get(&key).cloned() {
            None => {
                records.push(s.insert(&new));
                last.insert(key, new);
            }
            Some(old) if rng.below(3) == 0 => {
                records.push(s.user_remove(&old));
                last.remove(&key);
            }
            Some(old) => {
                let mut new = new;
                if rng.below(2) == 0 {
                    new.metrics
                        .insert(MetricName::new("h").unwrap(), q(&mut rng));
                }
                records.push(s.modify(&old, &new));
                last.insert(key, new);
            }
        }
    }
    Case { records, last }
}

/// Readings by (device, time).
fn table_of(rs: &[ReadingItem]) -> BTreeMap<(DeviceId, Timestamp), ReadingItem> {
    rs.iter()
        .map(
            |r| match tidemark_schema::EntityKey::parse(&r.pk, &r.sk).unwrap() {
                tidemark_schema::EntityKey::Reading { device, at, .. } => ((device, at), r.clone()),
                other => panic!("{other:?}"),
            },
        )
        .collect()
}

/// What the table's readings make of each (group, hour, metric), each reading in the groups
/// of its own time.
fn recompute(
    last: &BTreeMap<(DeviceId, Timestamp), ReadingItem>,
    h: &BTreeMap<DeviceId, TagHistory>,
) -> BTreeMap<(Tag, Timestamp, MetricName), Stats> {
    let keys = group_keys();
    let mut out: BTreeMap<(Tag, Timestamp, MetricName), Stats> = BTreeMap::new();
    for ((d, at), r) in last {
        let Some(history) = h.get(d) else { continue };
        for tag in history.at(*at).groups(&keys) {
            for (m, v) in &r.metrics {
                out.entry((tag.clone(), at.hour_start(), m.clone()))
                    .or_insert(Stats::EMPTY)
                    .merge(&Stats::at_sketched(*at, *v));
            }
        }
    }
    out
}

/// The members' final readings per (group, minute start, metric): count and sum, each reading
/// in the groups of its own time.
fn recompute_minutes(
    last: &BTreeMap<(DeviceId, Timestamp), ReadingItem>,
    h: &BTreeMap<DeviceId, TagHistory>,
) -> BTreeMap<(Tag, Timestamp, MetricName), (u64, f64)> {
    let keys = group_keys();
    let mut out: BTreeMap<(Tag, Timestamp, MetricName), (u64, f64)> = BTreeMap::new();
    for ((d, at), r) in last {
        let Some(history) = h.get(d) else { continue };
        for tag in history.at(*at).groups(&keys) {
            for (m, v) in &r.metrics {
                let e = out
                    .entry((tag.clone(), at.minute_start(), m.clone()))
                    .or_insert((0, 0.0));
                e.0 += 1;
                e.1 += v;
            }
        }
    }
    out
}

/// Asserts that the partials' minutes fold to `expected` for every minute of every hour they
/// hold, and for fifteen-minute windows across each hour's end (what a group window rule
/// folds from two hours' partials).
async fn assert_minutes_fold_to(
    t: &TestTable,
    expected: &BTreeMap<(Tag, Timestamp, MetricName), (u64, f64)>,
    context: &str,
) {
    let parts = partials(t).await;
    let tags: BTreeSet<Tag> = parts.keys().map(|(tag, _)| tag.clone()).collect();
    let m = MetricName::new("t").unwrap();
    let base = ts("2026-04-20T10:00:00Z");
    for tag in &tags {
        let of = |hour: Timestamp| {
            parts
                .get(&(tag.clone(), hour))
                .into_iter()
                .flatten()
                .map(move |p| (hour, p))
        };
        let all = || {
            [0, 1, 2]
                .into_iter()
                .flat_map(|h| of(base.plus_millis(h * 3_600_000).unwrap()))
        };
        let want = |from: Timestamp, to: Timestamp| {
            let (n, sum) = expected
                .range((tag.clone(), from, m.clone())..(tag.clone(), to, m.clone()))
                .filter(|((_, _, mm), _)| *mm == m)
                .fold((0u64, 0.0), |a, (_, (n, s))| (a.0 + n, a.1 + s));
            (n > 0).then_some((n, sum))
        };
        let got = |from: Timestamp, to: Timestamp| {
            fold_minutes(all(), &m, from, to).map(|w| (w.count, w.sum))
        };
        for minute in 0..120 {
            let from = base.plus_millis(minute * 60_000).unwrap();
            let to = from.plus_millis(60_000).unwrap();
            assert_eq!(
                got(from, to),
                want(from, to),
                "{context}: {tag} minute {minute}"
            );
        }
        for end in ["2026-04-20T11:07:00Z", "2026-04-20T12:00:00Z"] {
            let to = ts(end);
            let from = to.plus_millis(-900_000).unwrap();
            assert_eq!(
                got(from, to),
                want(from, to),
                "{context}: {tag} window to {end}"
            );
        }
    }
}

/// Every partial in the table, by (group, hour).
async fn partials(t: &TestTable) -> BTreeMap<(Tag, Timestamp), Vec<GroupPartialItem>> {
    let mut out: BTreeMap<(Tag, Timestamp), Vec<GroupPartialItem>> = BTreeMap::new();
    for item in t.scan().await {
        let Some(AttributeValue::S(pk)) = item.get("pk") else {
            continue;
        };
        if !pk.starts_with(keys::GROUP_PARTIAL_PREFIX) {
            continue;
        }
        let p: GroupPartialItem = tidemark_store::from_item(item.clone()).unwrap();
        match tidemark_schema::EntityKey::parse(&p.pk, &p.sk).unwrap() {
            tidemark_schema::EntityKey::GroupPartial { tag, hour, .. } => {
                out.entry((tag, hour)).or_default().push(p)
            }
            other => panic!("{other:?}"),
        }
    }
    out
}

/// Asserts that the partials fold to `expected`: count and sum exactly, the spread within
/// rounding; min and max exactly where nothing was removed (`settled`).
async fn assert_partials_fold_to(
    t: &TestTable,
    expected: &BTreeMap<(Tag, Timestamp, MetricName), Stats>,
    context: &str,
) {
    let parts = partials(t).await;
    let mut seen = BTreeSet::new();
    for ((tag, hour), ps) in &parts {
        let metrics: BTreeSet<MetricName> = ps
            .iter()
            .flat_map(|p| p.added.keys().chain(p.removed.keys()).cloned())
            .collect();
        for m in metrics {
            let key = (tag.clone(), *hour, m.clone());
            let got = fold_partials(ps, &m);
            match (got, expected.get(&key)) {
                (None, None) => {}
                (Some(g), Some(e)) => {
                    assert_eq!(
                        (g.stats.count, g.stats.sum),
                        (e.count, e.sum),
                        "{context}: {key:?}"
                    );
                    let (gm, em) = (g.stats.m2.unwrap_or(0.0), e.m2.unwrap_or(0.0));
                    assert!(
                        (gm - em).abs() <= 1e-6 * em.abs().max(1.0),
                        "{context}: {key:?} m2 {gm} {em}"
                    );
                    if g.settled {
                        assert_eq!(
                            (g.stats.min, g.stats.max),
                            (e.min, e.max),
                            "{context}: {key:?}"
                        );
                    }
                    seen.insert(key);
                }
                (g, e) => panic!("{context}: {key:?}: partials {g:?}, readings {e:?}"),
            }
        }
    }
    let missing: Vec<_> = expected.keys().filter(|k| !seen.contains(*k)).collect();
    assert!(missing.is_empty(), "{context}: no partials for {missing:?}");
}

async fn setup(label: &str) -> (TestTable, Aggregator) {
    let t = TestTable::new(label).await;
    for (d, h) in histories() {
        let key = TagHistoryItem::key(&d);
        t.put(&TagHistoryItem {
            pk: key.pk,
            sk: key.sk,
            epochs: h,
            version: 1,
        })
        .await;
    }
    let mut config = AggregatorConfig::new(&t.name).with_role(Role::Rollups);
    config.group_tags = group_keys();
    let agg = Aggregator::new(t.client.clone(), config);
    (t, agg)
}

async fn run(agg: &Aggregator, records: &[EventRecord]) {
    let (resp, _) = agg.process(&event(records.to_vec())).await;
    assert!(resp.batch_item_failures.is_empty(), "{resp:?}");
}

#[tokio::test]
async fn group_partials_equal_a_recomputation_whatever_the_stream_delivers() {
    for seed in [7u64, 1_234_567, 987_654_321] {
        let (t, agg) = setup("groups-partials").await;
        let mut s = StreamSim::new(1);
        let c = case(seed, &mut s);
        put_readings(&t, &c.last.values().cloned().collect::<Vec<_>>()).await;
        let mut rng = Rng(seed ^ 0x9e37_79b9);
        // The mapping's deliveries: from the position past the last success, a batch of any
        // length; a function error retries from the same record with as many, fewer
        // (bisected) or more records; a success may be delivered again.
        let n = c.records.len();
        let mut p = 0;
        while p < n {
            let len = 1 + rng.below((n - p).min(20) as u64) as usize;
            let batch = &c.records[p..p + len];
            run(&agg, batch).await;
            match rng.below(4) {
                // crashed after its writes: retried from the same record, bisected
                0 if len > 1 => {
                    run(&agg, &batch[..len / 2]).await;
                    run(&agg, &c.records[p + len / 2..p + len]).await;
                }
                // crashed: retried from the same record with more records (a later window)
                1 if p + len < n => {
                    let more = (len + 1 + rng.below(5) as usize).min(n - p);
                    run(&agg, &c.records[p..p + more]).await;
                    p += more;
                    continue;
                }
                // delivered twice
                2 => run(&agg, batch).await,
                _ => {}
            }
            p += len;
        }
        let expected = recompute(&c.last, &histories());
        assert!(
            expected.len() >= 8,
            "a case with few groups proves little: {expected:?}"
        );
        assert_partials_fold_to(&t, &expected, &format!("seed {seed}")).await;
        let minutes = recompute_minutes(&c.last, &histories());
        assert_minutes_fold_to(&t, &minutes, &format!("seed {seed}")).await;
        // A device's own tag that is not a group key (`serial`) made no group.
        assert!(
            partials(&t)
                .await
                .keys()
                .all(|(tag, _)| tag.key.as_str() != "serial")
        );
    }
}

#[tokio::test]
async fn a_retry_that_touches_fewer_groups_deletes_the_partials_it_no_longer_writes() {
    let (t, agg) = setup("groups-retry").await;
    let mut s = StreamSim::new(1);
    // GIVEN a batch touching site A's 10:00 and site B's 11:00
    let a = reading("d0", "2026-04-20T10:05:00Z", &[("t", 1.0)]);
    let b = reading("d2", "2026-04-20T11:05:00Z", &[("t", 2.0)]);
    put_readings(&t, &[a.clone(), b.clone()]).await;
    let records = vec![s.insert(&a), s.insert(&b)];
    run(&agg, &records).await;
    assert_eq!(partials(&t).await.len(), 3, "site:A, line:1 and site:B");
    // WHEN the batch is bisected: its first half again, then its second
    run(&agg, &records[..1]).await;
    let after_half = partials(&t).await;
    assert_eq!(
        after_half
            .keys()
            .map(|(g, _)| g.to_string())
            .collect::<Vec<_>>(),
        ["line:1", "site:A"],
        "the first half no longer writes site B's partial"
    );
    run(&agg, &records[1..]).await;
    // THEN each reading counts once
    assert_partials_fold_to(&t, &recompute(&table_of(&[a, b]), &histories()), "bisected").await;
    // AND the manifests list exactly what is stored
    let manifests = t
        .scan()
        .await
        .into_iter()
        .filter(|i| matches!(i.get("pk"), Some(AttributeValue::S(pk)) if pk.starts_with(keys::GROUP_BATCH_PREFIX)))
        .count();
    assert_eq!(manifests, 2);
}

#[tokio::test]
async fn a_batch_of_untagged_devices_writes_nothing_for_groups() {
    let (t, agg) = setup("groups-none").await;
    let mut s = StreamSim::new(1);
    let r = reading("d5", "2026-04-20T10:05:00Z", &[("t", 1.0)]);
    put_readings(&t, std::slice::from_ref(&r)).await;
    run(&agg, &[s.insert(&r)]).await;
    let group_items = t
        .scan()
        .await
        .into_iter()
        .filter(|i| {
            matches!(i.get("pk"), Some(AttributeValue::S(pk))
                if pk.starts_with(keys::GROUP_BATCH_PREFIX) || pk.starts_with(keys::GROUP_PARTIAL_PREFIX))
        })
        .count();
    assert_eq!(group_items, 0);
}
