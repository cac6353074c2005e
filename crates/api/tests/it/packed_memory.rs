//! Packed readings over the in-memory store, for many random layout histories: single items
//! and packed slots (of several lengths, over several shards, each slot split into parts
//! that interleave in time), query pages cut short (the 1 MB cap) so that a slot's parts
//! arrive over several pages, random ranges and page sizes, both ways. The same behaviours
//! run against DynamoDB Local in `local/packed_layouts.rs`.

use std::collections::BTreeMap;

use crate::common::*;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_api::memory::MemoryStore;
use tidemark_api::{ApiConfig, App};
use tidemark_schema::packed::{self, SlotReadings};
use tidemark_schema::table::attr;
use tidemark_schema::{
    Layout, LayoutHistory, LayoutHistoryItem, ReadingItem, SlotLen, Timestamp, field, keys,
};
use tidemark_store::Item;

/// A small deterministic generator (no test depends on luck).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

fn random_layout(rng: &mut Lcg) -> Layout {
    let slot = [None, Some(1), Some(10), Some(60), Some(600)][rng.next(5) as usize]
        .map(|s| SlotLen::new(s).unwrap());
    Layout {
        partitions: 1 + rng.next(3) as u16,
        slot,
    }
}

/// Slot part items holding `readings`, each reading in one random part of `parts`.
fn part_items(
    pk: &str,
    start: Timestamp,
    readings: &SlotReadings,
    parts: u16,
    rng: &mut Lcg,
) -> Vec<Item> {
    let mut split: Vec<SlotReadings> = vec![SlotReadings::new(); usize::from(parts)];
    for (at, m) in readings {
        split[rng.next(u64::from(parts)) as usize].insert(*at, m.clone());
    }
    split
        .into_iter()
        .enumerate()
        .filter(|(_, r)| !r.is_empty())
        .map(|(n, r)| {
            Item::from([
                (attr::PK.to_owned(), AttributeValue::S(pk.to_owned())),
                (
                    attr::SK.to_owned(),
                    AttributeValue::S(keys::slot_sk(start, n as u16)),
                ),
                (
                    field::PACKED.to_owned(),
                    AttributeValue::B(Blob::new(packed::encode(start, &r).unwrap())),
                ),
                (
                    field::READING_COUNT.to_owned(),
                    AttributeValue::N(r.len().to_string()),
                ),
                (field::VERSION.to_owned(), AttributeValue::N("1".into())),
                (
                    attr::TTL.to_owned(),
                    AttributeValue::N(start.ttl_after_days(31).to_string()),
                ),
            ])
        })
        .collect()
}

#[tokio::test]
async fn walks_across_random_layouts_return_every_reading_once_in_order_under_short_pages() {
    let base = ts("2026-04-20T14:00:00Z");
    let mut rng = Lcg(16);
    for case in 0..60 {
        // GIVEN a random layout history with up to four changes inside the hour
        let mut history = LayoutHistory::default();
        let mut at = 0;
        for _ in 0..rng.next(5) {
            at += 1000 * (1 + rng.next(1_200) as i64);
            history = history
                .with_layout(base.plus_millis(at).unwrap(), random_layout(&mut rng))
                .unwrap();
        }
        // AND readings at random microseconds, stored as the layout of their time says
        let store = MemoryStore::new().with_page_cap(1 + rng.next(4) as usize);
        store.put_entity(&sample_device()).unwrap();
        store
            .put_entity(&LayoutHistoryItem::new(&dev("sensor_01"), history.clone()))
            .unwrap();
        let mut times: Vec<Timestamp> = (0..(rng.next(250)))
            .map(|_| {
                Timestamp::from_epoch_micros(base.epoch_micros() + rng.next(3_600_000_000) as i64)
                    .unwrap()
            })
            .collect();
        times.sort();
        times.dedup();
        let mut slots: BTreeMap<(String, Timestamp), SlotReadings> = BTreeMap::new();
        for (i, t) in times.iter().enumerate() {
            let r = reading(
                "sensor_01",
                *t,
                &[("n", i as f64), ("x", ((i + 1) as f64).ln())],
            );
            let shard = history.partition_at(*t);
            match history.layout_at(*t).slot {
                None => store.put_entity(&ReadingItem::new(&r, shard, 30)).unwrap(),
                Some(len) => {
                    slots
                        .entry((keys::reading_pk(&r.device_id, shard), len.start_of(*t)))
                        .or_default()
                        .insert(*t, r.metrics.clone());
                }
            }
        }
        for ((pk, start), rs) in &slots {
            let parts = 1 + rng.next(4) as u16;
            for item in part_items(pk, *start, rs, parts, &mut rng) {
                store.put(item).unwrap();
            }
        }
        let app = App::with_store(store, ApiConfig::new("memory").with_now(now()));
        // WHEN a random range is walked page by page, both ways
        let lo = rng.next(3_700) as i64 - 100;
        let hi = lo + rng.next(3_700) as i64;
        let (from, to) = (
            base.plus_millis(lo * 1000).unwrap(),
            base.plus_millis(hi * 1000).unwrap(),
        );
        let limit = 1 + rng.next(30);
        for order in ["asc", "desc"] {
            let (got, _) = walk(
                &app,
                &format!(
                    "/devices/sensor_01/readings?from={from}&to={to}&order={order}&limit={limit}"
                ),
            )
            .await;
            // THEN every reading of the range comes back exactly once, in order
            let ns: Vec<i64> = got.iter().map(|r| r["n"].as_i64().unwrap()).collect();
            let mut want: Vec<i64> = times
                .iter()
                .enumerate()
                .filter(|(_, t)| from <= **t && **t <= to)
                .map(|(i, _)| i as i64)
                .collect();
            if order == "desc" {
                want.reverse();
            }
            assert_eq!(
                ns, want,
                "case {case}, {order}, limit {limit}, {from}..{to}, {history:?}"
            );
        }
        // AND the latest is the newest reading, whatever its layout
        let (status, latest) = get(&app, "/devices/sensor_01/readings/latest").await;
        match times.len() {
            0 => assert_eq!(status, 404, "case {case}"),
            n => assert_eq!(latest["n"], (n - 1) as i64, "case {case}, {history:?}"),
        }
    }
}

