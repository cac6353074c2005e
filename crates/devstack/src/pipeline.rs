//! The whole pipeline on one machine: the mappings with their functions (ingest on Kinesis;
//! the aggregator's two roles, rollups and alerts, on the table stream), the local HTTP API
//! and the local EventBridge endpoint, over one table and one stream. `tidemark-devstack run` and the end-to-end test
//! both start it from here.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lambda_events::event::dynamodb::Event;
use aws_lambda_events::event::kinesis::KinesisEvent;
use aws_lambda_events::event::streams::{DynamoDbEventResponse, KinesisEventResponse};
use tidemark_store::settings::{self, Env};
use tidemark_streams::{DynamoDbStreamSource, EventSource, KinesisSource};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::esm::{
    BatchFunction, FunctionError, HttpFunction, KinesisHandler, Mapping, MappingConfig,
    MappingStats, StreamHandler,
};
use crate::event_bus::{self, EventLog};
use crate::{DevstackError, LocalConfig, http_api};

/// Lambda's timeouts for the functions in `template.yaml`: the handlers get the same deadline.
const FUNCTION_TIMEOUT: Duration = Duration::from_secs(60);
const AGGREGATOR_TIMEOUT: Duration = Duration::from_secs(120);

/// The ingest function, in process.
pub struct InProcessIngest(pub tidemark_ingest::Ingest);

impl KinesisHandler for InProcessIngest {
    async fn handle(&self, event: KinesisEvent) -> Result<KinesisEventResponse, FunctionError> {
        // `process` rather than `handle`: the same work without the EMF line on stdout, which
        // only CloudWatch reads and which would drown the terminal.
        self.0
            .process(&event, Instant::now() + FUNCTION_TIMEOUT)
            .await
            .map(|(response, _stats)| response)
            .map_err(FunctionError::new)
    }
}

/// The aggregator function, in process.
pub struct InProcessAggregator(pub Arc<tidemark_aggregator::Aggregator>);

impl StreamHandler for InProcessAggregator {
    async fn handle(&self, event: Event) -> Result<DynamoDbEventResponse, FunctionError> {
        // The aggregator reports per-record failures in the response; it has no error path.
        let (response, report) = self
            .0
            .process_until(&event, Instant::now() + AGGREGATOR_TIMEOUT)
            .await;
        tracing::debug!(?report, "batch aggregated");
        Ok(response)
    }
}

/// Where the functions run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Functions {
    /// In this process (the default).
    InProcess,
    /// Behind the Lambda Invoke API at this URL (`cargo lambda watch`), by function name.
    Invoke {
        url: String,
        ingest: String,
        aggregator: String,
    },
}

/// Everything the pipeline needs to know.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    pub local: LocalConfig,
    /// 0 picks a free port.
    pub api_port: u16,
    pub functions: Functions,
    pub ingest: MappingConfig,
    /// The rollups role's mapping on the table stream (`tidemark-aggregator` when deployed).
    pub rollups: MappingConfig,
    /// `DEFAULT_THRESHOLDS` of the aggregator, JSON (`{}` for none).
    pub default_thresholds: String,
    /// `DEFAULT_LAYOUT` (`single` | `packed:<seconds>`) for the in-process ingest: how
    /// devices without a layout of their own store readings (`None`: leave the stored one).
    pub default_layout: Option<tidemark_schema::Layout>,
    /// `DEVICE_IDENTITY` for the in-process ingest (default `partition-key`, as deployed):
    /// which devices a record may speak for. The simulator keys each record by its device.
    pub device_identity: tidemark_schema::DeviceIdentity,
    /// The second mapping on the table stream, `tidemark-alerts` (the aggregator in the
    /// alerts role, publishing to the local event bus); `None` runs without it.
    pub alerts: Option<AlertsConfig>,
    /// The API behind a JWT authorizer trusting this issuer (`make run-signin`); `None`: open
    /// on loopback.
    pub sign_in: Option<LocalSignIn>,
    /// `OFFLINE_AFTER_SECONDS` of the alerts role, the API and the watchdog.
    pub offline_after_default: u32,
    /// The watchdog on its schedule (in-process functions only); `None`: not run.
    pub watchdog: Option<WatchdogSchedule>,
    /// The Parquet export on its schedule, into the local S3 (in-process functions only);
    /// `None`: not run.
    pub export: Option<ExportSchedule>,
}

