//! iceberg's FileIO over object_store (`io::file_io`) against the real S3 server, which checks
//! SigV4: what the registrar's metadata, manifest list and manifest I/O relies on (whole and
//! ranged reads, one-shot and streamed writes, multipart past 10 MiB, exists, deletes), that it
//! signs with the keys vended for a table rather than the store's, and that a refusal reaches
//! the caller classified by type with no key in sight.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use iceberg::io::{FileIO, FileWrite};
use thadam_iceberg::ErrorCode;
use thadam_iceberg::config::{Secret, StoreConfig, StoreCredentials};
use thadam_iceberg::testing::S3Clients;
use thadam_iceberg::testing::{S3Access, S3Credentials, S3Keys, classify_iceberg_io};
use thadam_iceberg::testing::{file_io_props, table_file_io};

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: these tests need the S3 server. Start it with `scripts/servers \
             start DIR && source DIR/env` (or run `scripts/test`)"
        )
    })
}

const WRONG_SECRET: &str = "wrong-secret-fileio-0123456789";

fn store(secret: &str) -> StoreConfig {
    StoreConfig {
        endpoint: Some(var("THADAM_TEST_S3_ENDPOINT").parse().expect("endpoint")),
        region: var("THADAM_TEST_S3_REGION"),
        region_explicit: true,
        allow_http: true,
        access_key_id: Some(Secret::new(var("THADAM_TEST_S3_ACCESS_KEY"))),
        secret_access_key: Some(Secret::new(secret)),
        credentials: StoreCredentials::Static,
    }
}

fn right_store() -> StoreConfig {
    store(&var("THADAM_TEST_S3_SECRET_KEY"))
}

fn file_io(store: &StoreConfig, vended: Option<&S3Access>) -> FileIO {
    // A client cache of its own: each FileIO here builds its client as its keys say.
    table_file_io(
        HashMap::new(),
        &file_io_props(store),
        vended,
        &Arc::new(S3Clients::default()),
    )
}

/// What a catalog vends with a table: `credentials`, and nothing else (the store's endpoint and
/// region stay).
fn access(credentials: S3Credentials) -> S3Access {
    S3Access {
        credentials,
        endpoint: None,
        region: None,
        path_style: None,
    }
}

fn vended(secret: &str) -> S3Access {
    access(S3Credentials::Keys(S3Keys {
        access_key_id: Secret::new(var("THADAM_TEST_S3_ACCESS_KEY")),
        secret_access_key: Secret::new(secret),
        session_token: None,
    }))
}

/// Writes `bytes` to `path` in one request.
async fn write(io: &FileIO, path: &str, bytes: &'static [u8]) -> iceberg::Result<()> {
    io.new_output(path)
        .expect("output")
        .write(Bytes::from_static(bytes))
        .await
}

/// A streamed writer to `path` (past object_store's 10 MiB buffer, a multipart upload).
async fn writer(io: &FileIO, path: &str) -> Box<dyn FileWrite> {
    io.new_output(path)
        .expect("output")
        .writer()
        .await
        .expect("writer")
}

/// Reads `path` whole.
async fn read(io: &FileIO, path: &str) -> iceberg::Result<Bytes> {
    io.new_input(path).expect("input").read().await
}

/// The size of the object at `path`.
async fn size(io: &FileIO, path: &str) -> u64 {
    io.new_input(path)
        .expect("input")
        .metadata()
        .await
        .expect("head")
        .size
}

/// Asserts that the FileIO error `err` is classified as `code`, by type.
fn assert_classified(err: &iceberg::Error, code: ErrorCode) {
    assert_eq!(classify_iceberg_io(err), Some(code), "{err:?}");
}

