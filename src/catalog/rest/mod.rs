//! A small REST catalog client: config, namespaces, load, register, commit.
//!
//! The endpoints live here; how a request reaches the catalog (URLs, headers, the bearer token
//! or SigV4 signature, one renewal after a 401) is [`transport`], and what a status means is the
//! pure [`crate::catalog::outcome::classify_status`].

pub(crate) mod answer;
pub(crate) mod recent;
mod transport;
mod wire;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use iceberg::io::FileIO;
use iceberg::spec::TableMetadata;
use iceberg::table::Table;
use iceberg::{NamespaceIdent, TableRequirement, TableUpdate};
use iceberg_catalog_rest::{
    CommitTableRequest, CommitTableResponse, CreateNamespaceRequest, CreateTableRequest,
    LoadTableResult, RegisterTableRequest,
};
use reqwest::{Method, StatusCode};
use serde::Deserialize;

use crate::catalog::access::{TableAccess, VendedCredentials};
use crate::catalog::auth::SharedTokenSource;
use crate::config::SecretUrl;
use crate::error::{Error, ErrorCode, Result};
use crate::io::clients::S3Clients;

pub use crate::catalog::table_name::TableName;
use answer::Refs;
pub(crate) use transport::announce_catalog_request_counters;
use transport::{
    SendFailure, Transport, error_message, extra_headers, parse_json, read_body, read_json,
    status_error,
};

/// What became of a commit request that did not succeed, as seen on the wire, and nothing more:
/// what it means for the writer (a conflict, an unknown outcome, a refusal) is decided once, by
/// the writer (`table::append::retry::classify`).
#[derive(Debug)]
pub enum CommitFailure {
    /// The request never left (connection refused, no token to send it with): nothing applied.
    NotSent(Error),
    /// It was sent and no usable answer came back (timeout, reset, an unreadable 2xx body): it
    /// may have been applied.
    NoAnswer(Error),
    /// The catalog answered `status`, not a success; `error` holds its message, with the code
    /// the status implies (`outcome::classify_status`).
    Answered { status: u16, error: Error },
    /// Refused before or while sending for a reason a repeat cannot fix: the catalog's TLS
    /// certificate, credentials it refused after a renewal, a request that cannot be built.
    Refused(Error),
}

/// One commit request, encoded once (see [`RestClient::commit_request`]).
#[derive(Debug)]
pub struct CommitRequest {
    table: TableName,
    url: SecretUrl,
    body: Vec<u8>,
    /// The `Idempotency-Key` it is sent with, when the catalog advertised keys.
    key: Option<String>,
    /// Its updates, to confirm the answer against the table it was built on.
    updates: Vec<TableUpdate>,
}

impl CommitRequest {
    /// The `Idempotency-Key` this request is sent with, if any.
    pub(crate) fn idempotency_key(&self) -> Option<&str> {
        self.key.as_deref()
    }
}

/// What a staged create (`stage-create: true`, nothing is created) answered.
#[derive(Debug)]
pub enum Staged {
    /// The catalog would create the table at `location`.
    Accepted { location: String },
    /// The catalog refused the request (400, 403, 422): for a client-chosen location, that it
    /// does not allow the location. `message` is the catalog's own explanation.
    Refused { status: u16, message: String },
    /// The catalog does not answer staged creates here (404: namespace or endpoint absent, 405,
    /// 406, 501), so nothing can be concluded.
    Unsupported { status: u16, message: String },
}

/// The parts of `GET /v1/config` the registrar uses.
#[derive(Debug, Default, Deserialize)]
struct ConfigResponse {
    #[serde(default)]
    defaults: HashMap<String, String>,
    #[serde(default)]
    overrides: HashMap<String, String>,
    #[serde(default, rename = "idempotency-key-lifetime")]
    idempotency_key_lifetime: Option<String>,
}