/// How often the export runs (`TIDEMARK_EXPORT_SECONDS`, default 300; 0: off), where it
/// writes, and how long after an hour closes it waits (`TIDEMARK_EXPORT_GRACE_SECONDS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportSchedule {
    pub period: Duration,
    pub bucket: String,
    pub prefix: String,
    pub grace: Duration,
}

/// How often the watchdog runs, how long each run waits for its heartbeats, and the group
/// rules it judges (`GROUP_RULES`).
#[derive(Debug, Clone, PartialEq)]
pub struct WatchdogSchedule {
    pub period: Duration,
    pub heartbeat_wait: Duration,
    pub group_rules: Vec<tidemark_schema::GroupRuleSpec>,
}

impl WatchdogSchedule {
    /// Every `period`, waiting at most a third of it (at most 20 s, the deployed wait), with
    /// no group rules.
    pub fn every(period: Duration) -> Self {
        WatchdogSchedule {
            period,
            heartbeat_wait: (period / 3).min(Duration::from_secs(20)),
            group_rules: Vec::new(),
        }
    }
}

/// `make run`'s group rules when `GROUP_RULES` is not set: the simulated fleet's site B (seven
/// devices, `sensor_020` among them, which goes quiet for four minutes of every ten) is a
/// seventh offline while it is, so the first rule opens a group alert and resolves it again;
/// the fleet's occasional temperature spikes (41 to 48) trip the second, site A's hottest
/// reading over five minutes, which stays open until five minutes pass without one.
pub const LOCAL_GROUP_RULES: &str = r#"[{"group":"site:B","offlineFraction":{"above":0.1}},{"group":"site:A","metric":"temperature","aggregate":"max","window":"5m","above":40,"keepFiringForSeconds":300}]"#;

/// [`LOCAL_GROUP_RULES`] under the local `GROUP_TAGS`: a window rule over a key it leaves
/// out (its group keeps no rollups) is left out with it, rather than stopping `make run`.
pub fn local_group_rules(
    keys: &[tidemark_schema::TagKey],
) -> Result<Vec<tidemark_schema::GroupRuleSpec>, String> {
    let rules = tidemark_watchdog::config::group_rules(LOCAL_GROUP_RULES)?;
    Ok(rules
        .into_iter()
        .filter(|r| {
            !matches!(r.signal, tidemark_schema::GroupSignal::Window { .. })
                || keys.contains(&r.group.key)
        })
        .collect())
}

/// A local stack signing in at an OpenID Connect issuer: the API function's configuration
/// (the dashboard's sign-in, the scope names) and what the authorizer trusts.
#[derive(Debug, Clone)]
pub struct LocalSignIn {
    pub api: tidemark_api::ApiConfig,
    pub issuer: String,
    pub audiences: Vec<String>,
}

impl LocalSignIn {
    /// From the API function's own variables (`UI_AUTH=jwt`, `JWT_ISSUER`, `JWT_AUDIENCE`,
    /// `UI_OIDC_CLIENT_ID`, the scope names), as the template sets them; `None` without an
    /// issuer.
    pub fn from_env(table: &str) -> Result<Option<Self>, DevstackError> {
        let env = Env::new(|k: &str| std::env::var(k).ok());
        let Some(issuer) = env.text(&settings::JWT_ISSUER) else {
            return Ok(None);
        };
        let fixed = [
            (settings::TIDEMARK_LOCAL.name, "1"),
            (settings::UI_AUTH.name, "jwt"),
            (settings::TABLE_NAME.name, table),
        ];
        let api = tidemark_api::ApiConfig::from_lookup(|k| {
            match fixed.iter().find(|(name, _)| *name == k) {
                Some((_, v)) => Some((*v).to_owned()),
                None => std::env::var(k).ok(),
            }
        })?;
        let audiences = env
            .text(&settings::JWT_AUDIENCE)
            .unwrap_or_default()
            .split(',')
            .map(|a| a.trim().to_owned())
            .filter(|a| !a.is_empty())
            .collect();
        Ok(Some(LocalSignIn {
            api,
            issuer,
            audiences,
        }))
    }
}

