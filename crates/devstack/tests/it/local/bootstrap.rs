use tidemark_devstack::{LocalConfig, bootstrap};
use tidemark_testkit::{services, unique_name};

#[tokio::test]
async fn bootstrap_creates_table_and_stream_and_can_run_twice() {
    let s = services();
    let cfg = LocalConfig {
        table: unique_name("boot"),
        stream: unique_name("boot"),
        stream_shards: 2,
        dynamodb_endpoint: s.dynamodb_endpoint.clone(),
        kinesis_endpoint: s.kinesis_endpoint.clone(),
    };
    bootstrap(&cfg).await.unwrap();
    bootstrap(&cfg).await.unwrap();

    let ddb = cfg.dynamodb().await;
    let t = ddb
        .describe_table()
        .table_name(&cfg.table)
        .send()
        .await
        .unwrap();
    assert_eq!(
        t.table().unwrap().table_status().unwrap().as_str(),
        "ACTIVE"
    );
    let kin = cfg.kinesis().await;
    let shards = kin
        .list_shards()
        .stream_name(&cfg.stream)
        .send()
        .await
        .unwrap();
    assert_eq!(shards.shards().len(), 2);

    ddb.delete_table()
        .table_name(&cfg.table)
        .send()
        .await
        .unwrap();
    kin.delete_stream()
        .stream_name(&cfg.stream)
        .send()
        .await
        .unwrap();
}
