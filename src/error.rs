//! One error type for the whole registrar: a stable [`ErrorCode`] operators can alert on, a message
//! that says what happened and what to do, and whether retrying can help.
//!
//! Messages never contain secrets: every constructor takes text that the caller composed from
//! key names, paths, object keys and server responses, never from a `Secret`'s value.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The stable, documented error codes. `as_str` is what logs, metrics and exit reports show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The configuration is wrong (including TLS trust problems with the catalog): fix and restart.
    ConfigInvalid,
    /// The catalog or token endpoint rejected our credentials or client certificate.
    AuthFailed,
    /// A segment's schema cannot be merged into its table's schema.
    SchemaMismatch,
    /// A segment has a type Iceberg cannot represent (e.g. UInt64).
    UnsupportedType,
    /// The table does not exist and `create_table` is false.
    TableMissing,
    /// An object is not a readable Parquet file (bad magic, truncated, oversized footer).
    FooterInvalid,
    /// An uploaded object the segment catalog names is not in the bucket.
    ObjectMissing,
    /// The on-disk segment catalog is corrupt before its tail.
    SegmentCatalogCorrupt,
    /// The catalog answered something we cannot act on (4xx other than auth/conflict, bad JSON).
    CatalogRejected,
    /// The table has a property or feature this registrar cannot write (e.g. an unparsable
    /// `commit.*` property, a format feature iceberg-rust does not support).
    TableUnsupported,
    /// A segment's rows do not fall into exactly one partition of its partitioned table (or the
    /// footer lacks the exact statistics to tell): it is never registered under a guessed one.
    PartitionMismatch,
    /// The catalog created the table with field IDs or a partition spec other than the files'
    /// (it renumbered them) and would not take them back: nothing is registered into it.
    FieldIdsRenumbered,
    /// An embedded feed delivered a segment out of catalog order.
    FeedOutOfOrder,
    /// The quarantine file (`on_bad_segment: quarantine`) cannot be read or written.
    QuarantineFailed,
    /// A network or server fault (unreachable, 5xx, timeout). Retried with backoff.
    Unavailable,
    /// Work abandoned because the registrar is stopping (not a failure).
    Cancelled,
    /// A bug or an impossible state.
    Internal,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::ConfigInvalid => "config.invalid",
            ErrorCode::AuthFailed => "auth.failed",
            ErrorCode::SchemaMismatch => "sink.iceberg_schema_mismatch",
            ErrorCode::UnsupportedType => "sink.iceberg_unsupported_type",
            ErrorCode::TableMissing => "sink.iceberg_table_missing",
            ErrorCode::FooterInvalid => "sink.iceberg_footer_invalid",
            ErrorCode::ObjectMissing => "sink.iceberg_object_missing",
            ErrorCode::SegmentCatalogCorrupt => "segment_catalog.corrupt",
            ErrorCode::CatalogRejected => "sink.iceberg_catalog_rejected",
            ErrorCode::TableUnsupported => "sink.iceberg_table_unsupported",
            ErrorCode::PartitionMismatch => "sink.iceberg_partition_mismatch",
            ErrorCode::FieldIdsRenumbered => "sink.iceberg_field_ids_renumbered",
            ErrorCode::FeedOutOfOrder => "feed.out_of_order",
            ErrorCode::QuarantineFailed => "quarantine.failed",
            ErrorCode::Unavailable => "sink.iceberg_unavailable",
            ErrorCode::Cancelled => "cancelled",
            ErrorCode::Internal => "internal",
        }
    }

    /// Whether an error with this code may go away on its own (and so is retried with backoff).
    pub fn is_transient(self) -> bool {
        matches!(self, ErrorCode::Unavailable)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error with a code and a human message (`code: message` when displayed).
///
/// The message is the failure itself ([`Error::detail`]) behind the context frames callers added
/// with [`Error::context`] (outermost first, each followed by `": "`); the frames are also kept
/// one by one ([`Error::contexts`]).
#[derive(Debug, Clone)]
pub struct Error {
    code: ErrorCode,
    /// The whole text shown after the code: every context frame, then the detail.
    message: String,
    /// Where the detail starts in `message` (the context frames and their `": "` come before it).
    detail_at: usize,
    /// The context frames, innermost (first added) first.
    contexts: Vec<String>,
    retry: Option<RetryHint>,
    /// The failure underneath (an object_store, iceberg or HTTP error), for
    /// [`std::error::Error::source`]. Shared so that the error stays `Clone`.
    source: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
}

/// Two errors are equal when they say the same: code, message (with its context) and retry hint
/// (a source has no equality of its own).
impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        self.code == other.code && self.message == other.message && self.retry == other.retry
    }
}

impl Eq for Error {}

/// What a transient error tells whoever retries it: why (for `thadam_iceberg_retries_total`'s
/// `cause` label) and how long the server asked us to wait (`Retry-After`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryHint {
    /// A short label: `status_429`, `timeout`, `connect`, `lost_response`, ...
    pub cause: &'static str,
    pub after: Option<Duration>,
}

