//! A simulated device fleet: readings as real devices send them, warts included.
//!
//! Each device walks its metrics (temperature, humidity, pressure, battery) around a home
//! value, now and then breaches a threshold, and sends at its own pace with jitter. The send
//! path misbehaves like a real one: some readings arrive late (after newer ones), some twice,
//! and a few records are malformed. Everything comes from one seeded RNG, so a seed fixes the
//! whole run and a test can recompute what the pipeline should have stored.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tidemark_schema::Timestamp;
use tokio::sync::watch;

use crate::DevstackError;
use crate::esm::stop_requested;

/// The fleet's shape and how badly its network behaves.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub devices: usize,
    pub readings_per_minute: f64,
    /// ± fraction of the interval each send may drift by.
    pub jitter: f64,
    pub seed: u64,
    /// Device IDs are `<prefix><nnn>`.
    pub device_prefix: String,
    /// Chance a reading starts a threshold breach (a temperature spike or battery sag).
    pub breach_probability: f64,
    /// Chance a reading is held back and sent after newer ones.
    pub late_probability: f64,
    /// Chance a reading is sent twice.
    pub duplicate_probability: f64,
    /// Chance, per reading, of an extra malformed record.
    pub malformed_probability: f64,
    /// Chance a device batches two readings in one record (a JSON array).
    pub array_probability: f64,
    /// Every n-th record of a device is sent as a KPL aggregated record, its readings as
    /// user records, as a producer using the Kinesis Producer Library sends them (0: never).
    pub kpl_every: u64,
    /// Every n-th record of a device (offset from the KPL ones) is sent as a SenML pack, as
    /// an LwM2M device or gateway sends it (0: never).
    pub senml_every: u64,
    /// Every n-th single-reading record of a device (offset from the others) is sent as the
    /// template's AWS IoT Core rule forwards a message: the message (no `deviceId`, no
    /// `timestamp`) base64 in `tidemarkPayload`, the device in `tidemarkThing`, the time of
    /// arrival at IoT Core in `receivedAt` (0: never).
    pub iot_every: u64,
    /// A device that falls silent for a while, now and then (what an offline alert is for).
    pub silence: Option<Silence>,
}

/// Device `device` (an index into the fleet) sends nothing from `from` to `until` into every
/// `every` (all since the fleet started), then carries on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Silence {
    pub device: usize,
    pub every: Duration,
    pub from: Duration,
    pub until: Duration,
}

impl Silence {
    /// Whether a reading due `since_start` into the run falls in a silent stretch.
    pub fn covers(&self, since_start: Duration) -> bool {
        let every = self.every.as_millis().max(1);
        let at = since_start.as_millis() % every;
        self.from.as_millis() <= at && at < self.until.as_millis()
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            devices: 20,
            readings_per_minute: 6.0,
            jitter: 0.2,
            seed: 7,
            device_prefix: "sensor_".into(),
            breach_probability: 0.01,
            late_probability: 0.03,
            duplicate_probability: 0.02,
            malformed_probability: 0.005,
            array_probability: 0.05,
            kpl_every: 10,
            senml_every: 10,
            iot_every: 10,
            silence: None,
        }
    }
}

impl SimConfig {
    /// `TIDEMARK_SIM_DEVICES`, `TIDEMARK_SIM_RATE` (readings/minute/device), `TIDEMARK_SIM_SEED`.
    pub fn from_env() -> Self {
        let d = SimConfig::default();
        let get = |k: &str| std::env::var(k).ok();
        SimConfig {
            devices: get("TIDEMARK_SIM_DEVICES")
                .and_then(|v| v.parse().ok())
                .unwrap_or(d.devices),
            readings_per_minute: get("TIDEMARK_SIM_RATE")
                .and_then(|v| v.parse().ok())
                .filter(|r: &f64| *r > 0.0)
                .unwrap_or(d.readings_per_minute),
            seed: get("TIDEMARK_SIM_SEED")
                .and_then(|v| v.parse().ok())
                .unwrap_or(d.seed),
            // The fleet's last device goes quiet from minute 2 to minute 6 of every 10
            // (`TIDEMARK_SIM_SILENCE=0`: never): with `make run`'s 120 s offline window, an
            // offline alert opens around minute 4 and resolves at minute 6.
            silence: (!matches!(get("TIDEMARK_SIM_SILENCE").as_deref(), Some("0" | "off")))
                .then_some(Silence {
                    device: usize::MAX,
                    every: Duration::from_secs(600),
                    from: Duration::from_secs(120),
                    until: Duration::from_secs(360),
                }),
            ..d
        }
    }

