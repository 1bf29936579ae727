//! Forwarding one HTTP request to the real server and its answer back, for the test proxies
//! (fault proxy, hold proxy, S3 fronts): the one place that decides which headers travel, and
//! the skeleton they share ([`Proxy`]: a loopback port, an accept loop, the upstream).

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Response;
use hyper::http::request::Parts;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// What a proxy's handler answers: a response, or `Err` to drop the connection unanswered.
pub type Reply = Result<Response<Full<Bytes>>, std::io::Error>;

/// A proxy on a free 127.0.0.1 port in front of a real server: every request goes to its
/// handler, which forwards it (through the [`Upstream`] it is handed), changes it, or answers
/// itself. Stops serving when dropped.
pub struct Proxy {
    /// `http://127.0.0.1:{port}`.
    pub uri: String,
    task: JoinHandle<()>,
}

impl Proxy {
    /// Starts a proxy in front of `upstream` (`http://host:port`) answering with `handler`.
    pub async fn start<F, Fut>(upstream: &str, handler: F) -> Proxy
    where
        F: Fn(Parts, Bytes, Upstream) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Reply> + Send + 'static,
    {
        let (listener, uri) = listen().await;
        let upstream = Upstream {
            client: reqwest::Client::new(),
            base: upstream.trim_end_matches('/').into(),
        };
        let task = serve(listener, move |parts, body| {
            handler(parts, body, upstream.clone())
        });
        Proxy { uri, task }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The real server behind a [`Proxy`], and the client that reaches it.
#[derive(Clone)]
pub struct Upstream {
    client: reqwest::Client,
    base: Arc<str>,
}

impl Upstream {
    /// Sends `parts` + `body` on (see [`request`]) and returns the real answer.
    pub async fn send(
        &self,
        parts: &Parts,
        body: Bytes,
        keep_host: bool,
    ) -> reqwest::Result<reqwest::Response> {
        request(&self.client, &self.base, parts, body, keep_host)
            .send()
            .await
    }

    /// Sends `parts` + `body` on and hands the answer back as it came (see [`forward`]).
    pub async fn forward(&self, parts: &Parts, body: Bytes, keep_host: bool) -> Reply {
        forward(&self.client, &self.base, parts, body, keep_host).await
    }
}

/// Serves HTTP/1 on `listener` until the task is aborted: each request's body is read whole and
/// handed to `handler` with its head. An `Err` from the handler drops the connection without
/// an answer (a lost response).
pub fn serve<F, Fut>(listener: TcpListener, handler: F) -> JoinHandle<()>
where
    F: Fn(Parts, Bytes) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let handler = handler.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let handler = handler.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        handler(parts, body).await
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    })
}

/// A listener on a free 127.0.0.1 port and its `http://` URI, for a front to [`serve`] on.
pub async fn listen() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let uri = format!(
        "http://127.0.0.1:{}",
        listener.local_addr().expect("addr").port()
    );
    (listener, uri)
}

/// Sends `parts` + `body` to `upstream` (see [`request`]) and hands its answer back as it came.
/// A transport failure drops the connection (a lost response).
pub async fn forward(
    client: &reqwest::Client,
    upstream: &str,
    parts: &Parts,
    body: Bytes,
    keep_host: bool,
) -> Reply {
    let answer = request(client, upstream, parts, body, keep_host)
        .send()
        .await
        .map_err(std::io::Error::other)?;
    let (status, headers) = (answer.status().as_u16(), answer.headers().clone());
    let bytes = answer.bytes().await.unwrap_or_default();
    Ok(response(status, &headers, bytes))
}

/// Whether a request body holds `needle` (how the proxies pick the requests they act on).
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// A REST catalog error answer (the spec's `ErrorModel`): `status`, `kind` (e.g.
/// `BadRequestException`) and `message`.
pub fn rest_error(status: u16, kind: &str, message: &str) -> Response<Full<Bytes>> {
    let body = serde_json::json!({"error": {"message": message, "type": kind, "code": status}});
    response(
        status,
        &reqwest::header::HeaderMap::new(),
        Bytes::from(body.to_string()),
    )
}

/// The request `parts` + `body` as sent to `upstream` (same method, path and query; headers
/// copied). `keep_host` keeps the client's `Host` header: a SigV4-signed request (to S3) signed
/// it, so it must arrive unchanged; a catalog request gets the upstream's own.
pub fn request(
    client: &reqwest::Client,
    upstream: &str,
    parts: &Parts,
    body: Bytes,
    keep_host: bool,
) -> reqwest::RequestBuilder {
    let url = format!(
        "{upstream}{}",
        parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/")
    );
    let mut forward = client.request(parts.method.clone(), url);
    for (name, value) in parts.headers.iter() {
        let skip =
            name == hyper::header::CONTENT_LENGTH || (!keep_host && name == hyper::header::HOST);
        if !skip {
            forward = forward.header(name, value);
        }
    }
    forward.body(body)
}

/// An answer to hand back: `status`, the upstream's headers but the framing ones (the body is
/// re-framed), and `bytes`.
pub fn response(
    status: u16,
    headers: &reqwest::header::HeaderMap,
    bytes: Bytes,
) -> Response<Full<Bytes>> {
    let mut response = Response::builder().status(status);
    for (name, value) in headers {
        if name != hyper::header::CONTENT_LENGTH && name != hyper::header::TRANSFER_ENCODING {
            response = response.header(name, value);
        }
    }
    response.body(Full::new(bytes)).unwrap_or_else(|_| {
        let mut r = Response::new(Full::new(Bytes::new()));
        *r.status_mut() = hyper::StatusCode::BAD_GATEWAY;
        r
    })
}
