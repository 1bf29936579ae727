//! Reading a segment's Parquet footer from object storage: two small ranged reads at most.
//!
//! The first read takes the last [`FIRST_READ_BYTES`] of the object, which holds the whole footer
//! of a typical segment; only a larger footer costs a second read of exactly its bytes. Footers
//! over [`MAX_FOOTER_BYTES`] are refused instead of read: a corrupt length must not make the
//! registrar allocate gigabytes.
//!
//! No footer can panic the registrar: decoding runs inside `catch_unwind` (see
//! [`decode_footer`]; inline for a footer of the usual size, on a blocking thread beyond
//! [`INLINE_DECODE_BYTES`]), and anything undecodable is
//! `sink.iceberg_footer_invalid` naming the key.
//! A decoder panic caught so is not printed either: the default panic hook's `thread ...
//! panicked at` lines would report as a crash what is only a bad file (see [`catch_quietly`]).

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use object_store::{GetOptions, GetRange, ObjectStore};
use parquet::arrow::parquet_to_arrow_schema;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

use crate::error::{Error, ErrorCode, Result};
use crate::io::classify::classify_store_error;
use crate::io::keys::object_path;
use crate::protocol::footer::SegmentFooter;

/// The most footer bytes the registrar will read for one segment.
pub const MAX_FOOTER_BYTES: u64 = 64 * 1024 * 1024;
/// The size of the first, speculative tail read.
pub const FIRST_READ_BYTES: u64 = 64 * 1024;

const MAGIC: &[u8; 4] = b"PAR1";
const ENCRYPTED_MAGIC: &[u8; 4] = b"PARE";
/// 4-byte footer length + 4-byte magic.
const TRAILER: u64 = 8;

/// Reads and decodes the footer of `key` in `bucket` (the bucket `store` reads; named in
/// errors), whose size the segment catalog recorded as `expected_size`. The first read is a
/// bounded range ending at that size (suffix ranges are not supported by every S3 server); the
/// object's real size must match the record, so a partial or replaced upload is caught here.
/// The key is read byte for byte ([`crate::io::keys::object_path`]). Errors name the key and say
/// what is wrong (see `crate::io::classify::classify_store_error`): `ObjectMissing` (404),
/// `AuthFailed` (401/403), `FooterInvalid` (a key that cannot be registered, not Parquet,
/// truncated, size mismatch, footer too large, undecodable, another 4xx), `Unavailable`
/// (network, 5xx, 429: retry).
pub async fn read_footer(
    store: &dyn ObjectStore,
    bucket: &str,
    key: &str,
    expected_size: u64,
) -> Result<SegmentFooter> {
    let path = object_path(key)?;
    let store_error = |e: object_store::Error| classify_store_error(e, bucket, key);
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
    let result = store.get_opts(&path, options).await.map_err(store_error)?;
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
    let tail = result.bytes().await.map_err(store_error)?;
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
            .map_err(store_error)?;
        bytes_read += bytes.len() as u64;
        bytes
    };
    let decoded = if decodes_inline(footer.len()) {
        decode_footer(key, &footer)?
    } else {
        // Up to MAX_FOOTER_BYTES of CPU work: off the async threads.
        let owned_key = key.to_string();
        tokio::task::spawn_blocking(move || decode_footer(&owned_key, &footer))
            .await
            .map_err(|e| {
                if e.is_panic() {
                    // decode_footer catches its own panics; this is the defence behind it.
                    invalid(
                        key,
                        "decoding its footer failed (the decoder panicked)".to_string(),
                    )
                } else {
                    Error::cancelled()
                }
            })??
    };
    Ok(SegmentFooter {
        metadata: Arc::new(decoded.0),
        arrow_schema: Arc::new(decoded.1),
        object_size,
        bytes_read,
    })
}

/// The largest footer decoded on the async thread that read it. A segment's footer is a few KB
/// and decodes in tens of microseconds, less than handing it to the blocking pool and back costs
/// (in a 30,000-segment backlog, `benches/backlog.sh`, those hand-offs were 18% of the
/// registrar's CPU: 8.8 -> 7.2 s, 2,390 -> 2,717 seg/s); a footer large enough to hold up the
/// runtime goes to the blocking pool.
pub(crate) const INLINE_DECODE_BYTES: usize = 256 * 1024;

/// Whether a footer of `len` bytes is decoded inline (see [`INLINE_DECODE_BYTES`]).
fn decodes_inline(len: usize) -> bool {
    len <= INLINE_DECODE_BYTES
}

