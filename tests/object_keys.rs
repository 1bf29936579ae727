//! Object keys, byte for byte: a segment whose key holds characters object_store would encode
//! (spaces, `~`, `%`, `=`, non-ASCII) is read and registered as the object the shipper uploaded.
//! The uploads come from an independent S3 client (boto3), the registrar registers them, and
//! pyiceberg reads every file back at its registered path. Also: `--check` with a wrong S3 secret
//! says `auth.failed`, as the runner does.

mod common;

use std::process::Command;

use common::demo;
use common::{Harness, py};
use serde_json::Value;
use thadam_iceberg::protocol::segment_log::LogEntry;

/// Keys S3 allows that object_store's `Path::from` would have percent-encoded (or, for `=`,
/// the Hive-style partition directories other writers produce).
const ODD_NAMES: &[&str] = &[
    "a b.parquet",
    "seg~1.parquet",
    "50%.parquet",
    "100%25.parquet",
    "ts=2024-01-01/part 0.parquet",
    "grüße ü.parquet",
    "[x]{y}^|.parquet",
];

/// Runs python (the test venv's) with `script` and `args`; returns stdout.
fn python(script: &str, args: &[&str]) -> String {
    common::py::run_bare(script, args)
}

/// boto3 client for the test S3 server.
const BOTO3: &str = r#"
import json, os, sys
import boto3
from botocore.config import Config
s3 = boto3.client(
    "s3",
    endpoint_url=os.environ["THADAM_TEST_S3_ENDPOINT"],
    aws_access_key_id=os.environ["THADAM_TEST_S3_ACCESS_KEY"],
    aws_secret_access_key=os.environ["THADAM_TEST_S3_SECRET_KEY"],
    region_name=os.environ.get("THADAM_TEST_S3_REGION", "us-east-1"),
    config=Config(s3={"addressing_style": "path"}, request_checksum_calculation="when_required"),
)
"#;

