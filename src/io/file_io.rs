//! iceberg's FileIO (table metadata, manifest lists, manifests) over object_store: the same S3
//! client builder as footer reads ([`crate::io::store::build_object_store`]), so every S3
//! request of the registrar has one TLS stack, one way of carrying keys (never printed), one
//! set of connection bounds and retries, and failures classified by the same types
//! ([`crate::io::classify::classify_iceberg_io`]).
//!
//! A FileIO is built per table by [`table_file_io`] from FileIO properties (`s3.endpoint`,
//! `s3.region`, `s3.path-style-access`, ...; the catalog's, then ours, then what was vended with
//! the table). Keys never stay in the properties, which iceberg keeps in a `StorageConfig` whose
//! `Debug` prints them: they travel in the factory as [`S3Keys`]. The storage takes one
//! object_store client per bucket, on first use, from the [`S3Clients`] the FileIOs of one
//! catalog client share (a commit's new FileIO reuses the client and connections of the last).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use iceberg::io::{
    FileIO, FileIOBuilder, FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage,
    StorageConfig, StorageFactory,
};
use object_store::ObjectStore;
use object_store::buffered::BufWriter;
use object_store::path::Path as ObjectPath;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tokio::io::AsyncWriteExt;

use crate::io::clients::S3Clients;
use crate::io::credentials::{S3Access, S3Credentials, S3Keys};
use crate::io::store::{S3Settings, S3Store, delete_in_bulk};
use crate::secret::Secret;

/// FileIO property keys (iceberg's names).
pub(crate) const ENDPOINT: &str = "s3.endpoint";
pub(crate) const REGION: &str = "s3.region";
/// Takes precedence over `s3.region` (as in iceberg's own S3 config).
pub(crate) const CLIENT_REGION: &str = "client.region";
pub(crate) const PATH_STYLE_ACCESS: &str = "s3.path-style-access";
pub(crate) const ACCESS_KEY_ID: &str = "s3.access-key-id";
pub(crate) const SECRET_ACCESS_KEY: &str = "s3.secret-access-key";
pub(crate) const SESSION_TOKEN: &str = "s3.session-token";
/// Ours, not iceberg's: `store.allow_http`. Never taken from the catalog's config (an `http://`
/// endpoint is allowed only where the operator allowed it).
const ALLOW_HTTP: &str = "thadam.s3.allow-http";
/// Ours: `store.credentials: instance_metadata`. Never taken from the catalog's config (the
/// instance metadata service is asked only where the operator asked for it).
const INSTANCE_METADATA: &str = "thadam.s3.instance-metadata";

/// The region when neither the catalog nor `store` names one (object_store needs one to sign).
const DEFAULT_REGION: &str = "us-east-1";

/// How many deletes of a `delete_prefix` or `delete_stream` are in flight at once.
const DELETE_CONCURRENCY: usize = 8;

/// Whether our FileIO properties carry credentials of their own: `store` keys, or
/// `store.credentials: instance_metadata`. A catalog's remote signer is then not used (see
/// `catalog::access`).
pub(crate) fn has_own_credentials(props: &HashMap<String, String>) -> bool {
    props.contains_key(ACCESS_KEY_ID) || props.contains_key(INSTANCE_METADATA)
}

