//! The `on_bad_segment` policy.
//!
//! [`action`] decides, from the [`ErrorCode`] alone (never the message), what a committer does
//! with a segment it cannot register: `stop` (the default, the spec's behaviour: the service
//! stops, the record stays in the segment catalog) or, under `on_bad_segment: quarantine` and
//! only for a reason about the file itself ([`is_about_the_file`]), quarantine it: record it
//! in the quarantine file ([`QuarantineStore`](super::QuarantineStore)) and go on with the other segments of the table and
//! the other tables.

use crate::config::BadSegmentPolicy;
use crate::error::ErrorCode;

/// What to do with one segment that failed with `code`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    Stop,
    Quarantine,
}

/// Whether an error with this code is about the segment's file itself (its bytes, its size, its
/// schema, its rows' partition), so that the other segments are unaffected by it. Anything about
/// the table, the catalog, credentials, the network or the registrar is not.
pub(crate) fn is_about_the_file(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::FooterInvalid
            | ErrorCode::ObjectMissing
            | ErrorCode::UnsupportedType
            | ErrorCode::SchemaMismatch
            | ErrorCode::PartitionMismatch
    )
}

/// Whether an error with this code is about one table (absent with `create_table: false`,
/// refused by the catalog, a property this client cannot write), so that under `quarantine` it
/// stops that table only. Credentials, TLS, configuration and the segment catalog concern every
/// table and stop the service under both policies; transient faults never reach here.
pub(crate) fn is_about_the_table(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::TableMissing
            | ErrorCode::CatalogRejected
            | ErrorCode::TableUnsupported
            | ErrorCode::FieldIdsRenumbered
    )
}

/// How far a committer's non-transient failure reaches: with `quarantine`, an error about the
/// table stops that table alone; anything else (and everything under `stop`) stops the service.
pub(crate) fn stops_table_only(policy: BadSegmentPolicy, code: ErrorCode) -> bool {
    policy == BadSegmentPolicy::Quarantine && is_about_the_table(code)
}

/// The policy as a pure function of the configuration and the error's code.
pub(crate) fn action(policy: BadSegmentPolicy, code: ErrorCode) -> Action {
    match policy {
        BadSegmentPolicy::Quarantine if is_about_the_file(code) => Action::Quarantine,
        _ => Action::Stop,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_table_errors_under_quarantine_stop_just_the_table() {
        use BadSegmentPolicy::{Quarantine, Stop};
        for code in [
            ErrorCode::TableMissing,
            ErrorCode::CatalogRejected,
            ErrorCode::TableUnsupported,
            ErrorCode::FieldIdsRenumbered,
        ] {
            assert!(stops_table_only(Quarantine, code), "{code:?}");
            assert!(!stops_table_only(Stop, code), "{code:?}");
        }
        for code in [
            ErrorCode::AuthFailed,
            ErrorCode::ConfigInvalid,
            ErrorCode::SegmentCatalogCorrupt,
            ErrorCode::FeedOutOfOrder,
            ErrorCode::Internal,
            ErrorCode::FooterInvalid,
        ] {
            assert!(!stops_table_only(Quarantine, code), "{code:?}");
        }
    }

    #[test]
    fn only_reasons_about_the_file_quarantine() {
        use ErrorCode::*;
        for code in [
            FooterInvalid,
            ObjectMissing,
            UnsupportedType,
            SchemaMismatch,
            PartitionMismatch,
        ] {
            assert!(is_about_the_file(code), "{code}");
            assert_eq!(
                action(BadSegmentPolicy::Quarantine, code),
                Action::Quarantine
            );
            assert_eq!(action(BadSegmentPolicy::Stop, code), Action::Stop, "{code}");
        }
        for code in [
            ConfigInvalid,
            AuthFailed,
            TableMissing,
            SegmentCatalogCorrupt,
            CatalogRejected,
            TableUnsupported,
            FieldIdsRenumbered,
            FeedOutOfOrder,
            Unavailable,
            Cancelled,
            Internal,
            QuarantineFailed,
        ] {
            assert!(!is_about_the_file(code), "{code}");
            assert_eq!(action(BadSegmentPolicy::Quarantine, code), Action::Stop);
        }
        assert_eq!(BadSegmentPolicy::default(), BadSegmentPolicy::Stop);
    }
}
