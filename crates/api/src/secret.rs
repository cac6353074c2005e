//! The cursor key, from AWS Secrets Manager (`CURSOR_SECRET_ARN`), read when a container starts
//! and again every [`KeyPolicy::refresh`], never from the environment.
//!
//! Rotation (`aws secretsmanager put-secret-value`: the new value becomes `AWSCURRENT`, the old
//! one `AWSPREVIOUS`) breaks no cursor in flight:
//! - the previous key is still *accepted* until [`KeyPolicy::grace`] after the new one was
//!   created, so a cursor signed just before the rotation opens on the next page;
//! - the new key only *signs* once it is older than [`KeyPolicy::refresh`]: by then every
//!   container has re-read the secret and accepts it, so no container is handed a cursor made
//!   with a key it has not seen yet.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use thiserror::Error;
use tidemark_schema::Timestamp;

use crate::config::MIN_SECRET_LEN;
use crate::cursor::CursorKey;

#[derive(Debug, Error)]
pub enum SecretError {
    #[error("cursor secret: Secrets Manager GetSecretValue ({stage}) failed: {message}")]
    Fetch {
        stage: &'static str,
        message: String,
    },
    #[error("cursor secret has no {0} version")]
    Missing(&'static str),
    #[error("cursor secret ({0}) is {1} bytes; it must be at least {MIN_SECRET_LEN}")]
    Short(&'static str, usize),
}

/// One version of the secret and when it was created.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretVersion {
    pub value: Vec<u8>,
    pub created: Timestamp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Current,
    Previous,
}

impl Stage {
    pub fn label(self) -> &'static str {
        match self {
            Stage::Current => "AWSCURRENT",
            Stage::Previous => "AWSPREVIOUS",
        }
    }
}

pub type SecretFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Option<SecretVersion>, SecretError>> + Send + 'a>>;

/// Where the secret's versions come from (Secrets Manager, or a fake in tests).
pub trait SecretSource: Send + Sync {
    /// The version holding `stage`, `None` if there is none (no rotation yet).
    fn version(&self, stage: Stage) -> SecretFuture<'_>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyPolicy {
    /// How often a container re-reads the secret (and how old a new key must be to sign).
    pub refresh: Duration,
    /// How long after a rotation the previous key still opens cursors.
    pub grace: Duration,
}

impl Default for KeyPolicy {
    fn default() -> Self {
        KeyPolicy {
            refresh: Duration::from_secs(300),
            grace: Duration::from_secs(24 * 3600),
        }
    }
}

fn after(t: Timestamp, d: Duration) -> Timestamp {
    t.plus_millis(d.as_millis() as i64).unwrap_or(t)
}

/// The key to sign and verify with at `now`, from the current and previous versions.
pub fn cursor_key(
    current: SecretVersion,
    previous: Option<SecretVersion>,
    now: Timestamp,
    policy: KeyPolicy,
) -> Result<CursorKey, SecretError> {
    for (stage, v) in [
        (Stage::Current, Some(&current)),
        (Stage::Previous, previous.as_ref()),
    ] {
        if let Some(v) = v.filter(|v| v.value.len() < MIN_SECRET_LEN) {
            return Err(SecretError::Short(stage.label(), v.value.len()));
        }
    }
    let previous = previous.filter(|_| now < after(current.created, policy.grace));
    Ok(match previous {
        // Too new to sign: some container may not have read it yet.
        Some(p) if now < after(current.created, policy.refresh) => {
            CursorKey::new(&p.value).also_accepting(&current.value)
        }
        Some(p) => CursorKey::new(&current.value).also_accepting(&p.value),
        None => CursorKey::new(&current.value),
    })
}

/// Reads the secret and decides when to read it again.
pub struct KeyLoader<S> {
    source: S,
    policy: KeyPolicy,
    loaded_at: Mutex<Option<Timestamp>>,
}

impl<S: SecretSource> KeyLoader<S> {
    pub fn new(source: S, policy: KeyPolicy) -> Self {
        KeyLoader {
            source,
            policy,
            loaded_at: Mutex::new(None),
        }
    }

    /// True when the key has never been read or was read [`KeyPolicy::refresh`] ago.
    pub fn due(&self, now: Timestamp) -> bool {
        let last = *self.loaded_at.lock().unwrap_or_else(|e| e.into_inner());
        last.is_none_or(|t| now >= after(t, self.policy.refresh))
    }

    pub async fn load(&self, now: Timestamp) -> Result<CursorKey, SecretError> {
        let current = self
            .source
            .version(Stage::Current)
            .await?
            .ok_or(SecretError::Missing(Stage::Current.label()))?;
        let previous = self.source.version(Stage::Previous).await?;
        let key = cursor_key(current, previous, now, self.policy)?;
        *self.loaded_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(now);
        Ok(key)
    }
}

/// The secret in AWS Secrets Manager.
pub struct SecretsManager {
    client: aws_sdk_secretsmanager::Client,
    arn: String,
}