/// Our FileIO properties for the configured bucket. The region is left out when `store` does
/// not set one, so that the catalog's (per-table config or vended credentials) can apply.
pub fn file_io_props(store: impl Into<S3Store>) -> HashMap<String, String> {
    let store = store.into();
    let mut props = HashMap::new();
    if store.region_explicit {
        props.insert(REGION.to_string(), store.region.clone());
    }
    if let Some(endpoint) = &store.endpoint {
        props.insert(
            ENDPOINT.to_string(),
            endpoint.as_str().trim_end_matches('/').to_string(),
        );
        props.insert(PATH_STYLE_ACCESS.to_string(), "true".to_string());
    }
    if let S3Credentials::Keys(keys) = &store.credentials {
        props.insert(
            ACCESS_KEY_ID.to_string(),
            keys.access_key_id.expose().to_string(),
        );
        props.insert(
            SECRET_ACCESS_KEY.to_string(),
            keys.secret_access_key.expose().to_string(),
        );
        if let Some(token) = &keys.session_token {
            props.insert(SESSION_TOKEN.to_string(), token.expose().to_string());
        }
    }
    props.insert(ALLOW_HTTP.to_string(), store.allow_http.to_string());
    if store.credentials == S3Credentials::InstanceMetadata {
        props.insert(INSTANCE_METADATA.to_string(), "true".to_string());
    }
    props
}

/// The FileIO of a table. `server_config` (the catalog's config for it) comes first so that
/// `ours` ([`file_io_props`]: endpoint, keys) win: REST servers rarely know the S3 endpoint we
/// see. What the catalog gives with the table (vended keys, or a remote signer) replaces any
/// other keys; its endpoint, region and path-style apply only where neither sets one. Without
/// any of these, requests fail with `auth.failed` ([`S3Credentials::Missing`]) unless `store`
/// asked for the instance metadata service. Its S3 clients come from `clients`.
pub fn table_file_io(
    server_config: HashMap<String, String>,
    ours: &HashMap<String, String>,
    vended: Option<&S3Access>,
    clients: &Arc<S3Clients>,
) -> FileIO {
    let mut props = server_config;
    props.remove(ALLOW_HTTP);
    props.remove(INSTANCE_METADATA);
    props.extend(ours.iter().map(|(k, v)| (k.clone(), v.clone())));
    let allow_http = props
        .remove(ALLOW_HTTP)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let instance_metadata = props.remove(INSTANCE_METADATA).is_some();
    // Keys leave the properties whoever set them.
    let mut credentials = match take_keys(&mut props) {
        Some(keys) => S3Credentials::Keys(keys),
        None if instance_metadata => S3Credentials::InstanceMetadata,
        None => S3Credentials::Missing,
    };
    if let Some(vended) = vended {
        credentials = vended.credentials.clone();
        for (key, value) in [
            (ENDPOINT, vended.endpoint.clone()),
            (REGION, vended.region.clone()),
            (PATH_STYLE_ACCESS, vended.path_style.map(|p| p.to_string())),
        ] {
            if let Some(v) = value {
                props.entry(key.to_string()).or_insert(v);
            }
        }
    }
    props
        .entry(REGION.to_string())
        .or_insert_with(|| DEFAULT_REGION.to_string());
    FileIOBuilder::new(Arc::new(ObjectStoreStorageFactory {
        credentials,
        allow_http,
        clients: Arc::clone(clients),
    }))
    .with_props(props)
    .build()
}

/// Removes every key property from `props`, returning the keys when both halves were there.
fn take_keys(props: &mut HashMap<String, String>) -> Option<S3Keys> {
    let access_key_id = props.remove(ACCESS_KEY_ID).filter(|v| !v.is_empty());
    let secret_access_key = props.remove(SECRET_ACCESS_KEY).filter(|v| !v.is_empty());
    let session_token = props.remove(SESSION_TOKEN).filter(|v| !v.is_empty());
    Some(S3Keys {
        access_key_id: Secret::new(access_key_id?),
        secret_access_key: Secret::new(secret_access_key?),
        session_token: session_token.map(Secret::new),
    })
}

/// The settings of one FileIO's clients, from its properties.
fn settings(props: &HashMap<String, String>, factory: &ObjectStoreStorageFactory) -> S3Settings {
    let get = |key: &str| props.get(key).filter(|v| !v.is_empty()).cloned();
    S3Settings {
        region: get(CLIENT_REGION)
            .or_else(|| get(REGION))
            .unwrap_or_else(|| DEFAULT_REGION.to_string()),
        endpoint: get(ENDPOINT),
        // Path-style unless told otherwise, as iceberg's own S3 storage does.
        virtual_hosted: get(PATH_STYLE_ACCESS).is_some_and(|v| !truthy(&v)),
        allow_http: factory.allow_http,
        credentials: factory.credentials.clone(),
        retry: None,
    }
}

