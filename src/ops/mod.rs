//! Running the registrar as a service: the `/metrics`, `/healthz` and `/readyz` endpoints
//! (`http`, with the default feature `runner`), readiness across registrars ([`health`]), the periodic progress line
//! ([`progress`]), when a log counts as drained ([`catch_up`]) and the pre-flight `--check` ([`check`]). The standalone runner
//! (`examples/registrar.rs`) is a thin shell over these, so a host can reuse them and the tests
//! exercise the same code.

pub mod catch_up;
pub mod check;
pub mod health;
#[cfg(feature = "runner")]
pub mod http;
pub mod progress;
pub mod quarantine;
