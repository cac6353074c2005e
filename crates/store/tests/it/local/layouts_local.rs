//! Layout histories against DynamoDB Local: replaced under a version check, and read as a
//! device sees them (its own epochs over the fleet's default).

use tidemark_schema::{DeviceId, EntityKey, Layout, LayoutHistory, SlotLen, Timestamp};
use tidemark_store::layouts::device_history;
use tidemark_store::write::layout_change::replace_history;
use tidemark_testkit::TestTable;

fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

#[tokio::test]
async fn a_device_reads_its_own_layout_over_the_fleet_default() {
    let t = TestTable::new("layouts").await;
    let dev = DeviceId::new("sensor_01").unwrap();
    let other = DeviceId::new("sensor_02").unwrap();
    // Nothing stored: single items throughout.
    let (h, v) = device_history(&t.client, &t.name, &dev, false)
        .await
        .unwrap();
    assert_eq!((h, v), (LayoutHistory::default(), 0));
    let default = LayoutHistory::default()
        .with_layout(
            ts("2026-04-20T12:00:00Z"),
            Layout::packed(SlotLen::new(60).unwrap()),
        )
        .unwrap();
    let key = EntityKey::DefaultLayout.key();
    assert!(
        replace_history(&t.client, &t.name, &key, &default, 0)
            .await
            .unwrap()
    );
    // A second writer that read no item loses: its change must be decided anew.
    assert!(
        !replace_history(&t.client, &t.name, &key, &default, 0)
            .await
            .unwrap()
    );
    let own = LayoutHistory::default()
        .with_change(ts("2026-04-20T13:00:00Z"), 4)
        .unwrap();
    let own_key = EntityKey::DeviceLayout(dev.clone()).key();
    assert!(
        replace_history(&t.client, &t.name, &own_key, &own, 0)
            .await
            .unwrap()
    );
    let (h, v) = device_history(&t.client, &t.name, &dev, false)
        .await
        .unwrap();
    assert_eq!(v, 1);
    assert_eq!(h, own.under(&default));
    assert_eq!(
        h.layout_at(ts("2026-04-20T12:30:00Z")),
        Layout::packed(SlotLen::new(60).unwrap())
    );
    assert_eq!(h.layout_at(ts("2026-04-20T13:30:00Z")).partitions, 4);
    let (h, v) = device_history(&t.client, &t.name, &other, true)
        .await
        .unwrap();
    assert_eq!((h, v), (default, 0));
}
