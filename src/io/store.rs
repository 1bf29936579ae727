//! S3 access for the registrar: the one `object_store` client builder ([`build_object_store`])
//! behind footer reads and iceberg's FileIO (metadata, manifest lists, manifests; see
//! [`crate::io::file_io`]). Both start from the same configured store ([`S3Store`], which the
//! caller makes from the `store:` section), so they reach the same bucket with the same
//! credentials, TLS stack and connection bounds.
//!
//! The rest of a client lives beside this file: object keys ([`crate::io::keys`]), what an S3
//! status means ([`crate::io::status`]), the HTTP connector that types refusals and has requests
//! signed remotely (`connector`), credentials and their providers ([`crate::io::credentials`]),
//! and how failures are classified ([`crate::io::classify`]).

use std::sync::Arc;
use std::time::Duration;

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::client::ClientOptions;
use url::Url;

use crate::error::{Error, Result};
use crate::io::connector::TypedStatusConnector;
use crate::io::credentials::{BoundedSource, CREDENTIAL_SOURCE_TIMEOUT, HiddenKeys, NoCredentials};

// Where the tests and examples find them.
pub use crate::io::classify::classify_iceberg_io;
pub use crate::io::credentials::{S3Access, S3Credentials, S3Keys};
pub use crate::io::keys::object_path;

/// The configured store as io sees it: where the bucket is and what signs its requests when the
/// catalog gives nothing for a table. The caller makes it from the `store:` section (the
/// conversion lives in `config`); io reads no configuration itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Store {
    /// A custom endpoint (MinIO, SeaweedFS); `None` means AWS.
    pub endpoint: Option<Url>,
    pub region: String,
    /// Whether `region` was set (otherwise a region the catalog sends for a table applies).
    pub region_explicit: bool,
    /// Whether an `http://` endpoint is allowed.
    pub allow_http: bool,
    /// What the store alone gives: its keys ([`S3Credentials::Keys`]), the machine's role
    /// ([`S3Credentials::InstanceMetadata`]) when asked for, else [`S3Credentials::Missing`].
    pub credentials: S3Credentials,
}

impl From<&S3Store> for S3Store {
    fn from(store: &S3Store) -> S3Store {
        store.clone()
    }
}

/// How one bucket is reached and signed for, resolved: what [`build_object_store`] turns into a
/// client. Footer reads and iceberg's FileIO both go through it.
#[derive(Clone, Debug)]
pub(crate) struct S3Settings {
    pub region: String,
    /// A custom endpoint (MinIO, a local server); `None`: AWS.
    pub endpoint: Option<String>,
    /// `bucket.host` requests rather than path-style `host/bucket`.
    pub virtual_hosted: bool,
    pub allow_http: bool,
    /// How requests are signed. object_store is always built without `from_env`, so no `AWS_*`
    /// variable, container credentials or `~/.aws` file is read.
    pub credentials: S3Credentials,
    /// object_store's own retry settings replaced (tests: no retries).
    pub retry: Option<object_store::RetryConfig>,
}

impl S3Settings {
    /// The settings of footer reads: the `store` section's, and for a table the catalog gives
    /// access to, its keys or signer, with the catalog's endpoint, region and path-style where
    /// `store` sets none. A custom `store` endpoint is addressed path-style, which is what such
    /// servers expect.
    pub(crate) fn for_footers(store: &S3Store, vended: Option<&S3Access>) -> S3Settings {
        let region = match vended.and_then(|v| v.region.as_deref()) {
            Some(catalog_region) if !store.region_explicit => catalog_region.to_string(),
            _ => store.region.clone(),
        };
        let (endpoint, virtual_hosted) = match (&store.endpoint, vended) {
            (Some(endpoint), _) => (Some(endpoint.as_str().to_string()), false),
            (None, Some(v)) if v.endpoint.is_some() => {
                (v.endpoint.clone(), !v.path_style.unwrap_or(true))
            }
            _ => (None, false),
        };
        let credentials = match vended {
            Some(v) => v.credentials.clone(),
            None => store.credentials.clone(),
        };
        S3Settings {
            region,
            endpoint,
            virtual_hosted,
            allow_http: store.allow_http,
            credentials,
            retry: None,
        }
    }
}

