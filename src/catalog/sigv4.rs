//! AWS Signature Version 4 on catalog requests (`catalog_sigv4`): what the AWS Glue and S3 Tables
//! Iceberg REST endpoints accept instead of a bearer token.
//!
//! [`signature_headers`] is the whole policy, a pure function of the request, the clock and the
//! keys, computed by the `aws-sigv4` crate (AWS's own signer). [`sign_request`] applies it to the
//! reqwest request about to be sent, after every other header, the query string and the body are
//! in place, so that what is signed is exactly what is sent.

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    PayloadChecksumKind, SignableBody, SignableRequest, SigningSettings, sign,
};
use aws_sigv4::sign::v4;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::header::{HeaderName, HeaderValue};
use url::Url;

use crate::config::SigV4Credential;
use crate::error::{Error, Result};

/// One request as it will be sent: what a signature covers.
pub(crate) struct SignInput<'a> {
    pub method: &'a str,
    pub url: &'a Url,
    /// Every header already set, in any order (the signer sorts them). `Host` may be absent: it
    /// is then taken from the URL, as the HTTP client will send it.
    pub headers: &'a [(&'a str, &'a str)],
    pub body: &'a [u8],
}

/// The headers that sign `request` at `time`: `authorization`, `x-amz-date`,
/// `x-amz-content-sha256` (the body's SHA-256, so a changed body fails the check) and, with a
/// session token, `x-amz-security-token`. Every header of `request` is signed, but `User-Agent`
/// (which proxies rewrite). `authorization` and `x-amz-security-token` are marked sensitive.
pub(crate) fn signature_headers(
    request: &SignInput<'_>,
    time: SystemTime,
    credential: &SigV4Credential,
) -> Result<Vec<(HeaderName, HeaderValue)>> {
    let mut settings = SigningSettings::default();
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    signature_headers_with(request, time, credential, settings)
}

/// [`signature_headers`] with the signer's settings as given (the AWS test suite's vectors are
/// computed without `x-amz-content-sha256`).
fn signature_headers_with(
    request: &SignInput<'_>,
    time: SystemTime,
    credential: &SigV4Credential,
    settings: SigningSettings,
) -> Result<Vec<(HeaderName, HeaderValue)>> {
    // The signer would panic on a URL without a host; config validation makes one impossible,
    // but input must never panic.
    if request.url.host_str().is_none() {
        return Err(Error::config_invalid(
            "catalog_uri has no host; a SigV4 signature needs one",
        ));
    }
    let identity = Credentials::new(
        credential.access_key_id.expose(),
        credential.secret_access_key.expose(),
        credential
            .session_token
            .as_ref()
            .map(|t| t.expose().to_string()),
        None,
        "catalog_sigv4",
    )
    .into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(&credential.region)
        .name(&credential.signing_name)
        .time(time)
        .settings(settings)
        .build()
        .map_err(|e| {
            Error::internal(format!("catalog_sigv4: cannot set up the signer: {e}")).with_source(e)
        })?
        .into();
    let signable = SignableRequest::new(
        request.method,
        request.url.as_str(),
        request.headers.iter().copied(),
        SignableBody::Bytes(request.body),
    )
    .map_err(signing_error)?;
    let (instructions, _signature) = sign(signable, &params).map_err(signing_error)?.into_parts();
    let (headers, _params) = instructions.into_parts();
    headers
        .into_iter()
        .map(|header| {
            let name = HeaderName::from_static(header.name());
            let mut value = HeaderValue::from_str(header.value()).map_err(|_| {
                Error::internal(format!(
                    "catalog_sigv4: the signer produced an invalid {} header",
                    header.name()
                ))
            })?;
            value.set_sensitive(header.sensitive() || name == reqwest::header::AUTHORIZATION);
            Ok((name, value))
        })
        .collect()
}

/// The signer's errors name what could not be parsed (a URL, a header), never a value.
fn signing_error(e: aws_sigv4::http_request::SigningError) -> Error {
    Error::internal(format!("catalog_sigv4: cannot sign the request: {e}")).with_source(e)
}

/// Signs `request` in place: first its query string is spelled canonically (see
/// [`canonical_query`]), then the headers of [`signature_headers`] are added. Call it last,
/// after every header and the body are set.
pub(crate) fn sign_request(
    request: &mut reqwest::Request,
    credential: &SigV4Credential,
    time: SystemTime,
) -> Result<()> {
    canonical_query(request.url_mut());
    let added = {
        let mut headers = Vec::with_capacity(request.headers().len());
        for (name, value) in request.headers() {
            let value = value.to_str().map_err(|_| {
                Error::config_invalid(format!(
                    "catalog_sigv4: the {name} header is not visible ASCII and cannot be signed"
                ))
            })?;
            headers.push((name.as_str(), value));
        }
        let body = match request.body() {
            None => &[][..],
            Some(body) => body.as_bytes().ok_or_else(|| {
                Error::internal("catalog_sigv4: a streamed request body cannot be signed")
            })?,
        };
        let input = SignInput {
            method: request.method().as_str(),
            url: request.url(),
            headers: &headers,
            body,
        };
        signature_headers(&input, time, credential)?
    };
    for (name, value) in added {
        request.headers_mut().insert(name, value);
    }
    Ok(())
}

