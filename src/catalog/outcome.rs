//! What an HTTP status from the catalog means for the registrar: one pure function,
//! [`classify_status`], used by every catalog call (config, namespaces, load, register, schema
//! commits, appends), so that a 429 means the same thing everywhere.
//!
//! | Status | Reads, namespace calls, register, config | Commits (append, schema change) |
//! |---|---|---|
//! | 2xx | success | success |
//! | 401, 419 | renew the token once (catalog_credential), then `auth.failed` | same |
//! | 403 | `auth.failed` | same |
//! | 404 | table / namespace missing (the call decides: absent table, `sink.iceberg_table_missing`) | `sink.iceberg_table_missing` |
//! | 409 | already exists (create namespace, register: load it instead) | conflict: reload, rebuild, retry |
//! | 408, 429, 500, 502, 503, 504, other 5xx | transient: retried with backoff, honouring `Retry-After` | state unknown: resend the identical request with the same `Idempotency-Key` (when the catalog advertises keys), then reload and reconcile |
//! | other 4xx | `sink.iceberg_catalog_rejected` with the server's message | same |
//!
//! Why a 503 on a commit is "state unknown" and not "not applied": the REST spec's
//! `ServiceUnavailableResponse` says the request "could have been partially processed" and that
//! a non-idempotent request should only be retried when `Retry-After` is present; 500, 502 and
//! 504 on `updateTable` are documented as `CommitStateUnknownException`. The spec says nothing of
//! 408 and 429 on commits, and a proxy or gateway may send either after it forwarded the request,
//! so they are treated the same way. "State unknown" costs one table load (the committed set then
//! tells what landed); treating it as "not applied" could register a file twice.

use std::time::{Duration, SystemTime};

/// Which kind of catalog call answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallKind {
    /// Anything that does not change table metadata, or whose repetition is harmless
    /// (config, load, namespace check and creation, register: a repeat answers 409).
    Other,
    /// `POST .../tables/{table}`: an append or a schema change.
    Commit,
}

/// What the caller must do with a status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StatusOutcome {
    Success,
    /// 401 / 419: the token was refused or expired; renew once and repeat.
    Reauthenticate,
    /// 403 (or 401/419 after a renewal): `auth.failed`.
    AuthFailed,
    /// 404: the table or namespace does not exist.
    Missing,
    /// 409: a requirement failed (commit) or the thing exists already (create, register).
    Conflict,
    /// Not applied (or harmless to repeat): retry after `retry_after` or the backoff.
    Transient {
        retry_after: Option<Duration>,
    },
    /// A commit that may or may not have been applied.
    StateUnknown {
        retry_after: Option<Duration>,
    },
    /// A request the catalog will never accept: `sink.iceberg_catalog_rejected`.
    Rejected,
}

/// Maps a status of a catalog call to what it means (see the module docs for the table).
/// `retry_after` is the parsed `Retry-After` header, if any.
pub(crate) fn classify_status(
    status: u16,
    call: CallKind,
    retry_after: Option<Duration>,
) -> StatusOutcome {
    match status {
        200..=299 => StatusOutcome::Success,
        401 | 419 => StatusOutcome::Reauthenticate,
        403 => StatusOutcome::AuthFailed,
        404 => StatusOutcome::Missing,
        409 => StatusOutcome::Conflict,
        408 | 429 | 500..=599 => match call {
            CallKind::Other => StatusOutcome::Transient { retry_after },
            CallKind::Commit => StatusOutcome::StateUnknown { retry_after },
        },
        _ => StatusOutcome::Rejected,
    }
}

/// Parses a `Retry-After` value: delay-seconds or an HTTP date (RFC 9110 §10.2.3). A date in
/// the past is "now" (zero); anything unparsable is ignored (the backoff applies).
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The `cause` label of a transient status.
pub(crate) fn status_cause(status: u16) -> &'static str {
    match status {
        408 => "status_408",
        429 => "status_429",
        500 => "status_500",
        502 => "status_502",
        503 => "status_503",
        504 => "status_504",
        _ => "status_5xx",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RA: Option<Duration> = Some(Duration::from_secs(2));

    #[test]
    fn every_status_has_one_meaning() {
        use CallKind::*;
        use StatusOutcome::*;
        for s in [200, 201, 204] {
            assert_eq!(classify_status(s, Other, None), Success);
            assert_eq!(classify_status(s, Commit, None), Success);
        }
        for call in [Other, Commit] {
            assert_eq!(classify_status(401, call, None), Reauthenticate);
            assert_eq!(classify_status(419, call, None), Reauthenticate);
            assert_eq!(classify_status(403, call, None), AuthFailed);
            assert_eq!(classify_status(404, call, None), Missing);
            assert_eq!(classify_status(409, call, None), Conflict);
            for s in [400, 405, 406, 410, 413, 415, 422, 451] {
                assert_eq!(classify_status(s, call, None), Rejected, "{s}");
            }
        }
        for s in [408, 429, 500, 501, 502, 503, 504, 507, 599] {
            assert_eq!(
                classify_status(s, Other, RA),
                Transient { retry_after: RA },
                "{s}"
            );
            assert_eq!(
                classify_status(s, Commit, RA),
                StateUnknown { retry_after: RA },
                "{s} on a commit may have been applied"
            );
        }
        assert_eq!(classify_status(302, Other, None), Rejected);
        assert_eq!(classify_status(100, Other, None), Rejected);
    }

    #[test]
    fn retry_after_takes_seconds_or_an_http_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480); // 2015-10-21 07:28:00
        assert_eq!(parse_retry_after("3", now), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(Duration::ZERO),
            "a date in the past means now"
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
        assert_eq!(parse_retry_after("", now), None);
    }
}
