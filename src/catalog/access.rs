//! Vended credentials: the short-lived S3 keys a catalog (Polaris, Snowflake Open Catalog,
//! Lakekeeper, Nessie, Gravitino, Unity) returns with a table in `loadTable`, either as a list of
//! `storage-credentials` (`{prefix, config}`, the longest prefix matching an object's URI wins)
//! or in the table's `config` (`s3.access-key-id`, `s3.secret-access-key`, `s3.session-token`,
//! `s3.session-token-expires-at-ms`, perhaps `s3.endpoint` / `s3.region`). The REST spec says
//! clients check `storage-credentials` first and fall back to `config`.
//!
//! **One owner: the catalog client, per table.** [`TableAccess`] is built from each
//! `LoadTableResult` (a load, or the answer to a register) and kept by
//! [`crate::catalog::RestClient`] under the table's name. The client sees every answer that can
//! carry credentials and builds every `Table` handle, including those of commit answers (which
//! carry no config) and of the schema merger's commits, so keeping the last vended credentials
//! there means no `Table` is ever built without them, whoever committed. The committer only
//! reads them (for its footer reads, [`VendedCredentials::footer_store`]) and decides when to
//! reload the table for fresh ones: shortly before they expire ([`renew_at_ms`]) and once after
//! S3 refuses them ([`on_refusal`]).
//!
//! **Remote signing** (the REST "S3 signer" protocol; Nessie by default, Gravitino,
//! Lakekeeper): instead of keys, the table's config says `s3.remote-signing-enabled: true`, with
//! the signer at `s3.signer.uri` (default: the catalog URI) and `s3.signer.endpoint` (default
//! `v1/aws/s3/sign`); the table's config overrides the catalog's `GET /v1/config` (defaults, then
//! overrides), as Java merges them ([`SignerTarget::from_config`]). The signer `catalog::signer`
//! builds for it is kept in the same [`TableAccess`] and used where no vended keys apply: keys
//! are used when the catalog gives both (no round trip per request). A signer has no expiry we
//! can see; a refusal is handled like one of vended keys (one reload, then `auth.failed`).
//!
//! Every secret is a [`Secret`]; the `Debug` of these types shows prefixes, expiry and endpoint,
//! never a key, a secret or a token (object_store's own static provider would print the key id),
//! nor the signer's endpoint path (Nessie's carries a signed grant).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use iceberg_catalog_rest::StorageCredential;
use object_store::ObjectStore;

use crate::config::{Secret, StoreConfig};
use crate::error::Result;
use crate::io::credentials::{S3Access, S3Credentials, S3Keys};
use crate::io::signer::{RequestSigner, SharedSigner};

/// The `config` / `storage-credentials` keys of vended S3 credentials.
pub(crate) const ACCESS_KEY_ID: &str = "s3.access-key-id";
pub(crate) const SECRET_ACCESS_KEY: &str = "s3.secret-access-key";
pub(crate) const SESSION_TOKEN: &str = "s3.session-token";
pub(crate) const EXPIRES_AT_MS: &str = "s3.session-token-expires-at-ms";

/// The longest renewal margin: credentials are renewed at most this long before they expire.
pub(crate) const MAX_RENEWAL_MARGIN_MS: i64 = 5 * 60 * 1000;

/// The config keys of remote signing (Iceberg's `S3FileIOProperties` and the REST signer's).
pub(crate) const REMOTE_SIGNING_ENABLED: &str = "s3.remote-signing-enabled";
pub(crate) const SIGNER_URI: &str = "s3.signer.uri";
pub(crate) const SIGNER_ENDPOINT: &str = "s3.signer.endpoint";
/// The signer endpoint when the catalog names none (the protocol's path).
pub(crate) const DEFAULT_SIGNER_ENDPOINT: &str = "v1/aws/s3/sign";

/// Where a table's S3 requests are signed, as the catalog said.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct SignerTarget {
    /// `s3.signer.uri`; `None`: the catalog URI.
    pub uri: Option<String>,
    /// `s3.signer.endpoint`: a path under the URI, or a full `http(s)://` URL.
    pub endpoint: String,
}

