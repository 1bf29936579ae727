//! The HTTP client every catalog request goes through: rustls with ring, trust roots from the
//! platform or from `catalog_ca_file`, and the optional client certificate for mutual TLS.
//!
//! One client serves the catalog reads, the commits, the schema commits and the token exchange,
//! so they all present the same certificate and trust the same CAs. S3 (footer reads and
//! iceberg's FileIO) has its own client, object_store's (`io::store`).
//!
//! The registrars of one process share a client when they trust the same roots and present the
//! same identity (the certificates' and the key's bytes, not their paths, so that a rotated
//! file gets a new client) and run on the same tokio runtime: a host embedding many registrars
//! (a fleet simulated in one process, many tables) paid, per registrar, the parsed roots
//! (~80 KB), a TLS session cache and a pool of idle connections, each with a read buffer grown
//! to the largest table it loaded (0.25 MB per node of a 300-node fleet in one process).
//! Requests are the same either way; tokens and signatures are added per request. Per
//! runtime, because a pooled connection is driven by a task of the runtime that opened it and
//! dies with it: a client kept past its runtime hands out dead connections ("dispatch task is
//! gone"; test harnesses build a runtime per test). Parsed roots carry no connection, and are
//! shared across runtimes.

use std::fs;
use std::io::BufReader;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::{Error, Result};
use crate::runtime::recent::Recent;

/// Installs ring as the process-wide rustls provider. Only ring is compiled in today (every
/// HTTP client, the catalog's and object_store's, is reqwest 0.12 with ring), but a dependency
/// that enabled aws-lc-rs as well would leave rustls unable to pick one by itself, and the
/// first TLS connection would panic; installing ring explicitly keeps that from ever
/// happening. Idempotent.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// What the catalog connection trusts and presents.
#[derive(Debug, Clone, Default)]
pub struct TlsSettings<'a> {
    pub ca_file: Option<&'a Path>,
    pub client_cert: Option<&'a Path>,
    pub client_key: Option<&'a Path>,
}

/// How many distinct sets of roots a process keeps parsed (a host's catalogs, and one rotation
/// of each one's CA file).
const SHARED_ROOTS: usize = 16;

/// The process's parsed roots, by the digest of their certificates' bytes.
static ROOTS: Recent<[u8; 32], Arc<RootCertStore>> = Recent::new(SHARED_ROOTS);

/// How many distinct catalog clients a process keeps for its registrars to share (a host's
/// catalogs, one rotation of each one's certificates, and a runtime or two).
const SHARED_CLIENTS: usize = 16;

/// What tells two shareable clients apart (see the module docs).
#[derive(Clone, Copy, PartialEq, Eq)]
struct ClientKey {
    runtime: tokio::runtime::Id,
    roots: [u8; 32],
    identity: Option<[u8; 32]>,
}

/// The process's catalog clients.
static CLIENTS: Recent<ClientKey, reqwest::Client> = Recent::new(SHARED_CLIENTS);

/// The catalog HTTP client for `tls`: the one this runtime's registrars built before for the
/// same roots and identity, or a new one, on roots this process parsed before when they are the
/// same (see the module docs). Outside a runtime nobody can tell which runtime will drive its
/// connections: such a client is the caller's alone. Errors are `config.invalid` naming the
/// file at fault.
pub fn catalog_http_client(tls: &TlsSettings<'_>) -> Result<reqwest::Client> {
    install_crypto_provider();
    let (roots_digest, roots) = shared_roots(tls)?;
    let identity = match (tls.client_cert, tls.client_key) {
        (Some(cert), Some(key)) => Some((cert, read_certs(cert)?, read_key(key)?)),
        _ => None,
    };
    let Ok(runtime) = tokio::runtime::Handle::try_current().map(|h| h.id()) else {
        return build_client(roots, identity);
    };
    let key = ClientKey {
        runtime,
        roots: roots_digest,
        identity: identity.as_ref().map(|(_, certs, key)| {
            digest_of(certs.iter().map(|c| c.as_ref()).chain([key.secret_der()]))
        }),
    };
    CLIENTS.get_or_make(
        |k| *k == key,
        move || Ok((key, build_client(roots, identity)?)),
    )
}

/// A client for `roots`, presenting `identity` (its certificate file, certificates and key).
fn build_client(
    roots: Arc<RootCertStore>,
    identity: Option<(&Path, Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
) -> Result<reqwest::Client> {
    let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
    let config = match identity {
        Some((cert, certs, key)) => builder.with_client_auth_cert(certs, key).map_err(|e| {
            Error::config_invalid(format!(
                "catalog_client_cert {} and catalog_client_key do not form a usable identity: {e}; \
                     check that the key belongs to the certificate",
                cert.display()
            ))
            .with_source(e)
        })?,
        _ => builder.with_no_client_auth(),
    };
    reqwest::Client::builder()
        .use_preconfigured_tls(config)
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(60))
        .pool_idle_timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| {
            Error::internal(format!("cannot build the catalog HTTP client: {e}")).with_source(e)
        })
}