    fn interval_ms(&self) -> f64 {
        60_000.0 / self.readings_per_minute.max(0.001)
    }
}

/// What a record is, so tests know what the pipeline should make of it.
#[derive(Debug, Clone, PartialEq)]
pub enum RecordKind {
    /// Valid readings (one, or several for an array record).
    Readings(Vec<Value>),
    /// A second copy of a record already sent.
    Duplicate(Vec<Value>),
    /// Bad input that ingest must quarantine, with the reason it is bad.
    Malformed(&'static str),
}

/// One Kinesis record, ready for PutRecords.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    pub partition_key: String,
    pub data: Vec<u8>,
    pub kind: RecordKind,
    /// When the device meant to send it (late records are sent after this).
    pub due: Timestamp,
}

#[derive(Debug, Clone)]
struct Device {
    id: String,
    next_due: f64,
    temperature: f64,
    temperature_home: f64,
    humidity: f64,
    pressure: f64,
    battery: f64,
    /// Remaining readings of a current breach.
    breach_left: u32,
    breach_kind: u8,
    /// Records sent so far (every `kpl_every`-th goes aggregated).
    records: u64,
}

/// The fleet: deterministic for a seed.
pub struct Fleet {
    cfg: SimConfig,
    rng: StdRng,
    /// When the fleet started (epoch ms): silences count from it.
    start_ms: i64,
    devices: Vec<Device>,
    /// Held-back records and when to release them (epoch ms).
    held: Vec<(i64, Outgoing)>,
}

