//! `--check`: validates a config and what it points at before the registrar runs, one line per
//! check: config parsed; per iceberg sink, catalog reachable, auth accepted, bucket readable,
//! segment catalog readable, each table present or creatable, each dataset's unsigned policy
//! registrable. Every check that can run does (a failing one does not hide the others); a check
//! that depends on a failed one is reported as skipped, and one that ran but could not verify
//! its subject as `warn` ([`Verdict::CannotTell`]), never `ok`.
//!
//! Nothing is changed: no namespace or table is created, nothing is written to the bucket.
//! The printed report starts with the build that checked (version and commit, see
//! [`crate::runtime::build_info`]).

use std::fmt;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use object_store::ObjectStore;

use crate::catalog::{RestClient, Staged, TableName};
use crate::config::{CatalogAuth, Config, RegistrarConfig, TableLocation, UnsignedPolicy};
use crate::error::{Error, ErrorCode};
use crate::protocol::segment_log::{LogEntry, SegmentLogReader};

/// `quarantine`: with `on_bad_segment: quarantine` (or a quarantine file left from it), the
/// segments in quarantine, one per line of detail; `warn` while any is open (they wait for a
/// fix and `--quarantine retry`, or a discard), not a failure.
fn check_quarantine(config: &RegistrarConfig, report: &mut CheckReport) {
    use crate::config::BadSegmentPolicy;
    use crate::table::quarantine::QuarantineStore;
    let sink = config.id.as_str();
    let path = &config.quarantine_file;
    if config.on_bad_segment == BadSegmentPolicy::Stop && !path.exists() {
        return;
    }
    let state = match QuarantineStore::open(path) {
        Ok(store) => store.state(),
        Err(e) => return report.outcome(sink, "quarantine", Err(e)),
    };
    let open: Vec<String> = state
        .open()
        .map(|e| {
            format!(
                "seq {} dataset {} key {} ({}{})",
                e.segment.seq,
                e.segment.dataset,
                e.segment.object_key,
                e.code,
                if e.retry { ", retry requested" } else { "" }
            )
        })
        .collect();
    if open.is_empty() {
        report.push(
            Some(sink),
            "quarantine",
            Verdict::Ok,
            format!("no segment in quarantine ({})", path.display()),
        );
    } else {
        report.push(
            Some(sink),
            "quarantine",
            Verdict::CannotTell,
            format!(
                "{} segment(s) in quarantine ({}): {}; fix them and run --quarantine retry, or \
                 --quarantine discard",
                open.len(),
                path.display(),
                open.join("; ")
            ),
        );
    }
}

/// How long one network check may take (an unreachable catalog is retried by the registrar;
/// a check only reports it).
const NETWORK_TIMEOUT: Duration = Duration::from_secs(20);

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    /// Failed, with the code the registrar would stop on.
    Fail(ErrorCode),
    /// Not run, because a check it depends on failed.
    Skipped,
    /// Ran, but the answer could not tell whether this will work (printed `warn`, never `ok`);
    /// the detail says what is not known and why. Not a failure: the exit code stays 0.
    CannotTell,
}

/// One line of the report.
#[derive(Debug, Clone)]
pub struct CheckLine {
    /// The iceberg sink's id, `None` for checks of the whole file.
    pub sink: Option<String>,
    pub check: String,
    pub verdict: Verdict,
    pub detail: String,
}

/// Every check, in order.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    pub lines: Vec<CheckLine>,
}

impl CheckReport {
    fn push(
        &mut self,
        sink: Option<&str>,
        check: impl Into<String>,
        verdict: Verdict,
        detail: impl Into<String>,
    ) {
        self.lines.push(CheckLine {
            sink: sink.map(str::to_string),
            check: check.into(),
            verdict,
            detail: detail.into(),
        });
    }

    fn outcome(&mut self, sink: &str, check: impl Into<String>, result: Result<String, Error>) {
        match result {
            Ok(detail) => self.push(Some(sink), check, Verdict::Ok, detail),
            Err(e) => self.push(Some(sink), check, Verdict::Fail(e.code()), e.to_string()),
        }
    }

    /// Whether every check passed, or ran and could not tell (those print `warn`).
    pub fn passed(&self) -> bool {
        self.lines
            .iter()
            .all(|l| matches!(l.verdict, Verdict::Ok | Verdict::CannotTell))
    }