/// Settings the client is built from.
pub(crate) struct RestClientSettings {
    /// `catalog_uri`: requests go to the whole URL (query string included), messages show it
    /// redacted.
    pub catalog_uri: SecretUrl,
    pub http: reqwest::Client,
    pub tokens: SharedTokenSource,
    /// FileIO properties for table metadata and manifests (`s3.*`), ours win over the server's
    /// (vended credentials win over our keys, see `catalog::access`).
    pub storage_props: HashMap<String, String>,
    /// `catalog_warehouse`, sent as `warehouse` on `GET /v1/config`.
    pub warehouse: Option<String>,
    /// `catalog_headers`, sent on every catalog request.
    pub headers: Vec<(String, crate::config::Secret)>,
    /// `catalog_sigv4`: every request is signed (then `tokens` is `NoAuth`).
    pub sigv4: Option<crate::config::SigV4Credential>,
}

/// The catalog connection. Cheap to clone; all clones share the HTTP pool and token source.
#[derive(Clone)]
pub struct RestClient {
    inner: Arc<Inner>,
}

struct Inner {
    /// How requests reach the catalog: URLs, headers, the token or signature, 401 renewal.
    transport: Transport,
    storage_props: HashMap<String, String>,
    /// The S3 clients of every FileIO this client makes: a commit's new `Table` reuses the
    /// client and connections of the last (see `io::clients`).
    s3_clients: Arc<S3Clients>,
    idempotency_keys: bool,
    /// The credentials the catalog vended with each table's last load (see `catalog::access`
    /// for why they live here).
    vended: Mutex<HashMap<TableName, Arc<TableAccess>>>,
    /// The last [`TableAccess`] generation handed out.
    generations: AtomicU64,
    /// Per table, the refs of the last version this client read (keyed by its metadata
    /// location): what a commit built on that version is checked against (see `answer`).
    /// iceberg's `TableMetadata` does not list its refs.
    refs: Mutex<HashMap<TableName, (String, Arc<Refs>)>>,
    /// `GET /v1/config`'s defaults and overrides, merged: remote signing may be switched on
    /// there for every table (`catalog::access::SignerTarget`).
    catalog_config: HashMap<String, String>,
}

impl std::fmt::Debug for RestClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestClient")
            .field("base", &self.inner.transport.base)
            .field("prefix", &self.inner.transport.prefix)
            .field("sigv4", &self.inner.transport.sigv4.is_some())
            .finish_non_exhaustive()
    }
}

/// A table loaded by [`RestClient::load_recent`].
pub(crate) struct Loaded {
    pub table: Table,
    /// When its history was cut: every snapshot's summary value under the key asked for, those
    /// cut included. `None`: the table is whole.
    pub values: Option<Vec<String>>,
}

impl RestClient {
    /// Connects: `GET /v1/config` (absorbing the server's `prefix` and whether it accepts
    /// idempotency keys). Fails fast on TLS and auth problems.
    pub(crate) async fn connect(settings: RestClientSettings) -> Result<RestClient> {
        let mut base = settings.catalog_uri.into_exposed();
        // A trailing slash would double up when segments are pushed.
        if base.path().ends_with('/') {
            let trimmed = base.path().trim_end_matches('/').to_string();
            base.set_path(&trimmed);
        }
        let mut inner = Inner {
            transport: Transport {
                base: base.into(),
                http: settings.http,
                tokens: settings.tokens,
                prefix: None,
                headers: extra_headers(&settings.headers)?,
                sigv4: settings.sigv4,
            },
            storage_props: settings.storage_props,
            s3_clients: crate::io::clients::shared(),
            idempotency_keys: false,
            vended: Mutex::new(HashMap::new()),
            generations: AtomicU64::new(0),
            refs: Mutex::new(HashMap::new()),
            catalog_config: HashMap::new(),
        };
        let mut url = inner
            .transport
            .url(&["v1", "config"], false)?
            .into_exposed();
        if let Some(warehouse) = &settings.warehouse {
            // The server's defaults, overrides and prefix are those of this warehouse.
            url.query_pairs_mut().append_pair("warehouse", warehouse);
        }
        let url = SecretUrl::new(url);
        let response = inner
            .transport
            .send(Method::GET, url, None, None)
            .await
            .map_err(SendFailure::into_error)?;
        let config: ConfigResponse = match response.status() {
            StatusCode::OK => read_json(response, "GET /v1/config").await?,
            _ => return Err(status_error(response, "GET /v1/config").await),
        };
        let mut merged = config.defaults;
        merged.extend(config.overrides);
        inner.transport.prefix = merged.get("prefix").cloned().filter(|p| !p.is_empty());
        inner.catalog_config = merged;
        inner.idempotency_keys = config.idempotency_key_lifetime.is_some();
        tracing::debug!(
            prefix = ?inner.transport.prefix,
            idempotency_keys = inner.idempotency_keys,
            "connected to the catalog"
        );
        Ok(RestClient {
            inner: Arc::new(inner),
        })
    }

