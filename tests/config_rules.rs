//! The config loader's rules, one test per rule of the registrar's configuration, plus a full
//! valid config, `${file:}`/`${env:}` resolution, secret hygiene and the cleartext warning.
//!
//! Every failing case asserts the `config.invalid` code and that the message names the offending
//! key. Configs are built from one valid base by editing its YAML tree (`set`/`remove`), so each
//! test shows exactly what it breaks.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use serde_yaml_ng::Value;
use tempfile::TempDir;
use thadam_iceberg::config::{
    CatalogAuth, Config, DatasetConfig, RegistrarConfig, RetryPolicy, Secret, UnsignedPolicy,
};
use thadam_iceberg::{Error, ErrorCode};

/// A real self-signed P-256 certificate (CN=test, 10 years), made with
/// `openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 -subj /CN=test`.
const CERT_PEM: &str = "-----BEGIN CERTIFICATE-----
MIIBczCCARmgAwIBAgIUC/kafVh9kFKYTi/+HoY9S6WzT9cwCgYIKoZIzj0EAwIw
DzENMAsGA1UEAwwEdGVzdDAeFw0yNjExMzAwNjQ0MDVaFw0zNjExMjcwNjQ0MDVa
MA8xDTALBgNVBAMMBHRlc3QwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAAQTBCjt
ozISAfKWMOnzXv7PvelSZAciz06GLImrruLXf4MEUvXOGC+SGQ1Gcp8Oe0bH77tR
8HOGhRtbWAiF/O0No1MwUTAdBgNVHQ4EFgQU/ljErGYQmG2y2mxv9PAPTRFhKqgw
HwYDVR0jBBgwFoAU/ljErGYQmG2y2mxv9PAPTRFhKqgwDwYDVR0TAQH/BAUwAwEB
/zAKBggqhkjOPQQDAgNIADBFAiEA0VQeOq5FB8bAFw4Yayc9ImFJnnd8chDnnPyt
WN0O/zYCIDOXYDryHBCbwM8H53KEZ/23KuVO34LpjXWcXdWhEvoH
-----END CERTIFICATE-----
";

/// The certificate's PKCS#8 EC private key (a throwaway test key).
const KEY_PEM: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgDw/jQaf5iIxSo0Ao
LOqcP8XjvjtTlymZUNEZMXQt63ChRANCAAQTBCjtozISAfKWMOnzXv7PvelSZAci
z06GLImrruLXf4MEUvXOGC+SGQ1Gcp8Oe0bH77tR8HOGhRtbWAiF/O0N
-----END PRIVATE KEY-----
";

// Distinctive secret values: no message or Debug output may ever contain them.
const TOKEN: &str = "tok-SECRET-a1b2c3";
const CLIENT_SECRET: &str = "cs-SECRET-d4e5f6";
const ACCESS_KEY: &str = "AKIA-SECRET-g7h8";
const SECRET_KEY: &str = "sk-SECRET-i9j0k1";
const SECRETS: [&str; 4] = [TOKEN, CLIENT_SECRET, ACCESS_KEY, SECRET_KEY];

// Environment variables the tests read. Set once, before any test resolves `${env:}`: every test
// starts with `Fixture::new()`, which waits on the `Once`, so no test reads the environment while
// it is being written.
const ENV_ACCESS_KEY: &str = "THADAM_CFG_TEST_ACCESS_KEY";
const ENV_PIPELINE: &str = "THADAM_CFG_TEST_PIPELINE";
const ENV_FLAG_SECRET: &str = "THADAM_CFG_TEST_FLAG_SECRET";
const ENV_UNSET: &str = "THADAM_CFG_TEST_DEFINITELY_UNSET";
static ENV: Once = Once::new();

fn set_env() {
    ENV.call_once(|| {
        // SAFETY: runs once, before any test thread reads these variables (see above).
        unsafe {
            std::env::set_var(ENV_ACCESS_KEY, ACCESS_KEY);
            std::env::set_var(ENV_PIPELINE, "edge-capture");
            std::env::set_var(ENV_FLAG_SECRET, TOKEN);
            std::env::remove_var(ENV_UNSET);
        }
    });
}

/// A config directory with the PEM files and secret files the base config refers to.
struct Fixture {
    dir: TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        set_env();
        let fx = Fixture {
            dir: tempfile::tempdir().expect("tempdir"),
        };
        fx.write("tls/ca.pem", CERT_PEM);
        fx.write("tls/client.pem", CERT_PEM);
        fx.write("tls/client-key.pem", KEY_PEM);
        // Trailing newline, as `echo` writes it: trimmed on load.
        fx.write("secrets/catalog_token", &format!("{TOKEN}\n"));
        fx.write("secrets/client_secret", &format!("{CLIENT_SECRET}\r\n"));
        fx.write("secrets/key_secret", SECRET_KEY);
        fx
    }

    fn base(&self) -> &Path {
        self.dir.path()
    }

    fn write(&self, rel: &str, content: &str) -> PathBuf {
        let path = self.dir.path().join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, content).expect("write fixture");
        path
    }

    fn load(&self, doc: &Value) -> Result<Config, Error> {
        let yaml = serde_yaml_ng::to_string(doc).expect("serialize");
        Config::from_yaml_str(&yaml, self.base())
    }

    fn load_ok(&self, doc: &Value) -> RegistrarConfig {
        match self.load(doc) {
            Ok(mut config) => {
                assert_eq!(config.registrars.len(), 1);
                config.registrars.remove(0)
            }
            Err(e) => panic!("expected a valid config, got {e}"),
        }
    }

    /// Loads `doc`, expects `config.invalid`, and checks the message names every `needles` entry
    /// and no secret.
    fn fails(&self, doc: &Value, needles: &[&str]) -> String {
        let err = match self.load(doc) {
            Ok(config) => panic!("expected config.invalid, got {config:?}"),
            Err(e) => e,
        };
        assert_eq!(err.code(), ErrorCode::ConfigInvalid, "{err}");
        let msg = err.to_string();
        assert!(msg.starts_with("config.invalid: "), "{msg}");
        for needle in needles {
            assert!(
                msg.contains(needle),
                "message should name `{needle}`: {msg}"
            );
        }
        assert_no_secret(&msg);
        msg
    }
}

fn assert_no_secret(text: &str) {
    for secret in SECRETS {
        assert!(!text.contains(secret), "secret leaked: {text}");
    }
}

/// The valid base: a parquet sink, its shipper, and a registrar with every option set (token
/// auth, CA, client certificate, store keys, retry).
const BASE: &str = r#"
pipelines: { ignored: true }        # other top-level keys are not the registrar's
sinks:
  - id: local
    kind: parquet
    config:
      dir: segments
      unsigned: signed
      datasets: [telemetry, {name: events, unsigned: native}]
      rotate: 5m                    # a thadam key the registrar ignores
  - id: s3
    kind: object_store
    config:
      from: local
      pipeline: edge-capture
      url: s3://warehouse/lake/
      store: { region: eu-west-1 }
  - id: stdout
    kind: console
    config: {}
  - id: iceberg
    kind: iceberg
    config:
      from: local
      pipeline: "${env:THADAM_CFG_TEST_PIPELINE}"
      catalog_uri: https://iceberg-rest:8181
      catalog_ca_file: tls/ca.pem
      catalog_token: "${file:secrets/catalog_token}"
      catalog_client_cert: tls/client.pem
      catalog_client_key: tls/client-key.pem
      url: s3://warehouse/lake
      namespace: robotics.edge
      create_table: true
      store:
        endpoint: http://127.0.0.1:9000
        region: us-west-2
        allow_http: true
        access_key_id: "${env:THADAM_CFG_TEST_ACCESS_KEY}"
        secret_access_key: "${file:secrets/key_secret}"
      retry: { initial: 500ms, max: 2m, jitter: false }
"#;

fn base() -> Value {
    serde_yaml_ng::from_str(BASE).expect("base parses")
}

/// The base with only the required keys on the registrar.
fn minimal() -> Value {
    let mut doc = base();
    set(
        &mut doc,
        "sinks/3/config",
        "{from: local, pipeline: edge-capture, catalog_uri: 'http://localhost:8181', \
         url: 's3://warehouse/lake', namespace: robotics}",
    );
    set(
        &mut doc,
        "sinks/0/config",
        "{dir: segments, datasets: [telemetry]}",
    );
    doc
}

/// Walks a `/`-separated path (numbers index lists) to the value's parent and the last segment.
fn walk<'a>(doc: &'a mut Value, path: &str) -> (&'a mut Value, String) {
    let mut parts: Vec<&str> = path.split('/').collect();
    let last = parts.pop().expect("non-empty path").to_owned();
    let mut node = doc;
    for part in parts {
        node = match part.parse::<usize>() {
            Ok(i) => node.get_mut(i),
            Err(_) => node.get_mut(part),
        }
        .unwrap_or_else(|| panic!("no `{part}` in path {path}"));
    }
    (node, last)
}

