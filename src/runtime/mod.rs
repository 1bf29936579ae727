//! What every part of a running registrar leans on: the shutdown broadcast ([`shutdown`]),
//! retrying transient faults with backoff ([`retry`]), the status board each committer reports
//! to ([`status`]) and the service metrics it emits ([`metrics`], for Prometheus).

pub mod metrics;
pub mod retry;
pub mod shutdown;
pub mod status;