/// Uploads each (file, key) pair with boto3, which sends the key as S3 defines it.
fn boto3_upload(bucket: &str, pairs: &[(std::path::PathBuf, String)]) {
    let mut args = vec![bucket.to_string()];
    for (file, key) in pairs {
        args.push(file.display().to_string());
        args.push(key.clone());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    python(
        &format!(
            "{BOTO3}
bucket = sys.argv[1]
rest = sys.argv[2:]
for i in range(0, len(rest), 2):
    with open(rest[i], 'rb') as f:
        s3.put_object(Bucket=bucket, Key=rest[i + 1], Body=f.read())
"
        ),
        &args,
    );
}

/// The bodies boto3 reads at each key (by exact key: a listing is no proof, as boto3 asks for
/// url-encoded listings and s3s-fs answers them unencoded, so boto3 decodes `%25` once too often).
fn boto3_bodies(bucket: &str, keys: &[String]) -> Vec<Option<Vec<u8>>> {
    let mut args = vec![bucket];
    args.extend(keys.iter().map(String::as_str));
    let out = python(
        &format!(
            "{BOTO3}
from botocore.exceptions import ClientError
out = []
for key in sys.argv[2:]:
    try:
        out.append(list(s3.get_object(Bucket=sys.argv[1], Key=key)['Body'].read()))
    except ClientError as e:
        out.append(None)
print(json.dumps(out))
"
        ),
        &args,
    );
    serde_json::from_str(out.trim()).expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_keys_uploaded_by_boto3_are_registered_and_read_back_by_pyiceberg() {
    let mut h = Harness::new("keys_odd");
    let mut pairs = Vec::new();
    let mut expected = Vec::new();
    for (n, name) in ODD_NAMES.iter().enumerate() {
        let key = format!("{}/odd/{name}", h.prefix);
        // A different row count per file, so each file's count is checked, not just the sum.
        let rows = 10 + n;
        let batch = demo::telemetry_batch(n as u64, rows).expect("batch");
        let parquet = demo::write_parquet(std::slice::from_ref(&batch)).expect("parquet");
        let file = h.dir.path().join(format!("seg{n}.parquet"));
        std::fs::write(&file, &parquet).expect("write");
        let segment_id = format!("odd-{n}");
        h.log
            .append(LogEntry::Finalized {
                dataset: "telemetry".into(),
                segment_id: segment_id.clone(),
                path: format!("{segment_id}.parquet"),
                row_count: rows as u64,
                file_size: parquet.len() as u64,
            })
            .expect("finalized");
        pairs.push((file, key.clone()));
        expected.push((segment_id, key, parquet.len() as u64, rows as u64));
    }
    boto3_upload(&h.env.bucket, &pairs);
    for (segment_id, key, size, rows) in &expected {
        h.log
            .append_uploaded("telemetry", segment_id, key, *size, *rows)
            .expect("uploaded");
    }

    let status = h.run_until_handled(expected.len() as u64).await;
    assert_eq!(status.handled(), expected.len() as u64);

    // pyiceberg: every data file at s3://bucket/<raw key>, and each one opens at that path with
    // the row count it was written with; a full scan reads them all.
    let out = py::run(
        r#"
import pyarrow.parquet as pq
tbl = catalog.load_table(sys.argv[1])
files = {}
for task in tbl.scan().plan_files():
    path = task.file.file_path
    with tbl.io.new_input(path).open() as f:
        files[path] = [task.file.record_count, pq.ParquetFile(f).metadata.num_rows]
print(json.dumps({"files": files, "rows": tbl.scan().to_arrow().num_rows}))
"#,
        &[&format!("{}.telemetry", h.namespace.join("."))],
    );
    let got: Value = serde_json::from_str(out.trim()).expect("json");
    let files = got["files"].as_object().expect("files");
    assert_eq!(
        files.len(),
        expected.len(),
        "one data file per segment: {got}"
    );
    for (_, key, _, rows) in &expected {
        let path = format!("s3://{}/{key}", h.env.bucket);
        let counts = files
            .get(&path)
            .unwrap_or_else(|| panic!("{path} is not a data file of the table: {got}"));
        assert_eq!(counts[0].as_u64(), Some(*rows), "record_count of {path}");
        assert_eq!(
            counts[1].as_u64(),
            Some(*rows),
            "rows in the object at {path}"
        );
    }
    let total: u64 = expected.iter().map(|e| e.3).sum();
    assert_eq!(got["rows"].as_u64(), Some(total));
}

/// The object_store path the registrar reads is the key a third-party client sees: an object
/// uploaded through `store::object_path` is listed by boto3 under the same bytes, and read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_store_paths_are_the_raw_keys_on_the_wire() {
    let h = Harness::new("keys_wire");
    let keys: Vec<String> = ODD_NAMES
        .iter()
        .map(|name| format!("{}/wire/{name}", h.prefix))
        .collect();
    for key in &keys {
        let path = thadam_iceberg::testing::object_path(key).expect("representable");
        h.store
            .put(&path, bytes::Bytes::from(key.clone().into_bytes()).into())
            .await
            .expect("put");
        let back = h
            .store
            .get(&path)
            .await
            .expect("get")
            .bytes()
            .await
            .expect("body");
        assert_eq!(back.as_ref(), key.as_bytes());
    }
    let bodies = boto3_bodies(&h.env.bucket, &keys);
    for (key, body) in keys.iter().zip(bodies) {
        assert_eq!(
            body.as_deref(),
            Some(key.as_bytes()),
            "boto3 finds the object uploaded through store::object_path at the raw key {key:?}"
        );
    }
}

/// Runs the standalone runner (examples/registrar) with `args`; returns (exit code, stdout,
/// stderr).
fn runner(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(common::example_binary("registrar"))
        .args(args)
        .output()
        .expect("run the runner");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A wrong S3 secret is `auth.failed` for `--check` (the bucket check fails, exit 3) and for
/// the runner (exit 3), and the secret appears in neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_s3_secret_is_auth_failed_for_check_and_runner_alike() {
    let mut h = Harness::new("keys_secret");
    h.ship_telemetry(0, 10).await;
    let wrong = "wrong-s3-secret-0123456789";
    assert!(h.yaml.contains("${env:THADAM_TEST_S3_SECRET_KEY}"));
    let yaml = h.yaml.replace("${env:THADAM_TEST_S3_SECRET_KEY}", wrong);
    let path = h.dir.path().join("wrong-secret.yaml");
    std::fs::write(&path, yaml).expect("write config");
    let config = path.to_str().expect("utf-8");

    let (code, stdout, stderr) = tokio::task::spawn_blocking({
        let config = config.to_string();
        move || runner(&["--config", &config, "--check"])
    })
    .await
    .expect("check ran");
    let failed: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert_eq!(failed.len(), 1, "one failing check:\n{stdout}\n{stderr}");
    assert!(
        failed[0].starts_with("FAIL [iceberg] bucket readable: auth.failed"),
        "{stdout}"
    );
    assert!(
        failed[0].contains("check the store credentials"),
        "{stdout}"
    );
    assert_eq!(
        code, 3,
        "--check exits as auth.failed does:\n{stdout}\n{stderr}"
    );

    let (code, stdout, stderr) = tokio::task::spawn_blocking({
        let config = config.to_string();
        move || runner(&["--config", &config, "--until-caught-up"])
    })
    .await
    .expect("runner ran");
    assert_eq!(
        code, 3,
        "the runner stops on auth.failed:\n{stdout}\n{stderr}"
    );
    assert!(stderr.contains("auth.failed"), "{stderr}");
    for text in [&stdout, &stderr] {
        assert!(!text.contains(wrong), "no secret in the output");
    }
}
