//! The operations endpoints, served by a small axum server:
//!
//! - `GET /metrics`: the Prometheus text exposition of the recorder installed by
//!   [`install_prometheus`] (404 when the process installed none);
//! - `GET /healthz`: 200 while the process is up;
//! - `GET /readyz`: 200 when every registrar is ready (the catalog answered with our credentials,
//!   every table resolved), 503 with the reasons otherwise (see [`Health::readiness`]).
//!
//! The server is exposed to whatever can reach the address, so every resource it holds is
//! bounded ([`ServeLimits`]): at most `max_connections` connections are open (further ones wait
//! in the kernel's accept queue, which costs this process no file descriptor), a request head
//! must arrive within `header_read_timeout` (this also closes connections that send nothing and
//! keep-alive connections idle between requests), a request head is at most `max_header_bytes`
//! (431 above), and every connection is closed `connection_timeout` after it was accepted (after
//! its current response; a slow reader or a trickled body cannot hold a slot for longer). Accept
//! errors (EMFILE when the process is out of descriptors) are logged and retried with backoff:
//! they never stop the server.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::{JoinHandle, JoinSet};

use crate::error::{Error, Result};
use crate::ops::health::Health;
use crate::runtime::metrics::{Kind, METRICS, describe, histogram_buckets};

/// The Prometheus text format's content type.
const EXPOSITION: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How often the recorder's upkeep runs (it bounds the memory of idle series' bookkeeping).
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Installs a Prometheus recorder as the process's global `metrics` recorder, with every
/// histogram rendered as a Prometheus histogram (buckets from
/// [`crate::runtime::metrics::histogram_buckets`]) and every metric described. Must run inside a tokio
/// runtime (it spawns the recorder's upkeep task). Fails if a recorder is already installed.
pub fn install_prometheus() -> Result<PrometheusHandle> {
    let mut builder = PrometheusBuilder::new();
    for m in METRICS.iter().filter(|m| m.kind == Kind::Histogram) {
        builder = builder
            .set_buckets_for_metric(Matcher::Full(m.name.to_string()), histogram_buckets(m.name))
            .map_err(|e| {
                Error::internal(format!("metrics buckets for {}: {e}", m.name)).with_source(e)
            })?;
    }
    let handle = builder.install_recorder().map_err(|e| {
        Error::internal(format!("cannot install the metrics recorder: {e}")).with_source(e)
    })?;
    describe();
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(UPKEEP_EVERY);
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

/// What the endpoints answer from.
#[derive(Clone)]
pub struct Endpoints {
    /// The recorder to render on `/metrics`; `None` serves 404 there.
    pub metrics: Option<PrometheusHandle>,
    pub health: Health,
}

/// The router with the three endpoints.
pub fn router(endpoints: Endpoints) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(endpoints)
}

async fn metrics(State(e): State<Endpoints>) -> Response {
    match &e.metrics {
        Some(handle) => ([(header::CONTENT_TYPE, EXPOSITION)], handle.render()).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            "no metrics recorder in this process\n",
        )
            .into_response(),
    }
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(e): State<Endpoints>) -> Response {
    match e.health.readiness() {
        Ok(summary) => (StatusCode::OK, format!("{summary}\n")).into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
    }
}

/// Binds the endpoints' address (port 0 picks a free one: read it from the listener).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|e| {
        Error::config_invalid(format!("--metrics-addr {addr}: cannot listen: {e}")).with_source(e)
    })
}

/// Binds `addr` ([`bind`]) and serves the endpoints there ([`serve`]) until `shutdown`
/// completes; returns the address bound (port 0 picks a free one).
pub async fn serve_at(
    addr: SocketAddr,
    endpoints: Endpoints,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<SocketAddr> {
    let listener = bind(addr).await?;
    let bound = listener
        .local_addr()
        .map_err(|e| Error::internal(format!("the metrics listener has no address: {e}")))?;
    serve(listener, endpoints, shutdown);
    Ok(bound)
}

/// The limits of the endpoints' server. The defaults suit a Prometheus scraper (one connection,
/// a request every few seconds) with a wide margin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServeLimits {
    /// The most connections open at once. Beyond it the server stops accepting until one
    /// closes (new connections wait in the kernel's accept queue). Default 64.
    pub max_connections: usize,
    /// How long the server waits for a complete request head, counted from when it starts
    /// waiting: a new connection, or a keep-alive connection after its last response. Slowloris
    /// clients and idle connections are closed after it. Default 10 s.
    pub header_read_timeout: Duration,
    /// How long a connection may stay open at all. It is then asked to close after its current
    /// response, and dropped [`CLOSE_GRACE`] later whatever it is doing. Default 60 s.
    pub connection_timeout: Duration,
    /// The largest request head (request line and headers) in bytes; larger is refused with
    /// 431. Default 8 KiB. Request bodies are never read (the endpoints take none).
    pub max_header_bytes: usize,
}

impl Default for ServeLimits {
    fn default() -> Self {
        ServeLimits {
            max_connections: 64,
            header_read_timeout: Duration::from_secs(10),
            connection_timeout: Duration::from_secs(60),
            max_header_bytes: 8 * 1024,
        }
    }
}

