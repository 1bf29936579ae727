//! An HTTP proxy in front of the real REST fixture that holds one chosen request until the test
//! releases it, then forwards it and returns the real answer: a deterministic way to make another
//! writer act between a registrar's decision and its request (a creation race, a schema-commit
//! race). Everything else is forwarded as is.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Response, StatusCode};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// Which request to hold: a POST whose path ends with `path_suffix` and whose body contains
/// `body_contains`.
#[derive(Clone)]
pub struct Hold {
    pub path_suffix: String,
    pub body_contains: String,
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
    task: JoinHandle<()>,
}

impl HoldProxy {
    pub async fn start(upstream: &str, hold: Hold) -> HoldProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("addr").port();
        let state = Arc::new(Mutex::new(State {
            armed: Some(hold),
            ..State::default()
        }));
        let changed = Arc::new(Notify::new());
        let client = reqwest::Client::new();
        let upstream = upstream.trim_end_matches('/').to_string();
        let shared = (Arc::clone(&state), Arc::clone(&changed), client, upstream);
        let task = super::relay::serve(listener, move |parts, body| {
            let (state, changed, client, upstream) = shared.clone();
            async move { handle(parts, body, &state, &changed, &client, &upstream).await }
        });
        HoldProxy {
            uri: format!("http://127.0.0.1:{port}"),
            state,
            changed,
            task,
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

impl Drop for HoldProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Reply = Result<Response<Full<Bytes>>, std::io::Error>;

async fn handle(
    parts: hyper::http::request::Parts,
    body: Bytes,
    state: &Mutex<State>,
    changed: &Notify,
    client: &reqwest::Client,
    upstream: &str,
) -> Reply {
    let hold = {
        let mut s = state.lock().expect("state");
        let matches = s.armed.as_ref().is_some_and(|h| {
            parts.method == hyper::Method::POST
                && parts.uri.path().ends_with(&h.path_suffix)
                && body
                    .windows(h.body_contains.len())
                    .any(|w| w == h.body_contains.as_bytes())
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
    let answer = match super::relay::request(client, upstream, &parts, body, false)
        .send()
        .await
    {
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
