//! Remote signing of S3 requests (the Iceberg REST "S3 signer" protocol) as io sees it: with a
//! [`RequestSigner`] in its settings, an S3 client sends every request unsigned by itself
//! (object_store's `skip_signature`) and the connector (`crate::io::connector`) asks the signer for
//! the request's signed headers just before it goes out, once per attempt. io knows nothing of
//! catalogs: the catalog side (`catalog::signer`) implements the trait over the catalog's HTTP
//! client and authentication.
//!
//! What is asked and what is taken, as Java's `S3V4RestSignerClient` and pyiceberg do:
//! - asked: the method, the request URI, the region and the request's headers
//!   (`{name: [values]}`), with `x-amz-content-sha256: UNSIGNED-PAYLOAD` added when the request
//!   has none (S3 servers demand the header; the payload is never signed: manifests are written
//!   in one request and the signer never sees their bytes). Hop-by-hop headers, which the HTTP
//!   stack may rewrite, are not asked about. A body is sent only for a `DeleteObjects` request
//!   (`POST ?delete`), as the protocol says;
//! - taken: the URI the signer answers (on the same scheme, host and port only) and its headers,
//!   which replace the request's of the same name (they are what was signed); `Cache-Control`
//!   (an instruction to the client, not to S3), hop-by-hop headers and `Content-Length` (the
//!   body's own) are not taken.
//!
//! The answer's headers carry the signature (`Authorization`) and perhaps a session token: they
//! are marked sensitive and no `Debug` here shows a header value.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use http::header::{HeaderName, HeaderValue};
use object_store::client::HttpRequest;

use crate::error::{Error, ErrorCode, Result};

/// The payload hash header S3 requires, and the value that says the payload is not signed.
pub(crate) const CONTENT_SHA256: &str = "x-amz-content-sha256";
pub(crate) const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";

/// Headers a request never asks the signer about and never takes from its answer: hop-by-hop
/// headers (the HTTP stack may add, drop or rewrite them), and `cache-control`, which in an
/// answer is the signer telling the client whether it may reuse the signature.
const NOT_SIGNED: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "cache-control",
];

/// Signature headers a request may not already carry when it is sent to be signed (object_store
/// adds none with `skip_signature`; a stale one would be signed over).
const SIGNATURE_HEADERS: [&str; 3] = ["authorization", "x-amz-date", "x-amz-security-token"];

/// One S3 request to be signed: the protocol's `S3SignRequest`.
#[derive(Clone, PartialEq, Eq)]
pub struct SignRequest {
    /// `GET`, `PUT`, `HEAD`, `POST`, `DELETE`.
    pub method: String,
    /// The request's full URI (`https://bucket.host/key?query`, or path-style).
    pub uri: String,
    pub region: String,
    /// Header names (lowercase) and their values, in order.
    pub headers: BTreeMap<String, Vec<String>>,
    /// Only for `DeleteObjects` (`POST ?delete`): the request body.
    pub body: Option<String>,
}

impl std::fmt::Debug for SignRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignRequest")
            .field("method", &self.method)
            .field("uri", &self.uri)
            .field("region", &self.region)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("body", &self.body.as_ref().map(String::len))
            .finish()
    }
}

/// A signer's answer: where to send the request and the headers to send it with (the protocol's
/// `S3SignResponse`). `Debug` shows header names, never values.
#[derive(Clone, PartialEq, Eq)]
pub struct Signed {
    pub uri: String,
    pub headers: Vec<(String, Vec<String>)>,
}

impl std::fmt::Debug for Signed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signed")
            .field("uri", &self.uri)
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Signs S3 requests for the store. Errors are typed by their code: `auth.failed` when the
/// signer refuses, `sink.iceberg_unavailable` when it cannot be reached (after its own bounded
/// retries), `sink.iceberg_catalog_rejected` for an answer that is not the protocol's.
#[async_trait]
pub trait RequestSigner: Send + Sync + std::fmt::Debug {
    async fn sign(&self, request: &SignRequest) -> Result<Signed>;
}

/// A signer in S3 settings. Two are the same signer only if they are the same object: the one
/// a table's load made, shared by that table's FileIOs and footer store (so they share one
/// client).
#[derive(Clone)]
pub struct SharedSigner(pub Arc<dyn RequestSigner>);