/// Sets the value at `path` to `yaml` (parsed), creating the last key if needed.
fn set(doc: &mut Value, path: &str, yaml: &str) {
    let value: Value = serde_yaml_ng::from_str(yaml).expect("value parses");
    let (parent, last) = walk(doc, path);
    match parent {
        Value::Sequence(items) => items[last.parse::<usize>().expect("index")] = value,
        Value::Mapping(map) => {
            map.insert(Value::String(last), value);
        }
        other => panic!("cannot set {path} in {other:?}"),
    }
}

fn remove(doc: &mut Value, path: &str) {
    let (parent, last) = walk(doc, path);
    match parent {
        Value::Sequence(items) => {
            items.remove(last.parse::<usize>().expect("index"));
        }
        Value::Mapping(map) => {
            map.remove(last.as_str())
                .unwrap_or_else(|| panic!("no {path}"));
        }
        other => panic!("cannot remove {path} from {other:?}"),
    }
}

fn edited(edits: impl FnOnce(&mut Value)) -> Value {
    let mut doc = base();
    edits(&mut doc);
    doc
}

const REG: &str = "sinks/3/config";

fn reg(key: &str) -> String {
    format!("{REG}/{key}")
}

// ---------------------------------------------------------------------------------------------
// A full valid config.

#[test]
fn full_config_parses_into_typed_values() {
    let fx = Fixture::new();
    let r = fx.load_ok(&base());
    let base = fx.base();
    assert_eq!(r.id, "iceberg");
    assert_eq!(r.from, "local");
    assert_eq!(r.pipeline, "edge-capture");
    assert_eq!(
        r.catalog_uri.expose().as_str(),
        "https://iceberg-rest:8181/"
    );
    assert_eq!(r.catalog_ca_file, Some(base.join("tls/ca.pem")));
    assert_eq!(r.catalog_auth, CatalogAuth::Token(Secret::new(TOKEN)));
    let identity = r.catalog_client_identity.expect("client identity");
    assert_eq!(identity.cert, base.join("tls/client.pem"));
    assert_eq!(identity.key, base.join("tls/client-key.pem"));
    assert_eq!(
        (r.url.bucket.as_str(), r.url.prefix.as_str()),
        ("warehouse", "lake")
    );
    assert_eq!(r.url.uri(), "s3://warehouse/lake");
    assert_eq!(
        r.url.table_location(&r.pipeline, "telemetry"),
        "s3://warehouse/lake/thadam/v1/edge-capture/telemetry"
    );
    assert_eq!(r.namespace, vec!["robotics", "edge"]);
    assert!(r.create_table);
    assert_eq!(
        r.store.endpoint.as_ref().map(|u| u.as_str()),
        Some("http://127.0.0.1:9000/")
    );
    assert_eq!(r.store.region, "us-west-2");
    assert!(r.store.region_explicit);
    assert!(r.store.allow_http);
    assert_eq!(
        r.store.access_key_id.as_ref().map(Secret::expose),
        Some(ACCESS_KEY)
    );
    assert_eq!(
        r.store.secret_access_key.as_ref().map(Secret::expose),
        Some(SECRET_KEY)
    );
    assert_eq!(
        r.retry,
        RetryPolicy {
            initial: Duration::from_millis(500),
            max: Duration::from_secs(120),
            jitter: false
        }
    );
    assert_eq!(r.source.id, "local");
    assert_eq!(r.source.dir, base.join("segments"));
    assert_eq!(r.source.catalog, base.join("segments/segment-catalog.log"));
    assert_eq!(
        r.source.datasets,
        vec![
            DatasetConfig {
                name: "telemetry".into(),
                unsigned: UnsignedPolicy::Signed
            },
            DatasetConfig {
                name: "events".into(),
                unsigned: UnsignedPolicy::Native
            },
        ]
    );
}

#[test]
fn minimal_config_gets_the_defaults() {
    let fx = Fixture::new();
    let r = fx.load_ok(&minimal());
    assert_eq!(r.catalog_ca_file, None);
    assert_eq!(r.catalog_auth, CatalogAuth::None);
    assert!(r.catalog_client_identity.is_none());
    assert_eq!(r.namespace, vec!["robotics"]);
    assert!(!r.create_table);
    assert_eq!(r.store.endpoint, None);
    assert_eq!(r.store.region, "us-east-1");
    // Not set: a region the catalog sends for a table (or vends with credentials) applies.
    assert!(!r.store.region_explicit);
    assert!(!r.store.allow_http);
    assert!(r.store.access_key_id.is_none() && r.store.secret_access_key.is_none());
    assert_eq!(r.retry, RetryPolicy::default());
    assert_eq!(
        (r.retry.initial, r.retry.max, r.retry.jitter),
        (Duration::from_secs(1), Duration::from_secs(60), true)
    );
    assert_eq!(
        r.source.datasets,
        vec![DatasetConfig {
            name: "telemetry".into(),
            unsigned: UnsignedPolicy::Native
        }]
    );
}

#[test]
fn load_resolves_paths_against_the_config_files_directory() {
    let fx = Fixture::new();
    let path = fx.write("thadam.yaml", BASE);
    let config = Config::load(&path).expect("loads");
    let r = &config.registrars[0];
    assert_eq!(r.source.dir, fx.base().join("segments"));
    assert_eq!(r.catalog_ca_file, Some(fx.base().join("tls/ca.pem")));
    assert_eq!(r.catalog_auth, CatalogAuth::Token(Secret::new(TOKEN)));
}

#[test]
fn registrars_come_in_file_order_and_absolute_paths_stay() {
    let fx = Fixture::new();
    let mut doc = minimal();
    let second: Value = serde_yaml_ng::from_str(
        "{id: iceberg2, kind: iceberg, config: {from: local, pipeline: edge-capture, \
         catalog_uri: 'https://c', url: 's3://warehouse/lake', namespace: other}}",
    )
    .expect("yaml");
    let Value::Sequence(sinks) = doc.get_mut("sinks").expect("sinks") else {
        panic!()
    };
    sinks.push(second);
    set(&mut doc, "sinks/0/config/dir", "/abs/segments");
    set(&mut doc, "sinks/0/config/catalog", "cat/segment.log");
    let config = fx.load(&doc).expect("valid");
    let ids: Vec<_> = config.registrars.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["iceberg", "iceberg2"]);
    assert_eq!(
        config.registrars[0].source.dir,
        PathBuf::from("/abs/segments")
    );
    assert_eq!(
        config.registrars[0].source.catalog,
        fx.base().join("cat/segment.log")
    );
    // A file with no iceberg sink has no registrars (the caller decides whether that is fatal).
    let doc: Value = serde_yaml_ng::from_str("sinks: []").expect("yaml");
    assert!(fx.load(&doc).expect("valid").registrars.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Rule 1: the sinks list.

#[test]
fn rule01_sinks_must_be_a_well_formed_list() {
    let fx = Fixture::new();
    fx.fails(
        &serde_yaml_ng::from_str("sinks: {a: 1}").expect("yaml"),
        &["sinks", "must be a list"],
    );
    fx.fails(
        &serde_yaml_ng::from_str("other: 1").expect("yaml"),
        &["sinks"],
    );
    fx.fails(
        &edited(|d| remove(d, "sinks/1/id")),
        &["sinks[1].id", "required"],
    );
    fx.fails(
        &edited(|d| set(d, "sinks/1/id", "local")),
        &["sinks[1]", "id \"local\"", "unique"],
    );
    fx.fails(
        &edited(|d| remove(d, "sinks/2/kind")),
        &["sink \"stdout\"", "kind", "required"],
    );
    // Other kinds are ignored, but still need a config.
    fx.fails(
        &edited(|d| remove(d, "sinks/2/config")),
        &["sink \"stdout\"", "config", "required"],
    );
    fx.fails(
        &edited(|d| set(d, "sinks/1", "just-a-string")),
        &["sinks[1]", "mapping"],
    );
}

// Rule 2: exactly the spec's keys on the iceberg kind; leniency elsewhere.

#[test]
fn rule02_unknown_keys_are_refused_on_the_iceberg_kind() {
    let fx = Fixture::new();
    fx.fails(
        &edited(|d| set(d, &reg("catalog_tokn"), "x")),
        &["sink \"iceberg\"", "catalog_tokn"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("store/endpont"), "x")),
        &["config.store", "endpont"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("retry/maximum"), "1s")),
        &["config.retry", "maximum"],
    );
    let mut doc = base();
    remove(&mut doc, &reg("catalog_token"));
    set(
        &mut doc,
        &reg("catalog_credential"),
        "{client_id: a, client_secret: b, scopes: x}",
    );
    fx.fails(&doc, &["config.catalog_credential", "scopes"]);
    // Unknown keys on parquet and object_store sinks are thadam's and are allowed.
    let mut doc = base();
    set(&mut doc, "sinks/0/config/compression", "zstd");
    set(&mut doc, "sinks/1/config/extra", "{nested: true}");
    fx.load_ok(&doc);
}

