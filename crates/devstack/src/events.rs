//! Sample Lambda events dated now, for `sam local invoke` and `cargo lambda invoke`
//! (`make events`). The committed `events/*.json` are test fixtures pinned to 2026-04-20;
//! once that is more than the retention ago, ingest rightly quarantines their readings as too
//! old. These are the same events with current times: readings of the last few minutes, the
//! stream records ingest's items make (built by ingest's own code, so they always match what
//! it writes), and HTTP API requests for those devices and times.

use std::path::{Path, PathBuf};

use aws_sdk_kinesis::primitives::{Blob, DateTime};
use base64::Engine;
use serde_json::{Value, json};
use tidemark_ingest::{IngestConfig, decode_record, reading_item};
use tidemark_schema::Timestamp;
use tidemark_schema::table::attr;
use tidemark_streams::KinesisSource;

use crate::DevstackError;

const REGION: &str = "us-east-1";
const ACCOUNT: &str = "123456789012";
const TABLE: &str = "tidemark";

/// Writes the sample events into `dir` (created if needed); returns the files written.
pub fn write_sample_events(dir: &Path, now: Timestamp) -> Result<Vec<PathBuf>, DevstackError> {
    std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
    let mut written = Vec::new();
    for (name, event) in sample_events(now)? {
        let path = dir.join(name);
        let text = serde_json::to_string_pretty(&event).map_err(json_error)?;
        std::fs::write(&path, text + "\n").map_err(|e| io_error(&path, e))?;
        written.push(path);
    }
    Ok(written)
}

fn io_error(path: &Path, e: std::io::Error) -> DevstackError {
    DevstackError::Events(format!("{}: {e}", path.display()))
}

fn json_error(e: serde_json::Error) -> DevstackError {
    DevstackError::Events(e.to_string())
}

fn at(now: Timestamp, minutes_ago: i64) -> Timestamp {
    now.minus_millis(minutes_ago * 60_000).unwrap_or(now)
}

/// RFC 3339 in UTC, as a device would send it.
fn rfc3339(t: Timestamp) -> String {
    t.to_string()
}

/// Every sample event by file name.
pub fn sample_events(now: Timestamp) -> Result<Vec<(&'static str, Value)>, DevstackError> {
    let good = good_payloads(now);
    let bad = bad_payloads(now);
    Ok(vec![
        ("kinesis-readings.json", kinesis_event(now, &good)?),
        ("kinesis-bad-records.json", kinesis_event(now, &bad)?),
        ("ddb-stream-readings.json", stream_event(now, &good)?),
        ("ddb-stream-ttl-remove.json", ttl_remove_event(now)?),
        ("ddb-stream-alert-opened.json", alert_opened_event(now)?),
        (
            "scheduled-watchdog.json",
            scheduled_event(now, "tidemark-watchdog"),
        ),
        (
            "scheduled-exporter.json",
            scheduled_event(now, "tidemark-exporter"),
        ),
        (
            "apigw-get-device.json",
            http_event(now, "GET /devices/{id}", "/devices/sensor_01", "", None),
        ),
        (
            "apigw-latest-reading.json",
            http_event(
                now,
                "GET /devices/{id}/readings/latest",
                "/devices/sensor_01/readings/latest",
                "",
                None,
            ),
        ),
        (
            "apigw-list-readings.json",
            http_event(
                now,
                "GET /devices/{id}/readings",
                "/devices/sensor_01/readings",
                &format!(
                    "from={}&to={}&limit=100&order=asc",
                    rfc3339(at(now, 60)),
                    rfc3339(now)
                ),
                None,
            ),
        ),
        (
            "apigw-fleet-alerts.json",
            http_event(
                now,
                "GET /alerts",
                "/alerts",
                "severity=critical&state=open",
                None,
            ),
        ),
        (
            "apigw-group-series.json",
            http_event(
                now,
                "GET /groups/series",
                "/groups/series",
                &format!(
                    "tag=site:A&metric=temperature&from={}&to={}&resolution=1h",
                    rfc3339(at(now, 24 * 60)),
                    rfc3339(now)
                ),
                None,
            ),
        ),
        (
            "apigw-put-device.json",
            http_event(
                now,
                "PUT /devices/{id}",
                "/devices/sensor_02",
                "",
                Some(
                    json!({"name": "Warehouse Temp B", "type": "sensor", "status": "active",
                    "firmware": "2.1.0", "location": {"lat": 52.52, "lon": 13.405, "site": "Hall 3"},
                    "thresholds": {"temperature": {"max": 30, "severity": "critical"}}}),
                ),
            ),
        ),
    ])
}

