//! The API Lambda: configuration, clients and the cursor key once, then
//! `tidemark_api::App` per request.

use lambda_http::{Error, Request, service_fn};
use tidemark_api::secret::{KeyLoader, KeyPolicy, SecretsManager};
use tidemark_api::{ApiConfig, App};
use tidemark_schema::Timestamp;
use tidemark_store::{ClientSettings, dynamodb_client, sdk_config};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    // No CURSOR_SECRET_ARN (and no explicit TIDEMARK_LOCAL=1) fails the init here, and so does
    // a secret that cannot be read: no request is served with a forgeable cursor key.
    let config = ApiConfig::from_env()?;
    let settings = ClientSettings::from_env();
    let client = dynamodb_client(&settings).await;
    let loader = match &config.cursor_secret_arn {
        Some(arn) => {
            let shared = sdk_config(&ClientSettings::default()).await;
            let sm = aws_sdk_secretsmanager::Client::new(&shared);
            Some(KeyLoader::new(
                SecretsManager::new(sm, arn.clone()),
                KeyPolicy::default(),
            ))
        }
        None => None,
    };
    let app = App::new(client, config);
    if let Some(loader) = &loader {
        app.set_cursor_key(loader.load(Timestamp::now()).await?);
    }
    let (app, loader) = (&app, &loader);
    lambda_http::run(service_fn(move |req: Request| async move {
        if let Some(loader) = loader.as_ref().filter(|l| l.due(Timestamp::now())) {
            // A failed re-read keeps the key in use; the next request tries again.
            match loader.load(Timestamp::now()).await {
                Ok(key) => app.set_cursor_key(key),
                Err(e) => tracing::warn!(error = %e, "could not re-read the cursor secret"),
            }
        }
        Ok::<_, Error>(app.handle(req).await)
    }))
    .await
}
