//! A device's cap on distinct metric names per UTC day against DynamoDB Local (docs/design.md
//! §4, "Metric names per day"): names past it are taken out of their readings and the record
//! is quarantined as `too_many_metrics`, while the readings' other metrics are stored; the
//! next day starts afresh; a device's `maxMetricsPerDay` raises its cap; a replay gets the
//! same answer; and names a container already saw admitted cost no write.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::*;
use serde_json::{Map, Value, json};
use tidemark_ingest::metric_cap::{Names, Room};
use tidemark_ingest::{DeviceDirectory, DynamoLookups, Ingest};
use tidemark_schema::{
    Clock, Day, DeviceId, DeviceIdentity, DeviceItem, DeviceStatus, EntityKey, QuarantineItem,
    QuarantineReason,
};
use tidemark_store::{StoreError, from_item};
use tidemark_testkit::TestTable;

/// The table's device directory, counting the writes of metric names that reach it.
struct Counting {
    inner: DynamoLookups,
    name_writes: AtomicUsize,
}

impl DeviceDirectory for Counting {
    async fn existing_devices(&self, ids: &[DeviceId]) -> Result<HashSet<DeviceId>, StoreError> {
        self.inner.existing_devices(ids).await
    }

    async fn metric_caps(&self, ids: &[DeviceId]) -> Result<HashMap<DeviceId, u32>, StoreError> {
        self.inner.metric_caps(ids).await
    }

    async fn add_metric_names(
        &self,
        device: &DeviceId,
        day: Day,
        new: &Names,
        room: Room,
    ) -> Result<Option<Names>, StoreError> {
        self.name_writes.fetch_add(1, Ordering::SeqCst);
        self.inner.add_metric_names(device, day, new, room).await
    }

    async fn read_metric_names(&self, device: &DeviceId, day: Day) -> Result<Names, StoreError> {
        self.inner.read_metric_names(device, day).await
    }
}

/// One reading of `device` at `at` carrying each of `metrics` (with its index as value).
fn reading(device: &str, at: &str, metrics: impl IntoIterator<Item = String>) -> Vec<u8> {
    let mut m = Map::new();
    m.insert("deviceId".into(), json!(device));
    m.insert("timestamp".into(), json!(at));
    for (i, name) in metrics.into_iter().enumerate() {
        m.insert(name, json!(i));
    }
    Value::Object(m).to_string().into_bytes()
}

fn names(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("m{i:04}")).collect()
}

/// `count` records of `device` on the day of `day` (hour 10, one second apart) carrying
/// 100 names each, from `m0000` on.
fn hundreds(device: &str, day: &str, count: usize) -> Vec<(String, Vec<u8>)> {
    (0..count)
        .map(|i| {
            let at = format!("{day}T10:00:{i:02}Z");
            (
                device.to_owned(),
                reading(device, &at, names(i * 100..(i + 1) * 100)),
            )
        })
        .collect()
}

/// The stored metrics of `device`'s reading at `at`.
async fn stored(t: &TestTable, device: &str, at: &str) -> Option<BTreeMap<String, f64>> {
    let key = EntityKey::Reading {
        device: dev(device),
        partition: None,
        at: ts(at),
    }
    .key();
    let item = get(&t.client, &t.name, &key.pk, &key.sk).await?;
    let r: tidemark_schema::ReadingItem = from_item(item).unwrap();
    Some(
        r.metrics
            .into_iter()
            .map(|(k, v)| (k.as_str().to_owned(), v))
            .collect(),
    )
}

async fn too_many(t: &TestTable) -> Vec<QuarantineItem> {
    scan(&t.client, &t.name)
        .await
        .into_iter()
        .filter(|i| {
            matches!(
                EntityKey::parse(&s(i, "pk"), &s(i, "sk")),
                Ok(EntityKey::Quarantine { .. })
            )
        })
        .map(|i| from_item::<QuarantineItem>(i).unwrap())
        .filter(|q| q.reason == QuarantineReason::TooManyMetrics)
        .collect()
}

async fn day_set(t: &TestTable, device: &str, day: &str) -> usize {
    let key = EntityKey::MetricNames {
        device: dev(device),
        day: Day::parse(day).unwrap(),
    }
    .key();
    match get(&t.client, &t.name, &key.pk, &key.sk).await {
        Some(item) => item["names"].as_ss().unwrap().len(),
        None => 0,
    }
}

fn ingest(t: &TestTable) -> Ingest<aws_sdk_dynamodb::Client, DynamoLookups, Counting> {
    let mut c = config(&t.name);
    c.device_identity = DeviceIdentity::Payload;
    c.max_metrics = 100;
    let devices = Counting {
        inner: DynamoLookups::new(t.client.clone(), t.name.clone()),
        name_writes: AtomicUsize::new(0),
    };
    let layouts = DynamoLookups::new(t.client.clone(), t.name.clone());
    Ingest::from_parts(c, t.client.clone(), layouts, devices, Clock::fixed(now()))
}