// Rule 3: from names a parquet sink.

#[test]
fn rule03_from_must_name_a_parquet_sink() {
    let fx = Fixture::new();
    fx.fails(
        &edited(|d| remove(d, &reg("from"))),
        &["config.from", "required"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("from"), "s3")),
        &["config.from", "object_store", "not parquet"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("from"), "nope")),
        &["config.from", "\"nope\"", "\"local\""],
    );
}

// Rule 4: pipeline and url agree with the shipper.

#[test]
fn rule04_pipeline_and_url_must_match_the_shipper() {
    let fx = Fixture::new();
    fx.fails(
        &edited(|d| remove(d, &reg("pipeline"))),
        &["config.pipeline", "required"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("pipeline"), "other")),
        &["config.pipeline", "\"s3\"", "edge-capture"],
    );
    fx.fails(
        &edited(|d| set(d, "sinks/1/config/from", "elsewhere")),
        &["config.from", "no object_store sink ships", "local"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("url"), "s3://warehouse/other")),
        &[
            "config.url",
            "s3://warehouse/lake",
            "where the shipper puts the files",
        ],
    );
    // Trailing slashes are normalised (the base shipper has one, the registrar none).
    let r = fx.load_ok(&edited(|d| set(d, &reg("url"), "s3://warehouse/lake//")));
    assert_eq!(r.url.uri(), "s3://warehouse/lake");
}

// Rule 5: catalog_uri.

#[test]
fn rule05_catalog_uri_must_be_absolute_http_or_https() {
    let fx = Fixture::new();
    fx.fails(
        &edited(|d| remove(d, &reg("catalog_uri"))),
        &["config.catalog_uri", "required"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("catalog_uri"), "ftp://x")),
        &["config.catalog_uri", "http"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("catalog_uri"), "/v1/catalog")),
        &["config.catalog_uri", "absolute"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("catalog_uri"), "https://user:pw-SECRET@c")),
        &["config.catalog_uri"],
    );
    let msg = fx.fails(
        &edited(|d| set(d, &reg("catalog_uri"), "https://user:pw-SECRET@c")),
        &[],
    );
    assert!(!msg.contains("pw-SECRET"), "{msg}");
}

// Rule 6: catalog_ca_file.

#[test]
fn rule06_ca_file_needs_https_and_a_certificate() {
    let fx = Fixture::new();
    let mut doc = minimal();
    set(&mut doc, &reg("catalog_ca_file"), "tls/ca.pem");
    fx.fails(&doc, &["config.catalog_ca_file", "https://"]);
    fx.fails(
        &edited(|d| set(d, &reg("catalog_ca_file"), "tls/none.pem")),
        &["catalog_ca_file", "none.pem"],
    );
    fx.write("tls/empty.pem", "no certificates here\n");
    fx.fails(
        &edited(|d| set(d, &reg("catalog_ca_file"), "tls/empty.pem")),
        &["catalog_ca_file", "empty.pem", "no PEM certificate"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("catalog_ca_file"), "tls/client-key.pem")),
        &["catalog_ca_file", "no PEM certificate"],
    );
}

// Rule 7: one auth option; no empty token.

#[test]
fn rule07_token_and_credential_are_exclusive_and_token_not_empty() {
    let fx = Fixture::new();
    fx.fails(
        &edited(|d| {
            set(
                d,
                &reg("catalog_credential"),
                "{client_id: a, client_secret: b}",
            )
        }),
        &["config.catalog_token", "catalog_credential", "not both"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("catalog_token"), "''")),
        &["config.catalog_token", "empty"],
    );
    fx.write("secrets/blank", "\n");
    fx.fails(
        &edited(|d| set(d, &reg("catalog_token"), "'${file:secrets/blank}'")),
        &["config.catalog_token", "empty"],
    );
    // A second line in the token file would break the Authorization header.
    fx.write("secrets/two_lines", &format!("{TOKEN}\nmore\n"));
    fx.fails(
        &edited(|d| set(d, &reg("catalog_token"), "'${file:secrets/two_lines}'")),
        &["config.catalog_token", "line break"],
    );
}

// Rule 8: catalog_credential.

#[test]
fn rule08_catalog_credential_fields() {
    let fx = Fixture::new();
    let with_credential = |cred: &str| {
        edited(|d| {
            remove(d, &reg("catalog_token"));
            set(d, &reg("catalog_credential"), cred);
        })
    };
    let r = fx.load_ok(&with_credential(
        "{client_id: thadam, client_secret: '${file:secrets/client_secret}'}",
    ));
    let CatalogAuth::Credential(c) = r.catalog_auth else {
        panic!("credential expected")
    };
    assert_eq!(c.client_id, "thadam");
    assert_eq!(c.client_secret.expose(), CLIENT_SECRET);
    assert_eq!(c.scope, "catalog");
    assert_eq!(
        c.oauth2_server_uri.expose().as_str(),
        "https://iceberg-rest:8181/v1/oauth/tokens"
    );

    let r = fx.load_ok(&with_credential(
        "{client_id: thadam, client_secret: s, scope: 'PRINCIPAL_ROLE:ALL', oauth2_server_uri: 'https://auth.example/token'}",
    ));
    let CatalogAuth::Credential(c) = r.catalog_auth else {
        panic!("credential expected")
    };
    assert_eq!(c.scope, "PRINCIPAL_ROLE:ALL");
    assert_eq!(
        c.oauth2_server_uri.expose().as_str(),
        "https://auth.example/token"
    );

    // The default endpoint keeps a catalog path prefix and drops its trailing slash.
    let mut doc = with_credential("{client_id: thadam, client_secret: s}");
    set(&mut doc, &reg("catalog_uri"), "https://host/catalog/");
    let CatalogAuth::Credential(c) = fx.load_ok(&doc).catalog_auth else {
        panic!()
    };
    assert_eq!(
        c.oauth2_server_uri.expose().as_str(),
        "https://host/catalog/v1/oauth/tokens"
    );

    fx.fails(
        &with_credential("{client_secret: s}"),
        &["catalog_credential.client_id", "required"],
    );
    fx.fails(
        &with_credential("{client_id: '', client_secret: s}"),
        &["catalog_credential.client_id", "empty"],
    );
    fx.fails(
        &with_credential("{client_id: 'a:b', client_secret: s}"),
        &["catalog_credential.client_id", "`:`"],
    );
    fx.fails(
        &with_credential("{client_id: a}"),
        &["catalog_credential.client_secret", "required"],
    );
    fx.fails(
        &with_credential("{client_id: a, client_secret: ''}"),
        &["catalog_credential.client_secret", "empty"],
    );
    fx.fails(
        &with_credential("{client_id: a, client_secret: s, oauth2_server_uri: 'ftp://auth'}"),
        &["catalog_credential.oauth2_server_uri", "http"],
    );
}

// Rule 9: mutual TLS files.

#[test]
fn rule09_client_certificate_and_key() {
    let fx = Fixture::new();
    fx.fails(
        &edited(|d| remove(d, &reg("catalog_client_key"))),
        &["config.catalog_client_key", "both"],
    );
    fx.fails(
        &edited(|d| remove(d, &reg("catalog_client_cert"))),
        &["config.catalog_client_cert", "both"],
    );
    let mut doc = minimal();
    set(&mut doc, &reg("catalog_client_cert"), "tls/client.pem");
    set(&mut doc, &reg("catalog_client_key"), "tls/client-key.pem");
    fx.fails(&doc, &["config.catalog_client_cert", "https://"]);
    fx.fails(
        &edited(|d| set(d, &reg("catalog_client_cert"), "tls/missing.pem")),
        &["catalog_client_cert", "missing.pem", "does not exist"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("catalog_client_key"), "tls/missing-key.pem")),
        &["catalog_client_key", "missing-key.pem"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("catalog_client_cert"), "tls/client-key.pem")),
        &["catalog_client_cert", "no PEM certificate"],
    );
    let msg = fx.fails(
        &edited(|d| set(d, &reg("catalog_client_key"), "tls/client.pem")),
        &["catalog_client_key", "no PEM private key"],
    );
    assert!(!msg.contains("MII"), "{msg}");
    // A broken key file: the message never quotes it.
    fx.write(
        "tls/broken-key.pem",
        "-----BEGIN PRIVATE KEY-----\nKEYMATERIAL-SECRET\n",
    );
    let msg = fx.fails(
        &edited(|d| set(d, &reg("catalog_client_key"), "tls/broken-key.pem")),
        &["catalog_client_key", "broken-key.pem"],
    );
    assert!(!msg.contains("KEYMATERIAL"), "{msg}");
}

