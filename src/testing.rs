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
pub use crate::table::committed::{SegmentId, decode_ids, encode_ids};
pub use crate::table::summary_keys::{
    CATALOG_SEQ, SEGMENT_COUNT, SEGMENT_IDS, WATERMARK_KEY, WATERMARK_PREFIX, WRITER,
};

pub use crate::table::append::{AppendAttempts, ReadySegment, prepare_append};
/// Building an append as the registrar does (a rival writer in `tests/exactly_once.rs`), and the
/// seams an attempt calls: a hook right before each append commit, and the clock retention ages
/// snapshots by (set through `Tuning::hooks`).
pub use crate::table::hooks::{BeforeAppend, Clock, Hooks, StoreWrapper};

/// An intent's body tagged with a fleet key (`commit.intents_key`), as a node of that fleet
/// publishes it: the fleet tests forge intents with and without it.
pub fn sign_intent(key: &str, body: &[u8]) -> Vec<u8> {
    crate::table::fleet::intents::IntentKey::new(&crate::secret::Secret::new(key)).sign(body)
}

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

/// Table metadata (format 2, one long column, unpartitioned) whose snapshots, oldest first, have
/// these summaries (each with `operation: append` added) and stamps: the unit tests of what is
/// read from snapshots.
#[cfg(test)]
pub(crate) fn metadata_with(
    snapshots: &[(serde_json::Value, i64)],
) -> iceberg::spec::TableMetadata {
    use serde_json::json;
    let n = snapshots.len() as i64;
    let list: Vec<serde_json::Value> = snapshots
        .iter()
        .enumerate()
        .map(|(i, (summary, ts))| {
            let id = i as i64 + 1;
            let mut summary = summary.clone();
            summary["operation"] = json!("append");
            let mut s = json!({
                "snapshot-id": id, "sequence-number": id, "timestamp-ms": ts,
                "manifest-list": format!("s3://b/t/metadata/snap-{id}.avro"),
                "summary": summary, "schema-id": 0,
            });
            if id > 1 {
                s["parent-snapshot-id"] = json!(id - 1);
            }
            s
        })
        .collect();
    let mut m = json!({
        "format-version": 2, "table-uuid": "5f4a6c48-0c3a-4a2c-9e61-3c1b8f2d1e11",
        "location": "s3://b/t", "last-sequence-number": n, "last-updated-ms": 2_000,
        "last-column-id": 1, "current-schema-id": 0,
        "schemas": [{"type": "struct", "schema-id": 0, "fields": [
            {"id": 1, "name": "x", "required": false, "type": "long"}]}],
        "default-spec-id": 0, "partition-specs": [{"spec-id": 0, "fields": []}],
        "last-partition-id": 999, "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}], "properties": {},
        "snapshots": list,
    });
    // As catalogs write it: each snapshot made current in turn.
    let log: Vec<serde_json::Value> = snapshots
        .iter()
        .enumerate()
        .map(|(i, (_, ts))| json!({"snapshot-id": i as i64 + 1, "timestamp-ms": ts}))
        .collect();
    m["snapshot-log"] = json!(log);
    let last = snapshots.iter().map(|(_, ts)| *ts).max().unwrap_or(0);
    m["last-updated-ms"] = json!(last.max(2_000));
    if n > 0 {
        m["current-snapshot-id"] = json!(n);
        m["refs"] = json!({"main": {"snapshot-id": n, "type": "branch"}});
    }
    serde_json::from_value(m).unwrap_or_else(|e| panic!("test metadata: {e}"))
}