    /// The code of the first failed check, if any (the runner's exit code follows it).
    pub fn first_failure(&self) -> Option<ErrorCode> {
        self.lines.iter().find_map(|l| match l.verdict {
            Verdict::Fail(code) => Some(code),
            _ => None,
        })
    }

    /// The lines that failed.
    pub fn failures(&self) -> impl Iterator<Item = &CheckLine> {
        self.lines
            .iter()
            .filter(|l| matches!(l.verdict, Verdict::Fail(_)))
    }
}

impl fmt::Display for CheckLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = match self.verdict {
            Verdict::Ok => "ok  ",
            Verdict::Fail(_) => "FAIL",
            Verdict::Skipped => "skip",
            Verdict::CannotTell => "warn",
        };
        match &self.sink {
            Some(sink) => write!(f, "{verdict} [{sink}] {}: {}", self.check, self.detail),
            None => write!(f, "{verdict} {}: {}", self.check, self.detail),
        }
    }
}

impl fmt::Display for CheckReport {
    /// The build first (`thadam-iceberg 0.1.0 (commit SHA)`: which registrar checked), then one
    /// line per check and a count.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "thadam-iceberg {}",
            crate::runtime::build_info::VERSION_LINE
        )?;
        for line in &self.lines {
            writeln!(f, "{line}")?;
        }
        let failed = self.failures().count();
        let unknown = self
            .lines
            .iter()
            .filter(|l| l.verdict == Verdict::CannotTell)
            .count();
        if failed == 0 && unknown > 0 {
            writeln!(
                f,
                "no check failed; {unknown} of {} could not tell (warn, above)",
                self.lines.len()
            )
        } else if failed == 0 {
            writeln!(f, "all {} checks passed", self.lines.len())
        } else {
            writeln!(f, "{failed} of {} checks failed", self.lines.len())
        }
    }
}

/// Checks the config file at `path` (only the iceberg sink `sink` when given).
pub async fn check_file(path: &Path, sink: Option<&str>) -> CheckReport {
    let mut report = CheckReport::default();
    let config = match Config::load(path) {
        Ok(c) => c,
        Err(e) => {
            report.push(
                None,
                "config parsed",
                Verdict::Fail(e.code()),
                e.to_string(),
            );
            return report;
        }
    };
    let selected: Vec<RegistrarConfig> = config
        .registrars
        .into_iter()
        .filter(|r| sink.is_none_or(|s| r.id == s))
        .collect();
    if selected.is_empty() {
        let which = sink.map(|s| format!(" with id {s}")).unwrap_or_default();
        report.push(
            None,
            "config parsed",
            Verdict::Fail(ErrorCode::ConfigInvalid),
            format!("{} has no kind: iceberg sink{which}", path.display()),
        );
        return report;
    }
    let ids: Vec<&str> = selected.iter().map(|r| r.id.as_str()).collect();
    report.push(
        None,
        "config parsed",
        Verdict::Ok,
        format!("{}: iceberg sink(s) {}", path.display(), ids.join(", ")),
    );
    for registrar in &selected {
        check_registrar(registrar, &mut report).await;
    }
    report
}

/// Runs every check of one registrar config, appending to `report`.
pub async fn check_registrar(config: &RegistrarConfig, report: &mut CheckReport) {
    let sink = config.id.as_str();
    let client = check_catalog(config, report).await;
    if matches!(
        crate::io::store::S3Store::from(&config.store).credentials,
        crate::io::credentials::S3Credentials::Missing
    ) {
        // Nothing to list with: the catalog's vended credentials or remote signer, per table.
        report.push(
            Some(sink),
            "bucket readable",
            Verdict::CannotTell,
            format!(
                "not known: store has no keys (and no store.credentials: instance_metadata), so \
                 {} is read with what the catalog gives each table (vended credentials or \
                 remote signing), which --check does not ask for; a table without either stops \
                 with auth.failed",
                config.url.uri()
            ),
        );
    } else {
        report.outcome(sink, "bucket readable", check_bucket(config).await);
    }
    check_segment_catalog(config, report);
    for dataset in &config.source.datasets {
        let table = TableName {
            namespace: config.namespace.clone(),
            name: dataset.name.clone(),
        };
        let check = format!("table {table}");
        match &client {
            Some(client) => match check_table(config, client, &table).await {
                Ok(TableVerdict::Ok(detail)) => report.push(Some(sink), check, Verdict::Ok, detail),
                Ok(TableVerdict::CannotTell(detail)) => {
                    report.push(Some(sink), check, Verdict::CannotTell, detail)
                }
                Err(e) => report.push(Some(sink), check, Verdict::Fail(e.code()), e.to_string()),
            },
            None => report.push(
                Some(sink),
                check,
                Verdict::Skipped,
                "the catalog did not accept us (above)",
            ),
        }
    }
    check_quarantine(config, report);
    for dataset in &config.source.datasets {
        let check = format!("dataset {} unsigned policy", dataset.name);
        match dataset.unsigned {
            UnsignedPolicy::Signed => {
                report.push(Some(sink), check, Verdict::Ok, "signed: registrable")
            }
            UnsignedPolicy::Native => report.outcome(
                sink,
                check,
                Err(Error::new(
                    ErrorCode::UnsupportedType,
                    format!(
                        "unsigned: native writes UInt64 columns (the _wal_epoch and _wal_pos \
                         lineage columns) and Iceberg has no unsigned 64-bit type; set \
                         `unsigned: signed` on dataset {} of parquet sink {}",
                        dataset.name, config.source.id
                    ),
                )),
            ),
        }
    }
}