/// The alerts mapping and where its events go.
#[derive(Debug, Clone)]
pub struct AlertsConfig {
    pub mapping: MappingConfig,
    /// Port of the local `PutEvents` endpoint (0 picks a free one).
    pub events_port: u16,
    /// JSON-lines file every event is appended to.
    pub events_file: Option<PathBuf>,
    /// `EVENT_BUS_NAME` of the alerts function.
    pub bus: String,
    /// `DEFAULT_RULES` of the alerts function, JSON (`[]` for none): only the alerts role
    /// judges rules, so the setting lives with its mapping.
    pub default_rules: String,
}

impl AlertsConfig {
    /// The template's alert mapping (1 s window) with its events kept in memory only, on a
    /// free port: for tests.
    pub fn ephemeral(mapping: MappingConfig) -> Self {
        AlertsConfig {
            mapping,
            events_port: 0,
            events_file: None,
            bus: "tidemark-local".into(),
            default_rules: "[]".into(),
        }
    }
}

/// devstack's own variables that were renamed, with the name each had before: still read,
/// with a deprecation warning ([`settings::renamed`]), when the new one is unset.
const OLD_NAMES: &[(&str, &str)] = &[
    ("TIDEMARK_ROLLUPS_WINDOW", "TIDEMARK_AGGREGATOR_WINDOW"), // deprecated
    ("TIDEMARK_ROLLUPS_FUNCTION", "TIDEMARK_AGGREGATOR_FUNCTION"), // deprecated
];

