//! What an error answer says: the REST spec's `ErrorModel` message of a body, for the catalog's
//! answers (`rest`) and the S3 signer's (`signer`), which share the model. A module of its own,
//! below both, so that neither has to reach into the other for it.

use serde::Deserialize;

/// The REST spec's error body (`iceberg_catalog_rest::ErrorResponse` keeps its fields private).
#[derive(Deserialize)]
struct ErrorBody {
    error: ErrorModel,
}

#[derive(Deserialize)]
struct ErrorModel {
    message: String,
    #[serde(rename = "type", default)]
    kind: String,
}

/// The message of an error answer's body: the REST `ErrorModel`'s message and type, else the
/// first 512 bytes of the body as text, else the status. Catalog answers and the S3 signer's
/// share the model.
pub(crate) fn message_of(status: reqwest::StatusCode, bytes: &[u8]) -> String {
    match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(body) => format!("{} ({})", body.error.message, body.error.kind),
        Err(_) if bytes.is_empty() => status.to_string(),
        Err(_) => String::from_utf8_lossy(&bytes[..bytes.len().min(512)]).into_owned(),
    }
}