impl std::fmt::Debug for SignerTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The endpoint path may be a grant (Nessie signs its parameters into it).
        f.debug_struct("SignerTarget")
            .field("uri", &self.uri)
            .field("endpoint", &"***")
            .finish()
    }
}

impl SignerTarget {
    /// Remote signing as the table's `config` says, over the catalog's (`GET /v1/config`
    /// defaults and overrides, merged); `None` unless `s3.remote-signing-enabled` is true.
    pub(crate) fn from_config(
        catalog: &HashMap<String, String>,
        table: &HashMap<String, String>,
    ) -> Option<SignerTarget> {
        let get = |key: &str| {
            table
                .get(key)
                .or_else(|| catalog.get(key))
                .map(|v| v.trim())
                .filter(|v| !v.is_empty())
        };
        if !get(REMOTE_SIGNING_ENABLED).is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return None;
        }
        Some(SignerTarget {
            uri: get(SIGNER_URI).map(str::to_string),
            endpoint: get(SIGNER_ENDPOINT)
                .unwrap_or(DEFAULT_SIGNER_ENDPOINT)
                .to_string(),
        })
    }

    /// The signer's URL: the endpoint alone when it is a full URL, else
    /// `{uri without trailing /}/{endpoint without leading /}`, `uri` defaulting to
    /// `catalog_uri` (Java's `RESTUtil.resolveEndpoint`). The endpoint is taken as the catalog
    /// wrote it: Nessie's is already percent-encoded.
    pub(crate) fn url(&self, catalog_uri: &str) -> String {
        let endpoint = self.endpoint.as_str();
        if endpoint.starts_with("http://") || endpoint.starts_with("https://") {
            return endpoint.to_string();
        }
        let base = self.uri.as_deref().unwrap_or(catalog_uri);
        format!(
            "{}/{}",
            base.trim_end_matches('/'),
            endpoint.trim_start_matches('/')
        )
    }
}

/// Makes the signer for a table's [`SignerTarget`] (the catalog client's, over its own HTTP
/// client and authentication).
pub(crate) type MakeSigner<'a> = &'a dyn Fn(&SignerTarget) -> Arc<dyn RequestSigner>;

/// One set of vended S3 credentials, or the table's remote signer.
pub(crate) struct VendedCredentials {
    /// The `storage-credentials` prefix they are for; `None` for those of the table's `config`
    /// (and for the signer), which apply wherever no prefix matches.
    prefix: Option<String>,
    /// The keys or the signer, and what the catalog says about the endpoint, region and
    /// path-style (the `store` section's settings win), as io takes them.
    s3: S3Access,
    /// `s3.session-token-expires-at-ms`, when the catalog said.
    expires_at_ms: Option<i64>,
    /// The object_store for footer reads with these credentials, built on first use and dropped
    /// with them when the table is reloaded.
    footer_store: OnceLock<Arc<dyn ObjectStore>>,
}

impl std::fmt::Debug for VendedCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (keys, session_token, signer) = match &self.s3.credentials {
            S3Credentials::Keys(keys) => (
                Some("***"),
                keys.session_token.as_ref().map(|_| "***"),
                None,
            ),
            S3Credentials::Signer(signer) => (None, None, Some(signer)),
            S3Credentials::InstanceMetadata | S3Credentials::Missing => (None, None, None),
        };
        f.debug_struct("VendedCredentials")
            .field("prefix", &self.prefix)
            .field("keys", &keys)
            .field("session_token", &session_token)
            .field("signer", &signer)
            .field("expires_at_ms", &self.expires_at_ms)
            .field("endpoint", &self.s3.endpoint)
            .field("region", &self.s3.region)
            .finish_non_exhaustive()
    }
}

