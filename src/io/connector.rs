//! The HTTP connector of every S3 client ([`TypedStatusConnector`]): it turns S3 refusals
//! object_store leaves untyped into [`S3Refusal`] errors, with a remote signer has every
//! request signed just before it is sent, and counts the requests by kind
//! ([`crate::io::requests`]).

use async_trait::async_trait;
use futures::StreamExt;
use object_store::client::{
    ClientOptions, HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse,
    HttpService, ReqwestConnector,
};

use crate::io::requests::{RequestKind, count, kind_of};
use crate::io::signer::SharedSigner;
use crate::io::status::{S3Refusal, S3StatusClass, s3_error_code, status_class};

/// Whether an answer with `status` is tagged as an [`S3Refusal`]: the statuses object_store
/// leaves untyped and does not retry. object_store types 401, 403, 404, 409 and 412 itself
/// (conditional requests rely on 409/412) and retries 408, 429 and 5xx, except on list
/// requests, whose failures it reports with no typed status at all: there 401, 403 and 404
/// (`NoSuchBucket`) are tagged too.
fn tagged(status: u16, is_list: bool) -> bool {
    match status_class(status) {
        S3StatusClass::Rejected => !matches!(status, 409 | 412),
        S3StatusClass::ShortObject => true,
        S3StatusClass::Missing | S3StatusClass::Auth => is_list,
        S3StatusClass::Transient => false,
    }
}

/// An object_store HTTP connector that turns untyped S3 refusals into [`S3Refusal`] errors
/// (object_store keeps the status of such an answer in a type that is not public), and with a
/// remote signer, has every request signed just before it is sent (each attempt anew, so a
/// retry never reuses a signature).
#[derive(Debug, Default)]
pub(super) struct TypedStatusConnector {
    /// The signer and the region requests are signed for.
    pub(super) signer: Option<(SharedSigner, String)>,
    /// Whether requests are counted in `thadam_iceberg_store_requests_total`: those of a store
    /// client, not those of a client object_store builds to fetch credentials.
    pub(super) counted: bool,
}

impl HttpConnector for TypedStatusConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(TypedStatus {
            client: inner,
            signer: self.signer.clone(),
            counted: self.counted,
        }))
    }
}

#[derive(Debug)]
struct TypedStatus {
    client: HttpClient,
    signer: Option<(SharedSigner, String)>,
    counted: bool,
}

/// The most bytes of an error body read for its `<Code>`.
const MAX_ERROR_BODY: usize = 16 * 1024;