async fn timed<T>(what: &str, fut: impl Future<Output = Result<T, Error>>) -> Result<T, Error> {
    tokio::time::timeout(NETWORK_TIMEOUT, fut)
        .await
        .unwrap_or_else(|_| {
            Err(Error::unavailable(format!(
                "{what}: no answer within {}s",
                NETWORK_TIMEOUT.as_secs()
            )))
        })
}

/// "catalog reachable" and "auth accepted"; the client when both passed.
async fn check_catalog(config: &RegistrarConfig, report: &mut CheckReport) -> Option<RestClient> {
    let sink = config.id.as_str();
    // Redacted (no credentials, no query string: one may carry a token, and this is printed).
    let shown = config.catalog_uri.to_string();
    let uri = shown.trim_end_matches('/');
    let auth = match &config.catalog_auth {
        CatalogAuth::None => "no credentials configured; the catalog accepts anonymous requests",
        CatalogAuth::Token(_) => "catalog_token accepted",
        CatalogAuth::Credential(_) => "catalog_credential exchanged and the token accepted",
        CatalogAuth::SigV4(_) => "catalog_sigv4 signature accepted",
    };
    match connect(config, uri).await {
        // The catalog was never asked: whether it is reachable is not known.
        Err(ConnectFailure::Token(e)) => {
            report.push(
                Some(sink),
                "catalog reachable",
                Verdict::CannotTell,
                format!(
                    "not known: {uri} was not asked, because catalog requests carry the token of \
                     catalog_credential and the token endpoint gave none (auth accepted, below)"
                ),
            );
            report.push(
                Some(sink),
                "auth accepted",
                Verdict::Fail(e.code()),
                e.to_string(),
            );
            None
        }
        Ok(client) => {
            report.push(
                Some(sink),
                "catalog reachable",
                Verdict::Ok,
                format!("{uri} answered GET /v1/config"),
            );
            report.push(Some(sink), "auth accepted", Verdict::Ok, auth);
            Some(client)
        }
        // It answered, so it is reachable: it refused us.
        Err(ConnectFailure::Catalog(e)) if e.code() == ErrorCode::AuthFailed => {
            report.push(
                Some(sink),
                "catalog reachable",
                Verdict::Ok,
                format!("{uri} answered"),
            );
            report.push(
                Some(sink),
                "auth accepted",
                Verdict::Fail(e.code()),
                e.to_string(),
            );
            None
        }
        Err(ConnectFailure::Catalog(e)) => {
            report.push(
                Some(sink),
                "catalog reachable",
                Verdict::Fail(e.code()),
                e.to_string(),
            );
            report.push(
                Some(sink),
                "auth accepted",
                Verdict::Skipped,
                "the catalog is not reachable",
            );
            None
        }
    }
}

/// Why [`connect`] failed.
enum ConnectFailure {
    /// The token endpoint of `catalog_credential` gave no token: the catalog was not asked.
    Token(Error),
    /// At the catalog, or setting up its connection (TLS files).
    Catalog(Error),
}

