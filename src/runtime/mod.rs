//! What every part of a running registrar leans on: the shutdown broadcast ([`shutdown`]),
//! retrying transient faults ([`retry`]) with backoff ([`backoff`]), the status board each
//! committer reports to ([`status`]), the service metrics it emits ([`metrics`], for Prometheus), which build
//! is running ([`build_info`]), warnings said once per process (`warn_once`), and the values
//! the registrars of a process share, the most recently used kept (`recent`).

pub mod backoff;
pub mod build_info;
pub mod metrics;
pub(crate) mod recent;
pub mod retry;
pub mod shutdown;
pub mod status;
pub(crate) mod warn_once;