    /// Unit tests: this client's FileIOs use `clients` (see `S3Clients::fixed`). Only before
    /// the client is shared (cloned).
    #[cfg(test)]
    pub(crate) fn with_s3_clients(mut self, clients: Arc<S3Clients>) -> RestClient {
        Arc::get_mut(&mut self.inner)
            .expect("a client not cloned yet")
            .s3_clients = clients;
        self
    }

    /// Loads a table; `Ok(None)` when it does not exist.
    pub async fn load_table(&self, table: &TableName) -> Result<Option<Table>> {
        Ok(self.load(table, None).await?.map(|loaded| loaded.table))
    }

    /// Loads a table with its history cut to the current snapshot's chain, up to `chain`
    /// snapshots, and what its refs name (see [`recent`]): every snapshot's summary value
    /// under `key` comes with it. A table that is not cut comes whole ([`Loaded::values`]
    /// `None`). `Ok(None)` when it does not exist.
    pub(crate) async fn load_recent(
        &self,
        table: &TableName,
        chain: usize,
        key: &str,
    ) -> Result<Option<Loaded>> {
        self.load(table, Some((chain, key))).await
    }

    async fn load(
        &self,
        table: &TableName,
        cut_to: Option<(usize, &str)>,
    ) -> Result<Option<Loaded>> {
        let url = self.inner.transport.table_url(table)?;
        let what = format!("load table {table}");
        let response = self
            .inner
            .transport
            .send(Method::GET, url, None, None)
            .await
            .map_err(SendFailure::into_error)?;
        match response.status() {
            StatusCode::OK => {
                let mut bytes = read_body(response, &what).await?;
                let mut values = None;
                if let Some(cut) = cut_to.and_then(|(chain, key)| recent::cut(&bytes, chain, key)) {
                    tracing::trace!(table = %table, held = cut.held, kept = cut.kept, "the table's history cut to the recent");
                    bytes = cut.body;
                    values = Some(cut.values);
                }
                let result: LoadTableResult = parse_json(&bytes, &what)?;
                self.remember_access(table, &result);
                let location = result.metadata_location.clone().ok_or_else(|| {
                    Error::new(
                        ErrorCode::CatalogRejected,
                        format!("{what}: the catalog sent no metadata-location"),
                    )
                })?;
                self.remember_refs(table, &location, answer::refs_of(&bytes).ok());
                // The body is as large as the metadata it was parsed into: not both at once.
                drop(bytes);
                let table = self.table_from(table, result.metadata, location, result.config)?;
                Ok(Some(Loaded { table, values }))
            }
            StatusCode::NOT_FOUND => Ok(None),
            _ => Err(status_error(response, &what).await),
        }
    }

    /// Keeps the credentials a `loadTable` answer vended for `table` (or forgets earlier ones
    /// when it vended none: the catalog stopped vending, so the `store` settings apply again).
    fn remember_access(&self, table: &TableName, result: &LoadTableResult) {
        let generation = self.inner.generations.fetch_add(1, Ordering::Relaxed) + 1;
        // A remote signer stands in for keys: with `store` credentials of our own it is not
        // asked. It signs only inside the catalog's locations (Nessie: its warehouse and the
        // table's location; the shipper's data files and a table at the shipper's location are
        // outside), and costs a round trip per request. Vended keys still win over ours.
        let own = crate::io::file_io::has_own_credentials(&self.inner.storage_props);
        let access = TableAccess::from_load(
            result.storage_credentials.as_deref(),
            &result.config,
            &self.inner.catalog_config,
            (!own).then_some(&|target: &crate::catalog::access::SignerTarget| self.signer(target)),
            generation,
            chrono::Utc::now().timestamp_millis(),
        );
        let Ok(mut vended) = self.inner.vended.lock() else {
            return;
        };
        match access {
            Some(access) => {
                tracing::debug!(table = %table, generation, renew_at_ms = ?access.renew_at_ms(), remote_signing = access.has_remote_signing(), "the catalog gives S3 access for the table (vended credentials, remote signing)");
                vended.insert(table.clone(), Arc::new(access));
            }
            None => {
                vended.remove(table);
            }
        }
    }