/// One record per entry: (partition key, data).
fn good_payloads(now: Timestamp) -> Vec<(&'static str, Vec<u8>)> {
    let r = |v: Value| v.to_string().into_bytes();
    vec![
        (
            "sensor_01",
            r(
                json!({"deviceId": "sensor_01", "timestamp": rfc3339(at(now, 3)), "temperature": 22.4,
                "humidity": 45, "pressure": 1013.2, "battery": 87, "metadata": {"fw": "2.1.0"}}),
            ),
        ),
        (
            "sensor_02",
            r(json!([
                {"deviceId": "sensor_02", "timestamp": rfc3339(at(now, 3)), "temperature": 19.1, "humidity": 51},
                {"deviceId": "sensor_02", "timestamp": rfc3339(at(now, 2)), "temperature": 31.2, "humidity": 50},
            ])),
        ),
        (
            "sensor_01",
            r(
                json!({"deviceId": "sensor_01", "timestamp": rfc3339(at(now, 2)), "temperature": 22.5,
                "humidity": 44, "battery": 87}),
            ),
        ),
        (
            "gateway_07",
            r(
                json!({"deviceId": "gateway_07", "timestamp": at(now, 1).epoch_millis(), "cpu": 0.42,
                "uplinkRssi": -71}),
            ),
        ),
    ]
}

/// Records ingest must quarantine, each for its own reason.
fn bad_payloads(now: Timestamp) -> Vec<(&'static str, Vec<u8>)> {
    let ts = rfc3339(at(now, 1));
    let r = |v: Value| v.to_string().into_bytes();
    vec![
        ("sensor_01", b"temperature=22.4".to_vec()),
        ("sensor_01", b"[1,2,3]".to_vec()),
        (
            "sensor_01",
            r(json!({"deviceId": "DEVICE#other", "timestamp": ts, "t": 1})),
        ),
        (
            "sensor_01",
            r(json!({"deviceId": "sensor_01", "timestamp": "20/04/2026 14:00", "t": 1})),
        ),
        (
            "sensor_01",
            r(json!({"deviceId": "sensor_01", "timestamp": rfc3339(at(now, -24 * 60)), "t": 1})),
        ),
        (
            "sensor_01",
            r(
                json!({"deviceId": "sensor_01", "timestamp": rfc3339(at(now, 400 * 24 * 60)), "t": 1}),
            ),
        ),
        (
            "sensor_01",
            r(json!({"deviceId": "sensor_01", "timestamp": ts, "temperature": "hot"})),
        ),
    ]
}

/// Kinesis sequence numbers that grow with `now`, so a newer file never looks like a replay.
fn kinesis_sequence(now: Timestamp, i: usize) -> String {
    format!("4959{:036}{:016}", now.epoch_millis(), i)
}

fn kinesis_event(now: Timestamp, payloads: &[(&str, Vec<u8>)]) -> Result<Value, DevstackError> {
    let arn = format!("arn:aws:kinesis:{REGION}:{ACCOUNT}:stream/tidemark-readings");
    let arrival = DateTime::from_millis(now.epoch_millis());
    let mut records = Vec::new();
    for (i, (key, data)) in payloads.iter().enumerate() {
        let record = aws_sdk_kinesis::types::Record::builder()
            .partition_key(*key)
            .sequence_number(kinesis_sequence(now, i))
            .data(Blob::new(data.clone()))
            .approximate_arrival_timestamp(arrival)
            .build()
            .map_err(|e| DevstackError::Events(e.to_string()))?;
        let event = KinesisSource::event_record(&arn, "shardId-000000000000", &record)
            .map_err(json_error)?;
        records.push(serde_json::to_value(event).map_err(json_error)?);
    }
    Ok(json!({ "Records": records }))
}

fn stream_arn() -> String {
    format!("arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{TABLE}/stream/2026-01-01T00:00:00.000")
}

