//! Where exported objects go: S3 deployed, a local S3 in `make run`, memory in unit tests.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::ExportError;

pub trait Sink {
    /// Writes (or replaces) the object `key`.
    fn put(
        &self,
        key: &str,
        body: Vec<u8>,
        content_type: &'static str,
    ) -> impl Future<Output = Result<(), ExportError>> + Send;
    /// The keys under `prefix`, in order.
    fn keys(&self, prefix: &str) -> impl Future<Output = Result<Vec<String>, ExportError>> + Send;
    fn delete(&self, key: &str) -> impl Future<Output = Result<(), ExportError>> + Send;
    /// The object `key`, or `None` when there is none.
    fn read(&self, key: &str) -> impl Future<Output = Result<Option<Vec<u8>>, ExportError>> + Send;
}

/// Objects in memory, for tests.
#[derive(Debug, Default)]
pub struct MemorySink(pub Mutex<BTreeMap<String, Vec<u8>>>);

impl MemorySink {
    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        self.0.lock().ok()?.get(key).cloned()
    }

    pub fn all(&self) -> BTreeMap<String, Vec<u8>> {
        self.0.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

impl Sink for MemorySink {
    async fn put(&self, key: &str, body: Vec<u8>, _: &'static str) -> Result<(), ExportError> {
        if let Ok(mut m) = self.0.lock() {
            m.insert(key.to_owned(), body);
        }
        Ok(())
    }

    async fn keys(&self, prefix: &str) -> Result<Vec<String>, ExportError> {
        Ok(self
            .0
            .lock()
            .map(|m| {
                m.keys()
                    .filter(|k| k.starts_with(prefix))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn delete(&self, key: &str) -> Result<(), ExportError> {
        if let Ok(mut m) = self.0.lock() {
            m.remove(key);
        }
        Ok(())
    }

    async fn read(&self, key: &str) -> Result<Option<Vec<u8>>, ExportError> {
        Ok(self.get(key))
    }
}

/// A worker's sink: every put first checks that the worker's export of its hour is still the
/// hour's job ([`crate::State::job`]), and refuses with [`ExportError::Superseded`] once it
/// is not. A message delivered twice, or a worker slower than a newer export of its hour,
/// so stops before it writes where the newer export's seal has already decided what the
/// hour holds (a file it would put would stay behind, outside every manifest).
pub struct Guarded<'a, K, T> {
    pub sink: &'a K,
    pub state: &'a T,
    pub task: &'a crate::slicing::SliceTask,
}

impl<K: Sink + Sync, T: crate::State + Sync> Sink for Guarded<'_, K, T> {
    async fn put(
        &self,
        key: &str,
        body: Vec<u8>,
        content_type: &'static str,
    ) -> Result<(), ExportError> {
        let current = self.state.job(self.task.hour).await?;
        if current.is_none_or(|j| j.generation != self.task.generation) {
            return Err(ExportError::Superseded {
                hour: self.task.hour,
                generation: self.task.generation,
            });
        }
        self.sink.put(key, body, content_type).await
    }

    async fn keys(&self, prefix: &str) -> Result<Vec<String>, ExportError> {
        self.sink.keys(prefix).await
    }

    async fn delete(&self, key: &str) -> Result<(), ExportError> {
        self.sink.delete(key).await
    }

    async fn read(&self, key: &str) -> Result<Option<Vec<u8>>, ExportError> {
        self.sink.read(key).await
    }
}