    /// The S3 signer a table's config names, reached like the catalog (its HTTP client,
    /// `catalog_headers` and token; see `catalog::signer`).
    fn signer(
        &self,
        target: &crate::catalog::access::SignerTarget,
    ) -> Arc<dyn crate::io::signer::RequestSigner> {
        let transport = &self.inner.transport;
        let mut catalog = transport.base.expose().clone();
        catalog.set_query(None);
        catalog.set_fragment(None);
        Arc::new(crate::catalog::signer::CatalogSigner::new(
            target.url(catalog.as_str()),
            crate::catalog::signer::SignerHttp {
                http: transport.http.clone(),
                tokens: Arc::clone(&transport.tokens),
                headers: transport.headers.clone(),
                catalog_https: catalog.scheme() == "https",
            },
        ))
    }

    /// Keeps the refs of the version of `table` at `location` (forgets them when unknown).
    fn remember_refs(&self, table: &TableName, location: &str, refs: Option<Refs>) {
        let Ok(mut known) = self.inner.refs.lock() else {
            return;
        };
        match refs {
            Some(refs) => {
                known.insert(table.clone(), (location.to_string(), Arc::new(refs)));
            }
            None => {
                known.remove(table);
            }
        }
    }

    /// The refs of `table`'s version at `location`, if that is the version this client read last.
    fn known_refs(&self, table: &TableName, location: &str) -> Option<Arc<Refs>> {
        let known = self.inner.refs.lock().ok()?;
        known
            .get(table)
            .filter(|(at, _)| at == location)
            .map(|(_, refs)| Arc::clone(refs))
    }

    /// The credentials the catalog vended with `table`'s last load, if it vended any.
    pub fn access(&self, table: &TableName) -> Option<Arc<TableAccess>> {
        self.inner
            .vended
            .lock()
            .ok()
            .and_then(|v| v.get(table).cloned())
    }

    /// Builds the `Table` handle (with a FileIO for its metadata and manifests) for metadata the
    /// catalog returned. The FileIO uses the credentials vended with the table's last load,
    /// whatever answer this is (a commit's answer carries none).
    pub(crate) fn table_from(
        &self,
        table: &TableName,
        metadata: TableMetadata,
        metadata_location: String,
        server_config: HashMap<String, String>,
    ) -> Result<Table> {
        let access = self.access(table);
        let vended = access
            .as_ref()
            .and_then(|a| a.for_table_files(metadata.location()));
        let file_io = self.file_io_with(server_config, vended);
        Table::builder()
            .identifier(table.ident()?)
            .metadata(metadata)
            .metadata_location(metadata_location)
            .file_io(file_io)
            .runtime(iceberg::Runtime::current())
            .build()
            .map_err(|e| Error::internal(format!("cannot open table {table}: {e}")).with_source(e))
    }

    /// A FileIO over the configured bucket. The server's per-table config comes first so that our
    /// own store settings (endpoint, keys) win: REST servers rarely know the S3 endpoint we see.
    pub(crate) fn file_io(&self, server_config: HashMap<String, String>) -> FileIO {
        self.file_io_with(server_config, None)
    }

    /// [`RestClient::file_io`] signing with `vended` credentials when given (they replace the
    /// `store` keys; endpoint and region stay ours where we set them).
    pub(crate) fn file_io_with(
        &self,
        server_config: HashMap<String, String>,
        vended: Option<&VendedCredentials>,
    ) -> FileIO {
        crate::io::file_io::table_file_io(
            server_config,
            &self.inner.storage_props,
            vended.map(VendedCredentials::s3),
            &self.inner.s3_clients,
        )
    }

