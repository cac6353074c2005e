//! `tidemark-admin rebuild` against DynamoDB Local while devstack's pipeline keeps applying
//! new, late and corrected readings of the same device.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;

use crate::common::{Stack, ago, corrupt_rollups, reading, readings_in};
use tidemark_admin::{Rebuild, Rebuilder};
use tidemark_schema::history::LayoutEpoch;
use tidemark_schema::packed::SlotReadings;
use tidemark_schema::table::attr;
use tidemark_schema::{
    DeviceId, DeviceItem, DeviceStatus, LayoutHistory, LayoutHistoryItem, MetricName, SlotLen,
    Timestamp, field, keys,
};
use tidemark_store::retry::RetryPolicy;
use tidemark_store::write::slots::{SlotKey, SlotWriter};
use tidemark_testkit::services;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rebuild_while_readings_keep_arriving_leaves_every_rollup_exact() {
    // GIVEN a hot device, rb-1, whose readings are spread over three partitions
    let stack = Stack::new("rebuild").await;
    let hot = tidemark_schema::LayoutHistoryItem::new(
        &DeviceId::new("rb-1").unwrap(),
        tidemark_schema::LayoutHistory::from_epochs(vec![tidemark_schema::history::LayoutEpoch {
            // Before the whole days the rebuild covers (the day 150 minutes ago may be
            // yesterday): three partitions over all of them, whatever the time of day.
            from: ago(3 * 24 * 60),
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
            if name == "rollups" {
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
    corrupt_rollups(&stack, "rb-1").await;
    let ddb = stack.table.client.clone();

    // WHEN rb-1 is rebuilt while its new, late and corrected readings keep arriving
    // The new readings' times are fixed before the feeder starts: read from the clock per
    // wave, a slow put could land two waves' readings on one millisecond, one reading.
    let live = ago(0);
    let feeder = {
        let stack_stream = stack.stream.client.clone();
        let name = stack.stream.name.clone();
        tokio::spawn(async move {
            for wave in 0..8i64 {
                let mut batch = Vec::new();
                for k in 0..3 {
                    batch.push(reading(
                        "rb-1",
                        live.minus_millis(wave * 1_000 + k * 100 + 7).unwrap(),
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

/// Writes `readings` (seconds after `base` → temperature) of `device` into their 60 s slots.
async fn write_packed(
    writer: &SlotWriter,
    device: &DeviceId,
    base: Timestamp,
    readings: &[(i64, f64)],
) {
    let len = SlotLen::new(60).unwrap();
    let mut slots: BTreeMap<Timestamp, SlotReadings> = BTreeMap::new();
    for (s, v) in readings {
        let at = base.plus_millis(s * 1000).unwrap();
        slots.entry(len.start_of(at)).or_default().insert(
            at,
            BTreeMap::from([(MetricName::new("temperature").unwrap(), *v)]),
        );
    }
    for (start, r) in slots {
        let key = SlotKey {
            pk: keys::reading_pk(device, None),
            start,
            len,
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        writer
            .write(&key, &r, 4_000_000_000, deadline)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rebuild_of_a_device_with_a_packed_epoch_reads_its_slots_and_stays_exact() {
    // GIVEN rp-1, storing single items until an hour ago and 60 s slots since
    let stack = Stack::new("rebuild-packed").await;
    let d = DeviceId::new("rp-1").unwrap();
    let len = SlotLen::new(60).unwrap();
    let switch = len.start_of(ago(60));
    let history = LayoutHistoryItem::new(
        &d,
        LayoutHistory::from_epochs(vec![LayoutEpoch {
            from: switch,
            count: 1,
            slot: Some(len),
        }])
        .unwrap(),
    );
    let ddb = stack.table.client.clone();
    ddb.put_item()
        .table_name(&stack.table.name)
        .set_item(Some(tidemark_store::to_item(&history).unwrap()))
        .send()
        .await
        .unwrap();
    // AND a running pipeline rolling up its single readings and packed slots (some split
    // into parts), and a corrupt part it must skip
    let pipeline = stack
        .pipeline(services().dynamodb_endpoint.clone(), |_, m| m)
        .await;
    let singles: Vec<_> = (0..30)
        .map(|i| {
            reading(
                "rp-1",
                switch.minus_millis((3 + i * 3) * 60_000).unwrap(),
                i % 7,
            )
        })
        .collect();
    stack.publish(&singles).await;
    let writer = SlotWriter {
        part_bytes: 60,
        ..SlotWriter::new(ddb.clone(), &stack.table.name, RetryPolicy::default())
    };
    let packed: Vec<(i64, f64)> = (0..40).map(|i| (i * 70, (i % 11) as f64)).collect();
    for chunk in packed.chunks(7) {
        write_packed(&writer, &d, switch, chunk).await;
    }
    ddb.put_item()
        .table_name(&stack.table.name)
        .item("pk", AttributeValue::S(keys::reading_pk(&d, None)))
        .item(
            "sk",
            AttributeValue::S(keys::slot_sk(switch.plus_millis(58 * 60_000).unwrap(), 0)),
        )
        .item(field::PACKED, AttributeValue::B(Blob::new(vec![1, 3, 255])))
        .item(field::READING_COUNT, AttributeValue::N("3".into()))
        .item(field::VERSION, AttributeValue::N("1".into()))
        .item(attr::TTL, AttributeValue::N("4000000000".into()))
        .send()
        .await
        .unwrap();
    stack.wait_exact(70, Duration::from_secs(60)).await;
    // AND its rollups corrupted
    corrupt_rollups(&stack, "rp-1").await;

    // WHEN it is rebuilt while new packed readings and corrections keep arriving, as fast as
    // they can be written, so the aggregator moves past the first fence while the rebuild
    // runs (the rebuild must roll its buckets forward through slot records)
    let feeder = {
        let (writer, d) = (writer.clone(), d.clone());
        tokio::spawn(async move {
            for wave in 0..30i64 {
                let new = [(wave * 70 + 30, 20.0), (wave * 70 + 31, 21.0)];
                let fix = [(wave * 70, 50.0 + wave as f64)];
                write_packed(&writer, &d, switch, &new).await;
                write_packed(&writer, &d, switch, &fix).await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
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
            device: d.clone(),
            from: switch.minus_millis(100 * 60_000).unwrap(),
            to: ago(0),
        })
        .await
        .unwrap();
    feeder.await.unwrap();

    // THEN every rollup is exact once the pipeline has drained, the rebuild read both epochs
    // and skipped (and counted) the corrupt part
    stack.wait_exact(70 + 60, Duration::from_secs(60)).await;
    assert!(report.readings >= 70, "{report:?}");
    assert_eq!(report.unreadable, 1, "{report:?}");
    assert_eq!(report.partitions, 1);
    // (the range runs to now: today's day, at least, is still open and left a placeholder)
    assert!(report.left_open >= 1, "{report:?}");
    let items = stack.table.scan().await;
    assert_eq!(
        readings_in(&items)[&(
            "rp-1".to_owned(),
            switch.plus_millis(7 * 70_000).unwrap().epoch_millis()
        )],
        57.0
    );
    pipeline.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rebuild_of_a_paged_bucket_gives_the_rollups_the_aggregator_gave() {
    // GIVEN a gateway whose 1,280 tags (32 a record) make its rollups outgrow one page,
    // rolled up by the running pipeline (in an hour already closed: an open hour is a
    // placeholder, written whole when it closes); registered with a cap on metric names per
    // day above its 1,280 (the default, 1,000, would quarantine the last 280)
    let stack = Stack::new("rebuild-paged").await;
    let mut gateway = DeviceItem::new(
        DeviceId::new("gw-1").unwrap(),
        DeviceStatus::Active,
        ago(24 * 60),
    );
    gateway.max_metrics_per_day = Some(2_000);
    stack.table.put(&gateway).await;
    let pipeline = stack
        .pipeline(services().dynamodb_endpoint.clone(), |_, m| m)
        .await;
    let base = ago(80);
    let records: Vec<(String, String)> = (0..40)
        .map(|i| {
            let at = base.plus_millis(i * 1_000).unwrap();
            let tags: Vec<String> = (0..32)
                .map(|k| format!(r#""gateway_plc_01_register_{:05}":{}"#, i * 32 + k, k + i))
                .collect();
            (
                "gw-1".to_owned(),
                format!(
                    r#"{{"deviceId":"gw-1","timestamp":"{at}",{}}}"#,
                    tags.join(",")
                ),
            )
        })
        .collect();
    stack.publish(&records).await;
    stack.wait_exact(40, Duration::from_secs(60)).await;
    let items = stack.table.scan().await;
    let paged = items.iter().any(|i| {
        i.get("sk")
            .and_then(|v| v.as_s().ok())
            .is_some_and(|sk| sk.starts_with(keys::AGG_PAGE_PREFIX))
    });
    assert!(paged, "the gateway's rollups are paged");
    let by_aggregator = tidemark_testkit::rollups::stored(&items);
    assert_eq!(
        by_aggregator.values().map(|r| r.metrics.len()).max(),
        Some(1_280)
    );

    // WHEN its rollups are corrupted and rebuilt
    corrupt_rollups(&stack, "gw-1").await;
    let rebuilder = Rebuilder::new(
        stack.table.client.clone(),
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
            device: DeviceId::new("gw-1").unwrap(),
            from: base,
            to: base.plus_millis(60_000).unwrap(),
        })
        .await
        .unwrap();

    // THEN the rollups are those the aggregator gave, page by page under the limit
    assert!(report.written >= 4, "{report:?}");
    stack.wait_exact(40, Duration::from_secs(60)).await;
    let items = stack.table.scan().await;
    assert_eq!(tidemark_testkit::rollups::stored(&items), by_aggregator);
    for i in &items {
        assert!(tidemark_store::limits::item_size(i) < tidemark_store::limits::MAX_ITEM_BYTES);
    }
    pipeline.stop().await;
}