#[tokio::test]
async fn a_new_name_past_a_devices_1000_of_the_day_is_quarantined_and_its_readings_other_metrics_stored()
 {
    let t = TestTable::new("ingest-metric-cap").await;
    let ingest = ingest(&t);

    // GIVEN a device that sent 1,000 distinct names on 19 April
    let first = hundreds("sensor_01", "2026-04-19", 10);
    let (resp, stats) = ingest
        .process(&keyed_event_of(&first), soon())
        .await
        .unwrap();
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(stats.quarantined, 0);
    assert_eq!(day_set(&t, "sensor_01", "2026-04-19").await, 1000);
    assert_eq!(ingest.devices().name_writes.load(Ordering::SeqCst), 1);

    // WHEN it sends a reading with a known name and a new one that day, and the new one
    // on the next day
    let late = "2026-04-19T23:00:00Z";
    let next_day = "2026-04-20T09:00:00Z";
    let batch = vec![
        (
            "sensor_01".to_owned(),
            reading("sensor_01", late, ["m0007".into(), "brand_new".into()]),
        ),
        (
            "sensor_01".to_owned(),
            reading("sensor_01", next_day, ["brand_new".into()]),
        ),
    ];
    let (resp, stats) = ingest
        .process(&keyed_event_of(&batch), soon())
        .await
        .unwrap();

    // THEN the new name of the full day is quarantined as too_many_metrics, naming the
    // device, the day and the cap, and the reading keeps its known metric
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(
        stats.quarantined_by_reason[&QuarantineReason::TooManyMetrics],
        1
    );
    let q = too_many(&t).await;
    assert_eq!(q.len(), 1, "{q:?}");
    for part in [
        "\"sensor_01\"",
        "2026-04-19",
        "cap of 1000",
        "\"brand_new\"",
    ] {
        assert!(q[0].message.contains(part), "{part}: {}", q[0].message);
    }
    let kept = stored(&t, "sensor_01", late).await.unwrap();
    assert_eq!(kept.keys().collect::<Vec<_>>(), ["m0007"]);
    assert_eq!(day_set(&t, "sensor_01", "2026-04-19").await, 1000);
    // AND the next day admits it again
    let next = stored(&t, "sensor_01", next_day).await.unwrap();
    assert_eq!(next.keys().collect::<Vec<_>>(), ["brand_new"]);
    assert_eq!(day_set(&t, "sensor_01", "2026-04-20").await, 1);

    // AND a replay of the batch gets the same answer, by another container too
    let writes = ingest.devices().name_writes.load(Ordering::SeqCst);
    let (_, again) = ingest
        .process(&keyed_event_of(&batch), soon())
        .await
        .unwrap();
    assert_eq!(again.quarantined_by_reason, stats.quarantined_by_reason);
    assert_eq!(
        ingest.devices().name_writes.load(Ordering::SeqCst),
        writes,
        "names the container saw admitted, and a full day, cost no write"
    );
    let fresh = self::ingest(&t);
    let (_, replayed) = fresh
        .process(&keyed_event_of(&batch), soon())
        .await
        .unwrap();
    assert_eq!(replayed.quarantined_by_reason, stats.quarantined_by_reason);
    assert_eq!(stored(&t, "sensor_01", late).await.unwrap().len(), 1);
    assert_eq!(day_set(&t, "sensor_01", "2026-04-19").await, 1000);
}

#[tokio::test]
async fn a_gateway_with_a_raised_cap_keeps_more_names_and_a_reading_with_none_left_is_not_stored() {
    let t = TestTable::new("ingest-metric-cap-gw").await;
    // GIVEN a gateway registered with maxMetricsPerDay 1,100
    let mut gw = DeviceItem::new(
        dev("gw_1"),
        DeviceStatus::Active,
        ts("2026-04-01T00:00:00Z"),
    );
    gw.max_metrics_per_day = Some(1100);
    t.client
        .put_item()
        .table_name(&t.name)
        .set_item(Some(tidemark_store::to_item(&gw).unwrap()))
        .send()
        .await
        .unwrap();
    let ingest = ingest(&t);

    // WHEN it sends 1,100 names, then one more with a known one, and a reading of new
    // names only, in one batch
    let mut records = hundreds("gw_1", "2026-04-20", 11);
    records.push((
        "gw_1".into(),
        reading(
            "gw_1",
            "2026-04-20T11:00:00Z",
            ["m0000".into(), "m1100".into()],
        ),
    ));
    records.push((
        "gw_1".into(),
        reading("gw_1", "2026-04-20T11:00:01Z", ["m1101".into()]),
    ));
    let (resp, stats) = ingest
        .process(&keyed_event_of(&records), soon())
        .await
        .unwrap();

    // THEN its 1,100 are stored, and the names past them (last in name order) quarantined
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(
        stats.quarantined_by_reason[&QuarantineReason::TooManyMetrics],
        2
    );
    assert_eq!(day_set(&t, "gw_1", "2026-04-20").await, 1100);
    assert_eq!(
        stored(&t, "gw_1", "2026-04-20T10:00:10Z")
            .await
            .unwrap()
            .len(),
        100
    );
    let kept = stored(&t, "gw_1", "2026-04-20T11:00:00Z").await.unwrap();
    assert_eq!(kept.keys().collect::<Vec<_>>(), ["m0000"]);
    assert_eq!(stored(&t, "gw_1", "2026-04-20T11:00:01Z").await, None);
    let q = too_many(&t).await;
    assert!(q.iter().any(|q| q.message.contains("cap of 1100")), "{q:?}");
    assert!(
        q.iter()
            .any(|q| q.message.contains("nothing else of the record was left")),
        "{q:?}"
    );
}
