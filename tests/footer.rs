//! The footer reader against the real S3 server: good files decode in at most two reads, and
//! everything else is refused with the object key and the reason: by type, permanent failures
//! stop (with their code), transient ones are retried, and no footer can panic the registrar.

mod common;

use bytes::Bytes;
use common::demo;
use common::{Harness, unique};
use object_store::ObjectStore;
use object_store::path::Path as ObjectPath;
use thadam_iceberg::ErrorCode;
use thadam_iceberg::testing::{FIRST_READ_BYTES, MAX_FOOTER_BYTES, read_footer};

async fn put(store: &dyn ObjectStore, key: &str, bytes: Bytes) {
    store
        .put(&ObjectPath::parse(key).expect("key"), bytes.into())
        .await
        .expect("upload");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parquet_footer_is_read_with_field_ids() {
    let h = Harness::new("footer_ok");
    let key = format!("{}/ok.parquet", unique("footer"));
    let parquet =
        demo::write_parquet(&[demo::telemetry_batch(0, 1234).expect("batch")]).expect("parquet");
    let size = parquet.len() as u64;
    put(h.store.as_ref(), &key, parquet).await;

    let footer = read_footer(h.store.as_ref(), &h.env.bucket, &key, size)
        .await
        .expect("footer");
    assert_eq!(footer.row_count(), 1234);
    assert_eq!(footer.object_size, size);
    // A small file is read in one ranged read of at most FIRST_READ_BYTES.
    assert!(footer.bytes_read <= FIRST_READ_BYTES.min(size));
    let ids: Vec<String> = footer
        .arrow_schema
        .fields()
        .iter()
        .map(|f| {
            f.metadata()
                .get("PARQUET:field_id")
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(ids, ["1", "2", "3", "4", "5", "6", "7"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_footer_takes_a_second_read() {
    let h = Harness::new("footer_big");
    let key = format!("{}/wide.parquet", unique("footer"));
    // Many row groups make a footer larger than the first read.
    let batches: Vec<_> = (0..400)
        .map(|n| demo::telemetry_batch(n, 2).expect("batch"))
        .collect();
    let schema = batches[0].schema();
    let mut buf = Vec::new();
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(2))
        .build();
    let mut writer =
        parquet::arrow::ArrowWriter::try_new(&mut buf, schema, Some(props)).expect("writer");
    for b in &batches {
        writer.write(b).expect("write");
    }
    writer.close().expect("close");
    let size = buf.len() as u64;
    put(h.store.as_ref(), &key, Bytes::from(buf)).await;

    let footer = read_footer(h.store.as_ref(), &h.env.bucket, &key, size)
        .await
        .expect("footer");
    assert_eq!(footer.row_count(), 800);
    assert!(footer.bytes_read > FIRST_READ_BYTES, "second read happened");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_parquet_object_is_rejected_with_its_key() {
    let h = Harness::new("footer_bad");
    let key = format!("{}/notes.txt", unique("footer"));
    let text: &[u8] = b"this is not a parquet file at all";
    put(h.store.as_ref(), &key, Bytes::from_static(text)).await;
    let err = read_footer(h.store.as_ref(), &h.env.bucket, &key, text.len() as u64)
        .await
        .expect_err("refused");
    assert_eq!(err.code(), ErrorCode::FooterInvalid);
    assert!(err.to_string().contains(&key), "{err}");
    assert!(err.to_string().contains("PAR1"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_file_is_rejected() {
    let h = Harness::new("footer_trunc");
    let key = format!("{}/cut.parquet", unique("footer"));
    let parquet =
        demo::write_parquet(&[demo::telemetry_batch(0, 100).expect("batch")]).expect("parquet");
    // The upload stopped half way: the tail magic is gone.
    let half = parquet.slice(..parquet.len() / 2);
    put(h.store.as_ref(), &key, half.clone()).await;
    let err = read_footer(h.store.as_ref(), &h.env.bucket, &key, half.len() as u64)
        .await
        .expect_err("refused");
    assert_eq!(err.code(), ErrorCode::FooterInvalid);
    assert!(err.to_string().contains(&key), "{err}");
    // The catalog recorded the full size, but the bucket has half: a size mismatch.
    let err = read_footer(h.store.as_ref(), &h.env.bucket, &key, parquet.len() as u64)
        .await
        .expect_err("refused");
    assert_eq!(err.code(), ErrorCode::FooterInvalid);
    assert!(err.to_string().contains("recorded"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_footer_length_is_refused_without_reading_it() {
    let h = Harness::new("footer_huge");
    let key = format!("{}/huge.parquet", unique("footer"));
    let mut bytes = b"PAR1".to_vec();
    bytes.extend(std::iter::repeat_n(0u8, 100));
    let claimed = u32::try_from(MAX_FOOTER_BYTES + 1).expect("fits");
    bytes.extend(claimed.to_le_bytes());
    bytes.extend(b"PAR1");
    let size = bytes.len() as u64;
    put(h.store.as_ref(), &key, Bytes::from(bytes)).await;
    let err = read_footer(h.store.as_ref(), &h.env.bucket, &key, size)
        .await
        .expect_err("refused");
    assert_eq!(err.code(), ErrorCode::FooterInvalid);
    assert!(err.to_string().contains("limit"), "{err}");

    // A length within the limit but past the object's start is a truncated file.
    let key2 = format!("{}/short.parquet", unique("footer"));
    let mut bytes = b"PAR1".to_vec();
    bytes.extend(std::iter::repeat_n(0u8, 10));
    bytes.extend(1000u32.to_le_bytes());
    bytes.extend(b"PAR1");
    let size = bytes.len() as u64;
    put(h.store.as_ref(), &key2, Bytes::from(bytes)).await;
    let err = read_footer(h.store.as_ref(), &h.env.bucket, &key2, size)
        .await
        .expect_err("refused");
    assert_eq!(err.code(), ErrorCode::FooterInvalid);
    assert!(err.to_string().contains("truncated"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_object_is_reported_with_its_key() {
    let h = Harness::new("footer_404");
    let key = format!("{}/never-uploaded.parquet", unique("footer"));
    let err = read_footer(h.store.as_ref(), &h.env.bucket, &key, 1000)
        .await
        .expect_err("missing");
    assert_eq!(err.code(), ErrorCode::ObjectMissing);
    assert!(err.to_string().contains(&key), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_object_whose_key_contains_416_is_missing() {
    // The old reader took any error whose text held "416" for "range not satisfiable".
    let h = Harness::new("footer_416");
    let key = format!("{}/seg-416-1.416s.parquet", unique("footer"));
    let err = read_footer(h.store.as_ref(), &h.env.bucket, &key, 1000)
        .await
        .expect_err("missing");
    assert_eq!(err.code(), ErrorCode::ObjectMissing, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_that_cannot_be_registered_are_refused_with_the_key() {
    let h = Harness::new("footer_keys");
    let long = format!("{}/{}.parquet", h.prefix, "k".repeat(2000));
    for key in [
        "",
        "/lead.parquet",
        "a//b.parquet",
        "a/./b.parquet",
        "a/../b.parquet",
        "dir/",
        "frag#1.parquet",
        "q?x=1.parquet",
        "ctl\u{1}.parquet",
        long.as_str(),
    ] {
        let err = read_footer(h.store.as_ref(), &h.env.bucket, key, 1000)
            .await
            .expect_err("refused");
        assert_eq!(err.code(), ErrorCode::FooterInvalid, "{key:?}: {err}");
        assert!(!err.is_transient());
        assert!(err.to_string().contains(&format!("{key:?}")), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_size_near_u64_max_is_permanent() {
    let h = Harness::new("footer_size");
    let key = format!("{}/ok.parquet", unique("footer"));
    let parquet =
        demo::write_parquet(&[demo::telemetry_batch(0, 10).expect("batch")]).expect("parquet");
    put(h.store.as_ref(), &key, parquet).await;
    for size in [u64::MAX, u64::MAX - 1, 1 << 62] {
        let err = read_footer(h.store.as_ref(), &h.env.bucket, &key, size)
            .await
            .expect_err("refused");
        assert_eq!(err.code(), ErrorCode::FooterInvalid, "size {size}: {err}");
        assert!(err.to_string().contains(&key), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_store_credentials_are_auth_failed_naming_the_bucket() {
    let h = Harness::new("footer_403");
    let key = format!("{}/ok.parquet", unique("footer"));
    let parquet =
        demo::write_parquet(&[demo::telemetry_batch(0, 10).expect("batch")]).expect("parquet");
    let size = parquet.len() as u64;
    put(h.store.as_ref(), &key, parquet).await;
    let mut wrong = h.config.store.clone();
    wrong.secret_access_key = Some(thadam_iceberg::config::Secret::new("not-the-secret"));
    let store = thadam_iceberg::testing::object_store(&wrong, &h.env.bucket).expect("store");
    let err = read_footer(store.as_ref(), &h.env.bucket, &key, size)
        .await
        .expect_err("refused");
    assert_eq!(err.code(), ErrorCode::AuthFailed, "{err}");
    let text = err.to_string();
    assert!(text.contains(&h.env.bucket), "{text}");
    assert!(text.contains("check the store credentials"), "{text}");
    assert!(!text.contains("not-the-secret"), "{text}");
}

/// A stand-in S3 server that answers every request with one status and S3 XML error body.
async fn fake_s3(status: u16, code: &'static str) -> (String, tokio::task::JoinHandle<()>) {
    use http_body_util::Full;
    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let uri = format!("http://{}", listener.local_addr().expect("addr"));
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = service_fn(move |_req| async move {
                    let body = format!(
                        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code>\
                         <Message>fake 1.416s</Message></Error>"
                    );
                    let response = hyper::Response::builder()
                        .status(status)
                        .header("content-type", "application/xml")
                        .body(Full::new(Bytes::from(body)))
                        .expect("response");
                    Ok::<_, std::convert::Infallible>(response)
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (uri, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_answers_are_classified_by_status() {
    let h = Harness::new("footer_status");
    let key = format!("{}/seg.parquet", unique("footer"));
    for (status, code, expected) in [
        (400, "KeyTooLongError", ErrorCode::FooterInvalid),
        (400, "InvalidArgument", ErrorCode::FooterInvalid),
        (416, "InvalidRange", ErrorCode::FooterInvalid),
        (405, "MethodNotAllowed", ErrorCode::FooterInvalid),
        (403, "AccessDenied", ErrorCode::AuthFailed),
        (401, "Unauthorized", ErrorCode::AuthFailed),
        (404, "NoSuchKey", ErrorCode::ObjectMissing),
        (501, "NotImplemented", ErrorCode::Unavailable),
    ] {
        let (uri, task) = fake_s3(status, code).await;
        let mut config = h.config.store.clone();
        config.endpoint = Some(uri.parse().expect("url"));
        // Transient answers would be retried for minutes by object_store itself: not here.
        let retry = object_store::RetryConfig {
            max_retries: 0,
            ..Default::default()
        };
        let store = thadam_iceberg::testing::object_store_with(&config, &h.env.bucket, Some(retry))
            .expect("store");
        let err = read_footer(store.as_ref(), &h.env.bucket, &key, 5000)
            .await
            .expect_err("refused");
        assert_eq!(err.code(), expected, "{status} {code}: {err}");
        assert!(err.to_string().contains(&key), "{status}: {err}");
        if expected == ErrorCode::FooterInvalid && status != 416 {
            assert!(
                err.to_string().contains(code),
                "the S3 code is named: {err}"
            );
        }
        task.abort();
    }
}

/// Real segments of a few shapes (one and many row groups, nulls, the embedded ARROW:schema the
/// Arrow writer adds), to mutate.
fn real_segments() -> Vec<Vec<u8>> {
    let mut files = Vec::new();
    for rows in [1, 100, 1000] {
        let batch = demo::telemetry_batch(3, rows).expect("batch");
        files.push(demo::write_parquet(&[batch]).expect("parquet").to_vec());
    }
    let batches: Vec<_> = (0..20)
        .map(|n| demo::telemetry_batch(n, 5).expect("batch"))
        .collect();
    let mut buf = Vec::new();
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(5))
        .build();
    let mut writer =
        parquet::arrow::ArrowWriter::try_new(&mut buf, batches[0].schema(), Some(props))
            .expect("writer");
    for b in &batches {
        writer.write(b).expect("write");
    }
    writer.close().expect("close");
    files.push(buf);
    files
}

/// Where a file's footer region starts (its thrift metadata; the region runs to the end).
fn footer_start(file: &[u8]) -> usize {
    let n = file.len();
    let len = u32::from_le_bytes(file[n - 8..n - 4].try_into().expect("4 bytes")) as usize;
    n - 8 - len
}

/// The byte range of the base64 `ARROW:schema` value in a footer, if any.
fn arrow_schema_value(file: &[u8]) -> Option<std::ops::Range<usize>> {
    let tag = b"ARROW:schema";
    let at = file.windows(tag.len()).rposition(|w| w == tag)? + tag.len();
    // The value follows as a thrift binary: a field header, a varint length, the bytes; take
    // the longest run of base64 characters after the key.
    let is_b64 = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=');
    let start = at + file[at..].iter().position(is_b64)?;
    let len = file[start..].iter().take_while(|b| is_b64(b)).count();
    (len > 16).then_some(start..start + len)
}

thread_local! {
    /// Set while the fuzz test decodes: panics the decoder raises (and the reader catches) are
    /// counted instead of printed.
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Mutated footers of real segments never panic the reader: every outcome is a decoded footer or
/// `sink.iceberg_footer_invalid` naming the key. Bounded in count and time; prints its seed;
/// `THADAM_FUZZ_SEED=<seed>` replays a run, `THADAM_FUZZ_ITERATIONS` changes the count.
#[test]
fn mutated_footers_never_panic_the_reader() {
    use rand::{Rng, SeedableRng};
    let seed: u64 = std::env::var("THADAM_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    let iterations: usize = std::env::var("THADAM_FUZZ_ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12_000);
    let time_limit = std::time::Duration::from_secs(120);
    println!("footer fuzz: seed {seed} (replay with THADAM_FUZZ_SEED={seed}), {iterations} cases");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let files = real_segments();
    for file in &files {
        thadam_iceberg::testing::decode_file("real.parquet", file).expect("real segments decode");
    }

    let previous = std::panic::take_hook();
    let caught = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&caught);
    std::panic::set_hook(Box::new(move |info| {
        if QUIET.with(std::cell::Cell::get) {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        } else {
            previous(info);
        }
    }));

    let started = std::time::Instant::now();
    let (mut ok, mut invalid, mut done) = (0usize, 0usize, 0usize);
    let mut first_panic: Option<String> = None;
    let key = "fuzz/seg.parquet";
    while done < iterations && started.elapsed() < time_limit {
        let mut file = files[rng.random_range(0..files.len())].clone();
        let start = footer_start(&file);
        let n = file.len();
        let what = match rng.random_range(0..5) {
            0 => {
                for _ in 0..rng.random_range(1..=4) {
                    let i = rng.random_range(start..n);
                    file[i] ^= 1 << rng.random_range(0..8);
                }
                "bit flips"
            }
            1 => {
                for _ in 0..rng.random_range(1..=8) {
                    let i = rng.random_range(start..n);
                    file[i] = rng.random();
                }
                "byte garble"
            }
            2 => {
                file.truncate(rng.random_range(start..n));
                "truncation"
            }
            3 => {
                // Cut bytes out of the footer but keep a valid trailer: a short footer whose
                // length field matches.
                let end = n - 8;
                let a = rng.random_range(start..end);
                let b = rng.random_range(a..=end.min(a + 64));
                let mut cut = file[..a].to_vec();
                cut.extend_from_slice(&file[b..end]);
                let len = u32::try_from(cut.len() - start).expect("small");
                cut.extend_from_slice(&len.to_le_bytes());
                cut.extend_from_slice(b"PAR1");
                file = cut;
                "footer cut"
            }
            _ => {
                // The embedded Arrow schema: a base64 character swapped for another keeps the
                // thrift valid and garbles the IPC schema the Arrow decoder reads.
                const B64: &[u8] =
                    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
                if let Some(range) = arrow_schema_value(&file) {
                    for _ in 0..rng.random_range(1..=3) {
                        let i = rng.random_range(range.clone());
                        file[i] = B64[rng.random_range(0..B64.len())];
                    }
                }
                "arrow schema garble"
            }
        };
        QUIET.with(|q| q.set(true));
        let outcome = std::panic::catch_unwind(|| thadam_iceberg::testing::decode_file(key, &file));
        QUIET.with(|q| q.set(false));
        match outcome {
            Ok(Ok(_)) => ok += 1,
            Ok(Err(e)) => {
                assert_eq!(
                    e.code(),
                    ErrorCode::FooterInvalid,
                    "seed {seed}, case {done} ({what}): {e}"
                );
                assert!(e.to_string().contains(key), "seed {seed}, case {done}: {e}");
                if first_panic.is_none() && e.message().contains("the decoder failed") {
                    first_panic = Some(e.to_string());
                }
                invalid += 1;
            }
            Err(_) => panic!(
                "seed {seed}, case {done} ({what}): the footer reader panicked; replay with \
                 THADAM_FUZZ_SEED={seed}"
            ),
        }
        done += 1;
    }
    let _ = std::panic::take_hook();
    println!(
        "footer fuzz: {done} cases in {:.1}s: {ok} decoded, {invalid} footer_invalid ({} of them \
         decoder panics caught by the reader)",
        started.elapsed().as_secs_f64(),
        caught.load(std::sync::atomic::Ordering::Relaxed)
    );
    if let Some(example) = first_panic {
        println!("footer fuzz: e.g. {example}");
    }
    assert!(done >= 1000, "too few cases in the time limit: {done}");
}
