//! Device tags against DynamoDB Local: a tag history replaced under a version check and read
//! back one or many at a time (past one BatchGetItem's 100 keys), a container's TagBook
//! reading only what it lacks, and a tag's index written and listed page by page; every
//! change of a history counted (what the export's devices table follows).

use std::time::Duration;

use futures::StreamExt;

use tidemark_schema::{
    DeviceId, DeviceStatus, Tag, TagHistory, TagIndexItem, TagKey, TagValue, Tags, Timestamp, keys,
};
use tidemark_store::read::Queries;
use tidemark_store::tags::{TagBook, index_page, read_histories, read_history};
use tidemark_store::write::tag_change::{replace_history, write_index};
use tidemark_testkit::TestTable;

fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

fn dev(i: usize) -> DeviceId {
    DeviceId::new(&format!("dev_{i:03}")).unwrap()
}

fn tags(pairs: &[(&str, &str)]) -> Tags {
    Tags::new(
        pairs
            .iter()
            .map(|(k, v)| (TagKey::new(k).unwrap(), TagValue::new(v).unwrap()))
            .collect(),
    )
    .unwrap()
}

fn at_site(site: &str, from: Timestamp) -> TagHistory {
    let mut h = TagHistory::default();
    h.change(from, tags(&[("site", site)]), from).unwrap();
    h
}

#[tokio::test]
async fn a_tag_history_is_replaced_only_from_the_version_it_was_read_at() {
    let t = TestTable::new("tags-history").await;
    let d = dev(1);
    assert_eq!(
        read_history(&t.client, &t.name, &d, true).await.unwrap(),
        (TagHistory::default(), 0),
        "nothing stored: no tags"
    );
    let t0 = ts("2026-04-20T10:00:00Z");
    let a = at_site("A", t0);
    assert!(
        replace_history(&t.client, &t.name, &d, &a, 0)
            .await
            .unwrap()
    );
    // A second writer that read no item loses: its change must be decided anew.
    assert!(
        !replace_history(&t.client, &t.name, &d, &at_site("B", t0), 0)
            .await
            .unwrap()
    );
    let (got, version) = read_history(&t.client, &t.name, &d, true).await.unwrap();
    assert_eq!((got.clone(), version), (a, 1));
    let mut moved = got;
    let ten = ts("2026-04-20T11:00:00Z");
    moved.change(ten, tags(&[("site", "B")]), ten).unwrap();
    assert!(
        replace_history(&t.client, &t.name, &d, &moved, 1)
            .await
            .unwrap()
    );
    let (got, version) = read_history(&t.client, &t.name, &d, true).await.unwrap();
    assert_eq!(version, 2);
    assert!(
        got.at(ts("2026-04-20T10:59:59Z"))
            .has(&Tag::parse("site:A").unwrap())
    );
    assert!(got.at(ten).has(&Tag::parse("site:B").unwrap()));
}

#[tokio::test]
async fn each_tag_history_change_is_counted_and_a_lost_race_is_not() {
    // GIVEN a table where 20 devices get their tags, and one of them moves
    let t = TestTable::new("tags-changes").await;
    let q = Queries::new(t.client.clone(), t.name.clone());
    assert_eq!(tidemark_store::tags::tag_changes(&q).await.unwrap(), 0);
    let t0 = ts("2026-04-20T10:00:00Z");
    for i in 0..20 {
        assert!(
            replace_history(&t.client, &t.name, &dev(i), &at_site("A", t0), 0)
                .await
                .unwrap()
        );
    }
    let mut moved = at_site("A", t0);
    let ten = ts("2026-04-20T11:00:00Z");
    moved.change(ten, tags(&[("site", "B")]), ten).unwrap();
    assert!(
        replace_history(&t.client, &t.name, &dev(3), &moved, 1)
            .await
            .unwrap()
    );
    // AND a writer that read an old version loses
    assert!(
        !replace_history(&t.client, &t.name, &dev(3), &moved, 1)
            .await
            .unwrap()
    );
    // THEN the table counts 21 changes, over more than one count item
    assert_eq!(tidemark_store::tags::tag_changes(&q).await.unwrap(), 21);
    let counts = t
        .client
        .query()
        .table_name(&t.name)
        .key_condition_expression("pk = :pk AND begins_with(sk, :p)")
        .expression_attribute_values(
            ":pk",
            aws_sdk_dynamodb::types::AttributeValue::S(keys::CONFIG_PK.into()),
        )
        .expression_attribute_values(
            ":p",
            aws_sdk_dynamodb::types::AttributeValue::S(keys::TAG_CHANGES_PREFIX.into()),
        )
        .send()
        .await
        .unwrap();
    assert!(counts.count() > 1, "{counts:?}");
}

