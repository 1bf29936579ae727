//! The rules for one `kind: iceberg` sink, turning its raw YAML into a [`RegistrarConfig`].
//! Validation stops at the first broken rule; the message names the sink, the key path and the fix.

use std::path::Path;

use super::field::Ctx;
use super::partition_by::{self, PartitionTerm};
use super::raw::{
    RawCommit, RawCredential, RawIceberg, RawMemory, RawRetention, RawRetry, RawSigV4, RawSink,
    RawStore,
};
use super::secret_url::SecretUrl;
use super::source;
use super::tls;
use super::types::{
    BadSegmentPolicy, CatalogAuth, ClientAuth, ClientIdentity, CommitPolicy,
    DEFAULT_FOOTER_READERS, DEFAULT_UNREADY_AFTER, MemoryBudget, OAuth2Credential, RegistrarConfig,
    SigV4Credential, SnapshotRetention, StoreConfig, TableLocation,
};
use super::urls;
use crate::error::Result;
use crate::runtime::backoff::RetryPolicy;
use crate::secret::Secret;

/// Builds the registrar for `sink` (of kind iceberg); `sinks` is the whole list, for `from` and
/// the shipper.
pub(crate) fn registrar(
    sink: &RawSink,
    sinks: &[RawSink],
    base_dir: &Path,
) -> Result<RegistrarConfig> {
    let ctx = Ctx {
        sink: &sink.id,
        base_dir,
    };
    // Rule 2: unknown keys, in any of the four strict mappings, fail here before any value is
    // looked at, so a typo is the first thing reported.
    let raw: RawIceberg = ctx.section("config", &sink.config)?;
    let raw_credential: Option<RawCredential> =
        ctx.optional_section("config.catalog_credential", raw.catalog_credential.as_ref())?;
    let raw_sigv4: Option<RawSigV4> =
        ctx.optional_section("config.catalog_sigv4", raw.catalog_sigv4.as_ref())?;
    let raw_store: RawStore = ctx
        .optional_section("config.store", raw.store.as_ref())?
        .unwrap_or_default();
    let raw_retry: RawRetry = ctx
        .optional_section("config.retry", raw.retry.as_ref())?
        .unwrap_or_default();
    let raw_memory: RawMemory = ctx
        .optional_section("config.memory", raw.memory.as_ref())?
        .unwrap_or_default();
    let raw_commit: RawCommit = ctx
        .optional_section("config.commit", raw.commit.as_ref())?
        .unwrap_or_default();
    let raw_retention: Option<RawRetention> =
        ctx.optional_section("config.snapshot_retention", raw.snapshot_retention.as_ref())?;

    // Rules 3, 15: the parquet sink.
    let from = ctx.required(
        "config.from",
        raw.from.as_ref(),
        "name the parquet sink whose segments the shipper uploads",
    )?;
    let parquet = source::find_parquet(&ctx, &from, sinks)?;
    let source = source::parquet_source(parquet, base_dir)?;

    // Rules 4, 10: the shipper agrees on pipeline and url.
    let pipeline = ctx.required(
        "config.pipeline",
        raw.pipeline.as_ref(),
        "set it to the object_store shipper's pipeline",
    )?;
    let url_text = ctx.required(
        "config.url",
        raw.url.as_ref(),
        "set it to the shipper's s3://bucket[/prefix] url",
    )?;
    let url = urls::table_root(&url_text).map_err(|e| ctx.err("config.url", e))?;
    source::check_shipper(&ctx, &from, &pipeline, &url, sinks)?;

    // Rules 5-9: the catalog connection.
    let catalog_uri: SecretUrl = urls::http_url(&ctx.required(
        "config.catalog_uri",
        raw.catalog_uri.as_ref(),
        "set it to the REST catalog's http:// or https:// URL",
    )?)
    .map_err(|e| ctx.err("config.catalog_uri", e))?
    .into();
    let https = catalog_uri.scheme() == "https";
    let catalog_ca_file = ca_file(&ctx, &raw, https)?;
    let catalog_auth = auth(&ctx, &raw, raw_credential, raw_sigv4, &catalog_uri)?;
    let catalog_client_identity = client_identity(&ctx, &raw, https)?;
    let catalog_warehouse = warehouse(&ctx, &raw)?;
    let catalog_headers = headers(&ctx, &raw)?;

    // Rules 11, 12.
    let namespace = namespace(&ctx, &raw)?;
    let create_table = ctx
        .flag("config.create_table", raw.create_table.as_ref())?
        .unwrap_or(false);
    let table_location = table_location(&ctx, &raw)?;
    let partition_by = partition_by(&ctx, &raw)?;

    // Rules 13, 14.
    let store = store(&ctx, raw_store)?;
    let retry = retry(&ctx, raw_retry)?;
    let commit = commit(&ctx, raw_commit)?;
    let footer_readers = ctx
        .count("config.footer_readers", raw.footer_readers.as_ref())?
        .map_or(DEFAULT_FOOTER_READERS, |n| n.min(1024) as usize);
    let memory = memory(&ctx, raw_memory, &commit)?;
    let unready_after = ctx
        .duration("config.unready_after", raw.unready_after.as_ref())?
        .unwrap_or(DEFAULT_UNREADY_AFTER);
    if unready_after.is_zero() {
        return Err(ctx.err(
            "config.unready_after",
            "must be greater than 0, e.g. 5m (how long a table may keep failing before /readyz \
             answers 503)",
        ));
    }

    let on_bad_segment = on_bad_segment(&ctx, &raw)?;
    let quarantine_file = match ctx.path("config.quarantine_file", raw.quarantine_file.as_ref())? {
        Some(path) => path,
        None => default_quarantine_file(&source.catalog),
    };

    let table_properties = table_properties(&ctx, &raw)?;
    let snapshot_retention = raw_retention
        .map(|r| snapshot_retention(&ctx, r))
        .transpose()?;

    // Rule 17, once everything else holds.
    warn_cleartext(&ctx, &catalog_uri, &catalog_auth);

    Ok(RegistrarConfig {
        id: sink.id.clone(),
        from,
        pipeline,
        catalog_uri,
        catalog_ca_file,
        catalog_auth,
        catalog_client_identity,
        catalog_warehouse,
        catalog_headers,
        url,
        namespace,
        create_table,
        table_location,
        partition_by,
        store,
        retry,
        commit,
        footer_readers,
        memory,
        unready_after,
        on_bad_segment,
        quarantine_file,
        table_properties,
        snapshot_retention,
        source,
    })
}

