//! S3 credentials: static keys that never print ([`S3Keys`]), where one client's signatures come
//! from ([`S3Credentials`]), what a catalog gives for a table ([`S3Access`]), and the
//! credential providers the client builder hands object_store: hidden keys, none at all (every
//! request `auth.failed`), and the instance metadata service behind a bound.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::Error;
use crate::io::signer::SharedSigner;
use crate::secret::Secret;

/// Static S3 keys: the `store` section's, the catalog's, or keys vended with a table. `Debug`
/// shows none of them.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Keys {
    pub access_key_id: Secret,
    pub secret_access_key: Secret,
    pub session_token: Option<Secret>,
}

impl std::fmt::Debug for S3Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("S3Keys(***)")
    }
}

/// Where the requests of one S3 client get their signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum S3Credentials {
    /// Static keys: the `store` section's, or keys the catalog vended for a table.
    Keys(S3Keys),
    /// Remote signing: every request is signed by the catalog's signer for the table.
    Signer(SharedSigner),
    /// `store.credentials: instance_metadata`: the machine's role, through object_store's
    /// provider (the EC2 instance metadata service; web identity when `AWS_WEB_IDENTITY_TOKEN_FILE`
    /// and `AWS_ROLE_ARN` are set), bounded: a source that refuses or does not answer is
    /// `auth.failed`, never retried forever.
    InstanceMetadata,
    /// None at all: every request fails at once with `auth.failed`, naming what to configure.
    /// Nothing ambient is ever asked.
    Missing,
}

#[derive(Clone, Debug)]
pub struct S3Access {
    /// [`S3Credentials::Keys`] or [`S3Credentials::Signer`].
    pub credentials: S3Credentials,
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub path_style: Option<bool>,
}

/// Why a store without keys cannot reach `bucket`: which keys are missing and the alternatives.
pub(crate) fn missing_credentials(bucket: &str) -> String {
    format!(
        "no S3 credentials for bucket {bucket}: store.access_key_id and store.secret_access_key \
         are not set, and the catalog gave neither credentials nor remote signing for this \
         table; set both keys (use ${{file:}} or ${{env:}}), or set store.credentials: \
         instance_metadata to use the machine's role, or have the catalog vend credentials \
         (catalog_headers: {{ X-Iceberg-Access-Delegation: vended-credentials }}) or sign \
         requests (s3.remote-signing-enabled) for the table. Nothing else (the instance metadata \
         service, AWS_* variables, ~/.aws) is asked unless configured"
    )
}

/// How long the instance metadata service (or web identity) may take to give credentials
/// before the store is `auth.failed`.
pub(super) const CREDENTIAL_SOURCE_TIMEOUT: Duration = Duration::from_secs(30);

/// The credential provider of a store that has none: every request fails at once, before
/// anything is sent, with `auth.failed` naming the missing keys ([`missing_credentials`]).
#[derive(Debug)]
pub(super) struct NoCredentials {
    pub(super) bucket: String,
}

#[async_trait]
impl object_store::CredentialProvider for NoCredentials {
    type Credential = object_store::aws::AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<Self::Credential>> {
        Err(object_store::Error::Generic {
            store: "S3",
            source: Box::new(Error::auth_failed(missing_credentials(&self.bucket))),
        })
    }
}

/// object_store's credential provider for `store.credentials: instance_metadata`, bounded: a
/// source that fails (after object_store's own retries) or takes over `timeout` is `auth.failed`
/// (a machine without an instance role never gets one by waiting).
#[derive(Debug)]
pub(super) struct BoundedSource {
    pub(super) inner: object_store::aws::AwsCredentialProvider,
    pub(super) timeout: Duration,
}