// Rule 10: url.

#[test]
fn rule10_url_is_s3_with_a_bucket() {
    let fx = Fixture::new();
    fx.fails(
        &edited(|d| remove(d, &reg("url"))),
        &["config.url", "required"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("url"), "https://warehouse/lake")),
        &["config.url", "s3://"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("url"), "s3:///lake")),
        &["config.url", "empty bucket"],
    );
    // A bucket without a prefix is fine when the shipper uses the same.
    let mut doc = base();
    set(&mut doc, &reg("url"), "s3://warehouse");
    set(&mut doc, "sinks/1/config/url", "s3://warehouse/");
    let r = fx.load_ok(&doc);
    assert_eq!(
        (r.url.prefix.as_str(), r.url.uri()),
        ("", "s3://warehouse".to_owned())
    );
    assert_eq!(
        r.url.table_location("p", "d"),
        "s3://warehouse/thadam/v1/p/d"
    );
}

// Rule 11: namespace.

#[test]
fn rule11_namespace_levels() {
    let fx = Fixture::new();
    fx.fails(
        &edited(|d| remove(d, &reg("namespace"))),
        &["config.namespace", "required"],
    );
    for bad in ["a..b", ".a", "a.", "''"] {
        fx.fails(
            &edited(|d| set(d, &reg("namespace"), bad)),
            &["config.namespace"],
        );
    }
    let r = fx.load_ok(&edited(|d| set(d, &reg("namespace"), "a.b.c")));
    assert_eq!(r.namespace, vec!["a", "b", "c"]);
}

// Rule 12: create_table.

#[test]
fn rule12_create_table_defaults_to_false() {
    let fx = Fixture::new();
    assert!(
        !fx.load_ok(&edited(|d| remove(d, &reg("create_table"))))
            .create_table
    );
    fx.fails(
        &edited(|d| set(d, &reg("create_table"), "yes please")),
        &["config.create_table", "true or false"],
    );
}

// Rule 13: store.

#[test]
fn rule13_store_endpoint_http_and_key_pairs() {
    let fx = Fixture::new();
    fx.fails(
        &edited(|d| remove(d, &reg("store/allow_http"))),
        &["config.store.endpoint", "allow_http"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("store/allow_http"), "false")),
        &["config.store.endpoint", "allow_http"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("store/endpoint"), "not a url")),
        &["config.store.endpoint"],
    );
    fx.fails(
        &edited(|d| remove(d, &reg("store/secret_access_key"))),
        &["config.store.secret_access_key", "both"],
    );
    fx.fails(
        &edited(|d| remove(d, &reg("store/access_key_id"))),
        &["config.store.access_key_id", "both"],
    );
    let r = fx.load_ok(&edited(|d| {
        set(
            d,
            &reg("store"),
            "{endpoint: 'https://s3.example', access_key_id: a, secret_access_key: b}",
        )
    }));
    assert_eq!(r.store.region, "us-east-1");
    assert!(!r.store.allow_http);
    assert_eq!(
        r.store.endpoint.map(String::from).as_deref(),
        Some("https://s3.example/")
    );
}

#[test]
fn rule13_store_credentials_is_static_unless_instance_metadata_is_asked_for() {
    use thadam_iceberg::config::StoreCredentials;
    let fx = Fixture::new();
    assert_eq!(
        fx.load_ok(&base()).store.credentials,
        StoreCredentials::Static
    );
    let keyless = |d: &mut Value| {
        remove(d, &reg("store/access_key_id"));
        remove(d, &reg("store/secret_access_key"));
    };
    // No keys and nothing asked for: valid (access comes from the catalog), still static.
    let r = fx.load_ok(&edited(keyless));
    assert_eq!(r.store.credentials, StoreCredentials::Static);
    let r = fx.load_ok(&edited(|d| {
        keyless(d);
        set(d, &reg("store/credentials"), "static");
    }));
    assert_eq!(r.store.credentials, StoreCredentials::Static);
    let r = fx.load_ok(&edited(|d| {
        keyless(d);
        set(d, &reg("store/credentials"), "instance_metadata");
    }));
    assert_eq!(r.store.credentials, StoreCredentials::InstanceMetadata);
    fx.fails(
        &edited(|d| set(d, &reg("store/credentials"), "instance_metadata")),
        &["config.store.credentials", "access_key_id"],
    );
    fx.fails(
        &edited(|d| {
            keyless(d);
            set(d, &reg("store/credentials"), "environment");
        }),
        &["config.store.credentials", "static", "instance_metadata"],
    );
}

// Rule 14: retry.

#[test]
fn rule14_retry_durations() {
    let fx = Fixture::new();
    fx.fails(
        &edited(|d| set(d, &reg("retry/initial"), "1")),
        &["config.retry.initial", "duration"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("retry/initial"), "soon")),
        &["config.retry.initial", "soon"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("retry/initial"), "0s")),
        &["config.retry.initial", "greater than 0"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("retry"), "{initial: 10s, max: 2s}")),
        &["config.retry.max", "initial"],
    );
    // Only max given, below the default initial of 1s.
    fx.fails(
        &edited(|d| set(d, &reg("retry"), "{max: 500ms}")),
        &["config.retry.max", "initial"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("retry/jitter"), "sometimes")),
        &["config.retry.jitter"],
    );
}

#[test]
fn commit_batching_and_footer_readers() {
    use thadam_iceberg::config::{CommitPolicy, DEFAULT_FOOTER_READERS};
    let fx = Fixture::new();
    // Defaults: batches of up to 500 segments / 1 GiB, no linger, 8 footer readers.
    let r = fx.load_ok(&edited(|_| {}));
    assert_eq!(r.commit, CommitPolicy::default());
    assert_eq!(r.footer_readers, DEFAULT_FOOTER_READERS);
    let r = fx.load_ok(&edited(|d| {
        set(
            d,
            &reg("commit"),
            "{max_segments: 50, max_bytes: 64MiB, linger: 250ms, min_interval: 2s, intents: false}",
        );
        set(d, &reg("footer_readers"), "16");
    }));
    assert_eq!(
        r.commit,
        CommitPolicy {
            max_segments: 50,
            max_bytes: 64 * 1024 * 1024,
            linger: Duration::from_millis(250),
            min_interval: Duration::from_secs(2),
            intents: false,
            intents_key: None,
        }
    );
    fx.fails(
        &edited(|d| set(d, &reg("commit"), "{intents: maybe}")),
        &["config.commit.intents"],
    );
    assert_eq!(r.footer_readers, 16);
    fx.fails(
        &edited(|d| set(d, &reg("commit"), "{max_segmnts: 5}")),
        &["config.commit", "max_segmnts"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("commit"), "{max_segments: 0}")),
        &["config.commit.max_segments", "greater than 0"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("commit"), "{max_bytes: lots}")),
        &["config.commit.max_bytes", "MiB"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("commit"), "{linger: 2h}")),
        &["config.commit.linger", "hour"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("commit"), "{min_interval: 3h}")),
        &["config.commit.min_interval", "hour"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("commit"), "{min_interval: soon}")),
        &["config.commit.min_interval"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("footer_readers"), "-3")),
        &["config.footer_readers"],
    );
}

#[test]
fn memory_bounds_parse_and_are_checked() {
    use thadam_iceberg::config::MemoryBudget;
    let fx = Fixture::new();
    assert_eq!(fx.load_ok(&edited(|_| {})).memory, MemoryBudget::default());
    let r = fx.load_ok(&edited(|d| {
        set(d, &reg("memory"), "{segments: 1000, footer_bytes: 8MiB}")
    }));
    assert_eq!(
        r.memory,
        MemoryBudget {
            segments: 1000,
            footer_bytes: 8 << 20,
        }
    );
    fx.fails(
        &edited(|d| set(d, &reg("memory"), "{segments: 0}")),
        &["config.memory.segments"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("memory"), "{footer_bytes: 4KiB}")),
        &["config.memory.footer_bytes", "1MiB"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("memory"), "{segmnts: 5}")),
        &["config.memory", "segmnts"],
    );
}

