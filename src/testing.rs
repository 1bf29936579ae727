//! Names the project's own tests and benchmarks use: re-exports of the seams they reach from
//! where those live, and the one `Uploaded` record fixture ([`segment`]) that unit tests,
//! integration tests and benchmarks build segments from. Not part of the API (hidden from the
//! docs); production code never imports this module.

use crate::protocol::segment::UploadedSegment;

/// The test seams a committer calls (`Tuning::hooks`); production code never sets them.
pub use crate::actors::hooks::{BeforeAppend, Clock, Hooks};
/// How a commit's answer is taken (`catalog::rest::answer`), for the benchmarks.
pub use crate::catalog::rest::answer::{Refs, adopt, refs_of};

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