    /// Creates the namespace (all levels) if it is absent.
    pub async fn ensure_namespace(&self, namespace: &[String]) -> Result<()> {
        // Parents first: a catalog may refuse a child of a missing parent.
        for depth in 1..=namespace.len() {
            let levels = &namespace[..depth];
            if self.namespace_exists(levels).await? {
                continue;
            }
            let ns = NamespaceIdent::from_vec(levels.to_vec()).map_err(|e| {
                Error::config_invalid(format!("namespace is not valid: {e}")).with_source(e)
            })?;
            let body = serde_json::to_vec(&CreateNamespaceRequest {
                namespace: ns,
                properties: HashMap::new(),
            })
            .map_err(|e| {
                Error::internal(format!("cannot encode a namespace request: {e}")).with_source(e)
            })?;
            let url = self.inner.transport.url(&["namespaces"], true)?;
            let what = format!("create namespace {}", levels.join("."));
            let response = self
                .inner
                .transport
                .send(Method::POST, url, Some(body), None)
                .await
                .map_err(SendFailure::into_error)?;
            match response.status() {
                s if s.is_success() => tracing::info!("created namespace {}", levels.join(".")),
                // Someone else created it meanwhile: that is what we wanted.
                StatusCode::CONFLICT => {}
                _ => return Err(status_error(response, &what).await),
            }
        }
        Ok(())
    }

    /// Whether the namespace (all of its levels) exists.
    pub(crate) async fn namespace_exists(&self, levels: &[String]) -> Result<bool> {
        let url = self
            .inner
            .transport
            .url(&["namespaces", &levels.join("\u{1f}")], true)?;
        let what = format!("check namespace {}", levels.join("."));
        let response = self
            .inner
            .transport
            .send(Method::HEAD, url, None, None)
            .await
            .map_err(SendFailure::into_error)?;
        match response.status() {
            s if s.is_success() => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            _ => Err(status_error(response, &what).await),
        }
    }

    /// Asks the catalog where it would create `table` (`location: None`) or whether it accepts
    /// `location`, without creating anything: `POST .../tables` with `stage-create: true`.
    pub(crate) async fn stage_create(
        &self,
        table: &TableName,
        schema: &iceberg::spec::Schema,
        location: Option<&str>,
    ) -> Result<Staged> {
        let ns = table.namespace.join("\u{1f}");
        let url = self
            .inner
            .transport
            .url(&["namespaces", &ns, "tables"], true)?;
        let what = format!("stage the creation of table {table}");
        let body = serde_json::to_vec(&CreateTableRequest {
            name: table.name.clone(),
            location: location.map(str::to_string),
            schema: schema.clone(),
            partition_spec: None,
            write_order: None,
            stage_create: Some(true),
            properties: HashMap::new(),
        })
        .map_err(|e| {
            Error::internal(format!("cannot encode a create request: {e}")).with_source(e)
        })?;
        let response = self
            .inner
            .transport
            .send(Method::POST, url, Some(body), None)
            .await
            .map_err(SendFailure::into_error)?;
        let status = response.status().as_u16();
        match status {
            200 => {
                let result: LoadTableResult = read_json(response, &what).await?;
                Ok(Staged::Accepted {
                    location: result.metadata.location().to_string(),
                })
            }
            400 | 403 | 422 => Ok(Staged::Refused {
                status,
                message: error_message(response).await,
            }),
            404 | 405 | 406 | 501 => Ok(Staged::Unsupported {
                status,
                message: error_message(response).await,
            }),
            _ => Err(status_error(response, &what).await),
        }
    }