/// `table_properties`: a mapping of Iceberg table property names to values (strings, numbers
/// and booleans are taken as their text). The `thadam.` namespace holds the registrar's
/// exactly-once markers (watermarks) and is refused.
fn table_properties(ctx: &Ctx, raw: &RawIceberg) -> Result<Vec<(String, String)>> {
    const KEY: &str = "config.table_properties";
    let entries: Option<serde_yaml_ng::Mapping> =
        ctx.optional_section(KEY, raw.table_properties.as_ref())?;
    let mut properties = Vec::new();
    for (name, value) in entries.into_iter().flatten() {
        let Some(name) = name.as_str().map(str::to_string) else {
            return Err(ctx.err(KEY, "property names must be strings"));
        };
        let key = format!("{KEY}.{name}");
        if name.is_empty() || name.chars().any(char::is_control) {
            return Err(ctx.err(&key, "is not a valid table property name"));
        }
        if name.starts_with("thadam.") {
            return Err(ctx.err(
                &key,
                "is in the registrar's own namespace (thadam.*: its exactly-once markers); remove it",
            ));
        }
        // Integers and strings through `text` (a float such as 1.10 must be quoted).
        let text = match &value {
            serde_yaml_ng::Value::Bool(b) => b.to_string(),
            _ => ctx
                .text(&key, Some(&value))?
                .ok_or_else(|| ctx.err(&key, "needs a value"))?,
        };
        properties.push((name, text));
    }
    Ok(properties)
}

/// The shortest `snapshot_retention.max_age`. Iceberg itself sets no floor: how long readers
/// and other writers keep planning against a snapshot is the operator's to know
/// (docs/exactly-once.md, "Metadata growth and retention", says what to weigh). A second keeps
/// `0` (age never matters) out: say it with a large `min_snapshots` and a short age instead,
/// which reads as intended.
const MIN_RETENTION_AGE: std::time::Duration = std::time::Duration::from_secs(1);

