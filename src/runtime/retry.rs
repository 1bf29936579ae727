//! Retrying transient faults with the configured backoff, stopping early on shutdown, and making
//! the retries visible: every retried failure counts in `thadam_iceberg_retries_total{op,cause}`,
//! a server's `Retry-After` is honoured (capped by `retry.max`), and an operation that has been
//! failing (or a single request that has been waiting) for [`SLOW_WARNING_AFTER`] logs a warning.

use std::fmt::Display;
use std::future::Future;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::runtime::backoff::{RetryPolicy, delay_for};
use crate::runtime::shutdown::Shutdown;
use crate::runtime::status::StatusBoard;

/// When an operation that keeps failing, or one request that has not answered, is worth a
/// warning. 30 s: longer than any healthy catalog call or footer read (sub-second), longer than
/// the connect timeout (10 s), and well before the 60 s request timeout, so a catalog that stops
/// answering (SIGSTOP, a hung proxy) is reported while the request is still waiting.
pub const SLOW_WARNING_AFTER: Duration = Duration::from_secs(30);

/// The operations retries are counted by (the `op` label of `thadam_iceberg_retries_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `GET /v1/config` (connecting).
    Config,
    /// Loading or reloading a table.
    Load,
    /// Checking or creating a namespace.
    Namespace,
    /// Creating (registering) a table.
    Create,
    /// A schema-change commit.
    SchemaCommit,
    /// An append commit.
    Append,
    /// The OAuth2 token exchange.
    Token,
    /// Reading a Parquet footer from the bucket.
    Footer,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Config => "config",
            Op::Load => "load",
            Op::Namespace => "namespace",
            Op::Create => "create",
            Op::SchemaCommit => "schema_commit",
            Op::Append => "append",
            Op::Token => "token",
            Op::Footer => "footer",
        }
    }
}

/// Counts one retried failure of `op`.
pub fn count_retry(op: Op, cause: &'static str) {
    metrics::counter!("thadam_iceberg_retries_total", "op" => op.as_str(), "cause" => cause)
        .increment(1);
}

/// Counts a retried failure of `op` by the error's cause, and warns once the operation has been
/// failing for longer than [`SLOW_WARNING_AFTER`] (`failing_since`: its first failure).
pub fn note_retry(op: Op, error: &Error, failing_since: Instant, warned: &mut bool, what: &str) {
    count_retry(op, error.retry_cause());
    let failing = failing_since.elapsed();
    if failing >= SLOW_WARNING_AFTER && !*warned {
        *warned = true;
        tracing::warn!(
            op = op.as_str(),
            failing_for = ?failing,
            "{what} has been failing for {}s and is still retried: {error}",
            failing.as_secs()
        );
    }
}

/// Awaits `fut`, logging a warning if it has not finished after [`SLOW_WARNING_AFTER`] (a
/// request to a server that accepted the connection but does not answer).
pub async fn warn_if_slow<F: Future>(what: impl Display, fut: F) -> F::Output {
    tokio::pin!(fut);
    tokio::select! {
        out = &mut fut => return out,
        _ = tokio::time::sleep(SLOW_WARNING_AFTER) => {}
    }
    tracing::warn!(
        "{what}: no answer after {}s; still waiting",
        SLOW_WARNING_AFTER.as_secs()
    );
    fut.await
}

/// Whether a transient error is the catalog answering with a server error (500 and the 5xx
/// without a meaning of their own) rather than an outage (a refused connection, a timeout, a
/// 502/503/504 from a gateway): such an answer often repeats until someone acts (a catalog
/// that cannot parse what it was sent, a broken backend), so it is shown at once.
pub fn is_server_error(error: &Error) -> bool {
    matches!(error.retry_cause(), "status_500" | "status_5xx")
}

/// The table a retried catalog request is for: while the catalog answers it with a server
/// error, the table's entry says so (`TableStatus::catalog_error`) and `/readyz` answers 503.
#[derive(Clone, Copy)]
pub struct ReportTo<'a> {
    pub board: &'a StatusBoard,
    pub table: &'a str,
}

/// Runs `op` until it succeeds, fails with a non-transient error, or shutdown is requested
/// (`Ok(None)`). Transient errors are logged with `what`, counted under `kind`, and retried after
/// their `Retry-After` or `policy.delay(n)`. A server error ([`is_server_error`]) is also logged
/// as an ERROR with the catalog's message (again whenever the message changes), counted in
/// `thadam_iceberg_catalog_server_errors_total{op}`, and reported to `report`'s table until the
/// operation ends.
pub async fn retry_transient<T, F, Fut>(
    kind: Op,
    policy: &RetryPolicy,
    shutdown: &mut Shutdown,
    what: &str,
    report: Option<ReportTo<'_>>,
    op: F,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut server_error: Option<String> = None;
    let result = retry_loop(kind, policy, shutdown, what, report, &mut server_error, op).await;
    if let (Some(report), Some(_)) = (report, server_error) {
        report
            .board
            .update(report.table, |t| t.catalog_error = None);
    }
    result
}