impl PartialEq for SharedSigner {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SharedSigner {}

impl std::fmt::Debug for SharedSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

fn not_signed(name: &str) -> bool {
    NOT_SIGNED.contains(&name)
}

/// Whether `request` is a `DeleteObjects` (`POST /bucket?delete`), the one request whose body
/// the signer gets.
fn is_delete_objects(request: &HttpRequest) -> bool {
    request.method() == http::Method::POST
        && request.uri().query().is_some_and(|q| {
            q.split('&')
                .any(|pair| pair == "delete" || pair.starts_with("delete="))
        })
}

/// What the signer is asked for `request` (to be sent in `region`). Adds
/// `x-amz-content-sha256: UNSIGNED-PAYLOAD` to the request when it has none and drops any
/// signature header it carries, so that what is asked is what is sent.
pub(crate) fn sign_request_for(request: &mut HttpRequest, region: &str) -> Result<SignRequest> {
    let headers = request.headers_mut();
    for name in SIGNATURE_HEADERS {
        headers.remove(name);
    }
    if !headers.contains_key(CONTENT_SHA256) {
        headers.insert(CONTENT_SHA256, HeaderValue::from_static(UNSIGNED_PAYLOAD));
    }
    let mut asked: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in request.headers() {
        if not_signed(name.as_str()) {
            continue;
        }
        let text = value.to_str().map_err(|_| {
            Error::internal(format!(
                "cannot ask for an S3 signature: the request's {name} header is not text"
            ))
        })?;
        asked
            .entry(name.as_str().to_string())
            .or_default()
            .push(text.to_string());
    }
    let body = if is_delete_objects(request) {
        let bytes = request.body().as_bytes().ok_or_else(|| {
            Error::internal(
                "cannot ask for an S3 signature: a DeleteObjects body is not in one piece",
            )
        })?;
        Some(String::from_utf8_lossy(bytes).into_owned())
    } else {
        None
    };
    Ok(SignRequest {
        method: request.method().as_str().to_string(),
        uri: request.uri().to_string(),
        region: region.to_string(),
        headers: asked,
        body,
    })
}

/// Puts the signer's answer on `request`: its URI (which must keep the request's scheme, host
/// and port) and its headers, each replacing the request's of the same name, marked sensitive.
pub(crate) fn apply_signed(request: &mut HttpRequest, signed: &Signed) -> Result<()> {
    let rejected =
        |why: String| Error::new(ErrorCode::CatalogRejected, format!("the S3 signer {why}"));
    let asked = url::Url::parse(&request.uri().to_string())
        .map_err(|e| Error::internal(format!("an S3 request URI is not a URL: {e}")))?;
    let answered = url::Url::parse(&signed.uri)
        .map_err(|_| rejected("answered a URI that is not a URL".to_string()))?;
    if answered.origin() != asked.origin() {
        return Err(rejected(format!(
            "answered a URI on another host ({}) than the request's ({}); refusing to send the \
             request there",
            answered.origin().ascii_serialization(),
            asked.origin().ascii_serialization()
        )));
    }
    let uri: http::Uri = answered
        .as_str()
        .parse()
        .map_err(|_| rejected("answered a URI that is not a valid request URI".to_string()))?;
    let mut headers = Vec::new();
    for (name, values) in &signed.headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| rejected(format!("answered a header name that is not HTTP: {name:?}")))?;
        if not_signed(name.as_str()) || name == http::header::CONTENT_LENGTH {
            continue;
        }
        for value in values {
            let mut value = HeaderValue::from_str(value).map_err(|_| {
                rejected(format!(
                    "answered a value of header {name} that is not HTTP"
                ))
            })?;
            value.set_sensitive(true);
            headers.push((name.clone(), value));
        }
    }
    *request.uri_mut() = uri;
    let target = request.headers_mut();
    for (name, _) in &headers {
        target.remove(name);
    }
    for (name, value) in headers {
        target.append(name, value);
    }
    Ok(())
}

