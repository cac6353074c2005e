//! `count-members` against DynamoDB Local: a group whose devices were tagged before the
//! counts existed gets its members counted, and the counts `PUT /devices/{id}` keeps from then
//! on go on from there.

use tidemark_schema::{DeviceId, DeviceStatus, Tag, TagIndexItem, Tags};
use tidemark_testkit::TestTable;

fn entry(tag: &Tag, device: &str) -> TagIndexItem {
    let tags = Tags::new([(tag.key.clone(), tag.value.clone())].into()).unwrap();
    TagIndexItem::new(
        tag,
        &DeviceId::new(device).unwrap(),
        DeviceStatus::Active,
        tags,
    )
}

/// The group's members as its count items say, summed.
async fn members(t: &TestTable, tag: &Tag) -> i64 {
    t.group_counts(tag).await.0
}

#[tokio::test]
async fn a_group_tagged_before_the_counts_existed_is_counted_and_kept_counted() {
    let t = TestTable::new("count-members").await;
    let site = Tag::parse("site:A").unwrap();
    let other = Tag::parse("site:B").unwrap();
    // GIVEN forty devices of site A and three of site B whose index entries were written
    // before the counts existed (plain puts, no count)
    for i in 0..40 {
        t.put(&entry(&site, &format!("a{i:02}"))).await;
    }
    for i in 0..3 {
        t.put(&entry(&other, &format!("b{i}"))).await;
    }
    assert_eq!(members(&t, &site).await, 0);

    // WHEN site A's members are counted
    let counted = tidemark_admin::members::count_members(&t.client, &t.name, &site)
        .await
        .unwrap();

    // THEN its count items add up to forty, partition by partition as the index spreads them
    assert_eq!(counted.len(), 16);
    assert_eq!(counted.iter().map(|c| c.now).sum::<i64>(), 40);
    assert!(counted.iter().all(|c| c.was == 0));
    assert_eq!(members(&t, &site).await, 40);
    // AND site B is left alone
    assert_eq!(members(&t, &other).await, 0);

    // WHEN a device joins through the index writer and one leaves, and it is counted again
    tidemark_store::write::tag_change::write_index(&t.client, &t.name, &[entry(&site, "a40")], &[])
        .await
        .unwrap();
    let gone = entry(&site, "a00");
    let gone = tidemark_schema::keys::Key {
        pk: gone.pk,
        sk: gone.sk,
    };
    tidemark_store::write::tag_change::write_index(&t.client, &t.name, &[], &[gone])
        .await
        .unwrap();
    assert_eq!(members(&t, &site).await, 40);
    let again = tidemark_admin::members::count_members(&t.client, &t.name, &site)
        .await
        .unwrap();

    // THEN the recount agrees with what the writer kept
    assert!(again.iter().all(|c| c.was == c.now), "{again:?}");
    assert_eq!(members(&t, &site).await, 40);
}
