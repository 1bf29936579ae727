//! The typed, validated configuration the registrar runs on. Everything here has passed the
//! rules in `validate`: defaults are applied, references resolved, relative paths made relative
//! to the config file's directory, and secrets wrapped in [`Secret`].

use std::path::PathBuf;
use std::time::Duration;

use url::Url;

use super::secret_url::SecretUrl;
use crate::runtime::backoff::RetryPolicy;
use crate::secret::Secret;

/// One registrar: a `kind: iceberg` sink.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegistrarConfig {
    /// The sink's `id`.
    pub id: String,
    /// The parquet sink whose segment catalog this registrar follows.
    pub from: String,
    /// The pipeline name, equal to the shipper's; part of every table location.
    pub pipeline: String,
    /// The Iceberg REST catalog endpoint (http:// or https://). Formats redacted (no user,
    /// password, query string or fragment); requests use [`SecretUrl::expose`].
    pub catalog_uri: SecretUrl,
    /// A PEM bundle that replaces the platform roots for the catalog connection (https only).
    pub catalog_ca_file: Option<PathBuf>,
    /// How catalog requests authenticate.
    pub catalog_auth: CatalogAuth,
    /// The client certificate presented to the catalog (mutual TLS, https only).
    pub catalog_client_identity: Option<ClientIdentity>,
    /// `catalog_warehouse`: sent as `warehouse` on `GET /v1/config`, so the server's defaults,
    /// overrides and prefix for that warehouse apply (Polaris: the catalog name; Glue: the
    /// account id; S3 Tables: the table bucket ARN; Unity: mandatory).
    pub catalog_warehouse: Option<String>,
    /// `catalog_headers`: extra headers on every catalog request, in the order written (e.g.
    /// `X-Iceberg-Access-Delegation: vended-credentials`). Values may carry keys: never logged.
    pub catalog_headers: Vec<(String, Secret)>,
    /// Where the shipper puts the files; tables live under it.
    pub url: TableRoot,
    /// The Iceberg namespace, one entry per level (`a.b` is `["a", "b"]`).
    pub namespace: Vec<String>,
    /// Whether an absent table (and namespace) is created. Default false.
    pub create_table: bool,
    /// `table_location`: who chooses the location of a table the registrar creates.
    pub table_location: TableLocation,
    /// `partition_by`: the partition spec a table created by the registrar gets (empty:
    /// unpartitioned). An existing table's own default spec is always used.
    pub partition_by: Vec<super::partition_by::PartitionTerm>,
    /// S3 access for metadata, manifests and footer reads.
    pub store: StoreConfig,
    /// Backoff for transient failures.
    pub retry: RetryPolicy,
    /// `commit`: how many segments one snapshot may carry.
    pub commit: CommitPolicy,
    /// `footer_readers`: how many footers are read at once. Default 8.
    pub footer_readers: usize,
    /// `memory`: what the registrar holds at once, whatever the backlog.
    pub memory: MemoryBudget,
    /// `unready_after`: how long a table may keep failing (retried) before `/readyz` answers 503
    /// for it. Default [`DEFAULT_UNREADY_AFTER`] (5 minutes).
    pub unready_after: std::time::Duration,
    /// `on_bad_segment`: stop (default) or quarantine a segment that cannot be registered for
    /// a reason about its file (see `table::quarantine`).
    pub on_bad_segment: BadSegmentPolicy,
    /// `quarantine_file`: where quarantined segments are recorded. Default
    /// `{segment catalog}.quarantine`.
    pub quarantine_file: PathBuf,
    /// `table_properties`: table properties a table the registrar creates gets, over the
    /// registrar's defaults (`table::create::creation_properties`). Existing tables are
    /// never changed. Keys under `thadam.` are the registrar's own and refused.
    pub table_properties: Vec<(String, String)>,
    /// `snapshot_retention`: expire old snapshots of the main branch in the registrar's own
    /// commits (metadata only; see `table::retention`). `None` (the default): never.
    pub snapshot_retention: Option<SnapshotRetention>,
    /// The `from` parquet sink, as far as the registrar needs it.
    pub source: ParquetSource,
}

/// Catalog authentication: at most one of `catalog_token`, `catalog_credential` and
/// `catalog_sigv4`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CatalogAuth {
    /// No `Authorization` header.
    None,
    /// A static bearer token (`catalog_token`), never refreshed.
    Token(Secret),
    /// OAuth2 client credentials (`catalog_credential`), exchanged for access tokens.
    Credential(OAuth2Credential),
    /// AWS Signature Version 4 on every request (`catalog_sigv4`): no `Authorization: Bearer`.
    SigV4(SigV4Credential),
}

/// `catalog_sigv4`: the AWS keys and scope every catalog request is signed with (the Glue
/// Iceberg endpoint signs as `glue`, S3 Tables as `s3tables`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SigV4Credential {
    /// The AWS region of the endpoint, e.g. `eu-west-1`: letters, digits and `-`.
    pub region: String,
    /// The service the signature is scoped to, e.g. `glue` or `s3tables`: letters, digits, `-`.
    pub signing_name: String,
    /// Sent in the signature's credential scope, but kept out of logs all the same.
    pub access_key_id: Secret,
    /// Never sent: only the signature computed with it is.
    pub secret_access_key: Secret,
    /// Temporary credentials (STS): sent as `x-amz-security-token` and signed.
    pub session_token: Option<Secret>,
}