impl SecretsManager {
    pub fn new(client: aws_sdk_secretsmanager::Client, arn: impl Into<String>) -> Self {
        SecretsManager {
            client,
            arn: arn.into(),
        }
    }
}

impl SecretSource for SecretsManager {
    fn version(&self, stage: Stage) -> SecretFuture<'_> {
        Box::pin(async move {
            let out = self
                .client
                .get_secret_value()
                .secret_id(&self.arn)
                .version_stage(stage.label())
                .send()
                .await;
            let out = match out {
                Ok(o) => o,
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|s| s.is_resource_not_found_exception()) =>
                {
                    return Ok(None);
                }
                Err(e) => {
                    return Err(SecretError::Fetch {
                        stage: stage.label(),
                        message: aws_sdk_secretsmanager::error::DisplayErrorContext(e).to_string(),
                    });
                }
            };
            let created = out
                .created_date()
                .and_then(|d| d.to_millis().ok())
                .and_then(|ms| Timestamp::from_epoch_millis(ms).ok())
                .unwrap_or(Timestamp::MIN);
            Ok(out.secret_string().map(|s| SecretVersion {
                value: s.as_bytes().to_vec(),
                created,
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cursor::CursorState;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    fn version(byte: u8, created: &str) -> SecretVersion {
        SecretVersion {
            value: vec![byte; 48],
            created: ts(created),
        }
    }

    struct Fake(Option<SecretVersion>, Option<SecretVersion>);

    impl SecretSource for Fake {
        fn version(&self, stage: Stage) -> SecretFuture<'_> {
            let v = match stage {
                Stage::Current => self.0.clone(),
                Stage::Previous => self.1.clone(),
            };
            Box::pin(async move { Ok(v) })
        }
    }

    fn state() -> CursorState {
        CursorState {
            range: None,
            at: None,
            parts: vec![("0".into(), None)],
            ..CursorState::default()
        }
    }

    const ROTATED: &str = "2026-04-20T12:00:00Z";

    #[tokio::test]
    async fn a_cursor_of_the_previous_key_opens_during_the_grace_period_and_not_after() {
        let old = CursorKey::new(&[1; 48]).seal("s", &state());
        let loader = KeyLoader::new(
            Fake(
                Some(version(2, ROTATED)),
                Some(version(1, "2026-01-01T00:00:00Z")),
            ),
            KeyPolicy::default(),
        );
        let in_grace = loader.load(ts("2026-04-21T11:59:00Z")).await.unwrap();
        assert_eq!(in_grace.open("s", &old).unwrap(), state());
        let past_grace = loader.load(ts("2026-04-21T12:00:01Z")).await.unwrap();
        assert!(past_grace.open("s", &old).is_err());
    }

    #[tokio::test]
    async fn a_new_key_signs_only_once_every_container_can_have_read_it() {
        let loader = KeyLoader::new(
            Fake(
                Some(version(2, ROTATED)),
                Some(version(1, "2026-01-01T00:00:00Z")),
            ),
            KeyPolicy::default(),
        );
        let old_only = CursorKey::new(&[1; 48]);
        let new_only = CursorKey::new(&[2; 48]);
        // Two minutes after the rotation a container that has not re-read the secret yet
        // (it knows only the old key) must open what this one signs.
        let early = loader.load(ts("2026-04-20T12:02:00Z")).await.unwrap();
        assert!(old_only.open("s", &early.seal("s", &state())).is_ok());
        assert!(early.open("s", &new_only.seal("s", &state())).is_ok());
        // After the refresh interval every container knows the new key: it signs.
        let later = loader.load(ts("2026-04-20T12:05:00Z")).await.unwrap();
        assert!(new_only.open("s", &later.seal("s", &state())).is_ok());
    }

    #[tokio::test]
    async fn the_secret_is_read_again_only_after_the_refresh_interval() {
        let loader = KeyLoader::new(Fake(Some(version(2, ROTATED)), None), KeyPolicy::default());
        let t = ts("2026-04-20T13:00:00Z");
        assert!(loader.due(t));
        loader.load(t).await.unwrap();
        assert!(!loader.due(ts("2026-04-20T13:04:59Z")));
        assert!(loader.due(ts("2026-04-20T13:05:00Z")));
    }

    #[tokio::test]
    async fn a_missing_or_short_secret_is_refused() {
        let none = KeyLoader::new(Fake(None, None), KeyPolicy::default());
        assert!(matches!(
            none.load(ts(ROTATED)).await,
            Err(SecretError::Missing("AWSCURRENT"))
        ));
        let short = SecretVersion {
            value: b"short".to_vec(),
            created: ts(ROTATED),
        };
        let loader = KeyLoader::new(Fake(Some(short), None), KeyPolicy::default());
        assert!(matches!(
            loader.load(ts(ROTATED)).await,
            Err(SecretError::Short("AWSCURRENT", 5))
        ));
    }
}