impl PipelineConfig {
    /// `make run`'s settings: the template's mappings with short batching windows, so what
    /// the simulator sends shows up in the API within seconds.
    pub fn from_env(local: LocalConfig) -> Result<Self, DevstackError> {
        let named = |k: &'static str| {
            let old = OLD_NAMES
                .iter()
                .find(|(new, _)| *new == k)
                .map(|(_, old)| *old);
            settings::renamed(|n| std::env::var(n).ok(), k, old)
        };
        let var = |k: &'static str| named(k).map(|(_, v)| v);
        let api_port: u16 = match var("TIDEMARK_API_PORT") {
            Some(p) => p.parse().map_err(|_| {
                DevstackError::Config(format!("TIDEMARK_API_PORT={p:?} is not a port"))
            })?,
            None => 3000,
        };
        let functions = match var("TIDEMARK_INVOKE_URL") {
            Some(url) => Functions::Invoke {
                url,
                ingest: var("TIDEMARK_INGEST_FUNCTION").unwrap_or_else(|| "tidemark-ingest".into()),
                aggregator: var("TIDEMARK_ROLLUPS_FUNCTION")
                    .unwrap_or_else(|| "tidemark-aggregator".into()),
            },
            None => Functions::InProcess,
        };
        let seconds = |k: &'static str, d: f64| -> Result<Duration, DevstackError> {
            match named(k) {
                None => Ok(Duration::from_secs_f64(d)),
                Some((k, v)) => v
                    .parse::<f64>()
                    .ok()
                    .filter(|s| (0.0..=300.0).contains(s))
                    .map(Duration::from_secs_f64)
                    .ok_or_else(|| {
                        DevstackError::Config(format!("{k}={v:?} is not 0..300 seconds"))
                    }),
            }
        };
        let on_failure = PathBuf::from(
            var("TIDEMARK_ONFAILURE_DIR").unwrap_or_else(|| ".local/onfailure".into()),
        );
        let max_retries = max_retry_attempts(var("TIDEMARK_MAX_RETRY_ATTEMPTS"))?;
        let ingest = MappingConfig {
            batch_size: 500,
            batching_window: seconds("TIDEMARK_INGEST_WINDOW", 1.0)?,
            max_retries,
            on_failure_dir: Some(on_failure.join("ingest")),
            ..MappingConfig::new("tidemark-ingest")
        };
        let aggregator = MappingConfig {
            batch_size: 1000,
            batching_window: seconds("TIDEMARK_ROLLUPS_WINDOW", 2.0)?,
            max_retries,
            on_failure_dir: Some(on_failure.join("rollups")),
            ..MappingConfig::new("tidemark-aggregator")
        };
        // The functions' own settings, read as the functions read them.
        let env = Env::new(|k: &str| std::env::var(k).ok());
        let alerts = AlertsConfig {
            mapping: MappingConfig {
                batch_size: 1000,
                batching_window: seconds("TIDEMARK_ALERTS_WINDOW", 1.0)?,
                max_retries,
                on_failure_dir: Some(on_failure.join("alerts")),
                ..MappingConfig::new("tidemark-alerts")
            },
            events_port: match var("TIDEMARK_EVENTS_PORT") {
                Some(p) => p.parse().map_err(|_| {
                    DevstackError::Config(format!("TIDEMARK_EVENTS_PORT={p:?} is not a port"))
                })?,
                None => api_port
                    .checked_add(1)
                    .filter(|_| api_port != 0)
                    .unwrap_or(0),
            },
            events_file: Some(PathBuf::from(
                var("TIDEMARK_EVENTS_FILE").unwrap_or_else(|| ".local/events.jsonl".into()),
            )),
            bus: "tidemark-local".into(),
            default_rules: env
                .text(&settings::DEFAULT_RULES)
                .unwrap_or_else(|| "[]".into()),
        };
        let offline_after_default = env.offline_after()?.unwrap_or(120);
        let watchdog = match var("TIDEMARK_WATCHDOG_SECONDS").as_deref() {
            Some("0") => None,
            _ => {
                let group_keys = env.group_tags()?;
                let group_rules = match env.try_parse(
                    &settings::GROUP_RULES,
                    tidemark_watchdog::config::group_rules,
                )? {
                    Some(rules) => {
                        tidemark_watchdog::config::windows_kept(&rules, &group_keys).map(|()| rules)
                    }
                    None => local_group_rules(&group_keys),
                }
                .map_err(|e| {
                    DevstackError::Config(format!("{}: {e}", settings::GROUP_RULES.name))
                })?;
                Some(WatchdogSchedule {
                    group_rules,
                    ..WatchdogSchedule::every(seconds("TIDEMARK_WATCHDOG_SECONDS", 60.0)?)
                })
            }
        };
        let export = match var("TIDEMARK_EXPORT_SECONDS").as_deref() {
            Some("0") => None,
            _ => Some(ExportSchedule {
                period: seconds("TIDEMARK_EXPORT_SECONDS", 300.0)?,
                bucket: var("TIDEMARK_EXPORT_BUCKET").unwrap_or_else(|| "tidemark-export".into()),
                prefix: "tidemark".into(),
                grace: seconds("TIDEMARK_EXPORT_GRACE_SECONDS", 60.0)?,
            }),
        };
        Ok(PipelineConfig {
            alerts: Some(alerts),
            offline_after_default,
            watchdog,
            export,
            sign_in: LocalSignIn::from_env(&local.table)?,
            local,
            api_port,
            functions,
            ingest,
            rollups: aggregator,
            default_layout: env.try_parse(&settings::DEFAULT_LAYOUT, |v| {
                v.parse::<tidemark_schema::Layout>()
            })?,
            device_identity: env
                .parse_with(
                    &settings::DEVICE_IDENTITY,
                    "payload, partition-key or iot-thing",
                    tidemark_schema::DeviceIdentity::parse,
                )?
                .unwrap_or_default(),
            default_thresholds: env.text(&settings::DEFAULT_THRESHOLDS).unwrap_or_else(|| {
                r#"{"temperature":{"max":35,"severity":"critical"},"battery":{"min":10,"severity":"warning"}}"#.into()
            }),
        })
    }
}

/// `TIDEMARK_MAX_RETRY_ATTEMPTS`: unset or `-1` retries a failing batch until it succeeds (the
/// template's `MaximumRetryAttempts: -1`); `0..=10000` gives up after that many retries and
/// writes an on-failure record, as a mapping configured that way on AWS would.
pub fn max_retry_attempts(v: Option<String>) -> Result<Option<u32>, DevstackError> {
    match v.as_deref().map(str::trim) {
        None | Some("-1") => Ok(None),
        Some(s) => s
            .parse::<u32>()
            .ok()
            .filter(|n| *n <= 10_000)
            .map(Some)
            .ok_or_else(|| {
                DevstackError::Config(format!(
                    "TIDEMARK_MAX_RETRY_ATTEMPTS={s:?} is not -1 or 0..10000"
                ))
            }),
    }
}