async fn retry_loop<T, F, Fut>(
    kind: Op,
    policy: &RetryPolicy,
    shutdown: &mut Shutdown,
    what: &str,
    report: Option<ReportTo<'_>>,
    server_error: &mut Option<String>,
    mut op: F,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut attempt: u32 = 0;
    let mut failing_since: Option<Instant> = None;
    let mut warned = false;
    loop {
        if shutdown.is_requested() {
            return Ok(None);
        }
        // A stop abandons the attempt in flight: every operation retried here is a read, or a
        // creation whose repeat is recognised (409), so dropping it is safe, and a hung catalog
        // does not hold the stop for the 60 s request timeout.
        let result = tokio::select! {
            r = op() => r,
            _ = shutdown.requested() => return Ok(None),
        };
        match result {
            Ok(v) => {
                if warned {
                    tracing::info!(op = kind.as_str(), "{what} succeeded again");
                }
                return Ok(Some(v));
            }
            Err(e) if e.is_transient() => {
                let since = *failing_since.get_or_insert_with(Instant::now);
                note_retry(kind, &e, since, &mut warned, what);
                let delay = delay_for(policy, attempt, &e);
                if is_server_error(&e) {
                    note_server_error(kind, &e, what, report, server_error);
                }
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

/// Creates `thadam_iceberg_catalog_server_errors_total{op}` at 0 for the catalog requests whose
/// server errors are counted (`config`, `load`, `create`), when a registrar starts. A counter
/// series that appears only with its first increment has no earlier sample to rise from, so
/// `increase()` in an alert (examples/alerts.yml) would not see the first error; adding 0 to a
/// series that exists changes nothing.
pub(crate) fn announce_server_error_counters() {
    for op in [Op::Config, Op::Load, Op::Create] {
        metrics::counter!("thadam_iceberg_catalog_server_errors_total", "op" => op.as_str())
            .increment(0);
    }
}

/// Counts a server error, logs it as an ERROR when its message is new, and reports it to the
/// table.
fn note_server_error(
    kind: Op,
    error: &Error,
    what: &str,
    report: Option<ReportTo<'_>>,
    last: &mut Option<String>,
) {
    metrics::counter!("thadam_iceberg_catalog_server_errors_total", "op" => kind.as_str())
        .increment(1);
    let text = error.to_string();
    if last.as_deref() == Some(text.as_str()) {
        return;
    }
    tracing::error!(
        op = kind.as_str(),
        "{what}: the catalog answers with a server error, which is retried with backoff but \
         rarely goes away on its own; look at the catalog's log for its cause: {error}"
    );
    if let Some(report) = report {
        let shown = text.clone();
        report
            .board
            .update(report.table, |t| t.catalog_error = Some(shown));
    }
    *last = Some(text);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_server_error_is_reported_to_its_table_until_the_request_succeeds() {
        let board = StatusBoard::default();
        let policy = RetryPolicy {
            initial: Duration::from_millis(1),
            max: Duration::from_millis(2),
            ..RetryPolicy::default()
        };
        let (_stop, mut shutdown) = crate::runtime::shutdown::channel();
        let seen = std::sync::Mutex::new(Vec::new());
        let mut calls = 0;
        let result = retry_transient(
            Op::Create,
            &policy,
            &mut shutdown,
            "create table ns.t",
            Some(ReportTo {
                board: &board,
                table: "ns.t",
            }),
            || {
                calls += 1;
                seen.lock().expect("lock").push(
                    board
                        .snapshot()
                        .tables
                        .get("ns.t")
                        .and_then(|t| t.catalog_error.clone()),
                );
                let answer = match calls {
                    1 => Err(Error::unavailable("create: the catalog answered 500: boom")
                        .with_retry_hint("status_500", None)),
                    2 => Err(Error::unavailable("create: connection refused")
                        .with_retry_hint("connect", None)),
                    _ => Ok(7),
                };
                async move { answer }
            },
        )
        .await;
        assert_eq!(result.expect("ok"), Some(7));
        let seen = seen.into_inner().expect("lock");
        assert_eq!(seen[0], None);
        assert!(
            seen[1].as_deref().is_some_and(|e| e.contains("boom")),
            "{seen:?}"
        );
        assert!(seen[2].is_some(), "an outage meanwhile does not clear it");
        assert_eq!(
            board.snapshot().tables["ns.t"].catalog_error,
            None,
            "cleared on success"
        );
        assert!(is_server_error(
            &Error::unavailable("x").with_retry_hint("status_5xx", None)
        ));
        for cause in [
            "status_502",
            "status_503",
            "status_504",
            "connect",
            "timeout",
        ] {
            assert!(!is_server_error(
                &Error::unavailable("x").with_retry_hint(cause, None)
            ));
        }
    }
}