#[test]
fn retry_delay_is_exponential_capped_and_jittered_within_bounds() {
    let fixed = RetryPolicy {
        initial: Duration::from_secs(1),
        max: Duration::from_secs(60),
        jitter: false,
    };
    let delays: Vec<u64> = (0..8).map(|a| fixed.delay(a).as_secs()).collect();
    assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60]);
    assert_eq!(fixed.delay(u32::MAX), Duration::from_secs(60));
    let jittered = RetryPolicy {
        jitter: true,
        ..fixed
    };
    for attempt in [0, 3, 10, 100] {
        let base = fixed.delay(attempt);
        for _ in 0..50 {
            let d = jittered.delay(attempt);
            assert!(
                d >= base / 2 && d <= base,
                "attempt {attempt}: {d:?} outside [{:?}, {base:?}]",
                base / 2
            );
        }
    }
    // Jitter actually varies.
    let draws: std::collections::HashSet<_> = (0..50).map(|_| jittered.delay(6)).collect();
    assert!(draws.len() > 1);
}

// Rule 15: the parquet sink.

#[test]
fn rule15_parquet_sink_dir_catalog_datasets_unsigned() {
    let fx = Fixture::new();
    fx.fails(
        &edited(|d| remove(d, "sinks/0/config/dir")),
        &["sink \"local\"", "config.dir", "required"],
    );
    fx.fails(
        &edited(|d| remove(d, "sinks/0/config/datasets")),
        &["sink \"local\"", "config.datasets", "required"],
    );
    fx.fails(
        &edited(|d| set(d, "sinks/0/config/datasets", "[]")),
        &["config.datasets", "empty"],
    );
    fx.fails(
        &edited(|d| set(d, "sinks/0/config/datasets", "[a, {name: a}]")),
        &["config.datasets[1]", "\"a\"", "unique"],
    );
    fx.fails(
        &edited(|d| set(d, "sinks/0/config/datasets", "[{unsigned: signed}]")),
        &["config.datasets[0].name", "required"],
    );
    fx.fails(
        &edited(|d| set(d, "sinks/0/config/unsigned", "unsigned")),
        &["config.unsigned", "native or signed"],
    );
    fx.fails(
        &edited(|d| {
            set(
                d,
                "sinks/0/config/datasets",
                "[{name: a, unsigned: Signed}]",
            )
        }),
        &["config.datasets[0].unsigned", "native or signed"],
    );
    // Sink-wide default native when absent; a per-dataset value overrides it.
    let r = fx.load_ok(&edited(|d| {
        remove(d, "sinks/0/config/unsigned");
        set(
            d,
            "sinks/0/config/datasets",
            "[a, {name: b, unsigned: signed}]",
        );
        set(d, "sinks/0/config/catalog", "/var/lib/thadam/cat.log");
    }));
    let policies: Vec<_> = r
        .source
        .datasets
        .iter()
        .map(|d| (d.name.as_str(), d.unsigned))
        .collect();
    assert_eq!(
        policies,
        [("a", UnsignedPolicy::Native), ("b", UnsignedPolicy::Signed)]
    );
    assert_eq!(r.source.catalog, PathBuf::from("/var/lib/thadam/cat.log"));
}

// Rule 16: ${file:} and ${env:}.

#[test]
fn rule16_file_and_env_references() {
    let fx = Fixture::new();
    fx.write("secrets/ns", "robotics\r\n");
    let r = fx.load_ok(&edited(|d| {
        // Whole values, embedded references, CRLF trimming, and `$${` for a literal `${`.
        set(
            d,
            &reg("namespace"),
            "'${file:secrets/ns}.${env:THADAM_CFG_TEST_PIPELINE}'",
        );
        set(d, "sinks/0/config/datasets", "['x$${y}']");
    }));
    assert_eq!(r.namespace, vec!["robotics", "edge-capture"]);
    assert_eq!(r.source.datasets[0].name, "x${y}");
    assert_eq!(r.pipeline, "edge-capture");
    assert_eq!(
        r.store.access_key_id.as_ref().map(Secret::expose),
        Some(ACCESS_KEY)
    );
    // Only one trailing newline is trimmed (the second is then a control character in the
    // namespace, which is refused).
    fx.write("secrets/ns2", "robotics\n\n");
    fx.fails(
        &edited(|d| set(d, &reg("namespace"), "'${file:secrets/ns2}'")),
        &["config.namespace", "control character"],
    );
    // An absolute path works too.
    let abs = fx.base().join("secrets/ns");
    let r = fx.load_ok(&edited(|d| {
        set(
            d,
            &reg("namespace"),
            &format!("'${{file:{}}}'", abs.display()),
        )
    }));
    assert_eq!(r.namespace, vec!["robotics"]);

    fx.fails(
        &edited(|d| set(d, &reg("catalog_token"), "'${file:secrets/absent}'")),
        &[
            "config.catalog_token",
            "${file:secrets/absent}",
            "cannot be read",
        ],
    );
    fx.fails(
        &edited(|d| {
            set(
                d,
                &reg("store/access_key_id"),
                &format!("'${{env:{ENV_UNSET}}}'"),
            )
        }),
        &["config.store.access_key_id", ENV_UNSET, "not set"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("pipeline"), "'${env:}'")),
        &["config.pipeline", "${env:}"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("pipeline"), "'${vault:x}'")),
        &["config.pipeline", "${file:PATH}"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("pipeline"), "'${env:X'")),
        &["config.pipeline", "closing"],
    );
}

// Secret hygiene.

#[test]
fn secrets_never_appear_in_debug_output() {
    let fx = Fixture::new();
    let config = fx.load(&base()).expect("valid");
    let debug = format!("{config:?}");
    assert_no_secret(&debug);
    assert!(debug.contains("Secret(***)"), "{debug}");

    let with_credential = edited(|d| {
        remove(d, &reg("catalog_token"));
        set(
            d,
            &reg("catalog_credential"),
            "{client_id: a, client_secret: '${file:secrets/client_secret}'}",
        );
    });
    let config = fx.load(&with_credential).expect("valid");
    assert_no_secret(&format!("{config:?}"));
    assert_no_secret(&format!("{:#?}", config.registrars[0]));

    let secret = Secret::new(TOKEN);
    assert_eq!(format!("{secret}"), "***");
    assert_eq!(format!("{secret:?}"), "Secret(***)");
}

#[test]
fn secrets_never_appear_in_error_messages() {
    let fx = Fixture::new();
    // Literal secrets everywhere, then an error in some other key: `fails` checks every message.
    let literal = |edits: &dyn Fn(&mut Value)| {
        edited(|d| {
            set(d, &reg("catalog_token"), TOKEN);
            set(d, &reg("store/access_key_id"), ACCESS_KEY);
            set(d, &reg("store/secret_access_key"), SECRET_KEY);
            edits(d);
        })
    };
    fx.fails(
        &literal(&|d| set(d, &reg("namespace"), "a..b")),
        &["config.namespace"],
    );
    fx.fails(
        &literal(&|d| set(d, &reg("retry/initial"), "0s")),
        &["config.retry.initial"],
    );
    fx.fails(&literal(&|d| set(d, &reg("typo"), "1")), &["typo"]);
    fx.fails(
        &literal(&|d| remove(d, &reg("store/secret_access_key"))),
        &["secret_access_key"],
    );
    fx.fails(
        &literal(&|d| {
            set(
                d,
                &reg("catalog_credential"),
                &format!("{{client_id: a, client_secret: {CLIENT_SECRET}}}"),
            )
        }),
        &["catalog_credential"],
    );
    fx.fails(
        &literal(&|d| {
            remove(d, &reg("catalog_token"));
            set(
                d,
                &reg("catalog_credential"),
                &format!("{{client_id: 'a:b', client_secret: {CLIENT_SECRET}}}"),
            );
        }),
        &["client_id"],
    );
    // Secrets in the wrong place or malformed: the message describes, never quotes.
    fx.fails(
        &literal(&|d| set(d, &reg("store"), &format!("'{SECRET_KEY}'"))),
        &["config.store", "mapping"],
    );
    fx.fails(
        &literal(&|d| set(d, &reg("catalog_token"), &format!("'{TOKEN}${{oops'"))),
        &["config.catalog_token"],
    );
    fx.fails(
        &literal(&|d| set(d, &reg("catalog_token"), &format!("'{TOKEN}${{vault:x}}'"))),
        &["config.catalog_token"],
    );
    fx.fails(
        &literal(&|d| set(d, &reg("catalog_token"), "[a, b]")),
        &["config.catalog_token", "string"],
    );
    // A resolved secret used where a flag or a duration belongs.
    let env_ref = format!("'${{env:{ENV_FLAG_SECRET}}}'");
    fx.fails(
        &literal(&|d| set(d, &reg("create_table"), &env_ref)),
        &["config.create_table"],
    );
    fx.fails(
        &literal(&|d| set(d, &reg("retry/max"), &env_ref)),
        &["config.retry.max"],
    );
}

// Rule 17: the cleartext warning.

/// A `MakeWriter` that appends to a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