/// Deletes `objects` with the store's bulk delete (S3 `DeleteObjects`, a thousand keys a
/// request; object_store's default for other stores is one DELETE per key). The first failure,
/// other than an object that is not there, is the answer: the caller decides whether to go one
/// by one (some S3-compatible stores, and some remote signers, refuse the bulk call).
pub(crate) async fn delete_in_bulk(
    store: &Arc<dyn ObjectStore>,
    objects: &[object_store::path::Path],
) -> object_store::Result<()> {
    use futures::StreamExt;
    let stream = futures::stream::iter(objects.iter().cloned().map(Ok)).boxed();
    let mut results = store.delete_stream(stream);
    while let Some(result) = results.next().await {
        match result {
            Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The bucket as an `ObjectStore` for footer reads. S3 refusals object_store has no variant for
/// come back as a typed `io::status::S3Refusal` in the error chain (see
/// `io::classify::classify_store_error`).
pub fn object_store(store: impl Into<S3Store>, bucket: &str) -> Result<Arc<dyn ObjectStore>> {
    object_store_with(store, bucket, None)
}

/// [`object_store()`], from the clients the registrars of this process share
/// ([`crate::io::clients::shared`]): the one a FileIO of the same settings uses too.
pub(crate) fn shared_object_store(
    store: impl Into<S3Store>,
    bucket: &str,
) -> Result<Arc<dyn ObjectStore>> {
    crate::io::clients::shared().get(&S3Settings::for_footers(&store.into(), None), bucket)
}

/// [`object_store`] with object_store's own retry settings replaced (tests: no retries).
#[doc(hidden)]
pub fn object_store_with(
    store: impl Into<S3Store>,
    bucket: &str,
    retry: Option<object_store::RetryConfig>,
) -> Result<Arc<dyn ObjectStore>> {
    let mut settings = S3Settings::for_footers(&store.into(), None);
    settings.retry = retry;
    build_object_store(&settings, bucket)
}

/// The bucket as an `ObjectStore` that signs with credentials the catalog vended for a table
/// (footer reads of that table's objects), see [`S3Settings::for_footers`].
pub(crate) fn vended_object_store(
    store: impl Into<S3Store>,
    bucket: &str,
    vended: &S3Access,
) -> Result<Arc<dyn ObjectStore>> {
    build_object_store(
        &S3Settings::for_footers(&store.into(), Some(vended)),
        bucket,
    )
}

/// Connection bounds of every S3 client, the same as the catalog client's (`catalog::tls`): a
/// peer that does not accept a connection in 10 s, or a request that takes over 60 s (a
/// manifest or footer is small), fails and is retried by object_store, then by the registrar.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The one S3 client builder: footer reads and iceberg's FileIO (one per bucket) are built
/// here, so they share the TLS stack (object_store's reqwest with ring), the connection bounds,
/// the typed refusals ([`S3Refusal`]) and how keys are carried (a provider whose `Debug` hides
/// them; object_store's static one prints the key id).
///
/// [`S3Refusal`]: crate::io::status::S3Refusal
pub(crate) fn build_object_store(
    settings: &S3Settings,
    bucket: &str,
) -> Result<Arc<dyn ObjectStore>> {
    let options = ClientOptions::new()
        .with_allow_http(settings.allow_http)
        .with_connect_timeout(CONNECT_TIMEOUT)
        .with_timeout(REQUEST_TIMEOUT)
        .with_pool_idle_timeout(POOL_IDLE_TIMEOUT);
    let mut builder = AmazonS3Builder::new()
        .with_bucket_name(bucket)
        .with_region(&settings.region)
        .with_client_options(options);
    let mut virtual_hosted = settings.virtual_hosted;
    if let Some(endpoint) = &settings.endpoint {
        let endpoint = endpoint.trim_end_matches('/');
        let endpoint = match virtual_hosted.then(|| virtual_host_endpoint(endpoint, bucket)) {
            Some(Some(bucket_endpoint)) => bucket_endpoint,
            // An IP address (or no URL at all) has no bucket subdomain: path-style.
            Some(None) => {
                virtual_hosted = false;
                endpoint.to_string()
            }
            None => endpoint.to_string(),
        };
        builder = builder.with_endpoint(endpoint);
    }
    builder = builder.with_virtual_hosted_style_request(virtual_hosted);
    if let Some(retry) = &settings.retry {
        builder = builder.with_retry(retry.clone());
    }
    let config_error = |e: object_store::Error| {
        // object_store's config errors name keys, not values.
        Error::config_invalid(format!(
            "store: cannot configure S3 access to bucket {bucket}: {e}"
        ))
    };
    // Counted: this client's requests are the store's. The probe below is not: it only lends
    // its credential provider, whose requests go to the instance metadata service.
    let mut connector = TypedStatusConnector {
        counted: true,
        ..TypedStatusConnector::default()
    };
    builder = match &settings.credentials {
        S3Credentials::Keys(keys) => builder.with_credentials(Arc::new(HiddenKeys(Arc::new(
            object_store::aws::AwsCredential {
                key_id: keys.access_key_id.expose().to_string(),
                secret_key: keys.secret_access_key.expose().to_string(),
                token: keys.session_token.as_ref().map(|t| t.expose().to_string()),
            },
        )))),
        S3Credentials::Signer(signer) => {
            connector.signer = Some((signer.clone(), settings.region.clone()));
            builder.with_skip_signature(true)
        }
        S3Credentials::InstanceMetadata => {
            // object_store's own provider for a store built without keys (it is not public),
            // behind a bound.
            let probe = builder
                .clone()
                .with_http_connector(TypedStatusConnector::default())
                .build()
                .map_err(config_error)?;
            builder.with_credentials(Arc::new(BoundedSource {
                inner: Arc::clone(probe.credentials()),
                timeout: CREDENTIAL_SOURCE_TIMEOUT,
            }))
        }
        S3Credentials::Missing => builder.with_credentials(Arc::new(NoCredentials {
            bucket: bucket.to_string(),
        })),
    };
    let s3 = builder
        .with_http_connector(connector)
        .build()
        .map_err(config_error)?;
    Ok(Arc::new(s3))
}

/// The endpoint of `bucket` on a custom S3 server addressed virtual-hosted style
/// (`https://host` → `https://bucket.host`; object_store expects the bucket in a virtual-hosted
/// endpoint), or `None` when the host is an IP address (no subdomains) or not a URL.
fn virtual_host_endpoint(endpoint: &str, bucket: &str) -> Option<String> {
    let mut url = url::Url::parse(endpoint).ok()?;
    let host = match url.host()? {
        url::Host::Domain(host) => host.to_string(),
        url::Host::Ipv4(_) | url::Host::Ipv6(_) => return None,
    };
    if !host.starts_with(&format!("{bucket}.")) {
        url.set_host(Some(&format!("{bucket}.{host}"))).ok()?;
    }
    Some(url.as_str().trim_end_matches('/').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::Secret;

    fn store_config(access_key_id: Option<&str>) -> S3Store {
        S3Store {
            endpoint: Some("http://127.0.0.1:9000".parse().expect("url")),
            region: "us-east-1".into(),
            region_explicit: true,
            allow_http: true,
            credentials: match access_key_id {
                Some(id) => S3Credentials::Keys(S3Keys {
                    access_key_id: Secret::new(id),
                    secret_access_key: Secret::new("store-secret-456"),
                    session_token: None,
                }),
                None => S3Credentials::Missing,
            },
        }
    }

    fn vended(endpoint: Option<&str>, path_style: Option<bool>) -> S3Access {
        S3Access {
            credentials: S3Credentials::Keys(S3Keys {
                access_key_id: Secret::new("AKIDVENDED789"),
                secret_access_key: Secret::new("vended-secret-789"),
                session_token: Some(Secret::new("vended-token-789")),
            }),
            endpoint: endpoint.map(str::to_string),
            region: Some("eu-west-3".to_string()),
            path_style,
        }
    }

    #[test]
    fn no_store_shows_its_keys_in_debug() {
        let s3 = vended_object_store(store_config(None), "b", &vended(None, None)).expect("store");
        let own = object_store(store_config(Some("AKIDSTORE456")), "b").expect("store");
        let shown = format!("{s3:?} {own:?} {:?}", vended(None, None));
        for secret in [
            "AKIDVENDED789",
            "vended-secret-789",
            "vended-token-789",
            "AKIDSTORE456",
            "store-secret-456",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("HiddenKeys(***)"), "{shown}");
    }

    #[test]
    fn footer_settings_let_the_store_section_win_over_the_catalog() {
        let store = store_config(Some("AKIDSTORE456"));
        let own = S3Settings::for_footers(&store, None);
        assert_eq!(own.endpoint.as_deref(), Some("http://127.0.0.1:9000/"));
        assert!(!own.virtual_hosted);
        let id = |s: &S3Settings| match &s.credentials {
            S3Credentials::Keys(k) => Some(k.access_key_id.expose().to_string()),
            _ => None,
        };
        assert_eq!(id(&own).as_deref(), Some("AKIDSTORE456"));
        // Vended keys replace the store's; the store's endpoint and explicit region stay.
        let with = S3Settings::for_footers(&store, Some(&vended(Some("https://s3.cat"), None)));
        assert_eq!(id(&with).as_deref(), Some("AKIDVENDED789"));
        assert_eq!(with.endpoint, own.endpoint);
        assert_eq!(with.region, "us-east-1");
        // Where the store sets none, the catalog's placement applies.
        let bare = S3Store {
            endpoint: None,
            region_explicit: false,
            ..store
        };
        let with =
            S3Settings::for_footers(&bare, Some(&vended(Some("https://s3.cat"), Some(false))));
        assert_eq!(with.endpoint.as_deref(), Some("https://s3.cat"));
        assert!(with.virtual_hosted);
        assert_eq!(with.region, "eu-west-3");
    }

    #[test]
    fn virtual_hosted_endpoints_carry_the_bucket_in_the_host() {
        assert_eq!(
            virtual_host_endpoint("https://s3.example.com", "b").as_deref(),
            Some("https://b.s3.example.com")
        );
        assert_eq!(
            virtual_host_endpoint("https://b.s3.example.com:8443", "b").as_deref(),
            Some("https://b.s3.example.com:8443")
        );
        assert_eq!(virtual_host_endpoint("http://127.0.0.1:9000", "b"), None);
        assert_eq!(virtual_host_endpoint("not a url", "b"), None);
    }
}
