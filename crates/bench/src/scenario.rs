//! Deterministic fleets: who sends what when, in simulated time, and the Kinesis events an
//! event-source mapping would form from it.

use aws_lambda_events::event::kinesis::KinesisEvent;
use base64::Engine;
use serde::Serialize;
use serde_json::{Value, json};
use tidemark_schema::{DeviceId, Layout, Timestamp};

/// One benchmark scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    pub name: &'static str,
    pub description: String,
    pub devices: u32,
    /// Time between two readings of one device, in microseconds (2,000/s is 500 µs).
    pub interval_us: i64,
    /// Simulated time the fleet sends for, in milliseconds.
    pub span_ms: i64,
    /// Partition count of the (single) hot device, written to `CONFIG` before the run.
    pub hot_partitions: Option<u16>,
    /// The aggregator mapping's batching window, milliseconds of simulated time.
    pub window_ms: i64,
    /// The aggregator mapping's `BatchSize`.
    pub aggregator_batch_size: usize,
    /// The ingest mapping's `BatchSize` (records per Kinesis invocation when a backlog
    /// lets the mapping fill its batches).
    pub ingest_batch_size: usize,
    /// Measure from the second batching window on (the first creates every item).
    pub warmup_window: bool,
    /// Measure a steady hour instead: the aggregator windows opening in `[from, to)`
    /// milliseconds after the first reading, everything before them the warm-up, and the run
    /// stops there. So each device's hour is written as it is in a long run: its placeholder
    /// and its close both fall inside, none of its first hour's.
    pub measured: Option<(i64, i64)>,
    /// The fleet's default layout (docs/design.md §2), in force from an hour before the first
    /// reading; `None`: single items, as before layouts existed.
    pub layout: Option<Layout>,
    /// The ingest mapping's batching window, milliseconds of simulated time (a divisor of
    /// `window_ms`); `None`: the aggregator's window, cut only by `ingest_batch_size`.
    pub ingest_window_ms: Option<i64>,
    /// Every device registered with `percentiles: true` before the run: its rollups keep
    /// quantile sketches.
    pub percentiles: bool,
}

/// `template.yaml`: the ingest mapping's `BatchSize` (a test checks they agree).
pub const TEMPLATE_INGEST_BATCH: usize = 500;
/// `template.yaml`: the aggregator mapping's `BatchSize` (a test checks they agree).
pub const TEMPLATE_AGGREGATOR_BATCH: usize = 10_000;
/// `template.yaml`: the alerts mapping's `BatchSize` (a test checks they agree).
pub const TEMPLATE_ALERTS_BATCH: usize = 1_000;
/// `template.yaml`: the defaults of `IngestBatchingWindowSeconds` and
/// `AlertBatchingWindowSeconds`, in milliseconds (a test checks they agree).
pub const TEMPLATE_INGEST_WINDOW_MS: i64 = 1_000;
pub const TEMPLATE_ALERTS_WINDOW_MS: i64 = 1_000;
/// `template.yaml`: the default of `DeviceRefreshSeconds` (a test checks they agree).
pub const TEMPLATE_DEVICE_REFRESH_S: u64 = 86_400;
/// Lambda's synchronous invocation payload limit, which also bounds a stream batch.
pub const MAX_PAYLOAD_BYTES: usize = 6 * 1024 * 1024;
pub const WINDOW_MS: i64 = 300_000;

impl Scenario {
    /// `devices` devices (1,000 in docs/design.md §8), one reading a minute, for `minutes` (60).
    pub fn standard(devices: u32, minutes: i64, aggregator_batch_size: usize) -> Scenario {
        Scenario {
            name: "standard",
            description: format!(
                "{devices} devices, 1 reading/min each, {minutes} simulated minutes"
            ),
            devices,
            interval_us: 60_000_000,
            span_ms: minutes * 60_000,
            hot_partitions: None,
            window_ms: WINDOW_MS,
            aggregator_batch_size,
            ingest_batch_size: TEMPLATE_INGEST_BATCH,
            warmup_window: true,
            measured: None,
            layout: None,
            ingest_window_ms: None,
            percentiles: false,
        }
    }

    /// `devices` devices (50) at one reading a second for `minutes` simulated minutes.
    pub fn one_hz(devices: u32, minutes: i64, aggregator_batch_size: usize) -> Scenario {
        Scenario {
            name: "1hz",
            description: format!(
                "{devices} devices, 1 reading/s each, {minutes} simulated minutes"
            ),
            devices,
            interval_us: 1_000_000,
            span_ms: minutes * 60_000,
            hot_partitions: None,
            window_ms: WINDOW_MS,
            aggregator_batch_size,
            ingest_batch_size: TEMPLATE_INGEST_BATCH,
            warmup_window: true,
            measured: None,
            layout: None,
            ingest_window_ms: None,
            percentiles: false,
        }
    }

