//! Where `make run`'s emulators listen (DynamoDB Local, kinesis-mock and moto's S3,
//! docs/design.md §7), and clients for them: what devstack's local stack and
//! `tidemark-admin --local` connect to.

use tidemark_store::ClientSettings;

/// The local endpoints: `http://127.0.0.1:8000`, `http://127.0.0.1:4567` and
/// `http://127.0.0.1:4569` unless `TIDEMARK_DYNAMODB_ENDPOINT` / `TIDEMARK_KINESIS_ENDPOINT` /
/// `TIDEMARK_S3_ENDPOINT` say otherwise, or `TIDEMARK_DYNAMODB_PORT` /
/// `TIDEMARK_KINESIS_PORT` / `TIDEMARK_S3_PORT` move them on loopback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalEndpoints {
    pub dynamodb: String,
    pub kinesis: String,
    /// moto's S3 server: the export's bucket.
    pub s3: String,
}

impl LocalEndpoints {
    pub fn from_env() -> Self {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// [`LocalEndpoints::from_env`] reading variables through `get`.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        let var = |k: &str, d: &str| get(k).unwrap_or_else(|| d.to_owned());
        let ddb_port = var("TIDEMARK_DYNAMODB_PORT", "8000");
        let kin_port = var("TIDEMARK_KINESIS_PORT", "4567");
        let s3_port = var("TIDEMARK_S3_PORT", "4569");
        LocalEndpoints {
            s3: var(
                "TIDEMARK_S3_ENDPOINT",
                &format!("http://127.0.0.1:{s3_port}"),
            ),
            dynamodb: var(
                "TIDEMARK_DYNAMODB_ENDPOINT",
                &format!("http://127.0.0.1:{ddb_port}"),
            ),
            kinesis: var(
                "TIDEMARK_KINESIS_ENDPOINT",
                &format!("http://127.0.0.1:{kin_port}"),
            ),
        }
    }

    pub async fn dynamodb(&self) -> aws_sdk_dynamodb::Client {
        tidemark_store::dynamodb_client(&ClientSettings::local(&self.dynamodb)).await
    }

    /// DynamoDB Streams is served on the DynamoDB endpoint.
    pub async fn dynamodb_streams(&self) -> aws_sdk_dynamodbstreams::Client {
        crate::local_streams::client(&self.dynamodb).await
    }

    pub async fn kinesis(&self) -> aws_sdk_kinesis::Client {
        kinesis_client(&self.kinesis).await
    }
}

/// A Kinesis client for the kinesis-mock at `endpoint`.
pub async fn kinesis_client(endpoint: &str) -> aws_sdk_kinesis::Client {
    let shared = tidemark_store::sdk_config(&ClientSettings::local(endpoint)).await;
    let conf = aws_sdk_kinesis::config::Builder::from(&shared)
        .endpoint_url(endpoint)
        .build();
    aws_sdk_kinesis::Client::from_conf(conf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_default_to_loopback_and_follow_ports_and_overrides() {
        let none = LocalEndpoints::from_lookup(|_| None);
        assert_eq!(none.dynamodb, "http://127.0.0.1:8000");
        assert_eq!(none.kinesis, "http://127.0.0.1:4567");
        assert_eq!(none.s3, "http://127.0.0.1:4569");
        let ports = LocalEndpoints::from_lookup(|k| match k {
            "TIDEMARK_DYNAMODB_PORT" => Some("8100".into()),
            "TIDEMARK_KINESIS_PORT" => Some("4600".into()),
            "TIDEMARK_S3_PORT" => Some("4700".into()),
            _ => None,
        });
        assert_eq!(ports.dynamodb, "http://127.0.0.1:8100");
        assert_eq!(ports.kinesis, "http://127.0.0.1:4600");
        assert_eq!(ports.s3, "http://127.0.0.1:4700");
        let given = LocalEndpoints::from_lookup(|k| match k {
            "TIDEMARK_DYNAMODB_ENDPOINT" => Some("http://ddb:8000".into()),
            "TIDEMARK_KINESIS_PORT" => Some("4600".into()),
            _ => None,
        });
        assert_eq!(given.dynamodb, "http://ddb:8000");
        assert_eq!(given.kinesis, "http://127.0.0.1:4600");
    }
}