/// [`crate::registrar::connect`], in two steps: a `catalog_credential` is exchanged here, once
/// (the client then sends that token, never renewed: enough for a check), so that a failure at
/// the token endpoint is not reported as one of the catalog, which is not asked then.
async fn connect(config: &RegistrarConfig, uri: &str) -> Result<RestClient, ConnectFailure> {
    use crate::catalog::auth::oauth2::TokenEndpoint;
    use crate::catalog::auth::{NoAuth, SharedTokenSource, StaticToken};
    let http = crate::registrar::catalog_http(config).map_err(ConnectFailure::Catalog)?;
    let tokens: SharedTokenSource = match &config.catalog_auth {
        CatalogAuth::None | CatalogAuth::SigV4(_) => Arc::new(NoAuth),
        CatalogAuth::Token(token) => Arc::new(StaticToken::new(token.clone())),
        CatalogAuth::Credential(credential) => {
            let endpoint = TokenEndpoint::new(credential.clone(), http.clone());
            let issued = timed(
                &format!(
                    "the token endpoint {} (catalog_credential)",
                    credential.oauth2_server_uri
                ),
                endpoint.exchange(),
            )
            .await
            .map_err(ConnectFailure::Token)?;
            Arc::new(StaticToken::new(issued.value))
        }
    };
    timed(
        &format!("GET {uri}/v1/config"),
        crate::registrar::connect_with(config, http, tokens),
    )
    .await
    .map_err(ConnectFailure::Catalog)
}

/// Lists the top level of `url`'s prefix: one request, proving the endpoint, the keys and the
/// bucket. Classified as the runner classifies S3 failures (by status, see
/// [`crate::io::status::status_class`]): refused credentials are `auth.failed`, a missing bucket
/// `object_missing`, another refusal `config.invalid`, and only an outage `unavailable`.
async fn check_bucket(config: &RegistrarConfig) -> Result<String, Error> {
    let root = config.url.uri();
    let store = crate::io::store::object_store(&config.store, &config.url.bucket)?;
    let bucket = &config.url.bucket;
    let prefix = object_store::path::Path::parse(config.url.prefix.as_str()).map_err(|e| {
        Error::config_invalid(format!(
            "url: the prefix of {root} is not a valid key prefix: {e}"
        ))
        .with_source(e)
    })?;
    let prefix = (!config.url.prefix.is_empty()).then_some(&prefix);
    let listed = timed(&format!("listing {root}"), async {
        store
            .list_with_delimiter(prefix)
            .await
            .map_err(|e| bucket_error(e, bucket, &root))
    })
    .await?;
    let entries = listed.objects.len() + listed.common_prefixes.len();
    Ok(format!(
        "{root} listed ({entries} entries at its top level)"
    ))
}

/// The check's verdict on a failed listing of `root`, by type.
fn bucket_error(e: object_store::Error, bucket: &str, root: &str) -> Error {
    use crate::io::status::{S3StatusClass, s3_refusal, status_class};
    let status = match &e {
        object_store::Error::NotFound { .. } => Some(404),
        object_store::Error::PermissionDenied { .. } => Some(403),
        object_store::Error::Unauthenticated { .. } => Some(401),
        other => s3_refusal(other).map(|r| r.status),
    };
    let error = match status.map(status_class) {
        Some(S3StatusClass::Auth) => Error::auth_failed(format!(
            "the S3 store refused to list {root}: {e}; check the store credentials \
             (store.access_key_id / store.secret_access_key) and that they may read bucket \
             {bucket}"
        )),
        Some(S3StatusClass::Missing) => Error::new(
            ErrorCode::ObjectMissing,
            format!(
                "cannot list {root}: {e}; check url (bucket {bucket} and prefix) and store.endpoint"
            ),
        ),
        Some(S3StatusClass::Rejected | S3StatusClass::ShortObject) => {
            Error::config_invalid(format!(
                "the S3 store refused to list {root}: {e}; check url, store.endpoint and \
             store.region"
            ))
        }
        Some(S3StatusClass::Transient) | None => Error::unavailable(format!(
            "cannot list {root}: {e}; check store.endpoint (is the S3 server up?)"
        )),
    };
    error.with_source(e)
}

/// "segment catalog readable": read to its end, or `warn` when it does not exist yet (nothing
/// could be read; the registrar waits for it).
fn check_segment_catalog(config: &RegistrarConfig, report: &mut CheckReport) {
    const CHECK: &str = "segment catalog readable";
    let path = &config.source.catalog;
    // Only a file that is certainly absent is waited for; any other failure (a directory that
    // cannot be searched) is the reader's to report.
    if let Err(e) = std::fs::metadata(path)
        && e.kind() == std::io::ErrorKind::NotFound
    {
        return report.push(
            Some(config.id.as_str()),
            CHECK,
            Verdict::CannotTell,
            format!(
                "not known: {} does not exist yet, so nothing could be read (the parquet sink \
                 creates it; the registrar waits for it)",
                path.display()
            ),
        );
    }
    report.outcome(&config.id, CHECK, read_segment_catalog(path));
}