/// The readings as one SenML pack: base name `<device>:`, absolute base time in seconds, one
/// record per metric, the firmware version as a string value.
fn senml_pack(device: &str, readings: &[Value]) -> Vec<u8> {
    let mut records = Vec::new();
    for r in readings {
        let at = r["timestamp"]
            .as_str()
            .and_then(|t| Timestamp::parse_rfc3339(t).ok())
            .map_or(0.0, |t| t.epoch_millis() as f64 / 1000.0);
        let mut first = true;
        for (name, v) in r.as_object().into_iter().flatten() {
            if !v.is_number() {
                continue;
            }
            let mut rec = json!({"n": name, "v": v});
            if first {
                rec["bn"] = json!(format!("{device}:"));
                rec["bt"] = json!(at);
                first = false;
            }
            records.push(rec);
        }
        if let Some(fw) = r["metadata"]["fw"].as_str() {
            records.push(json!({"n": "fw", "vs": fw}));
        }
    }
    Value::Array(records).to_string().into_bytes()
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

impl Fleet {
    /// A fleet whose first readings are due from `start` on, spread over one interval.
    pub fn new(cfg: SimConfig, start: Timestamp) -> Self {
        let mut rng = StdRng::seed_from_u64(cfg.seed);
        let interval = cfg.interval_ms();
        let devices = (0..cfg.devices)
            .map(|i| {
                let home = rng.random_range(18.0..24.0);
                Device {
                    id: format!("{}{:03}", cfg.device_prefix, i + 1),
                    next_due: start.epoch_millis() as f64 + rng.random_range(0.0..interval),
                    temperature: home,
                    temperature_home: home,
                    humidity: rng.random_range(35.0..55.0),
                    pressure: rng.random_range(1005.0..1020.0),
                    battery: rng.random_range(60.0..100.0),
                    breach_left: 0,
                    breach_kind: 0,
                    records: 0,
                }
            })
            .collect();
        Fleet {
            cfg,
            rng,
            start_ms: start.epoch_millis(),
            devices,
            held: Vec::new(),
        }
    }

    pub fn device_ids(&self) -> Vec<String> {
        self.devices.iter().map(|d| d.id.clone()).collect()
    }

    /// Everything to send up to `now`, in send order.
    pub fn tick(&mut self, now: Timestamp) -> Vec<Outgoing> {
        let now_ms = now.epoch_millis();
        let mut out: Vec<(i64, Outgoing)> = Vec::new();
        for i in 0..self.devices.len() {
            while self.devices[i].next_due <= now_ms as f64 {
                let due = self.devices[i].next_due as i64;
                if !self.silent(i, due) {
                    self.emit(i, due, &mut out);
                }
                let jitter = self.cfg.jitter.clamp(0.0, 0.9);
                let factor = 1.0 + self.rng.random_range(-jitter..=jitter);
                self.devices[i].next_due += self.cfg.interval_ms() * factor;
            }
        }
        // Release held-back records whose time has come.
        let (ready, still): (Vec<_>, Vec<_>) =
            self.held.drain(..).partition(|(at, _)| *at <= now_ms);
        self.held = still;
        out.extend(ready);
        out.sort_by_key(|(at, _)| *at);
        out.into_iter().map(|(_, o)| o).collect()
    }

    /// Whether device `i` is silent at `due_ms` (the last device when the silence names
    /// `usize::MAX`).
    fn silent(&self, i: usize, due_ms: i64) -> bool {
        self.cfg.silence.is_some_and(|s| {
            let which = s.device.min(self.devices.len().saturating_sub(1));
            let since = Duration::from_millis(due_ms.saturating_sub(self.start_ms).max(0) as u64);
            which == i && s.covers(since)
        })
    }

    /// The device that falls silent, if any.
    pub fn silent_device(&self) -> Option<String> {
        let s = self.cfg.silence?;
        let which = s.device.min(self.devices.len().checked_sub(1)?);
        Some(self.devices[which].id.clone())
    }

    /// Everything still held back, as if the network caught up.
    pub fn flush(&mut self) -> Vec<Outgoing> {
        let mut held = std::mem::take(&mut self.held);
        held.sort_by_key(|(at, _)| *at);
        held.into_iter().map(|(_, o)| o).collect()
    }

    fn reading(&mut self, i: usize, at: Timestamp) -> Value {
        let rng = &mut self.rng;
        let d = &mut self.devices[i];
        // Mean-reverting walks: small steps, pulled back towards home.
        d.temperature += rng.random_range(-0.3..0.3) + (d.temperature_home - d.temperature) * 0.1;
        d.humidity = (d.humidity + rng.random_range(-1.0..1.0)).clamp(5.0, 95.0);
        d.pressure += rng.random_range(-0.5..0.5) + (1013.0 - d.pressure) * 0.05;
        d.battery = (d.battery - rng.random_range(0.0..0.05)).max(5.0);
        if d.breach_left == 0 && rng.random_bool(self.cfg.breach_probability.clamp(0.0, 1.0)) {
            d.breach_left = rng.random_range(1..=3);
            d.breach_kind = rng.random_range(0..2);
        }
        let (mut temperature, mut battery) = (d.temperature, d.battery);
        if d.breach_left > 0 {
            d.breach_left -= 1;
            if d.breach_kind == 0 {
                temperature = rng.random_range(41.0..48.0);
            } else {
                battery = rng.random_range(1.0..4.0);
            }
        }
        json!({
            "deviceId": d.id,
            "timestamp": at.to_string(),
            "temperature": round1(temperature),
            "humidity": round1(d.humidity),
            "pressure": round1(d.pressure),
            "battery": battery.round(),
            "metadata": {"fw": "2.1.0"},
        })
    }

    fn emit(&mut self, i: usize, due_ms: i64, out: &mut Vec<(i64, Outgoing)>) {
        let Ok(at) = Timestamp::from_epoch_millis(due_ms) else {
            return;
        };
        let key = self.devices[i].id.clone();
        let mut readings = vec![self.reading(i, at)];
        if self
            .rng
            .random_bool(self.cfg.array_probability.clamp(0.0, 1.0))
        {
            // The device buffered: a second reading half an interval later, in one record.
            let later = due_ms + (self.cfg.interval_ms() / 2.0) as i64;
            if let Ok(t2) = Timestamp::from_epoch_millis(later) {
                readings.push(self.reading(i, t2));
            }
        }
        let body = if readings.len() == 1 {
            readings[0].clone()
        } else {
            Value::Array(readings.clone())
        };
        self.devices[i].records += 1;
        let every = self.cfg.kpl_every;
        let n = self.devices[i].records;
        let senml = self.cfg.senml_every;
        let as_senml = senml > 0 && n % senml == senml / 2;
        let iot = self.cfg.iot_every;
        let as_iot = iot > 0 && n % iot == iot * 3 / 10 && readings.len() == 1;
        let data = if as_iot {
            // The rule output: the device sent neither its name (the topic has it) nor a
            // time; the rule sends the message base64 beside the thing, and IoT Core's
            // receipt time is the reading's.
            use base64::Engine as _;
            let mut message = readings[0].clone();
            if let Some(o) = message.as_object_mut() {
                o.remove("timestamp");
                o.remove("deviceId");
            }
            json!({
                "tidemarkPayload": base64::engine::general_purpose::STANDARD
                    .encode(message.to_string()),
                "tidemarkThing": key,
                "receivedAt": due_ms,
            })
            .to_string()
            .into_bytes()
        } else if as_senml {
            let pack = senml_pack(&key, &readings);
            // What ingest stores for it: SenML's string values are metadata.values.
            for r in &mut readings {
                if let Some(meta) = r.get_mut("metadata") {
                    *meta = json!({ "values": meta.take() });
                }
            }
            pack
        } else if every > 0 && n % every == 0 {
            let users: Vec<Vec<u8>> = readings
                .iter()
                .map(|r| r.to_string().into_bytes())
                .collect();
            let users: Vec<(&str, Option<&str>, &[u8])> = users
                .iter()
                .map(|u| (key.as_str(), None, u.as_slice()))
                .collect();
            tidemark_ingest::kpl::aggregate(&users)
        } else {
            body.to_string().into_bytes()
        };
        let rec = Outgoing {
            partition_key: key.clone(),
            data,
            kind: RecordKind::Readings(readings.clone()),
            due: at,
        };
        let interval = self.cfg.interval_ms() as i64;
        if self
            .rng
            .random_bool(self.cfg.late_probability.clamp(0.0, 1.0))
        {
            let delay = self.rng.random_range(interval..=interval * 3);
            self.held.push((due_ms + delay, rec.clone()));
        } else {
            out.push((due_ms, rec.clone()));
        }
        if self
            .rng
            .random_bool(self.cfg.duplicate_probability.clamp(0.0, 1.0))
        {
            let delay = self.rng.random_range(0..=interval);
            let dup = Outgoing {
                kind: RecordKind::Duplicate(readings),
                ..rec
            };
            self.held.push((due_ms + delay, dup));
        }
        if self
            .rng
            .random_bool(self.cfg.malformed_probability.clamp(0.0, 1.0))
        {
            let (data, why) = self.malformed(&key, at);
            out.push((
                due_ms,
                Outgoing {
                    partition_key: key,
                    data,
                    kind: RecordKind::Malformed(why),
                    due: at,
                },
            ));
        }
    }

    fn malformed(&mut self, device: &str, at: Timestamp) -> (Vec<u8>, &'static str) {
        match self.rng.random_range(0..4) {
            0 => (
                format!("{{\"deviceId\":\"{device}\",\"timestamp\":\"{at}\",\"temper").into_bytes(),
                "not_json",
            ),
            1 => (
                json!({"deviceId": "bad#device", "timestamp": at.to_string(), "temperature": 20.0})
                    .to_string()
                    .into_bytes(),
                "invalid_device_id",
            ),
            2 => {
                let future = at.plus_millis(3_600_000).unwrap_or(at);
                (
                    json!({"deviceId": device, "timestamp": future.to_string(), "temperature": 20.0})
                        .to_string()
                        .into_bytes(),
                    "timestamp_in_future",
                )
            }
            _ => (
                json!({"deviceId": device, "timestamp": at.to_string(), "temperature": "hot"})
                    .to_string()
                    .into_bytes(),
                "invalid_metric",
            ),
        }
    }
}

/// Counters of a running simulator.
#[derive(Debug, Default)]
pub struct SimStats {
    /// When each reading of the last few minutes was sent, by (device, timestamp): what
    /// `make run`'s alert latency is measured from.
    sent_at: std::sync::Mutex<std::collections::HashMap<(String, Timestamp), std::time::Instant>>,
    pub records: AtomicU64,
    pub readings: AtomicU64,
    pub duplicates: AtomicU64,
    pub malformed: AtomicU64,
    pub put_retries: AtomicU64,
}

impl SimStats {
    /// When the reading of `device` at `at` went into Kinesis, if it was sent in the last
    /// five minutes.
    pub fn sent_at(&self, device: &str, at: Timestamp) -> Option<std::time::Instant> {
        let sent = self.sent_at.lock().unwrap_or_else(|e| e.into_inner());
        sent.get(&(device.to_owned(), at)).copied()
    }

    fn count(&self, batch: &[Outgoing]) {
        let now = std::time::Instant::now();
        {
            let mut sent = self.sent_at.lock().unwrap_or_else(|e| e.into_inner());
            sent.retain(|_, t| now.duration_since(*t) < Duration::from_secs(300));
            for o in batch {
                if let RecordKind::Readings(rs) = &o.kind {
                    for r in rs {
                        let at = r["timestamp"]
                            .as_str()
                            .and_then(|t| Timestamp::parse_rfc3339(t).ok());
                        if let (Some(d), Some(at)) = (r["deviceId"].as_str(), at) {
                            sent.entry((d.to_owned(), at)).or_insert(now);
                        }
                    }
                }
            }
        }
        for o in batch {
            self.records.fetch_add(1, Ordering::Relaxed);
            match &o.kind {
                RecordKind::Readings(r) => {
                    self.readings.fetch_add(r.len() as u64, Ordering::Relaxed);
                }
                RecordKind::Duplicate(_) => {
                    self.duplicates.fetch_add(1, Ordering::Relaxed);
                }
                RecordKind::Malformed(_) => {
                    self.malformed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// Sends records with PutRecords (500 a call, Kinesis' limit), resending the entries Kinesis
/// rejected (throttling) until all are in.
pub async fn put_records(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
    records: &[Outgoing],
    stats: &SimStats,
) -> Result<(), DevstackError> {
    for chunk in records.chunks(500) {
        let mut pending: Vec<&Outgoing> = chunk.iter().collect();
        let mut attempt = 0u32;
        while !pending.is_empty() {
            let entries = pending
                .iter()
                .map(|o| {
                    PutRecordsRequestEntry::builder()
                        .partition_key(&o.partition_key)
                        .data(Blob::new(o.data.clone()))
                        .build()
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| DevstackError::Kinesis {
                    operation: "PutRecords",
                    message: e.to_string(),
                })?;
            let out = kinesis
                .put_records()
                .stream_name(stream)
                .set_records(Some(entries))
                .send()
                .await
                .map_err(|e| DevstackError::Kinesis {
                    operation: "PutRecords",
                    message: aws_sdk_kinesis::Error::from(e).to_string(),
                })?;
            if out.failed_record_count().unwrap_or(0) == 0 {
                break;
            }
            pending = pending
                .into_iter()
                .zip(out.records())
                .filter(|(_, r)| r.error_code().is_some())
                .map(|(o, _)| o)
                .collect();
            attempt += 1;
            stats.put_retries.fetch_add(1, Ordering::Relaxed);
            if attempt > 10 {
                return Err(DevstackError::Kinesis {
                    operation: "PutRecords",
                    message: format!("{} records still rejected after 10 retries", pending.len()),
                });
            }
            tokio::time::sleep(Duration::from_millis(50 << attempt.min(6))).await;
        }
    }
    Ok(())
}

/// The distinct valid readings among `sent`, keyed by (device, timestamp): what the table must
/// hold afterwards (duplicates and late copies collapse into one, as in the table).
pub fn expected_readings(sent: &[Outgoing]) -> BTreeMap<(String, String), Value> {
    let mut out = BTreeMap::new();
    for o in sent {
        if let RecordKind::Readings(rs) | RecordKind::Duplicate(rs) = &o.kind {
            for r in rs {
                let dev = r["deviceId"].as_str().unwrap_or_default().to_owned();
                let ts = r["timestamp"].as_str().unwrap_or_default().to_owned();
                out.insert((dev, ts), r.clone());
            }
        }
    }
    out
}

/// Where progress lines get the pipeline's side from (records the ingest mapping has taken).
pub type Progress = Arc<dyn Fn() -> Option<(u64, i64)> + Send + Sync>;

/// The sites the fleet is spread over, so `make run` has groups to show (`GET /devices?tag=`,
/// the fleet page's tag filter, `GET /groups/series?tag=site:A`).
pub const SITES: &[&str] = &["A", "B", "C"];
/// Production lines per site.
pub const LINES_PER_SITE: usize = 2;

/// The tags of the fleet's `i`-th device (0-based): sites by turns, then a line within its
/// site, `site` and `line`.
pub fn device_tags(i: usize) -> Value {
    json!({
        "site": SITES[i % SITES.len()],
        "line": ((i / SITES.len()) % LINES_PER_SITE + 1).to_string(),
    })
}

/// Registers the fleet's devices with their tags through the API (`PUT /devices/{id}`), each
/// device that has no tags yet (one registered by an earlier run keeps what it has, and a
/// user's edits). Tags take effect a few minutes on (the layout lead): readings from then on
/// count in their groups. Returns how many were registered.
pub async fn register_fleet<S: tidemark_api::Store>(
    cfg: &SimConfig,
    api: &tidemark_api::App<S>,
) -> Result<usize, DevstackError> {
    let call = |method: &str, uri: String, body: String| {
        let body = if body.is_empty() {
            lambda_http::Body::Empty
        } else {
            lambda_http::Body::Text(body)
        };
        http::Request::builder()
            .method(method)
            .uri(uri)
            .body(body)
            .map_err(|e| DevstackError::Register(e.to_string()))
    };
    let mut registered = 0;
    for i in 0..cfg.devices {
        let id = format!("{}{:03}", cfg.device_prefix, i + 1);
        let uri = format!("/devices/{id}");
        let got = api.handle(call("GET", uri.clone(), String::new())?).await;
        if got.status() == http::StatusCode::OK {
            let body: Value = serde_json::from_slice(got.body().as_ref()).unwrap_or(Value::Null);
            if body.get("tags").is_some() {
                continue;
            }
        }
        let body = json!({"name": format!("Simulated {id}"), "tags": device_tags(i)});
        let put = api.handle(call("PUT", uri, body.to_string())?).await;
        if !put.status().is_success() {
            return Err(DevstackError::Register(format!(
                "PUT /devices/{id} answered {}",
                put.status()
            )));
        }
        registered += 1;
    }
    Ok(registered)
}

/// The alerts part of a progress line (`make run` measures it from the event log).
pub type AlertProgress = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// Runs the fleet in real time until `shutdown`, printing progress every few seconds.
/// `pipeline` (optional) returns (records ingested, arrival ms of the newest one).
pub async fn run(
    cfg: SimConfig,
    kinesis: aws_sdk_kinesis::Client,
    stream: String,
    stats: Arc<SimStats>,
    pipeline: Option<Progress>,
    alerts: Option<AlertProgress>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), DevstackError> {
    let mut fleet = Fleet::new(cfg, Timestamp::now());
    let started = std::time::Instant::now();
    let mut last_print = std::time::Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    while !stop_requested(&shutdown) {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => continue,
        }
        let batch = fleet.tick(Timestamp::now());
        if !batch.is_empty() {
            if let Err(e) = put_records(&kinesis, &stream, &batch, &stats).await {
                tracing::warn!(error = %e, "simulator could not send; will retry with new readings");
                continue;
            }
            stats.count(&batch);
        }
        if last_print.elapsed() >= Duration::from_secs(5) {
            last_print = std::time::Instant::now();
            let mut line = progress_line(&stats, started.elapsed(), pipeline.as_ref());
            if let Some(a) = alerts.as_ref().and_then(|a| a()) {
                line.push_str(" | ");
                line.push_str(&a);
            }
            eprintln!("{line}");
        }
    }
    Ok(())
}

/// `sim: 1234 records (4.1/s) · 1250 readings · 25 dup · 6 malformed | ingested 1230 · lag 0.8 s`
pub fn progress_line(stats: &SimStats, elapsed: Duration, pipeline: Option<&Progress>) -> String {
    let records = stats.records.load(Ordering::Relaxed);
    let rate = records as f64 / elapsed.as_secs_f64().max(0.001);
    let mut line = format!(
        "sim: {records} records ({rate:.1}/s) · {} readings · {} duplicates · {} malformed",
        stats.readings.load(Ordering::Relaxed),
        stats.duplicates.load(Ordering::Relaxed),
        stats.malformed.load(Ordering::Relaxed),
    );
    if let Some((ingested, newest)) = pipeline.and_then(|p| p()) {
        let backlog = records.saturating_sub(ingested);
        let lag = if backlog == 0 || newest == 0 {
            0.0
        } else {
            (Timestamp::now().epoch_millis() - newest).max(0) as f64 / 1000.0
        };
        line.push_str(&format!(
            " | ingested {ingested} · backlog {backlog} · lag {lag:.1} s"
        ));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: i64) -> Timestamp {
        Timestamp::from_epoch_millis(ms).unwrap()
    }

    const START: i64 = 1_776_693_600_000; // 2026-04-20T14:00:00Z

    #[test]
    fn the_same_seed_makes_the_same_fleet_and_records() {
        let cfg = SimConfig {
            devices: 5,
            ..SimConfig::default()
        };
        let mut a = Fleet::new(cfg.clone(), t(START));
        let mut b = Fleet::new(cfg, t(START));
        let end = t(START + 10 * 60_000);
        assert_eq!(a.tick(end), b.tick(end));
        assert_eq!(a.flush(), b.flush());
    }

    #[test]
    fn the_silent_device_sends_nothing_in_its_silences_and_the_rest_carry_on() {
        let cfg = SimConfig {
            devices: 3,
            readings_per_minute: 6.0,
            late_probability: 0.0,
            silence: Some(Silence {
                device: 1,
                every: Duration::from_secs(600),
                from: Duration::from_secs(120),
                until: Duration::from_secs(360),
            }),
            ..SimConfig::default()
        };
        let mut fleet = Fleet::new(cfg, t(0));
        assert_eq!(fleet.silent_device().as_deref(), Some("sensor_002"));
        let mut by_minute: BTreeMap<(String, i64), usize> = BTreeMap::new();
        for s in 1..=600 {
            for o in fleet.tick(t(s * 1000)) {
                *by_minute
                    .entry((o.partition_key.clone(), o.due.epoch_millis() / 60_000))
                    .or_default() += 1;
            }
        }
        let sent = |d: &str, m: i64| by_minute.get(&(d.to_owned(), m)).copied().unwrap_or(0);
        for m in 2..6 {
            assert_eq!(sent("sensor_002", m), 0, "minute {m}");
            assert!(sent("sensor_001", m) > 0, "minute {m}");
        }
        assert!(sent("sensor_002", 1) > 0 && sent("sensor_002", 7) > 0);
    }

    #[test]
    fn each_device_sends_about_its_rate() {
        // GIVEN 10 devices at 6 readings a minute, no arrays
        let cfg = SimConfig {
            devices: 10,
            readings_per_minute: 6.0,
            array_probability: 0.0,
            ..SimConfig::default()
        };
        let mut f = Fleet::new(cfg, t(START));
        // WHEN ten minutes pass
        let mut sent = f.tick(t(START + 10 * 60_000));
        sent.extend(f.flush());
        // THEN each device sent close to 60 readings
        let readings = expected_readings(&sent);
        for id in f.device_ids() {
            let n = readings.keys().filter(|(d, _)| *d == id).count();
            assert!((50..=70).contains(&n), "{id} sent {n}");
        }
    }

    #[test]
    fn misbehaviour_shows_up_in_a_long_run() {
        let cfg = SimConfig {
            devices: 50,
            breach_probability: 0.02,
            ..SimConfig::default()
        };
        let mut f = Fleet::new(cfg, t(START));
        let mut sent = f.tick(t(START + 30 * 60_000));
        sent.extend(f.flush());
        let dups = sent
            .iter()
            .filter(|o| matches!(o.kind, RecordKind::Duplicate(_)))
            .count();
        let bad = sent
            .iter()
            .filter(|o| matches!(o.kind, RecordKind::Malformed(_)))
            .count();
        let arrays = sent
            .iter()
            .filter(|o| matches!(&o.kind, RecordKind::Readings(r) if r.len() > 1))
            .count();
        let out_of_order = sent
            .windows(2)
            .any(|w| w[0].partition_key == w[1].partition_key && w[0].due > w[1].due)
            || {
                // per device, a later send with an earlier reading time
                let mut last: BTreeMap<&str, Timestamp> = BTreeMap::new();
                sent.iter().any(|o| {
                    let prev = last.insert(&o.partition_key, o.due);
                    prev.is_some_and(|p| p > o.due)
                })
            };
        let hot = expected_readings(&sent)
            .values()
            .any(|r| r["temperature"].as_f64().unwrap() > 40.0);
        assert!(dups > 0 && bad > 0 && arrays > 0, "{dups} {bad} {arrays}");
        assert!(out_of_order, "some reading must arrive after a newer one");
        assert!(hot, "some reading must breach the temperature threshold");
    }

    #[test]
    fn valid_readings_are_what_ingest_accepts() {
        let mut f = Fleet::new(SimConfig::default(), t(START));
        let (mut aggregated, mut senml, mut iot) = (0, 0, 0);
        for o in f.tick(t(START + 5 * 60_000)) {
            if let RecordKind::Readings(rs) = o.kind {
                if serde_json::from_slice::<Value>(&o.data)
                    .ok()
                    .and_then(|v| v.as_array().map(|a| tidemark_ingest::senml::is_pack(a)))
                    == Some(true)
                {
                    senml += 1;
                    let at = Timestamp::parse_rfc3339("2026-04-20T14:00:00Z").unwrap();
                    let mut c = tidemark_ingest::IngestConfig::new("t");
                    c.retention_days = 36_500;
                    c.max_future = Duration::from_secs(86_400 * 36_500);
                    let got = tidemark_ingest::decode_record(&o.data, at, &c).unwrap();
                    assert_eq!(got.len(), rs.len());
                    for (g, want) in got.iter().zip(&rs) {
                        assert_eq!(g.device_id.as_str(), want["deviceId"].as_str().unwrap());
                        for m in ["temperature", "humidity", "pressure", "battery"] {
                            let name = tidemark_schema::MetricName::new(m).unwrap();
                            assert_eq!(Some(g.metrics[&name]), want[m].as_f64());
                        }
                    }
                    continue;
                }
                if String::from_utf8_lossy(&o.data).contains("receivedAt") {
                    iot += 1;
                    let v: Value = serde_json::from_slice(&o.data).unwrap();
                    assert_eq!(v["tidemarkThing"].as_str(), Some(o.partition_key.as_str()));
                    let at =
                        Timestamp::parse_rfc3339(rs[0]["timestamp"].as_str().unwrap()).unwrap();
                    assert_eq!(v["receivedAt"].as_i64(), Some(at.epoch_millis()));
                    let c = tidemark_ingest::IngestConfig::new("t");
                    let got = tidemark_ingest::decode_message(&o.data, at, at, &c).unwrap();
                    assert_eq!(got.readings[0].device_id.as_str(), rs[0]["deviceId"]);
                    assert_eq!(got.readings[0].timestamp, at);
                    continue;
                }
                let parsed = match tidemark_ingest::kpl::open(&o.data) {
                    tidemark_ingest::kpl::Payload::Aggregate(users) => {
                        aggregated += 1;
                        users
                            .iter()
                            .map(|u| serde_json::from_slice(&u.data).unwrap())
                            .collect()
                    }
                    _ => match serde_json::from_slice(&o.data).unwrap() {
                        Value::Array(v) => v,
                        v => vec![v],
                    },
                };
                assert_eq!(parsed, rs);
                for r in rs {
                    tidemark_schema::DeviceId::new(r["deviceId"].as_str().unwrap()).unwrap();
                    Timestamp::parse_flexible(r["timestamp"].as_str().unwrap()).unwrap();
                    assert!((0.0..=100.0).contains(&r["battery"].as_f64().unwrap()));
                }
            }
        }
        assert!(aggregated > 0, "some records go as KPL aggregates");
        assert!(senml > 0, "some records go as SenML packs");
        assert!(iot > 0, "some records come as IoT Core rule outputs");
    }

    #[tokio::test]
    async fn the_fleet_registers_with_site_and_line_tags_once() {
        let api = tidemark_api::App::with_store(
            tidemark_api::memory::MemoryStore::new(),
            tidemark_api::ApiConfig::new("memory"),
        );
        let cfg = SimConfig {
            devices: 7,
            ..SimConfig::default()
        };
        assert_eq!(register_fleet(&cfg, &api).await.unwrap(), 7);
        let tags_of = |id: &str| {
            let req = http::Request::get(format!("/devices/{id}"))
                .body(lambda_http::Body::Empty)
                .unwrap();
            let api = &api;
            async move {
                let resp = api.handle(req).await;
                let v: Value = serde_json::from_slice(resp.body().as_ref()).unwrap();
                v["tags"].clone()
            }
        };
        assert_eq!(tags_of("sensor_001").await, json!({"site":"A","line":"1"}));
        assert_eq!(tags_of("sensor_002").await, json!({"site":"B","line":"1"}));
        assert_eq!(tags_of("sensor_004").await, json!({"site":"A","line":"2"}));
        assert_eq!(tags_of("sensor_007").await, json!({"site":"A","line":"1"}));
        // A second run leaves the registered devices as they are.
        assert_eq!(register_fleet(&cfg, &api).await.unwrap(), 0);
    }
}