#[tokio::test]
async fn many_histories_are_read_at_once_and_a_book_reads_only_what_it_lacks() {
    let t = TestTable::new("tags-many").await;
    let t0 = ts("2026-04-20T10:00:00Z");
    // 150 devices, the odd ones tagged: more than one BatchGetItem's 100 keys.
    let devices: Vec<DeviceId> = (0..150).map(dev).collect();
    let writes = devices
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(i, d)| {
            let site = if i % 3 == 0 { "A" } else { "B" };
            let h = at_site(site, t0);
            let t = &t;
            async move { replace_history(&t.client, &t.name, d, &h, 0).await }
        });
    let written: Vec<_> = futures::stream::iter(writes)
        .buffer_unordered(16)
        .collect()
        .await;
    assert!(written.into_iter().all(|w| w.unwrap()));
    let (found, unreadable) = read_histories(&t.client, &t.name, &devices, false)
        .await
        .unwrap();
    assert_eq!((found.len(), unreadable), (75, 0));
    assert!(found[&dev(3)].0.at(t0).has(&Tag::parse("site:A").unwrap()));
    assert_eq!(found[&dev(3)].1, 1);

    let mut book = TagBook::new(Duration::from_secs(30));
    let at = |when: Timestamp| -> Vec<(DeviceId, Timestamp)> {
        devices.iter().map(|d| (d.clone(), when)).collect()
    };
    assert_eq!(
        book.refresh(&t.client, &t.name, &at(t0), t0).await.unwrap(),
        0
    );
    assert!(book.at(&dev(5), t0).has(&Tag::parse("site:B").unwrap()));
    assert!(book.at(&dev(4), t0).is_empty(), "untagged");
    assert!(book.stale(devices.iter().map(|d| (d, t0))).is_empty());
    // A change made now is seen by the first batch with a reading past the book's lead.
    let (mut h, v) = read_history(&t.client, &t.name, &dev(4), true)
        .await
        .unwrap();
    h.change(t0, tags(&[("site", "C")]), t0).unwrap();
    assert!(
        replace_history(&t.client, &t.name, &dev(4), &h, v)
            .await
            .unwrap()
    );
    let later = ts("2026-04-20T10:00:30Z");
    book.refresh(&t.client, &t.name, &at(later), later)
        .await
        .unwrap();
    assert!(book.at(&dev(4), t0).has(&Tag::parse("site:C").unwrap()));
}

#[tokio::test]
async fn a_tags_index_is_written_and_listed_over_its_partitions() {
    let t = TestTable::new("tags-index").await;
    let site_a = Tag::parse("site:A").unwrap();
    let entries: Vec<TagIndexItem> = (0..60)
        .map(|i| {
            let status = if i % 4 == 0 {
                DeviceStatus::Inactive
            } else {
                DeviceStatus::Active
            };
            TagIndexItem::new(&site_a, &dev(i), status, tags(&[("site", "A")]))
        })
        .collect();
    write_index(&t.client, &t.name, &entries, &[])
        .await
        .unwrap();
    // Two devices leave the tag.
    let gone: Vec<_> = [dev(0), dev(1)]
        .iter()
        .map(|d| {
            tidemark_schema::EntityKey::TagIndex {
                tag: site_a.clone(),
                partition: keys::tag_index_partition(d),
                device: d.clone(),
            }
            .key()
        })
        .collect();
    write_index(&t.client, &t.name, &[], &gone).await.unwrap();
    let q = Queries::new(t.client.clone(), t.name.clone());
    let mut got = Vec::new();
    let mut pos = None;
    let mut pages = 0;
    loop {
        let page = index_page(&q, &site_a, pos, 7, 1_000, |_| true)
            .await
            .unwrap();
        got.extend(page.items.into_iter().map(|e| e.device_id));
        pages += 1;
        match page.next {
            Some(p) => pos = Some(p),
            None => break,
        }
    }
    let mut want: Vec<(u16, DeviceId)> = (2..60)
        .map(dev)
        .map(|d| (keys::tag_index_partition(&d), d))
        .collect();
    want.sort();
    assert_eq!(got, want.into_iter().map(|w| w.1).collect::<Vec<_>>());
    assert!(pages >= 58 / 7);
    let inactive = index_page(&q, &site_a, None, 100, 1_000, |e| {
        e.status == DeviceStatus::Inactive
    })
    .await
    .unwrap();
    assert_eq!(inactive.items.len(), 14, "4, 8, …, 56");
    assert!(inactive.next.is_none());
}

#[tokio::test]
async fn registrations_into_one_index_partition_at_once_are_each_counted_once() {
    let t = TestTable::new("tags-count-burst").await;
    let site = Tag::parse("site:A").unwrap();
    // GIVEN forty devices whose entries share one partition of site A's index, and so its
    // count item
    let same: Vec<DeviceId> = (0..2_000)
        .map(dev_n)
        .filter(|d| keys::tag_index_partition(d) == 3)
        .take(40)
        .collect();
    assert_eq!(same.len(), 40);
    // WHEN they are all registered at once, each twice (a retried request)
    let results: Vec<_> = futures::stream::iter(same.iter().chain(same.iter()))
        .map(|d| {
            let (t, site) = (&t, &site);
            async move {
                let e = TagIndexItem::new(site, d, DeviceStatus::Active, tags(&[("site", "A")]));
                write_index(&t.client, &t.name, &[e], &[]).await
            }
        })
        .buffer_unordered(40)
        .collect()
        .await;
    // THEN every write went through, and the partition counts forty members
    for r in results {
        r.unwrap();
    }
    assert_eq!(t.group_counts(&site).await, (40, 0));
}

fn dev_n(i: usize) -> DeviceId {
    DeviceId::new(&format!("burst_{i:04}")).unwrap()
}
