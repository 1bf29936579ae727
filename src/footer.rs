//! Reading a segment's Parquet footer from object storage: two small ranged reads at most.
//!
//! The first read takes the last [`FIRST_READ_BYTES`] of the object, which holds the whole footer
//! of a typical segment; only a larger footer costs a second read of exactly its bytes. Footers
//! over [`MAX_FOOTER_BYTES`] are refused instead of read: a corrupt length must not make the
//! registrar allocate gigabytes.

use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectStore};
use parquet::arrow::parquet_to_arrow_schema;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

use crate::error::{Error, ErrorCode, Result};

/// The most footer bytes the registrar will read for one segment.
pub const MAX_FOOTER_BYTES: u64 = 64 * 1024 * 1024;
/// The size of the first, speculative tail read.
pub const FIRST_READ_BYTES: u64 = 64 * 1024;

const MAGIC: &[u8; 4] = b"PAR1";
const ENCRYPTED_MAGIC: &[u8; 4] = b"PARE";
/// 4-byte footer length + 4-byte magic.
const TRAILER: u64 = 8;

/// What the registrar needs from a segment's footer.
#[derive(Debug, Clone)]
pub struct SegmentFooter {
    pub metadata: Arc<ParquetMetaData>,
    /// The file's schema as Arrow sees it, with `PARQUET:field_id` metadata on every field.
    pub arrow_schema: arrow_schema::SchemaRef,
    /// The object's size in bytes, as the store reports it.
    pub object_size: u64,
    /// How many footer bytes were read (for metrics).
    pub bytes_read: u64,
}

impl SegmentFooter {
    pub fn row_count(&self) -> u64 {
        u64::try_from(self.metadata.file_metadata().num_rows()).unwrap_or(0)
    }
}

/// Reads and decodes the footer of `key`, whose size the segment catalog recorded as
/// `expected_size`. The first read is a bounded range ending at that size (suffix ranges are not
/// supported by every S3 server); the object's real size must match the record, so a partial or
/// replaced upload is caught here. Errors name the key and say what is wrong: `ObjectMissing`
/// (404), `FooterInvalid` (not Parquet, truncated, size mismatch, footer too large, undecodable),
/// `Unavailable` (network/5xx: retry).
pub async fn read_footer(
    store: &dyn ObjectStore,
    key: &str,
    expected_size: u64,
) -> Result<SegmentFooter> {
    let path = ObjectPath::from(key);
    if expected_size < TRAILER + MAGIC.len() as u64 {
        return Err(invalid(
            key,
            format!("it is {expected_size} bytes long, too short to be a Parquet file"),
        ));
    }
    let tail_start = expected_size.saturating_sub(FIRST_READ_BYTES);
    let options = GetOptions {
        range: Some(GetRange::Bounded(tail_start..expected_size)),
        ..Default::default()
    };
    let result = store
        .get_opts(&path, options)
        .await
        .map_err(|e| store_error(e, key))?;
    let object_size = result.meta.size;
    if object_size != expected_size {
        return Err(invalid(
            key,
            format!(
                "the object is {object_size} bytes but the segment catalog recorded \
                 {expected_size} (partial or replaced upload?)"
            ),
        ));
    }
    let tail = result.bytes().await.map_err(|e| store_error(e, key))?;
    let mut bytes_read = tail.len() as u64;
    if tail.len() as u64 != expected_size - tail_start {
        return Err(invalid(key, "the store returned a short read".to_string()));
    }
    let footer_len = parse_trailer(&tail, key)?;
    if footer_len > MAX_FOOTER_BYTES {
        return Err(invalid(
            key,
            format!(
                "its footer claims {footer_len} bytes, over the {MAX_FOOTER_BYTES}-byte limit \
                 (a corrupt or hostile file)"
            ),
        ));
    }
    if footer_len + TRAILER + MAGIC.len() as u64 > object_size {
        return Err(invalid(
            key,
            format!(
                "its footer claims {footer_len} bytes but the object is only {object_size} bytes \
                 (truncated upload?)"
            ),
        ));
    }
    let footer_start = object_size - TRAILER - footer_len;
    let footer: Bytes = if footer_start >= tail_start {
        let from = usize::try_from(footer_start - tail_start).unwrap_or(usize::MAX);
        let to = tail.len() - TRAILER as usize;
        tail.slice(from..to)
    } else {
        let bytes = store
            .get_range(&path, footer_start..object_size - TRAILER)
            .await
            .map_err(|e| store_error(e, key))?;
        bytes_read += bytes.len() as u64;
        bytes
    };
    let metadata = ParquetMetaDataReader::decode_metadata(&footer)
        .map_err(|e| invalid(key, format!("its footer cannot be decoded: {e}")))?;
    let file_metadata = metadata.file_metadata();
    let arrow_schema = parquet_to_arrow_schema(
        file_metadata.schema_descr(),
        file_metadata.key_value_metadata(),
    )
    .map_err(|e| invalid(key, format!("its schema has no Arrow equivalent: {e}")))?;
    Ok(SegmentFooter {
        metadata: Arc::new(metadata),
        arrow_schema: Arc::new(arrow_schema),
        object_size,
        bytes_read,
    })
}

/// Checks the trailing magic and returns the footer length.
fn parse_trailer(tail: &[u8], key: &str) -> Result<u64> {
    let n = tail.len();
    if n < TRAILER as usize {
        return Err(invalid(
            key,
            "it is too short to be a Parquet file".to_string(),
        ));
    }
    let magic = &tail[n - 4..];
    if magic == ENCRYPTED_MAGIC {
        return Err(invalid(
            key,
            "it is an encrypted Parquet file, which the registrar cannot read".to_string(),
        ));
    }
    if magic != MAGIC {
        return Err(invalid(
            key,
            "it does not end with the Parquet magic bytes PAR1 (not a Parquet file, or truncated)"
                .to_string(),
        ));
    }
    let mut len = [0u8; 4];
    len.copy_from_slice(&tail[n - 8..n - 4]);
    Ok(u64::from(u32::from_le_bytes(len)))
}

fn invalid(key: &str, why: String) -> Error {
    Error::new(
        ErrorCode::FooterInvalid,
        format!(
            "object {key} is not a readable Parquet segment: {why}; re-ship the segment or remove \
             its Uploaded record"
        ),
    )
}

fn store_error(err: object_store::Error, key: &str) -> Error {
    match err {
        // 416: the range starts past the object's end, so the object is shorter than recorded.
        other if other.to_string().contains("416") => invalid(
            key,
            "the object is shorter than the segment catalog recorded (partial upload?)".to_string(),
        ),
        object_store::Error::NotFound { .. } => Error::new(
            ErrorCode::ObjectMissing,
            format!(
                "object {key} is not in the bucket although the segment catalog records it as \
                 uploaded; check the shipper's bucket and prefix (url) against the registrar's"
            ),
        ),
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => Error::auth_failed(format!(
            "the S3 store refused access to object {key}; check store.access_key_id / \
                 store.secret_access_key"
        )),
        other => Error::unavailable(format!("reading object {key} failed: {other}")),
    }
}
