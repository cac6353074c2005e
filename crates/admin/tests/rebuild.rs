//! `tidemark-admin rebuild` against DynamoDB Local while devstack's pipeline keeps applying
//! new, late and corrected readings of the same device.

mod common;

use std::time::Duration;

use common::{Stack, ago, reading, readings_in};
use tidemark_admin::{Rebuild, Rebuilder};
use tidemark_schema::{AggregateItem, DeviceId, EntityKey};
use tidemark_testkit::{rollups, services};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rebuild_while_readings_keep_arriving_leaves_every_rollup_exact() {
    // GIVEN a hot device, rb-1, whose readings are spread over three partitions
    let stack = Stack::new("rebuild").await;
    let hot = tidemark_schema::ShardConfigItem::new(
        &DeviceId::new("rb-1").unwrap(),
        tidemark_schema::ShardHistory::from_epochs(vec![tidemark_schema::shard::ShardEpoch {
            from: ago(24 * 60),
            count: 3,
            slot: None,
        }])
        .unwrap(),
    );
    stack
        .table
        .client
        .put_item()
        .table_name(&stack.table.name)
        .set_item(Some(tidemark_store::to_item(&hot).unwrap()))
        .send()
        .await
        .unwrap();
    // AND a running pipeline that has stored and rolled up its and another device's readings
    // (the aggregator's 2 s window keeps the table well ahead of it, as on AWS)
    let pipeline = stack
        .pipeline(services().dynamodb_endpoint.clone(), |name, m| {
            if name == "aggregator" {
                tidemark_devstack::esm::MappingConfig {
                    batching_window: Duration::from_secs(2),
                    ..m
                }
            } else {
                m
            }
        })
        .await;
    let now = ago(0);
    let t = move |minutes: i64| now.minus_millis(minutes * 60_000).unwrap();
    let mut first = Vec::new();
    for i in 0..40 {
        first.push(reading("rb-1", t(150 - i * 3), i % 17));
        first.push(reading("rb-2", t(150 - i * 3), i % 5));
    }
    stack.publish(&first).await;
    stack.wait_exact(80, Duration::from_secs(60)).await;

    // AND rb-1's rollups corrupted (wrong counts and sums)
    let ddb = stack.table.client.clone();
    for item in stack.table.scan().await {
        let Ok(mut agg) = tidemark_store::from_item::<AggregateItem>(item) else {
            continue;
        };
        if !matches!(EntityKey::parse(&agg.pk, &agg.sk), Ok(EntityKey::Aggregate { device, .. }) if device.as_str() == "rb-1")
        {
            continue;
        }
        for s in agg.metrics.values_mut() {
            s.count += 100;
            s.sum += 1000.0;
        }
        ddb.put_item()
            .table_name(&stack.table.name)
            .set_item(Some(tidemark_store::to_item(&agg).unwrap()))
            .send()
            .await
            .unwrap();
    }
    assert!(!rollups::differences(&stack.table.scan().await).is_empty());

    // WHEN rb-1 is rebuilt while its new, late and corrected readings keep arriving
    let feeder = {
        let stack_stream = stack.stream.client.clone();
        let name = stack.stream.name.clone();
        tokio::spawn(async move {
            for wave in 0..8i64 {
                let mut batch = Vec::new();
                for k in 0..3 {
                    batch.push(reading(
                        "rb-1",
                        ago(0).minus_millis(wave * 1_000 + k * 100 + 7).unwrap(),
                        20 + k,
                    ));
                }
                for k in 0..2 {
                    // Late: inside the oldest hours, at times no reading had yet.
                    batch.push(reading("rb-1", t(149 - wave * 3 - k), 30 + wave));
                }
                // A correction of an already stored reading's value.
                batch.push(reading("rb-1", t(150 - wave * 3), 50 + wave));
                let entries = batch
                    .iter()
                    .map(|(k, json)| {
                        aws_sdk_kinesis::types::PutRecordsRequestEntry::builder()
                            .partition_key(k)
                            .data(aws_sdk_kinesis::primitives::Blob::new(json.as_bytes()))
                            .build()
                            .unwrap()
                    })
                    .collect();
                stack_stream
                    .put_records()
                    .stream_name(&name)
                    .set_records(Some(entries))
                    .send()
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(400)).await;
            }
        })
    };
    // Start once the first wave is in the table, before the aggregator (2 s window) has
    // applied it: the moment where "recompute and keep the watermark" would count it twice.
    let t0 = std::time::Instant::now();
    while pipeline.ingest.delivered() < 80 + 6 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the first wave never arrived"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rebuilder = Rebuilder::new(
        ddb.clone(),
        tidemark_devstack::LocalConfig {
            dynamodb_endpoint: services().dynamodb_endpoint.clone(),
            ..tidemark_devstack::LocalConfig::from_env()
        }
        .dynamodb_streams()
        .await,
        stack.table.name.clone(),
    );
    let report = rebuilder
        .rebuild(&Rebuild {
            device: DeviceId::new("rb-1").unwrap(),
            from: t(150),
            to: now.plus_millis(60_000).unwrap(),
        })
        .await
        .unwrap();
    feeder.await.unwrap();

    // THEN once the pipeline has drained, every rollup equals the recomputation
    let stored = 80 + 8 * 5;
    stack.wait_exact(stored, Duration::from_secs(60)).await;
    assert!(report.written >= 2, "{report:?}");
    assert_eq!(report.partitions, 3);
    // AND no fence item is left behind, and the corrections landed
    let items = stack.table.scan().await;
    assert!(
        items
            .iter()
            .all(|i| i.get("sk").and_then(|v| v.as_s().ok()).map(String::as_str) != Some("#FENCE"))
    );
    assert_eq!(
        readings_in(&items)[&("rb-1".to_owned(), t(150 - 7 * 3).epoch_millis())],
        57.0
    );
    pipeline.stop().await;
}
