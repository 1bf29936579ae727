//! An HTTP proxy in front of the real REST fixture that injects faults into commits.
//!
//! Every request is forwarded as is, except those a [`Rule`] picks: the commit requests of one
//! table (`POST .../tables/{name}`), told apart as appends (`add-snapshot` in the body) or schema
//! changes (`add-schema`). A rule can answer without forwarding (the commit is not applied),
//! forward and then answer 5xx (applied, but the client hears a failure), forward and then drop
//! the connection (applied, answer lost), or hold the request forever (a commit in flight when
//! the process dies). Loads, table creations (register) and `GET /v1/config` can be faulted too,
//! a refusal can carry `Retry-After`, and [`FaultProxy::store_by_idempotency_key`] makes the
//! proxy behave as the REST spec says servers do: the first answer to an `Idempotency-Key` is
//! stored and replayed for every later request with the same key, without forwarding it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Response, StatusCode};

use super::relay::{Proxy, Reply, Upstream, contains};

/// What to do with one matching commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward and return the real answer.
    Pass,
    /// Answer this status without forwarding: the commit is not applied.
    Refuse(u16),
    /// Like `Refuse`, with a `Retry-After` of this many seconds.
    RefuseRetryAfter(u16, u64),
    /// Forward (applied), then answer this status instead of the real one.
    ApplyThenFail(u16),
    /// Forward (applied), then close the connection without an answer.
    ApplyThenDrop,
    /// Never answer and never forward (a request in flight when the process dies).
    Hang,
}

/// Which commits a fault plan applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Append,
    Schema,
    /// `GET .../tables/{name}`.
    Load,
    /// `POST .../namespaces/{ns}/register` for the table (how the registrar creates tables).
    Create,
    /// `GET /v1/config`.
    Config,
    /// An append that also removes snapshots (`snapshot_retention`), while faults are planned
    /// for this kind (otherwise such an append is an `Append`).
    Expire,
}

/// A stored answer: status, content type, body.
type Stored = (u16, Vec<u8>);

#[derive(Default)]
struct Plan {
    /// Faults for the next matching requests of each kind, in order; once empty, all pass.
    faults: HashMap<Kind, VecDeque<Fault>>,
    /// What happened, for assertions: (kind, fault applied).
    log: Vec<(Kind, Fault)>,
    /// When each logged request arrived.
    times: Vec<Instant>,
    /// Replay answers by `Idempotency-Key` (the spec's server behaviour).
    store_by_key: bool,
    stored: HashMap<String, Stored>,
    /// The keys whose stored answer was replayed, in order.
    replayed: Vec<String>,
    /// Whether `GET /v1/config` advertises idempotency keys (added to the fixture's answer).
    advertise_idempotency: bool,
    /// The `Idempotency-Key` header of every matching commit (None when absent).
    idempotency_keys: Vec<Option<String>>,
}

pub struct FaultProxy {
    pub uri: String,
    plan: Arc<Mutex<Plan>>,
    _proxy: Proxy,
}

impl FaultProxy {
    /// Starts a proxy to `upstream` (`http://host:port`) for commits to table `table_name`.
    pub async fn start(upstream: &str, table_name: &str) -> FaultProxy {
        let plan = Arc::new(Mutex::new(Plan::default()));
        let suffix = format!("/tables/{table_name}");
        let state = (Arc::clone(&plan), suffix);
        let proxy = Proxy::start(upstream, move |parts, body, upstream| {
            let (plan, suffix) = state.clone();
            async move { handle(parts, body, &plan, &upstream, &suffix).await }
        })
        .await;
        FaultProxy {
            uri: proxy.uri.clone(),
            plan,
            _proxy: proxy,
        }
    }

    /// Queues faults for the next commits of `kind`.
    pub fn plan(&self, kind: Kind, faults: impl IntoIterator<Item = Fault>) {
        let mut plan = self.plan.lock().expect("plan");
        plan.faults.entry(kind).or_default().extend(faults);
    }

    /// Stores the first answer to each `Idempotency-Key` and replays it for repeats.
    pub fn store_by_idempotency_key(&self) {
        self.plan.lock().expect("plan").store_by_key = true;
    }

    /// The keys whose stored answer was replayed.
    pub fn replayed(&self) -> Vec<String> {
        self.plan.lock().expect("plan").replayed.clone()
    }