/// The roots `tls` trusts, parsed once per process for the same certificates, and their digest.
fn shared_roots(tls: &TlsSettings<'_>) -> Result<([u8; 32], Arc<RootCertStore>)> {
    let certs = match tls.ca_file {
        Some(path) => read_certs(path)?,
        None => platform_certs(),
    };
    let digest = digest_of(certs.iter().map(|c| c.as_ref()));
    let roots = ROOTS.get_or_make(
        |d| *d == digest,
        || {
            let roots = match tls.ca_file {
                Some(path) => roots_from(path, certs)?,
                None => platform_roots(certs),
            };
            Ok((digest, Arc::new(roots)))
        },
    )?;
    Ok((digest, roots))
}

/// What tells two sets of certificates (and keys) apart: their bytes, each part length-prefixed.
/// Only the digest is kept; a key's bytes stay in the TLS config.
fn digest_of<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part);
    }
    hash.finalize().into()
}

/// The platform's CA certificates, unparsed.
fn platform_certs() -> Vec<CertificateDer<'static>> {
    let found = rustls_native_certs::load_native_certs();
    for err in &found.errors {
        tracing::warn!("skipping an unreadable platform CA certificate: {err}");
    }
    found.certs
}

fn platform_roots(certs: Vec<CertificateDer<'static>>) -> RootCertStore {
    let mut roots = RootCertStore::empty();
    let (added, ignored) = roots.add_parsable_certificates(certs);
    tracing::debug!(
        added,
        ignored,
        "loaded platform trust roots for the catalog"
    );
    roots
}

/// The roots of `catalog_ca_file` (`path`), read as `certs`.
fn roots_from(path: &Path, certs: Vec<CertificateDer<'static>>) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(Error::config_invalid(format!(
            "catalog_ca_file {} holds no usable CA certificate; point it at a PEM bundle of the \
             CA that signed the catalog's certificate",
            path.display()
        )));
    }
    Ok(roots)
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let file = fs::File::open(path).map_err(|e| {
        Error::config_invalid(format!(
            "cannot read certificate file {}: {e}",
            path.display()
        ))
        .with_source(e)
    })?;
    let certs: Vec<_> = rustls_pemfile::certs(&mut BufReader::new(file))
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| {
            Error::config_invalid(format!(
                "{} is not a PEM certificate file: {e}",
                path.display()
            ))
            .with_source(e)
        })?;
    if certs.is_empty() {
        return Err(Error::config_invalid(format!(
            "{} holds no PEM certificate",
            path.display()
        )));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    // The key's bytes never reach a message: only the path does.
    let file = fs::File::open(path).map_err(|e| {
        Error::config_invalid(format!(
            "cannot read catalog_client_key {}: {e}",
            path.display()
        ))
        .with_source(e)
    })?;
    rustls_pemfile::private_key(&mut BufReader::new(file))
        .map_err(|_| {
            Error::config_invalid(format!(
                "catalog_client_key {} is not a PEM private key",
                path.display()
            ))
        })?
        .ok_or_else(|| {
            Error::config_invalid(format!(
                "catalog_client_key {} holds no PEM private key",
                path.display()
            ))
        })
}

/// The TLS cause behind a failed request, if there was one, as a short human phrase
/// ("invalid peer certificate: UnknownIssuer"). Used to turn handshake failures into fatal,
/// explained errors instead of endless retries.
pub(crate) fn tls_cause(err: &(dyn std::error::Error + 'static)) -> Option<TlsFailure> {
    // By type only: a connection dropped mid-handshake (a restarting server) carries no rustls
    // error and must stay transient.
    find_rustls_error(err).map(TlsFailure::from_rustls)
}

/// The rustls error somewhere in `err`'s chain. tokio-rustls and hyper hand rustls errors on
/// inside (nested) `io::Error`s, whose `source()` skips the wrapped error itself, so those are
/// opened explicitly.
fn find_rustls_error<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(inner) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            && let Some(tls) = find_rustls_error(inner)
        {
            return Some(tls);
        }
        cur = e.source();
    }
    None
}

/// Why a TLS handshake with the catalog failed, split by who has to act.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TlsFailure {
    /// We do not trust the server's certificate: a configuration problem on our side.
    ServerNotTrusted(String),
    /// The server refused our client certificate (or the lack of one).
    ClientRejected(String),
    Other(String),
}