/// iceberg's reading of a boolean property.
fn truthy(value: &str) -> bool {
    ["true", "t", "1", "on"]
        .iter()
        .any(|t| value.eq_ignore_ascii_case(t))
}

/// Why neither the factory nor the storage can be serialised: they hold keys and live
/// clients. iceberg's typetag serialisation exists to ship a FileIO to another process, which
/// the registrar never does; each process builds its FileIO from its own config. An explicit
/// error beats a serialised form that would either leak the keys or deserialise into a storage
/// that cannot sign.
const NOT_SERIALISABLE: &str = "the registrar's S3 FileIO holds credentials and live clients \
                                and is not serialisable; build it from the config instead";

/// Builds [`ObjectStoreStorage`] from a FileIO's properties, with the credentials (keys or a
/// signer) and `allow_http` it carries itself (not as properties).
#[derive(Debug)]
pub(crate) struct ObjectStoreStorageFactory {
    credentials: S3Credentials,
    allow_http: bool,
    clients: Arc<S3Clients>,
}

impl Serialize for ObjectStoreStorageFactory {
    fn serialize<S: Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom(NOT_SERIALISABLE))
    }
}

impl<'de> Deserialize<'de> for ObjectStoreStorageFactory {
    fn deserialize<D: Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        Err(serde::de::Error::custom(NOT_SERIALISABLE))
    }
}

#[typetag::serde]
impl StorageFactory for ObjectStoreStorageFactory {
    fn build(&self, config: &StorageConfig) -> iceberg::Result<Arc<dyn Storage>> {
        Ok(Arc::new(ObjectStoreStorage {
            inner: Arc::new(Inner {
                settings: settings(config.props(), self),
                clients: Arc::clone(&self.clients),
            }),
        }))
    }
}

/// iceberg's `Storage` over object_store: `s3://bucket/key` (or `s3a://`, `s3n://`, as Java
/// accepts) paths, one shared client per bucket. Cheap to clone (input and output files hold one).
#[derive(Clone)]
pub(crate) struct ObjectStoreStorage {
    inner: Arc<Inner>,
}

struct Inner {
    settings: S3Settings,
    clients: Arc<S3Clients>,
}

impl std::fmt::Debug for ObjectStoreStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `S3Settings` shows its keys as `S3Keys(***)`.
        f.debug_struct("ObjectStoreStorage")
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

impl Serialize for ObjectStoreStorage {
    fn serialize<S: Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom(NOT_SERIALISABLE))
    }
}

impl<'de> Deserialize<'de> for ObjectStoreStorage {
    fn deserialize<D: Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        Err(serde::de::Error::custom(NOT_SERIALISABLE))
    }
}

/// The bucket and object key of a FileIO path: `s3://bucket/key`, also `s3a://` and `s3n://`.
/// The key is kept byte for byte (`Path::parse`); one object_store would rewrite is refused,
/// since another object than the one the table names would be read or written.
fn locate(path: &str) -> iceberg::Result<(&str, ObjectPath)> {
    let (bucket, key) = split_path(path)?;
    if key.is_empty() {
        return Err(invalid_path(path, "it names no object"));
    }
    let object = ObjectPath::parse(key).map_err(|e| invalid_path(path, &e.to_string()))?;
    if object.as_ref() != key {
        return Err(invalid_path(path, "object_store would rewrite its key"));
    }
    Ok((bucket, object))
}

