//! URL rules shared by several keys: `s3://bucket[/prefix]` table roots, http(s) endpoints, and
//! the loopback test behind the cleartext-credentials warning.

use std::net::IpAddr;

use url::{Host, Url};

use super::types::TableRoot;

/// Parses `s3://bucket[/prefix]`. Slashes around the prefix are dropped, so `s3://b/lake/` and
/// `s3://b/lake` are the same root (as they are for the shipper).
pub(crate) fn table_root(text: &str) -> Result<TableRoot, String> {
    let Some(rest) = text.strip_prefix("s3://") else {
        return Err(format!(
            "`{text}` is not an s3:// URL; write s3://bucket or s3://bucket/prefix"
        ));
    };
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(format!(
            "`{text}` has an empty bucket; write s3://bucket or s3://bucket/prefix"
        ));
    }
    // Parsed by hand rather than with `Url`, which would percent-encode or lower-case parts of
    // the key prefix; these characters mean the value is not a plain bucket + key prefix.
    if bucket.contains(['@', ':', '?', '#']) || bucket.chars().any(char::is_whitespace) {
        return Err(format!(
            "`{text}` has an invalid bucket name; write s3://bucket or s3://bucket/prefix"
        ));
    }
    if prefix.contains(['?', '#']) {
        return Err(format!(
            "`{text}` has a query or fragment; write s3://bucket or s3://bucket/prefix"
        ));
    }
    Ok(TableRoot {
        bucket: bucket.to_owned(),
        prefix: prefix.trim_matches('/').to_owned(),
    })
}

/// An absolute `http://` or `https://` URL with a host and no user:password part (credentials
/// belong in the secret keys, where they are never logged).
pub(crate) fn http_url(text: &str) -> Result<Url, String> {
    let url =
        Url::parse(text).map_err(|e| format!("`{}` is not an absolute URL ({e})", redact(text)))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "`{}` must be an http:// or https:// URL",
            redact(text)
        ));
    }
    if url.host().is_none() {
        return Err(format!("`{}` has no host", redact(text)));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "`{}` carries user credentials in the URL; remove them and use the credential keys",
            redact(text)
        ));
    }
    Ok(url)
}

/// Whether a URL's host is on this machine (`localhost`, 127.0.0.0/8, `::1`), where plain HTTP
/// does not expose credentials to the network.
pub(crate) fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        Some(Host::Ipv4(ip)) => IpAddr::V4(ip).is_loopback(),
        Some(Host::Ipv6(ip)) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        None => false,
    }
}

/// The text with any `user:password@` replaced, for messages about a URL that failed to parse
/// or was refused because of its credentials.
fn redact(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else {
        return text.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_roots_normalise_slashes() {
        let root = table_root("s3://b/lake/x/").unwrap();
        assert_eq!(
            (root.bucket.as_str(), root.prefix.as_str()),
            ("b", "lake/x")
        );
        assert_eq!(root.uri(), "s3://b/lake/x");
        assert_eq!(table_root("s3://b/").unwrap().uri(), "s3://b");
        assert_eq!(
            table_root("s3://b").unwrap().table_location("p", "d"),
            "s3://b/thadam/v1/p/d"
        );
        assert!(table_root("s3:///x").is_err());
        assert!(table_root("gs://b/x").is_err());
    }

    #[test]
    fn loopback_hosts() {
        for yes in [
            "http://localhost:8181",
            "http://127.0.0.1",
            "http://127.9.9.9/x",
            "http://[::1]:1",
        ] {
            assert!(is_loopback(&Url::parse(yes).unwrap()), "{yes}");
        }
        for no in [
            "http://catalog:8181",
            "http://10.0.0.1",
            "http://[::2]",
            "http://localhost.evil",
        ] {
            assert!(!is_loopback(&Url::parse(no).unwrap()), "{no}");
        }
    }

    #[test]
    fn redaction_hides_passwords() {
        assert_eq!(redact("http://u:p@h/x@y"), "http://***@h/x@y");
        assert_eq!(redact("http://h/x@y"), "http://h/x@y");
        let e = http_url("https://user:hunter2@host").unwrap_err();
        assert!(!e.contains("hunter2"), "{e}");
    }
}
