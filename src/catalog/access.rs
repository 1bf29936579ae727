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
//! Every secret is a [`Secret`]; the `Debug` of these types shows prefixes, expiry and endpoint,
//! never a key, a secret or a token (object_store's own static provider would print the key id).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use iceberg_catalog_rest::StorageCredential;
use object_store::ObjectStore;

use crate::config::{Secret, StoreConfig};
use crate::error::Result;
use crate::io::store::{S3Access, S3Keys};

/// The `config` / `storage-credentials` keys of vended S3 credentials.
pub const ACCESS_KEY_ID: &str = "s3.access-key-id";
pub const SECRET_ACCESS_KEY: &str = "s3.secret-access-key";
pub const SESSION_TOKEN: &str = "s3.session-token";
pub const EXPIRES_AT_MS: &str = "s3.session-token-expires-at-ms";

/// The longest renewal margin: credentials are renewed at most this long before they expire.
pub const MAX_RENEWAL_MARGIN_MS: i64 = 5 * 60 * 1000;

/// One set of vended S3 credentials.
pub struct VendedCredentials {
    /// The `storage-credentials` prefix they are for; `None` for those of the table's `config`,
    /// which apply wherever no prefix matches.
    prefix: Option<String>,
    /// The keys, and what the catalog says about the endpoint, region and path-style (the
    /// `store` section's settings win), as io takes them.
    s3: S3Access,
    /// `s3.session-token-expires-at-ms`, when the catalog said.
    expires_at_ms: Option<i64>,
    /// The object_store for footer reads with these credentials, built on first use and dropped
    /// with them when the table is reloaded.
    footer_store: OnceLock<Arc<dyn ObjectStore>>,
}

impl std::fmt::Debug for VendedCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VendedCredentials")
            .field("prefix", &self.prefix)
            .field("keys", &"***")
            .field(
                "session_token",
                &self.s3.keys.session_token.as_ref().map(|_| "***"),
            )
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
                keys: S3Keys {
                    access_key_id: Secret::new(id.clone()),
                    secret_access_key: Secret::new(secret.clone()),
                    session_token: config
                        .get(SESSION_TOKEN)
                        .filter(|v| !v.is_empty())
                        .map(|t| Secret::new(t.clone())),
                },
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

    /// The keys and placement, for the FileIO and footer reads of the table's objects.
    pub fn s3(&self) -> &S3Access {
        &self.s3
    }

    pub fn expires_at_ms(&self) -> Option<i64> {
        self.expires_at_ms
    }

    /// The object_store for footer reads with these credentials (built once).
    pub fn footer_store(&self, store: &StoreConfig, bucket: &str) -> Result<Arc<dyn ObjectStore>> {
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
}

impl std::fmt::Debug for TableAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableAccess")
            .field("generation", &self.generation)
            .field("loaded_at_ms", &self.loaded_at_ms)
            .field("prefixed", &self.prefixed)
            .field("fallback", &self.fallback)
            .finish()
    }
}

impl TableAccess {
    /// The vended credentials of a `loadTable` answer, `None` when it vended none.
    pub fn from_load(
        storage_credentials: Option<&[StorageCredential]>,
        config: &HashMap<String, String>,
        generation: u64,
        loaded_at_ms: i64,
    ) -> Option<TableAccess> {
        let prefixed: Vec<VendedCredentials> = storage_credentials
            .unwrap_or_default()
            .iter()
            .filter_map(|c| VendedCredentials::from_config(Some(c.prefix.clone()), &c.config))
            .collect();
        let fallback = VendedCredentials::from_config(None, config);
        if prefixed.is_empty() && fallback.is_none() {
            return None;
        }
        Some(TableAccess {
            generation,
            loaded_at_ms,
            prefixed,
            fallback,
        })
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The credentials for an object or location URI: the `storage-credentials` entry with the
    /// longest prefix of it, else those of `config`.
    pub fn for_uri(&self, uri: &str) -> Option<&VendedCredentials> {
        let prefixes: Vec<&str> = self
            .prefixed
            .iter()
            .map(|c| c.prefix.as_deref().unwrap_or_default())
            .collect();
        match longest_prefix(&prefixes, uri) {
            Some(i) => self.prefixed.get(i),
            None => self.fallback.as_ref(),
        }
    }

    /// The credentials for the table's own files (metadata, manifest lists, manifests), which
    /// iceberg writes under `{location}/metadata/`.
    pub fn for_table_files(&self, location: &str) -> Option<&VendedCredentials> {
        self.for_uri(&format!("{}/metadata/", location.trim_end_matches('/')))
    }

    /// When to reload the table for fresh credentials (ms since the epoch): before the first of
    /// them expires, by [`renew_at_ms`]; `None` when the catalog gave no expiry.
    pub fn renew_at_ms(&self) -> Option<i64> {
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
pub fn longest_prefix(prefixes: &[&str], uri: &str) -> Option<usize> {
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
pub fn renew_at_ms(loaded_at_ms: i64, expires_at_ms: i64) -> i64 {
    let lifetime = expires_at_ms.saturating_sub(loaded_at_ms).max(0);
    let margin = (lifetime / 10).min(MAX_RENEWAL_MARGIN_MS);
    expires_at_ms.saturating_sub(margin)
}

/// What to do when S3 refused (401/403) a request made with the vended credentials of
/// generation `failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalAction {
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
pub fn on_refusal(failed: u64, current: u64, reloaded_for_refusal: Option<u64>) -> RefusalAction {
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
        let access =
            TableAccess::from_load(Some(&sc), &creds("config", "s3"), 7, 0).expect("credentials");
        let id = |uri: &str| {
            access
                .for_uri(uri)
                .map(|c| c.s3.keys.access_key_id.expose().to_string())
        };
        assert_eq!(id("s3://b/w/t/data/x.parquet").as_deref(), Some("long"));
        assert_eq!(id("s3://b/w/u/x.parquet").as_deref(), Some("short"));
        assert_eq!(id("s3://c/x").as_deref(), Some("config"));
        assert_eq!(access.generation(), 7);

        let only_config = TableAccess::from_load(None, &creds("config", "s3"), 1, 0).expect("c");
        assert!(only_config.for_uri("s3://any/x").is_some());
        assert!(TableAccess::from_load(Some(&[]), &HashMap::new(), 1, 0).is_none());
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
        let access = TableAccess::from_load(Some(&sc), &early, 1, 0).expect("c");
        assert_eq!(access.renew_at_ms(), Some(540_000));
        let mut bad = creds("a", "b");
        bad.insert(EXPIRES_AT_MS.into(), "soon".into());
        let access = TableAccess::from_load(None, &bad, 1, 0).expect("c");
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
        let access = TableAccess::from_load(Some(&sc), &config, 1, 0).expect("c");
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