/// `table_location`: who chooses where a table the registrar creates lives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TableLocation {
    /// The spec's rule: `{url}/thadam/v1/{pipeline}/{dataset}`, the directory the shipper owns.
    /// The registrar writes the first metadata file there and registers it.
    #[default]
    Shipper,
    /// The catalog chooses (Polaris, S3 Tables, Unity and others refuse client-chosen locations
    /// outside the places they allow). Data files stay where the shipper put them and are
    /// registered by their absolute URI.
    Catalog,
}

impl TableLocation {
    /// The YAML spelling: `shipper` or `catalog`.
    pub fn as_str(self) -> &'static str {
        match self {
            TableLocation::Shipper => "shipper",
            TableLocation::Catalog => "catalog",
        }
    }
}

/// How the client authenticates at the OAuth2 token endpoint (RFC 6749 section 2.3.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClientAuth {
    /// `client_id` and `client_secret` in the form body: the REST catalog's own convention.
    #[default]
    Body,
    /// HTTP Basic (`Authorization: Basic ...`), which some identity providers require.
    Basic,
}

/// `catalog_credential`: OAuth2 client-credentials grant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OAuth2Credential {
    /// Non-empty, without `:` (it is joined to the secret with `:` in client authentication).
    pub client_id: String,
    /// Sent only to the token endpoint (form body or HTTP Basic, per `client_auth`).
    pub client_secret: Secret,
    /// Default `catalog`, the REST catalog's own default scope.
    pub scope: String,
    /// The token endpoint. Default `{catalog_uri without trailing /}/v1/oauth/tokens`. Formats
    /// redacted, like `catalog_uri`.
    pub oauth2_server_uri: SecretUrl,
    /// `client_auth: body | basic`. Default `body`.
    pub client_auth: ClientAuth,
}

/// `catalog_client_cert` + `catalog_client_key`: both existing PEM files, checked at load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientIdentity {
    /// A PEM certificate chain (at least one certificate).
    pub cert: PathBuf,
    /// Its PEM private key. Only the path is kept here; the key is read when the client is built.
    pub key: PathBuf,
}

/// `url: s3://bucket[/prefix]`, normalised: `prefix` has no leading or trailing `/` and may be
/// empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableRoot {
    /// The bucket, never empty.
    pub bucket: String,
    /// The key prefix without leading or trailing `/`; empty for the bucket's root.
    pub prefix: String,
}

impl TableRoot {
    /// `s3://bucket/prefix`, or `s3://bucket` when the prefix is empty (never a trailing `/`).
    pub fn uri(&self) -> String {
        if self.prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{}", self.bucket, self.prefix)
        }
    }

    /// A dataset's table location, `{url}/thadam/v1/{pipeline}/{dataset}`: the directory the
    /// shipper owns for that dataset.
    pub fn table_location(&self, pipeline: &str, dataset: &str) -> String {
        format!("{}/thadam/v1/{pipeline}/{dataset}", self.uri())
    }
}

/// `store`: S3 access.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreConfig {
    /// A custom endpoint (MinIO, SeaweedFS); `None` means AWS.
    pub endpoint: Option<Url>,
    /// Default `us-east-1`.
    pub region: String,
    /// Whether `region` was set (otherwise a region the catalog sends for a table applies).
    pub region_explicit: bool,
    /// Whether an `http://` endpoint is allowed. Default false.
    pub allow_http: bool,
    /// Set together with `secret_access_key`, or neither (then S3 access comes from the catalog:
    /// vended credentials or remote signing, or from `credentials: instance_metadata`).
    pub access_key_id: Option<Secret>,
    /// Set together with `access_key_id`, or neither.
    pub secret_access_key: Option<Secret>,
    /// `credentials`: where S3 credentials come from when the section has no keys.
    pub credentials: StoreCredentials,
}

/// `store.credentials`: the only credential sources besides the section's own keys and what the
/// catalog gives with a table (vended credentials, remote signing). Nothing ambient (the instance
/// metadata service, `AWS_*` variables, `~/.aws`) is ever asked unless named here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StoreCredentials {
    /// `static` (the default): the section's keys, else the catalog's for the table; with
    /// neither, S3 access fails at once with `auth.failed`.
    #[default]
    Static,
    /// `instance_metadata`: without keys and where the catalog gives nothing, the EC2 instance
    /// metadata service (IMDSv2, 169.254.169.254). Not with keys.
    InstanceMetadata,
}