    /// Registers an existing metadata file as a new table. A table that appeared meanwhile
    /// (409) is loaded instead: the caller re-checks its schema like any existing table.
    pub(crate) async fn register_table(
        &self,
        table: &TableName,
        metadata_location: &str,
    ) -> Result<Table> {
        let ns = table.namespace.join("\u{1f}");
        let url = self
            .inner
            .transport
            .url(&["namespaces", &ns, "register"], true)?;
        let what = format!("register table {table}");
        let body = serde_json::to_vec(&RegisterTableRequest {
            name: table.name.clone(),
            metadata_location: metadata_location.to_string(),
            overwrite: None,
        })
        .map_err(|e| {
            Error::internal(format!("cannot encode a register request: {e}")).with_source(e)
        })?;
        let response = self
            .inner
            .transport
            .send(Method::POST, url, Some(body), None)
            .await
            .map_err(SendFailure::into_error)?;
        match response.status() {
            StatusCode::OK => {
                let result: LoadTableResult = read_json(response, &what).await?;
                self.remember_access(table, &result);
                let location = result
                    .metadata_location
                    .unwrap_or_else(|| metadata_location.to_string());
                self.table_from(table, result.metadata, location, result.config)
            }
            StatusCode::CONFLICT => self.load_table(table).await?.ok_or_else(|| {
                Error::unavailable(format!(
                    "{what}: the catalog says it exists but cannot load it"
                ))
            }),
            _ => Err(status_error(response, &what).await),
        }
    }