/// A running pipeline. Dropping it without [`Pipeline::stop`] aborts the tasks.
pub struct Pipeline {
    pub api_addr: SocketAddr,
    pub ingest: Arc<MappingStats>,
    pub rollups: Arc<MappingStats>,
    /// The alerts mapping, when configured and the functions run in process.
    pub alerts: Option<Arc<MappingStats>>,
    /// The local `PutEvents` endpoint (`GET /events` lists what it received).
    pub events_addr: Option<SocketAddr>,
    pub events: Option<Arc<EventLog>>,
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
}

impl Pipeline {
    /// Creates the table and stream if needed and starts the mappings and the API.
    pub async fn start(cfg: PipelineConfig) -> Result<Pipeline, DevstackError> {
        crate::bootstrap(&cfg.local).await?;
        let ddb = cfg.local.dynamodb().await;
        let table = cfg.local.table.clone();
        let kinesis_source = KinesisSource::new(cfg.local.kinesis().await, &cfg.local.stream)
            .await
            .map_err(DevstackError::Mapping)?;
        let stream_source =
            DynamoDbStreamSource::for_table(&ddb, cfg.local.dynamodb_streams().await, &table)
                .await
                .map_err(DevstackError::Mapping)?;
        let (stop, rx) = watch::channel(false);
        let mut tasks = JoinSet::new();

        let (ingest, aggregator) = match &cfg.functions {
            Functions::InProcess => {
                let ingest_fn = InProcessIngest(tidemark_ingest::Ingest::new(
                    ddb.clone(),
                    tidemark_ingest::IngestConfig {
                        default_layout: cfg.default_layout,
                        device_identity: cfg.device_identity,
                        ..tidemark_ingest::IngestConfig::new(table.clone())
                    },
                ));
                let thresholds =
                    tidemark_aggregator::config::parse_thresholds(&cfg.default_thresholds)
                        .map_err(|e| DevstackError::Config(e.to_string()))?;
                let agg_fn = InProcessAggregator(Arc::new(tidemark_aggregator::Aggregator::new(
                    ddb.clone(),
                    tidemark_aggregator::AggregatorConfig::new(table.clone())
                        .with_default_thresholds(thresholds),
                )));
                (
                    spawn(
                        &mut tasks,
                        kinesis_source,
                        ingest_fn,
                        cfg.ingest.clone(),
                        &rx,
                    ),
                    spawn(&mut tasks, stream_source, agg_fn, cfg.rollups.clone(), &rx),
                )
            }
            Functions::Invoke {
                url,
                ingest,
                aggregator,
            } => {
                let ingest_fn = HttpFunction::new(url, ingest)
                    .map_err(|e| DevstackError::Config(e.to_string()))?;
                let agg_fn = HttpFunction::new(url, aggregator)
                    .map_err(|e| DevstackError::Config(e.to_string()))?;
                (
                    spawn(
                        &mut tasks,
                        kinesis_source,
                        ingest_fn,
                        cfg.ingest.clone(),
                        &rx,
                    ),
                    spawn(&mut tasks, stream_source, agg_fn, cfg.rollups.clone(), &rx),
                )
            }
        };

        let (mut alerts, mut events, mut events_addr) = (None, None, None);
        match (&cfg.alerts, &cfg.functions) {
            (Some(a), Functions::InProcess) => {
                let (listener, addr) = event_bus::bind(a.events_port).await.map_err(|e| {
                    DevstackError::Config(format!(
                        "cannot listen on 127.0.0.1:{}: {e}",
                        a.events_port
                    ))
                })?;
                let log = Arc::new(EventLog::new(a.events_file.clone()));
                tasks.spawn(event_bus::serve(listener, log.clone(), rx.clone()));
                let function = alerts_function(&cfg, a, &format!("http://{addr}"), &ddb).await?;
                let source = DynamoDbStreamSource::for_table(
                    &ddb,
                    cfg.local.dynamodb_streams().await,
                    &table,
                )
                .await
                .map_err(DevstackError::Mapping)?;
                alerts = Some(spawn(&mut tasks, source, function, a.mapping.clone(), &rx));
                (events, events_addr) = (Some(log), Some(addr));
            }
            (Some(_), Functions::Invoke { .. }) => tracing::warn!(
                "the alerts mapping runs only with in-process functions (cargo lambda watch \
                 serves each binary once, with one environment)"
            ),
            (None, _) => {}
        }

        let (listener, api_addr) = http_api::bind(cfg.api_port).await.map_err(|e| {
            DevstackError::Config(format!("cannot listen on 127.0.0.1:{}: {e}", cfg.api_port))
        })?;
        if let (Some(w), Functions::InProcess) = (cfg.watchdog.clone(), &cfg.functions) {
            let watchdog = tidemark_watchdog::Watchdog::new(
                tidemark_watchdog::DynamoWatch::new(ddb.clone(), table.clone()),
                tidemark_watchdog::KinesisHeartbeats {
                    client: cfg.local.kinesis().await,
                    stream: cfg.local.stream.clone(),
                },
                tidemark_watchdog::WatchdogConfig {
                    offline_after_default: cfg.offline_after_default,
                    heartbeat_wait: w.heartbeat_wait,
                    group_rules: w.group_rules,
                    ..tidemark_watchdog::WatchdogConfig::new(
                        table.clone(),
                        cfg.local.stream.clone(),
                    )
                },
            );
            tasks.spawn(crate::schedule::watchdog(watchdog, w.period, rx.clone()));
        }
        if let (Some(e), Functions::InProcess) = (&cfg.export, &cfg.functions) {
            let s3_endpoint = tidemark_streams::LocalEndpoints::from_env().s3;
            let s3 = tidemark_exporter::s3::client(
                &tidemark_store::ClientSettings::default(),
                Some(&s3_endpoint),
            )
            .await;
            // moto starts empty: the bucket is made here (deployed: the template's).
            let _ = s3.create_bucket().bucket(&e.bucket).send().await;
            let mut config = tidemark_exporter::config::ExporterConfig::new(&table, &e.bucket);
            config.schedule.prefix = e.prefix.clone();
            config.schedule.grace = e.grace;
            // DynamoDB Local's indexes are written with their items: nothing to wait for.
            config.schedule.settle = std::time::Duration::ZERO;
            // The slices go through a queue on moto (which serves SQS beside S3), as deployed.
            let sqs = tidemark_exporter::queue::client(
                &tidemark_store::ClientSettings::default(),
                Some(&s3_endpoint),
            )
            .await;
            let queue = sqs
                .create_queue()
                .queue_name(crate::schedule::EXPORT_QUEUE)
                .send()
                .await
                .map_err(|e| {
                    DevstackError::Queue(format!(
                        "creating it on moto: {}",
                        aws_sdk_sqs::error::DisplayErrorContext(e)
                    ))
                })?;
            config.queue_url = queue.queue_url;
            let export = std::sync::Arc::new(tidemark_exporter::function::Exporter::new(
                ddb.clone(),
                s3,
                Some(sqs),
                config,
            ));
            tasks.spawn(crate::schedule::export(
                export.clone(),
                e.period,
                rx.clone(),
            ));
            tasks.spawn(crate::schedule::export_slices(export, rx.clone()));
        }
        match &cfg.sign_in {
            None => {
                let mut config = tidemark_api::ApiConfig::new(table.clone());
                config.offline_after_default = cfg.offline_after_default;
                let api = tidemark_api::App::new(ddb.clone(), config);
                tasks.spawn(http_api::serve(listener, Arc::new(api), rx.clone()));
            }
            Some(s) => {
                let gate = crate::authorizer::Authorized {
                    inner: tidemark_api::App::new(ddb.clone(), s.api.clone()),
                    authorizer: crate::authorizer::JwtAuthorizer::new(
                        s.issuer.clone(),
                        s.audiences.clone(),
                    ),
                    scopes: s.api.scopes.clone(),
                };
                tasks.spawn(http_api::serve(listener, Arc::new(gate), rx.clone()));
            }
        }
        Ok(Pipeline {
            api_addr,
            ingest,
            rollups: aggregator,
            alerts,
            events_addr,
            events,
            stop,
            tasks,
        })
    }