/// The primary key attributes of an item (a stream record's `Keys`).
fn key_of(item: &tidemark_store::Item) -> tidemark_store::Item {
    item.iter()
        .filter(|(k, _)| k.as_str() == attr::PK || k.as_str() == attr::SK)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A DynamoDB item in the stream's wire form (`{"S": …}`, `{"N": …}`).
fn wire(item: tidemark_store::Item) -> Result<Value, DevstackError> {
    let item: std::collections::HashMap<String, serde_dynamo::AttributeValue> =
        item.into_iter().map(|(k, v)| (k, v.into())).collect();
    serde_json::to_value(serde_dynamo::Item::from(item)).map_err(json_error)
}

/// The table stream's INSERT records for the readings ingest stores from `payloads`.
fn stream_event(now: Timestamp, payloads: &[(&str, Vec<u8>)]) -> Result<Value, DevstackError> {
    let config = IngestConfig::new(TABLE);
    let mut records = Vec::new();
    for (_, data) in payloads {
        let readings = decode_record(data, now, &config)
            .map_err(|r| DevstackError::Events(format!("sample reading rejected: {r:?}")))?;
        for reading in readings {
            let item = reading_item(&reading, None, config.retention_days, now)
                .map_err(|e| DevstackError::Events(e.to_string()))?;
            let keys = key_of(&item);
            let n = records.len();
            records.push(json!({
                "eventID": format!("{:032}", n + 1),
                "eventName": "INSERT",
                "eventVersion": "1.1",
                "eventSource": "aws:dynamodb",
                "awsRegion": REGION,
                "dynamodb": {
                    "ApproximateCreationDateTime": now.epoch_seconds(),
                    "Keys": wire(keys)?,
                    "NewImage": wire(item)?,
                    "SequenceNumber": stream_sequence(now, n),
                    "SizeBytes": 180,
                    "StreamViewType": "NEW_AND_OLD_IMAGES",
                },
                "eventSourceARN": stream_arn(),
            }));
        }
    }
    Ok(json!({ "Records": records }))
}

/// Stream sequence numbers (21 digits, as DynamoDB Local pads them) that grow with `now`:
/// the aggregator applies a record only past the sequence it last applied for that source.
fn stream_sequence(now: Timestamp, i: usize) -> String {
    format!("{:018}{:03}", now.epoch_millis(), i)
}

/// DynamoDB's TTL deleting an expired reading: a REMOVE by the service, which the aggregator
/// must ignore (it never changes an aggregate).
fn ttl_remove_event(now: Timestamp) -> Result<Value, DevstackError> {
    let config = IngestConfig::new(TABLE);
    let old = at(now, (i64::from(config.retention_days) + 1) * 24 * 60);
    let data = json!({"deviceId": "sensor_01", "timestamp": rfc3339(old), "temperature": 22.4});
    // Decoded as of its own time: it was valid when it was stored.
    let readings = decode_record(data.to_string().as_bytes(), old, &config)
        .map_err(|r| DevstackError::Events(format!("sample reading rejected: {r:?}")))?;
    let item = reading_item(&readings[0], None, config.retention_days, old)
        .map_err(|e| DevstackError::Events(e.to_string()))?;
    let keys = key_of(&item);
    Ok(json!({ "Records": [{
        "eventID": format!("{:032}", 1),
        "eventName": "REMOVE",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": REGION,
        "dynamodb": {
            "ApproximateCreationDateTime": now.epoch_seconds(),
            "Keys": wire(keys)?,
            "OldImage": wire(item)?,
            "SequenceNumber": stream_sequence(now, 0),
            "SizeBytes": 120,
            "StreamViewType": "NEW_AND_OLD_IMAGES",
        },
        "userIdentity": {"type": "Service", "principalId": "dynamodb.amazonaws.com"},
        "eventSourceARN": stream_arn(),
    }]}))
}

/// What EventBridge Scheduler hands a scheduled function (the watchdog, the exporter), which
/// reads none of it.
fn scheduled_event(now: Timestamp, schedule: &str) -> Value {
    json!({
        "version": "0",
        "id": "7f4a2c1e-9b3d-4e8f-a1c2-5d6e7f8a9b0c",
        "detail-type": "Scheduled Event",
        "source": "aws.scheduler",
        "account": "123456789012",
        "time": format!("{}Z", &rfc3339(now)[..19]),
        "region": REGION,
        "resources": [format!("arn:aws:scheduler:us-east-1:123456789012:schedule/default/{schedule}")],
        "detail": "{}",
    })
}

/// The table stream's INSERT of a critical alert opened two minutes ago by sensor_02: what
/// the alerts role publishes as an `opened` event.
fn alert_opened_event(now: Timestamp) -> Result<Value, DevstackError> {
    use tidemark_schema::{
        AlertId, AlertItem, AlertRule, AlertState, DeviceId, EntityKey, MetricName, Severity,
        TagKey, TagValue, keys,
    };
    let bad = |e: tidemark_schema::IdError| DevstackError::Events(e.to_string());
    let device = DeviceId::new("sensor_02").map_err(bad)?;
    let metric = MetricName::new("temperature").map_err(bad)?;
    let opened = at(now, 2);
    let alert_id = AlertId::for_breach(opened, &metric, AlertRule::Max);
    let k = EntityKey::Alert {
        device: device.clone(),
        alert: alert_id.clone(),
    }
    .key();
    let alert = AlertItem {
        gsi1pk: Some(keys::severity_gsi1pk(Severity::Critical, &k.pk)),
        pk: k.pk,
        sk: k.sk,
        gsi1sk: Some(keys::alert_gsi1sk(&alert_id)),
        device_id: device,
        alert_id,
        metric: Some(metric),
        rule: AlertRule::Max,
        rule_spec: None,
        severity: Severity::Critical,
        state: AlertState::Open,
        message: "temperature 41.5 above 35".into(),
        value: 41.5,
        threshold: 35.0,
        breach_count: 1,
        opened_at: opened,
        last_breach_at: opened,
        acknowledged_at: None,
        resolved_at: None,
        snoozed_until: None,
        // A device of site A, line 3: its events route by `detail.tags`.
        tags: tidemark_schema::Tags::new(
            [
                (
                    TagKey::new("site").map_err(bad)?,
                    TagValue::new("A").map_err(bad)?,
                ),
                (
                    TagKey::new("line").map_err(bad)?,
                    TagValue::new("3").map_err(bad)?,
                ),
            ]
            .into(),
        )
        .map_err(|e| DevstackError::Events(e.to_string()))?,
    };
    let item = tidemark_store::to_item(&alert).map_err(|e| DevstackError::Events(e.to_string()))?;
    let keys = key_of(&item);
    Ok(json!({ "Records": [{
        "eventID": format!("{:032}", 1),
        "eventName": "INSERT",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": REGION,
        "dynamodb": {
            "ApproximateCreationDateTime": now.epoch_seconds(),
            "Keys": wire(keys)?,
            "NewImage": wire(item)?,
            "SequenceNumber": stream_sequence(now, 0),
            "SizeBytes": 400,
            "StreamViewType": "NEW_AND_OLD_IMAGES",
        },
        "eventSourceARN": stream_arn(),
    }]}))
}

/// An HTTP API (payload 2.0) request as API Gateway sends it with a JWT authorizer.
fn http_event(now: Timestamp, route: &str, path: &str, query: &str, body: Option<Value>) -> Value {
    let method = route.split(' ').next().unwrap_or("GET");
    let params: serde_json::Map<String, Value> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (k.to_owned(), Value::String(v.to_owned())))
        .collect();
    let mut event = json!({
        "version": "2.0",
        "routeKey": route,
        "rawPath": path,
        "rawQueryString": query,
        "headers": {
            "accept": "application/json",
            "content-type": "application/json",
            "host": "abcdef1234.execute-api.us-east-1.amazonaws.com",
            "user-agent": "curl/8.5.0",
            "x-forwarded-proto": "https",
        },
        "requestContext": {
            "accountId": ACCOUNT,
            "apiId": "abcdef1234",
            "domainName": "abcdef1234.execute-api.us-east-1.amazonaws.com",
            "domainPrefix": "abcdef1234",
            "http": {"method": method, "path": path, "protocol": "HTTP/1.1",
                     "sourceIp": "203.0.113.10", "userAgent": "curl/8.5.0"},
            "requestId": format!("sample-{}", now.epoch_millis()),
            "routeKey": route,
            "stage": "$default",
            "timeEpoch": now.epoch_millis(),
            "authorizer": {"jwt": {
                "claims": {"sub": "dashboard-user-1", "iss": "https://issuer.example.com/"},
                "scopes": ["tidemark/read", "tidemark/write"],
            }},
        },
        "isBase64Encoded": false,
    });
    if !params.is_empty() {
        event["queryStringParameters"] = Value::Object(params);
    }
    if let Some(b) = body {
        event["body"] = Value::String(b.to_string());
    }
    event
}

