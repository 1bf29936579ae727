//! How S3 failures are classified, by type: object_store's variants, the HTTP status of an S3
//! answer (a typed [`S3Refusal`] the connector puts into the chain), and our own errors (no
//! credentials, a failed credential source or signer), for footer reads
//! ([`classify_store_error`]) and, found in the source chain, for iceberg's FileIO
//! ([`classify_iceberg_io`]).

use crate::error::{Error, ErrorCode};
use crate::io::status::{S3Refusal, S3StatusClass, s3_refusal, status_class};

/// Our own error in `err`'s source chain, if any: a store without credentials, a credential
/// source that failed, or a remote signer's refusal or outage, each typed by its code.
pub(crate) fn access_failure<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a Error> {
    let mut current = Some(err);
    while let Some(e) = current {
        if let Some(ours) = e.downcast_ref::<Error>() {
            return Some(ours);
        }
        current = e.source();
    }
    None
}

/// Classifies an object_store failure on `key` of `bucket` (the footer read), by type.
pub(crate) fn classify_store_error(err: object_store::Error, bucket: &str, key: &str) -> Error {
    if let Some(ours) = access_failure(&err) {
        return ours.clone().context(format!("reading object {key}"));
    }
    let status = match &err {
        object_store::Error::NotFound { .. } => Some(404),
        object_store::Error::PermissionDenied { .. } => Some(403),
        object_store::Error::Unauthenticated { .. } => Some(401),
        _ => s3_refusal(&err).map(|r| r.status),
    };
    let refusal = s3_refusal(&err)
        .map(|r| format!(" ({r})"))
        .unwrap_or_default();
    match status.map(status_class) {
        Some(S3StatusClass::Missing) => Error::new(
            ErrorCode::ObjectMissing,
            format!(
                "object {key} is not in bucket {bucket} although the segment catalog records it \
                 as uploaded; check the shipper's bucket and prefix (url) against the registrar's"
            ),
        ),
        Some(S3StatusClass::Auth) => Error::auth_failed(format!(
            "the S3 store refused access to object {key} in bucket {bucket}; check the store \
             credentials (store.access_key_id / store.secret_access_key) and that they may read \
             the bucket"
        )),
        Some(S3StatusClass::ShortObject) => Error::new(
            ErrorCode::FooterInvalid,
            format!(
                "object {key} is shorter than the segment catalog recorded{refusal} (partial \
                 upload, or a wrong recorded size?); re-ship the segment or remove its Uploaded \
                 record"
            ),
        ),
        Some(S3StatusClass::Rejected) => Error::new(
            ErrorCode::FooterInvalid,
            format!(
                "S3 refuses every read of object {key} in bucket {bucket}{refusal}: the segment \
                 record (its key or size) is not something S3 can serve; re-ship the segment or \
                 remove its Uploaded record (if every segment fails so, check store.region and \
                 store.endpoint)"
            ),
        ),
        Some(S3StatusClass::Transient) | None => {
            Error::unavailable(format!("reading object {key} failed: {err}"))
        }
    }
}

/// Classifies a failure of iceberg's FileIO (metadata, manifest list and manifest reads and
/// writes, which go through `crate::io::file_io`) by the storage error in its source chain:
/// `None` when there is none (not an I/O failure; the caller decides). The same rule as footer
/// reads: a 404 is `object_missing`, 401/403 (read-only credentials) `auth.failed`, other
/// refusals permanent (`catalog_rejected`: the catalog's storage will not take the request), and
/// what is left once object_store's own retries gave up (5xx, 429, transport) `unavailable`.
pub fn classify_iceberg_io(err: &iceberg::Error) -> Option<ErrorCode> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = current {
        if let Some(store) = e.downcast_ref::<object_store::Error>() {
            return Some(store_error_outcome(store));
        }
        if let Some(refusal) = e.downcast_ref::<S3Refusal>() {
            return Some(refusal_outcome(status_class(refusal.status)));
        }
        // One of ours (a store that cannot be configured) keeps its code.
        if let Some(ours) = e.downcast_ref::<Error>() {
            return Some(ours.code());
        }
        current = e.source();
    }
    None
}

/// The outcome of an object_store failure of iceberg's FileIO, by its variant (and the typed
/// [`S3Refusal`] the connector puts into it).
fn store_error_outcome(err: &object_store::Error) -> ErrorCode {
    use object_store::Error as E;
    match err {
        E::NotFound { .. } => ErrorCode::ObjectMissing,
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => ErrorCode::AuthFailed,
        E::UnknownConfigurationKey { .. } => ErrorCode::ConfigInvalid,
        // A path iceberg built that S3 cannot name, or a request this store will not serve.
        E::InvalidPath { .. }
        | E::NotSupported { .. }
        | E::NotImplemented
        | E::AlreadyExists { .. }
        | E::Precondition { .. }
        | E::NotModified { .. } => ErrorCode::CatalogRejected,
        _ => match (access_failure(err), s3_refusal(err)) {
            // No credentials, or the signer refused or failed: its own code.
            (Some(ours), _) => ours.code(),
            (None, Some(refusal)) => refusal_outcome(status_class(refusal.status)),
            // Transport failures and 5xx/429 that outlasted object_store's retries.
            (None, None) => ErrorCode::Unavailable,
        },
    }
}

