//! An HTTP proxy in front of the real REST fixture that injects faults into commits.
//!
//! Every request is forwarded as is, except those a [`Rule`] picks: the commit requests of one
//! table (`POST .../tables/{name}`), told apart as appends (`add-snapshot` in the body) or schema
//! changes (`add-schema`). A rule can answer without forwarding (the commit is not applied),
//! forward and then answer 5xx (applied, but the client hears a failure), forward and then drop
//! the connection (applied, answer lost), or hold the request forever (a commit in flight when
//! the process dies).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// What to do with one matching commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward and return the real answer.
    Pass,
    /// Answer this status without forwarding: the commit is not applied.
    Refuse(u16),
    /// Forward (applied), then answer this status instead of the real one.
    ApplyThenFail(u16),
    /// Forward (applied), then close the connection without an answer.
    ApplyThenDrop,
    /// Never answer and never forward (a request in flight when the process dies).
    Hang,
}

/// Which commits a fault plan applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Append,
    Schema,
}

#[derive(Default)]
struct Plan {
    /// Faults for the next matching commits, in order; once empty, everything passes.
    append: VecDeque<Fault>,
    schema: VecDeque<Fault>,
    /// What happened, for assertions: (kind, fault applied).
    log: Vec<(Kind, Fault)>,
    /// Whether `GET /v1/config` advertises idempotency keys (added to the fixture's answer).
    advertise_idempotency: bool,
    /// The `Idempotency-Key` header of every matching commit (None when absent).
    idempotency_keys: Vec<Option<String>>,
}

pub struct FaultProxy {
    pub uri: String,
    plan: Arc<Mutex<Plan>>,
    task: JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy to `upstream` (`http://host:port`) for commits to table `table_name`.
    pub async fn start(upstream: &str, table_name: &str) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("addr").port();
        let plan = Arc::new(Mutex::new(Plan::default()));
        let client = reqwest::Client::new();
        let upstream = upstream.trim_end_matches('/').to_string();
        let suffix = format!("/tables/{table_name}");
        let state = (Arc::clone(&plan), client, upstream, suffix);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = state.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let (plan, client, upstream, suffix) = state.clone();
                        async move { handle(req, &plan, &client, &upstream, &suffix).await }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        FaultProxy {
            uri: format!("http://127.0.0.1:{port}"),
            plan,
            task,
        }
    }

    /// Queues faults for the next commits of `kind`.
    pub fn plan(&self, kind: Kind, faults: impl IntoIterator<Item = Fault>) {
        let mut plan = self.plan.lock().expect("plan");
        match kind {
            Kind::Append => plan.append.extend(faults),
            Kind::Schema => plan.schema.extend(faults),
        }
    }

    /// Makes `GET /v1/config` advertise `idempotency-key-lifetime` (the fixture does not).
    pub fn advertise_idempotency(&self) {
        self.plan.lock().expect("plan").advertise_idempotency = true;
    }

    /// The `Idempotency-Key` header of every matching commit, in order.
    pub fn idempotency_keys(&self) -> Vec<Option<String>> {
        self.plan.lock().expect("plan").idempotency_keys.clone()
    }

    /// Every matching commit seen so far, with the fault applied to it.
    pub fn log(&self) -> Vec<(Kind, Fault)> {
        self.plan.lock().expect("plan").log.clone()
    }

    /// How many matching commits of `kind` were seen.
    pub fn seen(&self, kind: Kind) -> usize {
        self.log().iter().filter(|(k, _)| *k == kind).count()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Reply = Result<Response<Full<Bytes>>, std::io::Error>;

async fn handle(
    req: Request<Incoming>,
    plan: &Mutex<Plan>,
    client: &reqwest::Client,
    upstream: &str,
    suffix: &str,
) -> Reply {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let is_commit = parts.method == hyper::Method::POST && parts.uri.path().ends_with(suffix);
    let kind = if !is_commit {
        None
    } else if contains(&body, b"add-snapshot") {
        Some(Kind::Append)
    } else if contains(&body, b"add-schema") {
        Some(Kind::Schema)
    } else {
        None
    };
    let fault = match kind {
        None => Fault::Pass,
        Some(kind) => {
            let mut p = plan.lock().expect("plan");
            let fault = match kind {
                Kind::Append => p.append.pop_front(),
                Kind::Schema => p.schema.pop_front(),
            }
            .unwrap_or(Fault::Pass);
            p.log.push((kind, fault));
            let key = parts
                .headers
                .get("idempotency-key")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            p.idempotency_keys.push(key);
            fault
        }
    };
    match fault {
        Fault::Refuse(status) => return Ok(status_only(status)),
        Fault::Hang => {
            std::future::pending::<()>().await;
            unreachable!()
        }
        _ => {}
    }
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
        if name != hyper::header::HOST && name != hyper::header::CONTENT_LENGTH {
            forward = forward.header(name, value);
        }
    }
    let answer = match forward.body(body).send().await {
        Ok(a) => a,
        Err(_) => return Ok(status_only(502)),
    };
    match fault {
        Fault::ApplyThenFail(status) => Ok(status_only(status)),
        Fault::ApplyThenDrop => Err(std::io::Error::other("answer dropped by the fault proxy")),
        _ => {
            let advertise = parts.uri.path().ends_with("/v1/config")
                && plan.lock().expect("plan").advertise_idempotency;
            let mut response = Response::builder().status(answer.status().as_u16());
            for (name, value) in answer.headers() {
                if name != hyper::header::CONTENT_LENGTH && name != hyper::header::TRANSFER_ENCODING
                {
                    response = response.header(name, value);
                }
            }
            let mut bytes = answer.bytes().await.unwrap_or_default();
            if advertise && let Ok(mut config) = serde_json::from_slice::<serde_json::Value>(&bytes)
            {
                config["idempotency-key-lifetime"] = serde_json::json!("PT30M");
                bytes = Bytes::from(serde_json::to_vec(&config).unwrap_or_default());
            }
            Ok(response
                .body(Full::new(bytes))
                .unwrap_or_else(|_| status_only(502)))
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn status_only(status: u16) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(
        br#"{"error":{"message":"injected by the fault proxy","type":"FaultProxy","code":500}}"#,
    )));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}
