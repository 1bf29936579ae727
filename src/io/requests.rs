//! S3 requests by kind, as they go on the wire: `thadam_iceberg_store_requests_total{kind}`.
//!
//! Counted in the HTTP connector every S3 client is built with (`connector`), not around the
//! `ObjectStore`: only there is each request object_store sends seen as S3 sees it (and bills
//! it). A retry is a request of its own; a listing is one request per page of up to 1,000 keys
//! (object_store follows the continuation tokens); a multipart upload is its create, each part
//! and its complete (or abort); a bulk delete is one `DeleteObjects` per up to 1,000 keys;
//! `get_ranges` is one ranged GET per range left after object_store coalesces them; a copy is a
//! PUT with `x-amz-copy-source`. Credential requests (instance metadata) go through another
//! connector and are not counted, nor are remote signing requests (they go to the catalog).
//!
//! Kinds follow S3's price list, which bills PUT, COPY, POST and LIST in one tier, GET and HEAD
//! (and the rest) in another, and DELETE not at all:
//!
//! - `put`: PutObject, and a multipart upload's CreateMultipartUpload (a POST), UploadPart and
//!   CompleteMultipartUpload (a POST);
//! - `copy`: CopyObject and UploadPartCopy;
//! - `list`: one ListObjectsV2 page;
//! - `get`: GetObject, ranged or not;
//! - `head`: HeadObject;
//! - `delete`: DeleteObject, DeleteObjects (up to 1,000 keys) and AbortMultipartUpload;
//! - `other`: anything else (none is sent today).

use http::Method;
use object_store::client::HttpRequest;

/// The metric.
pub(crate) const STORE_REQUESTS: &str = "thadam_iceberg_store_requests_total";

/// What an S3 request is, for the price list (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestKind {
    Put,
    Copy,
    List,
    Get,
    Head,
    Delete,
    Other,
}

impl RequestKind {
    pub(crate) const ALL: [RequestKind; 7] = [
        RequestKind::Put,
        RequestKind::Copy,
        RequestKind::List,
        RequestKind::Get,
        RequestKind::Head,
        RequestKind::Delete,
        RequestKind::Other,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RequestKind::Put => "put",
            RequestKind::Copy => "copy",
            RequestKind::List => "list",
            RequestKind::Get => "get",
            RequestKind::Head => "head",
            RequestKind::Delete => "delete",
            RequestKind::Other => "other",
        }
    }
}

/// The kind of a request with `method`, the URI's `query` and, for a PUT, whether it carries
/// `x-amz-copy-source`. Only the names of the query's parameters are read (`list-type`,
/// `uploads`, `uploadId`, `delete`), never their values.
pub(crate) fn classify(method: &Method, query: Option<&str>, copy_source: bool) -> RequestKind {
    let has = |name: &str| {
        query.is_some_and(|q| {
            q.split('&')
                .any(|pair| pair.split('=').next() == Some(name))
        })
    };
    match *method {
        Method::GET if has("list-type") => RequestKind::List,
        Method::GET => RequestKind::Get,
        Method::HEAD => RequestKind::Head,
        Method::PUT if copy_source => RequestKind::Copy,
        Method::PUT => RequestKind::Put,
        Method::POST if has("delete") => RequestKind::Delete,
        Method::POST if has("uploads") || has("uploadId") => RequestKind::Put,
        Method::DELETE => RequestKind::Delete,
        _ => RequestKind::Other,
    }
}

/// The kind of `request`.
pub(crate) fn kind_of(request: &HttpRequest) -> RequestKind {
    classify(
        request.method(),
        request.uri().query(),
        request.headers().contains_key("x-amz-copy-source"),
    )
}

/// Counts one request of `kind` sent.
pub(crate) fn count(kind: RequestKind) {
    metrics::counter!(STORE_REQUESTS, "kind" => kind.as_str()).increment(1);
}

