//! One place that decides how Tidemark talks to AWS: DynamoDB Local (or any emulator) when
//! an endpoint is configured, the real service otherwise.

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::config::Credentials;

#[derive(Debug, Clone)]
pub struct ClientSettings {
    /// `Some` for DynamoDB Local; `None` uses the SDK's normal endpoint resolution.
    pub endpoint: Option<String>,
    pub max_attempts: u32,
    pub connect_timeout: Duration,
    /// Per attempt; a slow partition must not eat the whole Lambda deadline.
    pub attempt_timeout: Duration,
}

impl Default for ClientSettings {
    fn default() -> Self {
        ClientSettings {
            endpoint: None,
            max_attempts: 5,
            connect_timeout: Duration::from_secs(3),
            attempt_timeout: Duration::from_secs(10),
        }
    }
}

impl ClientSettings {
    /// Settings from the environment: `TIDEMARK_DYNAMODB_ENDPOINT` (or the SDK's own
    /// `AWS_ENDPOINT_URL_DYNAMODB`) switches to a local endpoint.
    pub fn from_env() -> Self {
        ClientSettings {
            endpoint: std::env::var(crate::settings::TIDEMARK_DYNAMODB_ENDPOINT.name)
                .ok()
                .filter(|s| !s.is_empty()),
            ..Default::default()
        }
    }

    pub fn local(endpoint: impl Into<String>) -> Self {
        ClientSettings {
            endpoint: Some(endpoint.into()),
            ..Default::default()
        }
    }
}

/// Shared SDK configuration: adaptive retries with backoff, bounded timeouts, and — against a
/// local endpoint — a default region and dummy credentials so nothing needs an AWS account.
pub async fn sdk_config(settings: &ClientSettings) -> SdkConfig {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .retry_config(
            RetryConfig::standard()
                .with_max_attempts(settings.max_attempts)
                .with_initial_backoff(Duration::from_millis(50)),
        )
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(settings.connect_timeout)
                .operation_attempt_timeout(settings.attempt_timeout)
                .build(),
        );
    if settings.endpoint.is_some() {
        let region = std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into());
        loader = loader
            .region(Region::new(region))
            .credentials_provider(Credentials::new(
                "local",
                "local",
                None,
                None,
                "tidemark-local",
            ));
    }
    loader.load().await
}

/// The DynamoDB client for these settings.
pub async fn dynamodb_client(settings: &ClientSettings) -> aws_sdk_dynamodb::Client {
    let shared = sdk_config(settings).await;
    let mut b = aws_sdk_dynamodb::config::Builder::from(&shared);
    if let Some(e) = &settings.endpoint {
        b = b.endpoint_url(e);
    }
    aws_sdk_dynamodb::Client::from_conf(b.build())
}
