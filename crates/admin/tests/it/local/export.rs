//! `tidemark-admin --local export` as an operator runs it, against DynamoDB Local and moto's
//! S3: the closed hours of the range land in the bucket with their manifests, and the
//! summary says how many hours and readings.

use std::process::Command;

use tidemark_schema::{
    DeviceId, DeviceItem, DeviceStatus, MetricName, Reading, ReadingItem, Timestamp,
};
use tidemark_testkit::{TestTable, services, unique_name};

fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

fn port(endpoint: &str) -> &str {
    endpoint.rsplit_once(':').unwrap().1
}

#[tokio::test]
async fn export_writes_the_closed_hours_of_a_range_to_the_bucket() {
    // GIVEN a device with readings in two hours of a past day
    let t = TestTable::new("admin-export").await;
    t.put(&DeviceItem::new(
        DeviceId::new("d1").unwrap(),
        DeviceStatus::Active,
        ts("2026-04-01T00:00:00Z"),
    ))
    .await;
    for (i, at) in [
        "2026-04-20T08:10:00Z",
        "2026-04-20T08:20:00Z",
        "2026-04-20T09:10:00Z",
    ]
    .iter()
    .enumerate()
    {
        t.put(&ReadingItem::new(
            &Reading {
                device_id: DeviceId::new("d1").unwrap(),
                timestamp: ts(at),
                metrics: [(MetricName::new("t").unwrap(), i as f64)].into(),
                metadata: None,
            },
            None,
            3650,
        ))
        .await;
    }
    let s = services();
    let bucket = unique_name("admin-export").to_lowercase();
    // WHEN the operator exports the day with --local
    let out = Command::new(env!("CARGO_BIN_EXE_tidemark-admin"))
        .args([
            "--local",
            "export",
            "--from",
            "2026-04-20T00:00:00Z",
            "--to",
            "2026-04-21T00:00:00Z",
            "--bucket",
            &bucket,
            "--prefix",
            "lake",
        ])
        .env("TABLE_NAME", &t.name)
        .env("TIDEMARK_DYNAMODB_PORT", port(&s.dynamodb_endpoint))
        .env("TIDEMARK_KINESIS_PORT", port(&s.kinesis_endpoint))
        .env("TIDEMARK_S3_PORT", port(&s.s3_endpoint))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // THEN it says what it wrote
    assert!(
        stdout.contains("exported 24 hour(s) and 1 day(s) of daily rollups to s3://"),
        "{stdout}"
    );
    assert!(stdout.contains(": 3 readings, 3 rows"), "{stdout}");
    // AND the bucket holds every hour's manifest, counting that hour's readings
    let s3 = tidemark_exporter::s3::client(&Default::default(), Some(&s.s3_endpoint)).await;
    let manifest = |key: &str| {
        let s3 = s3.clone();
        let bucket = bucket.clone();
        let key = format!("lake/{key}");
        async move {
            let o = s3
                .get_object()
                .bucket(bucket)
                .key(key)
                .send()
                .await
                .unwrap();
            let body = o.body.collect().await.unwrap().into_bytes();
            serde_json::from_slice::<serde_json::Value>(&body).unwrap()
        }
    };
    let hour = |h: &str| format!("readings/dt=2026-04-20/hour={h}/_manifest.json");
    assert_eq!(manifest(&hour("08")).await["readings"], 2);
    assert_eq!(manifest(&hour("09")).await["readings"], 1);
    assert_eq!(manifest(&hour("23")).await["readings"], 0);
    // AND the day's daily rollups, one row for the device's one metric
    let day = manifest("rollups/period=daily/dt=2026-04-20/_manifest.json").await;
    assert_eq!((&day["readings"], &day["rows"]), (&3.into(), &1.into()));
}
