//! Running pyiceberg (the venv's python) against the same catalog and S3 server: an independent
//! reader (and writer) for what the registrar produced.

use std::process::Command;

/// Python prelude: `catalog` connected to the test servers.
pub const PRELUDE: &str = r#"
import json, os, sys
from pyiceberg.catalog import load_catalog
catalog = load_catalog("rest", **{
    "uri": os.environ["THADAM_TEST_CATALOG_URI"],
    "s3.endpoint": os.environ["THADAM_TEST_S3_ENDPOINT"],
    "s3.access-key-id": os.environ["THADAM_TEST_S3_ACCESS_KEY"],
    "s3.secret-access-key": os.environ["THADAM_TEST_S3_SECRET_KEY"],
    "s3.region": os.environ.get("THADAM_TEST_S3_REGION", "us-east-1"),
    "s3.path-style-access": "true",
})
"#;

/// Runs `script` (after [`PRELUDE`]) with `args` as `sys.argv[1:]`; returns stdout. Panics with
/// stderr when python fails.
pub fn run(script: &str, args: &[&str]) -> String {
    run_bare(&format!("{PRELUDE}\n{script}"), args)
}

/// Runs `program` as it is (no prelude) in the test venv's python; returns stdout. Panics with
/// stderr when python fails.
pub fn run_bare(program: &str, args: &[&str]) -> String {
    let python = std::env::var("THADAM_TEST_PYTHON").unwrap_or_else(|_| {
        panic!("THADAM_TEST_PYTHON is not set: run the tests with scripts/test")
    });
    let output = Command::new(python)
        .arg("-c")
        .arg(program)
        .args(args)
        .output()
        .expect("python runs");
    assert!(
        output.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}
