//! What the examples that run the local pipeline share: their logging, and the pipeline with
//! the template's mapping settings on a DynamoDB Local of their own.

use std::time::Duration;

use tidemark_bench::local_ddb::LocalDynamo;
use tidemark_devstack::LocalConfig;
use tidemark_devstack::esm::MappingConfig;
use tidemark_devstack::pipeline::{
    AlertsConfig, Functions, Pipeline, PipelineConfig, WatchdogSchedule,
};
use tidemark_testkit::{TestStream, services, unique_name};

/// The functions' warnings (a device not decided, a batch failed) go to stderr; `RUST_LOG`
/// asks for more.
pub fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// What differs between the runs of the template's pipeline.
pub struct Setup {
    /// Names the table and the on-failure folder.
    pub label: &'static str,
    pub offline_after_default: u32,
    pub watchdog: Option<WatchdogSchedule>,
    pub default_thresholds: String,
}

/// The pipeline as the template sets up its mappings (ingest window 1 s, alerts window 1 s,
/// rollups window 300 s, batches of up to 1,000), functions in process, on `dynamo` and
/// `stream`. The mappings' own polling (250 ms) stands in for Lambda's.
pub async fn template_pipeline(
    setup: Setup,
    dynamo: &LocalDynamo,
    stream: &TestStream,
) -> Pipeline {
    template_pipeline_with_rules(setup, "[]", dynamo, stream).await
}

/// [`template_pipeline`] with the alerts function's `DEFAULT_RULES` set to `default_rules`
/// (a JSON array of rules): for the scenarios that measure the rule kinds beyond a threshold
/// without a device item of their own.
pub async fn template_pipeline_with_rules(
    setup: Setup,
    default_rules: &str,
    dynamo: &LocalDynamo,
    stream: &TestStream,
) -> Pipeline {
    let on_failure = std::env::temp_dir().join(unique_name(&format!("{}-onfailure", setup.label)));
    let mapping = |name: &str, window_s: u64| MappingConfig {
        batch_size: 1000,
        batching_window: Duration::from_secs(window_s),
        on_failure_dir: Some(on_failure.join(name)),
        ..MappingConfig::new(name)
    };
    Pipeline::start(PipelineConfig {
        sign_in: None,
        offline_after_default: setup.offline_after_default,
        watchdog: setup.watchdog,
        export: None,
        local: LocalConfig {
            table: unique_name(setup.label),
            stream: stream.name.clone(),
            stream_shards: 2,
            dynamodb_endpoint: format!("http://{}", dynamo.addr),
            kinesis_endpoint: services().kinesis_endpoint.clone(),
        },
        api_port: 0,
        functions: Functions::InProcess,
        ingest: mapping("ingest", 1),
        rollups: mapping("aggregator", 300),
        default_layout: None,
        default_thresholds: setup.default_thresholds,
        alerts: Some(AlertsConfig {
            default_rules: default_rules.to_owned(),
            ..AlertsConfig::ephemeral(mapping("alerts", 1))
        }),
        // As deployed: every record is keyed by its device.
        device_identity: tidemark_schema::DeviceIdentity::PartitionKey,
    })
    .await
    .expect("pipeline starts")
}