/// Loads `doc` with a subscriber capturing this thread's log output, and returns the output.
fn logs_of(fx: &Fixture, doc: &Value) -> String {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::TRACE)
        .finish();
    tracing::subscriber::with_default(subscriber, || fx.load(doc).expect("valid config"));
    let bytes = captured.0.lock().expect("lock").clone();
    String::from_utf8(bytes).expect("utf-8 logs")
}

#[test]
fn rule17_credentials_over_non_loopback_http_warn() {
    let fx = Fixture::new();
    let http_catalog = |uri: &str, auth: &str, value: &str| {
        let mut doc = minimal();
        set(&mut doc, &reg("catalog_uri"), uri);
        set(&mut doc, &reg(auth), value);
        doc
    };
    let token = format!("'{TOKEN}'");
    let credential = format!("{{client_id: a, client_secret: '{CLIENT_SECRET}'}}");

    let logs = logs_of(
        &fx,
        &http_catalog("http://iceberg-rest:8181", "catalog_token", &token),
    );
    assert!(
        logs.contains("WARN") && logs.contains("cleartext"),
        "{logs}"
    );
    assert!(
        logs.contains("catalog_token") && logs.contains("iceberg-rest"),
        "{logs}"
    );
    assert_no_secret(&logs);

    let logs = logs_of(
        &fx,
        &http_catalog("http://10.1.2.3", "catalog_credential", &credential),
    );
    assert!(
        logs.contains("cleartext") && logs.contains("catalog_credential"),
        "{logs}"
    );
    assert_no_secret(&logs);

    // An https catalog with a plain-http token endpoint still warns, about the endpoint.
    let cred_http_auth = format!(
        "{{client_id: a, client_secret: '{CLIENT_SECRET}', oauth2_server_uri: 'http://auth.example/token'}}"
    );
    let logs = logs_of(
        &fx,
        &http_catalog(
            "https://iceberg-rest",
            "catalog_credential",
            &cred_http_auth,
        ),
    );
    assert!(
        logs.contains("cleartext") && logs.contains("auth.example"),
        "{logs}"
    );

    // Loopback, https, or no credentials: quiet.
    for uri in [
        "http://localhost:8181",
        "http://127.0.0.1:8181",
        "http://127.8.0.1",
        "http://[::1]:8181",
        "https://iceberg-rest",
    ] {
        let logs = logs_of(&fx, &http_catalog(uri, "catalog_token", &token));
        assert!(!logs.contains("cleartext"), "{uri}: {logs}");
        let logs = logs_of(&fx, &http_catalog(uri, "catalog_credential", &credential));
        assert!(!logs.contains("cleartext"), "{uri}: {logs}");
    }
    let mut doc = minimal();
    set(&mut doc, &reg("catalog_uri"), "http://iceberg-rest:8181");
    assert!(!logs_of(&fx, &doc).contains("cleartext"));
}

// Rule 18: YAML syntax errors.

#[test]
fn rule18_yaml_syntax_errors_name_file_line_and_column() {
    let fx = Fixture::new();
    let path = fx.write(
        "broken.yaml",
        "sinks:\n  - id: a\n    kind: [parquet\n    config: {}\n",
    );
    let err = Config::load(&path).expect_err("broken YAML");
    assert_eq!(err.code(), ErrorCode::ConfigInvalid);
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("line ") && msg.contains("column "), "{msg}");

    let path = fx.write("tabs.yaml", "sinks:\n\t- id: a\n");
    let msg = Config::load(&path).expect_err("tab").to_string();
    assert!(msg.contains("tabs.yaml") && msg.contains("line 2"), "{msg}");

    // Load errors other than syntax also name the file.
    let path = fx.write("typo.yaml", &BASE.replace("create_table:", "create_tabel:"));
    let msg = Config::load(&path).expect_err("typo").to_string();
    assert!(
        msg.contains("typo.yaml") && msg.contains("create_tabel"),
        "{msg}"
    );

    let err = Config::load(&fx.base().join("absent.yaml")).expect_err("absent");
    assert_eq!(err.code(), ErrorCode::ConfigInvalid);
    assert!(err.message().contains("absent.yaml"), "{err}");
}

#[test]
fn yaml_merge_keys_are_applied() {
    let fx = Fixture::new();
    let yaml = format!(
        "{}\n",
        BASE.replace(
            "      retry: { initial: 500ms, max: 2m, jitter: false }",
            "      <<: {create_table: false}",
        )
        .replace("      create_table: true\n", "")
    );
    let config = Config::from_yaml_str(&yaml, fx.base()).expect("merge key");
    assert!(!config.registrars[0].create_table);
}

// `${file:}` reads only regular files of at most 1 MiB.

#[test]
fn file_references_read_only_small_regular_files() {
    let fx = Fixture::new();
    let token = |reference: &str| {
        edited(|d| {
            set(
                d,
                &reg("catalog_token"),
                &format!("'${{file:{reference}}}'"),
            )
        })
    };
    // A device that never ends: refused before a byte is read (today it allocates until the
    // process runs out of memory).
    fx.fails(
        &token("/dev/zero"),
        &[
            "config.catalog_token",
            "${file:/dev/zero}",
            "not a regular file",
        ],
    );
    // A directory.
    fx.fails(
        &token("secrets"),
        &["config.catalog_token", "${file:secrets}", "a directory"],
    );
    // A FIFO: opening it would block until a writer appears.
    let fifo = fx.base().join("secrets/fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success(), "mkfifo {}", fifo.display());
    let msg = fx.fails(
        &token("secrets/fifo"),
        &["config.catalog_token", "${file:secrets/fifo}", "a FIFO"],
    );
    assert!(msg.contains("not a regular file"), "{msg}");
    // Too large: 2 MiB, and one byte over the limit. The content never appears in the message.
    fx.write("secrets/big", &"Z".repeat(2 * 1024 * 1024));
    let msg = fx.fails(
        &token("secrets/big"),
        &[
            "config.catalog_token",
            "${file:secrets/big}",
            "1048576-byte limit",
        ],
    );
    assert!(!msg.contains("ZZZZ"), "no content in the message: {msg}");
    fx.write("secrets/over", &"Z".repeat(1024 * 1024 + 1));
    fx.fails(
        &token("secrets/over"),
        &["config.catalog_token", "${file:secrets/over}", "limit"],
    );
    // At the limit it is read (a long but valid token).
    fx.write("secrets/at", &"Z".repeat(1024 * 1024));
    let r = fx.load_ok(&token("secrets/at"));
    match &r.catalog_auth {
        CatalogAuth::Token(t) => assert_eq!(t.expose().len(), 1024 * 1024),
        other => panic!("expected a token, got {other:?}"),
    }
    // Not UTF-8: refused without quoting the bytes.
    let path = fx.base().join("secrets/binary");
    std::fs::write(&path, [0xffu8, 0xfe, b'x']).expect("write");
    fx.fails(
        &token("secrets/binary"),
        &["config.catalog_token", "${file:secrets/binary}", "UTF-8"],
    );
}

// Control characters and empty levels in namespaces, and control characters in credentials.

#[test]
fn namespace_levels_refuse_control_characters() {
    let fx = Fixture::new();
    // 0x1F is the REST catalog's level separator: `a\x1fb` would silently be two levels.
    for bad in [
        r#""a\x1fb""#,
        r#""a\tb""#,
        r#""a.b\nc""#,
        r#""a\x7f""#,
        r#""a\x00""#,
    ] {
        let msg = fx.fails(
            &edited(|d| set(d, &reg("namespace"), bad)),
            &["config.namespace", "control character"],
        );
        assert!(!msg.contains('\u{1f}') && !msg.contains('\t'), "{msg:?}");
    }
    // Through a reference as well.
    fx.write("secrets/ns", "robotics\u{1f}edge\n");
    fx.fails(
        &edited(|d| set(d, &reg("namespace"), "'${file:secrets/ns}'")),
        &["config.namespace", "control character"],
    );
    // Empty levels.
    for bad in ["a..b", "'a.b.'"] {
        fx.fails(
            &edited(|d| set(d, &reg("namespace"), bad)),
            &["config.namespace", "empty level"],
        );
    }
    // Non-ASCII letters are fine.
    let r = fx.load_ok(&edited(|d| set(d, &reg("namespace"), "'робо.tics'")));
    assert_eq!(r.namespace, vec!["робо", "tics"]);
}

#[test]
fn credentials_refuse_control_characters_without_quoting_them() {
    let fx = Fixture::new();
    // Each credential key, fed a value with a control character through a file (as secrets
    // arrive) and through the literal YAML.
    fx.write("secrets/ctl", "sec\u{1f}ret-SECRET-x\n");
    let credential = |d: &mut Value| {
        remove(d, &reg("catalog_token"));
        set(
            d,
            &reg("catalog_credential"),
            "{client_id: thadam, client_secret: '${file:secrets/client_secret}'}",
        );
    };
    type Edit = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Edit)> = vec![
        (
            "config.catalog_token",
            Box::new(|d: &mut Value| set(d, &reg("catalog_token"), "'${file:secrets/ctl}'")),
        ),
        (
            "config.catalog_credential.client_id",
            Box::new(move |d: &mut Value| {
                credential(d);
                set(d, &reg("catalog_credential/client_id"), r#""thad\x1bam""#);
            }),
        ),
        (
            "config.catalog_credential.client_secret",
            Box::new(move |d: &mut Value| {
                credential(d);
                set(
                    d,
                    &reg("catalog_credential/client_secret"),
                    "'${file:secrets/ctl}'",
                );
            }),
        ),
        (
            "config.store.access_key_id",
            Box::new(|d: &mut Value| set(d, &reg("store/access_key_id"), r#""AKIA\rX""#)),
        ),
        (
            "config.store.secret_access_key",
            Box::new(|d: &mut Value| {
                set(d, &reg("store/secret_access_key"), "'${file:secrets/ctl}'")
            }),
        ),
    ];
    for (key, edit) in cases {
        let msg = fx.fails(&edited(|d| edit(d)), &[key, "control character"]);
        assert!(
            !msg.contains("ret-SECRET") && !msg.contains("thad") && !msg.contains("AKIA"),
            "the value is never quoted: {msg}"
        );
    }
}

// catalog_warehouse and catalog_headers (issue 15, part 1).

#[test]
fn catalog_warehouse_and_headers_parse_and_are_checked() {
    let fx = Fixture::new();
    let config = fx.load_ok(&edited(|d| {
        set(d, &reg("catalog_warehouse"), "my-catalog");
        set(
            d,
            &reg("catalog_headers"),
            "{X-Iceberg-Access-Delegation: vended-credentials, X-Api-Key: '${env:THADAM_CFG_TEST_FLAG_SECRET}'}",
        );
    }));
    assert_eq!(config.catalog_warehouse.as_deref(), Some("my-catalog"));
    let names: Vec<&str> = config
        .catalog_headers
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(names, ["X-Iceberg-Access-Delegation", "X-Api-Key"]);
    assert_eq!(config.catalog_headers[1].1.expose(), TOKEN);
    // A header value may be a key: never in Debug.
    assert_no_secret(&format!("{config:?}"));
    let default = fx.load_ok(&base());
    assert!(default.catalog_warehouse.is_none() && default.catalog_headers.is_empty());

    fx.fails(
        &edited(|d| set(d, &reg("catalog_warehouse"), "''")),
        &["config.catalog_warehouse", "empty"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("catalog_warehouse"), "\"a\\tb\"")),
        &["config.catalog_warehouse", "printable"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("catalog_headers"), "{Authorization: Bearer x}")),
        &["config.catalog_headers.Authorization", "catalog_token"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("catalog_headers"), "{'Bad Name': x}")),
        &["config.catalog_headers.Bad Name", "header name"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("catalog_headers"), "[a, b]")),
        &["config.catalog_headers"],
    );
    let msg = fx.fails(
        &edited(|d| {
            set(
                d,
                &reg("catalog_headers"),
                "{X-Key: \"pw-SECRET\\nsecond\"}",
            )
        }),
        &["config.catalog_headers.X-Key", "control character"],
    );
    assert!(!msg.contains("pw-SECRET"), "{msg}");
}