impl VendedCredentials {
    /// The credentials in a `config` map, if it holds both keys.
    fn from_config(prefix: Option<String>, config: &HashMap<String, String>) -> Option<Self> {
        let id = config.get(ACCESS_KEY_ID).filter(|v| !v.is_empty())?;
        let secret = config.get(SECRET_ACCESS_KEY).filter(|v| !v.is_empty())?;
        let expires_at_ms = config.get(EXPIRES_AT_MS).and_then(|v| {
            let parsed = v.trim().parse::<i64>().ok();
            if parsed.is_none() {
                tracing::warn!(
                    "the catalog sent {EXPIRES_AT_MS} {v:?}, which is not a number of \
                     milliseconds; the credentials are renewed only when S3 refuses them"
                );
            }
            parsed
        });
        Some(VendedCredentials {
            prefix,
            s3: S3Access {
                credentials: S3Credentials::Keys(S3Keys {
                    access_key_id: Secret::new(id.clone()),
                    secret_access_key: Secret::new(secret.clone()),
                    session_token: config
                        .get(SESSION_TOKEN)
                        .filter(|v| !v.is_empty())
                        .map(|t| Secret::new(t.clone())),
                }),
                endpoint: config.get("s3.endpoint").cloned().filter(|v| !v.is_empty()),
                region: config.get("s3.region").cloned().filter(|v| !v.is_empty()),
                path_style: config
                    .get("s3.path-style-access")
                    .map(|v| v.eq_ignore_ascii_case("true")),
            },
            expires_at_ms,
            footer_store: OnceLock::new(),
        })
    }

    /// The signer for remote signing, with what the catalog's config and the table's say of
    /// placement (the table's wins; `client.region` over `s3.region`, as iceberg reads them).
    fn signing(
        signer: Arc<dyn RequestSigner>,
        catalog: &HashMap<String, String>,
        table: &HashMap<String, String>,
    ) -> Self {
        let get = |key: &str| {
            table
                .get(key)
                .or_else(|| catalog.get(key))
                .filter(|v| !v.is_empty())
                .cloned()
        };
        VendedCredentials {
            prefix: None,
            s3: S3Access {
                credentials: S3Credentials::Signer(SharedSigner(signer)),
                endpoint: get("s3.endpoint"),
                region: get("client.region").or_else(|| get("s3.region")),
                path_style: get("s3.path-style-access").map(|v| v.eq_ignore_ascii_case("true")),
            },
            expires_at_ms: None,
            footer_store: OnceLock::new(),
        }
    }

    /// The keys or signer and placement, for the FileIO and footer reads of the table's objects.
    pub(crate) fn s3(&self) -> &S3Access {
        &self.s3
    }

    #[cfg(test)]
    /// Whether these are the table's remote signer rather than keys.
    pub(crate) fn is_remote_signing(&self) -> bool {
        matches!(self.s3.credentials, S3Credentials::Signer(_))
    }

    #[cfg(test)]
    pub(crate) fn expires_at_ms(&self) -> Option<i64> {
        self.expires_at_ms
    }

    /// The object_store for footer reads with these credentials (built once).
    pub(crate) fn footer_store(
        &self,
        store: &StoreConfig,
        bucket: &str,
    ) -> Result<Arc<dyn ObjectStore>> {
        if let Some(s) = self.footer_store.get() {
            return Ok(Arc::clone(s));
        }
        let built = crate::io::store::vended_object_store(store, bucket, &self.s3)?;
        Ok(Arc::clone(self.footer_store.get_or_init(|| built)))
    }
}

/// The vended credentials of one table, as of one `loadTable` answer.
pub struct TableAccess {
    /// Increases with every answer that vended credentials (across the client's tables), so a
    /// failure can be told to be of credentials since replaced.
    generation: u64,
    /// When the answer arrived (ms since the epoch), for the renewal margin.
    loaded_at_ms: i64,
    /// From `storage-credentials`, each with its prefix.
    prefixed: Vec<VendedCredentials>,
    /// From the table's `config`.
    fallback: Option<VendedCredentials>,
    /// Remote signing, where no keys apply.
    signing: Option<VendedCredentials>,
}

impl std::fmt::Debug for TableAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableAccess")
            .field("generation", &self.generation)
            .field("loaded_at_ms", &self.loaded_at_ms)
            .field("prefixed", &self.prefixed)
            .field("fallback", &self.fallback)
            .field("signing", &self.signing)
            .finish()
    }
}