    /// A receiver that turns true when the pipeline stops (for companions like the simulator).
    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// Stops polling and serving; invocations in flight finish first.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        while self.tasks.join_next().await.is_some() {}
    }
}

/// The aggregator in the alerts role, publishing through the real EventBridge client to the
/// local endpoint at `url`.
async fn alerts_function(
    cfg: &PipelineConfig,
    a: &AlertsConfig,
    url: &str,
    ddb: &aws_sdk_dynamodb::Client,
) -> Result<InProcessAggregator, DevstackError> {
    let thresholds = tidemark_aggregator::config::parse_thresholds(&cfg.default_thresholds)
        .map_err(|e| DevstackError::Config(e.to_string()))?;
    let rules = default_rules(&a.default_rules)?;
    let table = &cfg.local.table;
    let notifier = tidemark_aggregator::Notifier::with_parts(
        tidemark_aggregator::notify::SdkPublisher(
            tidemark_aggregator::notify::eventbridge_client(Some(url)).await,
        ),
        tidemark_aggregator::notify::DynamoMarkers::new(ddb.clone(), table.clone()),
        a.bus.clone(),
    );
    let config = tidemark_aggregator::AggregatorConfig {
        offline_after_default: cfg.offline_after_default,
        ..tidemark_aggregator::AggregatorConfig::new(table.clone())
            .with_role(tidemark_aggregator::Role::Alerts)
            .with_default_thresholds(thresholds)
            .with_default_rules(rules)
    };
    Ok(InProcessAggregator(Arc::new(
        tidemark_aggregator::Aggregator::new(ddb.clone(), config).with_notifier(notifier),
    )))
}

