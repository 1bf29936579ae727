//! S3 access for the registrar: an `object_store` client for footer reads and the FileIO
//! properties iceberg uses for metadata and manifests. Both come from the same `store:` config,
//! so they reach the same bucket with the same credentials.

use std::collections::HashMap;
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;

use crate::config::StoreConfig;
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