/// `snapshot_retention`: both keys required, `max_age` at least a second, `min_snapshots` at
/// least 1.
fn snapshot_retention(ctx: &Ctx, raw: RawRetention) -> Result<SnapshotRetention> {
    const AGE: &str = "config.snapshot_retention.max_age";
    const MIN: &str = "config.snapshot_retention.min_snapshots";
    let max_age = ctx.duration(AGE, raw.max_age.as_ref())?.ok_or_else(|| {
        ctx.err(
            AGE,
            "is required; how old a snapshot must be before it is expired, e.g. 1d",
        )
    })?;
    if max_age < MIN_RETENTION_AGE {
        return Err(ctx.err(
            AGE,
            "must be at least 1s; choose it longer than any reader or writer of the table \
             keeps using a snapshot (a streaming reader's lag, a compaction's run)",
        ));
    }
    let min_snapshots = ctx.count(MIN, raw.min_snapshots.as_ref())?.ok_or_else(|| {
        ctx.err(
            MIN,
            "is required; how many of the newest snapshots are always kept, e.g. 100",
        )
    })?;
    Ok(SnapshotRetention {
        max_age,
        min_snapshots: usize::try_from(min_snapshots).unwrap_or(usize::MAX),
    })
}

/// `on_bad_segment`: `stop` (the default) or `quarantine`.
fn on_bad_segment(ctx: &Ctx, raw: &RawIceberg) -> Result<BadSegmentPolicy> {
    const KEY: &str = "config.on_bad_segment";
    match ctx.optional(KEY, raw.on_bad_segment.as_ref())?.as_deref() {
        None | Some("stop") => Ok(BadSegmentPolicy::Stop),
        Some("quarantine") => Ok(BadSegmentPolicy::Quarantine),
        Some(_) => Err(ctx.err(
            KEY,
            "must be stop (a segment that cannot be registered stops the service, the default) \
             or quarantine (it is recorded in quarantine_file and the others go on)",
        )),
    }
}

/// `{segment catalog}.quarantine`, next to the segment catalog.
fn default_quarantine_file(catalog: &std::path::Path) -> std::path::PathBuf {
    let mut name = catalog.as_os_str().to_owned();
    name.push(".quarantine");
    std::path::PathBuf::from(name)
}

/// `partition_by`: a list of partition terms (`hour(ts)`, `device`, `bucket(16, device)`), each
/// valid and naming its own partition field. Columns are resolved when a table is created.
fn partition_by(ctx: &Ctx, raw: &RawIceberg) -> Result<Vec<PartitionTerm>> {
    const KEY: &str = partition_by::KEY;
    let items = match raw.partition_by.as_ref() {
        None | Some(serde_yaml_ng::Value::Null) => return Ok(Vec::new()),
        Some(serde_yaml_ng::Value::Sequence(items)) => items,
        Some(_) => {
            return Err(ctx.err(
                KEY,
                "must be a list of partition terms, e.g. [hour(ts), device] or \
                 [day(ts), bucket(16, device)]",
            ));
        }
    };
    let mut texts = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let key = format!("{KEY}[{i}]");
        let text = ctx
            .text(&key, Some(item))?
            .ok_or_else(|| ctx.err(&key, "must be a partition term, e.g. hour(ts)"))?;
        texts.push(text);
    }
    partition_by::parse_all(&texts).map_err(|(i, e)| ctx.err(&format!("{KEY}[{i}]"), e))
}

/// `catalog_warehouse`: one line of printable text.
fn warehouse(ctx: &Ctx, raw: &RawIceberg) -> Result<Option<String>> {
    const KEY: &str = "config.catalog_warehouse";
    let Some(warehouse) = ctx.optional(KEY, raw.catalog_warehouse.as_ref())? else {
        return Ok(None);
    };
    if warehouse.is_empty() || warehouse.chars().any(char::is_control) {
        return Err(ctx.err(
            KEY,
            "must be one line of printable text (the catalog's warehouse name, account id or \
             ARN), or be removed",
        ));
    }
    Ok(Some(warehouse))
}

/// Headers the registrar sets itself: a `catalog_headers` entry may not replace them (the
/// credential options set `Authorization`; the client owns framing and idempotency).
const RESERVED_HEADERS: &[&str] = &[
    "authorization",
    "content-type",
    "content-length",
    "host",
    "idempotency-key",
    "transfer-encoding",
    "connection",
];