#[tokio::test]
async fn a_slot_of_more_parts_than_a_page_has_query_rounds_is_still_read_whole() {
    // GIVEN one 10-minute slot whose 70 readings are spread over 70 parts (more than the 64 query rounds of a page), and a store that
    // returns one item per query page
    let store = MemoryStore::new().with_page_cap(1);
    store.put_entity(&sample_device()).unwrap();
    let h = LayoutHistory::default()
        .with_layout(
            ts("2026-04-20T14:00:00Z"),
            Layout::packed(SlotLen::new(600).unwrap()),
        )
        .unwrap();
    store
        .put_entity(&LayoutHistoryItem::new(&dev("sensor_01"), h))
        .unwrap();
    let start = ts("2026-04-20T14:00:00Z");
    for i in 0..70u16 {
        let at = start.plus_millis(i64::from(i) * 5_000).unwrap();
        let one: SlotReadings = [(at, [(metric("n"), f64::from(i))].into_iter().collect())]
            .into_iter()
            .collect();
        let mut item = part_items("DEVICE#sensor_01", start, &one, 1, &mut Lcg(1)).remove(0);
        item.insert(
            attr::SK.to_owned(),
            AttributeValue::S(keys::slot_sk(start, 69 - i)),
        );
        store.put(item).unwrap();
    }
    let app = App::with_store(store, ApiConfig::new("memory").with_now(now()));
    // WHEN it is walked a reading at a time
    for order in ["asc", "desc"] {
        let (got, pages) = walk(
            &app,
            &format!("/devices/sensor_01/readings?from=2026-04-20T14:00:00Z&order={order}&limit=1"),
        )
        .await;
        // THEN every reading comes back, one a page
        let ns: Vec<i64> = got.iter().map(|r| r["n"].as_i64().unwrap()).collect();
        let mut want: Vec<i64> = (0..70).collect();
        if order == "desc" {
            want.reverse();
        }
        assert_eq!(ns, want, "{order}");
        assert_eq!(pages, 70, "{order}");
    }
}

#[tokio::test]
async fn a_layout_announced_between_pages_neither_skips_nor_repeats_a_reading() {
    use tidemark_api::store::LayoutWriter;
    for order in ["asc", "desc"] {
        // GIVEN a device packed from 14:30 with readings every 20 s until 15:04 (now is 15:00)
        let store = MemoryStore::new();
        store.put_entity(&sample_device()).unwrap();
        let packed = LayoutHistory::default()
            .with_layout(
                ts("2026-04-20T14:30:00Z"),
                Layout::packed(SlotLen::new(60).unwrap()),
            )
            .unwrap();
        let id = dev("sensor_01");
        assert!(store.replace_layouts(&id, &packed, 0).await.unwrap());
        let times: Vec<Timestamp> = (0..193)
            .map(|i| ts("2026-04-20T14:00:00Z").plus_millis(i * 20_000).unwrap())
            .collect();
        let mut slots: BTreeMap<Timestamp, SlotReadings> = BTreeMap::new();
        for (i, t) in times.iter().enumerate() {
            let r = reading("sensor_01", *t, &[("n", i as f64)]);
            match packed.layout_at(*t).slot {
                None => store.put_entity(&ReadingItem::new(&r, None, 30)).unwrap(),
                Some(len) => {
                    slots
                        .entry(len.start_of(*t))
                        .or_default()
                        .insert(*t, r.metrics);
                }
            }
        }
        let mut rng = Lcg(3);
        for (start, rs) in &slots {
            for item in part_items("DEVICE#sensor_01", *start, rs, 2, &mut rng) {
                store.put(item).unwrap();
            }
        }
        let app = App::with_store(store, ApiConfig::new("memory").with_now(now()));
        let uri = format!(
            "/devices/sensor_01/readings?from=2026-04-20T14:00:00Z&to=2026-04-20T16:00:00Z&order={order}&limit=7"
        );
        // WHEN a walk takes its first pages, then a change to 4 shards of single items from
        // 15:30 (after anything ingest may be writing) is announced, and the walk goes on
        let mut got = Vec::new();
        let mut cursor: Option<String> = None;
        for page in 0.. {
            if page == 3 {
                let next = packed
                    .with_layout(
                        ts("2026-04-20T15:30:00Z"),
                        Layout {
                            partitions: 4,
                            slot: None,
                        },
                    )
                    .unwrap();
                assert!(app.store().replace_layouts(&id, &next, 1).await.unwrap());
            }
            let u = match &cursor {
                None => uri.clone(),
                Some(c) => format!("{uri}&cursor={c}"),
            };
            let (status, body) = get(&app, &u).await;
            assert_eq!(status, 200, "{body}");
            got.extend(body["items"].as_array().unwrap().iter().cloned());
            match body["cursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => break,
            }
        }
        // THEN every reading comes back once, in order
        let ns: Vec<i64> = got.iter().map(|r| r["n"].as_i64().unwrap()).collect();
        let mut want: Vec<i64> = (0..times.len() as i64).collect();
        if order == "desc" {
            want.reverse();
        }
        assert_eq!(ns, want, "{order}");
    }
}

