//! The export through moto's S3 server (`scripts/services.sh`): the same objects, byte for
//! byte, as the in-memory sink holds for the same hour, and a later, smaller export of the
//! hour leaves nothing of the earlier one behind.

use tidemark_exporter::dynamo::DynamoExportTable;
use tidemark_exporter::hour::export_hour;
use tidemark_exporter::s3::{S3Sink, client};
use tidemark_exporter::sink::{MemorySink, Sink};
use tidemark_store::ClientSettings;
use tidemark_testkit::{TestTable, services, unique_name};

use crate::common::*;

async fn bucket() -> S3Sink {
    let client = client(&ClientSettings::default(), Some(&services().s3_endpoint)).await;
    let bucket = unique_name("export").to_lowercase().replace('_', "-");
    client.create_bucket().bucket(&bucket).send().await.unwrap();
    S3Sink { client, bucket }
}

#[tokio::test]
async fn s3_holds_what_the_export_writes_and_nothing_an_earlier_export_left() {
    // GIVEN a device with readings over an hour, exported to S3 and to memory
    let t = TestTable::new("export-s3").await;
    register(&t, "d1").await;
    let hour = ts("2026-04-20T10:00:00Z");
    for s in 0..600 {
        store(
            &t,
            &reading(
                "d1",
                hour.plus_millis(s * 6_000).unwrap(),
                &[("t", s as f64)],
                None,
            ),
        )
        .await;
    }
    let source = DynamoExportTable::new(t.client.clone(), &t.name, 1);
    let s3 = bucket().await;
    let memory = MemorySink::default();
    export_hour(&source, &s3, "tidemark", hour).await.unwrap();
    export_hour(&source, &memory, "tidemark", hour)
        .await
        .unwrap();
    // THEN S3 holds the same keys with the same bytes
    let keys = s3.keys("tidemark/").await.unwrap();
    assert_eq!(keys, memory.all().keys().cloned().collect::<Vec<_>>());
    for k in &keys {
        let got = s3
            .client
            .get_object()
            .bucket(&s3.bucket)
            .key(k)
            .send()
            .await
            .unwrap();
        let body = got.body.collect().await.unwrap().into_bytes();
        assert_eq!(body.as_ref(), memory.get(k).unwrap().as_slice(), "{k}");
    }
    // WHEN an extra part lies in the hour's folder and the hour is exported again
    let stale = "tidemark/readings/dt=2026-04-20/hour=10/part-00007.parquet";
    s3.put(
        stale,
        b"left by a larger export".to_vec(),
        "application/octet-stream",
    )
    .await
    .unwrap();
    export_hour(&source, &s3, "tidemark", hour).await.unwrap();
    // THEN it is gone and the rest is as before
    assert_eq!(s3.keys("tidemark/").await.unwrap(), keys);
}