/// How long a connection that was asked to close may take to finish its response.
pub const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// hyper's smallest allowed read buffer; the buffer is the head limit plus this much room.
const MIN_BUF: usize = 8 * 1024;

/// Backoff after a failed accept (EMFILE, ENFILE, ENOMEM...): the condition is usually
/// momentary, and retrying at once would spin a core while it lasts.
const ACCEPT_BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(1));

/// The delay after `failures` consecutive failed accepts (1 for the first): doubling from
/// the minimum, capped at the maximum.
fn accept_backoff(failures: u32) -> Duration {
    let (min, max) = ACCEPT_BACKOFF;
    min.saturating_mul(1u32 << failures.saturating_sub(1).min(16))
        .min(max)
}

/// Serves the endpoints on `listener` with the default [`ServeLimits`] until `shutdown`
/// completes.
pub fn serve(
    listener: TcpListener,
    endpoints: Endpoints,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> JoinHandle<()> {
    serve_with(listener, endpoints, ServeLimits::default(), shutdown)
}

/// Serves the endpoints on `listener` within `limits` until `shutdown` completes; open
/// connections then get [`CLOSE_GRACE`] to finish their responses.
pub fn serve_with(
    listener: TcpListener,
    endpoints: Endpoints,
    limits: ServeLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let router = router(endpoints);
        let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
        let (stop, stopping) = watch::channel(false);
        let mut connections = JoinSet::new();
        let mut failures = 0u32;
        tokio::pin!(shutdown);
        loop {
            // Finished connections are reaped here so the set holds at most the open ones.
            while connections.try_join_next().is_some() {}
            // A slot first, then accept: when all are taken, connections wait in the kernel's
            // queue instead of holding one of this process's file descriptors each.
            let permit = tokio::select! {
                permit = Arc::clone(&slots).acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => break, // the semaphore is never closed
                },
                () = &mut shutdown => break,
            };
            let stream = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        failures = 0;
                        stream
                    }
                    Err(e) => {
                        failures = failures.saturating_add(1);
                        let delay = accept_backoff(failures);
                        tracing::warn!(
                            "the metrics endpoint cannot accept a connection ({e}); retrying in {}",
                            humantime::format_duration(delay)
                        );
                        tokio::select! {
                            () = tokio::time::sleep(delay) => continue,
                            () = &mut shutdown => break,
                        }
                    }
                },
                () = &mut shutdown => break,
            };
            connections.spawn(connection(
                stream,
                router.clone(),
                limits,
                stopping.clone(),
                permit,
            ));
        }
        drop(listener);
        let _ = stop.send(true);
        let drain = async { while connections.join_next().await.is_some() {} };
        // Connections close after their current response; CLOSE_GRACE bounds even that, and
        // what is left after it is aborted when the set is dropped.
        let _ = tokio::time::timeout(CLOSE_GRACE + Duration::from_secs(1), drain).await;
    })
}

/// Serves one connection within `limits`; `_slot` is released when it ends.
async fn connection(
    stream: TcpStream,
    router: Router,
    limits: ServeLimits,
    mut stopping: watch::Receiver<bool>,
    _slot: OwnedSemaphorePermit,
) {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes.saturating_add(MIN_BUF))
        .max_header_size(limits.max_header_bytes)
        .max_headers(64);
    let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(router));
    tokio::pin!(conn);
    let deadline = tokio::time::sleep(limits.connection_timeout);
    tokio::pin!(deadline);
    let mut closing = false;
    loop {
        tokio::select! {
            done = conn.as_mut() => {
                // Timeouts, resets and malformed requests end up here: the client's problem.
                if let Err(e) = done {
                    tracing::debug!("metrics endpoint connection ended: {e}");
                }
                return;
            }
            () = &mut deadline => {
                if closing {
                    return; // dropped: the grace is over
                }
                closing = true;
                conn.as_mut().graceful_shutdown();
                deadline.as_mut().reset(tokio::time::Instant::now() + CLOSE_GRACE);
            }
            changed = stopping.changed(), if !closing => {
                // A closed channel means the server is gone: stop as well.
                let _ = changed;
                closing = true;
                conn.as_mut().graceful_shutdown();
                deadline.as_mut().reset(tokio::time::Instant::now() + CLOSE_GRACE);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_backoff_doubles_from_the_minimum_to_the_cap() {
        assert_eq!(accept_backoff(0), Duration::from_millis(50));
        assert_eq!(accept_backoff(1), Duration::from_millis(50));
        assert_eq!(accept_backoff(2), Duration::from_millis(100));
        assert_eq!(accept_backoff(5), Duration::from_millis(800));
        assert_eq!(accept_backoff(6), Duration::from_secs(1));
        assert_eq!(accept_backoff(u32::MAX), Duration::from_secs(1));
    }

    #[test]
    fn the_default_limits_are_bounded() {
        let d = ServeLimits::default();
        assert_eq!(d.max_connections, 64);
        assert_eq!(d.header_read_timeout, Duration::from_secs(10));
        assert_eq!(d.connection_timeout, Duration::from_secs(60));
        assert_eq!(d.max_header_bytes, 8 * 1024);
    }
}
