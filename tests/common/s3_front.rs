//! A front for the real S3 server that fails object writes (PUT/POST: manifests, manifest lists,
//! metadata) the way a store can, and forwards everything else unchanged. The client's Host
//! header is kept, so SigV4 signatures still verify upstream.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;

use super::relay::Proxy;

/// What the front does to writes.
#[derive(Debug, Clone, Copy)]
pub enum WriteFault {
    /// 403 AccessDenied, always (read-only credentials).
    Refuse,
    /// 503 SlowDown for this long after the front starts (an outage), then pass.
    Outage(Duration),
}

pub struct S3Front {
    pub uri: String,
    _proxy: Proxy,
}

fn s3_error(status: hyper::StatusCode, code: &str) -> hyper::Response<Full<Bytes>> {
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>injected \
         by the test front</Message></Error>"
    );
    let mut r = hyper::Response::new(Full::new(Bytes::from(xml)));
    *r.status_mut() = status;
    r
}

impl S3Front {
    pub async fn start(upstream: &str, fault: WriteFault) -> S3Front {
        let started = Instant::now();
        let proxy = Proxy::start(upstream, move |parts, body, upstream| async move {
            let write = parts.method == hyper::Method::PUT || parts.method == hyper::Method::POST;
            match fault {
                WriteFault::Refuse if write => {
                    return Ok(s3_error(hyper::StatusCode::FORBIDDEN, "AccessDenied"));
                }
                WriteFault::Outage(d) if write && started.elapsed() < d => {
                    return Ok(s3_error(
                        hyper::StatusCode::SERVICE_UNAVAILABLE,
                        "ServiceUnavailable",
                    ));
                }
                _ => {}
            }
            upstream.forward(&parts, body, true).await
        })
        .await;
        S3Front {
            uri: proxy.uri.clone(),
            _proxy: proxy,
        }
    }
}