    /// Encodes a commit of `updates` behind `requirements` to `table` (`POST .../tables/{table}`),
    /// once: sending the same [`CommitRequest`] again sends the same bytes. When the server
    /// advertised `idempotency-key-lifetime`, the request carries a fresh `Idempotency-Key`, so a
    /// resend after a lost answer is replayed by the server instead of applied twice.
    pub(crate) fn commit_request(
        &self,
        table: &TableName,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Result<CommitRequest> {
        let url = self.inner.transport.table_url(table)?;
        let request = CommitTableRequest {
            identifier: Some(table.ident()?),
            requirements,
            updates,
        };
        let body = wire::commit_body(&request)?;
        Ok(CommitRequest {
            table: table.clone(),
            url,
            body,
            key: self
                .inner
                .idempotency_keys
                .then(|| uuid::Uuid::new_v4().to_string()),
            updates: request.updates,
        })
    }

    /// Sends `request` once and reports what happened on the wire: the new table, or a
    /// [`CommitFailure`] for the writer to classify. When `base` is the table the updates were
    /// built on, the new table is `base` with the updates applied, once the catalog's answer
    /// confirms it (see `answer`); otherwise, or when the answer differs, the answer is parsed
    /// in full.
    pub(crate) async fn send_commit(
        &self,
        request: &CommitRequest,
        base: Option<&Table>,
    ) -> std::result::Result<Table, CommitFailure> {
        let table = &request.table;
        let what = format!("commit to table {table}");
        let response = match self
            .inner
            .transport
            .send(
                Method::POST,
                request.url.clone(),
                Some(request.body.clone()),
                request.key.as_deref(),
            )
            .await
        {
            Ok(r) => r,
            Err(SendFailure::NotSent(e)) => return Err(CommitFailure::NotSent(e)),
            Err(SendFailure::Unknown(e)) => return Err(CommitFailure::NoAnswer(e)),
            Err(SendFailure::Fatal(e)) => return Err(CommitFailure::Refused(e)),
        };
        let status = response.status().as_u16();
        if !response.status().is_success() {
            let error = status_error(response, &what).await;
            return Err(CommitFailure::Answered { status, error });
        }
        // A 2xx whose body cannot be read or understood: the commit may well have landed.
        let bytes = read_body(response, &what)
            .await
            .map_err(CommitFailure::NoAnswer)?;
        let built_on = base.map(|b| (b, &request.updates[..]));
        let (metadata, location) = self
            .take_answer(table, &what, &bytes, built_on)
            .map_err(CommitFailure::NoAnswer)?;
        drop(bytes);
        self.table_from(table, metadata, location, HashMap::new())
            .map_err(CommitFailure::NoAnswer)
    }

    /// Encodes and sends a commit once (`Self::commit_request`, `Self::send_commit`), for
    /// writers that never resend the same request (a failure is followed by a reload).
    pub async fn commit(
        &self,
        table: &TableName,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
        base: Option<&Table>,
    ) -> std::result::Result<Table, CommitFailure> {
        let request = self
            .commit_request(table, requirements, updates)
            .map_err(CommitFailure::Refused)?;
        self.send_commit(&request, base).await
    }

    /// The table metadata and its location from a successful commit's answer: the table it was
    /// built on with the updates applied when the answer confirms that, else the answer parsed
    /// in full. Either way the new version's refs are kept for the next commit's check.
    fn take_answer(
        &self,
        table: &TableName,
        what: &str,
        bytes: &[u8],
        built_on: Option<(&Table, &[TableUpdate])>,
    ) -> Result<(TableMetadata, String)> {
        let confirmed = built_on.and_then(|(base, updates)| {
            let base_location = base.metadata_location()?;
            let base_refs = self.known_refs(table, base_location)?;
            answer::adopt(base.metadata(), base_location, &base_refs, updates, bytes)
                .inspect_err(|why| {
                    tracing::debug!(table = %table, "the commit's answer differs from the table as built ({why}); parsing it in full");
                })
                .ok()
        });
        let how = if confirmed.is_some() {
            "confirmed"
        } else {
            "parsed"
        };
        metrics::counter!("thadam_iceberg_commit_answers_total", "table" => table.to_string(), "how" => how)
            .increment(1);
        let (metadata, location, refs) = match confirmed {
            Some(adopted) => (
                adopted.metadata,
                adopted.metadata_location,
                Some(adopted.refs),
            ),
            None => {
                let result: CommitTableResponse = parse_json(bytes, what)?;
                (
                    result.metadata,
                    result.metadata_location,
                    answer::refs_of(bytes).ok(),
                )
            }
        };
        self.remember_refs(table, &location, refs);
        Ok((metadata, location))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::auth::NoAuth;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A catalog on loopback that answers `GET /v1/config` and drops every other request
    /// unanswered; the request lines it read, in order.
    async fn config_only_catalog() -> (u16, Arc<Mutex<Vec<String>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let lines = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&head).into_owned();
                let line = text.lines().next().unwrap_or_default().to_string();
                let config = line.contains("/v1/config");
                lines.lock().expect("lines").push(line);
                if config {
                    let body = r#"{"defaults":{},"overrides":{}}"#;
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(answer.as_bytes()).await;
                }
                // Anything else: dropped unanswered (an answer lost on the way).
            }
        });
        (port, seen)
    }

    #[tokio::test]
    async fn a_failed_load_names_the_catalog_redacted_and_requests_keep_the_query() {
        let (port, seen) = config_only_catalog().await;
        let catalog_uri: SecretUrl = format!("http://127.0.0.1:{port}/cat?secret=abc")
            .parse()
            .expect("url");
        let client = RestClient::connect(RestClientSettings {
            catalog_uri,
            http: reqwest::Client::new(),
            tokens: Arc::new(NoAuth),
            storage_props: HashMap::new(),
            warehouse: Some("wh".into()),
            headers: Vec::new(),
            sigv4: None,
        })
        .await
        .expect("connect");
        let shown = format!("{client:?}");
        assert!(shown.contains("/cat"), "{shown}");
        assert!(!shown.contains("abc"), "{shown}");

        let table = TableName {
            namespace: vec!["ns".into()],
            name: "t".into(),
        };
        let err = client.load_table(&table).await.expect_err("unanswered");
        assert_eq!(err.code(), ErrorCode::Unavailable, "{err}");
        for text in [err.to_string(), format!("{err:?}")] {
            assert!(
                text.contains(&format!(
                    "GET http://127.0.0.1:{port}/cat/v1/namespaces/ns/tables/t"
                )),
                "the redacted request URL: {text}"
            );
            assert!(!text.contains("abc"), "{text}");
            assert!(!text.contains("secret"), "{text}");
        }

        // The catalog got the whole URL, query string included, on every request.
        let lines = seen.lock().expect("lines").clone();
        assert_eq!(
            lines,
            [
                "GET /cat/v1/config?secret=abc&warehouse=wh HTTP/1.1",
                "GET /cat/v1/namespaces/ns/tables/t?secret=abc HTTP/1.1",
            ],
            "{lines:?}"
        );
    }
}
