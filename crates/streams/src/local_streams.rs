//! A DynamoDB Streams client for DynamoDB Local.
//!
//! DynamoDB Local (2026-05-28) writes an empty map in a stream record's image as `{}` where
//! AWS writes `{"M":{}}`, and no SDK parses the former ("Union did not contain a valid
//! variant"): one device item without alert rule states would stop the whole local pipeline.
//! This client reads each response whole and puts the `M` back before the SDK parses it.
//! Nothing else in a response changes, and nothing here is used against AWS.

use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use http_body_util::BodyExt;
use serde_json::{Map, Value};
use tidemark_store::ClientSettings;

/// The streams client for a DynamoDB Local at `endpoint`.
pub async fn client(endpoint: &str) -> aws_sdk_dynamodbstreams::Client {
    let shared = tidemark_store::sdk_config(&ClientSettings::local(endpoint)).await;
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::AwsLc))
        .build_https();
    let conf = aws_sdk_dynamodbstreams::config::Builder::from(&shared)
        .endpoint_url(endpoint)
        .http_client(SharedHttpClient::new(Repairing(http)))
        .build();
    aws_sdk_dynamodbstreams::Client::from_conf(conf)
}

#[derive(Debug)]
struct Repairing(SharedHttpClient);

impl HttpClient for Repairing {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(RepairingConnector(
            self.0.http_connector(settings, components),
        ))
    }
}

#[derive(Debug)]
struct RepairingConnector(SharedHttpConnector);

impl HttpConnector for RepairingConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let sent = self.0.call(request);
        HttpConnectorFuture::new(async move {
            let mut response = sent.await?;
            let body = response
                .take_body()
                .collect()
                .await
                .map_err(ConnectorError::io)?
                .to_bytes();
            *response.body_mut() = SdkBody::from(repair(&body));
            Ok(response)
        })
    }
}

/// `body` with every empty-object attribute value in a record's `Keys`, `NewImage` or
/// `OldImage` (at any depth of maps and lists) written as an empty map.
pub fn repair(body: &[u8]) -> Vec<u8> {
    let Ok(mut v) = serde_json::from_slice::<Value>(body) else {
        return body.to_vec();
    };
    let mut changed = false;
    for record in v
        .get_mut("Records")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        for image in ["Keys", "NewImage", "OldImage"] {
            if let Some(Value::Object(attrs)) = record.pointer_mut(&format!("/dynamodb/{image}")) {
                for a in attrs.values_mut() {
                    changed |= repair_value(a);
                }
            }
        }
    }
    match changed {
        true => serde_json::to_vec(&v).unwrap_or_else(|_| body.to_vec()),
        false => body.to_vec(),
    }
}

fn repair_value(v: &mut Value) -> bool {
    let Value::Object(o) = v else {
        return false;
    };
    if o.is_empty() {
        o.insert("M".into(), Value::Object(Map::new()));
        return true;
    }
    let mut changed = false;
    if let Some(Value::Object(m)) = o.get_mut("M") {
        for x in m.values_mut() {
            changed |= repair_value(x);
        }
    }
    if let Some(Value::Array(l)) = o.get_mut("L") {
        for x in l {
            changed |= repair_value(x);
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn empty_maps_in_images_get_their_type_back_and_nothing_else_changes() {
        let body = json!({"Records": [{"dynamodb": {
            "Keys": {"pk": {"S": "a"}},
            "NewImage": {"pk": {"S": "a"}, "slots": {}, "l": {"L": [{}, {"N": "1"}]},
                         "n": {"M": {"x": {}, "y": {"S": ""}}}},
            "OldImage": {"pk": {"S": "a"}, "slots": {"M": {}}}
        }}], "NextShardIterator": "it"});
        let fixed: Value =
            serde_json::from_slice(&repair(&serde_json::to_vec(&body).unwrap())).unwrap();
        assert_eq!(
            fixed,
            json!({"Records": [{"dynamodb": {
                "Keys": {"pk": {"S": "a"}},
                "NewImage": {"pk": {"S": "a"}, "slots": {"M": {}},
                             "l": {"L": [{"M": {}}, {"N": "1"}]},
                             "n": {"M": {"x": {"M": {}}, "y": {"S": ""}}}},
                "OldImage": {"pk": {"S": "a"}, "slots": {"M": {}}}
            }}], "NextShardIterator": "it"})
        );
        let other = br#"{"StreamDescription":{"Shards":[]}}"#;
        assert_eq!(repair(other), other.to_vec());
        assert_eq!(repair(b"not json"), b"not json".to_vec());
    }
}