/// RFC 3986's unreserved characters stay; everything else is percent-encoded, as SigV4's
/// canonical query string spells it.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Re-spells the query string as SigV4's canonical form does (unreserved characters only, `%20`
/// for a space). `url` writes a space as `+` and leaves `*` bare; the signer canonicalises
/// those, while a verifier may take the query as it arrived. Sent canonically, the two agree
/// whatever the values (a warehouse ARN's `:` and `/`). Order and meaning are unchanged.
fn canonical_query(url: &mut Url) {
    if url.query().is_none_or(str::is_empty) {
        return;
    }
    let query = url
        .query_pairs()
        .map(|(k, v)| {
            format!(
                "{}={}",
                utf8_percent_encode(&k, UNRESERVED),
                utf8_percent_encode(&v, UNRESERVED)
            )
        })
        .collect::<Vec<_>>()
        .join("&");
    url.set_query(Some(&query));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;
    use std::time::Duration;

    /// 2015-08-30T12:36:00Z, the AWS SigV4 test suite's clock.
    fn suite_time() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_440_938_160)
    }

    fn example_credential(region: &str, name: &str, token: Option<&str>) -> SigV4Credential {
        SigV4Credential {
            region: region.into(),
            signing_name: name.into(),
            access_key_id: Secret::new("AKIDEXAMPLE"),
            secret_access_key: Secret::new("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
            session_token: token.map(Secret::new),
        }
    }

    fn header<'a>(headers: &'a [(HeaderName, HeaderValue)], name: &str) -> Option<&'a str> {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.to_str().ok())
    }

    /// The AWS SigV4 test suite's `get-vanilla` (no payload header).
    #[test]
    fn aws_test_suite_get_vanilla() {
        let url = Url::parse("https://example.amazonaws.com/").expect("url");
        let input = SignInput {
            method: "GET",
            url: &url,
            headers: &[],
            body: b"",
        };
        let headers = signature_headers_with(
            &input,
            suite_time(),
            &example_credential("us-east-1", "service", None),
            SigningSettings::default(),
        )
        .expect("signs");
        assert_eq!(
            header(&headers, "authorization"),
            Some(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
                 SignedHeaders=host;x-amz-date, \
                 Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
            )
        );
        assert_eq!(header(&headers, "x-amz-date"), Some("20150830T123600Z"));
    }

    /// A catalog request as the registrar sends it (payload hash, session token, idempotency key,
    /// a `%1F` namespace path, a warehouse query), against the signature botocore 1.44.8's
    /// `SigV4Auth` computes for the same request (an independent implementation).
    #[test]
    fn catalog_request_matches_botocore() {
        let url = Url::parse(
            "https://glue.eu-west-1.amazonaws.com/iceberg/v1/catalogs/123/namespaces/a%1Fb/\
             register?warehouse=arn%3Aaws%3As3tables%3Aeu-west-1%3A123%3Abucket%2Fb",
        )
        .expect("url");
        let body = br#"{"name":"t","metadata-location":"s3://b/m.json"}"#;
        let input = SignInput {
            method: "POST",
            url: &url,
            headers: &[
                ("x-client-version", "0.14.1"),
                ("user-agent", "thadam-iceberg/0.1.0"),
                ("idempotency-key", "k-1"),
                ("content-type", "application/json"),
            ],
            body,
        };
        let credential = example_credential("eu-west-1", "glue", Some("session-token-example"));
        let headers = signature_headers(&input, suite_time(), &credential).expect("signs");
        assert_eq!(
            header(&headers, "authorization"),
            Some(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/eu-west-1/glue/aws4_request, \
                 SignedHeaders=content-type;host;idempotency-key;x-amz-content-sha256;\
                 x-amz-date;x-amz-security-token;x-client-version, \
                 Signature=55520b93369ff650d8f9d86b0c4f95d09a4157a5048db03b1c6995d47c2590fa"
            )
        );
        assert_eq!(
            header(&headers, "x-amz-content-sha256"),
            Some("4023259d107f0f516d1b318d646e7d2a6dd27bc22e162009a4eff38a06e9d3c3")
        );
        assert_eq!(
            header(&headers, "x-amz-security-token"),
            Some("session-token-example")
        );
        for (name, value) in &headers {
            let secret = name == "authorization" || name == "x-amz-security-token";
            assert_eq!(value.is_sensitive(), secret, "{name}");
        }

        // One changed body byte, region or signing name changes the signature.
        let signature = |input: &SignInput<'_>, c: &SigV4Credential| {
            header(
                &signature_headers(input, suite_time(), c).expect("signs"),
                "authorization",
            )
            .map(str::to_string)
        };
        let original = signature(&input, &credential);
        let mut tampered = body.to_vec();
        tampered[2] ^= 1;
        let changed = SignInput {
            body: &tampered,
            ..input
        };
        assert_ne!(signature(&changed, &credential), original);
        let other_region = example_credential("eu-west-2", "glue", Some("session-token-example"));
        assert_ne!(signature(&input, &other_region), original);
        let other_name = example_credential("eu-west-1", "s3tables", Some("session-token-example"));
        assert_ne!(signature(&input, &other_name), original);
    }

    #[test]
    fn query_is_spelled_canonically() {
        let mut url = Url::parse("http://h/v1/config").expect("url");
        url.query_pairs_mut()
            .append_pair("warehouse", "arn:aws:s3tables:eu-west-1:1:bucket/b a*+~");
        canonical_query(&mut url);
        assert_eq!(
            url.query(),
            Some("warehouse=arn%3Aaws%3As3tables%3Aeu-west-1%3A1%3Abucket%2Fb%20a%2A%2B~")
        );
        let mut bare = Url::parse("http://h/v1/config").expect("url");
        canonical_query(&mut bare);
        assert_eq!(bare.query(), None);
    }

    #[test]
    fn a_url_without_host_is_an_error_not_a_panic() {
        let url = Url::parse("unix:/run/catalog.sock").expect("url");
        let input = SignInput {
            method: "GET",
            url: &url,
            headers: &[],
            body: b"",
        };
        let credential = example_credential("us-east-1", "glue", None);
        assert!(signature_headers(&input, suite_time(), &credential).is_err());
    }
}
