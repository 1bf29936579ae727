//! What an S3 answer's HTTP status means to the registrar ([`S3StatusClass`], one pure mapping:
//! [`status_class`]), and an S3 refusal object_store has no variant for, kept typed in an error
//! chain ([`S3Refusal`], with S3's own error code read from the body: [`s3_error_code`]).

/// What the registrar does about an S3 answer with this HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum S3StatusClass {
    /// 404: the object is not there (`sink.iceberg_object_missing`).
    Missing,
    /// 401/403: the store refuses our credentials (`auth.failed`).
    Auth,
    /// 416: the range starts past the object's end, so it is shorter than recorded.
    ShortObject,
    /// Another 4xx (or a redirect): the request can never succeed as it is; permanent.
    Rejected,
    /// 408, 429, 5xx: the store is busy or failing; retried with backoff.
    Transient,
}

/// The one mapping from an S3 status to its class.
pub(crate) fn status_class(status: u16) -> S3StatusClass {
    match status {
        404 => S3StatusClass::Missing,
        401 | 403 => S3StatusClass::Auth,
        416 => S3StatusClass::ShortObject,
        408 | 429 => S3StatusClass::Transient,
        // 304 only answers a conditional request, which is not an error.
        300..=303 | 305..=499 => S3StatusClass::Rejected,
        _ => S3StatusClass::Transient,
    }
}

/// An S3 answer object_store has no variant for (a 4xx other than 401/403/404/409/412, or a
/// redirect), kept typed in the error chain: its status and S3's own error code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct S3Refusal {
    pub status: u16,
    /// The `<Code>` of S3's XML error body (e.g. `KeyTooLongError`), when there is one.
    pub s3_code: Option<String>,
}

impl std::fmt::Display for S3Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "S3 answered {}", self.status)?;
        match &self.s3_code {
            Some(code) => write!(f, " {code}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for S3Refusal {}

/// The [`S3Refusal`] in `err`'s source chain, if any.
pub(crate) fn s3_refusal<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a S3Refusal> {
    let mut current = Some(err);
    while let Some(e) = current {
        if let Some(refusal) = e.downcast_ref::<S3Refusal>() {
            return Some(refusal);
        }
        current = e.source();
    }
    None
}

/// The `<Code>` element of an S3 XML error body: S3's machine-readable error type, kept for the
/// message (short, printable ASCII only).
pub(super) fn s3_error_code(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let start = text.find("<Code>")? + "<Code>".len();
    let len = text[start..].find("</Code>")?;
    let code = &text[start..start + len];
    let ok = !code.is_empty()
        && code.len() <= 64
        && code.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.');
    ok.then(|| code.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_classes() {
        use S3StatusClass::*;
        for (status, outcome) in [
            (404, Missing),
            (401, Auth),
            (403, Auth),
            (416, ShortObject),
            (400, Rejected),
            (405, Rejected),
            (409, Rejected),
            (411, Rejected),
            (412, Rejected),
            (414, Rejected),
            (301, Rejected),
            (307, Rejected),
            (304, Transient),
            (408, Transient),
            (429, Transient),
            (500, Transient),
            (501, Transient),
            (502, Transient),
            (503, Transient),
            (504, Transient),
            (599, Transient),
        ] {
            assert_eq!(status_class(status), outcome, "{status}");
        }
    }

    #[test]
    fn the_s3_error_code_is_read_from_the_body() {
        let body = br#"<?xml version="1.0"?><Error><Code>KeyTooLongError</Code><Message>x</Message></Error>"#;
        assert_eq!(s3_error_code(body).as_deref(), Some("KeyTooLongError"));
        assert_eq!(s3_error_code(b"<Error><Code></Code></Error>"), None);
        assert_eq!(s3_error_code(b"<Code>a b\x1b[31m</Code>"), None);
        assert_eq!(s3_error_code(b"not xml"), None);
        assert_eq!(s3_error_code(&[0xff, 0xfe]), None);
    }

    #[test]
    fn refusals_read_like_s3_answers() {
        let with_code = S3Refusal {
            status: 400,
            s3_code: Some("KeyTooLongError".to_string()),
        };
        assert_eq!(with_code.to_string(), "S3 answered 400 KeyTooLongError");
        let bare = S3Refusal {
            status: 416,
            s3_code: None,
        };
        assert_eq!(bare.to_string(), "S3 answered 416");
    }
}