/// `catalog_headers`: a mapping of header names (HTTP tokens, not reserved) to one-line values.
fn headers(ctx: &Ctx, raw: &RawIceberg) -> Result<Vec<(String, Secret)>> {
    const KEY: &str = "config.catalog_headers";
    let entries: Option<serde_yaml_ng::Mapping> =
        ctx.optional_section(KEY, raw.catalog_headers.as_ref())?;
    let mut headers = Vec::new();
    for (name, value) in entries.into_iter().flatten() {
        let Some(name) = name.as_str().map(str::to_string) else {
            return Err(ctx.err(KEY, "header names must be strings"));
        };
        let key = format!("{KEY}.{name}");
        let valid_name = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !valid_name {
            return Err(ctx.err(
                &key,
                "is not a valid HTTP header name (letters, digits and !#$%&'*+-.^_`|~ only)",
            ));
        }
        if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
            return Err(ctx.err(
                &key,
                "is set by the registrar itself; use catalog_token or catalog_credential for \
                 Authorization, and remove this header",
            ));
        }
        let value = ctx
            .secret(&key, Some(&value))?
            .ok_or_else(|| ctx.err(&key, "needs a value"))?;
        check_credential(ctx, &key, value.expose())?;
        headers.push((name, value));
    }
    Ok(headers)
}

/// Rule 6.
fn ca_file(ctx: &Ctx, raw: &RawIceberg, https: bool) -> Result<Option<std::path::PathBuf>> {
    const KEY: &str = "config.catalog_ca_file";
    let Some(path) = ctx.path(KEY, raw.catalog_ca_file.as_ref())? else {
        return Ok(None);
    };
    if !https {
        return Err(ctx.err(
            KEY,
            "needs an https:// catalog_uri (a CA means nothing over plain http); use https:// or \
             remove catalog_ca_file",
        ));
    }
    tls::check_certificates(&path).map_err(|e| {
        ctx.err(
            KEY,
            format!("{e}; point it at a PEM bundle of the catalog's CA"),
        )
    })?;
    Ok(Some(path))
}

/// Rules 7, 8.
fn auth(
    ctx: &Ctx,
    raw: &RawIceberg,
    credential: Option<RawCredential>,
    sigv4: Option<RawSigV4>,
    catalog_uri: &SecretUrl,
) -> Result<CatalogAuth> {
    // Checked before resolving, so the conflict is reported even if the token's file is missing.
    if raw.catalog_token.is_some() && credential.is_some() {
        return Err(ctx.err(
            "config.catalog_token",
            "is set together with config.catalog_credential; use one of them, not both",
        ));
    }
    // A signed request carries no bearer token, and a bearer token would not be signed for:
    // only one way to authenticate can be meant.
    if sigv4.is_some() {
        let other = if raw.catalog_token.is_some() {
            Some("config.catalog_token")
        } else if credential.is_some() {
            Some("config.catalog_credential")
        } else {
            None
        };
        if let Some(other) = other {
            return Err(ctx.err(
                "config.catalog_sigv4",
                format!("is set together with {other}; use one of them, not both"),
            ));
        }
    }
    let token = ctx.secret("config.catalog_token", raw.catalog_token.as_ref())?;
    match (token, credential, sigv4) {
        (Some(token), _, _) => {
            check_token(ctx, "config.catalog_token", &token)?;
            Ok(CatalogAuth::Token(token))
        }
        (None, Some(credential), _) => Ok(CatalogAuth::Credential(oauth2_credential(
            ctx,
            credential,
            catalog_uri,
        )?)),
        (None, None, Some(sigv4)) => Ok(CatalogAuth::SigV4(sigv4_credential(ctx, sigv4)?)),
        (None, None, None) => Ok(CatalogAuth::None),
    }
}

/// `catalog_sigv4`: region and signing name go into the credential scope
/// (`{date}/{region}/{signing_name}/aws4_request`), where a `/` or a space would change what is
/// signed, so both are plain names; the keys are one-line secrets.
fn sigv4_credential(ctx: &Ctx, raw: RawSigV4) -> Result<SigV4Credential> {
    let scope_part = |key: &str, value: Option<&serde_yaml_ng::Value>, what: &str| {
        let text = ctx.required(key, value, what)?;
        if !is_scope_name(&text) {
            return Err(ctx.err(
                key,
                format!("must be lowercase letters, digits and `-` only ({what})"),
            ));
        }
        Ok(text)
    };
    let region = scope_part(
        "config.catalog_sigv4.region",
        raw.region.as_ref(),
        "the endpoint's AWS region, e.g. eu-west-1",
    )?;
    let signing_name = scope_part(
        "config.catalog_sigv4.signing_name",
        raw.signing_name.as_ref(),
        "the service the endpoint signs for: glue for Glue, s3tables for S3 Tables",
    )?;
    let key_part = |key: &str, value: Option<&serde_yaml_ng::Value>| -> Result<Secret> {
        match ctx.secret(key, value)? {
            Some(s) if s.expose().is_empty() => Err(ctx.err(
                key,
                "is empty (check the file or variable it comes from); set the AWS key",
            )),
            Some(s) => {
                check_credential(ctx, key, s.expose())?;
                Ok(s)
            }
            None => Err(ctx.err(key, "is required; set it with ${file:PATH} or ${env:NAME}")),
        }
    };
    let access_key_id = key_part(
        "config.catalog_sigv4.access_key_id",
        raw.access_key_id.as_ref(),
    )?;
    // The id is written into the credential scope, whose parts `/` separates.
    if access_key_id
        .expose()
        .chars()
        .any(|c| c == '/' || c == ',' || c.is_whitespace())
    {
        return Err(ctx.err(
            "config.catalog_sigv4.access_key_id",
            "must not contain `/`, `,` or spaces (an AWS access key id is letters and digits)",
        ));
    }
    let secret_access_key = key_part(
        "config.catalog_sigv4.secret_access_key",
        raw.secret_access_key.as_ref(),
    )?;
    let session_token = match raw.session_token.as_ref() {
        None | Some(serde_yaml_ng::Value::Null) => None,
        value => Some(key_part("config.catalog_sigv4.session_token", value)?),
    };
    Ok(SigV4Credential {
        region,
        signing_name,
        access_key_id,
        secret_access_key,
        session_token,
    })
}

