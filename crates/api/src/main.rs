//! The API Lambda: configuration and client once, then `tidemark_api::App` per request.

use lambda_http::{Error, Request, service_fn};
use tidemark_api::{ApiConfig, App};
use tidemark_store::{ClientSettings, dynamodb_client};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    // A missing CURSOR_SECRET on Lambda fails the init here, before any request is served.
    let config = ApiConfig::from_env()?;
    let client = dynamodb_client(&ClientSettings::from_env()).await;
    let app = App::new(client, config);
    let app = &app;
    lambda_http::run(service_fn(move |req: Request| async move {
        Ok::<_, Error>(app.handle(req).await)
    }))
    .await
}