// catalog_sigv4 (issue 15, part 2).

/// A full `catalog_sigv4`, its keys from a variable and a file (the same secrets as elsewhere).
const SIGV4: &str = "{region: eu-west-1, signing_name: glue, \
     access_key_id: '${env:THADAM_CFG_TEST_ACCESS_KEY}', \
     secret_access_key: '${file:secrets/key_secret}', \
     session_token: '${env:THADAM_CFG_TEST_FLAG_SECRET}'}";

/// The base with `catalog_sigv4: sigv4` instead of its `catalog_token`.
fn sigv4_doc(sigv4: &str) -> Value {
    edited(|d| {
        remove(d, &reg("catalog_token"));
        set(d, &reg("catalog_sigv4"), sigv4);
    })
}

#[test]
fn catalog_sigv4_parses_with_keys_resolved_and_never_in_debug() {
    let fx = Fixture::new();
    let config = fx.load_ok(&sigv4_doc(SIGV4));
    let CatalogAuth::SigV4(sigv4) = &config.catalog_auth else {
        panic!("expected SigV4 auth, got {:?}", config.catalog_auth);
    };
    assert_eq!(sigv4.region, "eu-west-1");
    assert_eq!(sigv4.signing_name, "glue");
    assert_eq!(sigv4.access_key_id.expose(), ACCESS_KEY);
    assert_eq!(sigv4.secret_access_key.expose(), SECRET_KEY);
    assert_eq!(
        sigv4.session_token.as_ref().map(Secret::expose),
        Some(TOKEN)
    );
    assert_no_secret(&format!("{config:?}"));

    // The session token is optional; S3 Tables' signing name is accepted like Glue's.
    let config = fx.load_ok(&sigv4_doc(
        "{region: us-east-1, signing_name: s3tables, access_key_id: AKIDEXAMPLE, \
         secret_access_key: '${file:secrets/key_secret}'}",
    ));
    let CatalogAuth::SigV4(sigv4) = &config.catalog_auth else {
        panic!("expected SigV4 auth, got {:?}", config.catalog_auth);
    };
    assert_eq!(sigv4.signing_name, "s3tables");
    assert!(sigv4.session_token.is_none());
}

#[test]
fn catalog_sigv4_is_exclusive_with_catalog_token_and_catalog_credential() {
    let fx = Fixture::new();
    // The base has a catalog_token.
    fx.fails(
        &edited(|d| set(d, &reg("catalog_sigv4"), SIGV4)),
        &["config.catalog_sigv4", "config.catalog_token", "not both"],
    );
    fx.fails(
        &edited(|d| {
            remove(d, &reg("catalog_token"));
            set(d, &reg("catalog_sigv4"), SIGV4);
            set(
                d,
                &reg("catalog_credential"),
                "{client_id: a, client_secret: '${file:secrets/client_secret}'}",
            );
        }),
        &[
            "config.catalog_sigv4",
            "config.catalog_credential",
            "not both",
        ],
    );
    // Reported before the secrets are resolved: a missing secret file does not hide it.
    fx.fails(
        &edited(|d| {
            set(
                d,
                &reg("catalog_sigv4"),
                "{region: r, signing_name: glue, access_key_id: a, \
                 secret_access_key: '${file:secrets/absent}'}",
            )
        }),
        &["config.catalog_sigv4", "config.catalog_token"],
    );
}

#[test]
fn catalog_sigv4_keys_are_checked_without_quoting_secrets() {
    let fx = Fixture::new();
    let with = |region: &str, name: &str, id: &str, secret: &str, extra: &str| {
        let mut fields = Vec::new();
        for (key, value) in [
            ("region", region),
            ("signing_name", name),
            ("access_key_id", id),
            ("secret_access_key", secret),
        ] {
            if !value.is_empty() {
                fields.push(format!("{key}: {value}"));
            }
        }
        if !extra.is_empty() {
            fields.push(extra.to_string());
        }
        sigv4_doc(&format!("{{{}}}", fields.join(", ")))
    };
    let secret = "'${file:secrets/key_secret}'";
    fx.fails(
        &with("", "glue", "AKID", secret, ""),
        &["config.catalog_sigv4.region", "region"],
    );
    fx.fails(
        &with("EU West 1", "glue", "AKID", secret, ""),
        &[
            "config.catalog_sigv4.region",
            "lowercase letters, digits and `-`",
        ],
    );
    fx.fails(
        &with("eu-west-1", "", "AKID", secret, ""),
        &["config.catalog_sigv4.signing_name", "s3tables"],
    );
    fx.fails(
        &with("eu-west-1", "glue/x", "AKID", secret, ""),
        &["config.catalog_sigv4.signing_name", "lowercase"],
    );
    fx.fails(
        &with("eu-west-1", "glue", "", secret, ""),
        &["config.catalog_sigv4.access_key_id", "required"],
    );
    fx.fails(
        &with("eu-west-1", "glue", "'AK/ID'", secret, ""),
        &["config.catalog_sigv4.access_key_id", "`/`"],
    );
    fx.fails(
        &with("eu-west-1", "glue", "AKID", "", ""),
        &["config.catalog_sigv4.secret_access_key", "required"],
    );
    fx.write("secrets/empty", "\n");
    fx.fails(
        &with("eu-west-1", "glue", "AKID", "'${file:secrets/empty}'", ""),
        &["config.catalog_sigv4.secret_access_key", "empty"],
    );
    let msg = fx.fails(
        &with(
            "eu-west-1",
            "glue",
            "AKID",
            secret,
            "session_token: \"st-SECRET\\nsecond\"",
        ),
        &["config.catalog_sigv4.session_token", "control character"],
    );
    assert!(!msg.contains("st-SECRET"), "{msg}");
    fx.fails(
        &with("eu-west-1", "glue", "AKID", secret, "regoin: eu-west-2"),
        &["config.catalog_sigv4", "regoin"],
    );
    fx.fails(&sigv4_doc("[a, b]"), &["config.catalog_sigv4"]);
}