impl TableAccess {
    /// What a `loadTable` answer gives for the table's objects (vended credentials, remote
    /// signing, or both), `None` when it gives nothing. `catalog_config` is `GET /v1/config`'s
    /// (remote signing may be switched on there); `make_signer` makes the table's signer, `None`
    /// when `store` has credentials of its own (the signer is then not used).
    pub(crate) fn from_load(
        storage_credentials: Option<&[StorageCredential]>,
        config: &HashMap<String, String>,
        catalog_config: &HashMap<String, String>,
        make_signer: Option<MakeSigner<'_>>,
        generation: u64,
        loaded_at_ms: i64,
    ) -> Option<TableAccess> {
        let prefixed: Vec<VendedCredentials> = storage_credentials
            .unwrap_or_default()
            .iter()
            .filter_map(|c| VendedCredentials::from_config(Some(c.prefix.clone()), &c.config))
            .collect();
        let fallback = VendedCredentials::from_config(None, config);
        let signing = make_signer.and_then(|make_signer| {
            SignerTarget::from_config(catalog_config, config).map(|target| {
                VendedCredentials::signing(make_signer(&target), catalog_config, config)
            })
        });
        if prefixed.is_empty() && fallback.is_none() && signing.is_none() {
            return None;
        }
        Some(TableAccess {
            generation,
            loaded_at_ms,
            prefixed,
            fallback,
            signing,
        })
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether the catalog gave remote signing for the table (used where no keys apply).
    pub fn has_remote_signing(&self) -> bool {
        self.signing.is_some()
    }

    /// The credentials for an object or location URI: the `storage-credentials` entry with the
    /// longest prefix of it, else those of `config`, else the remote signer.
    pub(crate) fn for_uri(&self, uri: &str) -> Option<&VendedCredentials> {
        let prefixes: Vec<&str> = self
            .prefixed
            .iter()
            .map(|c| c.prefix.as_deref().unwrap_or_default())
            .collect();
        match longest_prefix(&prefixes, uri) {
            Some(i) => self.prefixed.get(i),
            None => self.fallback.as_ref().or(self.signing.as_ref()),
        }
    }

    /// The credentials for the table's own files (metadata, manifest lists, manifests), which
    /// iceberg writes under `{location}/metadata/`.
    pub(crate) fn for_table_files(&self, location: &str) -> Option<&VendedCredentials> {
        self.for_uri(&format!("{}/metadata/", location.trim_end_matches('/')))
    }

    /// When to reload the table for fresh credentials (ms since the epoch): before the first of
    /// them expires, by [`renew_at_ms`]; `None` when the catalog gave no expiry.
    pub(crate) fn renew_at_ms(&self) -> Option<i64> {
        self.prefixed
            .iter()
            .chain(self.fallback.as_ref())
            .filter_map(|c| c.expires_at_ms)
            .map(|expires| renew_at_ms(self.loaded_at_ms, expires))
            .min()
    }
}

/// The index of the longest of `prefixes` that `uri` starts with. `s3a://` and `s3n://` are the
/// same scheme as `s3://` (catalogs and engines write either). An empty prefix matches anything.
pub(crate) fn longest_prefix(prefixes: &[&str], uri: &str) -> Option<usize> {
    let uri = normalise_scheme(uri);
    prefixes
        .iter()
        .enumerate()
        .filter(|(_, p)| uri.starts_with(normalise_scheme(p).as_str()))
        .max_by_key(|(_, p)| normalise_scheme(p).len())
        .map(|(i, _)| i)
}

fn normalise_scheme(uri: &str) -> String {
    for scheme in ["s3a://", "s3n://"] {
        if let Some(rest) = uri.strip_prefix(scheme) {
            return format!("s3://{rest}");
        }
    }
    uri.to_string()
}

/// When credentials loaded at `loaded_at_ms` that expire at `expires_at_ms` are renewed: a
/// tenth of their lifetime before they expire (so that short-lived ones are not renewed
/// constantly), but no more than [`MAX_RENEWAL_MARGIN_MS`] (5 minutes) before. Credentials that
/// were already expired on arrival are due at once.
pub(crate) fn renew_at_ms(loaded_at_ms: i64, expires_at_ms: i64) -> i64 {
    let lifetime = expires_at_ms.saturating_sub(loaded_at_ms).max(0);
    let margin = (lifetime / 10).min(MAX_RENEWAL_MARGIN_MS);
    expires_at_ms.saturating_sub(margin)
}

/// What to do when S3 refused (401/403) a request made with the vended credentials of
/// generation `failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RefusalAction {
    /// The table has been reloaded since: retry with the credentials it holds now.
    Retry,
    /// Reload the table once for fresh credentials, then retry.
    Reload,
    /// Even the credentials of a reload made for this refusal were refused: `auth.failed`.
    Fatal,
}

