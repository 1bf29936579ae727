//! The S3 clients the registrars of a process share: their FileIOs and their footer reads.
//!
//! Every answer of the catalog (a load, each commit) becomes a new `Table` with a new FileIO,
//! and a FileIO is cheap, but the object_store client behind it is not: building one builds a
//! reqwest client, which loads and parses the system's root certificates, and starts with an
//! empty connection pool. Built per FileIO, that was paid on every commit (and every commit
//! opened fresh connections for its manifest, its manifest list and the reads of the merge).
//! [`S3Clients`] keeps the clients built for the last few settings, so a table's commits reuse
//! one client and its warm connections for as long as its settings (keys included) stay the same.
//!
//! One cache serves the whole process ([`shared`]): a host that embeds many registrars (many
//! tables, many logs, or a fleet simulated in one process) builds one client per distinct
//! settings, not one per registrar. A client's root certificates (~80 KB parsed), its TLS
//! session cache and its pool's idle connections (each holding a read buffer grown to the
//! largest answer it carried) were each paid per registrar: ~0.3 MB per node of a 300-node
//! fleet in one process. What goes on the wire is the same: every request is signed for its
//! own settings, and only registrars with identical settings (keys included) share a client;
//! they then share its warm connections too.
//!
//! Per runtime: a pooled connection is driven by a task of the runtime that opened it, and dies
//! with that runtime; a client kept past its runtime hands out dead connections ("dispatch task
//! is gone"). A host that builds a runtime per registrar (or a test harness, one per test) gets
//! a client per runtime; registrars sharing a runtime share their clients.
//!
//! Bounded: at most [`CACHED_CLIENTS`] clients, the least recently used going first, so keys the
//! catalog vends afresh every hour do not pile up clients over months. A client whose settings
//! left the cache stays alive only as long as a `Table` still holds it.

use std::sync::{Arc, LazyLock};

use object_store::ObjectStore;

use crate::error::Result;
use crate::io::store::{S3Settings, build_object_store};
use crate::runtime::recent::Recent;

/// How many built clients are kept: a host's tables, each with its own vended keys, and one
/// rotation of those keys in flight.
pub(crate) const CACHED_CLIENTS: usize = 64;

/// The process's clients (see the module docs).
static SHARED: LazyLock<Arc<S3Clients>> = LazyLock::new(Arc::default);

/// The clients every registrar of this process builds its S3 access from.
pub(crate) fn shared() -> Arc<S3Clients> {
    Arc::clone(&SHARED)
}

/// Built S3 clients by runtime, settings and bucket, the most recently used kept.
pub struct S3Clients {
    clients: Recent<ClientKey, Arc<dyn ObjectStore>>,
    /// Unit tests: the one store every FileIO gets, whatever its settings and bucket.
    #[cfg(test)]
    fixed: Option<Arc<dyn ObjectStore>>,
}

impl Default for S3Clients {
    fn default() -> Self {
        S3Clients {
            clients: Recent::new(CACHED_CLIENTS),
            #[cfg(test)]
            fixed: None,
        }
    }
}

/// What a cached client was built for.
struct ClientKey {
    /// The runtime whose tasks drive the client's connections.
    runtime: tokio::runtime::Id,
    settings: S3Settings,
    bucket: String,
}

impl std::fmt::Debug for S3Clients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Clients")
            .field("cached", &self.len())
            .finish_non_exhaustive()
    }
}

impl S3Clients {
    /// The client of `bucket` for `settings`: the one built before for the same settings, or a
    /// new one ([`build_object_store`]). Settings that replace object_store's retries (tests)
    /// are not cached: their retry configuration cannot be compared.
    pub(crate) fn get(&self, settings: &S3Settings, bucket: &str) -> Result<Arc<dyn ObjectStore>> {
        #[cfg(test)]
        if let Some(store) = &self.fixed {
            return Ok(Arc::clone(store));
        }
        if settings.retry.is_some() {
            return build_object_store(settings, bucket);
        }
        // Outside a runtime nobody can tell which runtime will drive the connections: such a
        // client is the caller's alone.
        let Ok(runtime) = tokio::runtime::Handle::try_current().map(|handle| handle.id()) else {
            return build_object_store(settings, bucket);
        };
        // Built under the cache's lock: building is synchronous and short (it reads the root
        // certificates; no network until the first request).
        self.clients.get_or_make(
            |c| c.runtime == runtime && c.bucket == bucket && same_client(&c.settings, settings),
            || {
                let key = ClientKey {
                    runtime,
                    settings: settings.clone(),
                    bucket: bucket.to_string(),
                };
                Ok((key, build_object_store(settings, bucket)?))
            },
        )
    }

    /// How many clients are cached.
    pub(crate) fn len(&self) -> usize {
        self.clients.count(|_| true)
    }