/// A fresh prefix under the test bucket.
fn prefix(test: &str) -> String {
    format!(
        "s3://{}/fileio/{test}-{}",
        var("THADAM_TEST_BUCKET"),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

#[tokio::test]
async fn metadata_and_manifest_io_reads_writes_and_deletes_through_object_store() {
    let io = file_io(&right_store(), None);
    let base = prefix("rw");
    let small = format!("{base}/metadata/v1.metadata.json");
    write(&io, &small, b"{\"format-version\":2}")
        .await
        .expect("one-shot write");
    let input = io.new_input(&small).expect("input");
    assert!(input.exists().await.expect("exists"));
    assert_eq!(input.metadata().await.expect("head").size, 20);
    assert_eq!(
        &input.read().await.expect("read")[..],
        b"{\"format-version\":2}"
    );
    let reader = input.reader().await.expect("reader");
    assert_eq!(
        &reader.read(2..16).await.expect("ranged")[..],
        b"format-version"
    );
    assert!(reader.read(5..5).await.expect("empty range").is_empty());
    // Java's spellings of the scheme name the same object.
    let s3a = small.replacen("s3://", "s3a://", 1);
    assert!(io.exists(&s3a).await.expect("s3a exists"));
    assert!(
        !io.exists(format!("{base}/absent.avro"))
            .await
            .expect("absent")
    );

    // Streamed, past object_store's 10 MiB buffer: a multipart upload.
    let big = format!("{base}/metadata/snap-1.avro");
    let chunk = Bytes::from(vec![7u8; 6 * 1024 * 1024]);
    let mut writer = writer(&io, &big).await;
    writer.write(chunk.clone()).await.expect("first part");
    writer.write(chunk.clone()).await.expect("second part");
    writer
        .write(Bytes::from_static(b"end"))
        .await
        .expect("tail");
    writer.close().await.expect("complete the upload");
    assert_eq!(size(&io, &big).await, 12 * 1024 * 1024 + 3);
    let reader = io
        .new_input(&big)
        .expect("input")
        .reader()
        .await
        .expect("reader");
    let end = 12 * 1024 * 1024 + 3;
    assert_eq!(
        &reader.read(end - 4..end).await.expect("tail")[..],
        b"\x07end"
    );

    // A sibling whose name extends the prefix's is not under it.
    let sibling = format!("{base}-sibling/keep.avro");
    write(&io, &sibling, b"keep").await.expect("write sibling");
    io.delete_prefix(&base).await.expect("delete prefix");
    assert!(!io.exists(&small).await.expect("exists"));
    assert!(!io.exists(&big).await.expect("exists"));
    assert!(io.exists(&sibling).await.expect("exists"));
    io.delete(&sibling).await.expect("delete");
    io.delete(&sibling)
        .await
        .expect("deleting what is gone is done");
    assert!(!io.exists(&sibling).await.expect("exists"));
}

#[tokio::test]
async fn a_refused_write_is_auth_failed_by_type_and_shows_no_key() {
    let io = file_io(&store(WRONG_SECRET), None);
    let path = format!("{}/metadata/m.avro", prefix("refused"));
    let err = write(&io, &path, b"x")
        .await
        .expect_err("S3 refuses the signature");
    assert_classified(&err, ErrorCode::AuthFailed);
    let mut writer = writer(&io, &path).await;
    writer
        .write(Bytes::from_static(b"x"))
        .await
        .expect("buffered");
    let streamed = writer.close().await.expect_err("refused on close");
    assert_classified(&streamed, ErrorCode::AuthFailed);
    let shown = format!("{err} {err:?} {streamed:?} {io:?}");
    assert!(!shown.contains(WRONG_SECRET), "{shown}");
    assert!(
        !shown.contains(&var("THADAM_TEST_S3_ACCESS_KEY")),
        "{shown}"
    );

    // With the right keys, a missing object is object_missing, not an outage.
    let io = file_io(&right_store(), None);
    let err = read(&io, &format!("{}/absent.avro", prefix("missing")))
        .await
        .expect_err("absent");
    assert_classified(&err, ErrorCode::ObjectMissing);
}

#[tokio::test]
async fn the_file_io_signs_with_the_keys_vended_for_the_table() {
    let right = var("THADAM_TEST_S3_SECRET_KEY");
    let path = format!("{}/metadata/m.avro", prefix("vended"));
    // The store's keys are wrong: the write succeeds only if the vended keys sign it.
    let io = file_io(&store(WRONG_SECRET), Some(&vended(&right)));
    write(&io, &path, b"vended")
        .await
        .expect("signed with the vended keys");
    // And the vended keys replace good store keys: wrong vended keys are refused.
    let io = file_io(&right_store(), Some(&vended(WRONG_SECRET)));
    let err = read(&io, &path)
        .await
        .expect_err("signed with the wrong vended keys");
    assert_classified(&err, ErrorCode::AuthFailed);
    file_io(&right_store(), None)
        .delete(&path)
        .await
        .expect("clean up");
}

/// A remote signer in-process: signs each request it is asked about with the S3 server's keys
/// (object_store's own SigV4 code, unsigned payload, as a catalog's signer does), counting the
/// methods, or refuses everything.
#[derive(Debug, Default)]
struct KeySigner {
    refuse: bool,
    asked: std::sync::Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl thadam_iceberg::testing::RequestSigner for KeySigner {
    async fn sign(
        &self,
        request: &thadam_iceberg::testing::SignRequest,
    ) -> thadam_iceberg::Result<thadam_iceberg::testing::Signed> {
        self.asked
            .lock()
            .expect("asked")
            .push(format!("{} {}", request.method, request.uri));
        if self.refuse {
            return Err(thadam_iceberg::Error::auth_failed(
                "the test signer refuses to sign",
            ));
        }
        let mut http = http::Request::builder()
            .method(request.method.as_str())
            .uri(request.uri.as_str());
        for (name, values) in &request.headers {
            for value in values {
                http = http.header(name.as_str(), value.as_str());
            }
        }
        let mut http = http
            .body(object_store::client::HttpRequestBody::empty())
            .expect("request");
        let credential = object_store::aws::AwsCredential {
            key_id: var("THADAM_TEST_S3_ACCESS_KEY"),
            secret_key: var("THADAM_TEST_S3_SECRET_KEY"),
            token: None,
        };
        object_store::aws::AwsAuthorizer::new(&credential, "s3", &request.region)
            .with_sign_payload(false)
            .authorize(&mut http, None);
        let mut headers: Vec<(String, Vec<String>)> = Vec::new();
        for (name, value) in http.headers() {
            headers.push((
                name.as_str().to_string(),
                vec![value.to_str().expect("text").to_string()],
            ));
        }
        Ok(thadam_iceberg::testing::Signed {
            uri: request.uri.clone(),
            headers,
        })
    }
}

fn keyless_store() -> StoreConfig {
    StoreConfig {
        access_key_id: None,
        secret_access_key: None,
        ..right_store()
    }
}

fn signing(signer: &Arc<KeySigner>) -> S3Access {
    access(S3Credentials::Signer(
        thadam_iceberg::testing::SharedSigner(
            Arc::clone(signer) as Arc<dyn thadam_iceberg::testing::RequestSigner>
        ),
    ))
}

#[tokio::test]
async fn a_remote_signer_signs_every_request_and_no_store_key_is_needed() {
    let signer = Arc::new(KeySigner::default());
    let io = file_io(&keyless_store(), Some(&signing(&signer)));
    let base = prefix("signed");
    let small = format!("{base}/metadata/v1.metadata.json");
    write(&io, &small, b"{\"format-version\":2}")
        .await
        .expect("a signed PUT");
    let input = io.new_input(&small).expect("input");
    assert_eq!(input.metadata().await.expect("a signed HEAD").size, 20);
    assert_eq!(
        &input
            .reader()
            .await
            .expect("reader")
            .read(2..16)
            .await
            .expect("a signed range")[..],
        b"format-version"
    );
    // A multipart upload: initiate, parts, complete, each signed.
    let big = format!("{base}/metadata/snap-1.avro");
    let mut writer = writer(&io, &big).await;
    let chunk = Bytes::from(vec![7u8; 6 * 1024 * 1024]);
    writer.write(chunk.clone()).await.expect("part");
    writer.write(chunk).await.expect("part");
    writer.close().await.expect("a signed multipart upload");
    assert_eq!(size(&io, &big).await, 12 * 1024 * 1024);
    io.delete(&small).await.expect("a signed DELETE");
    io.delete(&big).await.expect("a signed DELETE");
    let asked = signer.asked.lock().expect("asked").clone();
    for method in ["PUT ", "HEAD ", "GET ", "POST ", "DELETE "] {
        assert!(
            asked.iter().any(|a| a.starts_with(method)),
            "no {method}in {asked:?}"
        );
    }
    assert!(
        asked.iter().any(|a| a.contains("?uploads")),
        "the multipart upload was signed: {asked:?}"
    );

    // A signer that refuses: auth.failed, by type, through the FileIO.
    let refusing = Arc::new(KeySigner {
        refuse: true,
        ..Default::default()
    });
    let io = file_io(&keyless_store(), Some(&signing(&refusing)));
    let err = write(&io, &format!("{base}/metadata/refused.avro"), b"x")
        .await
        .expect_err("refused");
    assert_classified(&err, ErrorCode::AuthFailed);
    assert_eq!(
        refusing.asked.lock().expect("asked").len(),
        1,
        "asked once, not retried"
    );
}

#[tokio::test]
async fn a_store_without_keys_and_nothing_from_the_catalog_fails_at_once_naming_the_keys() {
    let io = file_io(&keyless_store(), None);
    let started = std::time::Instant::now();
    let err = read(
        &io,
        &format!("{}/metadata/v1.metadata.json", prefix("nokeys")),
    )
    .await
    .expect_err("no credentials");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "fast"
    );
    assert_classified(&err, ErrorCode::AuthFailed);
    let text = format!("{err:?}");
    for named in [
        "store.access_key_id",
        "store.secret_access_key",
        "store.credentials: instance_metadata",
        "remote-signing",
    ] {
        assert!(text.contains(named), "{named} not in {text}");
    }
}
