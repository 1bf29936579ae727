//! The `store` section as io's description of the store ([`S3Store`]): io reads no
//! configuration, so the conversion lives here, above it.

use crate::io::credentials::{S3Credentials, S3Keys};
use crate::io::store::S3Store;

use super::types::{StoreConfig, StoreCredentials};

impl From<&StoreConfig> for S3Store {
    /// The section's keys when it has both, the instance metadata service when it asks for it,
    /// else no credentials of its own.
    fn from(store: &StoreConfig) -> S3Store {
        let credentials = match (&store.access_key_id, &store.secret_access_key) {
            (Some(id), Some(secret)) => S3Credentials::Keys(S3Keys {
                access_key_id: id.clone(),
                secret_access_key: secret.clone(),
                session_token: None,
            }),
            _ if store.credentials == StoreCredentials::InstanceMetadata => {
                S3Credentials::InstanceMetadata
            }
            _ => S3Credentials::Missing,
        };
        S3Store {
            endpoint: store.endpoint.clone(),
            region: store.region.clone(),
            region_explicit: store.region_explicit,
            allow_http: store.allow_http,
            credentials,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::store::S3Settings;
    use crate::secret::Secret;

    fn store_config(access_key_id: Option<&str>) -> StoreConfig {
        StoreConfig {
            endpoint: Some("http://127.0.0.1:9000".parse().expect("url")),
            region: "us-east-1".into(),
            region_explicit: true,
            allow_http: true,
            access_key_id: access_key_id.map(Secret::new),
            secret_access_key: access_key_id.map(|_| Secret::new("store-secret-456")),
            credentials: StoreCredentials::Static,
        }
    }

    #[test]
    fn the_store_section_alone_gives_keys_the_instance_role_when_asked_or_nothing() {
        assert!(matches!(
            S3Store::from(&store_config(Some("AKIDSTORE456"))).credentials,
            S3Credentials::Keys(_)
        ));
        assert_eq!(
            S3Store::from(&store_config(None)).credentials,
            S3Credentials::Missing
        );
        let imds = StoreConfig {
            credentials: StoreCredentials::InstanceMetadata,
            ..store_config(None)
        };
        assert_eq!(
            S3Store::from(&imds).credentials,
            S3Credentials::InstanceMetadata
        );
        assert_eq!(
            S3Settings::for_footers(&S3Store::from(&imds), None).credentials,
            S3Credentials::InstanceMetadata
        );
    }
}