/// The bucket and key text of `path`, without checking the key.
fn split_path(path: &str) -> iceberg::Result<(&str, &str)> {
    let (scheme, rest) = path
        .split_once("://")
        .ok_or_else(|| invalid_path(path, "it has no scheme (expected s3://bucket/key)"))?;
    if !["s3", "s3a", "s3n"]
        .iter()
        .any(|s| scheme.eq_ignore_ascii_case(s))
    {
        return Err(invalid_path(
            path,
            &format!("the scheme {scheme}:// is not S3 (expected s3://, s3a:// or s3n://)"),
        ));
    }
    let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(invalid_path(path, "it names no bucket"));
    }
    Ok((bucket, key))
}

fn invalid_path(path: &str, why: &str) -> iceberg::Error {
    iceberg::Error::new(
        iceberg::ErrorKind::DataInvalid,
        format!("cannot use {path:?} as an S3 object path: {why}"),
    )
}

/// An object_store failure as an iceberg error, the object_store error kept as its source so
/// that it is classified by type. `Unexpected`, as iceberg's own storage reports I/O failures
/// (callers take `DataInvalid` for a table they cannot write).
fn store_failure(op: &str, path: &str, err: object_store::Error) -> iceberg::Error {
    iceberg::Error::new(
        iceberg::ErrorKind::Unexpected,
        format!("S3 {op} of {path} failed"),
    )
    .with_source(err)
}

/// An I/O error from object_store's writer: the object_store error inside it is unwrapped
/// (`std::io::Error::source` skips the error it wraps, which would hide it from classification).
fn write_failure(path: &str, err: std::io::Error) -> iceberg::Error {
    let failed = || {
        iceberg::Error::new(
            iceberg::ErrorKind::Unexpected,
            format!("S3 write of {path} failed"),
        )
    };
    if !err.get_ref().is_some_and(|e| e.is::<object_store::Error>()) {
        return failed().with_source(err);
    }
    match err
        .into_inner()
        .map(|inner| inner.downcast::<object_store::Error>())
    {
        Some(Ok(store)) => store_failure("write", path, *store),
        Some(Err(other)) => failed().with_source(std::io::Error::other(other)),
        None => failed(),
    }
}

impl ObjectStoreStorage {
    /// The client of `bucket`: the shared one for these settings, built on first use with the
    /// same builder as footer reads.
    fn store(&self, bucket: &str) -> iceberg::Result<Arc<dyn ObjectStore>> {
        self.inner
            .clients
            .get(&self.inner.settings, bucket)
            .map_err(|e| {
                iceberg::Error::new(
                    iceberg::ErrorKind::Unexpected,
                    format!("cannot reach bucket {bucket}"),
                )
                // Ours (config.invalid), classified by its code.
                .with_source(e)
            })
    }

    fn open(&self, path: &str) -> iceberg::Result<(Arc<dyn ObjectStore>, ObjectPath)> {
        let (bucket, object) = locate(path)?;
        Ok((self.store(bucket)?, object))
    }

    async fn delete_one(&self, path: &str) -> iceberg::Result<()> {
        let (store, object) = self.open(path)?;
        match store.delete(&object).await {
            // Deleting what is not there is done (S3 itself answers 204).
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(store_failure("delete", path, e)),
        }
    }
}