/// [`AlertsConfig::default_rules`] parsed as the alerts function parses `DEFAULT_RULES`
/// (`tidemark_schema::rules::parse_rules`): a bad rule stops the pipeline naming its field.
fn default_rules(json: &str) -> Result<Vec<tidemark_schema::RuleSpec>, DevstackError> {
    let bad = |e: String| DevstackError::Config(format!("{}: {e}", settings::DEFAULT_RULES.name));
    let v: serde_json::Value = serde_json::from_str(json).map_err(|e| bad(e.to_string()))?;
    tidemark_schema::rules::parse_rules(&v).map_err(|(i, e)| {
        bad(match i {
            Some(i) => format!("rules[{i}].{e}"),
            None => e.to_string(),
        })
    })
}

fn spawn<S, F>(
    tasks: &mut JoinSet<()>,
    source: S,
    function: F,
    config: MappingConfig,
    rx: &watch::Receiver<bool>,
) -> Arc<MappingStats>
where
    S: EventSource,
    F: BatchFunction<S::Record>,
{
    let mapping = Mapping::new(source, function, config);
    let stats = mapping.stats();
    tasks.spawn(mapping.run(rx.clone()));
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_attempts_are_unlimited_unless_a_finite_count_is_configured() {
        assert_eq!(max_retry_attempts(None).unwrap(), None);
        assert_eq!(max_retry_attempts(Some("-1".into())).unwrap(), None);
        assert_eq!(max_retry_attempts(Some("10".into())).unwrap(), Some(10));
        assert_eq!(max_retry_attempts(Some(" 0 ".into())).unwrap(), Some(0));
        for bad in ["-2", "ten", "10001"] {
            let e = max_retry_attempts(Some(bad.into())).unwrap_err();
            assert!(e.to_string().contains("TIDEMARK_MAX_RETRY_ATTEMPTS"), "{e}");
        }
    }

    #[test]
    fn make_runs_group_rules_leave_out_a_window_over_a_key_without_group_rollups() {
        let key = |k: &str| tidemark_schema::TagKey::new(k).unwrap();
        let kinds = |keys: &[tidemark_schema::TagKey]| -> Vec<String> {
            local_group_rules(keys)
                .unwrap()
                .iter()
                .map(|r| r.to_string())
                .collect()
        };
        assert_eq!(
            kinds(&[key("site")]),
            [
                "site:B offline fraction above 0.1",
                "site:A temperature max over 5m above 40"
            ]
        );
        assert_eq!(kinds(&[key("line")]), ["site:B offline fraction above 0.1"]);
    }
}
