//! A gateway's `gatewayFor` (docs/design.md §3, "Device identity"): the devices it may send
//! readings for under `DEVICE_IDENTITY=partition-key`, set with `PUT /devices/{id}`, shown by
//! `GET /devices/{id}`, refused naming the field when malformed. Against DynamoDB Local.

use crate::common::*;
use serde_json::json;
use tidemark_schema::{DeviceItem, EntityKey, MAX_GATEWAY_FOR};
use tidemark_store::from_item;
use tidemark_testkit::TestTable;

#[tokio::test]
async fn a_gateway_lists_the_devices_it_speaks_for_and_a_put_without_the_list_clears_it() {
    let t = TestTable::new("api-gateway-for").await;
    let app = app(&t);
    // WHEN a gateway is registered with the devices behind it (one named twice)
    let body = json!({"type": "gateway", "gatewayFor": ["leaf_2", "leaf_1", "leaf_2"]});
    let (status, put) = call(&app, "PUT", "/devices/gw_1", &body.to_string()).await;
    assert_eq!(status, 201, "{put}");
    // THEN the route answers them once each, and the item holds them for ingest
    assert_eq!(put["gatewayFor"], json!(["leaf_1", "leaf_2"]));
    let (status, got) = get(&app, "/devices/gw_1").await;
    assert_eq!(status, 200);
    assert_eq!(got["gatewayFor"], json!(["leaf_1", "leaf_2"]));
    let key = EntityKey::Device(dev("gw_1")).key();
    let item = t
        .client
        .get_item()
        .table_name(&t.name)
        .set_key(Some(tidemark_store::batch_get::key_item(&key)))
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    let d: DeviceItem = from_item(item).unwrap();
    assert!(d.gateway_for.contains(&dev("leaf_1")) && d.gateway_for.len() == 2);
    // WHEN it is registered again without the list (PUT replaces the registration)
    let (status, put) = call(&app, "PUT", "/devices/gw_1", r#"{"type":"gateway"}"#).await;
    assert_eq!(status, 200);
    // THEN it speaks for no one else any more
    assert!(put.get("gatewayFor").is_none(), "{put}");
}

#[tokio::test]
async fn a_malformed_gateway_list_is_refused_naming_gateway_for() {
    let t = TestTable::new("api-gateway-for-bad").await;
    let app = app(&t);
    let too_many: Vec<String> = (0..=MAX_GATEWAY_FOR).map(|i| format!("d{i}")).collect();
    for (body, names) in [
        (json!({"gatewayFor": "leaf_1"}), "gatewayFor"),
        (json!({"gatewayFor": [7]}), "gatewayFor[0]"),
        (json!({"gatewayFor": ["leaf_1", "bad#id"]}), "gatewayFor[1]"),
        (json!({"gatewayFor": too_many}), "gatewayFor"),
    ] {
        let (status, err) = call(&app, "PUT", "/devices/gw_2", &body.to_string()).await;
        assert_eq!(status, 400, "{body}: {err}");
        let message = err["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("invalid {names}:")),
            "{message}"
        );
    }
    let (status, _) = get(&app, "/devices/gw_2").await;
    assert_eq!(status, 404, "nothing was written");
}

#[tokio::test]
async fn a_gateway_may_list_a_thousand_devices_of_the_longest_ids_in_one_put() {
    let t = TestTable::new("api-gateway-for-longest").await;
    let app = app(&t);
    // GIVEN the largest list a gateway may hold: 1,000 distinct ids of the longest length
    let longest: Vec<String> = (0..MAX_GATEWAY_FOR)
        .map(|i| {
            format!(
                "{i:04}{}",
                "x".repeat(tidemark_schema::DeviceId::MAX_LEN - 4)
            )
        })
        .collect();
    let body = json!({"type": "gateway", "tags": {"site": "A"}, "gatewayFor": longest});
    // WHEN it is registered with them
    let (status, put) = call(&app, "PUT", "/devices/gw_3", &body.to_string()).await;
    // THEN it is stored whole
    assert_eq!(status, 201, "{put}");
    assert_eq!(
        put["gatewayFor"].as_array().map(Vec::len),
        Some(MAX_GATEWAY_FOR)
    );
}