fn refusal_outcome(outcome: S3StatusClass) -> ErrorCode {
    match outcome {
        S3StatusClass::Missing => ErrorCode::ObjectMissing,
        S3StatusClass::Auth => ErrorCode::AuthFailed,
        S3StatusClass::ShortObject | S3StatusClass::Rejected => ErrorCode::CatalogRejected,
        S3StatusClass::Transient => ErrorCode::Unavailable,
    }
}

#[cfg(test)]
mod tests {
    use object_store::client::{HttpError, HttpErrorKind};

    use super::*;

    fn refused(status: u16) -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: Box::new(HttpError::new(
                HttpErrorKind::Unknown,
                S3Refusal {
                    status,
                    s3_code: Some("KeyTooLongError".to_string()),
                },
            )),
        }
    }

    #[test]
    fn store_errors_are_classified_by_type_not_text() {
        let key = "p/seg-416.parquet";
        let not_found = object_store::Error::NotFound {
            path: key.to_string(),
            source: "Error performing GET in 1.416s - 416".into(),
        };
        assert_eq!(
            classify_store_error(not_found, "b", key).code(),
            ErrorCode::ObjectMissing
        );
        let denied = object_store::Error::PermissionDenied {
            path: key.to_string(),
            source: "no".into(),
        };
        let err = classify_store_error(denied, "bucket-x", key);
        assert_eq!(err.code(), ErrorCode::AuthFailed);
        assert!(err.message().contains("bucket-x"), "{err}");
        assert!(
            err.message().contains("check the store credentials"),
            "{err}"
        );
        let err = classify_store_error(refused(400), "b", key);
        assert_eq!(err.code(), ErrorCode::FooterInvalid);
        assert!(err.message().contains("KeyTooLongError"), "{err}");
        assert!(err.message().contains(key), "{err}");
        assert_eq!(
            classify_store_error(refused(416), "b", key).code(),
            ErrorCode::FooterInvalid
        );
        // An untyped failure whose text holds "416" (an elapsed time) is an outage, not a
        // short object.
        let generic = object_store::Error::Generic {
            store: "S3",
            source: "Error performing GET in 1.416s - connection reset".into(),
        };
        assert_eq!(
            classify_store_error(generic, "b", key).code(),
            ErrorCode::Unavailable
        );
    }

    fn io(source: object_store::Error) -> iceberg::Error {
        iceberg::Error::new(iceberg::ErrorKind::Unexpected, "writing the manifest")
            .with_source(source)
    }

    #[test]
    fn iceberg_io_errors_are_classified_by_the_store_error_in_their_chain() {
        let path = || "p/m.avro".to_string();
        let denied = object_store::Error::PermissionDenied {
            path: path(),
            source: "403".into(),
        };
        assert_eq!(
            classify_iceberg_io(&io(denied)),
            Some(ErrorCode::AuthFailed)
        );
        let unauthenticated = object_store::Error::Unauthenticated {
            path: path(),
            source: "401".into(),
        };
        assert_eq!(
            classify_iceberg_io(&io(unauthenticated)),
            Some(ErrorCode::AuthFailed)
        );
        let missing = object_store::Error::NotFound {
            path: path(),
            source: "404".into(),
        };
        assert_eq!(
            classify_iceberg_io(&io(missing)),
            Some(ErrorCode::ObjectMissing)
        );
        assert_eq!(
            classify_iceberg_io(&io(refused(400))),
            Some(ErrorCode::CatalogRejected)
        );
        // After object_store's own retries: an outage (the text holding "403" changes nothing).
        let outage = object_store::Error::Generic {
            store: "S3",
            source: "Error after 10 retries in 1.403s: 503 Service Unavailable".into(),
        };
        assert_eq!(
            classify_iceberg_io(&io(outage)),
            Some(ErrorCode::Unavailable)
        );
        // Wrapped once more, as a manifest write inside an append would be.
        let denied = object_store::Error::PermissionDenied {
            path: path(),
            source: "403".into(),
        };
        let outer = iceberg::Error::new(iceberg::ErrorKind::Unexpected, "appending")
            .with_source(io(denied));
        assert_eq!(classify_iceberg_io(&outer), Some(ErrorCode::AuthFailed));
        // A store that cannot be configured keeps our code.
        let ours = iceberg::Error::new(iceberg::ErrorKind::Unexpected, "building the store")
            .with_source(Error::config_invalid("bad endpoint"));
        assert_eq!(classify_iceberg_io(&ours), Some(ErrorCode::ConfigInvalid));
        let plain = iceberg::Error::new(iceberg::ErrorKind::DataInvalid, "not io");
        assert_eq!(classify_iceberg_io(&plain), None);
    }
}
