//! Retrying transient faults with the configured backoff, stopping early on shutdown.

use std::future::Future;

use crate::config::RetryPolicy;
use crate::error::Result;
use crate::shutdown::Shutdown;

/// Runs `op` until it succeeds, fails with a non-transient error, or shutdown is requested
/// (`Ok(None)`). Transient errors are logged with `what` and retried after `policy.delay(n)`.
pub async fn retry_transient<T, F, Fut>(
    policy: &RetryPolicy,
    shutdown: &mut Shutdown,
    what: &str,
    mut op: F,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut attempt: u32 = 0;
    loop {
        if shutdown.is_requested() {
            return Ok(None);
        }
        match op().await {
            Ok(v) => return Ok(Some(v)),
            Err(e) if e.is_transient() => {
                let delay = policy.delay(attempt);
                tracing::warn!(attempt, ?delay, "{what} failed, retrying: {e}");
                attempt = attempt.saturating_add(1);
                if !shutdown.sleep(delay).await {
                    return Ok(None);
                }
            }
            Err(e) => return Err(e),
        }
    }
}
