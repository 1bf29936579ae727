//! The operations endpoints, served by a small axum server:
//!
//! - `GET /metrics`: the Prometheus text exposition of the recorder installed by
//!   [`install_prometheus`] (404 when the process installed none);
//! - `GET /healthz`: 200 while the process is up;
//! - `GET /readyz`: 200 when every registrar is ready (the catalog answered with our credentials,
//!   every table resolved), 503 with the reasons otherwise (see [`Health::readiness`]).

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::error::{Error, Result};
use crate::metrics::{Kind, METRICS, describe, histogram_buckets};
use crate::ops::health::Health;

/// The Prometheus text format's content type.
const EXPOSITION: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How often the recorder's upkeep runs (it bounds the memory of idle series' bookkeeping).
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Installs a Prometheus recorder as the process's global `metrics` recorder, with every
/// histogram rendered as a Prometheus histogram (buckets from
/// [`crate::metrics::histogram_buckets`]) and every metric described. Must run inside a tokio
/// runtime (it spawns the recorder's upkeep task). Fails if a recorder is already installed.
pub fn install_prometheus() -> Result<PrometheusHandle> {
    let mut builder = PrometheusBuilder::new();
    for m in METRICS.iter().filter(|m| m.kind == Kind::Histogram) {
        builder = builder
            .set_buckets_for_metric(Matcher::Full(m.name.to_string()), histogram_buckets(m.name))
            .map_err(|e| Error::internal(format!("metrics buckets for {}: {e}", m.name)))?;
    }
    let handle = builder
        .install_recorder()
        .map_err(|e| Error::internal(format!("cannot install the metrics recorder: {e}")))?;
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
    TcpListener::bind(addr)
        .await
        .map_err(|e| Error::config_invalid(format!("--metrics-addr {addr}: cannot listen: {e}")))
}

/// Serves the endpoints on `listener` until `shutdown` completes.
pub fn serve(
    listener: TcpListener,
    endpoints: Endpoints,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router(endpoints))
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::warn!("the metrics endpoint stopped: {e}");
        }
    })
}