/// `commit`: batching of segments into snapshots. Commit cost is per snapshot, not per file, so
/// a backlog is registered in few, large snapshots; a lone segment is committed at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitPolicy {
    /// The most segments in one snapshot. Default 500.
    pub max_segments: usize,
    /// The most bytes of data files (summed segment sizes) in one snapshot; a single larger
    /// segment still goes alone. Default 1 GiB.
    pub max_bytes: u64,
    /// How long a batch that is not full may wait for more segments before it is committed.
    /// Default 0: no added latency.
    pub linger: Duration,
    /// The least time between the starts of two commits of one table. Default 0. Each commit
    /// rewrites the table's metadata and contends with other writers of the table: a trickle
    /// pays one commit per segment unless paced. Adds up to this much latency to a segment that
    /// arrives right after a commit; segments arriving meanwhile join the next snapshot.
    pub min_interval: Duration,
    /// In a fleet that takes turns on a table, publish what waits for this node's turn as an
    /// intent that whoever commits next carries (see docs/fleets.md, "Intents"). Default
    /// true; a lone registrar publishes only for a roll call (see docs/fleets.md).
    pub intents: bool,
    /// `intents_key`: the fleet's shared key. With it, every intent is tagged (HMAC-SHA256) and
    /// only intents that carry its tag are carried, so that write access under the fleet's
    /// `_thadam-intents/` is not enough to register files or move a watermark. Every node of a
    /// fleet sets the same key (a secret: `${file:...}` or `${env:...}`). Default: none.
    pub intents_key: Option<Secret>,
}

impl Default for CommitPolicy {
    fn default() -> Self {
        CommitPolicy {
            max_segments: 500,
            max_bytes: 1 << 30,
            linger: Duration::ZERO,
            min_interval: Duration::ZERO,
            intents: true,
            intents_key: None,
        }
    }
}

/// `memory`: bounds on what is held in memory, so that a backlog of any length costs the same.
/// The feed is read only as fast as segments leave (committed, skipped, quarantined): the
/// `segments` budget is shared by every table, and a footer is read only while its table's share
/// of `footer_bytes` has room (the oldest waiting segment's footer is always read, so a table
/// never waits on its own later footers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryBudget {
    /// The most uploaded segments taken from the feed and not yet done with. Default 2,048
    /// (about 1 KB each); at least twice `commit.max_segments` lets one batch be read while the
    /// previous one commits.
    pub segments: usize,
    /// The most footer bytes (decoded Parquet metadata) held, across tables. Default 32 MiB.
    pub footer_bytes: u64,
}

impl Default for MemoryBudget {
    fn default() -> Self {
        MemoryBudget {
            segments: 2048,
            footer_bytes: 32 << 20,
        }
    }
}

/// `snapshot_retention`: which snapshots the registrar's commits remove from the table metadata
/// (never a file). See `table::retention` for the rules that keep exactly-once intact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotRetention {
    /// `max_age`: a snapshot older than this may be expired. At least 1 second.
    pub max_age: Duration,
    /// `min_snapshots`: the newest this many snapshots of the main branch are always kept,
    /// whatever their age. At least 1.
    pub min_snapshots: usize,
}

/// The default of `footer_readers`.
pub const DEFAULT_FOOTER_READERS: usize = 8;

/// `unready_after` default: long enough that a catalog restart or a short outage does not flap
/// readiness, short enough that an outage pages someone within minutes.
pub const DEFAULT_UNREADY_AFTER: std::time::Duration = std::time::Duration::from_secs(300);

/// `on_bad_segment`: what a segment that cannot be registered does to the pipeline (the
/// decision itself is `table::quarantine::action`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BadSegmentPolicy {
    /// The service stops with the error (the spec's behaviour).
    #[default]
    Stop,
    /// A segment that fails for a reason about the file is quarantined; the rest goes on.
    Quarantine,
}

impl BadSegmentPolicy {
    /// The YAML spelling: `stop` or `quarantine`.
    pub fn as_str(self) -> &'static str {
        match self {
            BadSegmentPolicy::Stop => "stop",
            BadSegmentPolicy::Quarantine => "quarantine",
        }
    }
}

/// How a parquet sink writes unsigned Arrow integers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum UnsignedPolicy {
    /// Keep unsigned types (the default). Iceberg cannot represent them.
    #[default]
    Native,
    /// Write them as signed types; required for datasets registered in Iceberg.
    Signed,
}

impl UnsignedPolicy {
    /// The YAML spelling: `native` or `signed`.
    pub fn as_str(self) -> &'static str {
        match self {
            UnsignedPolicy::Native => "native",
            UnsignedPolicy::Signed => "signed",
        }
    }
}

/// The parquet sink a registrar follows (`from`), parsed only as far as the registrar needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParquetSource {
    /// The parquet sink's `id`.
    pub id: String,
    /// Where segments are written.
    pub dir: PathBuf,
    /// The segment catalog log. Default `{dir}/segment-catalog.log`.
    pub catalog: PathBuf,
    /// Non-empty, unique names, in file order.
    pub datasets: Vec<DatasetConfig>,
}

/// One dataset of the parquet sink.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatasetConfig {
    /// The dataset's name: its table is `{namespace}.{name}`.
    pub name: String,
    /// The dataset's own `unsigned`, else the sink-wide one, else `native`.
    pub unsigned: UnsignedPolicy,
}