#[async_trait]
impl HttpService for TypedStatus {
    async fn call(&self, mut request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let kind = kind_of(&request);
        let is_list = kind == RequestKind::List;
        if let Some((signer, region)) = &self.signer {
            // Our error, typed by its code, in the chain; `Unknown`: object_store does not retry
            // it (the signer retried what was transient, and a refusal stays refused).
            crate::io::signer::sign_http_request(signer.0.as_ref(), region, &mut request)
                .await
                .map_err(|e| HttpError::new(HttpErrorKind::Unknown, e))?;
        }
        // Every attempt object_store sends (a signing that failed sent nothing), whatever its
        // answer: S3 bills refused requests too.
        if self.counted {
            count(kind);
        }
        let response = self.client.execute(request).await?;
        let status = response.status();
        if !tagged(status.as_u16(), is_list) {
            return Ok(response);
        }
        let mut body = Vec::new();
        let mut stream = response.into_body().bytes_stream();
        while let Some(Ok(chunk)) = stream.next().await {
            let room = MAX_ERROR_BODY.saturating_sub(body.len());
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if body.len() >= MAX_ERROR_BODY {
                break;
            }
        }
        // `Unknown`: object_store does not retry it.
        Err(HttpError::new(
            HttpErrorKind::Unknown,
            S3Refusal {
                status: status.as_u16(),
                s3_code: s3_error_code(&body),
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use object_store::ObjectStore;
    use object_store::path::Path as ObjectPath;

    use super::*;
    use crate::error::Result;
    use crate::io::credentials::S3Credentials;
    use crate::io::store::{S3Settings, build_object_store};

    #[test]
    fn only_statuses_object_store_leaves_untyped_are_tagged() {
        for status in [400, 405, 414, 416, 301] {
            assert!(tagged(status, false), "{status}");
        }
        // object_store types or retries these itself.
        for status in [401, 403, 404, 409, 412, 408, 429, 500, 503, 304] {
            assert!(!tagged(status, false), "{status}");
        }
        // Listings lose every status in object_store: auth and missing-bucket answers too.
        for status in [401, 403, 404, 400] {
            assert!(tagged(status, true), "{status}");
        }
        assert!(!tagged(503, true));
    }

    /// A signer that adds a fixed signature, remembering what it was asked.
    #[derive(Debug, Default)]
    struct FixedSigner(std::sync::Mutex<Vec<crate::io::signer::SignRequest>>);

    #[async_trait]
    impl crate::io::signer::RequestSigner for FixedSigner {
        async fn sign(
            &self,
            request: &crate::io::signer::SignRequest,
        ) -> Result<crate::io::signer::Signed> {
            self.0.lock().expect("asked").push(request.clone());
            Ok(crate::io::signer::Signed {
                uri: request.uri.clone(),
                headers: vec![
                    (
                        "Authorization".to_string(),
                        vec!["AWS4-HMAC-SHA256 Credential=AKIDREMOTE/x".to_string()],
                    ),
                    (
                        "X-Amz-Date".to_string(),
                        vec!["20260101T000000Z".to_string()],
                    ),
                    ("Cache-Control".to_string(), vec!["private".to_string()]),
                ],
            })
        }
    }

    #[tokio::test]
    async fn with_a_signer_each_request_carries_the_signer_s_headers_and_none_of_its_own() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = socket.read(&mut buf).await.expect("read");
                assert!(n > 0, "closed early");
                head.extend_from_slice(&buf[..n]);
            }
            let _ = socket
                .write_all(
                    b"HTTP/1.1 206 Partial Content\r\ncontent-length: 4\r\n\
                      content-range: bytes 0-3/10\r\nconnection: close\r\n\r\nPAR1",
                )
                .await;
            String::from_utf8_lossy(&head).to_ascii_lowercase()
        });
        let signer = Arc::new(FixedSigner::default());
        let settings = S3Settings {
            region: "eu-central-1".into(),
            endpoint: Some(format!("http://127.0.0.1:{port}")),
            virtual_hosted: false,
            allow_http: true,
            credentials: S3Credentials::Signer(SharedSigner(signer.clone())),
            retry: Some(object_store::RetryConfig {
                max_retries: 0,
                ..Default::default()
            }),
        };
        let s3 = build_object_store(&settings, "warehouse").expect("built");
        let bytes = s3
            .get_range(
                &ObjectPath::parse("t/data/seg 1.parquet").expect("path"),
                0..4,
            )
            .await
            .expect("read");
        assert_eq!(&bytes[..], b"PAR1");
        let head = server.await.expect("server");
        assert!(
            head.starts_with("get /warehouse/t/data/seg%201.parquet http/1.1"),
            "{head}"
        );
        assert!(
            head.contains("authorization: aws4-hmac-sha256 credential=akidremote/x"),
            "{head}"
        );
        assert!(head.contains("x-amz-date: 20260101t000000z"), "{head}");
        assert!(
            head.contains("x-amz-content-sha256: unsigned-payload"),
            "{head}"
        );
        assert!(head.contains("range: bytes=0-3"), "{head}");
        assert!(!head.contains("cache-control"), "{head}");
        let asked = signer.0.lock().expect("asked").clone();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].method, "GET");
        assert_eq!(
            asked[0].uri,
            format!("http://127.0.0.1:{port}/warehouse/t/data/seg%201.parquet")
        );
        assert_eq!(asked[0].region, "eu-central-1");
        assert_eq!(
            asked[0].headers.get("range"),
            Some(&vec!["bytes=0-3".to_string()])
        );
        assert!(!asked[0].headers.contains_key("authorization"));
    }
}