    /// Unit tests: clients that hand every FileIO `store` (an in-memory one standing in for S3).
    #[cfg(test)]
    pub(crate) fn fixed(store: Arc<dyn ObjectStore>) -> Self {
        S3Clients {
            fixed: Some(store),
            ..S3Clients::default()
        }
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether a client built for `a` serves `b`: every setting the same, keys included, and the
/// very same signer (retries are never compared: settings with their own are not cached).
fn same_client(a: &S3Settings, b: &S3Settings) -> bool {
    let S3Settings {
        region,
        endpoint,
        virtual_hosted,
        allow_http,
        credentials,
        retry: _,
    } = a;
    *region == b.region
        && *endpoint == b.endpoint
        && *virtual_hosted == b.virtual_hosted
        && *allow_http == b.allow_http
        && *credentials == b.credentials
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::credentials::{S3Credentials, S3Keys};
    use crate::secret::Secret;

    fn settings(key_id: &str) -> S3Settings {
        S3Settings {
            region: "us-east-1".to_string(),
            endpoint: Some("http://127.0.0.1:9000".to_string()),
            virtual_hosted: false,
            allow_http: true,
            credentials: S3Credentials::Keys(S3Keys {
                access_key_id: Secret::new(key_id),
                secret_access_key: Secret::new("secret"),
                session_token: None,
            }),
            retry: None,
        }
    }

    #[tokio::test]
    async fn the_same_settings_share_one_client() {
        let clients = S3Clients::default();
        let a = clients.get(&settings("AKIA1"), "warehouse").expect("built");
        let b = clients
            .get(&settings("AKIA1"), "warehouse")
            .expect("cached");
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(clients.len(), 1);
    }

    #[tokio::test]
    async fn other_keys_another_bucket_or_another_endpoint_get_their_own() {
        let clients = S3Clients::default();
        let first = clients.get(&settings("AKIA1"), "warehouse").expect("built");
        let other_keys = clients.get(&settings("AKIA2"), "warehouse").expect("built");
        let other_bucket = clients.get(&settings("AKIA1"), "archive").expect("built");
        let mut moved = settings("AKIA1");
        moved.endpoint = Some("http://127.0.0.1:9001".to_string());
        let other_endpoint = clients.get(&moved, "warehouse").expect("built");
        for other in [&other_keys, &other_bucket, &other_endpoint] {
            assert!(!Arc::ptr_eq(&first, other));
        }
        assert_eq!(clients.len(), 4);
    }

    #[tokio::test]
    async fn the_cache_is_bounded_and_keeps_what_is_used() {
        let clients = S3Clients::default();
        let kept = clients
            .get(&settings("AKIA-kept"), "warehouse")
            .expect("built");
        for i in 0..CACHED_CLIENTS * 3 {
            clients
                .get(&settings(&format!("AKIA{i}")), "warehouse")
                .expect("built");
            // Used between every rotation: stays.
            let again = clients
                .get(&settings("AKIA-kept"), "warehouse")
                .expect("cached");
            assert!(Arc::ptr_eq(&kept, &again));
        }
        assert_eq!(clients.len(), CACHED_CLIENTS);
        // The oldest rotation went.
        let rebuilt = clients.get(&settings("AKIA0"), "warehouse").expect("built");
        assert_eq!(clients.len(), CACHED_CLIENTS);
        drop(rebuilt);
    }

    /// A client's pooled connections are driven by tasks of the runtime that opened them: once
    /// that runtime is gone, a request on such a connection fails with "dispatch task is gone"
    /// (seen in CI when two tests, each with its own runtime, shared a client). So each runtime
    /// gets its own clients, while the registrars of one runtime share theirs.
    #[test]
    fn each_runtime_gets_its_own_clients() {
        let clients = S3Clients::default();
        let runtime = || {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("runtime")
        };
        let first = runtime();
        let (a, a_again) = first.block_on(async {
            let a = clients.get(&settings("AKIA1"), "warehouse").expect("built");
            let again = clients
                .get(&settings("AKIA1"), "warehouse")
                .expect("cached");
            (a, again)
        });
        assert!(Arc::ptr_eq(&a, &a_again), "one runtime shares its clients");
        drop(first);
        let b = runtime()
            .block_on(async { clients.get(&settings("AKIA1"), "warehouse").expect("built") });
        assert!(
            !Arc::ptr_eq(&a, &b),
            "a later runtime must not reuse the dropped runtime's client"
        );
    }

    #[tokio::test]
    async fn settings_with_their_own_retries_are_not_cached() {
        let clients = S3Clients::default();
        let mut custom = settings("AKIA1");
        custom.retry = Some(object_store::RetryConfig::default());
        let a = clients.get(&custom, "warehouse").expect("built");
        let b = clients.get(&custom, "warehouse").expect("built");
        assert!(!Arc::ptr_eq(&a, &b));
        assert!(clients.is_empty());
    }
}