/// Signs `request` (sent in `region`) with `signer`: asks ([`sign_request_for`]) and applies the
/// answer ([`apply_signed`]).
pub(crate) async fn sign_http_request(
    signer: &dyn RequestSigner,
    region: &str,
    request: &mut HttpRequest,
) -> Result<()> {
    let asked = sign_request_for(request, region)?;
    let signed = signer.sign(&asked).await?;
    apply_signed(request, &signed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::client::HttpRequestBody;

    fn request(method: &str, uri: &str, headers: &[(&str, &str)], body: &str) -> HttpRequest {
        let mut builder = http::Request::builder().method(method).uri(uri);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder
            .body(HttpRequestBody::from(body.to_string()))
            .expect("request")
    }

    #[test]
    fn a_get_asks_with_its_headers_and_an_unsigned_payload() {
        let mut r = request(
            "GET",
            "http://127.0.0.1:9000/warehouse/p/seg%201.parquet",
            &[
                ("range", "bytes=0-7"),
                ("connection", "keep-alive"),
                ("authorization", "stale"),
                ("x-amz-date", "20200101T000000Z"),
            ],
            "",
        );
        let asked = sign_request_for(&mut r, "eu-west-1").expect("asked");
        assert_eq!(asked.method, "GET");
        assert_eq!(
            asked.uri,
            "http://127.0.0.1:9000/warehouse/p/seg%201.parquet"
        );
        assert_eq!(asked.region, "eu-west-1");
        assert_eq!(
            asked.headers,
            BTreeMap::from([
                ("range".to_string(), vec!["bytes=0-7".to_string()]),
                (
                    CONTENT_SHA256.to_string(),
                    vec![UNSIGNED_PAYLOAD.to_string()]
                ),
            ])
        );
        assert_eq!(asked.body, None);
        // What was asked about is what goes out.
        assert_eq!(r.headers()[CONTENT_SHA256], UNSIGNED_PAYLOAD);
        assert!(!r.headers().contains_key("authorization"));
        assert!(!r.headers().contains_key("x-amz-date"));
    }

    #[test]
    fn only_delete_objects_sends_its_body() {
        let xml = "<Delete><Object><Key>a</Key></Object></Delete>";
        let mut r = request("POST", "http://h/b?delete", &[("content-md5", "x")], xml);
        assert_eq!(
            sign_request_for(&mut r, "r")
                .expect("asked")
                .body
                .as_deref(),
            Some(xml)
        );
        for (method, uri) in [
            ("PUT", "http://h/b/k"),
            ("POST", "http://h/b/k?uploads"),
            ("POST", "http://h/b/k?uploadId=deleted"),
        ] {
            let mut r = request(method, uri, &[], "data");
            assert_eq!(sign_request_for(&mut r, "r").expect("asked").body, None);
        }
    }

    #[test]
    fn the_answer_replaces_headers_and_the_uri_but_not_the_body_length() {
        let mut r = request(
            "PUT",
            "http://127.0.0.1:9000/warehouse/m.avro",
            &[("content-length", "4"), ("content-type", "a/b")],
            "avro",
        );
        sign_request_for(&mut r, "us-east-1").expect("asked");
        let signed = Signed {
            uri: "http://127.0.0.1:9000/warehouse/m.avro?x-id=PutObject".to_string(),
            headers: vec![
                (
                    "Authorization".to_string(),
                    vec!["AWS4-HMAC-SHA256 Credential=AKIDSIGNED/...".to_string()],
                ),
                (
                    "X-Amz-Date".to_string(),
                    vec!["20260101T000000Z".to_string()],
                ),
                (
                    "x-amz-security-token".to_string(),
                    vec!["tok-123".to_string()],
                ),
                ("Cache-Control".to_string(), vec!["private".to_string()]),
                ("content-length".to_string(), vec!["999".to_string()]),
                ("content-type".to_string(), vec!["c/d".to_string()]),
                (
                    "x-multi".to_string(),
                    vec!["1".to_string(), "2".to_string()],
                ),
            ],
        };
        apply_signed(&mut r, &signed).expect("applied");
        assert_eq!(
            r.uri().to_string(),
            "http://127.0.0.1:9000/warehouse/m.avro?x-id=PutObject"
        );
        let h = r.headers();
        assert_eq!(
            h["authorization"],
            "AWS4-HMAC-SHA256 Credential=AKIDSIGNED/..."
        );
        assert!(h["authorization"].is_sensitive());
        assert_eq!(h["x-amz-date"], "20260101T000000Z");
        assert_eq!(h["content-type"], "c/d");
        assert_eq!(h["content-length"], "4", "the body's own length stays");
        assert!(!h.contains_key("cache-control"));
        assert_eq!(h.get_all("x-multi").iter().count(), 2);
        assert_eq!(h[CONTENT_SHA256], UNSIGNED_PAYLOAD);
        // No Debug of the request shows a signed value.
        let shown = format!("{r:?} {signed:?}");
        for secret in ["AKIDSIGNED", "tok-123"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
    }

    #[test]
    fn an_answer_for_another_host_is_refused() {
        for uri in [
            "http://elsewhere:9000/warehouse/k",
            "https://127.0.0.1:9000/warehouse/k",
            "http://127.0.0.1:9001/warehouse/k",
            "not a uri",
        ] {
            let mut r = request("GET", "http://127.0.0.1:9000/warehouse/k", &[], "");
            let err = apply_signed(
                &mut r,
                &Signed {
                    uri: uri.to_string(),
                    headers: vec![],
                },
            )
            .expect_err(uri);
            assert_eq!(err.code(), ErrorCode::CatalogRejected, "{uri}");
            assert_eq!(r.uri().to_string(), "http://127.0.0.1:9000/warehouse/k");
        }
    }
}
