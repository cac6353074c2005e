//! `DEVICE_IDENTITY=partition-key` against DynamoDB Local (docs/design.md §3, "Device
//! identity"): a record speaks for the device its partition key names (a KPL user record for
//! its own key), and a registered gateway for the devices its `gatewayFor` lists. A reading
//! of any other device is quarantined as `identity_mismatch` with its record's bytes, and the
//! rest of its record is stored. Gateway lists are read once per cache period.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::*;
use serde_json::json;
use tidemark_ingest::{DeviceDirectory, DynamoLookups, Ingest};
use tidemark_schema::{
    Clock, DeviceId, DeviceIdentity, DeviceItem, DeviceStatus, EntityKey, GatewayFor,
    QuarantineItem, QuarantineReason,
};
use tidemark_store::{StoreError, from_item};
use tidemark_testkit::TestTable;

/// The table's device directory, counting the gateway lookups that reach it.
struct Counting {
    inner: DynamoLookups,
    gateway_reads: AtomicUsize,
}

impl DeviceDirectory for Counting {
    async fn existing_devices(&self, ids: &[DeviceId]) -> Result<HashSet<DeviceId>, StoreError> {
        self.inner.existing_devices(ids).await
    }

    async fn gateway_lists(
        &self,
        ids: &[DeviceId],
    ) -> Result<HashMap<DeviceId, GatewayFor>, StoreError> {
        self.gateway_reads.fetch_add(1, Ordering::SeqCst);
        self.inner.gateway_lists(ids).await
    }
}

fn stored(items: &[tidemark_store::Item]) -> BTreeSet<(String, i64)> {
    readings(items)
        .iter()
        .map(|r| {
            (
                r.pk.trim_start_matches("DEVICE#").to_owned(),
                r.metrics.values().next().copied().unwrap_or_default() as i64,
            )
        })
        .collect()
}

fn quarantined(items: &[tidemark_store::Item]) -> Vec<QuarantineItem> {
    items
        .iter()
        .filter(|i| {
            matches!(
                EntityKey::parse(&s(i, "pk"), &s(i, "sk")),
                Ok(EntityKey::Quarantine { .. })
            )
        })
        .map(|i| from_item(i.clone()).unwrap())
        .collect()
}

fn r(device: &str, second: u32, t: f64) -> serde_json::Value {
    json!({"deviceId": device, "timestamp": format!("2026-04-20T14:00:{second:02}Z"), "t": t})
}

#[tokio::test]
async fn a_record_speaks_for_its_partition_key_and_a_gateway_for_the_devices_it_lists() {
    let t = TestTable::new("ingest-identity").await;
    // GIVEN a gateway registered to speak for two devices
    let mut gw = DeviceItem::new(
        dev("gw_1"),
        DeviceStatus::Active,
        ts("2026-04-01T00:00:00Z"),
    );
    gw.gateway_for = GatewayFor::new([dev("leaf_1"), dev("leaf_2")]).unwrap();
    t.client
        .put_item()
        .table_name(&t.name)
        .set_item(Some(tidemark_store::to_item(&gw).unwrap()))
        .send()
        .await
        .unwrap();
    let mut c = config(&t.name);
    c.device_identity = DeviceIdentity::PartitionKey;
    let devices = Counting {
        inner: DynamoLookups::new(t.client.clone(), t.name.clone()),
        gateway_reads: AtomicUsize::new(0),
    };
    let layouts = DynamoLookups::new(t.client.clone(), t.name.clone());
    let ingest = Ingest::from_parts(c, t.client.clone(), layouts, devices, Clock::fixed(now()));

    // WHEN the gateway sends for itself, both its devices and one it does not list; a
    // sensor sends for itself and for another sensor; and a KPL aggregate carries a user
    // record keyed by its own device and one keyed by a device it does not name
    let gateway = json!([
        r("gw_1", 1, 1.0),
        r("leaf_1", 1, 2.0),
        r("leaf_2", 1, 3.0),
        r("leaf_9", 1, 4.0)
    ])
    .to_string();
    let sensor = json!([r("sensor_01", 2, 5.0), r("sensor_02", 2, 6.0)]).to_string();
    let only_other = r("sensor_03", 3, 7.0).to_string();
    let (u1, u2) = (
        r("kpl_1", 4, 8.0).to_string(),
        r("kpl_2", 4, 9.0).to_string(),
    );
    let aggregate = tidemark_ingest::kpl::aggregate(&[
        ("kpl_1", None, u1.as_bytes()),
        ("kpl_x", None, u2.as_bytes()),
    ]);
    let records: Vec<(&str, Vec<u8>)> = vec![
        ("gw_1", gateway.clone().into_bytes()),
        ("sensor_01", sensor.clone().into_bytes()),
        ("sensor_01", only_other.clone().into_bytes()),
        ("kpl_1", aggregate),
    ];
    let (resp, stats) = ingest
        .process(&keyed_event_of(&records), soon())
        .await
        .unwrap();
    assert!(resp.batch_item_failures.is_empty());

    // THEN every reading a record may carry is stored, and no other
    let items = scan(&t.client, &t.name).await;
    let want: BTreeSet<(String, i64)> = [
        ("gw_1", 1),
        ("leaf_1", 2),
        ("leaf_2", 3),
        ("sensor_01", 5),
        ("kpl_1", 8),
    ]
    .into_iter()
    .map(|(d, v)| (d.to_owned(), v))
    .collect();
    assert_eq!(stored(&items), want);
    // AND each record (or user record) with a reading of another device is kept whole
    let q = quarantined(&items);
    let by_seq = |i: usize, sub: Option<u32>| {
        q.iter()
            .find(|q| q.sequence_number == seq(i) && q.sub_record == sub)
            .unwrap_or_else(|| panic!("record {i} {sub:?} quarantined: {q:?}"))
    };
    assert_eq!(q.len(), 4, "{q:?}");
    for (i, sub, bytes, names) in [
        (0, None, gateway.as_bytes(), "leaf_9"),
        (1, None, sensor.as_bytes(), "sensor_02"),
        (2, None, only_other.as_bytes(), "sensor_03"),
        (3, Some(1), u2.as_bytes(), "kpl_2"),
    ] {
        let item = by_seq(i, sub);
        assert_eq!(item.reason, QuarantineReason::IdentityMismatch);
        assert_eq!(item.payload, bytes, "record {i}: its bytes as sent");
        assert!(item.message.contains(names), "{}", item.message);
    }
    assert_eq!(
        stats.quarantined_by_reason[&QuarantineReason::IdentityMismatch],
        4
    );

    // AND the gateway lists were read once (the records naming other devices' keys: gw_1,
    // sensor_01, kpl_x), and a second batch within the cache period reads none
    assert_eq!(ingest_reads(&ingest), 1);
    ingest
        .process(&keyed_event_of(&records[..1]), soon())
        .await
        .unwrap();
    assert_eq!(ingest_reads(&ingest), 1, "cached");
}

fn ingest_reads(ingest: &Ingest<aws_sdk_dynamodb::Client, DynamoLookups, Counting>) -> usize {
    ingest.devices().gateway_reads.load(Ordering::SeqCst)
}
