//! The export's objects in S3 (or a local S3: `TIDEMARK_S3_ENDPOINT`, path-style addressing).

use aws_sdk_s3::primitives::ByteStream;
use tidemark_store::ClientSettings;

use crate::ExportError;
use crate::sink::Sink;

/// The variable naming a local S3's endpoint.
pub const S3_ENDPOINT: &str = tidemark_store::settings::TIDEMARK_S3_ENDPOINT.name;

/// An S3 client with the project's retry and timeout settings; `endpoint` (a local S3) uses
/// path-style addressing and dummy credentials.
pub async fn client(settings: &ClientSettings, endpoint: Option<&str>) -> aws_sdk_s3::Client {
    let local = ClientSettings {
        endpoint: endpoint.map(str::to_owned),
        ..settings.clone()
    };
    let shared = tidemark_store::sdk_config(&local).await;
    let mut b = aws_sdk_s3::config::Builder::from(&shared);
    if let Some(e) = endpoint {
        b = b.endpoint_url(e).force_path_style(true);
    }
    aws_sdk_s3::Client::from_conf(b.build())
}

pub struct S3Sink {
    pub client: aws_sdk_s3::Client,
    pub bucket: String,
}

fn s3_err(op: &'static str, e: impl std::fmt::Display) -> ExportError {
    ExportError::S3 {
        operation: op,
        message: e.to_string(),
    }
}

impl Sink for S3Sink {
    async fn put(
        &self,
        key: &str,
        body: Vec<u8>,
        content_type: &'static str,
    ) -> Result<(), ExportError> {
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type)
            .body(ByteStream::from(body))
            .send()
            .await
            .map_err(|e| s3_err("PutObject", aws_sdk_s3::error::DisplayErrorContext(e)))?;
        Ok(())
    }

    async fn keys(&self, prefix: &str) -> Result<Vec<String>, ExportError> {
        let mut out = Vec::new();
        let mut token = None;
        loop {
            let page = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(prefix)
                .set_continuation_token(token)
                .send()
                .await
                .map_err(|e| s3_err("ListObjectsV2", aws_sdk_s3::error::DisplayErrorContext(e)))?;
            out.extend(
                page.contents()
                    .iter()
                    .filter_map(|o| o.key().map(str::to_owned)),
            );
            match page.next_continuation_token() {
                Some(t) if page.is_truncated() == Some(true) => token = Some(t.to_owned()),
                _ => break,
            }
        }
        out.sort();
        Ok(out)
    }

    async fn delete(&self, key: &str) -> Result<(), ExportError> {
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| s3_err("DeleteObject", aws_sdk_s3::error::DisplayErrorContext(e)))?;
        Ok(())
    }

    async fn read(&self, key: &str) -> Result<Option<Vec<u8>>, ExportError> {
        let out = match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => return Ok(None),
            Err(e) => {
                return Err(s3_err(
                    "GetObject",
                    aws_sdk_s3::error::DisplayErrorContext(e),
                ));
            }
        };
        let body = out
            .body
            .collect()
            .await
            .map_err(|e| s3_err("GetObject", e))?;
        Ok(Some(body.into_bytes().to_vec()))
    }
}