    /// When each logged request arrived, in log order.
    pub fn times(&self) -> Vec<Instant> {
        self.plan.lock().expect("plan").times.clone()
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

async fn handle(
    parts: hyper::http::request::Parts,
    body: Bytes,
    plan: &Mutex<Plan>,
    upstream: &Upstream,
    suffix: &str,
) -> Reply {
    let path = parts.uri.path();
    let post = parts.method == hyper::Method::POST;
    let get = parts.method == hyper::Method::GET;
    let table_name = suffix.trim_start_matches("/tables/");
    let expire_planned = plan
        .lock()
        .expect("plan")
        .faults
        .get(&Kind::Expire)
        .is_some_and(|f| !f.is_empty());
    let kind = if post && path.ends_with(suffix) {
        if expire_planned && contains(&body, b"remove-snapshots") {
            Some(Kind::Expire)
        } else if contains(&body, b"add-snapshot") {
            Some(Kind::Append)
        } else if contains(&body, b"add-schema") {
            Some(Kind::Schema)
        } else {
            None
        }
    } else if get && path.ends_with(suffix) {
        Some(Kind::Load)
    } else if post
        && path.ends_with("/register")
        && contains(&body, format!("\"name\":\"{table_name}\"").as_bytes())
    {
        Some(Kind::Create)
    } else if get && path.ends_with("/v1/config") {
        Some(Kind::Config)
    } else {
        None
    };
    let key = parts
        .headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let commit = matches!(kind, Some(Kind::Append | Kind::Schema | Kind::Expire));
    let fault = match kind {
        None => Fault::Pass,
        Some(kind) => {
            let mut p = plan.lock().expect("plan");
            // A repeated key gets the stored answer: the request is not applied again.
            if p.store_by_key
                && let Some(k) = &key
                && let Some((status, bytes)) = p.stored.get(k).cloned()
            {
                p.replayed.push(k.clone());
                if commit {
                    p.idempotency_keys.push(key.clone());
                }
                p.log.push((kind, Fault::Pass));
                p.times.push(Instant::now());
                return Ok(json_answer(status, bytes));
            }
            let fault = p
                .faults
                .get_mut(&kind)
                .and_then(VecDeque::pop_front)
                .unwrap_or(Fault::Pass);
            p.log.push((kind, fault));
            p.times.push(Instant::now());
            if commit {
                p.idempotency_keys.push(key.clone());
            }
            fault
        }
    };
    match fault {
        Fault::Refuse(status) => return Ok(status_only(status)),
        Fault::RefuseRetryAfter(status, secs) => {
            let mut r = status_only(status);
            r.headers_mut().insert(
                hyper::header::RETRY_AFTER,
                hyper::header::HeaderValue::from(secs),
            );
            return Ok(r);
        }
        Fault::Hang => {
            std::future::pending::<()>().await;
            unreachable!()
        }
        _ => {}
    }
    let answer = match upstream.send(&parts, body, false).await {
        Ok(a) => a,
        Err(_) => return Ok(status_only(502)),
    };
    let store = key.filter(|_| plan.lock().expect("plan").store_by_key);
    if let Some(k) = store {
        // Keep the real answer for replays, then apply the fault to this one.
        let status = answer.status().as_u16();
        let bytes = answer.bytes().await.unwrap_or_default().to_vec();
        plan.lock()
            .expect("plan")
            .stored
            .insert(k, (status, bytes.clone()));
        return match fault {
            Fault::ApplyThenFail(s) => Ok(status_only(s)),
            Fault::ApplyThenDrop => Err(std::io::Error::other("answer dropped by the fault proxy")),
            _ => Ok(json_answer(status, bytes)),
        };
    }
    match fault {
        Fault::ApplyThenFail(status) => Ok(status_only(status)),
        Fault::ApplyThenDrop => Err(std::io::Error::other("answer dropped by the fault proxy")),
        _ => {
            let advertise = parts.uri.path().ends_with("/v1/config")
                && plan.lock().expect("plan").advertise_idempotency;
            let (status, headers) = (answer.status().as_u16(), answer.headers().clone());
            let mut bytes = answer.bytes().await.unwrap_or_default();
            if advertise && let Ok(mut config) = serde_json::from_slice::<serde_json::Value>(&bytes)
            {
                config["idempotency-key-lifetime"] = serde_json::json!("PT30M");
                bytes = Bytes::from(serde_json::to_vec(&config).unwrap_or_default());
            }
            Ok(super::relay::response(status, &headers, bytes))
        }
    }
}

fn json_answer(status: u16, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
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
