//! [`SecretUrl`]: a URL that may carry secrets (a `user:password@`, a token in its query string)
//! and so can only be formatted redacted.

use std::fmt;
use std::str::FromStr;

use url::Url;

/// A URL the registrar sends requests to (`catalog_uri`, the OAuth2 token endpoint, each catalog
/// request built on them) and must never show whole: a catalog may take its token in the query
/// string, and a URL may carry `user:password@`.
///
/// `Display` and `Debug` print the redacted form: scheme, host, port and path, without user,
/// password, query string and fragment (`https://cat.example/api`). So a config struct or an
/// error that formats one cannot leak it. The full URL is reachable only through
/// [`SecretUrl::expose`] (or [`SecretUrl::into_exposed`]), for the places that send requests,
/// which makes them easy to find. Equality compares the full URL.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SecretUrl(Url);

impl SecretUrl {
    /// Wraps a URL.
    pub fn new(url: Url) -> Self {
        SecretUrl(url)
    }

    /// The whole URL, query string and credentials included: for sending a request, never for
    /// a message.
    pub fn expose(&self) -> &Url {
        &self.0
    }

    /// The whole URL, owned (see [`SecretUrl::expose`]).
    pub fn into_exposed(self) -> Url {
        self.0
    }

    /// The URL's scheme (`http`, `https`): never secret.
    pub fn scheme(&self) -> &str {
        self.0.scheme()
    }

    /// What `Display` prints: the URL without user, password, query string and fragment.
    pub fn redacted(&self) -> String {
        let mut shown = self.0.clone();
        // Both fail only for URLs that cannot have credentials (`mailto:`), which have none.
        let _ = shown.set_password(None);
        let _ = shown.set_username("");
        shown.set_query(None);
        shown.set_fragment(None);
        shown.into()
    }
}

impl From<Url> for SecretUrl {
    fn from(url: Url) -> Self {
        SecretUrl(url)
    }
}

/// Parses any absolute URL (config validation applies its own rules, see `urls::http_url`).
impl FromStr for SecretUrl {
    type Err = url::ParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Url::parse(text).map(SecretUrl)
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SecretUrl").field(&self.redacted()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{CatalogAuth, RegistrarConfig};

    const SECRETS: [&str; 6] = ["user", "pass", "token", "abc", "x=y", "frag"];

    #[test]
    fn display_and_debug_drop_credentials_query_and_fragment() {
        let url: SecretUrl = "https://user:pass@cat.example:8443/api/v1?token=abc&x=y#frag"
            .parse()
            .expect("url");
        let shown = url.to_string();
        assert_eq!(shown, "https://cat.example:8443/api/v1");
        let debug = format!("{url:?}");
        assert_eq!(debug, "SecretUrl(\"https://cat.example:8443/api/v1\")");
        let pretty = format!("{url:#?}");
        for text in [&shown, &debug, &pretty, &format!("{url:>80}")] {
            for secret in SECRETS {
                assert!(!text.contains(secret), "{secret} in {text}");
            }
        }
        // Requests still get all of it.
        assert_eq!(
            url.expose().as_str(),
            "https://user:pass@cat.example:8443/api/v1?token=abc&x=y#frag"
        );
        assert_eq!(url.expose().query(), Some("token=abc&x=y"));
        assert_eq!(url.scheme(), "https");
    }

    #[test]
    fn a_url_without_secrets_shows_as_it_is() {
        let url = SecretUrl::new(Url::parse("http://127.0.0.1:8181/").expect("url"));
        assert_eq!(url.to_string(), "http://127.0.0.1:8181/");
        assert_eq!(url.redacted(), url.expose().as_str());
        // Equality is on the whole URL, secrets included.
        let a: SecretUrl = "http://h/x?token=1".parse().expect("url");
        let b: SecretUrl = "http://h/x?token=2".parse().expect("url");
        assert_eq!(a.to_string(), b.to_string());
        assert_ne!(a, b);
    }

    #[test]
    fn a_registrar_config_debug_shows_no_query_string() {
        let config = RegistrarConfig::builder()
            .pipeline("p1")
            .segments_dir("/data/seg")
            .dataset("telemetry")
            .url("s3://bucket/prefix")
            .catalog_uri("https://cat.example/api?sig=abc&x=y#frag")
            .set("catalog_credential.client_id", "thadam")
            .set("catalog_credential.client_secret", "client-secret")
            .set(
                "catalog_credential.oauth2_server_uri",
                "https://auth.example/oauth/token?sig=abc&x=y#frag",
            )
            .namespace("ns")
            .build()
            .expect("valid");
        // The requests' URLs keep their query.
        assert_eq!(config.catalog_uri.expose().query(), Some("sig=abc&x=y"));
        let CatalogAuth::Credential(credential) = &config.catalog_auth else {
            panic!("a credential: {:?}", config.catalog_auth);
        };
        assert_eq!(
            credential.oauth2_server_uri.expose().query(),
            Some("sig=abc&x=y")
        );
        for debug in [format!("{config:?}"), format!("{config:#?}")] {
            assert!(debug.contains("https://cat.example/api"), "{debug}");
            assert!(
                debug.contains("https://auth.example/oauth/token"),
                "{debug}"
            );
            for secret in ["sig=", "abc", "x=y", "frag", "client-secret", "?", "#"] {
                assert!(!debug.contains(secret), "{secret} in {debug}");
            }
        }
    }
}
