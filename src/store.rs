//! S3 access for the registrar: an `object_store` client for footer reads and the FileIO
//! properties iceberg uses for metadata and manifests. Both come from the same `store:` config,
//! so they reach the same bucket with the same credentials.

use std::collections::HashMap;
use std::sync::Arc;

use iceberg_storage_opendal::{AwsCredential, CustomAwsCredentialLoader, ProvideCredential};
use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;

use crate::config::{Secret, StoreConfig};
use crate::error::{Error, Result};

/// The bucket as an `ObjectStore`. A custom endpoint (a local or self-hosted S3) is addressed
/// path-style, which is what such servers expect; AWS itself gets virtual-hosted requests.
pub fn object_store(store: &StoreConfig, bucket: &str) -> Result<Arc<dyn ObjectStore>> {
    let mut builder = AmazonS3Builder::new()
        .with_bucket_name(bucket)
        .with_region(&store.region)
        .with_allow_http(store.allow_http);
    if let Some(endpoint) = &store.endpoint {
        builder = builder
            .with_endpoint(endpoint.as_str().trim_end_matches('/'))
            .with_virtual_hosted_style_request(false);
    }
    if let (Some(id), Some(secret)) = (&store.access_key_id, &store.secret_access_key) {
        builder = builder
            .with_access_key_id(id.expose())
            .with_secret_access_key(secret.expose());
    }
    let s3 = builder.build().map_err(|e| {
        // object_store's config errors name keys, not values.
        Error::config_invalid(format!(
            "store: cannot configure S3 access to bucket {bucket}: {e}"
        ))
    })?;
    Ok(Arc::new(s3))
}

/// FileIO (`s3.*`) properties for the same bucket.
pub fn file_io_props(store: &StoreConfig) -> HashMap<String, String> {
    let mut props = HashMap::new();
    props.insert("s3.region".to_string(), store.region.clone());
    if let Some(endpoint) = &store.endpoint {
        props.insert(
            "s3.endpoint".to_string(),
            endpoint.as_str().trim_end_matches('/').to_string(),
        );
        props.insert("s3.path-style-access".to_string(), "true".to_string());
    }
    if let (Some(id), Some(secret)) = (&store.access_key_id, &store.secret_access_key) {
        props.insert("s3.access-key-id".to_string(), id.expose().to_string());
        props.insert(
            "s3.secret-access-key".to_string(),
            secret.expose().to_string(),
        );
        // Explicit keys: do not let ambient AWS config or instance metadata override them.
        props.insert("s3.disable-config-load".to_string(), "true".to_string());
        props.insert("s3.disable-ec2-metadata".to_string(), "true".to_string());
    }
    props
}

/// Takes static S3 keys out of FileIO properties and returns them as a credential loader for
/// opendal instead. opendal's own static provider would print the secret key: reqsign logs every
/// credential provider's `Debug` at debug level, and that one shows its fields.
pub fn take_static_keys(props: &mut HashMap<String, String>) -> Option<CustomAwsCredentialLoader> {
    let access_key_id = props.remove("s3.access-key-id");
    let secret_access_key = props.remove("s3.secret-access-key");
    let session_token = props.remove("s3.session-token");
    match (access_key_id, secret_access_key) {
        (Some(id), Some(secret)) => Some(CustomAwsCredentialLoader::new(StaticKeys {
            access_key_id: Secret::new(id),
            secret_access_key: Secret::new(secret),
            session_token: session_token.map(Secret::new),
        })),
        _ => None,
    }
}

/// Static S3 keys with a `Debug` that shows none of them.
struct StaticKeys {
    access_key_id: Secret,
    secret_access_key: Secret,
    session_token: Option<Secret>,
}

impl std::fmt::Debug for StaticKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StaticKeys(***)")
    }
}

impl ProvideCredential for StaticKeys {
    type Credential = AwsCredential;

    async fn provide_credential(
        &self,
        _: &reqsign_core::Context,
    ) -> reqsign_core::Result<Option<AwsCredential>> {
        Ok(Some(AwsCredential {
            access_key_id: self.access_key_id.expose().to_string(),
            secret_access_key: self.secret_access_key.expose().to_string(),
            session_token: self.session_token.as_ref().map(|t| t.expose().to_string()),
            expires_in: None,
        }))
    }
}
