//! An HTTP proxy in front of the real REST fixture that holds one chosen request until the test
//! releases it, then forwards it and returns the real answer: a deterministic way to make another
//! writer act between a registrar's decision and its request (a creation race, a schema-commit
//! race). Everything else is forwarded as is.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Response, StatusCode};
use tokio::sync::Notify;

use super::relay::{Proxy, Reply, Upstream, contains};

/// Which request to hold: a POST whose path ends with `path_suffix` and whose body contains
/// `body_contains`.
#[derive(Clone)]
pub struct Hold {
    pub path_suffix: String,
    pub body_contains: String,
}

impl Hold {
    /// The schema commit (`add-schema`) of table `table`.
    pub fn schema_commit(table: &str) -> Hold {
        Hold {
            path_suffix: format!("/tables/{table}"),
            body_contains: "add-schema".into(),
        }
    }

    /// The creation of table `table` (`POST .../register`, how the registrar creates tables).
    pub fn creation(table: &str) -> Hold {
        Hold {
            path_suffix: "/register".into(),
            body_contains: table.into(),
        }
    }
}

#[derive(Default)]
struct State {
    armed: Option<Hold>,
    held: bool,
    released: bool,
    /// Status of the held request's real answer, once forwarded.
    answer: Option<u16>,
}

pub struct HoldProxy {
    pub uri: String,
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
    _proxy: Proxy,
}

impl HoldProxy {
    pub async fn start(upstream: &str, hold: Hold) -> HoldProxy {
        let state = Arc::new(Mutex::new(State {
            armed: Some(hold),
            ..State::default()
        }));
        let changed = Arc::new(Notify::new());
        let shared = (Arc::clone(&state), Arc::clone(&changed));
        let proxy = Proxy::start(upstream, move |parts, body, upstream| {
            let (state, changed) = shared.clone();
            async move { handle(parts, body, &state, &changed, &upstream).await }
        })
        .await;
        HoldProxy {
            uri: proxy.uri.clone(),
            state,
            changed,
            _proxy: proxy,
        }
    }

    /// Waits until the chosen request arrived and is being held.
    pub async fn wait_held(&self) {
        tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                let notified = self.changed.notified();
                if self.state.lock().expect("state").held {
                    return;
                }
                notified.await;
            }
        })
        .await
        .expect("the request to hold arrived in time");
    }

    /// Lets the held request through and waits for its real answer's status.
    pub async fn release(&self) -> u16 {
        self.state.lock().expect("state").released = true;
        self.changed.notify_waiters();
        tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                let notified = self.changed.notified();
                if let Some(status) = self.state.lock().expect("state").answer {
                    return status;
                }
                notified.await;
            }
        })
        .await
        .expect("the held request was answered in time")
    }
}

async fn handle(
    parts: hyper::http::request::Parts,
    body: Bytes,
    state: &Mutex<State>,
    changed: &Notify,
    upstream: &Upstream,
) -> Reply {
    let hold = {
        let mut s = state.lock().expect("state");
        let matches = s.armed.as_ref().is_some_and(|h| {
            parts.method == hyper::Method::POST
                && parts.uri.path().ends_with(&h.path_suffix)
                && contains(&body, h.body_contains.as_bytes())
        });
        if matches {
            s.armed = None;
            s.held = true;
        }
        matches
    };
    if hold {
        changed.notify_waiters();
        loop {
            let notified = changed.notified();
            if state.lock().expect("state").released {
                break;
            }
            notified.await;
        }
    }
    let answer = match upstream.send(&parts, body, false).await {
        Ok(a) => a,
        Err(_) => return Ok(status_only(502)),
    };
    let (status, headers) = (answer.status().as_u16(), answer.headers().clone());
    let bytes = answer.bytes().await.unwrap_or_default();
    if hold {
        state.lock().expect("state").answer = Some(status);
        changed.notify_waiters();
    }
    Ok(super::relay::response(status, &headers, bytes))
}

fn status_only(status: u16) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    r
}
