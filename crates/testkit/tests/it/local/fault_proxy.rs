//! The fault proxy in front of DynamoDB Local: errors as DynamoDB sends them while on, the
//! real answers again once recovered.

use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_store::ClientSettings;
use tidemark_testkit::{Fault, FaultProxy, TestTable, services};

#[tokio::test]
async fn while_on_every_call_fails_as_dynamodb_fails_and_after_recovery_calls_pass() {
    // GIVEN a table and a client (no SDK retries) talking to it through the proxy
    let table = TestTable::new("fault-proxy").await;
    let proxy = FaultProxy::start(services().dynamodb_addr()).await.unwrap();
    let client = tidemark_store::dynamodb_client(&ClientSettings {
        max_attempts: 1,
        ..ClientSettings::local(proxy.endpoint())
    })
    .await;
    let put = || {
        client
            .put_item()
            .table_name(&table.name)
            .item("pk", AttributeValue::S("p".into()))
            .item("sk", AttributeValue::S("s".into()))
            .send()
    };
    put().await.expect("healthy proxy forwards");

    // WHEN it throttles, THEN the SDK sees DynamoDB's ThrottlingException
    proxy.fail_with(Fault::Throttling);
    let e = put().await.unwrap_err();
    assert_eq!(
        aws_sdk_dynamodb::error::ProvideErrorMetadata::code(&e),
        Some("ThrottlingException")
    );
    // WHEN it has an outage, THEN a 500 InternalServerError
    proxy.fail_with(Fault::InternalServerError);
    let e = put().await.unwrap_err();
    assert_eq!(
        aws_sdk_dynamodb::error::ProvideErrorMetadata::code(&e),
        Some("InternalServerError")
    );
    assert_eq!(e.raw_response().map(|r| r.status().as_u16()), Some(500));
    // WHEN both, THEN the errors alternate
    proxy.fail_with(Fault::Both);
    let codes: Vec<String> = futures_codes(&put).await;
    assert!(codes.contains(&"ThrottlingException".to_owned()));
    assert!(codes.contains(&"InternalServerError".to_owned()));
    // WHEN it recovers, THEN calls reach DynamoDB Local again
    proxy.recover();
    put().await.expect("recovered proxy forwards");
    assert_eq!(proxy.failed_calls(), 4);
    let got = table
        .client
        .get_item()
        .table_name(&table.name)
        .key("pk", AttributeValue::S("p".into()))
        .key("sk", AttributeValue::S("s".into()))
        .send()
        .await
        .unwrap();
    assert!(got.item.is_some());
}

async fn futures_codes<F, Fut, T, E>(put: &F) -> Vec<String>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata,
{
    let mut out = Vec::new();
    for _ in 0..2 {
        if let Err(e) = put().await {
            out.push(e.code().unwrap_or_default().to_owned());
        }
    }
    out
}