fn read_segment_catalog(path: &Path) -> Result<String, Error> {
    // Streamed: a long log is counted without holding its records.
    let mut reader = SegmentLogReader::open(path)?;
    let (mut records, mut uploaded) = (0u64, 0u64);
    while let Some(record) = reader.next_record()? {
        records += 1;
        if matches!(record.entry, LogEntry::Uploaded { .. }) {
            uploaded += 1;
        }
    }
    Ok(format!(
        "{}: {records} records, {uploaded} uploaded",
        path.display()
    ))
}

/// What the table check found, when it did not fail.
enum TableVerdict {
    Ok(String),
    CannotTell(String),
}

async fn check_table(
    config: &RegistrarConfig,
    client: &RestClient,
    table: &TableName,
) -> Result<TableVerdict, Error> {
    let loaded = timed(&format!("loading table {table}"), client.load_table(table)).await?;
    if let Some(t) = loaded {
        let m = t.metadata();
        return Ok(TableVerdict::Ok(format!(
            "exists (format v{}, {} snapshot(s), schema {})",
            m.format_version() as u8,
            m.snapshots().count(),
            m.current_schema_id()
        )));
    }
    if !config.create_table {
        return Err(Error::new(
            ErrorCode::TableMissing,
            format!(
                "table {table} does not exist and create_table is false; create it, or set \
                 create_table: true on sink {}",
                config.id
            ),
        ));
    }
    let namespace = config.namespace.join(".");
    let exists = timed(
        &format!("checking namespace {namespace}"),
        client.namespace_exists(&config.namespace),
    )
    .await?;
    let shipper_location = config.url.table_location(&config.pipeline, &table.name);
    let refused_at_shipper_location = |status: u16, message: String| {
        Error::new(
            ErrorCode::CatalogRejected,
            format!(
                "table {table} is absent and the catalog refuses to create it at \
                 {shipper_location} ({status}: {message}); if the catalog only allows table \
                 locations it chooses (SeaweedFS keeps every table inside its table bucket, S3 \
                 Tables, Polaris outside its allowed locations), set table_location: catalog on \
                 sink {}",
                config.id
            ),
        )
    };
    if !exists {
        let detail = format!(
            "absent, and so is namespace {namespace}; create_table: true creates both from the \
             first segment's footer"
        );
        if config.table_location == TableLocation::Shipper {
            // Asked even so: some catalogs judge a location before they look for the namespace
            // (SeaweedFS's refuses one outside its table bucket with 400), and such a refusal is
            // certain. A catalog that looks for the namespace first answers 404: not known.
            let staged = timed(
                &format!("asking the catalog about a table at {shipper_location}"),
                client.stage_create(table, &probe_schema()?, Some(shipper_location.as_str())),
            )
            .await?;
            if let Staged::Refused { status, message } = staged {
                return Err(refused_at_shipper_location(status, message));
            }
        }
        return Ok(TableVerdict::CannotTell(match config.table_location {
            // A staged create needs the namespace too: whether the catalog lets the registrar
            // create the table is as unknown as where it would put it.
            TableLocation::Catalog => format!(
                "{detail}; whether the catalog will create the table (and where) cannot be \
                 asked before the namespace exists"
            ),
            TableLocation::Shipper => format!(
                "{detail}; whether the catalog accepts the table at {shipper_location} cannot be \
                 asked before the namespace exists (if it only allows locations it chooses, set \
                 table_location: catalog)"
            ),
        }));
    }
    let asked = match config.table_location {
        TableLocation::Shipper => Some(shipper_location.as_str()),
        TableLocation::Catalog => None,
    };
    let staged = timed(
        &format!("asking the catalog about a table at {shipper_location}"),
        client.stage_create(table, &probe_schema()?, asked),
    )
    .await?;
    let created = "create_table: true creates it from the first segment's footer";
    match (staged, config.table_location) {
        (Staged::Accepted { .. }, TableLocation::Shipper) => Ok(TableVerdict::Ok(format!(
            "absent; the catalog accepts a table at {shipper_location} (asked with a staged \
             create, nothing created); {created}"
        ))),
        (Staged::Accepted { location, .. }, TableLocation::Catalog) => Ok(TableVerdict::Ok(
            format!("absent; the catalog would create it at {location}; {created}"),
        )),
        (Staged::Refused { status, message }, TableLocation::Shipper) => {
            Err(refused_at_shipper_location(status, message))
        }
        (Staged::Refused { status, message }, TableLocation::Catalog) => Err(Error::new(
            ErrorCode::CatalogRejected,
            format!(
                "table {table} is absent and the catalog refuses to create it ({status}: \
                 {message}); check that the registrar may create tables in namespace {namespace}"
            ),
        )),
        (Staged::Unsupported { status, message }, _) => Ok(TableVerdict::CannotTell(format!(
            "absent; the catalog does not answer staged creates ({status}: {message}), so \
             whether it will accept the table cannot be told before the first segment; {created}"
        ))),
    }
}