/// The one rule for a refusal of vended credentials: `current` is the generation the client
/// holds now, `reloaded_for_refusal` the generation a reload after an earlier refusal brought
/// (cleared once a request with it succeeded).
pub(crate) fn on_refusal(
    failed: u64,
    current: u64,
    reloaded_for_refusal: Option<u64>,
) -> RefusalAction {
    if current != failed {
        RefusalAction::Retry
    } else if reloaded_for_refusal == Some(failed) {
        RefusalAction::Fatal
    } else {
        RefusalAction::Reload
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::signer::{SignRequest, Signed};

    /// A signer that is never asked (these tests only route to it).
    #[derive(Debug)]
    struct NeverAsked;

    #[async_trait::async_trait]
    impl RequestSigner for NeverAsked {
        async fn sign(&self, _: &SignRequest) -> Result<Signed> {
            Err(crate::error::Error::internal("not in these tests"))
        }
    }

    fn never(_: &SignerTarget) -> Arc<dyn RequestSigner> {
        Arc::new(NeverAsked)
    }

    /// `from_load` with no catalog config, loaded at 0.
    fn load(
        sc: Option<&[StorageCredential]>,
        config: &HashMap<String, String>,
        generation: u64,
    ) -> Option<TableAccess> {
        TableAccess::from_load(sc, config, &HashMap::new(), Some(&never), generation, 0)
    }

    fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn remote_signing_is_read_from_the_table_config_over_the_catalog_s() {
        let catalog = map(&[
            (REMOTE_SIGNING_ENABLED, "true"),
            (SIGNER_URI, "http://cat/"),
        ]);
        // The catalog switches it on; the table names its own endpoint.
        let t = SignerTarget::from_config(&catalog, &map(&[(SIGNER_ENDPOINT, "v1/x/s3sign/abc")]))
            .expect("on");
        assert_eq!(t.url("http://unused"), "http://cat/v1/x/s3sign/abc");
        // The table switches it off.
        assert!(
            SignerTarget::from_config(&catalog, &map(&[(REMOTE_SIGNING_ENABLED, "false")]))
                .is_none()
        );
        assert!(SignerTarget::from_config(&HashMap::new(), &HashMap::new()).is_none());
        // Defaults: the catalog URI and the protocol's path.
        let t =
            SignerTarget::from_config(&HashMap::new(), &map(&[(REMOTE_SIGNING_ENABLED, "TRUE")]))
                .expect("on");
        assert_eq!(
            t.url("https://cat.example/api/"),
            "https://cat.example/api/v1/aws/s3/sign"
        );
        // Nessie's: a base with a trailing slash, an encoded path kept as is.
        let t = SignerTarget {
            uri: Some("http://127.0.0.1:1/iceberg/".into()),
            endpoint: "/v1/main%7Cwh/s3sign/H4sI_x-y".into(),
        };
        assert_eq!(
            t.url("http://unused"),
            "http://127.0.0.1:1/iceberg/v1/main%7Cwh/s3sign/H4sI_x-y"
        );
        // A full URL stands alone.
        let t = SignerTarget {
            uri: Some("http://ignored".into()),
            endpoint: "https://signer.example/sign".into(),
        };
        assert_eq!(t.url("http://unused"), "https://signer.example/sign");
        assert!(!format!("{t:?}").contains("signer.example/sign"));
    }

    #[test]
    fn vended_keys_win_over_the_signer_which_applies_where_no_keys_do() {
        let signing = map(&[
            (REMOTE_SIGNING_ENABLED, "true"),
            (SIGNER_ENDPOINT, "v1/main/s3sign/GRANT-123"),
            ("client.region", "eu-north-1"),
            ("s3.region", "us-west-2"),
            ("s3.endpoint", "http://s3.local"),
        ]);
        let access = load(None, &signing, 3).expect("signing alone is access");
        let c = access
            .for_uri("s3://b/t/data/x.parquet")
            .expect("the signer");
        assert!(c.is_remote_signing());
        assert_eq!(c.s3().region.as_deref(), Some("eu-north-1"));
        assert_eq!(c.s3().endpoint.as_deref(), Some("http://s3.local"));
        assert_eq!(c.expires_at_ms(), None);
        assert_eq!(access.renew_at_ms(), None);
        assert!(access.for_table_files("s3://b/t").is_some());
        // Its Debug names the signer, never the grant in its endpoint.
        let shown = format!("{access:?}");
        assert!(!shown.contains("GRANT-123"), "{shown}");
        assert!(shown.contains("NeverAsked"), "{shown}");

        // Keys in the config too: they win.
        let mut both = signing.clone();
        both.extend(creds("AKIDBOTH", "s"));
        let access = load(None, &both, 4).expect("c");
        assert!(
            !access
                .for_uri("s3://b/x")
                .expect("keys")
                .is_remote_signing()
        );
        // Prefixed keys win where they match; the signer elsewhere.
        let sc = vec![StorageCredential {
            prefix: "s3://b/data/".into(),
            config: creds("AKIDPFX", "s"),
        }];
        let access = load(Some(&sc), &signing, 5).expect("c");
        assert!(
            !access
                .for_uri("s3://b/data/x")
                .expect("keys")
                .is_remote_signing()
        );
        assert!(
            access
                .for_uri("s3://b/meta/x")
                .expect("signer")
                .is_remote_signing()
        );
        // The catalog's config alone can switch it on.
        let access = TableAccess::from_load(
            None,
            &HashMap::new(),
            &map(&[(REMOTE_SIGNING_ENABLED, "true")]),
            Some(&never),
            6,
            0,
        )
        .expect("c");
        assert!(
            access
                .for_uri("s3://b/x")
                .expect("signer")
                .is_remote_signing()
        );
        // With credentials of our own (no signer to make), the offer is not taken.
        assert!(
            TableAccess::from_load(
                None,
                &HashMap::new(),
                &map(&[(REMOTE_SIGNING_ENABLED, "true")]),
                None,
                7,
                0,
            )
            .is_none()
        );
    }

    fn creds(id: &str, secret: &str) -> HashMap<String, String> {
        HashMap::from([
            (ACCESS_KEY_ID.to_string(), id.to_string()),
            (SECRET_ACCESS_KEY.to_string(), secret.to_string()),
            (SESSION_TOKEN.to_string(), format!("{id}-token")),
        ])
    }

    #[test]
    fn the_longest_matching_prefix_wins() {
        let prefixes = [
            "s3://b/",
            "s3://b/warehouse/ns/t",
            "s3://b/warehouse",
            "s3://other/",
        ];
        assert_eq!(
            longest_prefix(&prefixes, "s3://b/warehouse/ns/t/data/x.parquet"),
            Some(1)
        );
        assert_eq!(
            longest_prefix(&prefixes, "s3://b/warehouse/ns/u/x"),
            Some(2)
        );
        assert_eq!(longest_prefix(&prefixes, "s3://b/elsewhere"), Some(0));
        assert_eq!(longest_prefix(&prefixes, "s3://c/x"), None);
        assert_eq!(longest_prefix(&[], "s3://b/x"), None);
        // s3a:// and s3n:// name the same objects as s3://.
        assert_eq!(longest_prefix(&["s3a://b/w"], "s3://b/w/x"), Some(0));
        assert_eq!(longest_prefix(&["s3://b/w"], "s3n://b/w/x"), Some(0));
        assert_eq!(longest_prefix(&["", "s3://b"], "s3://b/x"), Some(1));
        assert_eq!(longest_prefix(&[""], "anything"), Some(0));
    }

    #[test]
    fn storage_credentials_come_before_config() {
        let sc = vec![
            StorageCredential {
                prefix: "s3://b/".into(),
                config: creds("short", "s1"),
            },
            StorageCredential {
                prefix: "s3://b/w/t".into(),
                config: creds("long", "s2"),
            },
            // Incomplete: no secret, so not credentials at all.
            StorageCredential {
                prefix: "s3://b/w/t/data".into(),
                config: HashMap::from([(ACCESS_KEY_ID.to_string(), "x".to_string())]),
            },
        ];
        let access = load(Some(&sc), &creds("config", "s3"), 7).expect("credentials");
        let id = |uri: &str| {
            access.for_uri(uri).map(|c| match &c.s3.credentials {
                S3Credentials::Keys(k) => k.access_key_id.expose().to_string(),
                other => format!("{other:?}"),
            })
        };
        assert_eq!(id("s3://b/w/t/data/x.parquet").as_deref(), Some("long"));
        assert_eq!(id("s3://b/w/u/x.parquet").as_deref(), Some("short"));
        assert_eq!(id("s3://c/x").as_deref(), Some("config"));
        assert_eq!(access.generation(), 7);

        let only_config = load(None, &creds("config", "s3"), 1).expect("c");
        assert!(only_config.for_uri("s3://any/x").is_some());
        assert!(load(Some(&[]), &HashMap::new(), 1).is_none());
    }

    #[test]
    fn the_renewal_margin_is_a_tenth_of_the_lifetime_capped_at_five_minutes() {
        let minute = 60_000;
        // One hour: 5 minutes before (a tenth would be 6).
        assert_eq!(renew_at_ms(0, 60 * minute), 55 * minute);
        // Twelve hours: still 5 minutes.
        assert_eq!(
            renew_at_ms(1_000, 1_000 + 720 * minute),
            1_000 + 715 * minute
        );
        // Ten minutes: one minute before.
        assert_eq!(renew_at_ms(0, 10 * minute), 9 * minute);
        // Already expired on arrival: due at its expiry, which has passed.
        assert_eq!(renew_at_ms(10 * minute, 5 * minute), 5 * minute);
        assert_eq!(renew_at_ms(0, 0), 0);
        assert_eq!(
            renew_at_ms(i64::MIN, i64::MAX),
            i64::MAX - MAX_RENEWAL_MARGIN_MS
        );
    }

    #[test]
    fn renewal_follows_the_first_expiry() {
        let mut early = creds("a", "b");
        early.insert(EXPIRES_AT_MS.into(), "600000".into());
        let mut late = creds("c", "d");
        late.insert(EXPIRES_AT_MS.into(), "6000000".into());
        let sc = vec![StorageCredential {
            prefix: "s3://b/".into(),
            config: late,
        }];
        let access = load(Some(&sc), &early, 1).expect("c");
        assert_eq!(access.renew_at_ms(), Some(540_000));
        let mut bad = creds("a", "b");
        bad.insert(EXPIRES_AT_MS.into(), "soon".into());
        let access = load(None, &bad, 1).expect("c");
        assert_eq!(access.renew_at_ms(), None);
    }

    #[test]
    fn a_refusal_is_retried_reloaded_once_then_fatal() {
        use RefusalAction::*;
        assert_eq!(on_refusal(3, 4, None), Retry, "already reloaded since");
        assert_eq!(on_refusal(3, 4, Some(4)), Retry);
        assert_eq!(on_refusal(3, 3, None), Reload);
        assert_eq!(on_refusal(3, 3, Some(2)), Reload);
        assert_eq!(on_refusal(4, 4, Some(4)), Fatal);
    }

    #[test]
    fn no_debug_output_shows_a_secret() {
        let mut config = creds("AKIDVENDED123", "vended-secret-xyz");
        config.insert("s3.endpoint".into(), "http://s3.local".into());
        let sc = vec![StorageCredential {
            prefix: "s3://b/".into(),
            config: creds("AKIDPREFIXED456", "prefixed-secret-abc"),
        }];
        let access = load(Some(&sc), &config, 1).expect("c");
        let shown = format!("{access:?} {:?}", access.for_uri("s3://b/x"));
        for secret in [
            "AKIDVENDED123",
            "vended-secret-xyz",
            "AKIDVENDED123-token",
            "AKIDPREFIXED456",
            "prefixed-secret-abc",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("s3://b/"), "{shown}");
        assert!(shown.contains("http://s3.local"), "{shown}");
    }
}
