//! Ingest of devices whose layout packs readings into slot items (docs/design.md §4), against DynamoDB
//! Local: the same guarantees as single items (nothing lost, a correction wins, a reading
//! without metrics kept, an exact resend an arrival and a replay writing nothing), and layouts
//! that change with no migration, even inside a slot.

use std::collections::BTreeMap;

use crate::common::*;
use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::json;
use tidemark_ingest::IngestConfig;
use tidemark_schema::packed;
use tidemark_schema::{
    EntityKey, Layout, LayoutHistory, LayoutHistoryItem, LayoutLead, SlotLen, Timestamp, field,
};
use tidemark_store::Item;
use tidemark_testkit::TestTable;

type Stored = BTreeMap<(String, Timestamp), BTreeMap<String, f64>>;

/// Every reading of the table by (partition, time): from single items and from every part
/// of every slot, with how many slot parts held it (must be one).
fn stored(items: &[Item]) -> (Stored, Stored) {
    let mut single = Stored::new();
    let mut slotted = Stored::new();
    for i in items {
        let (pk, sk) = (s(i, "pk"), s(i, "sk"));
        match EntityKey::parse(&pk, &sk) {
            Ok(EntityKey::Reading { at, .. }) => {
                let Some(AttributeValue::M(m)) = i.get(field::METRICS) else {
                    panic!("a reading has metrics")
                };
                let metrics = m
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_n().unwrap().parse().unwrap()))
                    .collect();
                single.insert((pk, at), metrics);
            }
            Ok(EntityKey::Slot { start, .. }) => {
                let Some(AttributeValue::B(b)) = i.get(field::PACKED) else {
                    panic!("a slot has packed readings")
                };
                for (at, m) in packed::decode(start, b.as_ref()).unwrap() {
                    let metrics = m.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
                    let old = slotted.insert((pk.clone(), at), metrics);
                    assert!(old.is_none(), "{at} is in two slot parts");
                }
            }
            _ => {}
        }
    }
    (single, slotted)
}

fn slot_versions(items: &[Item]) -> Vec<(String, String)> {
    items
        .iter()
        .filter(|i| s(i, "sk").starts_with("SLOT#"))
        .map(|i| (s(i, "sk"), s(i, field::VERSION)))
        .collect()
}

/// `device` packed in 60 s slots from long before the test's readings.
async fn pack(t: &TestTable, device: &str, slot: i64) {
    let h = LayoutHistory::default()
        .with_layout(
            ts("2026-04-20T00:00:00Z"),
            Layout::packed(SlotLen::new(slot).unwrap()),
        )
        .unwrap();
    put_config(t, LayoutHistoryItem::new(&dev(device), h)).await;
}

async fn put_config(t: &TestTable, item: LayoutHistoryItem) {
    t.put(&item).await;
}

fn record(device: &str, at: &str, metrics: serde_json::Value) -> String {
    let mut m = metrics.as_object().unwrap().clone();
    m.insert("deviceId".into(), json!(device));
    m.insert("timestamp".into(), json!(at));
    serde_json::Value::Object(m).to_string()
}