/// The schema a staged create is asked with: any valid one will do, nothing is created.
fn probe_schema() -> Result<iceberg::spec::Schema, Error> {
    use iceberg::spec::{NestedField, PrimitiveType, Type};
    iceberg::spec::Schema::builder()
        .with_fields(vec![
            NestedField::optional(1, "thadam_probe", Type::Primitive(PrimitiveType::Long)).into(),
        ])
        .build()
        .map_err(|e| Error::internal(format!("cannot build the probe schema: {e}")).with_source(e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::segment_log::SegmentLogWriter;

    #[test]
    fn a_bucket_error_keeps_the_store_error_as_its_source() {
        use std::error::Error as _;
        let missing = object_store::Error::NotFound {
            path: "b/p".into(),
            source: "no such bucket".into(),
        };
        let err = bucket_error(missing, "b", "s3://b/p");
        assert_eq!(err.code(), ErrorCode::ObjectMissing, "{err}");
        let source = err.source().expect("the store error underneath");
        assert!(
            matches!(
                source.downcast_ref::<object_store::Error>(),
                Some(object_store::Error::NotFound { .. })
            ),
            "{source:?}"
        );
    }

    fn config(segments: &Path) -> RegistrarConfig {
        RegistrarConfig::builder()
            .pipeline("p1")
            .segments_dir(segments)
            .dataset("telemetry")
            .url("s3://bucket/prefix")
            .catalog_uri("http://127.0.0.1:8181")
            .namespace("ns")
            .build()
            .expect("valid")
    }

    #[test]
    fn the_printed_report_starts_with_the_build() {
        let mut report = CheckReport::default();
        report.push(None, "config parsed", Verdict::Ok, "thadam.yaml");
        let text = report.to_string();
        let mut lines = text.lines();
        assert_eq!(
            lines.next(),
            Some(
                format!(
                    "thadam-iceberg {} (commit {})",
                    crate::runtime::build_info::VERSION,
                    crate::runtime::build_info::COMMIT
                )
                .as_str()
            )
        );
        assert_eq!(lines.next(), Some("ok   config parsed: thadam.yaml"));
        assert_eq!(lines.next(), Some("all 1 checks passed"), "{text}");
    }

    #[test]
    fn a_segment_catalog_that_does_not_exist_yet_is_warn_not_ok() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = config(&dir.path().join("segments"));
        let mut report = CheckReport::default();
        check_segment_catalog(&config, &mut report);
        let line = &report.lines[0];
        assert_eq!(line.check, "segment catalog readable");
        assert_eq!(line.verdict, Verdict::CannotTell, "{report}");
        assert!(line.detail.starts_with("not known: "), "{report}");
        assert!(line.detail.contains("does not exist yet"), "{report}");
        assert!(line.to_string().starts_with("warn "), "{report}");
        assert!(report.passed(), "a warn is not a failure");

        // Once the parquet sink has created it, it is read: ok.
        let mut writer = SegmentLogWriter::open(&config.source.catalog).expect("writer");
        writer
            .append(crate::protocol::segment_log::LogEntry::Uploaded {
                dataset: "telemetry".into(),
                segment_id: "seg-1".into(),
                object_key: "telemetry/seg-1.parquet".into(),
                file_size: 100,
                row_count: 3,
                uploaded_at_ms: 1_700_000_000_000,
            })
            .expect("append");
        let mut report = CheckReport::default();
        check_segment_catalog(&config, &mut report);
        assert_eq!(report.lines[0].verdict, Verdict::Ok, "{report}");
        assert!(
            report.lines[0].detail.ends_with("1 records, 1 uploaded"),
            "{report}"
        );
    }
}
