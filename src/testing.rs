//! The internals the project's own integration tests, examples, benchmarks and fuzz targets
//! reach for, in one place. Not the API an embedding runtime uses (that is the crate root,
//! `config`, `protocol`, `runtime` and `ops`), and not stable: these names follow the code.
//! Production code never imports it; unit tests take their `Uploaded` records from [`segment`].
//!
//! Tests assert on what the registrar writes (snapshot summaries, watermarks, manifests),
//! drive the catalog and the store beside it, and replace parts with test seams; each group
//! below says what for.

use crate::protocol::segment::UploadedSegment;

/// The catalog connection a registrar makes (the harnesses load and commit through it, as a
/// rival writer or an inspector would).
pub use crate::catalog::{RestClient, TableName};
pub use crate::registrar::connect;

/// Catalog TLS and tokens, for the TLS and OAuth2 fronts of `tests/tls_auth.rs`.
pub use crate::actors::token_refresher::RefreshedToken;
pub use crate::catalog::auth::TokenSource;
pub use crate::catalog::tls::{TlsSettings, catalog_http_client, install_crypto_provider};

/// What a registrar writes into snapshot summaries and table properties (`table::committed`),
/// and the set it rebuilds from them.
pub use crate::table::CommittedSet;
pub use crate::table::committed::{
    CATALOG_SEQ, SEGMENT_COUNT, SEGMENT_IDS, SegmentId, WATERMARK_KEY, WATERMARK_PREFIX, WRITER,
    decode_ids, encode_ids,
};

/// Building an append as the registrar does (a rival writer in `tests/exactly_once.rs`), and the
/// seams an attempt calls: a hook right before each append commit, and the clock retention ages
/// snapshots by (set through `Tuning::hooks`).
pub use crate::table::append::hooks::{BeforeAppend, Clock, Hooks};
pub use crate::table::append::{AppendAttempts, ReadySegment, prepare_append};

/// The quarantine file, as an operator's tools read it.
pub use crate::table::quarantine::QuarantineStore;

/// Schema conversion and merging, and how a commit's answer is taken, for the benchmarks.
pub use crate::catalog::rest::answer::{Refs, adopt, refs_of};
pub use crate::table::schema::convert::file_schema;
pub use crate::table::schema::merge::merge;

/// Object storage as the registrar reaches it: the bucket client, object keys, credentials, the
/// FileIO under table metadata and its request signing.
pub use crate::io::clients::S3Clients;
pub use crate::io::file_io::{file_io_props, table_file_io};
pub use crate::io::signer::{RequestSigner, SharedSigner, SignRequest, Signed};
pub use crate::io::store::{
    S3Access, S3Credentials, S3Keys, classify_iceberg_io, object_path, object_store,
    object_store_with,
};

/// Parquet footers, for the footer tests and the fuzz target.
pub use crate::io::footer::{
    FIRST_READ_BYTES, MAX_FOOTER_BYTES, decode_file, print_caught_decoder_panics, read_footer,
};

/// An `Uploaded` record at `seq` for `object_key` of `dataset`: segment `s{seq}`, one byte, one
/// row, recorded at time 0, from a catalog without an id. A test that needs other values says
/// so with struct update syntax (`UploadedSegment { row_count: 10, ..segment(..) }`).
pub fn segment(seq: u64, dataset: &str, object_key: &str) -> UploadedSegment {
    UploadedSegment {
        seq,
        dataset: dataset.to_string(),
        segment_id: format!("s{seq}"),
        object_key: object_key.to_string(),
        file_size: 1,
        row_count: 1,
        uploaded_at_ms: 0,
        catalog_id: None,
    }
}