/// Base64 of a record's data, for tests that read a sample back.
pub fn record_data(record: &Value) -> Option<Vec<u8>> {
    let data = record["kinesis"]["data"].as_str()?;
    base64::engine::general_purpose::STANDARD.decode(data).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lambda_events::event::dynamodb::Event as StreamEvent;

    fn now() -> Timestamp {
        Timestamp::now()
    }

    fn event(name: &str, t: Timestamp) -> Value {
        sample_events(t)
            .unwrap()
            .into_iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("no {name}"))
            .1
    }

    #[test]
    fn sample_readings_dated_now_are_accepted_and_bad_records_rejected() {
        let t = now();
        let config = IngestConfig::new(TABLE);
        let accepted = |name: &str| -> Vec<bool> {
            event(name, t)["Records"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| decode_record(&record_data(r).unwrap(), t, &config).is_ok())
                .collect()
        };
        let good = accepted("kinesis-readings.json");
        assert!(good.len() >= 4 && good.iter().all(|ok| *ok), "{good:?}");
        let bad = accepted("kinesis-bad-records.json");
        assert!(bad.len() >= 7 && bad.iter().all(|ok| !*ok), "{bad:?}");
    }

    #[test]
    fn every_sample_parses_as_the_event_its_function_takes() {
        for (name, e) in sample_events(now()).unwrap() {
            if name.starts_with("kinesis-") {
                serde_json::from_value::<tidemark_ingest::KinesisBatch>(e).expect(name);
            } else if name.starts_with("ddb-") {
                let parsed = serde_json::from_value::<StreamEvent>(e).expect(name);
                assert!(!parsed.records.is_empty(), "{name}");
            } else if name.starts_with("scheduled-") {
                // The watchdog reads no field of it; it is what EventBridge Scheduler sends.
                assert_eq!(e["source"], "aws.scheduler", "{name}");
                assert_eq!(e["detail-type"], "Scheduled Event", "{name}");
            } else {
                let req = lambda_http::request::from_str(&e.to_string()).expect(name);
                assert!(req.uri().path().starts_with('/'), "{name}");
            }
        }
    }

    #[test]
    fn the_alert_sample_is_one_alert_change_the_notifier_publishes() {
        let e: aws_lambda_events::event::dynamodb::Event =
            serde_json::from_value(event("ddb-stream-alert-opened.json", now())).unwrap();
        let changes = tidemark_aggregator::notify::alert_changes(&e.records);
        assert_eq!(changes.len(), 1);
        assert_eq!(
            changes[0].kind,
            tidemark_aggregator::notify::ChangeKind::Opened
        );
        assert_eq!(
            changes[0].detail.device_id.as_ref().map(|d| d.as_str()),
            Some("sensor_02")
        );
        assert!(!changes[0].suppressed);
        assert_eq!(
            serde_json::to_value(&changes[0].detail.tags).unwrap(),
            json!({"site": "A", "line": "3"})
        );
    }

    #[test]
    fn stream_records_are_the_items_ingest_writes_and_later_files_sort_after() {
        let t = now();
        let e = event("ddb-stream-readings.json", t);
        let records = e["Records"].as_array().unwrap();
        // sensor_01 ×2, sensor_02 ×2 (one record holding an array), gateway_07 ×1.
        assert_eq!(records.len(), 5);
        for r in records {
            let sk = r["dynamodb"]["NewImage"]["sk"]["S"].as_str().unwrap();
            assert!(
                sk.starts_with(tidemark_schema::keys::READING_PREFIX),
                "{sk}"
            );
            assert_eq!(r["dynamodb"]["Keys"]["sk"]["S"].as_str(), Some(sk));
        }
        let later = event("ddb-stream-readings.json", t.plus_millis(1).unwrap());
        let seq = |v: &Value| {
            v["Records"][0]["dynamodb"]["SequenceNumber"]
                .as_str()
                .unwrap()
                .parse::<u128>()
                .unwrap()
        };
        assert!(seq(&later) > seq(&e));
    }

    #[test]
    fn the_ttl_sample_is_a_service_removal_of_an_expired_reading() {
        let t = now();
        let e = event("ddb-stream-ttl-remove.json", t);
        let r = &e["Records"][0];
        assert_eq!(r["eventName"], "REMOVE");
        assert_eq!(r["userIdentity"]["principalId"], "dynamodb.amazonaws.com");
        let ttl: i64 = r["dynamodb"]["OldImage"]["ttl"]["N"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(ttl < t.epoch_seconds());
    }
}