/// The state inside a cursor (signed, not secret).
fn cursor_state(c: &str) -> serde_json::Value {
    use base64::Engine;
    let body = c.split('.').next().unwrap();
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(body)
        .unwrap();
    serde_json::from_slice(&json).unwrap()
}

#[tokio::test]
async fn an_announced_layout_replaced_while_a_walk_stands_at_its_start_repeats_nothing() {
    use tidemark_api::store::LayoutWriter;
    let mut hits = 0;
    for limit in 1..=16 {
        // GIVEN single items until 14:30, packed from 14:30, and single items again announced
        // for 15:30 (now is 15:00), readings every 20 s until 15:04
        let store = MemoryStore::new();
        store.put_entity(&sample_device()).unwrap();
        let packed = LayoutHistory::default()
            .with_layout(
                ts("2026-04-20T14:30:00Z"),
                Layout::packed(SlotLen::new(60).unwrap()),
            )
            .unwrap();
        let announced = packed
            .with_layout(ts("2026-04-20T15:30:00Z"), Layout::SINGLE)
            .unwrap();
        let id = dev("sensor_01");
        assert!(store.replace_layouts(&id, &announced, 0).await.unwrap());
        let mut slots: BTreeMap<Timestamp, SlotReadings> = BTreeMap::new();
        for i in 0..193 {
            let t = ts("2026-04-20T14:00:00Z").plus_millis(i * 20_000).unwrap();
            let r = reading("sensor_01", t, &[("n", i as f64)]);
            match packed.layout_at(t).slot {
                None => store.put_entity(&ReadingItem::new(&r, None, 30)).unwrap(),
                Some(len) => {
                    slots
                        .entry(len.start_of(t))
                        .or_default()
                        .insert(t, r.metrics);
                }
            }
        }
        for (start, rs) in &slots {
            for item in part_items("DEVICE#sensor_01", *start, rs, 2, &mut Lcg(5)) {
                store.put(item).unwrap();
            }
        }
        let app = App::with_store(store, ApiConfig::new("memory").with_now(now()));
        let uri = format!(
            "/devices/sensor_01/readings?from=2026-04-20T14:00:00Z&to=2026-04-20T16:00:00Z&limit={limit}"
        );
        // WHEN a page ends where the announced layout begins, and before the next page the
        // announcement is replaced by one for 15:45
        let mut got = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let u = match &cursor {
                None => uri.clone(),
                Some(c) => format!("{uri}&cursor={c}"),
            };
            let (status, body) = get(&app, &u).await;
            assert_eq!(status, 200, "{body}");
            got.extend(body["items"].as_array().unwrap().iter().cloned());
            let Some(c) = body["cursor"].as_str() else {
                break;
            };
            if cursor_state(c)["at"] == "2026-04-20T15:30:00.000000Z" {
                hits += 1;
                let replaced = packed
                    .with_layout(ts("2026-04-20T15:45:00Z"), Layout::SINGLE)
                    .unwrap();
                assert!(
                    app.store()
                        .replace_layouts(&id, &replaced, 1)
                        .await
                        .unwrap()
                );
            }
            cursor = Some(c.to_owned());
        }
        // THEN every reading came back once, in order
        let ns: Vec<i64> = got.iter().map(|r| r["n"].as_i64().unwrap()).collect();
        assert_eq!(ns, (0..193).collect::<Vec<i64>>(), "limit {limit}");
    }
    assert!(hits > 0, "no page ended at the announced layout's start");
}