#[async_trait]
#[typetag::serde]
impl Storage for ObjectStoreStorage {
    async fn exists(&self, path: &str) -> iceberg::Result<bool> {
        let (store, object) = self.open(path)?;
        match store.head(&object).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(store_failure("HEAD", path, e)),
        }
    }

    async fn metadata(&self, path: &str) -> iceberg::Result<FileMetadata> {
        let (store, object) = self.open(path)?;
        let meta = store
            .head(&object)
            .await
            .map_err(|e| store_failure("HEAD", path, e))?;
        Ok(FileMetadata { size: meta.size })
    }

    async fn read(&self, path: &str) -> iceberg::Result<Bytes> {
        let (store, object) = self.open(path)?;
        let answer = store
            .get(&object)
            .await
            .map_err(|e| store_failure("GET", path, e))?;
        answer
            .bytes()
            .await
            .map_err(|e| store_failure("GET", path, e))
    }

    async fn reader(&self, path: &str) -> iceberg::Result<Box<dyn FileRead>> {
        let (store, object) = self.open(path)?;
        Ok(Box::new(RangedReader {
            store,
            object,
            path: path.to_string(),
        }))
    }

    async fn write(&self, path: &str, bs: Bytes) -> iceberg::Result<()> {
        let (store, object) = self.open(path)?;
        store
            .put(&object, bs.into())
            .await
            .map(|_| ())
            .map_err(|e| store_failure("PUT", path, e))
    }

    async fn writer(&self, path: &str) -> iceberg::Result<Box<dyn FileWrite>> {
        let (store, object) = self.open(path)?;
        Ok(Box::new(ObjectWriter {
            writer: Some(BufWriter::new(store, object)),
            path: path.to_string(),
        }))
    }

    async fn delete(&self, path: &str) -> iceberg::Result<()> {
        self.delete_one(path).await
    }

    async fn delete_prefix(&self, path: &str) -> iceberg::Result<()> {
        let (bucket, key) = split_path(path)?;
        let key = key.trim_end_matches('/');
        let store = self.store(bucket)?;
        let prefix = ObjectPath::parse(key).map_err(|e| invalid_path(path, &e.to_string()))?;
        // object_store lists under `prefix/`: `a/b` never takes `a/bc` with it.
        let mut listed = store.list(Some(&prefix));
        let mut locations = Vec::new();
        while let Some(meta) = listed.next().await {
            let meta = meta.map_err(|e| store_failure("LIST", path, e))?;
            locations.push(meta.location);
        }
        let mut deletes = futures::stream::iter(locations)
            .map(|location| {
                let store = Arc::clone(&store);
                async move {
                    match store.delete(&location).await {
                        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                        Err(e) => Err(store_failure(
                            "delete",
                            &format!("s3://{bucket}/{location}"),
                            e,
                        )),
                    }
                }
            })
            .buffer_unordered(DELETE_CONCURRENCY);
        while let Some(done) = deletes.next().await {
            done?;
        }
        Ok(())
    }

    /// In bulk, bucket by bucket (S3 `DeleteObjects`, a thousand keys a request): a fleet's
    /// committer deletes the manifests of the intents each commit carried (~45 at 128 nodes),
    /// and one by one, eight at a time, they were ~6 round trips of every cycle. A store that
    /// refuses bulk deletes (or a signer that will not sign one) gets them one by one.
    async fn delete_stream(&self, paths: BoxStream<'static, String>) -> iceberg::Result<()> {
        let paths: Vec<String> = paths.collect().await;
        let mut by_bucket: HashMap<&str, (Vec<ObjectPath>, Vec<&str>)> = HashMap::new();
        for path in &paths {
            let (bucket, object) = locate(path)?;
            let (objects, named) = by_bucket.entry(bucket).or_default();
            objects.push(object);
            named.push(path);
        }
        for (bucket, (objects, named)) in by_bucket {
            let store = self.store(bucket)?;
            if let Err(e) = delete_in_bulk(&store, &objects).await {
                tracing::debug!(
                    bucket,
                    objects = objects.len(),
                    "could not delete in bulk ({e}); deleting one by one"
                );
                let mut deletes = futures::stream::iter(named.into_iter().map(str::to_owned))
                    .map(|path| async move { self.delete_one(&path).await })
                    .buffer_unordered(DELETE_CONCURRENCY);
                while let Some(done) = deletes.next().await {
                    done?;
                }
            }
        }
        Ok(())
    }

    fn new_input(&self, path: &str) -> iceberg::Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), path.to_string()))
    }

    fn new_output(&self, path: &str) -> iceberg::Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_string()))
    }
}

/// Ranged reads of one object (`GET` with a `Range`).
struct RangedReader {
    store: Arc<dyn ObjectStore>,
    object: ObjectPath,
    path: String,
}

