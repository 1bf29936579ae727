//! Arbitrary bytes as a segment catalog log: the reader and a writer must never panic, must
//! agree on what is corrupt, and a writer must never drop or change a complete record. The
//! checks are in `thadam_iceberg::protocol::segment_log::fuzzing::check_log_bytes`.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

/// One directory per fuzzing process; each input overwrites the same file in it. Memory-backed
/// where available, since every writer open syncs.
fn dir() -> &'static tempfile::TempDir {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        tempfile::tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .expect("a temporary directory for the fuzz input")
    })
}

fuzz_target!(|data: &[u8]| {
    thadam_iceberg::protocol::segment_log::fuzzing::check_log_bytes(dir().path(), data);
});