/// Creates every kind's series at 0 when a registrar starts, so that a rate or a per-segment
/// ratio has a first sample to rise from (adding 0 to a series that exists changes nothing).
pub(crate) fn announce_store_request_counters() {
    for kind in RequestKind::ALL {
        metrics::counter!(STORE_REQUESTS, "kind" => kind.as_str()).increment(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_classified_as_s3_bills_them() {
        let cases: &[(Method, Option<&str>, bool, RequestKind)] = &[
            (Method::GET, None, false, RequestKind::Get),
            (Method::GET, Some("versionId=3"), false, RequestKind::Get),
            (
                Method::GET,
                Some("list-type=2&prefix=a%2F"),
                false,
                RequestKind::List,
            ),
            (
                Method::GET,
                Some("continuation-token=x&list-type=2&prefix=a&start-after=a%2Fb"),
                false,
                RequestKind::List,
            ),
            (Method::HEAD, None, false, RequestKind::Head),
            (Method::PUT, None, false, RequestKind::Put),
            (
                Method::PUT,
                Some("partNumber=2&uploadId=u"),
                false,
                RequestKind::Put,
            ),
            (Method::PUT, None, true, RequestKind::Copy),
            (
                Method::PUT,
                Some("partNumber=1&uploadId=u"),
                true,
                RequestKind::Copy,
            ),
            (Method::POST, Some("uploads"), false, RequestKind::Put),
            (Method::POST, Some("uploads="), false, RequestKind::Put),
            (Method::POST, Some("uploadId=u"), false, RequestKind::Put),
            (Method::POST, Some("delete"), false, RequestKind::Delete),
            (Method::DELETE, None, false, RequestKind::Delete),
            (
                Method::DELETE,
                Some("uploadId=u"),
                false,
                RequestKind::Delete,
            ),
            (Method::OPTIONS, None, false, RequestKind::Other),
            (Method::POST, None, false, RequestKind::Other),
        ];
        for (method, query, copy, kind) in cases {
            assert_eq!(
                classify(method, *query, *copy),
                *kind,
                "{method} ?{query:?} copy {copy}"
            );
        }
        // A value that looks like a parameter's name is not one.
        assert_eq!(
            classify(&Method::GET, Some("prefix=list-type"), false),
            RequestKind::Get
        );
    }

    /// A recorder that keeps this metric's counts by kind (the test's own, not the process's).
    #[derive(Default)]
    struct Counts(std::sync::Mutex<Vec<(String, std::sync::Arc<std::sync::atomic::AtomicU64>)>>);

    impl Counts {
        fn of(&self, kind: &str) -> u64 {
            self.0
                .lock()
                .expect("counts")
                .iter()
                .filter(|(k, _)| k == kind)
                .map(|(_, n)| n.load(std::sync::atomic::Ordering::Relaxed))
                .sum()
        }
    }

    impl metrics::Recorder for Counts {
        fn describe_counter(
            &self,
            _: metrics::KeyName,
            _: Option<metrics::Unit>,
            _: metrics::SharedString,
        ) {
        }
        fn describe_gauge(
            &self,
            _: metrics::KeyName,
            _: Option<metrics::Unit>,
            _: metrics::SharedString,
        ) {
        }
        fn describe_histogram(
            &self,
            _: metrics::KeyName,
            _: Option<metrics::Unit>,
            _: metrics::SharedString,
        ) {
        }
        fn register_counter(
            &self,
            key: &metrics::Key,
            _: &metrics::Metadata<'_>,
        ) -> metrics::Counter {
            if key.name() != STORE_REQUESTS {
                return metrics::Counter::noop();
            }
            let kind = key
                .labels()
                .find(|l| l.key() == "kind")
                .map(|l| l.value().to_string())
                .unwrap_or_default();
            let mut counts = self.0.lock().expect("counts");
            let counter = match counts.iter().find(|(k, _)| *k == kind) {
                Some((_, n)) => std::sync::Arc::clone(n),
                None => {
                    let n = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
                    counts.push((kind, std::sync::Arc::clone(&n)));
                    n
                }
            };
            metrics::Counter::from_arc(counter)
        }
        fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
            metrics::Gauge::noop()
        }
        fn register_histogram(
            &self,
            _: &metrics::Key,
            _: &metrics::Metadata<'_>,
        ) -> metrics::Histogram {
            metrics::Histogram::noop()
        }
    }

    /// Answers one request per connection as S3 would, enough for object_store to take the
    /// answer: a listing in two pages, ranged reads, a multipart upload, a bulk delete.
    async fn fake_s3(listener: tokio::net::TcpListener) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        const DATE: &str = "last-modified: Sun, 06 Dec 2026 00:00:00 GMT\r\netag: \"e\"\r\n";
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let mut got = Vec::new();
            let mut buf = [0u8; 8192];
            let head_end = loop {
                if let Some(at) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                    break at + 4;
                }
                match socket.read(&mut buf).await {
                    Ok(0) | Err(_) => break 0,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            };
            if head_end == 0 {
                continue;
            }
            let head = String::from_utf8_lossy(&got[..head_end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while got.len() < head_end + length {
                match socket.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            let line = head.lines().next().unwrap_or_default().to_string();
            let range = head
                .lines()
                .find_map(|l| l.strip_prefix("range: bytes="))
                .and_then(|r| r.trim().split_once('-'))
                .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)));
            let xml = |body: String| {
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/xml\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                )
            };
            let entry = |key: &str| {
                format!(
                    "<Contents><Key>{key}</Key><LastModified>2026-12-06T00:00:00.000Z</LastModified>\
                     <ETag>\"e\"</ETag><Size>10</Size></Contents>"
                )
            };
            let answer = if line.starts_with("get ") && line.contains("list-type=2") {
                let (more, key) = if line.contains("continuation-token") {
                    ("<IsTruncated>false</IsTruncated>", "d/b")
                } else {
                    (
                        "<IsTruncated>true</IsTruncated><NextContinuationToken>t</NextContinuationToken>",
                        "d/a",
                    )
                };
                xml(format!(
                    "<ListBucketResult>{more}{}</ListBucketResult>",
                    entry(key)
                ))
            } else if line.starts_with("get ") {
                match range {
                    Some((a, b)) => format!(
                        "HTTP/1.1 206 Partial Content\r\n{DATE}content-range: bytes {a}-{b}/4000000\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}",
                        b - a + 1,
                        "x".repeat((b - a + 1) as usize)
                    ),
                    None => format!(
                        "HTTP/1.1 200 OK\r\n{DATE}content-length: 10\r\nconnection: close\r\n\r\n0123456789"
                    ),
                }
            } else if line.starts_with("head ") {
                format!("HTTP/1.1 200 OK\r\n{DATE}content-length: 10\r\nconnection: close\r\n\r\n")
            } else if line.starts_with("post ") && line.contains("?uploads") {
                xml("<InitiateMultipartUploadResult><UploadId>u</UploadId></InitiateMultipartUploadResult>".into())
            } else if line.starts_with("post ") && line.contains("uploadid=") {
                xml("<CompleteMultipartUploadResult><ETag>\"e\"</ETag></CompleteMultipartUploadResult>".into())
            } else if line.starts_with("post ") && line.contains("?delete") {
                xml("<DeleteResult><Deleted><Key>d/0</Key></Deleted></DeleteResult>".into())
            } else if line.starts_with("put ") && head.contains("x-amz-copy-source") {
                xml("<CopyObjectResult><ETag>\"e\"</ETag></CopyObjectResult>".into())
            } else if line.starts_with("put ") {
                format!("HTTP/1.1 200 OK\r\n{DATE}content-length: 0\r\nconnection: close\r\n\r\n")
            } else if line.starts_with("delete ") {
                "HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n".to_string()
            } else {
                "HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    .to_string()
            };
            let _ = socket.write_all(answer.as_bytes()).await;
        }
    }

    /// Each call of an S3 client is counted as the requests it sends: a listing by pages,
    /// `get_ranges` by the ranges left after merging, a multipart upload by its create, parts and
    /// complete, a bulk delete by thousands of keys.
    #[test]
    fn a_client_counts_what_it_sends_by_kind() {
        use futures::{StreamExt, TryStreamExt};
        use object_store::ObjectStore;
        use object_store::path::Path as ObjectPath;

        use crate::io::credentials::{S3Credentials, S3Keys};
        use crate::io::store::{S3Settings, build_object_store};
        use crate::secret::Secret;

        let counts = Counts::default();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        metrics::with_local_recorder(&counts, || {
            runtime.block_on(async {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                let port = listener.local_addr().expect("addr").port();
                let server = tokio::spawn(fake_s3(listener));
                let settings = S3Settings {
                    region: "us-east-1".into(),
                    endpoint: Some(format!("http://127.0.0.1:{port}")),
                    virtual_hosted: false,
                    allow_http: true,
                    credentials: S3Credentials::Keys(S3Keys {
                        access_key_id: Secret::new("AKID"),
                        secret_access_key: Secret::new("secret"),
                        session_token: None,
                    }),
                    retry: Some(object_store::RetryConfig {
                        max_retries: 0,
                        ..Default::default()
                    }),
                };
                let s3 = build_object_store(&settings, "b").expect("built");
                let key = ObjectPath::from("d/k");
                let mut expected: Vec<(&str, u64)> = Vec::new();
                let mut check = |what: &str, kind: &'static str, more: u64| {
                    match expected.iter_mut().find(|(k, _)| *k == kind) {
                        Some((_, n)) => *n += more,
                        None => expected.push((kind, more)),
                    }
                    for kind in RequestKind::ALL.map(RequestKind::as_str) {
                        let want = expected
                            .iter()
                            .find(|(k, _)| *k == kind)
                            .map_or(0, |(_, n)| *n);
                        assert_eq!(counts.of(kind), want, "{kind} after {what}");
                    }
                };

                s3.put(&key, "x".into()).await.expect("put");
                check("put", "put", 1);
                s3.get(&key)
                    .await
                    .expect("get")
                    .bytes()
                    .await
                    .expect("body");
                check("get", "get", 1);
                s3.get_range(&key, 0..4).await.expect("range");
                check("get_range", "get", 1);
                // Less than 1 MiB apart: merged into one GET; 3 MB apart: two.
                s3.get_ranges(&key, &[0..4, 100..104])
                    .await
                    .expect("ranges");
                check("get_ranges, close", "get", 1);
                s3.get_ranges(&key, &[0..4, 3_000_000..3_000_004])
                    .await
                    .expect("ranges");
                check("get_ranges, apart", "get", 2);
                s3.head(&key).await.expect("head");
                check("head", "head", 1);
                let listed: Vec<_> = s3
                    .list(Some(&ObjectPath::from("d")))
                    .try_collect()
                    .await
                    .expect("list");
                assert_eq!(listed.len(), 2);
                check("list of two pages", "list", 2);
                s3.copy(&key, &ObjectPath::from("d/c")).await.expect("copy");
                check("copy", "copy", 1);
                s3.delete(&key).await.expect("delete");
                check("delete", "delete", 1);
                let keys = (0..1_001).map(|i| Ok(ObjectPath::from(format!("d/{i}"))));
                let deleted: Vec<_> = s3
                    .delete_stream(futures::stream::iter(keys).boxed())
                    .try_collect()
                    .await
                    .expect("bulk delete");
                assert_eq!(deleted.len(), 1_001);
                check("bulk delete of 1,001 keys", "delete", 2);
                let mut upload = s3.put_multipart(&key).await.expect("create");
                check("multipart create", "put", 1);
                upload.put_part("a".into()).await.expect("part");
                upload.put_part("b".into()).await.expect("part");
                check("two parts", "put", 2);
                upload.complete().await.expect("complete");
                check("complete", "put", 1);
                let mut upload = s3.put_multipart(&key).await.expect("create");
                check("multipart create", "put", 1);
                upload.abort().await.expect("abort");
                check("multipart abort", "delete", 1);
                server.abort();
            });
        });
    }
}