impl Error {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Error {
            code,
            message: message.into(),
            detail_at: 0,
            contexts: Vec::new(),
            retry: None,
            source: None,
        }
    }

    /// Keeps `source` as the failure underneath this one. Only for errors whose `Display` and
    /// `Debug` hold no secret (URLs with their query strings are stripped before this).
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// [`Error::with_source`] for a source already boxed (as actors report their failures).
    pub fn with_boxed_source(mut self, source: Box<dyn std::error::Error + Send + Sync>) -> Self {
        self.source = Some(Arc::from(source));
        self
    }

    /// Attaches why a transient error happened and when the server said to retry.
    pub fn with_retry_hint(mut self, cause: &'static str, after: Option<Duration>) -> Self {
        self.retry = Some(RetryHint { cause, after });
        self
    }

    /// The retry hint, if the error carries one.
    pub fn retry_hint(&self) -> Option<RetryHint> {
        self.retry
    }

    /// The `cause` label for `thadam_iceberg_retries_total` (`other` when unknown).
    pub fn retry_cause(&self) -> &'static str {
        self.retry.map_or("other", |h| h.cause)
    }

    /// The server's `Retry-After`, if it sent one.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry.and_then(|h| h.after)
    }

    pub fn config_invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::ConfigInvalid, message)
    }

    pub fn auth_failed(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::AuthFailed, message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unavailable, message)
    }

    /// Work abandoned because the registrar is stopping.
    pub fn cancelled() -> Self {
        Self::new(ErrorCode::Cancelled, "the registrar is stopping")
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }

    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// The whole message as displayed after the code: the context frames (outermost first, each
    /// followed by `": "`), then [`Error::detail`].
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The failure itself, without the context frames [`Error::context`] added (with any advice).
    pub fn detail(&self) -> &str {
        &self.message[self.detail_at..]
    }

    /// The context frames [`Error::context`] added, outermost (last added) first, as displayed.
    pub fn contexts(&self) -> impl DoubleEndedIterator<Item = &str> + ExactSizeIterator {
        self.contexts.iter().rev().map(String::as_str)
    }

    pub fn is_transient(&self) -> bool {
        self.code.is_transient()
    }

    /// Appends what the reader can do about it, keeping the code.
    pub fn with_advice(mut self, advice: impl fmt::Display) -> Self {
        self.message = format!("{}; {advice}", self.message);
        self
    }

    /// Adds a context frame (where or while it happened), keeping the code: shown before the
    /// message as `what: message`, and kept on its own in [`Error::contexts`].
    pub fn context(mut self, what: impl fmt::Display) -> Self {
        let what = what.to_string();
        self.message = format!("{what}: {}", self.message);
        self.detail_at += what.len() + 2;
        self.contexts.push(what);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn std::error::Error + 'static))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn context_frames_are_kept_apart_and_displayed_as_a_prefix() {
        let e = Error::unavailable("connection refused")
            .context("loading table db.t")
            .with_advice("check the catalog")
            .context(format!("after {} attempts", 3));
        assert_eq!(
            e.to_string(),
            "sink.iceberg_unavailable: after 3 attempts: loading table db.t: connection refused; \
             check the catalog"
        );
        assert_eq!(
            e.message(),
            "after 3 attempts: loading table db.t: connection refused; check the catalog"
        );
        assert_eq!(e.detail(), "connection refused; check the catalog");
        assert_eq!(
            e.contexts().collect::<Vec<_>>(),
            ["after 3 attempts", "loading table db.t"]
        );
        assert_eq!(e.contexts().len(), 2);
        assert_eq!(e.code(), ErrorCode::Unavailable);
    }

    #[test]
    fn an_error_without_context_has_no_frames() {
        let e = Error::config_invalid("bad key").with_advice("see README");
        assert_eq!(e.contexts().count(), 0);
        assert_eq!(e.detail(), e.message());
        assert_eq!(e.to_string(), "config.invalid: bad key; see README");
    }

    #[test]
    fn equality_counts_the_context() {
        let a = Error::internal("x").context("y");
        assert_eq!(a, Error::internal("x").context("y"));
        assert_ne!(a, Error::internal("x"));
        // The same text, built without a frame, says the same.
        assert_eq!(a, Error::internal("y: x"));
    }

    #[test]
    fn context_keeps_the_source_and_the_retry_hint() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let e = Error::unavailable("reading")
            .with_source(io)
            .with_retry_hint("connect", Some(Duration::from_secs(2)))
            .context("loading table");
        let source = e.source().expect("a source");
        let io = source
            .downcast_ref::<std::io::Error>()
            .expect("the io error");
        assert_eq!(io.kind(), std::io::ErrorKind::ConnectionReset);
        assert_eq!(e.retry_cause(), "connect");
        assert_eq!(e.retry_after(), Some(Duration::from_secs(2)));
    }

    #[test]
    fn the_source_chain_walks_through_nested_errors() {
        let inner = std::io::Error::other("disk gone");
        let middle = Error::unavailable("writing the log").with_source(inner);
        let outer = Error::internal("stopping").with_source(middle);
        let chain: Vec<String> =
            std::iter::successors(Some(&outer as &(dyn std::error::Error + 'static)), |&e| {
                e.source()
            })
            .map(|e| e.to_string())
            .collect();
        assert_eq!(
            chain,
            [
                "internal: stopping",
                "sink.iceberg_unavailable: writing the log",
                "disk gone"
            ]
        );
    }
}