/// Rule 17 for SigV4: the same as for a bearer token (a session token travels, and a signed
/// request can be replayed for minutes).
#[test]
fn catalog_sigv4_over_non_loopback_http_warns_like_a_token() {
    let fx = Fixture::new();
    let doc = |uri: &str| {
        let mut doc = minimal();
        set(&mut doc, &reg("catalog_uri"), uri);
        set(&mut doc, &reg("catalog_sigv4"), SIGV4);
        doc
    };
    let logs = logs_of(&fx, &doc("http://glue.example/iceberg"));
    assert!(
        logs.contains("WARN") && logs.contains("cleartext") && logs.contains("catalog_sigv4"),
        "{logs}"
    );
    assert_no_secret(&logs);
    for uri in [
        "http://127.0.0.1:8181",
        "https://glue.eu-west-1.amazonaws.com/iceberg",
    ] {
        assert!(!logs_of(&fx, &doc(uri)).contains("cleartext"), "{uri}");
    }
}

// partition_by (partitioned tables).

#[test]
fn partition_by_parses_terms_and_refuses_bad_ones() {
    use iceberg::spec::Transform;
    let fx = Fixture::new();
    let config = fx.load_ok(&edited(|d| {
        set(
            d,
            &reg("partition_by"),
            "[hour(ts), device, bucket(16, device), 'truncate(4, name)', day(d2)]",
        );
    }));
    let terms: Vec<(Transform, &str, String)> = config
        .partition_by
        .iter()
        .map(|t| (t.transform, t.column.as_str(), t.field_name()))
        .collect();
    assert_eq!(
        terms,
        [
            (Transform::Hour, "ts", "ts_hour".to_string()),
            (Transform::Identity, "device", "device".to_string()),
            (Transform::Bucket(16), "device", "device_bucket".to_string()),
            (Transform::Truncate(4), "name", "name_trunc".to_string()),
            (Transform::Day, "d2", "d2_day".to_string()),
        ]
    );
    assert!(fx.load_ok(&base()).partition_by.is_empty());
    assert!(
        fx.load_ok(&edited(|d| set(d, &reg("partition_by"), "[]")))
            .partition_by
            .is_empty()
    );

    for (value, needles) in [
        ("hour(ts)", &["config.partition_by", "must be a list"][..]),
        (
            "[minute(ts)]",
            &["config.partition_by[0]", "unknown transform"],
        ),
        (
            "[ts, 'bucket(0, d)']",
            &["config.partition_by[1]", "greater than 0"],
        ),
        (
            "['truncate(-3, s)']",
            &["config.partition_by[0]", "greater than 0"],
        ),
        (
            "['bucket(d)']",
            &["config.partition_by[0]", "a number and a column"],
        ),
        ("[hour(ts]", &["config.partition_by[0]", "closing"]),
        ("[ts, bucket(4, d]", &["config.partition_by[1]", "closing"]),
        (
            "[device, identity(device)]",
            &["config.partition_by[1]", "`device`"],
        ),
        (
            "['bucket(4, d)', 'bucket(8, d)']",
            &["config.partition_by[1]", "d_bucket"],
        ),
        ("[[a]]", &["config.partition_by[0]", "string"]),
    ] {
        fx.fails(&edited(|d| set(d, &reg("partition_by"), value)), needles);
    }
}

// on_bad_segment and quarantine_file (quarantine, supersede, replay).
#[test]
fn on_bad_segment_and_quarantine_file_parse_and_are_checked() {
    use thadam_iceberg::config::BadSegmentPolicy;
    let fx = Fixture::new();
    let default = fx.load_ok(&base());
    assert_eq!(
        default.on_bad_segment,
        BadSegmentPolicy::Stop,
        "the spec's default"
    );
    let mut expected = default.source.catalog.as_os_str().to_owned();
    expected.push(".quarantine");
    assert_eq!(
        default.quarantine_file.as_os_str(),
        expected,
        "next to the segment catalog"
    );
    let config = fx.load_ok(&edited(|d| {
        set(d, &reg("on_bad_segment"), "quarantine");
        set(d, &reg("quarantine_file"), "state/bad.jsonl");
    }));
    assert_eq!(config.on_bad_segment, BadSegmentPolicy::Quarantine);
    assert!(
        config.quarantine_file.is_absolute() && config.quarantine_file.ends_with("state/bad.jsonl"),
        "relative to the config file's directory: {:?}",
        config.quarantine_file
    );
    let stop = fx.load_ok(&edited(|d| set(d, &reg("on_bad_segment"), "stop")));
    assert_eq!(stop.on_bad_segment, BadSegmentPolicy::Stop);
    fx.fails(
        &edited(|d| set(d, &reg("on_bad_segment"), "skip")),
        &["config.on_bad_segment", "stop", "quarantine"],
    );
}

// snapshot_retention and table_properties (metadata growth).
#[test]
fn snapshot_retention_parses_and_is_checked() {
    use thadam_iceberg::config::SnapshotRetention;
    let fx = Fixture::new();
    assert_eq!(
        fx.load_ok(&base()).snapshot_retention,
        None,
        "off by default: the spec leaves expiry to table maintenance"
    );
    let config = fx.load_ok(&edited(|d| {
        set(
            d,
            &reg("snapshot_retention"),
            "{max_age: 2h, min_snapshots: 50}",
        )
    }));
    assert_eq!(
        config.snapshot_retention,
        Some(SnapshotRetention {
            max_age: Duration::from_secs(7200),
            min_snapshots: 50,
        })
    );
    let at_least_a_second = fx.load_ok(&edited(|d| {
        set(
            d,
            &reg("snapshot_retention"),
            "{max_age: 1s, min_snapshots: 1}",
        )
    }));
    assert_eq!(
        at_least_a_second.snapshot_retention.map(|r| r.max_age),
        Some(Duration::from_secs(1))
    );
    for (value, needles) in [
        (
            "{max_age: 999ms, min_snapshots: 5}",
            &["config.snapshot_retention.max_age", "at least 1s"][..],
        ),
        (
            "{max_age: 0s, min_snapshots: 5}",
            &["config.snapshot_retention.max_age", "at least 1s"][..],
        ),
        (
            "{max_age: soon, min_snapshots: 5}",
            &["config.snapshot_retention.max_age", "not a duration"][..],
        ),
        (
            "{min_snapshots: 5}",
            &["config.snapshot_retention.max_age", "required"][..],
        ),
        (
            "{max_age: 1h, min_snapshots: 0}",
            &["config.snapshot_retention.min_snapshots", "greater than 0"][..],
        ),
        (
            "{max_age: 1h}",
            &["config.snapshot_retention.min_snapshots", "required"][..],
        ),
        (
            "{max_age: 1h, min_snapshots: 5, delete_files: true}",
            &["config.snapshot_retention", "delete_files"][..],
        ),
        ("[1h, 5]", &["config.snapshot_retention"][..]),
    ] {
        fx.fails(
            &edited(|d| set(d, &reg("snapshot_retention"), value)),
            needles,
        );
    }
}

#[test]
fn table_properties_parse_and_the_thadam_namespace_is_refused() {
    let fx = Fixture::new();
    assert!(fx.load_ok(&base()).table_properties.is_empty());
    let config = fx.load_ok(&edited(|d| {
        set(
            d,
            &reg("table_properties"),
            "{write.metadata.previous-versions-max: 3, write.metadata.delete-after-commit.enabled: false, commit.retry.num-retries: '7'}",
        )
    }));
    assert_eq!(
        config.table_properties,
        [
            (
                "write.metadata.previous-versions-max".to_string(),
                "3".to_string()
            ),
            (
                "write.metadata.delete-after-commit.enabled".to_string(),
                "false".to_string()
            ),
            ("commit.retry.num-retries".to_string(), "7".to_string()),
        ]
    );
    fx.fails(
        &edited(|d| set(d, &reg("table_properties"), "{thadam.watermark.x: '1:a'}")),
        &[
            "config.table_properties.thadam.watermark.x",
            "registrar's own",
        ],
    );
    fx.fails(
        &edited(|d| set(d, &reg("table_properties"), "{ratio: 1.10}")),
        &["config.table_properties.ratio", "quote"],
    );
    fx.fails(
        &edited(|d| set(d, &reg("table_properties"), "[a, b]")),
        &["config.table_properties"],
    );
}