    /// One device at 2,000 readings/s for `millis` of simulated time, with 4 write partitions.
    pub fn hot(millis: i64, aggregator_batch_size: usize) -> Scenario {
        Scenario {
            name: "hot",
            description: format!(
                "1 device at 2,000 readings/s for {} simulated s, 4 write partitions",
                millis as f64 / 1000.0
            ),
            devices: 1,
            interval_us: 500,
            span_ms: millis,
            hot_partitions: Some(4),
            window_ms: WINDOW_MS,
            aggregator_batch_size,
            ingest_batch_size: TEMPLATE_INGEST_BATCH,
            warmup_window: true,
            measured: None,
            layout: None,
            ingest_window_ms: None,
            percentiles: false,
        }
    }

    /// The same fleet measured over a steady hour ([`Scenario::measured`]), its readings
    /// starting at `first`: the warm-up runs to half an hour past the first whole hour after
    /// `first` (by then the fleet's first hour has closed and been written), the measured
    /// hour follows, and the fleet sends until it ends.
    pub fn over_a_steady_hour(&self, first: Timestamp) -> Scenario {
        const HOUR_MS: i64 = 3_600_000;
        let next_hour = first.hour_start().epoch_millis() + HOUR_MS;
        let from = next_hour + HOUR_MS / 2 - first.epoch_millis();
        let to = from + HOUR_MS;
        Scenario {
            measured: Some((from, to)),
            span_ms: to + self.window_ms,
            description: format!(
                "{}; measured over a steady hour, {} to {} simulated minutes in",
                self.description
                    .split(", ")
                    .take(2)
                    .collect::<Vec<_>>()
                    .join(", "),
                from / 60_000,
                to / 60_000
            ),
            ..self.clone()
        }
    }

    /// The same fleet stored as `layout`, ingested in batches of `ingest_window_s` seconds.
    pub fn packed(&self, layout: Layout, ingest_window_s: i64, batch: usize) -> Scenario {
        Scenario {
            layout: Some(layout),
            ingest_window_ms: Some(ingest_window_s * 1000),
            ingest_batch_size: batch,
            // A packed device needs no write partitions (that is the point).
            hot_partitions: self.hot_partitions.filter(|_| layout.slot.is_none()),
            ..self.clone()
        }
    }

    pub fn device_id(&self, i: u32) -> DeviceId {
        let id = if self.name == "hot" {
            format!("hot-{i:04}")
        } else {
            format!("dev-{i:04}")
        };
        DeviceId::new(&id).unwrap_or_else(|_| unreachable!("generated IDs are valid"))
    }

    /// Every reading the fleet sends, in arrival order (arrival = reading time: devices
    /// send at once). Readings start at `start`.
    pub fn readings(&self, start: Timestamp) -> Vec<SimReading> {
        let start_us = start.epoch_micros();
        let end_us = start_us + self.span_ms * 1_000;
        let mut out = Vec::new();
        for d in 0..self.devices {
            let id = self.device_id(d);
            // Devices spread their first reading evenly over one interval.
            let mut t = start_us + self.interval_us * i64::from(d) / i64::from(self.devices);
            let mut n: u64 = 0;
            while t < end_us {
                let at = Timestamp::from_epoch_micros(t).unwrap_or(Timestamp::MIN);
                out.push(SimReading {
                    device: d,
                    at,
                    body: reading_json(&id, at, d, n),
                });
                n += 1;
                t += self.interval_us;
            }
        }
        out.sort_by_key(|r| (r.at, r.device));
        out
    }
}

/// One reading in flight.
#[derive(Debug, Clone)]
pub struct SimReading {
    pub device: u32,
    pub at: Timestamp,
    pub body: Vec<u8>,
}

/// SplitMix64: stable pseudo-random numbers.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A number in [0, 1) from (a, b, salt), always the same for the same three: a reading's
/// values from (device, n, metric), or any other stable spread.
pub fn unit(a: u64, b: u64, salt: u64) -> f64 {
    (mix((a << 40) ^ (b << 4) ^ salt) >> 11) as f64 / (1u64 << 53) as f64
}

/// The docs/design.md §3 reading shape with four metrics and firmware metadata (about 200 bytes as
/// an item, well under one write unit).
pub fn reading_json(id: &DeviceId, at: Timestamp, device: u32, n: u64) -> Vec<u8> {
    let r1 = |x: f64| (x * 10.0).round() / 10.0;
    let u = |salt| unit(u64::from(device), n, salt);
    let v = json!({
        "deviceId": id.as_str(),
        "timestamp": at.to_string(),
        "temperature": r1(18.0 + 6.0 * u(1)),
        "humidity": r1(35.0 + 20.0 * u(2)),
        "pressure": r1(1005.0 + 15.0 * u(3)),
        "battery": r1(100.0 - (n as f64) * 0.001 - u(4)),
        "metadata": {"fw": "2.1.0"}
    });
    serde_json::to_vec(&v).unwrap_or_default()
}