#[async_trait]
impl FileRead for RangedReader {
    async fn read(&self, range: Range<u64>) -> iceberg::Result<Bytes> {
        if range.start > range.end {
            return Err(iceberg::Error::new(
                iceberg::ErrorKind::DataInvalid,
                format!(
                    "cannot read {}..{} of {}: the range ends before it starts",
                    range.start, range.end, self.path
                ),
            ));
        }
        // S3 has no empty range; nothing to fetch.
        if range.start == range.end {
            return Ok(Bytes::new());
        }
        self.store
            .get_range(&self.object, range)
            .await
            .map_err(|e| store_failure("GET", &self.path, e))
    }
}

/// A streamed write: buffered, one `PUT` for a small file, a multipart upload past 10 MiB
/// (object_store's `BufWriter`). After a failure the writer is gone: object_store's writer is
/// not usable after one (its state is spent), and a retry writes the file anew.
struct ObjectWriter {
    writer: Option<BufWriter>,
    path: String,
}

impl ObjectWriter {
    fn spent(&self) -> iceberg::Error {
        iceberg::Error::new(
            iceberg::ErrorKind::Unexpected,
            format!(
                "the write of {} is closed or failed earlier; write the file anew",
                self.path
            ),
        )
    }
}

#[async_trait]
impl FileWrite for ObjectWriter {
    async fn write(&mut self, bs: Bytes) -> iceberg::Result<()> {
        let Some(writer) = self.writer.as_mut() else {
            return Err(self.spent());
        };
        if let Err(e) = writer.put(bs).await {
            // Best effort: no multipart upload left behind (S3 would keep its parts).
            let _ = writer.abort().await;
            self.writer = None;
            return Err(store_failure("write", &self.path, e));
        }
        Ok(())
    }