/// A region or signing name: non-empty, lowercase ASCII letters, digits and `-`.
fn is_scope_name(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn check_token(ctx: &Ctx, key: &str, token: &Secret) -> Result<()> {
    if token.expose().is_empty() {
        return Err(ctx.err(
            key,
            "is empty (check the file or variable it comes from); set a token or remove the key",
        ));
    }
    // It becomes an HTTP header; a control character (a second newline in the file, say) would
    // fail every request later with a less helpful error.
    check_credential(ctx, key, token.expose())
}

/// Credentials travel in HTTP headers, form bodies and signatures, where a control character
/// (a stray second newline in a secret file, say) either breaks every request later with a less
/// helpful error or changes what is sent. The message never shows the value, nor which
/// character it was (that would be a piece of the secret).
fn check_credential(ctx: &Ctx, key: &str, value: &str) -> Result<()> {
    if value.chars().any(char::is_control) {
        return Err(ctx.err(
            key,
            "contains a line break or other control character; a credential is one line of \
             printable text (check the file or variable it comes from)",
        ));
    }
    Ok(())
}

fn oauth2_credential(
    ctx: &Ctx,
    raw: RawCredential,
    catalog_uri: &SecretUrl,
) -> Result<OAuth2Credential> {
    let client_id = ctx.required(
        "config.catalog_credential.client_id",
        raw.client_id.as_ref(),
        "set the OAuth2 client id",
    )?;
    check_credential(ctx, "config.catalog_credential.client_id", &client_id)?;
    if client_id.contains(':') {
        return Err(ctx.err(
            "config.catalog_credential.client_id",
            "must not contain `:` (it separates the id from the secret in client authentication)",
        ));
    }
    let client_secret = match ctx.secret(
        "config.catalog_credential.client_secret",
        raw.client_secret.as_ref(),
    )? {
        Some(secret) if !secret.expose().is_empty() => secret,
        Some(_) => {
            return Err(ctx.err(
                "config.catalog_credential.client_secret",
                "is empty (check the file or variable it comes from); set the client secret",
            ));
        }
        None => {
            return Err(ctx.err(
                "config.catalog_credential.client_secret",
                "is required; set it with ${file:PATH} or ${env:NAME}",
            ));
        }
    };
    check_credential(
        ctx,
        "config.catalog_credential.client_secret",
        client_secret.expose(),
    )?;
    let scope = ctx
        .optional("config.catalog_credential.scope", raw.scope.as_ref())?
        .unwrap_or_else(|| "catalog".to_owned());
    check_credential(ctx, "config.catalog_credential.scope", &scope)?;
    let oauth2_server_uri = match ctx.optional(
        "config.catalog_credential.oauth2_server_uri",
        raw.oauth2_server_uri.as_ref(),
    )? {
        Some(text) => urls::http_url(&text)
            .map_err(|e| ctx.err("config.catalog_credential.oauth2_server_uri", e))?
            .into(),
        None => {
            default_token_endpoint(catalog_uri).map_err(|e| ctx.err("config.catalog_uri", e))?
        }
    };
    let client_auth = match ctx
        .optional(
            "config.catalog_credential.client_auth",
            raw.client_auth.as_ref(),
        )?
        .as_deref()
    {
        None | Some("body") => ClientAuth::Body,
        Some("basic") => ClientAuth::Basic,
        Some(_) => {
            return Err(ctx.err(
                "config.catalog_credential.client_auth",
                "must be body (client_id and client_secret in the form body, the default) or \
                 basic (HTTP Basic, as some identity providers require)",
            ));
        }
    };
    Ok(OAuth2Credential {
        client_id,
        client_secret,
        scope,
        oauth2_server_uri,
        client_auth,
    })
}

/// `table_location: shipper | catalog`.
fn table_location(ctx: &Ctx, raw: &RawIceberg) -> Result<TableLocation> {
    match ctx
        .optional("config.table_location", raw.table_location.as_ref())?
        .as_deref()
    {
        None | Some("shipper") => Ok(TableLocation::Shipper),
        Some("catalog") => Ok(TableLocation::Catalog),
        Some(_) => Err(ctx.err(
            "config.table_location",
            "must be shipper (the table lives under the shipper's {url}/thadam/v1/{pipeline}/\
             {dataset}, the default) or catalog (the catalog chooses where a created table lives)",
        )),
    }
}

/// `{catalog_uri without trailing /}/v1/oauth/tokens`, the REST spec's token endpoint.
fn default_token_endpoint(catalog_uri: &SecretUrl) -> std::result::Result<SecretUrl, String> {
    let base = catalog_uri.expose().as_str().trim_end_matches('/');
    format!("{base}/v1/oauth/tokens")
        .parse::<SecretUrl>()
        .map_err(|e| format!("cannot derive the token endpoint from it ({e}); set catalog_credential.oauth2_server_uri"))
}

/// Rule 9.
fn client_identity(ctx: &Ctx, raw: &RawIceberg, https: bool) -> Result<Option<ClientIdentity>> {
    const CERT: &str = "config.catalog_client_cert";
    const KEY: &str = "config.catalog_client_key";
    let cert = ctx.path(CERT, raw.catalog_client_cert.as_ref())?;
    let key = ctx.path(KEY, raw.catalog_client_key.as_ref())?;
    let (cert, key) = match (cert, key) {
        (None, None) => return Ok(None),
        (Some(cert), Some(key)) => (cert, key),
        (Some(_), None) => {
            return Err(ctx.err(
                KEY,
                "is required with catalog_client_cert; set both or neither",
            ));
        }
        (None, Some(_)) => {
            return Err(ctx.err(
                CERT,
                "is required with catalog_client_key; set both or neither",
            ));
        }
    };
    if !https {
        return Err(ctx.err(
            CERT,
            "needs an https:// catalog_uri (a client certificate is presented only over TLS); use \
             https:// or remove catalog_client_cert and catalog_client_key",
        ));
    }
    tls::check_certificates(&cert).map_err(|e| {
        ctx.err(
            CERT,
            format!("{e}; point it at the client's PEM certificate chain"),
        )
    })?;
    tls::check_private_key(&key).map_err(|e| {
        ctx.err(
            KEY,
            format!("{e}; point it at the client certificate's PEM private key"),
        )
    })?;
    Ok(Some(ClientIdentity { cert, key }))
}

/// Rule 11: `a.b` is two levels; an empty level (`a..b`, `.a`, `a.`) is refused.
fn namespace(ctx: &Ctx, raw: &RawIceberg) -> Result<Vec<String>> {
    const KEY: &str = "config.namespace";
    let text = ctx.required(
        KEY,
        raw.namespace.as_ref(),
        "set the Iceberg namespace, e.g. robotics or a.b",
    )?;
    // Checked on the whole text first: a control character is never part of a name, and 0x1F
    // is the REST protocol's level separator, so `a\x1fb` would silently become two levels.
    if let Some(c) = text.chars().find(|c| c.is_control()) {
        return Err(ctx.err(
            KEY,
            format!(
                "contains the control character U+{:04X}; namespace levels are names separated \
                 by dots (check the file or variable it comes from)",
                u32::from(c)
            ),
        ));
    }
    let levels: Vec<String> = text.split('.').map(str::to_owned).collect();
    if levels.iter().any(String::is_empty) {
        return Err(ctx.err(
            KEY,
            format!("`{text}` has an empty level; write levels separated by single dots, e.g. a.b"),
        ));
    }
    Ok(levels)
}

/// Rule 13.
fn store(ctx: &Ctx, raw: RawStore) -> Result<StoreConfig> {
    let allow_http = ctx
        .flag("config.store.allow_http", raw.allow_http.as_ref())?
        .unwrap_or(false);
    let endpoint = match ctx.optional("config.store.endpoint", raw.endpoint.as_ref())? {
        None => None,
        Some(text) => {
            let url = urls::http_url(&text).map_err(|e| ctx.err("config.store.endpoint", e))?;
            if url.scheme() == "http" && !allow_http {
                return Err(ctx.err(
                    "config.store.endpoint",
                    format!(
                        "{url} is http:// but config.store.allow_http is not true; set \
                         store.allow_http: true or use an https:// endpoint"
                    ),
                ));
            }
            Some(url)
        }
    };
    let region = ctx.optional("config.store.region", raw.region.as_ref())?;
    let region_explicit = region.is_some();
    let region = region.unwrap_or_else(|| "us-east-1".to_owned());
    let access_key_id = ctx.secret("config.store.access_key_id", raw.access_key_id.as_ref())?;
    let secret_access_key = ctx.secret(
        "config.store.secret_access_key",
        raw.secret_access_key.as_ref(),
    )?;
    match (&access_key_id, &secret_access_key) {
        (Some(_), None) => {
            return Err(ctx.err(
                "config.store.secret_access_key",
                "is required with access_key_id; set both or neither",
            ));
        }
        (None, Some(_)) => {
            return Err(ctx.err(
                "config.store.access_key_id",
                "is required with secret_access_key; set both or neither",
            ));
        }
        _ => {}
    }
    for (key, secret) in [
        ("config.store.access_key_id", &access_key_id),
        ("config.store.secret_access_key", &secret_access_key),
    ] {
        if secret.as_ref().is_some_and(|s| s.expose().is_empty()) {
            return Err(ctx.err(
                key,
                "is empty (check the file or variable it comes from); set it or remove both keys",
            ));
        }
        if let Some(secret) = secret {
            check_credential(ctx, key, secret.expose())?;
        }
    }
    let credentials = store_credentials(ctx, &raw, access_key_id.is_some())?;
    Ok(StoreConfig {
        endpoint,
        region,
        region_explicit,
        allow_http,
        access_key_id,
        secret_access_key,
        credentials,
    })
}

/// `store.credentials: static | instance_metadata`. The instance metadata service is asked only
/// when named here, and never beside keys (which would always win).
fn store_credentials(
    ctx: &Ctx,
    raw: &RawStore,
    has_keys: bool,
) -> Result<super::types::StoreCredentials> {
    use super::types::StoreCredentials;
    const KEY: &str = "config.store.credentials";
    let credentials = match ctx.optional(KEY, raw.credentials.as_ref())?.as_deref() {
        None | Some("static") => StoreCredentials::Static,
        Some("instance_metadata") => StoreCredentials::InstanceMetadata,
        Some(_) => {
            return Err(ctx.err(
                KEY,
                "must be static (the default: store.access_key_id / store.secret_access_key, else \
                 the credentials or remote signing the catalog gives with each table) or \
                 instance_metadata (also ask the EC2 instance metadata service when neither \
                 applies)",
            ));
        }
    };
    if credentials == StoreCredentials::InstanceMetadata && has_keys {
        return Err(ctx.err(
            KEY,
            "is instance_metadata but store.access_key_id / store.secret_access_key are set too; \
             remove the keys to use the instance's role, or remove credentials to use the keys",
        ));
    }
    Ok(credentials)
}

/// Rule 14.
fn retry(ctx: &Ctx, raw: RawRetry) -> Result<RetryPolicy> {
    let defaults = RetryPolicy::default();
    let initial = ctx
        .duration("config.retry.initial", raw.initial.as_ref())?
        .unwrap_or(defaults.initial);
    let max = ctx
        .duration("config.retry.max", raw.max.as_ref())?
        .unwrap_or(defaults.max);
    let jitter = ctx
        .flag("config.retry.jitter", raw.jitter.as_ref())?
        .unwrap_or(defaults.jitter);
    if initial.is_zero() {
        return Err(ctx.err("config.retry.initial", "must be greater than 0, e.g. 1s"));
    }
    if max < initial {
        return Err(ctx.err(
            "config.retry.max",
            format!(
                "{} is less than retry.initial ({}); set max >= initial",
                humantime::format_duration(max),
                humantime::format_duration(initial)
            ),
        ));
    }
    Ok(RetryPolicy {
        initial,
        max,
        jitter,
    })
}

/// `commit`: batching limits.
fn commit(ctx: &Ctx, raw: RawCommit) -> Result<CommitPolicy> {
    let defaults = CommitPolicy::default();
    let max_segments = ctx
        .count("config.commit.max_segments", raw.max_segments.as_ref())?
        .map_or(defaults.max_segments, |n| n.min(100_000) as usize);
    let max_bytes = ctx
        .byte_size("config.commit.max_bytes", raw.max_bytes.as_ref())?
        .unwrap_or(defaults.max_bytes);
    let linger = ctx
        .duration("config.commit.linger", raw.linger.as_ref())?
        .unwrap_or(defaults.linger);
    if linger > std::time::Duration::from_secs(3600) {
        return Err(ctx.err(
            "config.commit.linger",
            "is over an hour; segments would wait that long to appear in the table",
        ));
    }
    let min_interval = ctx
        .duration("config.commit.min_interval", raw.min_interval.as_ref())?
        .unwrap_or(defaults.min_interval);
    if min_interval > std::time::Duration::from_secs(3600) {
        return Err(ctx.err(
            "config.commit.min_interval",
            "is over an hour; a segment could wait that long to appear in the table",
        ));
    }
    let intents = ctx
        .flag("config.commit.intents", raw.intents.as_ref())?
        .unwrap_or(defaults.intents);
    let intents_key = match ctx.secret("config.commit.intents_key", raw.intents_key.as_ref())? {
        // Tags with a guessable key prove nothing: at least 16 bytes (e.g. `openssl rand -hex 32`).
        Some(key) if key.expose().len() < 16 => {
            return Err(ctx.err(
                "config.commit.intents_key",
                "is shorter than 16 bytes; use a long random secret shared by the fleet's nodes                  (e.g. the output of `openssl rand -hex 32`, through ${file:PATH})",
            ));
        }
        key => key,
    };
    Ok(CommitPolicy {
        max_segments,
        max_bytes,
        linger,
        min_interval,
        intents,
        intents_key,
    })
}

/// `memory`: the bounds on what is held whatever the backlog.
fn memory(ctx: &Ctx, raw: RawMemory, commit: &CommitPolicy) -> Result<MemoryBudget> {
    let defaults = MemoryBudget::default();
    let segments = ctx
        .count("config.memory.segments", raw.segments.as_ref())?
        .map_or(defaults.segments, |n| n.min(10_000_000) as usize);
    if segments == 0 {
        return Err(ctx.err(
            "config.memory.segments",
            "must be at least 1 (how many uploaded segments are held at once, e.g. 4096)",
        ));
    }
    if segments < commit.max_segments {
        tracing::warn!(
            sink = ctx.sink,
            "memory.segments ({segments}) is below commit.max_segments ({}): snapshots will \
             carry at most {segments} segments",
            commit.max_segments
        );
    }
    let footer_bytes = ctx
        .byte_size("config.memory.footer_bytes", raw.footer_bytes.as_ref())?
        .unwrap_or(defaults.footer_bytes);
    if footer_bytes < 1 << 20 {
        return Err(ctx.err(
            "config.memory.footer_bytes",
            "must be at least 1MiB (the decoded footers held at once, e.g. 32MiB)",
        ));
    }
    Ok(MemoryBudget {
        segments,
        footer_bytes,
    })
}

/// Rule 17: credentials over plain http to another machine travel in cleartext. Allowed (demos
/// run that way) but said out loud. Loopback stays quiet: nothing leaves the host.
fn warn_cleartext(ctx: &Ctx, catalog_uri: &SecretUrl, auth: &CatalogAuth) {
    let exposed = |url: &SecretUrl| url.scheme() == "http" && !urls::is_loopback(url.expose());
    let (key, endpoints): (&str, Vec<&SecretUrl>) = match auth {
        CatalogAuth::None => return,
        CatalogAuth::Token(_) => ("catalog_token", vec![catalog_uri]),
        CatalogAuth::Credential(c) => (
            "catalog_credential",
            vec![catalog_uri, &c.oauth2_server_uri],
        ),
        // The secret key never travels, but a signed request can be replayed for minutes and a
        // session token does travel: the same rule as for a bearer token.
        CatalogAuth::SigV4(_) => ("catalog_sigv4", vec![catalog_uri]),
    };
    for url in endpoints.into_iter().filter(|u| exposed(u)) {
        tracing::warn!(
            sink = ctx.sink,
            key,
            endpoint = %url,
            "{key} is sent over plain http:// to a non-loopback host ({url}): credentials travel \
             in cleartext; use https://"
        );
    }
}