/// One record of a Kinesis event: its partition key, its data, and when it arrived.
#[derive(Debug, Clone)]
pub struct KinesisRecord {
    pub key: String,
    pub data: Vec<u8>,
    pub arrived: Timestamp,
}

/// The Kinesis event the ingest mapping delivers for `readings` (one record each, partition
/// key = device ID, increasing sequence numbers from `first_seq`).
pub fn kinesis_event(
    scenario: &Scenario,
    readings: &[SimReading],
    first_seq: u64,
) -> Result<KinesisEvent, serde_json::Error> {
    let records: Vec<KinesisRecord> = readings
        .iter()
        .map(|r| KinesisRecord {
            key: scenario.device_id(r.device).as_str().to_owned(),
            data: r.body.clone(),
            arrived: r.at,
        })
        .collect();
    kinesis_records(&records, "shardId-000000000000", first_seq)
}

/// The Kinesis event the ingest mapping delivers for `records` read from stream shard
/// `shard` (increasing sequence numbers from `first_seq`).
pub fn kinesis_records(
    records: &[KinesisRecord],
    shard: &str,
    first_seq: u64,
) -> Result<KinesisEvent, serde_json::Error> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let records: Vec<Value> = records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let seq = format!("{:056}", first_seq + i as u64);
            json!({
                "kinesis": {
                    "kinesisSchemaVersion": "1.0",
                    "partitionKey": r.key,
                    "sequenceNumber": seq,
                    "data": b64.encode(&r.data),
                    "approximateArrivalTimestamp": r.arrived.epoch_millis() as f64 / 1000.0,
                },
                "eventSource": "aws:kinesis",
                "eventVersion": "1.0",
                "eventID": format!("{shard}:{seq}"),
                "eventName": "aws:kinesis:record",
                "invokeIdentityArn": "arn:aws:iam::123456789012:role/bench",
                "awsRegion": "us-east-1",
                "eventSourceARN": "arn:aws:kinesis:us-east-1:123456789012:stream/bench",
            })
        })
        .collect();
    serde_json::from_value::<tidemark_ingest::KinesisBatch>(json!({ "Records": records }))
        .map(|b| b.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> Timestamp {
        Timestamp::parse_rfc3339("2026-04-20T14:00:00Z").unwrap()
    }

    #[test]
    fn standard_fleet_sends_one_reading_a_minute_per_device() {
        let s = Scenario::standard(1_000, 60, TEMPLATE_AGGREGATOR_BATCH);
        let r = s.readings(t0());
        assert_eq!(r.len(), 60_000);
        assert!(r.windows(2).all(|w| w[0].at <= w[1].at));
        let first: Vec<_> = r.iter().filter(|x| x.device == 7).take(2).collect();
        assert_eq!(
            first[1].at.epoch_millis() - first[0].at.epoch_millis(),
            60_000
        );
    }

    #[test]
    fn hot_device_sends_every_half_millisecond_and_each_reading_keeps_its_own_time() {
        let s = Scenario::hot(1_000, TEMPLATE_AGGREGATOR_BATCH);
        let r = s.readings(t0());
        assert_eq!(r.len(), 2_000);
        let mut keys: Vec<_> = r.iter().map(|x| x.at).collect();
        keys.dedup();
        assert_eq!(
            keys.len(),
            2_000,
            "microsecond timestamps: no two readings share a key"
        );
    }

    #[test]
    fn generated_readings_decode_and_events_carry_them() {
        let s = Scenario::one_hz(10, 5, TEMPLATE_AGGREGATOR_BATCH);
        let r = s.readings(t0());
        let cfg = tidemark_ingest::IngestConfig::new("t");
        let now = t0().plus_millis(3_600_000).unwrap();
        let decoded = tidemark_ingest::decode_record(&r[0].body, now, &cfg).unwrap();
        assert_eq!(decoded[0].metrics.len(), 4);
        let ev = kinesis_event(&s, &r[..3], 10).unwrap();
        assert_eq!(ev.records.len(), 3);
        assert_eq!(ev.records[2].kinesis.data.0, r[2].body);
    }

    #[test]
    fn records_keep_their_key_arrival_and_shard() {
        let rec = KinesisRecord {
            key: "tidemark-heartbeat".into(),
            data: b"{}".to_vec(),
            arrived: t0(),
        };
        let ev = kinesis_records(&[rec.clone(), rec], "shardId-000000000003", 7).unwrap();
        let second = &ev.records[1];
        assert_eq!(second.kinesis.partition_key.as_str(), "tidemark-heartbeat");
        assert_eq!(
            second.event_id.as_deref(),
            Some(format!("shardId-000000000003:{:056}", 8).as_str())
        );
        assert_eq!(
            second
                .kinesis
                .approximate_arrival_timestamp
                .0
                .timestamp_millis(),
            t0().epoch_millis()
        );
    }
}