fn m(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

#[tokio::test]
async fn packed_readings_merge_into_slots_as_single_items_would() {
    let t = TestTable::new("ingest-packed").await;
    pack(&t, "packed_01", 60).await;
    let ingest = local_ingest(&t.client, config(&t.name), t.client.clone());
    // GIVEN a batch with a packed device (out of order, two slots, one reading sent as two
    // records with different metrics, one metric corrected by a later record) and a single one
    let batch = [
        record("packed_01", "2026-04-20T14:01:30Z", json!({"t": 1.0})),
        record("packed_01", "2026-04-20T14:00:10Z", json!({"t": 2.0})),
        record("packed_01", "2026-04-20T14:00:10Z", json!({"h": 40.0})),
        record("single_01", "2026-04-20T14:00:10Z", json!({"t": 9.0})),
        record(
            "packed_01",
            "2026-04-20T14:00:20.000001Z",
            json!({"t": 3.0}),
        ),
        record(
            "packed_01",
            "2026-04-20T14:00:20.000001Z",
            json!({"t": 3.5}),
        ),
    ];
    let (resp, stats) = ingest.process(&event_of(&batch), soon()).await.unwrap();
    assert!(resp.batch_item_failures.is_empty());
    // THEN the packed device's three readings, of two slots, are in one slot item (the 14:00
    // slot's part carries the 14:01 slot's reading), the other one is single
    let (single, slotted) = stored(&t.scan().await);
    assert_eq!(single.len(), 1);
    assert!(single.contains_key(&("DEVICE#single_01".into(), ts("2026-04-20T14:00:10Z"))));
    let pk = "DEVICE#packed_01".to_owned();
    assert_eq!(
        slotted,
        Stored::from([
            (
                (pk.clone(), ts("2026-04-20T14:00:10Z")),
                m(&[("h", 40.0), ("t", 2.0)])
            ),
            (
                (pk.clone(), ts("2026-04-20T14:00:20.000001Z")),
                m(&[("t", 3.5)])
            ),
            ((pk.clone(), ts("2026-04-20T14:01:30Z")), m(&[("t", 1.0)])),
        ])
    );
    assert_eq!((stats.packed, stats.slot_writes), (3, 1));
    assert_eq!(slot_versions(&t.scan().await).len(), 1);

    // WHEN the batch is delivered again THEN no slot is written
    let versions = slot_versions(&t.scan().await);
    let (_, again) = ingest.process(&event_of(&batch), soon()).await.unwrap();
    assert_eq!((again.slot_writes, again.slots_unchanged), (0, 1));
    assert_eq!(slot_versions(&t.scan().await), versions);

    // WHEN a later batch corrects one metric and adds one to the same slot THEN the slot
    // holds both, and every other reading as it was
    let later = [
        record("packed_01", "2026-04-20T14:00:10Z", json!({"t": 2.25})),
        record("packed_01", "2026-04-20T14:00:50Z", json!({"t": 4.0})),
    ];
    ingest.process(&event_of(&later), soon()).await.unwrap();
    let (_, slotted) = stored(&t.scan().await);
    assert_eq!(slotted.len(), 4);
    assert_eq!(
        slotted[&(pk.clone(), ts("2026-04-20T14:00:10Z"))],
        m(&[("h", 40.0), ("t", 2.25)])
    );
}

#[tokio::test]
async fn bisected_and_replayed_batches_store_each_reading_once() {
    let t = TestTable::new("ingest-packed-bisect").await;
    pack(&t, "packed_02", 10).await;
    let ingest = local_ingest(&t.client, config(&t.name), t.client.clone());
    let batch: Vec<String> = (0..40)
        .map(|i| {
            let at = ts("2026-04-20T14:00:00Z")
                .plus_millis((i * 7919) % 60_000)
                .unwrap();
            record("packed_02", &at.to_string(), json!({"v": i as f64}))
        })
        .collect();
    // GIVEN the batch handled in halves (Lambda bisecting it), then whole, then the second
    // half again
    ingest
        .process(&event_of(&batch[..20]), soon())
        .await
        .unwrap();
    ingest
        .process(&event_of(&batch[20..]), soon())
        .await
        .unwrap();
    ingest.process(&event_of(&batch), soon()).await.unwrap();
    ingest
        .process(&event_of(&batch[20..]), soon())
        .await
        .unwrap();
    // THEN each of the 40 readings is stored once, in its 10 s slot, with its value
    let (single, slotted) = stored(&t.scan().await);
    assert!(single.is_empty());
    assert_eq!(slotted.len(), 40);
    for i in 0..40i64 {
        let at = ts("2026-04-20T14:00:00Z")
            .plus_millis((i * 7919) % 60_000)
            .unwrap();
        assert_eq!(
            slotted[&("DEVICE#packed_02".into(), at)],
            m(&[("v", i as f64)])
        );
    }
    let slots = slot_versions(&t.scan().await);
    assert_eq!(
        slots.len(),
        3,
        "one item per two 10 s slots of the minute, each carrying the second's readings"
    );
}

#[tokio::test]
async fn a_layout_change_moves_no_reading_and_each_goes_where_its_time_says() {
    let t = TestTable::new("ingest-packed-change").await;
    // GIVEN a device single until 14:00:30, packed from then, single again from 14:01:00
    let h = LayoutHistory::default()
        .with_layout(
            ts("2026-04-20T14:00:30Z"),
            Layout::packed(SlotLen::new(60).unwrap()),
        )
        .unwrap()
        .with_layout(ts("2026-04-20T14:01:00Z"), Layout::SINGLE)
        .unwrap();
    put_config(&t, LayoutHistoryItem::new(&dev("mover"), h)).await;
    let ingest = local_ingest(&t.client, config(&t.name), t.client.clone());
    let batch: Vec<String> = (0..9)
        .map(|i| {
            let at = ts("2026-04-20T14:00:00Z").plus_millis(i * 10_000).unwrap();
            record("mover", &at.to_string(), json!({"v": i as f64}))
        })
        .collect();
    ingest.process(&event_of(&batch), soon()).await.unwrap();
    // THEN readings before 14:00:30 and from 14:01:00 are single items, the three between in
    // the 14:00 slot (whose item holds only them)
    let (single, slotted) = stored(&t.scan().await);
    let times = |s: &Stored| s.keys().map(|k| k.1.to_string()).collect::<Vec<_>>();
    assert_eq!(
        times(&slotted),
        [
            "2026-04-20T14:00:30.000000Z",
            "2026-04-20T14:00:40.000000Z",
            "2026-04-20T14:00:50.000000Z"
        ]
    );
    assert_eq!(single.len(), 6);
}

#[tokio::test]
async fn the_configured_default_layout_applies_after_the_lead_time_and_never_to_the_past() {
    let t = TestTable::new("ingest-packed-default").await;
    let mut c = config(&t.name);
    c.default_layout = Some("packed:60".parse().unwrap());
    let ingest = local_ingest(&t.client, c.clone(), t.client.clone());
    // GIVEN a fleet with no default layout stored, and a container configured to pack
    // WHEN it handles a batch
    let now_batch = [record(
        "fleet_01",
        "2026-04-20T14:04:00Z",
        json!({"v": 1.0}),
    )];
    ingest.process(&event_of(&now_batch), soon()).await.unwrap();
    // THEN the default is stored, taking effect after the lead time, and the reading of now
    // is a single item (a container with the old answer may be writing such readings)
    let items = t.scan().await;
    let default = items
        .iter()
        .find(|i| s(i, "sk") == "#DEFAULT_LAYOUT")
        .expect("the default layout item");
    let item: LayoutHistoryItem = tidemark_store::from_item(default.clone()).unwrap();
    let from = LayoutLead::default().earliest_change(now());
    assert_eq!(item.epochs.epochs().len(), 1);
    assert_eq!(item.epochs.epochs()[0].from, from);
    assert_eq!(
        item.epochs.layout_at(from),
        Layout::packed(SlotLen::new(60).unwrap())
    );
    let (single, slotted) = stored(&items);
    assert_eq!((single.len(), slotted.len()), (1, 0));
    // WHEN a reading after the change arrives (at a later clock) THEN it is packed
    ingest.clock().set(from.plus_millis(60_000).unwrap());
    let after = [record(
        "fleet_01",
        &from.plus_millis(1_000).unwrap().to_string(),
        json!({"v": 2.0}),
    )];
    ingest.process(&event_of(&after), soon()).await.unwrap();
    let (single, slotted) = stored(&t.scan().await);
    assert_eq!((single.len(), slotted.len()), (1, 1));
    // AND a second container with the same setting changes nothing
    let other = local_ingest(&t.client, c, t.client.clone());
    other.process(&event_of(&after), soon()).await.unwrap();
    let item: LayoutHistoryItem = tidemark_store::from_item(
        t.scan()
            .await
            .into_iter()
            .find(|i| s(i, "sk") == "#DEFAULT_LAYOUT")
            .unwrap(),
    )
    .unwrap();
    assert_eq!(item.version, 1);
}

#[tokio::test]
async fn a_device_with_its_own_layout_ignores_the_fleet_default() {
    let t = TestTable::new("ingest-packed-own").await;
    put_config(
        &t,
        LayoutHistoryItem::default_layout(
            LayoutHistory::default()
                .with_layout(
                    ts("2026-04-20T00:00:00Z"),
                    Layout::packed(SlotLen::new(60).unwrap()),
                )
                .unwrap(),
        ),
    )
    .await;
    // GIVEN a device that chose single items itself, before the default changed
    put_config(
        &t,
        LayoutHistoryItem::new(
            &dev("own_01"),
            LayoutHistory::default()
                .with_layout(ts("2026-04-19T00:00:00Z"), Layout::SINGLE)
                .unwrap(),
        ),
    )
    .await;
    let ingest = local_ingest(&t.client, IngestConfig::new(&t.name), t.client.clone());
    let batch = [
        record("own_01", "2026-04-20T14:00:00Z", json!({"v": 1.0})),
        record("other_01", "2026-04-20T14:00:00Z", json!({"v": 1.0})),
    ];
    ingest.process(&event_of(&batch), soon()).await.unwrap();
    let (single, slotted) = stored(&t.scan().await);
    assert_eq!(
        single.keys().map(|k| k.0.as_str()).collect::<Vec<_>>(),
        ["DEVICE#own_01"]
    );
    assert_eq!(
        slotted.keys().map(|k| k.0.as_str()).collect::<Vec<_>>(),
        ["DEVICE#other_01"]
    );
}

#[tokio::test]
async fn a_packed_reading_keeps_its_metadata() {
    let t = TestTable::new("ingest-packed-meta").await;
    pack(&t, "meta_01", 60).await;
    let ingest = local_ingest(&t.client, config(&t.name), t.client.clone());
    let batch = [record(
        "meta_01",
        "2026-04-20T14:00:05Z",
        json!({"t": 1.0, "metadata": {"fw": "2.1.0"}}),
    )];
    ingest.process(&event_of(&batch), soon()).await.unwrap();
    let items = t.scan().await;
    let slot = items
        .iter()
        .find(|i| s(i, "sk").starts_with("SLOT#"))
        .unwrap();
    let c = tidemark_store::write::slots::read_part(slot).unwrap();
    let meta: serde_json::Value =
        serde_json::from_str(&c.metadata[&ts("2026-04-20T14:00:05Z")]).unwrap();
    assert_eq!(meta, json!({"fw": "2.1.0"}));
}

/// The readings the store's one reader gives for `device` over the hour of 14:00, with their
/// metric names.
async fn read_back(
    t: &TestTable,
    device: &str,
    history: &LayoutHistory,
) -> Vec<(Timestamp, Vec<String>)> {
    let queries = tidemark_store::read::Queries::new(t.client.clone(), &t.name);
    let mut out = Vec::new();
    tidemark_store::read::walk_readings(
        &queries,
        &dev(device),
        history,
        ts("2026-04-20T13:00:00Z"),
        ts("2026-04-20T15:00:00Z"),
        false,
        None,
        |at, m| out.push((at, m.keys().map(|k| k.to_string()).collect())),
    )
    .await
    .unwrap();
    out
}

/// A history packed in 60 s slots from midnight, then in `len` s slots from 14:03:20 (200 s
/// into the 300 s slot starting 14:00, where a 60 s slot starts too).
fn changed_at_200_s(len: i64) -> LayoutHistory {
    LayoutHistory::default()
        .with_layout(
            ts("2026-04-20T00:00:00Z"),
            Layout::packed(SlotLen::new(60).unwrap()),
        )
        .unwrap()
        .with_layout(
            ts("2026-04-20T14:03:20Z"),
            Layout::packed(SlotLen::new(len).unwrap()),
        )
        .unwrap()
}

#[tokio::test]
async fn a_change_to_longer_slots_inside_a_slot_stores_the_readings_on_both_sides_of_it() {
    let t = TestTable::new("ingest-packed-longer").await;
    // GIVEN a fleet packing in 60 s slots, and one device changed to 300 s slots from
    // 14:03:20: its slot of 14:03:37 starts at 14:00:00, where the slot of 14:00:37 does
    put_config(
        &t,
        LayoutHistoryItem::default_layout(
            LayoutHistory::default()
                .with_layout(
                    ts("2026-04-20T00:00:00Z"),
                    Layout::packed(SlotLen::new(60).unwrap()),
                )
                .unwrap(),
        ),
    )
    .await;
    let history = changed_at_200_s(300);
    put_config(
        &t,
        LayoutHistoryItem::new(&dev("longer_01"), history.clone()),
    )
    .await;
    let ingest = local_ingest(&t.client, config(&t.name), t.client.clone());
    // WHEN one batch brings a reading from before the change and one from after it
    let batch = [
        record("longer_01", "2026-04-20T14:00:37Z", json!({"a": 1.0})),
        record("longer_01", "2026-04-20T14:03:37Z", json!({"b": 2.0})),
    ];
    let (resp, stats) = ingest.process(&event_of(&batch), soon()).await.unwrap();
    // THEN the batch succeeds and both readings are stored, and read back
    assert!(
        resp.batch_item_failures.is_empty(),
        "the batch failed: {stats:?}"
    );
    assert_eq!(
        read_back(&t, "longer_01", &history).await,
        [
            (ts("2026-04-20T14:00:37Z"), vec!["a".to_owned()]),
            (ts("2026-04-20T14:03:37Z"), vec!["b".to_owned()]),
        ]
    );
    // AND the batch delivered again writes nothing
    let (resp, again) = ingest.process(&event_of(&batch), soon()).await.unwrap();
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(again.slot_writes, 0);
}

#[tokio::test]
async fn a_change_to_shorter_slots_inside_a_slot_stores_the_readings_on_both_sides_of_it() {
    let t = TestTable::new("ingest-packed-shorter").await;
    // GIVEN a device in 300 s slots changed to 60 s slots 30 s into one (the first 60 s slot
    // after the change starts where the 300 s slot does) and again to 300 s at 14:03:20
    let history = LayoutHistory::default()
        .with_layout(
            ts("2026-04-20T00:00:00Z"),
            Layout::packed(SlotLen::new(300).unwrap()),
        )
        .unwrap()
        .with_layout(
            ts("2026-04-20T14:00:30Z"),
            Layout::packed(SlotLen::new(60).unwrap()),
        )
        .unwrap()
        .with_layout(
            ts("2026-04-20T14:03:20Z"),
            Layout::packed(SlotLen::new(300).unwrap()),
        )
        .unwrap();
    put_config(
        &t,
        LayoutHistoryItem::new(&dev("shorter_01"), history.clone()),
    )
    .await;
    let ingest = local_ingest(&t.client, config(&t.name), t.client.clone());
    // WHEN one batch brings readings of each epoch, the first of the 60 s epoch sent first
    let batch = [
        record("shorter_01", "2026-04-20T14:00:50Z", json!({"b": 2.0})),
        record("shorter_01", "2026-04-20T14:00:10Z", json!({"a": 1.0})),
        record("shorter_01", "2026-04-20T14:01:30Z", json!({"c": 3.0})),
        record("shorter_01", "2026-04-20T14:04:10Z", json!({"d": 4.0})),
    ];
    let (resp, stats) = ingest.process(&event_of(&batch), soon()).await.unwrap();
    // THEN all four are stored and read back
    assert!(
        resp.batch_item_failures.is_empty(),
        "the batch failed: {stats:?}"
    );
    let names =
        |v: Vec<(Timestamp, Vec<String>)>| v.into_iter().flat_map(|(_, n)| n).collect::<Vec<_>>();
    assert_eq!(
        names(read_back(&t, "shorter_01", &history).await),
        ["a", "b", "c", "d"]
    );
}

#[tokio::test]
async fn a_change_of_partition_count_and_slot_length_at_one_instant_stores_both_sides() {
    let t = TestTable::new("ingest-packed-parts").await;
    // GIVEN a device in 60 s slots in one partition, then 300 s slots over two partitions
    // from 14:03:20
    let history = LayoutHistory::default()
        .with_layout(
            ts("2026-04-20T00:00:00Z"),
            Layout::packed(SlotLen::new(60).unwrap()),
        )
        .unwrap()
        .with_layout(
            ts("2026-04-20T14:03:20Z"),
            Layout {
                partitions: 2,
                ..Layout::packed(SlotLen::new(300).unwrap())
            },
        )
        .unwrap();
    put_config(
        &t,
        LayoutHistoryItem::new(&dev("split_01"), history.clone()),
    )
    .await;
    let ingest = local_ingest(&t.client, config(&t.name), t.client.clone());
    let batch: Vec<String> = [37, 217, 218, 219, 220]
        .iter()
        .map(|s| {
            let at = ts("2026-04-20T14:00:00Z").plus_millis(s * 1000).unwrap();
            record("split_01", &at.to_string(), json!({"v": *s as f64}))
        })
        .collect();
    let (resp, stats) = ingest.process(&event_of(&batch), soon()).await.unwrap();
    assert!(
        resp.batch_item_failures.is_empty(),
        "the batch failed: {stats:?}"
    );
    assert_eq!(read_back(&t, "split_01", &history).await.len(), 5);
}

/// [`event_of`] with every record arriving at `at` plus its index in milliseconds: the same
/// payloads sent again by the device are new Kinesis records, arriving later.
fn arriving(payloads: &[String], at: &str) -> aws_lambda_events::event::kinesis::KinesisEvent {
    let mut v = serde_json::to_value(event_of(payloads)).unwrap();
    for (i, r) in v["Records"].as_array_mut().unwrap().iter_mut().enumerate() {
        r["kinesis"]["approximateArrivalTimestamp"] =
            json!((ts(at).epoch_millis() + i as i64) as f64 / 1000.0);
    }
    serde_json::from_value(v).unwrap()
}

/// The arrival stamped on every reading item and slot part of `device`, by sort key.
fn arrivals_of(items: &[Item], device: &str) -> BTreeMap<String, String> {
    items
        .iter()
        .filter(|i| s(i, "pk") == format!("DEVICE#{device}"))
        .filter(|i| s(i, "sk").starts_with("SLOT#") || s(i, "sk").starts_with("READING#"))
        .map(|i| (s(i, "sk"), s(i, field::ARRIVED_AT)))
        .collect()
}

#[tokio::test]
async fn readings_without_metrics_of_a_packed_device_are_stored_read_back_and_arrive() {
    let t = TestTable::new("ingest-packed-alive").await;
    pack(&t, "alive_01", 60).await;
    let history = LayoutHistory::default()
        .with_layout(
            ts("2026-04-20T00:00:00Z"),
            Layout::packed(SlotLen::new(60).unwrap()),
        )
        .unwrap();
    let ingest = local_ingest(&t.client, config(&t.name), t.client.clone());
    // GIVEN a packed device's reading
    let first = [record(
        "alive_01",
        "2026-04-20T14:00:05Z",
        json!({"t": 1.0}),
    )];
    ingest
        .process(&arriving(&first, "2026-04-20T14:01:00Z"), soon())
        .await
        .unwrap();
    // WHEN it sends three keep-alives after it (readings with nothing to report), one with
    // metadata
    let alive = [
        record("alive_01", "2026-04-20T14:00:20Z", json!({})),
        record("alive_01", "2026-04-20T14:00:40Z", json!({})),
        record(
            "alive_01",
            "2026-04-20T14:01:10Z",
            json!({"metadata": {"fw": "2.1.0"}}),
        ),
    ];
    let (resp, stats) = ingest
        .process(&arriving(&alive, "2026-04-20T14:02:00Z"), soon())
        .await
        .unwrap();
    assert!(resp.batch_item_failures.is_empty(), "{stats:?}");
    assert_eq!((stats.packed, stats.slot_writes), (3, 1));
    // THEN the reader gives all four, the keep-alives without metrics
    let read = read_back(&t, "alive_01", &history).await;
    let times: Vec<String> = read.iter().map(|(at, _)| at.to_string()).collect();
    assert_eq!(
        times,
        [
            "2026-04-20T14:00:05.000000Z",
            "2026-04-20T14:00:20.000000Z",
            "2026-04-20T14:00:40.000000Z",
            "2026-04-20T14:01:10.000000Z",
        ]
    );
    assert!(read[1..].iter().all(|(_, names)| names.is_empty()));
    // AND the newest reading is the last keep-alive
    let queries = tidemark_store::read::Queries::new(t.client.clone(), &t.name);
    let mut newest = Vec::new();
    tidemark_store::read::walk_whole_readings_while(
        &queries,
        &dev("alive_01"),
        &history,
        ts("2026-04-20T13:00:00Z"),
        ts("2026-04-20T15:00:00Z"),
        true,
        Some(1),
        true,
        |r| {
            newest.push(r);
            true
        },
    )
    .await
    .unwrap();
    assert_eq!(newest[0].timestamp, ts("2026-04-20T14:01:10Z"));
    assert!(newest[0].metrics.is_empty());
    assert_eq!(
        newest[0].metadata.clone().map(serde_json::Value::Object),
        Some(json!({"fw": "2.1.0"}))
    );
    // AND the part written carries the keep-alives' arrival (what offline detection reads)
    let stamped = arrivals_of(&t.scan().await, "alive_01");
    assert_eq!(
        stamped.values().collect::<Vec<_>>(),
        [&ts("2026-04-20T14:02:00.002Z").epoch_millis().to_string()]
    );
    // AND delivered again (a replay of the same records), they write nothing
    let versions = slot_versions(&t.scan().await);
    let (_, again) = ingest
        .process(&arriving(&alive, "2026-04-20T14:02:00Z"), soon())
        .await
        .unwrap();
    assert_eq!((again.slot_writes, again.slots_unchanged), (0, 1));
    assert_eq!(slot_versions(&t.scan().await), versions);
}

#[tokio::test]
async fn an_exact_resend_is_an_arrival_in_every_layout_and_a_replay_writes_nothing() {
    let t = TestTable::new("ingest-resend-arrival").await;
    pack(&t, "resend_packed", 60).await;
    let ingest = local_ingest(&t.client, config(&t.name), t.client.clone());
    // GIVEN a single-item device and a packed one, each with readings stored (one of the
    // packed device's carried by the part of the slot before its own) and a keep-alive
    let batch: Vec<String> = ["resend_single", "resend_packed"]
        .iter()
        .flat_map(|d| {
            [
                record(d, "2026-04-20T14:00:10Z", json!({"t": 1.0})),
                record(d, "2026-04-20T14:01:10Z", json!({"t": 2.0})),
                record(d, "2026-04-20T14:01:20Z", json!({})),
            ]
        })
        .collect();
    ingest
        .process(&arriving(&batch, "2026-04-20T14:02:00Z"), soon())
        .await
        .unwrap();
    let before = t.scan().await;
    let (single, slotted) = stored(&before);
    let stamped = |device: &str, items: &[Item]| -> Vec<String> {
        arrivals_of(items, device).into_values().collect()
    };
    let first = ts("2026-04-20T14:02:00.005Z").epoch_millis().to_string();
    assert_eq!(stamped("resend_packed", &before), [first]);
    // WHEN the device sends one of them again, exactly, as a new record arriving later
    for (device, payload) in [
        (
            "resend_single",
            record("resend_single", "2026-04-20T14:01:10Z", json!({"t": 2.0})),
        ),
        (
            "resend_packed",
            record("resend_packed", "2026-04-20T14:01:10Z", json!({"t": 2.0})),
        ),
    ] {
        let resend = arriving(std::slice::from_ref(&payload), "2026-04-20T14:03:00Z");
        let (resp, stats) = ingest.process(&resend, soon()).await.unwrap();
        assert!(resp.batch_item_failures.is_empty(), "{stats:?}");
        // THEN no reading changes, and its arrival is stamped where the reading is: the single
        // item, or the one part holding it (offline detection sees the device arrive, in
        // either layout)
        let after = t.scan().await;
        assert_eq!(stored(&after), (single.clone(), slotted.clone()));
        let arrived = ts("2026-04-20T14:03:00Z").epoch_millis().to_string();
        let now = arrivals_of(&after, device);
        let was = arrivals_of(&before, device);
        let changed: Vec<&String> = now
            .iter()
            .filter(|(sk, a)| was.get(*sk) != Some(*a))
            .map(|(sk, _)| sk)
            .collect();
        assert_eq!(changed.len(), 1, "{device}: {now:?}");
        assert_eq!(now[changed[0]], arrived, "{device}");
        // AND the same record delivered again (a replay) writes nothing
        let versions = slot_versions(&after);
        let (_, again) = ingest.process(&resend, soon()).await.unwrap();
        let replayed = t.scan().await;
        assert_eq!(arrivals_of(&replayed, device), now, "{device}");
        assert_eq!(slot_versions(&replayed), versions);
        assert_eq!(again.slot_writes, 0);
    }
    // AND a keep-alive sent again is an arrival too
    let alive = [record("resend_packed", "2026-04-20T14:01:20Z", json!({}))];
    ingest
        .process(&arriving(&alive, "2026-04-20T14:04:00Z"), soon())
        .await
        .unwrap();
    let arrived = ts("2026-04-20T14:04:00Z").epoch_millis().to_string();
    assert!(stamped("resend_packed", &t.scan().await).contains(&arrived));
}