    async fn close(&mut self) -> iceberg::Result<()> {
        let Some(mut writer) = self.writer.take() else {
            return Err(self.spent());
        };
        writer
            .shutdown()
            .await
            .map_err(|e| write_failure(&self.path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clients() -> Arc<S3Clients> {
        Arc::new(S3Clients::default())
    }

    fn store_config() -> S3Store {
        S3Store {
            endpoint: Some("http://127.0.0.1:9000".parse().expect("url")),
            region: "eu-central-1".into(),
            region_explicit: true,
            allow_http: true,
            credentials: S3Credentials::Keys(S3Keys {
                access_key_id: Secret::new("AKIDSTORE123"),
                secret_access_key: Secret::new("store-secret-123"),
                session_token: None,
            }),
        }
    }

    fn vended_keys() -> S3Credentials {
        S3Credentials::Keys(S3Keys {
            access_key_id: Secret::new("AKIDVENDED456"),
            secret_access_key: Secret::new("vended-secret-456"),
            session_token: Some(Secret::new("vended-token-456")),
        })
    }

    fn vended() -> S3Access {
        S3Access {
            credentials: vended_keys(),
            endpoint: Some("https://s3.catalog.example".into()),
            region: Some("ap-south-1".into()),
            path_style: Some(false),
        }
    }

    const SECRETS: [&str; 5] = [
        "AKIDSTORE123",
        "store-secret-123",
        "AKIDVENDED456",
        "vended-secret-456",
        "vended-token-456",
    ];

    fn factory_keys(file_io: &FileIO) -> String {
        // The storage, built from the factory, shows the settings it signs with.
        format!(
            "{:?}",
            file_io
                .new_input("s3://warehouse/t/metadata/v1.metadata.json")
                .expect("input")
        )
    }

    #[test]
    fn no_debug_of_the_file_io_shows_a_key() {
        let server = HashMap::from([
            (SESSION_TOKEN.to_string(), "vended-token-456".to_string()),
            ("s3.sse.type".to_string(), "s3".to_string()),
        ]);
        for vended in [None, Some(vended())] {
            let file_io = table_file_io(
                server.clone(),
                &file_io_props(store_config()),
                vended.as_ref(),
                &clients(),
            );
            let shown = format!(
                "{file_io:?} {:?} {}",
                file_io.config(),
                factory_keys(&file_io)
            );
            for secret in SECRETS {
                assert!(!shown.contains(secret), "{secret} in {shown}");
            }
            assert!(shown.contains("S3Keys(***)"), "{shown}");
            for key in [ACCESS_KEY_ID, SECRET_ACCESS_KEY, SESSION_TOKEN] {
                assert!(
                    file_io.config().get(key).is_none(),
                    "{key} stays a property"
                );
            }
        }
    }

    #[test]
    fn vended_keys_replace_ours_and_our_placement_wins() {
        let file_io = table_file_io(
            HashMap::from([(ENDPOINT.to_string(), "https://elsewhere".to_string())]),
            &file_io_props(store_config()),
            Some(&vended()),
            &clients(),
        );
        let config = file_io.config();
        assert_eq!(
            config.get(ENDPOINT).map(String::as_str),
            Some("http://127.0.0.1:9000")
        );
        assert_eq!(config.get(REGION).map(String::as_str), Some("eu-central-1"));
        assert_eq!(
            config.get(PATH_STYLE_ACCESS).map(String::as_str),
            Some("true")
        );
        let factory = ObjectStoreStorageFactory {
            credentials: vended_keys(),
            allow_http: true,
            clients: clients(),
        };
        let s = settings(config.props(), &factory);
        assert!(!s.virtual_hosted);
        assert!(s.allow_http);

        // With no store section settings, the catalog's placement applies.
        let bare = S3Store {
            endpoint: None,
            region_explicit: false,
            allow_http: false,
            credentials: S3Credentials::Missing,
            ..store_config()
        };
        let file_io = table_file_io(
            HashMap::new(),
            &file_io_props(&bare),
            Some(&vended()),
            &clients(),
        );
        let s = settings(file_io.config().props(), &factory);
        assert_eq!(s.endpoint.as_deref(), Some("https://s3.catalog.example"));
        assert_eq!(s.region, "ap-south-1");
        assert!(s.virtual_hosted);
        let shown = factory_keys(&file_io);
        assert!(shown.contains("allow_http: false"), "{shown}");
    }

    #[test]
    fn the_catalog_cannot_allow_http() {
        let server = HashMap::from([(ALLOW_HTTP.to_string(), "true".to_string())]);
        let store = S3Store {
            allow_http: false,
            ..store_config()
        };
        let file_io = table_file_io(server, &file_io_props(&store), None, &clients());
        assert!(file_io.config().get(ALLOW_HTTP).is_none());
        assert!(factory_keys(&file_io).contains("allow_http: false"));
    }

    #[test]
    fn only_the_store_section_can_ask_for_the_instance_metadata_service() {
        let credentials = |server: HashMap<String, String>, store: &S3Store| {
            let file_io = table_file_io(server, &file_io_props(store), None, &clients());
            assert!(file_io.config().get(INSTANCE_METADATA).is_none());
            format!("{:?}", file_io.new_input("s3://b/k").expect("input"))
        };
        let keyless = S3Store {
            credentials: S3Credentials::Missing,
            ..store_config()
        };
        let from_catalog = HashMap::from([(INSTANCE_METADATA.to_string(), "true".to_string())]);
        assert!(credentials(from_catalog, &keyless).contains("Missing"));
        let asked = S3Store {
            credentials: S3Credentials::InstanceMetadata,
            ..keyless
        };
        assert!(credentials(HashMap::new(), &asked).contains("InstanceMetadata"));
    }

    #[test]
    fn keys_from_the_catalog_config_are_taken_out_too() {
        let server = HashMap::from([
            (ACCESS_KEY_ID.to_string(), "AKIDVENDED456".to_string()),
            (
                SECRET_ACCESS_KEY.to_string(),
                "vended-secret-456".to_string(),
            ),
        ]);
        let file_io = table_file_io(server, &HashMap::new(), None, &clients());
        assert!(file_io.config().get(ACCESS_KEY_ID).is_none());
        assert_eq!(
            file_io.config().get(REGION).map(String::as_str),
            Some("us-east-1")
        );
        assert!(factory_keys(&file_io).contains("S3Keys(***)"));
    }

    #[test]
    fn s3_paths_are_split_into_bucket_and_exact_key() {
        for (path, bucket, key) in [
            (
                "s3://warehouse/ns/t/metadata/v1.metadata.json",
                "warehouse",
                "ns/t/metadata/v1.metadata.json",
            ),
            ("s3a://b/k~1 x.avro", "b", "k~1 x.avro"),
            ("s3n://b/k", "b", "k"),
            ("S3://b/k", "b", "k"),
        ] {
            let (b, object) = locate(path).expect(path);
            assert_eq!((b, object.as_ref()), (bucket, key), "{path}");
        }
        for path in [
            "gs://b/k",
            "/local/file",
            "s3:///k",
            "s3://b/a//c",
            "s3://b/a/../c",
            "s3://b/",
        ] {
            let err = locate(path).expect_err(path);
            assert_eq!(err.kind(), iceberg::ErrorKind::DataInvalid, "{path}");
            assert!(err.message().contains(path), "{err}");
        }
    }

    #[test]
    fn the_storage_is_not_serialisable() {
        let file_io = table_file_io(
            HashMap::new(),
            &file_io_props(store_config()),
            None,
            &clients(),
        );
        let storage = ObjectStoreStorageFactory {
            credentials: vended_keys(),
            allow_http: false,
            clients: clients(),
        }
        .build(file_io.config())
        .expect("storage");
        let err = serde_json::to_string(&storage).expect_err("refused");
        assert!(err.to_string().contains("not serialisable"), "{err}");
        let factory: Arc<dyn StorageFactory> = Arc::new(ObjectStoreStorageFactory {
            credentials: vended_keys(),
            allow_http: false,
            clients: clients(),
        });
        let err = serde_json::to_string(&factory).expect_err("refused");
        for secret in SECRETS {
            assert!(!err.to_string().contains(secret), "{err}");
        }
    }

    #[tokio::test]
    async fn a_write_failure_keeps_the_store_error_for_classification() {
        // Nothing listens on port 9: a transport failure, classified by type as an outage.
        let store = S3Store {
            endpoint: Some("http://127.0.0.1:9".parse().expect("url")),
            ..store_config()
        };
        let factory = ObjectStoreStorageFactory {
            credentials: vended_keys(),
            allow_http: true,
            clients: clients(),
        };
        let file_io = table_file_io(HashMap::new(), &file_io_props(&store), None, &clients());
        let mut s = settings(file_io.config().props(), &factory);
        s.retry = Some(object_store::RetryConfig {
            max_retries: 0,
            ..Default::default()
        });
        let storage = ObjectStoreStorage {
            inner: Arc::new(Inner {
                settings: s,
                clients: clients(),
            }),
        };
        let out = storage
            .new_output("s3://b/t/metadata/m.avro")
            .expect("output");
        let mut writer = out.writer().await.expect("writer");
        writer
            .write(Bytes::from_static(b"avro"))
            .await
            .expect("buffered");
        let err = writer.close().await.expect_err("nothing listens");
        assert_eq!(
            crate::io::store::classify_iceberg_io(&err),
            Some(crate::error::ErrorCode::Unavailable),
            "{err:?}"
        );
        let again = writer.close().await.expect_err("closed");
        assert!(again.message().contains("write the file anew"), "{again}");
        let err = out
            .write(Bytes::from_static(b"x"))
            .await
            .expect_err("refused");
        assert!(
            crate::io::store::classify_iceberg_io(&err).is_some(),
            "{err:?}"
        );
    }
}
