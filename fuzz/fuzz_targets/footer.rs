//! The footer decoder on arbitrary bytes taken as a whole Parquet file: every input decodes or
//! is `sink.iceberg_footer_invalid`; nothing escapes as a panic.
#![no_main]

use std::sync::Once;

use libfuzzer_sys::fuzz_target;
use thadam_iceberg::ErrorCode;
use thadam_iceberg::testing::decode_file;

static HOOK: Once = Once::new();

fuzz_target!(|data: &[u8]| {
    // libfuzzer-sys aborts on every panic, even one the reader catches (the Parquet and Arrow
    // decoders panic on some input; the reader turns that into footer_invalid). Keep its hook
    // with THADAM_FUZZ_STRICT=1 to hunt those decoder panics; by default only a panic that
    // escapes the reader is a crash (libfuzzer-sys still aborts on an uncaught one).
    HOOK.call_once(|| {
        if std::env::var_os("THADAM_FUZZ_STRICT").is_none() {
            std::panic::set_hook(Box::new(|_| {}));
        } else {
            // The reader keeps the panics it catches from the hook unless asked.
            thadam_iceberg::testing::print_caught_decoder_panics(true);
        }
    });
    if let Err(e) = decode_file("fuzz/seg.parquet", data) {
        assert_eq!(e.code(), ErrorCode::FooterInvalid, "{e}");
        assert!(e.message().contains("fuzz/seg.parquet"), "{e}");
    }
});