/// Decodes a footer (the thrift `FileMetaData`, without the 8-byte trailer) and the file's
/// Arrow schema (from its embedded `ARROW:schema`, when present). Never panics: the Parquet
/// and Arrow IPC decoders do on some malformed input (e.g. `not implemented: Type <UNKNOWN
/// 213>` in the IPC schema decoder), and the decoders are not ours to fix, so the decode runs
/// under `catch_unwind` as the last line of defence. That is sound here: the closure owns
/// nothing shared (it reads `footer` and builds fresh values), so a panic half way leaves no
/// state behind that anyone could observe. A panic is `FooterInvalid` naming `key`.
#[doc(hidden)]
pub(crate) fn decode_footer(
    key: &str,
    footer: &[u8],
) -> Result<(ParquetMetaData, arrow_schema::Schema)> {
    let decoded = catch_quietly(|| {
        let metadata = ParquetMetaDataReader::decode_metadata(footer)
            .map_err(|e| invalid(key, format!("its footer cannot be decoded: {e}")))?;
        let file_metadata = metadata.file_metadata();
        let arrow_schema = parquet_to_arrow_schema(
            file_metadata.schema_descr(),
            file_metadata.key_value_metadata(),
        )
        .map_err(|e| invalid(key, format!("its schema has no Arrow equivalent: {e}")))?;
        Ok((metadata, arrow_schema))
    });
    decoded.unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".to_string());
        Err(invalid(
            key,
            format!("its footer cannot be decoded (the decoder failed: {what})"),
        ))
    })
}

thread_local! {
    /// Set while this thread runs a decoder under [`catch_quietly`].
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Whether panics caught by [`catch_quietly`] go unprinted (the default).
static QUIET_ALLOWED: AtomicBool = AtomicBool::new(true);

static QUIET_HOOK: Once = Once::new();

/// Runs `f` under `catch_unwind` with its panic unprinted: a hook installed once (around the
/// hook in place then) stays silent for a panic on a thread inside this call and hands every
/// other panic, of any thread, to the previous hook. A per-thread flag, so concurrent decodes
/// and panics elsewhere do not affect each other. Sound for the same reason as the
/// `catch_unwind` in [`decode_footer`]: `f` touches nothing shared.
fn catch_quietly<T>(f: impl FnOnce() -> T) -> std::thread::Result<T> {
    QUIET_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !(QUIET.with(Cell::get) && QUIET_ALLOWED.load(Ordering::Relaxed)) {
                previous(info);
            }
        }));
    });
    let outer = QUIET.with(|q| q.replace(true));
    let result = catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(outer));
    result
}

/// Whether decoder panics the reader catches are printed by the panic hook (`true`) or not
/// (`false`, the default). For fuzzing, which hunts those panics through its own hook.
#[doc(hidden)]
pub fn print_caught_decoder_panics(print: bool) {
    QUIET_ALLOWED.store(!print, Ordering::Relaxed);
}

/// Decodes the footer of a whole Parquet file in memory (trailer, length, footer): what
/// [`read_footer`] does after its reads. For fuzzing and tests.
#[doc(hidden)]
pub fn decode_file(key: &str, file: &[u8]) -> Result<(ParquetMetaData, arrow_schema::Schema)> {
    let size = file.len() as u64;
    if size < TRAILER + MAGIC.len() as u64 {
        return Err(invalid(
            key,
            format!("it is {size} bytes long, too short to be a Parquet file"),
        ));
    }
    let footer_len = parse_trailer(file, key)?;
    if footer_len > MAX_FOOTER_BYTES || footer_len + TRAILER + MAGIC.len() as u64 > size {
        return Err(invalid(
            key,
            format!("its footer claims {footer_len} bytes, more than the file holds"),
        ));
    }
    let end = file.len() - TRAILER as usize;
    let start = end - usize::try_from(footer_len).unwrap_or(end);
    decode_footer(key, &file[start..end])
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A decoder panic the reader catches prints nothing, while any other panic still reaches
    /// the previous hook. In a child process: the hook is process-wide, and the test harness
    /// would capture what it prints.
    #[test]
    fn caught_decoder_panics_are_not_printed() {
        const CHILD: &str = "THADAM_ICEBERG_QUIET_PANIC_CHILD";
        if std::env::var_os(CHILD).is_some() {
            let caught = catch_quietly(|| panic!("quiet-decoder-panic"));
            assert!(caught.is_err());
            let elsewhere = std::thread::spawn(|| panic!("loud-other-panic")).join();
            assert!(elsewhere.is_err());
            let after = catch_unwind(|| panic!("loud-after-panic"));
            assert!(after.is_err());
            return;
        }
        let child = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "io::footer::tests::caught_decoder_panics_are_not_printed",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .expect("child ran");
        let stderr = String::from_utf8_lossy(&child.stderr);
        assert!(child.status.success(), "{stderr}");
        assert!(!stderr.contains("quiet-decoder-panic"), "{stderr}");
        assert!(stderr.contains("loud-other-panic"), "{stderr}");
        assert!(stderr.contains("loud-after-panic"), "{stderr}");
    }

    #[test]
    fn small_footers_decode_inline_and_large_ones_on_the_blocking_pool() {
        // A footer that fit in the first tail read (the usual case) never leaves its thread.
        assert!(decodes_inline(FIRST_READ_BYTES as usize));
        assert!(decodes_inline(INLINE_DECODE_BYTES));
        assert!(!decodes_inline(INLINE_DECODE_BYTES + 1));
        assert!(!decodes_inline(MAX_FOOTER_BYTES as usize));
    }
}