impl TlsFailure {
    fn from_rustls(err: &rustls::Error) -> TlsFailure {
        use rustls::AlertDescription as A;
        match err {
            // rustls's own wording names the cause: "invalid peer certificate: UnknownIssuer",
            // "...: certificate expired: ...", "...: certificate not valid for name ...".
            rustls::Error::InvalidCertificate(_) => TlsFailure::ServerNotTrusted(err.to_string()),
            rustls::Error::AlertReceived(
                alert @ (A::BadCertificate
                | A::CertificateRequired
                | A::UnknownCA
                | A::CertificateUnknown
                | A::AccessDenied
                | A::HandshakeFailure
                | A::CertificateRevoked
                | A::CertificateExpired),
            ) => TlsFailure::ClientRejected(format!("the catalog sent TLS alert {alert:?}")),
            other => TlsFailure::Other(other.to_string()),
        }
    }
}

/// The whole `source()` chain of an error as one line, for messages (never holds secrets:
/// reqwest errors carry URLs without credentials, and we put none in URLs).
pub(crate) fn error_chain_text(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![err.to_string()];
    let mut cur = err.source();
    while let Some(e) = cur {
        let s = e.to_string();
        if !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
        cur = e.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    /// How many of the process's parsed roots are those of `digest`.
    fn shared_with(digest: [u8; 32]) -> usize {
        ROOTS.count(|d| *d == digest)
    }

    /// The digest of the roots in `ca_file`.
    fn roots_digest(ca_file: &Path) -> [u8; 32] {
        digest_of(
            read_certs(ca_file)
                .expect("read")
                .iter()
                .map(|c| c.as_ref()),
        )
    }

    #[test]
    fn registrars_trusting_the_same_roots_share_them_and_a_rotated_file_is_parsed_anew() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca_file = dir.path().join("ca.pem");
        let write_ca = || {
            let ca = rcgen::generate_simple_self_signed(vec!["ca.test".to_string()])
                .expect("a certificate");
            std::fs::write(&ca_file, ca.cert.pem()).expect("written");
            roots_digest(&ca_file)
        };
        let settings = TlsSettings {
            ca_file: Some(&ca_file),
            ..TlsSettings::default()
        };
        let first = write_ca();
        catalog_http_client(&settings).expect("built");
        catalog_http_client(&settings).expect("shared");
        assert_eq!(shared_with(first), 1);
        // The file rotated: the next registrar trusts what it holds now.
        let rotated = write_ca();
        assert_ne!(rotated, first);
        catalog_http_client(&settings).expect("built");
        assert_eq!(shared_with(rotated), 1);
        assert_eq!(shared_with(first), 1);
    }

    /// How many of the process's catalog clients trust the roots of `digest`.
    fn clients_for(digest: [u8; 32]) -> usize {
        CLIENTS.count(|k| k.roots == digest)
    }

    #[test]
    fn registrars_of_one_runtime_share_a_client_and_another_runtime_builds_its_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca_file = dir.path().join("ca.pem");
        let ca =
            rcgen::generate_simple_self_signed(vec!["ca.test".to_string()]).expect("a certificate");
        std::fs::write(&ca_file, ca.cert.pem()).expect("written");
        let digest = roots_digest(&ca_file);
        let settings = TlsSettings {
            ca_file: Some(&ca_file),
            ..TlsSettings::default()
        };
        let runtime = || {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("runtime")
        };
        let first = runtime();
        first.block_on(async {
            catalog_http_client(&settings).expect("built");
            catalog_http_client(&settings).expect("shared");
        });
        assert_eq!(
            clients_for(digest),
            1,
            "one client for the runtime's registrars"
        );
        drop(first);
        // Its connections died with it: the next runtime builds its own.
        runtime().block_on(async { catalog_http_client(&settings).expect("built") });
        assert_eq!(clients_for(digest), 2);
        // Outside a runtime: the caller's alone, not kept.
        catalog_http_client(&settings).expect("built");
        assert_eq!(clients_for(digest), 2);
    }

    #[test]
    fn an_unreadable_certificate_file_keeps_the_io_error_as_its_source() {
        use std::error::Error as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let err = read_certs(&dir.path().join("missing.pem")).expect_err("no such file");
        assert_eq!(err.code(), crate::error::ErrorCode::ConfigInvalid, "{err}");
        let source = err.source().expect("the io error underneath");
        let io = source.downcast_ref::<io::Error>().expect("an io::Error");
        assert_eq!(io.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn finds_rustls_errors_inside_nested_io_errors() {
        // What reqwest's connector hands over: io::Error(Other, io::Error(InvalidData, rustls)).
        let untrusted = io::Error::other(io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        ));
        assert!(
            matches!(tls_cause(&untrusted), Some(TlsFailure::ServerNotTrusted(c)) if c.contains("UnknownIssuer"))
        );
        let refused = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::AlertReceived(rustls::AlertDescription::CertificateRequired),
        );
        assert!(matches!(
            tls_cause(&refused),
            Some(TlsFailure::ClientRejected(_))
        ));
        let dropped = io::Error::new(
            io::ErrorKind::ConnectionReset,
            "connection reset during handshake",
        );
        assert_eq!(
            tls_cause(&dropped),
            None,
            "a dropped connection stays transient"
        );
    }
}
