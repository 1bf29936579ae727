//! A wrapper around the real S3 store (`ObjectStore`) that injects the faults object stores
//! have: an answer lost after the object was stored (the client hears an error, as after
//! object_store's own retries), and deletes that fail. Everything else passes through.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use async_trait::async_trait;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

/// What the wrapper does to which requests.
#[derive(Debug, Default)]
pub struct Faults {
    /// PUTs of intents (keys under `_thadam-intents/`) are stored, then answered with an error.
    pub lose_intent_put_answers: AtomicBool,
    /// Deletes of intents fail without deleting.
    pub fail_intent_deletes: AtomicBool,
    /// How many of each were injected.
    pub lost_answers: AtomicUsize,
    pub failed_deletes: AtomicUsize,
}

pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    faults: Arc<Faults>,
}

impl FaultyStore {
    pub fn wrap(inner: Arc<dyn ObjectStore>, faults: Arc<Faults>) -> Arc<dyn ObjectStore> {
        Arc::new(FaultyStore { inner, faults })
    }
}

fn is_intent(location: &Path) -> bool {
    location.as_ref().contains("_thadam-intents/")
}

fn injected(what: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "test",
        source: format!("{what} (injected by the test's store)").into(),
    }
}

impl fmt::Debug for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({:?})", self.inner)
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let stored = self.inner.put_opts(location, payload, opts).await?;
        if is_intent(location) && self.faults.lose_intent_put_answers.load(Ordering::SeqCst) {
            self.faults.lost_answers.fetch_add(1, Ordering::SeqCst);
            return Err(injected("connection reset after the object was stored"));
        }
        Ok(stored)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn delete(&self, location: &Path) -> Result<()> {
        if is_intent(location) && self.faults.fail_intent_deletes.load(Ordering::SeqCst) {
            self.faults.failed_deletes.fetch_add(1, Ordering::SeqCst);
            return Err(injected("503 SlowDown"));
        }
        self.inner.delete(location).await
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy(&self, from: &Path, to: &Path) -> Result<()> {
        self.inner.copy(from, to).await
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> Result<()> {
        self.inner.copy_if_not_exists(from, to).await
    }
}