#[async_trait]
impl object_store::CredentialProvider for BoundedSource {
    type Credential = object_store::aws::AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<Self::Credential>> {
        let failed = |why: String| object_store::Error::Generic {
            store: "S3",
            source: Box::new(Error::auth_failed(format!(
                "store.credentials is instance_metadata, but {why}; run on a machine with an \
                 instance role (EC2 instance profile, or EKS web identity), or set \
                 store.access_key_id / store.secret_access_key instead"
            ))),
        };
        match tokio::time::timeout(self.timeout, self.inner.get_credential()).await {
            Ok(Ok(credential)) => Ok(credential),
            Ok(Err(e)) => Err(failed(format!(
                "the instance metadata service gave no credentials: {e}"
            ))),
            Err(_) => Err(failed(format!(
                "the instance metadata service did not answer within {}s",
                self.timeout.as_secs()
            ))),
        }
    }
}

/// A credential provider for object_store holding static keys, with a `Debug` that shows none.
pub(super) struct HiddenKeys(pub(super) Arc<object_store::aws::AwsCredential>);

impl std::fmt::Debug for HiddenKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HiddenKeys(***)")
    }
}

#[async_trait]
impl object_store::CredentialProvider for HiddenKeys {
    type Credential = object_store::aws::AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<Self::Credential>> {
        Ok(Arc::clone(&self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use crate::io::classify::{access_failure, classify_iceberg_io, classify_store_error};
    use crate::io::store::{S3Store, object_store_with};
    use object_store::ObjectStore;
    use object_store::path::Path as ObjectPath;

    #[tokio::test]
    async fn a_store_without_credentials_fails_before_sending_anything() {
        // Port 9 on loopback: were a request sent, it would be an outage, not auth.failed.
        let store = S3Store {
            endpoint: Some("http://127.0.0.1:9".parse().expect("url")),
            region: "us-east-1".into(),
            region_explicit: true,
            allow_http: true,
            credentials: S3Credentials::Missing,
        };
        let s3 = object_store_with(
            &store,
            "bucket-z",
            Some(object_store::RetryConfig {
                max_retries: 0,
                ..Default::default()
            }),
        )
        .expect("built");
        let err = s3
            .get(&ObjectPath::parse("k.parquet").expect("path"))
            .await
            .expect_err("no credentials");
        let err = classify_store_error(err, "bucket-z", "k.parquet");
        assert_eq!(err.code(), ErrorCode::AuthFailed, "{err}");
        for named in [
            "bucket-z",
            "store.access_key_id",
            "store.secret_access_key",
            "store.credentials: instance_metadata",
        ] {
            assert!(err.message().contains(named), "{named} not in {err}");
        }
        // The same through iceberg's FileIO classification.
        let failed = s3
            .put(&ObjectPath::parse("m.avro").expect("path"), "x".into())
            .await
            .expect_err("no credentials");
        let io = iceberg::Error::new(iceberg::ErrorKind::Unexpected, "writing").with_source(failed);
        assert_eq!(classify_iceberg_io(&io), Some(ErrorCode::AuthFailed));
    }

    /// A credential source that fails, or never answers.
    #[derive(Debug)]
    struct Source(bool);

    #[async_trait]
    impl object_store::CredentialProvider for Source {
        type Credential = object_store::aws::AwsCredential;

        async fn get_credential(&self) -> object_store::Result<Arc<Self::Credential>> {
            if self.0 {
                std::future::pending::<()>().await;
            }
            Err(object_store::Error::Generic {
                store: "S3",
                source: "connection refused (169.254.169.254)".into(),
            })
        }
    }

    #[tokio::test]
    async fn an_instance_metadata_service_that_fails_or_hangs_is_auth_failed_not_retried() {
        use object_store::CredentialProvider;
        for hangs in [false, true] {
            let bounded = BoundedSource {
                inner: Arc::new(Source(hangs)),
                timeout: Duration::from_millis(50),
            };
            let started = std::time::Instant::now();
            let err = bounded.get_credential().await.expect_err("no credentials");
            assert!(started.elapsed() < Duration::from_secs(5));
            let ours = access_failure(&err).expect("typed");
            assert_eq!(ours.code(), ErrorCode::AuthFailed, "{ours}");
            assert!(ours.message().contains("instance_metadata"), "{ours}");
            let io =
                iceberg::Error::new(iceberg::ErrorKind::Unexpected, "reading").with_source(err);
            assert_eq!(classify_iceberg_io(&io), Some(ErrorCode::AuthFailed));
        }
    }
}
